//! The accept loop shared by `TestUpstream` and `RawUpstream`: one thread
//! accepting on a std listener, one thread per connection, and a stop that
//! closes the listener, shuts every open connection down and joins all threads.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// Called once per accepted connection, on that connection's own thread,
/// with the stream and the connection's number (0, 1, 2, ... in accept order).
pub(crate) type Handler = dyn Fn(TcpStream, u64) + Send + Sync + 'static;

struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, TcpStream>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

pub(crate) struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start(addr: SocketAddr, name: &str, handler: Arc<Handler>) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
        });
        let loop_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name(format!("{name}-accept"))
            .spawn(move || accept_loop(listener, loop_shared, handler))?;
        Ok(Server {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn connections_accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections whose handler has not returned yet.
    pub(crate) fn connections_open(&self) -> usize {
        lock(&self.shared.open).len()
    }

    fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept(); the loop sees `stop` and drops the listener.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        let _ = accept.join();
        for stream in lock(&self.shared.open).values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        for worker in workers {
            let _ = worker.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, handler: Arc<Handler>) {
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.open).insert(id, clone);
        }
        let conn_shared = Arc::clone(&shared);
        let conn_handler = Arc::clone(&handler);
        let spawned = thread::Builder::new()
            .name(format!("upstream-conn-{id}"))
            .spawn(move || {
                conn_handler(stream, id);
                lock(&conn_shared.open).remove(&id);
            });
        let mut workers = lock(&shared.workers);
        workers.retain(|w| !w.is_finished());
        match spawned {
            Ok(worker) => workers.push(worker),
            Err(_) => {
                lock(&shared.open).remove(&id);
            }
        }
    }
}

/// Where to connect to reach a listener bound to `addr` (unspecified → loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Locks ignoring poison: a panicking test handler must not wedge shutdown.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
