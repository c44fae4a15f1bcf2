//! DNS discovery end to end: the gateway resolves its endpoints' host names
//! and SRV names through the testkit's DNS server (on a loopback port, set
//! with `dns.servers`), and follows the answers as the test changes them
//! under load, with no failed request; a failing resolver keeps the last
//! good answer; an unchanged answer publishes nothing.

mod http_common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use http_common::load::{id, Load};
use http_common::{wait_until, Gw};
use sluicegate_testkit::{free_port, http_get, DnsServer, KeepAliveClient, Srv, TestUpstream};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Three upstreams on one port of 127.0.0.2, .3 and .4, ids a, b, c.
fn three_on_one_port() -> (u16, [TestUpstream; 3]) {
    for _ in 0..20 {
        let a = TestUpstream::start_on("127.0.0.2:0".parse().unwrap(), Some("a")).unwrap();
        let port = a.port();
        let b = TestUpstream::start_on(SocketAddr::new(ip("127.0.0.3"), port), Some("b"));
        let c = TestUpstream::start_on(SocketAddr::new(ip("127.0.0.4"), port), Some("c"));
        if let (Ok(b), Ok(c)) = (b, c) {
            return (port, [a, b, c]);
        }
    }
    panic!("no port free on 127.0.0.2-4");
}

fn dns_block(dns: &DnsServer) -> String {
    format!(
        "dns: {{ servers: [\"{}\"], min_ttl: 50ms, max_ttl: 1s }}\n",
        dns.addr()
    )
}

fn route(service: &str) -> String {
    format!("routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: {service}\n")
}

fn failures(seen: &HashMap<String, u64>) -> Vec<(&String, &u64)> {
    seen.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "a" | "b" | "c"))
        .collect()
}

#[test]
fn a_records_added_and_removed_under_load_fail_no_request() {
    let (port, _ups) = three_on_one_port();
    let dns = DnsServer::start();
    dns.set_ttl(0);
    dns.set_host("orders.test", &[ip("127.0.0.2")]);
    let gw = Gw::start(&format!(
        "{}services:\n  - name: orders\n    endpoints: [\"orders.test:{port}\"]\n{}",
        dns_block(&dns),
        route("orders")
    ));
    assert!(
        wait_until(Duration::from_secs(5), || http_get(gw.addr(), "/", &[])
            .status
            == 200),
        "the name never resolved: {}",
        gw.gw.stderr()
    );
    let load = Load::start(gw.addr(), 4);
    let step = |ips: &[&str], want: &str| {
        let ips: Vec<IpAddr> = ips.iter().map(|s| ip(s)).collect();
        dns.set_host("orders.test", &ips);
        assert!(
            wait_until(Duration::from_secs(5), || load.count(want) > 0),
            "traffic never reached {want}"
        );
    };
    step(&["127.0.0.2", "127.0.0.3"], "b");
    // a leaves: once the change is seen, no request goes there.
    step(&["127.0.0.3", "127.0.0.4"], "c");
    thread::sleep(Duration::from_millis(300));
    load.reset();
    thread::sleep(Duration::from_millis(500));
    assert_eq!(load.count("a"), 0, "a removed but still chosen");
    assert!(load.count("b") > 0 && load.count("c") > 0);
    // A failing resolver keeps the last good answer.
    dns.set_failing(true);
    thread::sleep(Duration::from_millis(600));
    load.reset();
    thread::sleep(Duration::from_millis(400));
    assert!(
        load.count("b") > 0 && load.count("c") > 0,
        "{:?}",
        load.seen()
    );
    dns.set_failing(false);
    step(&["127.0.0.2"], "a");
    thread::sleep(Duration::from_millis(300));
    load.reset();
    thread::sleep(Duration::from_millis(400));
    let seen = load.finish();
    assert_eq!(seen.get("b"), None, "{seen:?}");
    assert_eq!(seen.get("c"), None, "{seen:?}");
    assert!(seen.get("a").copied().unwrap_or(0) > 0, "{seen:?}");
    assert!(failures(&seen).is_empty(), "{seen:?}");
}

/// Zero failures over the whole run, changes included (the counts above
/// are reset between steps, so this run keeps them all).
#[test]
fn every_request_succeeds_while_the_answer_changes() {
    let (port, _ups) = three_on_one_port();
    let dns = DnsServer::start();
    dns.set_ttl(0);
    dns.set_host("orders.test", &[ip("127.0.0.2")]);
    let gw = Gw::start(&format!(
        "{}services:\n  - name: orders\n    endpoints: [\"orders.test:{port}\"]\n{}",
        dns_block(&dns),
        route("orders")
    ));
    assert!(wait_until(Duration::from_secs(5), || {
        http_get(gw.addr(), "/", &[]).status == 200
    }));
    let load = Load::start(gw.addr(), 4);
    let sets: [&[&str]; 6] = [
        &["127.0.0.2", "127.0.0.3"],
        &["127.0.0.3"],
        &["127.0.0.3", "127.0.0.4"],
        &["127.0.0.4"],
        &["127.0.0.2", "127.0.0.3", "127.0.0.4"],
        &["127.0.0.2"],
    ];
    for set in sets {
        let ips: Vec<IpAddr> = set.iter().map(|s| ip(s)).collect();
        dns.set_host("orders.test", &ips);
        thread::sleep(Duration::from_millis(300));
    }
    let seen = load.finish();
    let total: u64 = seen.values().sum();
    assert!(total > 100, "{seen:?}");
    assert!(failures(&seen).is_empty(), "{seen:?}");
    for u in ["a", "b", "c"] {
        assert!(seen.contains_key(u), "{u} never reached: {seen:?}");
    }
}

#[test]
fn srv_records_give_ports_and_weights_and_an_unchanged_answer_changes_nothing() {
    let a = TestUpstream::start_with_id("a");
    let b = TestUpstream::start_with_id("b");
    let dns = DnsServer::start();
    dns.set_ttl(0);
    dns.set_host("host.test", &[ip("127.0.0.1")]);
    let srv = |port, weight| Srv {
        priority: 10,
        weight,
        port,
        target: "host.test".into(),
    };
    dns.set_srv(
        "_http._tcp.orders.test",
        &[srv(a.port(), 1), srv(b.port(), 3)],
    );
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n{}services:\n  - name: orders\n    discovery: {{ dns_srv: _http._tcp.orders.test }}\n{}",
        dns_block(&dns),
        route("orders")
    ));
    let both = || {
        let mut ids = std::collections::HashSet::new();
        for _ in 0..8 {
            ids.insert(id(&http_get(gw.addr(), "/", &[])));
        }
        ids.len() == 2
    };
    assert!(
        wait_until(Duration::from_secs(5), both),
        "{}",
        gw.gw.stderr()
    );
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for _ in 0..400 {
        let resp = client.get("/").unwrap();
        assert_eq!(resp.status, 200);
        *counts.entry(id(&resp)).or_default() += 1;
    }
    assert_eq!(counts.get("a"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("b"), Some(&300), "{counts:?}");

    // The same answer again and again: asked, but nothing published.
    let changes = || {
        let m = String::from_utf8_lossy(&http_get(("127.0.0.1", admin), "/metrics", &[]).body)
            .into_owned();
        m.lines()
            .find_map(|l| l.strip_prefix("sluicegate_discovery_changes_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("discovery counter in /metrics")
    };
    let (before, asked) = (changes(), dns.queries());
    thread::sleep(Duration::from_millis(500));
    assert!(dns.queries() >= asked + 4, "not asked again");
    assert_eq!(changes(), before);

    // A record with a lower priority number wins alone.
    let started = Instant::now();
    dns.set_srv(
        "_http._tcp.orders.test",
        &[
            srv(a.port(), 1),
            Srv {
                priority: 1,
                ..srv(b.port(), 1)
            },
        ],
    );
    assert!(wait_until(Duration::from_secs(5), || {
        (0..8).all(|_| id(&http_get(gw.addr(), "/", &[])) == "b")
    }));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(changes(), before + 1);
}

#[test]
fn validate_never_asks_a_resolver() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:1\nservices:\n  - name: s\n    endpoints: [\"no-such-host.invalid:80\"]\n  - name: t\n    discovery: { dns_srv: _http._tcp.nothing.invalid }\nroutes:\n  - name: r\n    match: { path_prefix: / }\n    service: s\n",
    )
    .unwrap();
    let out = std::process::Command::new(http_common::bin())
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
