//! Request coalescing: the fetches in flight, by key. The first miss for
//! a key leads (its fill holds a [`Lead`]); later misses for the same
//! key wait for it ([`Waiter`]) and are answered from it as it arrives:
//! its head once it was judged storable, then its body from one shared,
//! append-only buffer the fill writes into (the only copy of it: the
//! object stored at the end is made from it), each waiter woken as it
//! grows and copying what it has not sent yet into its own write buffer.
//! A fetch that ends without a storable head (not storable, failed,
//! cancelled) sends its waiters upstream on their own; one cut after its
//! head (past `max_object`, its upstream gone) ends theirs cut. Shared by
//! every worker: one short lock per join and per end, and the buffer's
//! own (a `watch` channel's) per piece of body.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;

use super::key::Key;

/// The fetches in flight of one store.
#[derive(Debug, Default)]
pub struct Flights {
    map: Mutex<HashMap<u64, Arc<Flight>>>,
}

#[derive(Debug)]
struct Flight {
    key: Key,
    progress: watch::Sender<Progress>,
}

/// How far a fetch got, as its waiters see it.
#[derive(Debug, Default)]
struct Progress {
    /// The answer's head, once judged storable.
    head: Option<Arc<Head>>,
    /// The body so far, while it comes.
    body: Vec<u8>,
    /// The whole body, once it came whole (then `body` is empty).
    whole: Option<Bytes>,
    /// The fetch ended: stored, not storable, cut, failed or cancelled.
    ended: bool,
}

/// A field `Vary` names and a request's value of it.
pub type Varying = (Box<[u8]>, Box<[u8]>);

/// The head of an answer being fetched, as a waiter answers with it.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    /// Its fields as HTTP/1.1 lines, as an object stores them.
    pub fields: Box<[u8]>,
    /// Its body's length, when its head said it.
    pub length: Option<u64>,
    pub etag: Option<Box<[u8]>>,
    pub last_modified: Option<Box<[u8]>>,
    /// Its age when it arrived, and when that was.
    pub initial_age: Duration,
    pub arrived: Instant,
    /// The fields its `Vary` names (lower case), with the leading
    /// request's values (as the store keeps them).
    pub vary: Box<[Varying]>,
}

impl Head {
    /// Whether a request whose fields `header` gives matches its `Vary`.
    pub fn varies_as<'h>(&self, header: &dyn Fn(&[u8]) -> Option<&'h [u8]>) -> bool {
        self.vary
            .iter()
            .all(|(name, value)| header(name).unwrap_or_default().trim_ascii() == &value[..])
    }
}

/// What a miss does about a fetch in flight for its key.
pub enum Join {
    /// None was: this request's fetch leads.
    Lead(Lead),
    /// One is: wait for it.
    Wait(Waiter),
    /// Another key with the same hash is in flight: no coalescing.
    Apart,
}

/// The leading fetch of a key; its drop ends the flight and wakes the
/// waiters.
#[derive(Debug)]
pub struct Lead {
    flights: Arc<Flights>,
    hash: u64,
    flight: Arc<Flight>,
}

/// A request waiting for another's fetch of its key.
#[derive(Debug)]
pub struct Waiter {
    rx: watch::Receiver<Progress>,
}

/// What a waiter reads of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// This many bytes more.
    Data(usize),
    /// None yet: wait ([`Waiter::changed`]).
    Pending,
    /// The body ended whole, and all of it was read.
    Whole,
    /// The fetch was cut: the rest never comes.
    Cut,
}

impl Flights {
    /// Joins the flight of `key` (hashed `hash`), or leads a new one.
    pub fn join(self: &Arc<Self>, hash: u64, key: &Key) -> Join {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&hash) {
            Some(f) if f.key == *key => Join::Wait(Waiter {
                rx: f.progress.subscribe(),
            }),
            Some(_) => Join::Apart,
            None => {
                let flight = Arc::new(Flight {
                    key: key.clone(),
                    progress: watch::Sender::new(Progress::default()),
                });
                map.insert(hash, flight.clone());
                Join::Lead(Lead {
                    flights: self.clone(),
                    hash,
                    flight,
                })
            }
        }
    }

    /// How many fetches are in flight.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Lead {
    /// The answer's head was judged storable: waiters may answer with it.
    pub fn head(&self, head: Head) {
        let head = Arc::new(head);
        self.flight.progress.send_modify(|p| p.head = Some(head));
    }

    /// A piece of the body, appended for the waiters (and the store).
    pub fn push(&self, data: &[u8]) {
        self.flight
            .progress
            .send_modify(|p| p.body.extend_from_slice(data));
    }

    /// Reserves room for a body of `n` bytes.
    pub fn reserve(&self, n: usize) {
        self.flight.progress.send_if_modified(|p| {
            p.body.reserve_exact(n);
            false
        });
    }

    /// The body came whole: it is taken to be stored, and the waiters
    /// read the rest of it from there (the lead is dropped once it is
    /// stored).
    pub fn whole(&self) -> Bytes {
        let mut whole = Bytes::new();
        self.flight.progress.send_modify(|p| {
            whole = Bytes::from(std::mem::take(&mut p.body));
            p.whole = Some(whole.clone());
        });
        whole
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        let mut map = self.flights.map.lock().unwrap_or_else(|p| p.into_inner());
        if map
            .get(&self.hash)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            map.remove(&self.hash);
        }
        drop(map);
        self.flight.progress.send_modify(|p| {
            if p.whole.is_none() {
                // Cut short: what came is of no use any more.
                p.body = Vec::new();
            }
            p.ended = true;
        });
    }
}

impl Waiter {
    /// Waits for the fetch's head (bounded by the caller): `None` when it
    /// ended without one, or was cut before any of it was sent here (the
    /// waiter then goes on its own).
    pub async fn head(&mut self) -> Option<Arc<Head>> {
        let p = self
            .rx
            .wait_for(|p| p.head.is_some() || p.ended)
            .await
            .ok()?;
        let cut = p.ended && p.whole.is_none();
        p.head.clone().filter(|_| !cut)
    }

    /// Reads the body from byte `from`, at most `max` bytes, handing
    /// them to `take` (under the buffer's lock: copy them and let go).
    pub fn read(&mut self, from: usize, max: usize, take: impl FnOnce(&[u8])) -> Read {
        let p = self.rx.borrow_and_update();
        let (body, whole) = match &p.whole {
            Some(b) => (&b[..], true),
            None => (&p.body[..], false),
        };
        match body.get(from..).filter(|rest| !rest.is_empty()) {
            Some(rest) => {
                let n = rest.len().min(max);
                take(&rest[..n]);
                Read::Data(n)
            }
            None if whole => Read::Whole,
            None if p.ended => Read::Cut,
            None => Read::Pending,
        }
    }

    /// Waits for more of the body, or the fetch's end (bounded by the
    /// caller).
    pub async fn changed(&mut self) {
        // An error: the flight is gone, and its last state (ended, set
        // before) says how.
        let _ = self.rx.changed().await;
    }

    /// Whether the fetch ended.
    pub fn has_ended(&self) -> bool {
        self.rx.borrow().ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(length: Option<u64>) -> Head {
        Head {
            status: 200,
            fields: Box::default(),
            length,
            etag: None,
            last_modified: None,
            initial_age: Duration::ZERO,
            arrived: Instant::now(),
            vary: Box::default(),
        }
    }

    #[test]
    fn one_leads_the_others_wait_until_it_ends() {
        let flights = Arc::new(Flights::default());
        let mut key = Key::default();
        key.push(b"/a");
        let Join::Lead(lead) = flights.join(7, &key) else {
            panic!("the first leads")
        };
        let Join::Wait(rx) = flights.join(7, &key) else {
            panic!("the second waits")
        };
        let mut other = Key::default();
        other.push(b"/b");
        assert!(matches!(flights.join(7, &other), Join::Apart));
        assert!(!rx.has_ended());
        drop(lead);
        assert!(rx.has_ended(), "woken by the lead's end");
        assert!(flights.is_empty());
        assert!(matches!(flights.join(7, &key), Join::Lead(_)));
    }

    #[test]
    fn waiters_read_the_body_as_it_comes_then_whole_or_cut() {
        let flights = Arc::new(Flights::default());
        let mut key = Key::default();
        key.push(b"/a");
        let Join::Lead(lead) = flights.join(1, &key) else {
            panic!("leads")
        };
        let Join::Wait(mut w) = flights.join(1, &key) else {
            panic!("waits")
        };
        let mut got = Vec::new();
        assert_eq!(w.read(0, 10, |d| got.extend_from_slice(d)), Read::Pending);
        lead.head(head(Some(6)));
        lead.push(b"abc");
        assert_eq!(w.read(0, 2, |d| got.extend_from_slice(d)), Read::Data(2));
        assert_eq!(w.read(2, 10, |d| got.extend_from_slice(d)), Read::Data(1));
        assert_eq!(w.read(3, 10, |d| got.extend_from_slice(d)), Read::Pending);
        lead.push(b"def");
        let whole = lead.whole();
        assert_eq!(&whole[..], b"abcdef");
        assert_eq!(w.read(3, 10, |d| got.extend_from_slice(d)), Read::Data(3));
        assert_eq!(w.read(6, 10, |_| {}), Read::Whole);
        assert_eq!(got, b"abcdef");
        drop(lead);
        assert_eq!(w.read(6, 10, |_| {}), Read::Whole, "still whole once ended");
        assert!(flights.is_empty());

        // Cut after its head: a waiter that sent some reads the cut; one
        // yet to start gets no head (it goes upstream on its own).
        let Join::Lead(lead) = flights.join(1, &key) else {
            panic!("leads")
        };
        let Join::Wait(mut w) = flights.join(1, &key) else {
            panic!("waits")
        };
        lead.head(head(None));
        lead.push(b"xy");
        assert_eq!(w.read(0, 10, |_| {}), Read::Data(2));
        drop(lead);
        assert_eq!(w.read(2, 10, |_| {}), Read::Cut);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(
            rt.block_on(w.head()).is_none(),
            "cut: no head to start with"
        );
    }
}
