//! One of three nginx upstreams killed for good (SIGKILL) under keep-alive
//! load, with the gateway's **default** config (no health checks, no
//! breaker, default retries): it fails no more requests than HAProxy with
//! `retries 2` and `option redispatch` under the same load and the same
//! kill, stops sending to the dead endpoint within a second, logs the
//! failed connects once per interval, and does all of it with a reload
//! every second too. Prints its figures with `--nocapture`.

mod http_common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use sluicegate_testkit::{free_port, http_get, try_http_get, Haproxy, KeepAliveClient, Nginx};

/// Keep-alive clients, each sending GETs one after another.
const CLIENTS: usize = 16;
/// Load before the kill, and in all.
const KILL_AT: Duration = Duration::from_millis(1500);
const RUN_FOR: Duration = Duration::from_secs(5);
/// Sequential requests after the run, each on a new connection.
const AFTER: usize = 60;

/// What one run under load saw.
#[derive(Debug)]
struct Run {
    ok: usize,
    failed: Vec<String>,
    /// Of the requests made one by one after the load stopped.
    failed_after: usize,
}

/// Runs [`CLIENTS`] keep-alive clients against `addr` for [`RUN_FOR`];
/// calls `kill` at [`KILL_AT`] and `tick` every 100 ms after it with the
/// time since the kill; then makes [`AFTER`] requests one by one.
fn under_load(addr: SocketAddr, kill: impl FnOnce(), mut tick: impl FnMut(Duration)) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            thread::spawn(move || {
                let mut cl = KeepAliveClient::connect(addr).ok();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let Some(client) = cl.as_mut() else {
                        failed.lock().unwrap().push("connect".to_string());
                        cl = KeepAliveClient::connect(addr).ok();
                        continue;
                    };
                    match client.get(&format!("/hello?c={c}&i={i}")) {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => {
                            failed.lock().unwrap().push(format!("status {}", r.status));
                            if r.header("connection") == Some("close") {
                                cl = KeepAliveClient::connect(addr).ok();
                            }
                        }
                        Err(e) => {
                            failed.lock().unwrap().push(format!("error {e}"));
                            cl = KeepAliveClient::connect(addr).ok();
                        }
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    thread::sleep(KILL_AT);
    kill();
    let killed = Instant::now();
    while start.elapsed() < RUN_FOR {
        thread::sleep(Duration::from_millis(100));
        tick(killed.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    for t in clients {
        t.join().unwrap();
    }
    let failed_after = (0..AFTER)
        .filter(|i| {
            try_http_get(addr, &format!("/hello?after={i}"), &[]).map_or(true, |r| r.status != 200)
        })
        .count();
    let failed = std::mem::take(&mut *failed.lock().unwrap());
    Run {
        ok: ok.load(Ordering::Relaxed),
        failed,
        failed_after,
    }
}

fn three_nginx() -> [Nginx; 3] {
    [Nginx::start(), Nginx::start(), Nginx::start()]
}

/// The gateway's config: the default one, with an admin listener to read
/// the dead endpoint's connect errors from.
fn gateway_config(admin: u16, ups: &[SocketAddr]) -> String {
    format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}routes:\n  - name: all\n    service: s\n",
        service("s", ups, "")
    )
}

fn connect_errors(admin: u16, ep: SocketAddr) -> u64 {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    let series =
        format!("sluicegate_upstream_connect_errors_total{{service=\"s\",endpoint=\"{ep}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Reloads applied so far (`sluicegate_config_reloads_total`).
fn reloads_total(admin: u16) -> u64 {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("sluicegate_config_reloads_total ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A Sluicegate run: the run's figures, the dead endpoint's connect errors
/// from one second after the kill to the end, and its log's connect lines.
fn sluicegate_run(reload_every_second: bool) -> (Run, u64, usize, u64) {
    let mut ups = three_nginx();
    let addrs: Vec<SocketAddr> = ups.iter().map(Nginx::addr).collect();
    let admin = free_port();
    let gw = Gw::start(&gateway_config(admin, &addrs));
    let dead = addrs[1];
    let mut at_one_second = None;
    let mut reloads = 0;
    let mut next_reload = Duration::ZERO;
    let config = gw.gw.config_path().to_path_buf();
    let run = under_load(
        gw.addr(),
        || ups[1].kill_hard(),
        |since| {
            if at_one_second.is_none() && since >= Duration::from_secs(1) {
                at_one_second = Some(connect_errors(admin, dead));
            }
            if reload_every_second && since >= next_reload {
                // A real change each time: a route that answers itself.
                let text = std::fs::read_to_string(&config).unwrap();
                let base = text.split("  - name: marker").next().unwrap().to_string();
                let route = format!(
                    "  - name: marker\n    match: {{ path: /marker/{reloads} }}\n    respond: {{ status: 204 }}\n"
                );
                // Whole, never half-written when the gateway reads it.
                let tmp = config.with_extension("next");
                std::fs::write(&tmp, base + &route).unwrap();
                std::fs::rename(&tmp, &config).unwrap();
                let before = reloads_total(admin);
                gw.gw.reload_signal();
                // Signals that arrive while a reload runs count as one, so
                // each waits (bounded) for its own reload to apply.
                let until = Instant::now() + Duration::from_secs(3);
                while reloads_total(admin) <= before && Instant::now() < until {
                    thread::sleep(Duration::from_millis(20));
                }
                reloads += 1;
                next_reload += Duration::from_secs(1);
            }
        },
    );
    let late = connect_errors(admin, dead) - at_one_second.expect("sampled a second after");
    let lines = gw
        .gw
        .stderr()
        .lines()
        .filter(|l| l.contains("upstream connect failed"))
        .count();
    let applied = reloads_total(admin);
    if reload_every_second {
        assert!(
            applied >= 3,
            "reloads applied: {applied}\n{}",
            gw.gw.stderr()
        );
    }
    (run, late, lines, applied)
}

fn haproxy_run() -> Run {
    let mut ups = three_nginx();
    let servers: String = ups
        .iter()
        .enumerate()
        .map(|(i, u)| format!("    server s{i} {}\n", u.addr()))
        .collect();
    let h = Haproxy::start(&format!(
        "global\n    maxconn 4096\n\
         defaults\n    mode http\n    option http-keep-alive\n    retries 2\n    option redispatch\n\
         \x20   timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
         frontend fe\n    bind @LISTEN@\n    default_backend be\n\
         backend be\n    balance roundrobin\n    http-reuse safe\n{servers}"
    ));
    under_load(h.addr(), || ups[1].kill_hard(), |_| {})
}

fn report(name: &str, r: &Run) {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for f in &r.failed {
        match kinds.iter_mut().find(|(k, _)| k == f) {
            Some((_, n)) => *n += 1,
            None => kinds.push((f.clone(), 1)),
        }
    }
    println!(
        "{name}: {} ok, {} failed {kinds:?}; after the run {} of {AFTER} failed",
        r.ok,
        r.failed.len(),
        r.failed_after
    );
}

#[test]
fn a_dead_upstream_costs_no_more_requests_than_haproxy_with_redispatch_by_default() {
    let peer = haproxy_run();
    report("haproxy retries 2 + redispatch", &peer);
    let (ours, late, lines, _) = sluicegate_run(false);
    report("sluicegate, default config", &ours);
    println!(
        "sluicegate: {late} connects to the dead endpoint from 1 s after the kill to the end; {lines} log lines about them"
    );
    let (reloading, late_r, lines_r, applied) = sluicegate_run(true);
    report(
        "sluicegate, default config, reload every second",
        &reloading,
    );
    println!("  with reloads ({applied} applied): {late_r} late connects, {lines_r} log lines");

    assert!(ours.ok > 1000 && reloading.ok > 1000, "load flowed");
    assert!(
        ours.failed.len() <= peer.failed.len(),
        "failed {:?}, HAProxy {}",
        ours.failed,
        peer.failed.len()
    );
    assert!(
        reloading.failed.len() <= peer.failed.len(),
        "with reloads: failed {:?}, HAProxy {}",
        reloading.failed,
        peer.failed.len()
    );
    assert_eq!(ours.failed_after + reloading.failed_after, 0);
    // Out of rotation within a second: from then on, only the probes at the
    // end of each ejection (after 1 s, then 2 s more: two rounds in the
    // 3.5 s left, each a few connects when requests in flight at that
    // moment pick it at once), against thousands of requests it would get.
    assert!(
        late <= 12 && late_r <= 12,
        "late connects: {late}, {late_r}"
    );
    // One line per second at most (plus the first), not one per request.
    let secs = RUN_FOR.as_secs() as usize;
    assert!(
        (1..=secs + 2).contains(&lines) && (1..=secs + 2).contains(&lines_r),
        "log lines: {lines}, {lines_r}"
    );
}
