//! The dashboard in a real browser: headless Chromium from the system
//! (`/usr/bin/chromium`, `/usr/bin/chromedriver`) driven by Selenium from
//! the test venv (`tests/fixtures/ui/dashboard.py`), against the real
//! gateway with a test upstream and traffic sent all along. Every page
//! loads without console errors, the overview's numbers move, a caching
//! route's hit ratio shows in the routes table, a route made
//! in the config form serves requests, an invalid one shows the API's
//! error beside its field, a route is edited and another deleted, and each
//! page's screenshot is written under
//! `target/ui-screenshots/`. Loopback only; bounded in time.

mod admin_common;
mod ops_common;
mod venv_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use admin_common::*;
use ops_common::*;
use sluicegate_testkit::{free_port, http_get, try_http_get, TestUpstream};

const TOKEN: &str = "dashboard-writer-token";
const KEY: &str = "dashboard-app-key-0123456789";

/// Sends a little of everything until `stop`: proxied, fixed, an app's and
/// unrouted requests.
fn traffic(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let _ = try_http_get(addr, "/web/page", &[]);
            let _ = try_http_get(addr, "/hello", &[]);
            let _ = try_http_get(addr, "/keyed/x", &[("X-App-Key", KEY)]);
            let _ = try_http_get(addr, "/cached/x?header=cache-control:max-age=600", &[]);
            if sent % 10 == 0 {
                let _ = try_http_get(addr, "/nowhere", &[]);
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(15));
        }
        sent
    })
}

#[test]
fn the_dashboard_in_headless_chromium() {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's chromium and chromium-driver (scripts/deps)"
        );
    }
    let up = TestUpstream::start();
    let dead = free_port();
    let dir = ScratchDir::new("admin-ui");
    let token = dir.write("write.token", &format!("{TOKEN}\n"));
    let ports = Ports::new();
    let yaml = format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin:\n  listen: \"127.0.0.1:{}\"\n  tokens: [{{ token_file: {}, role: write }}]\nworkers: 1\n\
services:\n  - name: web\n    endpoints: [\"{}\", \"127.0.0.1:{dead}\"]\n    health: {{ type: tcp, interval: 100ms, timeout: 100ms, unhealthy_after: 1 }}\n  - name: web2\n    endpoints: [\"{}\"]\n\
routes:\n  - name: web\n    match: {{ path_prefix: /web }}\n    service: web\n  - name: canary\n    match: {{ path_prefix: /canary }}\n    split: [{{ service: web, weight: 80 }}, {{ service: web2, weight: 20 }}]\n    rollout: {{ step: 10, every: 1s, min_requests: 1000000 }}\n  - name: keyed\n    match: {{ path_prefix: /keyed }}\n    service: web\n    auth: app_key\n  - name: cached\n    match: {{ path_prefix: /cached }}\n    service: web\n    cache: {{}}\n{}\
cache: {{ memory: 4MiB }}\n\
plans:\n  basic: {{ rate: 1000/s }}\n\
apps:\n  - id: shop\n    keys: [\"{KEY}\"]\n    plan: basic\n",
        ports.listen,
        ports.admin,
        token.display(),
        up.addr(),
        up.addr(),
        respond_route("hello", "/hello", "hi") + &respond_route("spare", "/spare", "spare"),
    );
    let _gw = start(ports, &yaml);

    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(ports.addr(), stop.clone());
    let shots = repo_root().join("target/ui-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let started = Instant::now();
    let mut child = Command::new(venv_common::python())
        .arg(repo_root().join("crates/sluicegate/tests/fixtures/ui/dashboard.py"))
        .args(["--admin", &format!("http://{}", ports.admin_addr())])
        .args(["--gateway", &format!("http://{}", ports.addr())])
        .args(["--token", TOKEN, "--service", "web"])
        .arg("--out")
        .arg(&shots)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Selenium script");
    let limit = Duration::from_secs(120);
    while child.try_wait().expect("wait for the script").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            stop.store(true, Ordering::Relaxed);
            panic!("the Selenium script did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("the script's output");
    stop.store(true, Ordering::Relaxed);
    let sent = load.join().expect("the traffic thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the dashboard test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("the script's JSON line");
    eprintln!(
        "dashboard: {seen} ({sent} rounds of traffic, {:?})",
        started.elapsed()
    );

    // The overview's count moved while traffic ran.
    let o = &seen["overview"];
    assert!(o["total_then"].as_f64() > o["total_first"].as_f64(), "{o}");
    // The caching route's hit ratio (one miss, then hits); none for
    // a route that does not cache.
    let ratio = seen["hit_ratio"].as_str().unwrap();
    let pct: f64 = ratio.trim_end_matches(" %").parse().unwrap();
    assert!(pct > 50.0 && pct <= 100.0, "{ratio}");
    assert_eq!(seen["hit_ratio_plain"], serde_json::json!([""]));
    // The rollout's weight and state in the routes list.
    assert_eq!(seen["rollout"], serde_json::json!(["20% running"]));
    // The dead endpoint is red, the live one green (web2's is not
    // checked).
    assert_eq!(
        seen["endpoints"],
        serde_json::json!(["up", "down", "unchecked"])
    );
    // The route made in the form serves, and is in the config.
    assert_eq!(seen["created"]["status"], 200);
    assert_eq!(http_get(ports.addr(), "/made/x", &[]).status, 200);
    let auth = [("Authorization", "Bearer dashboard-writer-token")];
    let made = json(&call(ports, "GET", "/routes/ui-made", &auth, ""));
    assert_eq!(made["service"], "web");
    assert_eq!(made["strip_prefix"], true);
    // Edited in the form: GET only now. Deleted in the list: gone.
    assert_eq!(made["match"]["methods"], serde_json::json!(["GET"]));
    assert_eq!(call(ports, "GET", "/routes/spare", &auth, "").status, 404);
    assert_eq!(http_get(ports.addr(), "/spare", &[]).status, 404);
    // The invalid one was refused, beside its field, and changed nothing.
    assert!(seen["invalid"]
        .as_str()
        .unwrap()
        .contains("must start with"));
    assert_eq!(
        call(ports, "GET", "/routes/bad-route", &auth, "").status,
        404
    );
    for page in ["overview", "endpoints", "config", "reloads"] {
        let png = shots.join(format!("{page}.png"));
        let len = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(len > 10_000, "{} is missing or empty", png.display());
    }
}
