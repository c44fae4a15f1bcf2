//! Graceful restart on the real binary: `sluicegate run --upgrade` takes
//! the running gateway's listening sockets (and its admin listener) over
//! the handover socket; the old process drains and exits 0. Under steady
//! load from keep-alive and one-request-per-connection clients, no
//! connection is refused and no request fails (a keep-alive client whose
//! idle connection the old process closed sends again on a new one, as
//! HTTP clients do for idempotent requests).

mod ops_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ops_common::*;
use sluicegate_testkit::{
    free_port, http_get, try_http_get, Gateway, KeepAliveClient, TestUpstream,
};

#[test]
fn an_upgrade_under_load_refuses_nothing_and_fails_nothing() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}",
        ports.head(),
        service("api", &[up.port()]),
        proxy_route("api", "/api", "api"),
    );
    let dir = tempfile_dir();
    let sock = dir.join("handover.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let mut old = Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg]);
    old.wait_ready(&ports.both(), Duration::from_secs(10))
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let resent = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..4)
        .map(|t| {
            let (stop, ok, resent, failures) =
                (stop.clone(), ok.clone(), resent.clone(), failures.clone());
            let addr = ports.addr();
            thread::spawn(move || {
                let mut conn: Option<KeepAliveClient> = None;
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let path = format!("/api/{t}/{i}");
                    let result = if t < 2 {
                        let reused = conn.is_some();
                        let c = match conn.as_mut() {
                            Some(c) => c,
                            None => match KeepAliveClient::connect(addr) {
                                Ok(c) => conn.insert(c),
                                Err(e) => {
                                    failures.lock().unwrap().push(format!("connect: {e}"));
                                    continue;
                                }
                            },
                        };
                        match c.get(&path) {
                            Err(_) if reused => {
                                // The idle connection was closed: send again.
                                resent.fetch_add(1, Ordering::Relaxed);
                                conn = None;
                                KeepAliveClient::connect(addr).and_then(|mut c| {
                                    let r = c.get(&path);
                                    conn = Some(c);
                                    r
                                })
                            }
                            r => r,
                        }
                    } else {
                        try_http_get(addr, &path, &[])
                    };
                    match result {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failures
                            .lock()
                            .unwrap()
                            .push(format!("{path}: {}", r.status)),
                        Err(e) => {
                            failures.lock().unwrap().push(format!("{path}: {e}"));
                            conn = None;
                        }
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    let before = ok.load(Ordering::Relaxed);
    // One socket comes over (the old process has one worker); the second
    // worker of the new one accepts on a duplicate of it.
    let mut new = Gateway::spawn_args(
        bin(),
        &yaml,
        &[
            "--handover-socket",
            &sock_arg,
            "--upgrade",
            "--workers",
            "2",
        ],
    );
    let exited = old.wait_exit(Duration::from_secs(15));
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let total = ok.load(Ordering::Relaxed);
    let failures = failures.lock().unwrap();
    println!(
        "{total} requests ok ({before} before the upgrade), {} resent on a new connection, {} failed",
        resent.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{:?}",
        &failures[..failures.len().min(5)]
    );
    assert!(
        exited.is_some_and(|s| s.success()),
        "the old process drains and exits 0: {exited:?}\n{}",
        old.stderr()
    );
    assert!(new.is_running(), "{}", new.stderr());
    assert!(total > before + 50, "traffic went on after the upgrade");
    // The new process serves the data and the admin ports, and can itself
    // be upgraded later (it serves the handover socket now).
    assert_eq!(http_get(ports.addr(), "/api/after", &[]).status, 200);
    assert_eq!(http_get(ports.admin_addr(), "/healthz", &[]).status, 200);
    assert!(sock.exists());
    new.terminate();
    assert!(new.wait_exit(Duration::from_secs(10)).is_some());
    assert!(!sock.exists(), "the socket file goes with its process");
}

#[test]
fn an_upgrade_without_a_running_gateway_fails_clearly() {
    let ports = Ports::new();
    let dir = tempfile_dir();
    let sock = dir.join("nobody.sock");
    let yaml = format!("{}services: []\nroutes: []\n", ports.head());
    let mut g = Gateway::spawn_args(
        bin(),
        &yaml,
        &["--handover-socket", sock.to_str().unwrap(), "--upgrade"],
    );
    let status = g.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| !s.success()));
    assert!(
        g.stderr().contains("--upgrade: handover socket"),
        "{}",
        g.stderr()
    );
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sg-upgrade-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Several processes on one port (SO_REUSEPORT, one worker each, as
/// `bench/million` runs them) pointed at one handover socket: the socket
/// stays the first one's. The second says why it has no graceful restart,
/// its liveness check is not logged as a failed handover, and its exit does
/// not delete the first one's socket, which can still be upgraded.
#[test]
fn a_second_process_on_the_same_handover_socket_leaves_it_to_the_first() {
    let up = TestUpstream::start();
    let port = free_port();
    let yaml = format!(
        "listen: [\"127.0.0.1:{port}\"]\nworkers: 1\nreload: {{ watch: false }}\nservices:\n{}routes:\n{}",
        service("api", &[up.port()]),
        proxy_route("api", "/api", "api"),
    );
    let dir = tempfile_dir();
    let sock = dir.join("handover.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let mut first = Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg]);
    first.wait_ready(&[port], Duration::from_secs(10)).unwrap();
    let mut second = Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg]);
    let said = wait_until(Duration::from_secs(10), || {
        second.stderr().contains("another gateway serves it")
    });
    check(
        &second,
        said,
        "the second process never said why it has no handover",
    );
    assert!(second.is_running(), "{}", second.stderr());
    // Both serve the port.
    assert_eq!(http_get(local(port), "/api/both", &[]).status, 200);
    second.terminate();
    assert!(second.wait_exit(Duration::from_secs(10)).is_some());
    assert!(
        sock.exists(),
        "the second process left the first one's socket"
    );
    assert!(
        !first.stderr().contains("handover failed"),
        "{}",
        first.stderr()
    );
    let mut next =
        Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg, "--upgrade"]);
    let exited = first.wait_exit(Duration::from_secs(15));
    assert!(
        exited.is_some_and(|s| s.success()),
        "the first process hands over and exits 0: {exited:?}\n{}",
        first.stderr()
    );
    assert!(next.is_running(), "{}", next.stderr());
    assert_eq!(http_get(local(port), "/api/after", &[]).status, 200);
    next.terminate();
    assert!(next.wait_exit(Duration::from_secs(10)).is_some());
}
