//! Worker threads: one tokio current-thread runtime per worker, each with
//! its own `SO_REUSEPORT` listener per address, its own upstream pools and
//! its own access log buffer (shared-nothing on the hot path), and the
//! graceful drain on shutdown. The accept loops are in `accept.rs`.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::accept::{accept_loop, accept_loop_uring, AcceptSwitch, HoldTicket, Holds, Phase};
use crate::snapshot::Shared;
use crate::transport::uring::{self, Ring};
use crate::worker::Worker;

/// Listen backlog per socket.
const BACKLOG: i32 = 4096;
/// How often a worker sweeps its pool and flushes its access log.
const TICK: Duration = Duration::from_millis(200);

/// Opens one listening socket with SO_REUSEPORT, so every worker can have
/// its own on the same address.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_tcp_nodelay(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// Opens `workers` listeners for each address. A port of 0 is resolved by
/// the first bind and reused by the others, so all workers share it.
/// Each socket goes with its address as configured, which names its
/// settings in the snapshot.
pub fn bind_all(addrs: &[SocketAddr], workers: usize) -> io::Result<Vec<Vec<Bound>>> {
    let mut per_worker: Vec<Vec<Bound>> = (0..workers).map(|_| Vec::new()).collect();
    for &addr in addrs {
        let first =
            bind(addr).map_err(|e| io::Error::new(e.kind(), format!("listen {addr}: {e}")))?;
        let actual = first.local_addr()?;
        per_worker[0].push((addr, first));
        for list in per_worker.iter_mut().skip(1) {
            list.push((addr, bind(actual)?));
        }
    }
    Ok(per_worker)
}

/// A listening socket and the configured address that names its settings.
pub type Bound = (SocketAddr, std::net::TcpListener);

/// The running data plane.
pub struct Gateway {
    threads: Vec<JoinHandle<()>>,
    shutdown: Arc<watch::Sender<Phase>>,
    pub local_addrs: Vec<SocketAddr>,
    /// Duplicates of every listening socket, for a graceful restart.
    handover: Vec<std::net::TcpListener>,
    /// Workers running on io_uring (their ring set up).
    rings: Arc<std::sync::atomic::AtomicUsize>,
    /// The accept loops' holds.
    holds: Arc<Holds>,
}

impl Gateway {
    /// Binds and starts `workers` worker threads.
    pub fn start(shared: Arc<Shared>, addrs: &[SocketAddr], workers: usize) -> io::Result<Gateway> {
        let workers = workers.max(1);
        Self::start_on(shared, bind_all(addrs, workers)?)
    }

    /// [`Gateway::start`] on the listeners of `config`.
    pub fn start_config(
        shared: Arc<Shared>,
        config: &sluicegate_config::Config,
        workers: usize,
    ) -> io::Result<Gateway> {
        let addrs: Vec<SocketAddr> = config.listen.iter().map(|l| l.addr).collect();
        Self::start(shared, &addrs, workers)
    }

    /// Starts on listening sockets taken over from a previous process,
    /// shared out over `workers` threads (each accepts on its share).
    pub fn start_inherited(
        shared: Arc<Shared>,
        inherited: Vec<std::net::TcpListener>,
        workers: usize,
    ) -> io::Result<Gateway> {
        let workers = workers.max(1);
        let mut per_worker: Vec<Vec<Bound>> = (0..workers).map(|_| Vec::new()).collect();
        let n = inherited.len();
        let snap = shared.snapshot.load();
        for (i, l) in inherited.into_iter().enumerate() {
            // The address that names its settings: the configured one with
            // the same address, or one with port 0 on the same IP.
            let local = l.local_addr()?;
            let key = snap
                .listener(local)
                .map(|r| r.addr)
                .or_else(|| {
                    let mut any = local;
                    any.set_port(0);
                    snap.listener(any).map(|r| r.addr)
                })
                .unwrap_or(local);
            per_worker[i % workers].push((key, l));
        }
        // More workers than sockets: the extra ones accept on duplicates.
        for w in n..workers {
            let dup = per_worker[w % n.max(1)]
                .first()
                .map(|(k, l)| l.try_clone().map(|l| (*k, l)))
                .transpose()?;
            per_worker[w].extend(dup);
        }
        Self::start_on(shared, per_worker)
    }

    fn start_on(shared: Arc<Shared>, listeners: Vec<Vec<Bound>>) -> io::Result<Gateway> {
        let mut local_addrs = Vec::new();
        let mut handover = Vec::new();
        for (_, l) in listeners.iter().flatten() {
            let a = l.local_addr()?;
            if !local_addrs.contains(&a) {
                local_addrs.push(a);
            }
            handover.push(l.try_clone()?);
        }
        let (tx, rx) = watch::channel(Phase::Accept);
        let env = std::env::var("SLUICEGATE_IO_URING").ok();
        let io_uring = uring::wanted(shared.snapshot.load().io_uring, env.as_deref());
        let mut threads = Vec::with_capacity(listeners.len());
        let rings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let holds = Arc::new(Holds::default());
        for (i, ls) in listeners.into_iter().enumerate() {
            let shared = shared.clone();
            let rx = rx.clone();
            let rings = rings.clone();
            let ls: Vec<(Bound, HoldTicket)> =
                ls.into_iter().map(|b| (b, holds.ticket())).collect();
            let t = std::thread::Builder::new()
                .name(format!("sluicegate-worker-{i}"))
                .spawn(move || run_worker(shared, ls, rx, io_uring, &rings))?;
            threads.push(t);
        }
        Ok(Gateway {
            threads,
            shutdown: Arc::new(tx),
            local_addrs,
            handover,
            rings,
            holds,
        })
    }

    /// How many workers run on io_uring so far (each sets its ring up as
    /// it starts): 0 with `io_uring` off or refused by the kernel.
    pub fn workers_on_io_uring(&self) -> usize {
        self.rings.load(Ordering::Relaxed)
    }

    /// Duplicates of every listening socket (all workers'), to hand to a
    /// new process; the gateway keeps none. Whoever holds them keeps the
    /// sockets open: drop them before [`Gateway::shutdown`], or new
    /// connections queue on sockets nobody accepts from.
    pub fn take_listeners(&mut self) -> Vec<std::net::TcpListener> {
        std::mem::take(&mut self.handover)
    }

    /// Holds and resumes accepting, for an upgrade.
    pub fn accept_switch(&self) -> AcceptSwitch {
        AcceptSwitch::new(self.shutdown.clone(), self.holds.clone())
    }

    /// Stops accepting, lets in-flight requests finish within the config's
    /// drain timeout, and joins the workers.
    pub fn shutdown(self) {
        self.shutdown.send_replace(Phase::Stop);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The kernel refused io_uring: said once per process, not per worker.
static REFUSED_LOGGED: std::sync::Once = std::sync::Once::new();

/// This worker's ring when `io_uring` is on and the kernel allows it;
/// else `None`, and the worker runs on epoll (with one log line per
/// process saying why).
fn ring_or_fallback(wanted: bool) -> Option<Rc<Ring>> {
    if !wanted {
        return None;
    }
    match Ring::new() {
        Ok(r) => Some(r),
        Err(e) => {
            REFUSED_LOGGED.call_once(|| {
                tracing::warn!(
                    error = %e,
                    reason = uring::refused_reason(&e),
                    "io_uring refused by the kernel: workers run on epoll"
                );
            });
            None
        }
    }
}

fn run_worker(
    shared: Arc<Shared>,
    listeners: Vec<(Bound, HoldTicket)>,
    shutdown: watch::Receiver<Phase>,
    io_uring: bool,
    rings: &std::sync::atomic::AtomicUsize,
) {
    // A local runtime runs the worker's `!Send` tasks on its own scheduler:
    // a wake-up queues the task once, where a `LocalSet` on a current-thread
    // runtime queues it in the set and wakes the set as a second task.
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if io_uring {
        // The turn's one io_uring_enter, before the worker sleeps (a
        // no-op while this thread has no ring).
        builder.on_thread_park(uring::turn);
    }
    let rt = match builder.build_local(tokio::runtime::LocalOptions::default()) {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start worker runtime");
            return;
        }
    };
    rt.block_on(async move {
        let worker = Worker::new(shared.clone()).into_rc();
        let ring = ring_or_fallback(io_uring);
        if let Some(r) = &ring {
            rings.fetch_add(1, Ordering::Relaxed);
            uring::set_current(Some(r.clone()));
            tokio::task::spawn_local(r.clone().drive());
        }
        tokio::task::spawn_local({
            let worker = worker.clone();
            async move { worker.deadlines.run().await }
        });
        tokio::task::spawn_local(crate::session::park::run(worker.clone()));
        tokio::task::spawn_local({
            let worker = worker.clone();
            async move {
                let w = &worker;
                w.busy
                    .run(
                        || w.shared.snapshot.load().busy_poll,
                        || w.deadlines.shutting_down(),
                    )
                    .await
            }
        });
        for ((key, l), ticket) in listeners {
            let w = worker.clone();
            let sd = shutdown.clone();
            if let Some(r) = &ring {
                tokio::task::spawn_local(accept_loop_uring(w, l, key, sd, ticket, r.clone()));
                continue;
            }
            match TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::task::spawn_local(accept_loop(w, l, key, sd, ticket));
                }
                // Its ticket goes: a hold does not wait for it.
                Err(e) => tracing::error!(error = %e, "cannot register listener"),
            }
        }
        let mut tick = tokio::time::interval(TICK);
        let mut sd = shutdown.clone();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    worker.pool.borrow_mut().sweep(Instant::now());
                    worker.flush_log();
                    worker.trim_bufs();
                    worker.revocations.sweep(&worker.shared);
                }
                r = sd.changed() => {
                    if r.is_err() || *sd.borrow() == Phase::Stop { break; }
                }
            }
        }
        // Drain: idle connections close at once (their waits end on the
        // shutdown signal); busy ones finish their request, bounded by the
        // timeout.
        worker.deadlines.shutdown();
        let drain = shared.snapshot.load().timeouts.drain;
        let deadline = Instant::now() + drain;
        while worker.active.get() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            worker.flush_log();
        }
        if worker.active.get() > 0 {
            tracing::warn!(
                connections = worker.active.get(),
                "drain timeout: closing busy connections"
            );
        }
        worker.flush_log();
        worker.pool.borrow_mut().clear();
    });
    drop(rt);
    uring::set_current(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A connection made once `hold` has returned waits in the queue,
    /// unanswered, until `resume`, on either transport: the hold has
    /// taken effect by then (on io_uring, the multishot accept is over).
    fn held_gateway_queues_connections(io_uring: bool) {
        let shared = Shared::new(&respond_config(io_uring)).unwrap();
        let gw = Gateway::start(shared, &["127.0.0.1:0".parse().unwrap()], 2).unwrap();
        let addr = gw.local_addrs[0];
        // Serving (a hold waits for a worker that has not started, too).
        served(addr);
        let get = |c: &mut std::net::TcpStream| {
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).map(|_| out)
        };
        let switch = gw.accept_switch();
        for round in 0..2 {
            switch.hold();
            // Connected at once (the kernel queues it), but not accepted.
            let mut conns: Vec<_> = (0..4)
                .map(|_| std::net::TcpStream::connect(addr).unwrap())
                .collect();
            for c in &mut conns {
                c.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let e = get(c).unwrap_err();
                assert!(
                    matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ),
                    "round {round}: {e}"
                );
            }
            switch.resume();
            for c in &mut conns {
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut out = String::new();
                c.read_to_string(&mut out).unwrap();
                assert!(out.starts_with("HTTP/1.1 200"), "round {round}: {out}");
            }
        }
        // A shutdown is never undone; a hold after it does not wait.
        switch.hold();
        switch.resume();
        gw.shutdown();
        let t = Instant::now();
        switch.hold();
        assert!(t.elapsed() < crate::runtime::accept::HOLD_WAIT);
        switch.resume();
    }

    #[test]
    fn a_held_gateway_queues_connections_and_serves_them_once_resumed() {
        held_gateway_queues_connections(false);
    }

    #[test]
    fn a_held_io_uring_gateway_queues_connections_and_serves_them_once_resumed() {
        held_gateway_queues_connections(true);
    }

    fn respond_config(io_uring: bool) -> sluicegate_config::Config {
        sluicegate_config::parse(&format!(
            "listen: [\"127.0.0.1:0\"]\nio_uring: {io_uring}\nroutes:\n  - {{ name: r, match: {{ path: / }}, respond: {{ status: 200, body: hi }} }}\n",
        ))
        .unwrap()
    }

    /// Two keep-alive requests and a closing one on one connection.
    fn served(addr: SocketAddr) {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for _ in 0..2 {
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).unwrap();
            let out = String::from_utf8_lossy(&buf[..n]);
            assert!(
                out.starts_with("HTTP/1.1 200") && out.ends_with("hi"),
                "{out}"
            );
        }
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }

    #[test]
    fn io_uring_workers_serve_when_the_kernel_allows_it() {
        let cfg = respond_config(true);
        let shared = Shared::new(&cfg).unwrap();
        let gw = Gateway::start(shared, &["127.0.0.1:0".parse().unwrap()], 2).unwrap();
        for _ in 0..4 {
            served(gw.local_addrs[0]);
        }
        // Both set their rings up before accepting anything (unless the
        // environment turns io_uring off for the run).
        if std::env::var("SLUICEGATE_IO_URING").as_deref() != Ok("0") {
            assert_eq!(gw.workers_on_io_uring(), 2);
        }
        gw.shutdown();
    }

    /// One TLS request (the PROXY header first when `proxy`) on a new
    /// connection, answered `hi`.
    fn served_tls(addr: SocketAddr, roots: Arc<rustls::RootCertStore>, proxy: bool) {
        use crate::transport::tls::config::default_provider;
        let client = rustls::ClientConfig::builder_with_provider(default_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if proxy {
            tcp.write_all(b"PROXY TCP4 192.0.2.7 127.0.0.1 4000 443\r\n")
                .unwrap();
        }
        let mut c = rustls::StreamOwned::new(conn, tcp);
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        // To the end (a close_notify, or the FIN without one).
        while let Ok(n @ 1..) = c.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.starts_with("HTTP/1.1 200") && out.ends_with("hi"),
            "{out}"
        );
    }

    #[test]
    fn tls_connections_on_io_uring_workers_are_served_on_the_ring() {
        use crate::transport::listener::TLS_ON_RING;
        use crate::transport::tls::tests::{Alg, Pki};
        let mut pki = Pki::new();
        let leaf = pki.leaf(&["localhost"], Alg::Ecdsa, false);
        for proxy in [false, true] {
            let cfg = sluicegate_config::parse(&format!(
                "listen: [{{ addr: \"127.0.0.1:0\", proxy_protocol: {proxy}, tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}]\nio_uring: true\nroutes:\n  - {{ name: r, match: {{ path: / }}, respond: {{ status: 200, body: hi }} }}\n",
                leaf.cert.display(),
                leaf.key.display(),
            ))
            .unwrap();
            let shared = Shared::new(&cfg).unwrap();
            let gw = Gateway::start(shared, &["127.0.0.1:0".parse().unwrap()], 1).unwrap();
            // Other tests may add theirs meanwhile: at least ours count.
            let before = TLS_ON_RING.load(Ordering::Relaxed);
            for _ in 0..3 {
                served_tls(gw.local_addrs[0], pki.roots(), proxy);
            }
            if std::env::var("SLUICEGATE_IO_URING").as_deref() != Ok("0") {
                assert_eq!(gw.workers_on_io_uring(), 1);
                let on_ring = TLS_ON_RING.load(Ordering::Relaxed) - before;
                assert!(on_ring >= 3, "{on_ring} of 3 handshakes on the ring");
            }
            gw.shutdown();
        }
    }

    /// A seccomp filter on this thread (and the threads it starts) that
    /// refuses `io_uring_setup` with EPERM, as a container's may.
    #[allow(unsafe_code)]
    fn refuse_io_uring_here() {
        const IO_URING_SETUP: u32 = 425;
        let op = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        };
        let filter = [
            // The syscall number, at offset 0 of seccomp_data.
            op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
            op(
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                IO_URING_SETUP,
                0,
                1,
            ),
            op(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                0,
                0,
            ),
            op(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW, 0, 0),
        ];
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: prctl with a valid filter program that outlives the call
        // (the kernel copies it); it affects this thread only.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            assert_eq!(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog
                ),
                0
            );
        }
    }

    #[test]
    fn a_kernel_refusing_io_uring_gets_the_epoll_workers() {
        std::thread::spawn(|| {
            refuse_io_uring_here();
            assert_eq!(
                Ring::new().unwrap_err().raw_os_error(),
                Some(rustix::io::Errno::PERM.raw_os_error())
            );
            let cfg = respond_config(true);
            let shared = Shared::new(&cfg).unwrap();
            let gw = Gateway::start(shared, &["127.0.0.1:0".parse().unwrap()], 2).unwrap();
            for _ in 0..4 {
                served(gw.local_addrs[0]);
            }
            assert_eq!(gw.workers_on_io_uring(), 0);
            gw.shutdown();
        })
        .join()
        .unwrap();
    }
}
