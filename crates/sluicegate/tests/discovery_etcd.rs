//! etcd discovery end to end, with a real etcd on loopback: upstreams
//! register themselves under a prefix (each key under a lease, kept alive
//! by an `etcdctl lease keep-alive` process), and the gateway follows them
//! under load: a new registration serves within a second, and one whose
//! keep-alive stops (a crashed instance) stops getting traffic within a
//! second of etcd dropping its key, with no failed request; a request in
//! flight to a removed endpoint finishes there. A value that is
//! not an address is refused in the log and the others stay; etcd stopped
//! keeps the last set, and the gateway catches up when it is back; a
//! gateway whose config is in etcd reads the prefixes from that etcd.

mod etcd_common;
mod http_common;
mod ops_common;

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use etcd_common::{etcd_binary, Etcd};
use http_common::load::{id, Load};
use http_common::{wait_until, Gw};
use sluicegate_testkit::{try_http_get, TestUpstream};

const PREFIX: &str = "/services/orders/";

fn skip() -> bool {
    if etcd_binary().is_none() {
        eprintln!("skipped: no etcd binary (Debian etcd-server)");
        return true;
    }
    false
}

fn upstream(name: &str) -> TestUpstream {
    TestUpstream::start_on("127.0.0.1:0".parse().unwrap(), Some(name)).unwrap()
}

fn gateway(etcd: &Etcd) -> Gw {
    Gw::start(&format!(
        "cluster:\n  etcd: {{ endpoints: [\"{}\"] }}\n\
         services:\n  - name: orders\n    discovery: {{ etcd: {{ prefix: {PREFIX} }} }}\n\
         routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: orders\n",
        etcd.url()
    ))
}

/// A registration: its key under a lease, kept alive by a child process
/// until [`Registered::crash`] kills it (the lease then runs out).
struct Registered {
    lease: String,
    ttl: Duration,
    keep_alive: Option<Child>,
}

impl Registered {
    fn new(etcd: &Etcd, key: &str, value: &str) -> Registered {
        let out = etcd.ctl(&["lease", "grant", "2"]);
        // "lease 694d7a1b2c3d4e5f granted with TTL(2s)"
        let words: Vec<&str> = out.split_whitespace().collect();
        let lease = words[1].to_string();
        let ttl: u64 = out
            .split("TTL(")
            .nth(1)
            .and_then(|t| t.split('s').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("lease grant said {out:?}"));
        etcd.ctl(&[
            "put",
            &format!("--lease={lease}"),
            &format!("{PREFIX}{key}"),
            value,
        ]);
        let keep_alive = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.url()))
            .args(["lease", "keep-alive", &lease])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl lease keep-alive");
        Registered {
            lease,
            ttl: Duration::from_secs(ttl),
            keep_alive: Some(keep_alive),
        }
    }

    /// Stops keeping the lease alive, as a crashed instance would.
    fn crash(&mut self) {
        if let Some(mut c) = self.keep_alive.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.crash();
    }
}

/// Whether `n` fresh requests in a row were all answered by `who`.
fn all_from(gw: &Gw, who: &str, n: usize) -> bool {
    (0..n)
        .all(|_| try_http_get(gw.addr(), "/", &[]).is_ok_and(|r| r.status == 200 && id(&r) == who))
}

/// Whether a fresh request was answered by `who` (a few tries, so that
/// round robin over several endpoints reaches it).
fn reaches(gw: &Gw, who: &str) -> bool {
    (0..6)
        .any(|_| try_http_get(gw.addr(), "/", &[]).is_ok_and(|r| r.status == 200 && id(&r) == who))
}

/// Upstreams a and b, a registered (with no lease), and a gateway
/// serving it.
fn serving_a(etcd: &Etcd) -> (TestUpstream, TestUpstream, Gw) {
    let (a, b) = (upstream("a"), upstream("b"));
    etcd.ctl(&[
        "put",
        &format!("{PREFIX}a"),
        &format!("127.0.0.1:{}", a.port()),
    ]);
    let gw = gateway(etcd);
    assert!(wait_until(Duration::from_secs(3), || all_from(&gw, "a", 2)));
    (a, b, gw)
}

/// Stops the load; every answer came from a or b.
fn no_failure(load: Load) {
    let seen = load.finish();
    let failed: Vec<_> = seen
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "a" | "b"))
        .collect();
    assert!(failed.is_empty(), "failed requests: {failed:?}");
}

#[test]
fn registrations_come_and_go_with_their_leases_under_load() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    let (a, b) = (upstream("a"), upstream("b"));
    let gw = gateway(&etcd);
    // Nothing registered: no endpoint to send to.
    let first = try_http_get(gw.addr(), "/", &[]).expect("an answer");
    assert_eq!(first.status, 503, "{}", first.body_str());

    // A registration serves within a second.
    let t0 = Instant::now();
    let mut reg_a = Registered::new(&etcd, "a", &format!("127.0.0.1:{}", a.port()));
    assert!(
        wait_until(Duration::from_secs(1), || reaches(&gw, "a")),
        "a not served within 1 s of its put"
    );
    eprintln!("a serving {:?} after its registration", t0.elapsed());

    let load = Load::start(gw.addr(), 4);
    let t0 = Instant::now();
    let reg_b = Registered::new(
        &etcd,
        "b",
        &format!(
            r#"{{"addr": "127.0.0.1:{}", "weight": 1, "zone": "x"}}"#,
            b.port()
        ),
    );
    assert!(
        wait_until(Duration::from_secs(1), || reaches(&gw, "b")),
        "b not served within 1 s of its put"
    );
    eprintln!("b serving {:?} after its registration", t0.elapsed());
    thread::sleep(Duration::from_millis(300));
    assert!(
        load.count("a") > 0 && load.count("b") > 0,
        "{:?}",
        load.seen()
    );

    // a "crashes": its lease runs out, etcd drops its key, and the gateway
    // stops sending to it within a second of that.
    let crashed = Instant::now();
    reg_a.crash();
    let key_a = format!("{PREFIX}a");
    assert!(
        wait_until(reg_a.ttl + Duration::from_secs(3), || etcd
            .ctl(&["get", &key_a, "--keys-only"])
            .trim()
            .is_empty()),
        "etcd kept a's key"
    );
    let gone = Instant::now();
    assert!(
        wait_until(Duration::from_secs(1), || all_from(&gw, "b", 8)),
        "a still served 1 s after its lease expired"
    );
    eprintln!(
        "a's key gone {:?} after its keep-alive stopped (TTL {:?}); traffic off it {:?} later",
        gone - crashed,
        reg_a.ttl,
        gone.elapsed()
    );
    load.reset();
    thread::sleep(Duration::from_millis(300));
    assert_eq!(load.count("a"), 0, "{:?}", load.seen());
    no_failure(load);

    // A bad value is refused in the log, and b stays.
    etcd.ctl(&["put", &format!("{PREFIX}bad"), "orders.internal:80"]);
    assert!(wait_until(Duration::from_secs(2), || gw
        .gw
        .stderr()
        .contains("key /services/orders/bad refused: bad address")));
    assert!(all_from(&gw, "b", 4));

    // A deregistration (lease revoked) takes the last endpoint away.
    etcd.ctl(&["lease", "revoke", &reg_b.lease]);
    assert!(wait_until(Duration::from_secs(1), || {
        try_http_get(gw.addr(), "/", &[]).is_ok_and(|r| r.status == 503)
    }));
}

#[test]
fn etcd_down_keeps_the_last_set_and_catching_up_follows_the_changes() {
    if skip() {
        return;
    }
    let mut etcd = Etcd::start().unwrap();
    let (_a, b, gw) = serving_a(&etcd);
    etcd.stop();
    let load = Load::start(gw.addr(), 2);
    thread::sleep(Duration::from_secs(2));
    assert!(
        all_from(&gw, "a", 4),
        "the last set must stay while etcd is down"
    );
    assert!(wait_until(Duration::from_secs(2), || gw
        .gw
        .stderr()
        .contains("keeping the last 1 registrations")));
    etcd.resume();
    etcd.ctl(&[
        "put",
        &format!("{PREFIX}b"),
        &format!("127.0.0.1:{}", b.port()),
    ]);
    etcd.ctl(&["del", &format!("{PREFIX}a")]);
    // Reconnection backs off up to 5 s.
    assert!(
        wait_until(Duration::from_secs(8), || all_from(&gw, "b", 6)),
        "the change made while reconnecting was not followed"
    );
    no_failure(load);
}

#[test]
fn a_config_kept_in_etcd_reads_its_prefixes_from_that_etcd() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    let a = upstream("a");
    let dir = tempfile::tempdir().unwrap();
    let ports = ops_common::Ports::new();
    let yaml = etcd_common::config(ports, &etcd, &dir.path().join("cache.json"));
    etcd.ctl(&[
        "put",
        "/sg/services/orders",
        &format!(r#"{{"discovery":{{"etcd":{{"prefix":"{PREFIX}"}}}}}}"#),
    ]);
    etcd.ctl(&[
        "put",
        "/sg/routes/all",
        r#"{"match":{"path_prefix":"/"},"service":"orders"}"#,
    ]);
    etcd.ctl(&[
        "put",
        &format!("{PREFIX}a"),
        &format!("127.0.0.1:{}", a.port()),
    ]);
    let _gw = ops_common::start(ports, &yaml);
    assert!(
        wait_until(Duration::from_secs(5), || {
            try_http_get(ports.addr(), "/", &[]).is_ok_and(|r| r.status == 200 && id(&r) == "a")
        }),
        "the registered endpoint of a service kept in etcd does not serve"
    );
}

#[test]
fn a_deregistered_endpoint_finishes_its_requests_in_flight() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    let (_a, b, gw) = serving_a(&etcd);
    // A slow request on a, then a replaced by b while it runs.
    let addr = gw.addr();
    let slow = thread::spawn(move || try_http_get(addr, "/slow?delay=1500", &[]));
    thread::sleep(Duration::from_millis(300));
    etcd.ctl(&[
        "put",
        &format!("{PREFIX}b"),
        &format!("127.0.0.1:{}", b.port()),
    ]);
    etcd.ctl(&["del", &format!("{PREFIX}a")]);
    assert!(wait_until(Duration::from_secs(1), || all_from(&gw, "b", 4)));
    let resp = slow.join().unwrap().expect("the slow request's answer");
    assert_eq!((resp.status, id(&resp).as_str()), (200, "a"));
}
