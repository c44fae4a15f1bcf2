//! Request coalescing: the fetches in flight, by key. The first miss for
//! a key leads (its fill holds a [`Lead`]); later misses for the same
//! key wait for the lead to end (stored, judged uncacheable, failed or
//! cancelled: the [`Lead`] dropped) and then look the store up again,
//! going upstream on their own when it holds nothing for them. Shared by
//! every worker: one short lock per join and per end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    done: watch::Sender<bool>,
}

/// What a miss does about a fetch in flight for its key.
pub enum Join {
    /// None was: this request's fetch leads.
    Lead(Lead),
    /// One is: wait for it to end (`wait_for(|done| *done)`), then look
    /// the store up again.
    Wait(watch::Receiver<bool>),
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

impl Flights {
    /// Joins the flight of `key` (hashed `hash`), or leads a new one.
    pub fn join(self: &Arc<Self>, hash: u64, key: &Key) -> Join {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&hash) {
            Some(f) if f.key == *key => Join::Wait(f.done.subscribe()),
            Some(_) => Join::Apart,
            None => {
                let flight = Arc::new(Flight {
                    key: key.clone(),
                    done: watch::Sender::new(false),
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
        self.flight.done.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!*rx.borrow());
        drop(lead);
        assert!(*rx.borrow(), "woken by the lead's end");
        assert!(flights.is_empty());
        assert!(matches!(flights.join(7, &key), Join::Lead(_)));
    }
}
