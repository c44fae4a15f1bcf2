//! Hot reload on the real binary: on SIGHUP and on a file change, refusing
//! an invalid file (the running config stays), reloading under traffic
//! without a failed request, keeping upstream pools of unchanged services,
//! and letting in-flight requests finish on the config they started with
//! (HTTP/1.1 requests and HTTP/2 streams).

mod ops_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ops_common::*;
use sluicegate_testkit::{http_get, try_http_get, KeepAliveClient, Proto, TestUpstream};

/// A config with one `respond` route on /hello answering `body`.
fn hello_config(ports: Ports, reload: &str, body: &str) -> String {
    format!(
        "{}reload: {reload}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", body)
    )
}

fn hello_body(ports: Ports) -> String {
    let resp = http_get(ports.addr(), "/hello", &[]);
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    resp.body_str()
}

#[test]
fn sighup_applies_the_new_config() {
    let ports = Ports::new();
    let no_watch = "{ watch: false }";
    let gw = start(ports, &hello_config(ports, no_watch, "one"));
    assert_eq!(hello_body(ports), "one");
    assert_eq!(generation(ports), 1);

    gw.write_config(&hello_config(ports, no_watch, "two"));
    // With the watch off, the file alone changes nothing.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(hello_body(ports), "one");

    gw.reload_signal();
    let applied = wait_until(Duration::from_secs(3), || hello_body(ports) == "two");
    check(&gw, applied, "SIGHUP did not apply the new body");
    assert_eq!(generation(ports), 2);
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 1.0);
    assert_eq!(
        metric(ports, "sluicegate_config_reload_failures_total"),
        0.0
    );
}

#[test]
fn a_changed_file_is_applied_without_a_signal() {
    let ports = Ports::new();
    let fast = "{ poll_interval: 100ms }";
    let gw = start(ports, &hello_config(ports, fast, "before"));
    assert_eq!(hello_body(ports), "before");

    let written = Instant::now();
    gw.write_config(&hello_config(ports, fast, "after"));
    let applied = wait_until(Duration::from_secs(2), || hello_body(ports) == "after");
    check(
        &gw,
        applied,
        "the changed file was not applied within 2 s (poll_interval 100ms)",
    );
    assert!(written.elapsed() < Duration::from_secs(2));
    assert_eq!(generation(ports), 2);
}

#[test]
fn an_invalid_file_is_refused_and_a_later_valid_one_applied() {
    let ports = Ports::new();
    let fast = "{ poll_interval: 100ms }";
    let good = hello_config(ports, fast, "good");
    let gw = start(ports, &good);
    assert_eq!(hello_body(ports), "good");

    // The same config with an unknown key on a new last line.
    let broken = format!("{good}colour: blue\n");
    let bad_line = broken.lines().count();
    gw.write_config(&broken);
    let refused = wait_until(Duration::from_secs(3), || {
        metric(ports, "sluicegate_config_reload_failures_total") >= 1.0
    });
    check(
        &gw,
        refused,
        "the broken file was not seen as a failed reload",
    );
    assert_eq!(hello_body(ports), "good", "the running config stays");
    assert_eq!(generation(ports), 1);
    let want = format!(
        "{}:{bad_line}:1: unknown key \"colour\"",
        gw.config_path().display()
    );
    let logged = wait_until(Duration::from_secs(2), || gw.stderr().contains(&want));
    check(&gw, logged, &format!("stderr lacks {want:?}"));

    // A SIGHUP with the broken file in place is refused too.
    let failures = metric(ports, "sluicegate_config_reload_failures_total");
    gw.reload_signal();
    let refused_again = wait_until(Duration::from_secs(3), || {
        metric(ports, "sluicegate_config_reload_failures_total") > failures
    });
    check(&gw, refused_again, "SIGHUP with a broken file not counted");
    assert_eq!(hello_body(ports), "good");
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 0.0);

    gw.write_config(&hello_config(ports, fast, "fixed"));
    let applied = wait_until(Duration::from_secs(3), || hello_body(ports) == "fixed");
    check(
        &gw,
        applied,
        "a valid file after a broken one was not applied",
    );
    assert_eq!(generation(ports), 2);
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 1.0);
}

/// A config proxying /api to service `api` on `endpoints`, plus a respond
/// route whose body is `tag`.
fn traffic_config(ports: Ports, endpoints: &[u16], tag: &str) -> String {
    format!(
        "{}reload: {{ poll_interval: 100ms }}\nservices:\n{}routes:\n{}{}",
        ports.head().replace("workers: 1\n", "workers: 2\n"),
        service("api", endpoints),
        proxy_route("api", "/api", "api"),
        respond_route("tag", "/tag", tag)
    )
}

#[test]
fn reloads_under_traffic_fail_no_request() {
    let up1 = TestUpstream::start_with_id("one");
    let up2 = TestUpstream::start_with_id("two");
    let ports = Ports::new();
    let gw = start(ports, &traffic_config(ports, &[up1.port()], "0"));

    const RUN_FOR: Duration = Duration::from_secs(3);
    const MAX_PER_THREAD: usize = 5_000;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for t in 0..3 {
        let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
        let addr = ports.addr();
        clients.push(thread::spawn(move || {
            // Threads 0 and 1 keep one connection; thread 2 opens one per request.
            let mut conn = None;
            for i in 0..MAX_PER_THREAD {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let path = format!("/api/t{t}/{i}");
                let result = if t < 2 {
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => conn.insert(KeepAliveClient::connect(addr).expect("connect")),
                    };
                    c.get(&path)
                } else {
                    try_http_get(addr, &path, &[])
                };
                match result {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failures.lock().unwrap().push(format!(
                        "{path}: status {} {}",
                        r.status,
                        r.body_str()
                    )),
                    Err(e) => {
                        failures.lock().unwrap().push(format!("{path}: {e}"));
                        conn = None;
                    }
                }
            }
        }));
    }

    let began = Instant::now();
    let mut reloads = 0;
    while began.elapsed() < RUN_FOR {
        thread::sleep(Duration::from_millis(200));
        reloads += 1;
        let endpoints: &[u16] = if reloads % 2 == 1 {
            &[up1.port(), up2.port()]
        } else {
            &[up1.port()]
        };
        gw.write_config(&traffic_config(ports, endpoints, &reloads.to_string()));
        gw.reload_signal();
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    let failures = failures.lock().unwrap();
    let ok = ok.load(Ordering::Relaxed);
    check(
        &gw,
        failures.is_empty(),
        &format!(
            "{} of {} requests failed across {reloads} reloads, first: {:?}",
            failures.len(),
            failures.len() + ok,
            &failures[..failures.len().min(5)]
        ),
    );
    assert!(
        ok >= 30,
        "too little traffic to mean anything: {ok} requests"
    );
    // Reloads really happened while the traffic ran.
    let applied = metric(ports, "sluicegate_config_reloads_total");
    assert!(applied >= 5.0, "only {applied} reloads applied");
    assert_eq!(
        metric(ports, "sluicegate_config_reload_failures_total"),
        0.0
    );
    assert!(up1.requests_seen() > 0 && up2.requests_seen() > 0);
}

/// A config proxying /api to `api` on `upstream`, plus a respond route.
fn pool_config(ports: Ports, upstream: u16, body: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", body)
    )
}

#[test]
fn upstream_pools_survive_a_reload() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(ports, &pool_config(ports, up.port(), "one"));

    let mut client = KeepAliveClient::connect(ports.addr()).unwrap();
    for i in 0..3 {
        let r = client.get(&format!("/api/before/{i}")).unwrap();
        assert_eq!(r.status, 200);
    }
    assert_eq!(up.connections_accepted(), 1, "one pooled connection");
    let idle = format!(
        "sluicegate_upstream_pool_idle_connections{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
        up.port()
    );
    let pooled = wait_until(Duration::from_secs(2), || metric(ports, &idle) == 1.0);
    check(&gw, pooled, "no idle pooled connection before the reload");

    // Only the other route changes.
    gw.write_config(&pool_config(ports, up.port(), "two"));
    gw.reload_signal();
    let applied = wait_until(Duration::from_secs(3), || hello_body(ports) == "two");
    check(&gw, applied, "reload not applied");

    for i in 0..3 {
        let r = client.get(&format!("/api/after/{i}")).unwrap();
        assert_eq!(r.status, 200);
    }
    let r = http_get(ports.addr(), "/api/fresh-client", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        up.connections_accepted(),
        1,
        "the reload dropped the pooled upstream connection"
    );
    assert_eq!(up.requests_seen(), 7);
}

#[test]
fn in_flight_requests_finish_after_a_reload_removes_their_route() {
    in_flight_across_reload(Proto::Http1);
}

#[test]
fn in_flight_requests_finish_after_a_reload_removes_their_route_over_http2() {
    in_flight_across_reload(Proto::H2c);
}

fn in_flight_across_reload(proto: Proto) {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let with_slow = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}{}",
        ports.head(),
        service("slow", &[up.port()]),
        proxy_route("slow", "/slow", "slow"),
        respond_route("hello", "/hello", "one")
    );
    let without_slow = format!(
        "{}reload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "two")
    );
    let gw = start(ports, &with_slow);

    let addr = ports.addr();
    let slow = thread::spawn(move || proto.get(addr, "/slow/x?delay=800", &[]));
    let arrived = wait_until(Duration::from_secs(3), || up.requests_seen() == 1);
    check(&gw, arrived, "the slow request never reached the upstream");

    gw.write_config(&without_slow);
    gw.reload_signal();
    let applied = wait_until(Duration::from_secs(3), || hello_body(ports) == "two");
    check(&gw, applied, "reload not applied");
    assert!(
        !slow.is_finished(),
        "the reload took longer than the slow request; the test proves nothing"
    );
    assert_eq!(proto.get(ports.addr(), "/slow/y", &[]).status, 404);

    let resp = slow.join().expect("the in-flight request got a response");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(resp.body_str(), "ok\n");
}
