//! The worker's park set: idle plain keep-alive connections held without a
//! task or a tokio registration each, until their next request's bytes,
//! the keep-alive timeout or the worker's shutdown.
//!
//! A parked connection is one small slab entry (its socket, the client's
//! address, its listener, when its last answer was written) and one
//! deadline in a dense array beside the slab. Its socket leaves tokio's
//! reactor (no `ScheduledIo`) for an epoll instance of the set's own,
//! which is registered once with tokio; one task per worker waits on that,
//! on the earliest keep-alive expiry and on the shutdown signal. When
//! bytes arrive the socket goes back to tokio and a serving task starts,
//! as after a task park ([`Begin::Resumed`]).
//!
//! Parking costs two `epoll_ctl` calls and unparking two more (one out of
//! each epoll instance, one into the other): paid only by a connection
//! idle for [`PARK_AFTER`](super::conn::PARK_AFTER), never on a busy one.
//! TLS connections (their state lives in user space) and the in-memory
//! test streams park in a small task instead ([`super::start::parked_wait`]),
//! as do all connections when the set could not be set up.
//!
//! The set itself, what the worker holds, is [`crate::worker::parkset`]; a
//! connection goes in by [`super::start`]'s `park`, and this module is
//! the set's task.

use std::future::poll_fn;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::active::Active;
use super::conn::Begin;
use super::start::serve_stream;
use crate::clock::deadline::{OwnSlot, Stop};
use crate::transport::listener::Prepared;
use crate::transport::stream::Stream;
use crate::worker::parkset::VACANT;
use crate::worker::Worker;

/// Events taken from the set's epoll instance per call.
const EVENTS: usize = 256;
/// How far ahead the park task sets its timer while nothing is parked.
const IDLE_TIMER: Duration = Duration::from_secs(3600);

/// The park set's task for `worker`: resumes parked connections whose
/// bytes arrived, closes those past their keep-alive timeout, and at
/// shutdown closes them all and stops taking more. Spawn it once per
/// worker, on its thread.
pub(crate) async fn run(worker: Rc<Worker>) {
    let set = &worker.parked;
    let made = epoll::create(epoll::CreateFlags::CLOEXEC)
        .map_err(std::io::Error::from)
        .and_then(watch);
    let watched = match made {
        Ok(w) => set.epoll.get_or_init(|| w),
        Err(e) => {
            tracing::warn!(error = %e, "no park set: idle connections park in tasks");
            return;
        }
    };
    let ep = watched.get_ref();
    set.running.set(true);
    let slot = OwnSlot::new(&worker.deadlines);
    let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
    loop {
        let next = set.earliest.get();
        set.armed.set(next);
        let at = if next == VACANT {
            Instant::now() + IDLE_TIMER
        } else {
            set.base + Duration::from_millis(next)
        };
        let woke = worker
            .deadlines
            .at(at)
            .or_shutdown()
            .in_slot(&slot)
            .bound(poll_fn(|cx| {
                {
                    let mut t = set.task.borrow_mut();
                    if !t.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        *t = Some(cx.waker().clone());
                    }
                }
                if set.kicked.replace(false) {
                    return Poll::Ready(None);
                }
                watched.poll_read_ready(cx).map(Some)
            }))
            .await;
        match woke {
            // An earlier expiry came in: set the timer again.
            Ok(None) => {}
            Ok(Some(Ok(mut ready))) => {
                // Until the instance has no more to say; the readiness is
                // cleared only if no event came since it was reported.
                while resume_ready(&worker, ep, &mut events) == EVENTS {}
                ready.clear_ready();
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "park set: waiting failed; closing its connections");
                break;
            }
            Err(Stop::Timeout) => {
                for _ in 0..set.expire(Instant::now()) {
                    Active::end_parked(&worker);
                }
            }
            Err(Stop::Shutdown) => break,
        }
    }
    set.running.set(false);
    for _ in 0..set.clear() {
        Active::end_parked(&worker);
    }
}

/// `ep` watched for readability by this thread's tokio reactor.
#[allow(unsafe_code)]
fn watch(ep: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the fd an `OwnedFd` returns is open and names the same file
    // for as long as it lives, and the `AsyncFd` owns it: so for the whole
    // life of the `AsyncFd`, as `register_with_interest` requires.
    unsafe { AsyncFd::register_with_interest(ep, Interest::READABLE) }.map_err(|e| e.into())
}

/// Takes the events the set's epoll instance has now (up to [`EVENTS`]) and
/// resumes or closes their connections; returns the count taken.
fn resume_ready(worker: &Rc<Worker>, ep: &OwnedFd, events: &mut Vec<epoll::Event>) -> usize {
    events.clear();
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if epoll::wait(ep, rustix::buffer::spare_capacity(events), Some(&zero)).is_err() {
        return 0;
    }
    let set = &worker.parked;
    for ev in events.iter() {
        let flags = ev.flags;
        let Some(p) = set.take(ev.data.u64() as usize) else {
            continue;
        };
        if (flags
            .intersects(epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR))
            && peer_gone(&p.fd)
        {
            // Closed by the peer while parked: no need to serve it.
            drop(p);
            Active::end_parked(worker);
            continue;
        }
        // Out of the set's instance and back into tokio's.
        let _ = epoll::delete(ep, &p.fd);
        let tcp = match TcpStream::from_std(p.fd.into()) {
            Ok(tcp) => tcp,
            Err(_) => {
                Active::end_parked(worker);
                continue;
            }
        };
        let ready = Prepared {
            stream: Stream::Tcp(tcp),
            client: p.peer,
            tls: ("", ""),
            identity: None,
            h2: false,
        };
        tokio::task::spawn_local(serve_stream(
            ready,
            p.listener,
            Active::resumed(worker.clone()),
            Begin::Resumed(p.end),
        ));
    }
    events.len()
}

/// Whether a socket the peer hung up on has nothing left to read (a
/// request sent before the hang-up is still served).
fn peer_gone(fd: &OwnedFd) -> bool {
    use rustix::io::Errno;
    use rustix::net::RecvFlags;
    let mut b = [0u8; 1];
    match rustix::net::recv(fd, &mut b, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
        Ok((n, _)) => n == 0,
        Err(e) => e != Errno::WOULDBLOCK && e != Errno::INTR,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::session::testing::{runtime, worker_on, CONFIG};
    use crate::transport::listener;

    const REQUEST: &[u8] = b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n";

    /// A worker with its deadline sweeper and park set running, as
    /// `runtime::server` starts them (call inside [`runtime`]).
    async fn worker() -> Rc<Worker> {
        let worker = worker_on(CONFIG);
        tokio::task::spawn_local(run(worker.clone()));
        tokio::task::yield_now().await;
        assert!(worker.parked.running.get());
        worker
    }

    /// A plain TCP connection served on `worker`: the client's end.
    async fn connect(worker: &Rc<Worker>) -> TcpStream {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, peer) = l.accept().await.unwrap();
        let ready = Prepared {
            stream: Stream::Tcp(server),
            client: peer,
            tls: ("", ""),
            identity: None,
            h2: false,
        };
        // Counted as an accepted connection is, before it is served.
        worker
            .shared
            .global
            .open_connections
            .fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_local(serve_stream(
            ready,
            listener::plain(peer),
            Active::new(worker.clone()),
            Begin::New(None),
        ));
        client
    }

    /// Sends one request and reads its whole answer.
    async fn get(c: &mut TcpStream) -> String {
        c.write_all(REQUEST).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"\r\n\r\nhi\n") {
            let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf))
                .await
                .expect("no answer")
                .unwrap();
            assert!(n > 0, "closed before the answer: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap()
    }

    /// Waits until the server closes `c`; how long that took.
    async fn closed_within(c: &mut TcpStream, limit: Duration) -> Duration {
        let start = Instant::now();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(limit, c.read(&mut buf))
            .await
            .expect("not closed in time");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        start.elapsed()
    }

    fn counts(w: &Worker) -> (usize, usize, usize) {
        let open = w.shared.global.open_connections.load(Ordering::Relaxed);
        (w.parked.len(), w.active.get(), open)
    }

    #[test]
    fn an_idle_connection_parks_in_the_set_and_wakes_on_bytes() {
        runtime().block_on(async {
            let w = worker().await;
            let mut c = connect(&w).await;
            assert!(get(&mut c).await.starts_with("HTTP/1.1 200"));
            tokio::time::sleep(Duration::from_millis(150)).await;
            // Parked: in the set, no task, still counted.
            assert_eq!(counts(&w), (1, 1, 1));
            // Its next request's bytes take it out and serve it.
            assert!(get(&mut c).await.starts_with("HTTP/1.1 200"));
            assert_eq!(counts(&w), (0, 1, 1));
            // And it parks again.
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert_eq!(counts(&w), (1, 1, 1));
            assert!(get(&mut c).await.starts_with("HTTP/1.1 200"));
        });
    }

    #[test]
    fn the_keepalive_timeout_closes_a_parked_connection() {
        runtime().block_on(async {
            let w = worker().await;
            let mut c = connect(&w).await;
            let mut other = connect(&w).await;
            get(&mut c).await;
            let answered = Instant::now();
            tokio::time::sleep(Duration::from_millis(100)).await;
            get(&mut other).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(counts(&w), (2, 2, 2));
            // 400 ms from the last answer, not from parking.
            closed_within(&mut c, Duration::from_secs(2)).await;
            let after = answered.elapsed();
            assert!(after >= Duration::from_millis(400), "{after:?}");
            assert!(after < Duration::from_millis(700), "{after:?}");
            // The other one, answered later, expires later.
            assert_eq!(counts(&w), (1, 1, 1));
            closed_within(&mut other, Duration::from_secs(2)).await;
            assert_eq!(counts(&w), (0, 0, 0));
        });
    }

    #[test]
    fn shutdown_closes_parked_connections_at_once() {
        runtime().block_on(async {
            let w = worker().await;
            let mut a = connect(&w).await;
            let mut b = connect(&w).await;
            get(&mut a).await;
            get(&mut b).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(counts(&w), (2, 2, 2));
            w.deadlines.shutdown();
            let t = closed_within(&mut a, Duration::from_millis(200)).await;
            assert!(t < Duration::from_millis(100), "{t:?}");
            closed_within(&mut b, Duration::from_millis(200)).await;
            assert_eq!(counts(&w), (0, 0, 0));
            assert!(!w.parked.running.get(), "the set takes no more");
        });
    }

    #[test]
    fn a_peer_that_closes_while_parked_is_closed_and_uncounted() {
        runtime().block_on(async {
            let w = worker().await;
            let mut c = connect(&w).await;
            let mut stays = connect(&w).await;
            get(&mut c).await;
            get(&mut stays).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(counts(&w), (2, 2, 2));
            drop(c);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(counts(&w), (1, 1, 1));
            // A request sent just before the hang-up is still answered.
            stays.write_all(REQUEST).await.unwrap();
            stays.shutdown().await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(2), stays.read_to_end(&mut got))
                .await
                .unwrap()
                .unwrap();
            assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(counts(&w), (0, 0, 0));
        });
    }
}
