//! WebSocket through the gateway with a real WebSocket implementation on
//! both ends: the `websockets` library from PyPI (in the virtual
//! environment `scripts/test-venv` makes) as the echo upstream and as the
//! client. Text and binary messages from 0 bytes to 1 MiB, a ping and its
//! pong, and a clean close all pass through, as they do directly; the same
//! on an app-key route with the key in a header, and over TLS (wss://, the
//! certificate chosen by SNI). A thousand open sessions that keep
//! exchanging messages while the config is reloaded every 200 ms: none is
//! cut and every echo matches; the same for a WebSocket over HTTP/2
//! (RFC 8441); and sessions open across `run --upgrade` talk on through
//! the old process's drain.

mod http_common;
mod ops_common;
mod tls_common;
mod venv_common;
mod ws_common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use sluicegate_testkit::try_http_get;
use ws_common::{fixture, python, wait_bounded, Echo, Sessions};

/// Runs the checking client against `url`; its one line of results.
fn client(url: &str, headers: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(python());
    cmd.arg(fixture("client.py")).arg(url).args(headers);
    let child = cmd.stdout(Stdio::piped()).spawn().expect("run the client");
    let out = wait_bounded(child, Duration::from_secs(60));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn a_real_websocket_session_passes_through_as_it_does_directly() {
    let echo = Echo::start();
    let direct = client(&format!("ws://127.0.0.1:{}/echo", echo.port), &[]);
    assert!(direct.0, "directly: {}", direct.1);
    let up = std::net::SocketAddr::from(([127, 0, 0, 1], echo.port));
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: ws\n    service: s\n",
        service("s", &[up], "")
    ));
    let through = client(&format!("ws://{}/echo", gw.addr()), &[]);
    assert!(through.0, "through the gateway: {}", through.1);
    assert_eq!(through.1, direct.1);
}

#[test]
fn a_websocket_on_an_app_key_route_needs_its_key() {
    let echo = Echo::start();
    let up = std::net::SocketAddr::from(([127, 0, 0, 1], echo.port));
    let gw = Gw::start(&format!(
        "services:\n{}plans:\n  p: {{ rate: 100/s }}\n\
         apps:\n  - {{ id: ws-app, keys: [ws-app-key-0001], plan: p }}\n\
         routes:\n  - name: ws\n    service: s\n    auth: app_key\n",
        service("s", &[up], "")
    ));
    let url = format!("ws://{}/echo", gw.addr());
    let (ok, line) = client(&url, &[]);
    assert!(!ok && line.contains("401"), "without a key: {line}");
    let (ok, line) = client(&url, &["X-App-Key=ws-app-key-0001"]);
    assert!(ok, "with its key: {line}");
}

#[test]
fn a_websocket_over_tls_passes_through() {
    let echo = Echo::start();
    let up = std::net::SocketAddr::from(([127, 0, 0, 1], echo.port));
    let certs = tls_common::Certs::new();
    let (ports, extra) = tls_common::ports(1);
    let yaml = format!(
        "{}services:\n{}routes:\n  - name: ws\n    service: s\n",
        tls_common::head_with_tls_a(ports, extra[0], &certs),
        service("s", &[up], "")
    );
    let gw = tls_common::start(ports, extra, &yaml);
    let ca = certs.ca();
    let url = format!("wss://127.0.0.1:{}/echo", gw.port(0));
    let (ok, line) = client(&url, &["--ca", ca.to_str().unwrap(), "--sni", "a.test"]);
    assert!(ok, "wss through the gateway: {line}");
}

/// Runs `fixtures/h2/ws8441.py PORT ARGS` (bounded); what it printed.
fn ws8441(port: u16, args: &[&str]) -> String {
    let child = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h2/ws8441.py"))
        .arg(port.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ws8441.py");
    let out = wait_bounded(child, Duration::from_secs(20));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_websocket_over_http2_reaches_an_http11_websocket_upstream() {
    // RFC 8441: an HTTP/2 client opens the WebSocket with an extended
    // CONNECT; the upstream sees an HTTP/1.1 upgrade and answers 101; the
    // client gets 200 and the messages as DATA.
    let echo = Echo::start();
    let up = std::net::SocketAddr::from(([127, 0, 0, 1], echo.port));
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: ws\n    service: s\n",
        service("s", &[up], "")
    ));
    let big = "x".repeat(60_000);
    let text = ws8441(gw.port, &["hello", "second one", &big]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"settings 1"), "{text}");
    assert_eq!(lines.get(1), Some(&"status 200"), "{text}");
    assert_eq!(lines.get(2), Some(&"message hello"), "{text}");
    assert_eq!(lines.get(3), Some(&"message second one"), "{text}");
    assert_eq!(
        lines.get(4).map(|l| l.len()),
        Some("message ".len() + big.len())
    );
    assert_eq!(&lines[5..], ["close 1000", "end"], "{text}");
}

/// The reload test's config: `/echo` to the echo server (room for 1,000
/// tunnels), and `/tag` answering `tag`, which each reload changes.
fn sessions_config(ports: ops_common::Ports, echo: u16, tag: &str) -> String {
    format!(
        "{}limits: {{ max_connections: 5000 }}\nreload: {{ watch: false }}\nservices:\n{}    \
         max_connections_per_endpoint: 2000\nroutes:\n{}{}",
        ops_common::Ports::head(&ports).replace("workers: 1\n", "workers: 2\n"),
        ops_common::service("s", &[echo]),
        ops_common::proxy_route("ws", "/echo", "s"),
        ops_common::respond_route("tag", "/tag", tag)
    )
}

#[test]
fn reloads_every_200ms_cut_none_of_a_thousand_websocket_sessions() {
    const SESSIONS: usize = 1000;
    // Each session holds a socket in the client, two in the gateway and one
    // in the echo server; the processes started below inherit the limit.
    tls_common::ensure_nofile(4 * SESSIONS as u64 + 1000);
    let echo = Echo::start();
    let ports = ops_common::Ports::new();
    let gw = ops_common::start(ports, &sessions_config(ports, echo.port, "0"));
    let tunnels = || ops_common::metric(ports, "sluicegate_tunnels_open");
    let generation = ops_common::generation(ports);

    let sessions = Sessions::open(&format!("ws://{}/echo", ports.addr()), SESSIONS);
    assert_eq!(tunnels(), SESSIONS as f64);

    // A changed file and SIGHUP every 200 ms for 4 s, the sessions talking.
    let began = Instant::now();
    let mut reloads = 0;
    while began.elapsed() < Duration::from_secs(4) {
        thread::sleep(Duration::from_millis(200));
        reloads += 1;
        gw.write_config(&sessions_config(ports, echo.port, &reloads.to_string()));
        gw.reload_signal();
    }
    // The last one applied; signals that came while a reload ran may have
    // been taken together, not lost.
    let last = reloads.to_string();
    let applied = ops_common::wait_until(Duration::from_secs(5), || {
        sluicegate_testkit::http_get(ports.addr(), "/tag", &[]).body_str() == last
    });
    ops_common::check(&gw, applied, "the last reload was not applied");
    let now = ops_common::generation(ports);
    assert!(
        now - generation >= reloads / 2,
        "{reloads} reloads asked, generation {generation} -> {now}"
    );
    assert_eq!(tunnels(), SESSIONS as f64, "tunnels open after the reloads");

    // Every session kept talking through the 4 s of reloads (a message
    // every 100 to 500 ms and its echo: 5 or more each even beside the
    // other tests of this file, 3 asked).
    let stats = sessions.stop_and_check(3);
    println!(
        "{reloads} reloads, {} generations: {stats}",
        now - generation
    );
}

#[test]
fn an_upgrade_cuts_no_websocket_session_before_its_drain_ends() {
    const SESSIONS: usize = 100;
    let echo = Echo::start();
    let ports = ops_common::Ports::new();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("handover.sock");
    let yaml = |tag: &str| {
        format!(
            "{}timeouts: {{ drain: 10s }}\n",
            sessions_config(ports, echo.port, tag)
        )
    };
    let mut old = ops_common::start_upgradable(ports, &yaml("old"), &sock);
    let url = format!("ws://{}/echo", ports.addr());
    let sessions = Sessions::open(&url, SESSIONS);

    // `run --upgrade`: the new process takes the listeners; the old one
    // drains, its sessions still talking.
    let upgraded = Instant::now();
    let mut new = ops_common::spawn_upgrade(&yaml("new"), &sock);
    let serving = ops_common::wait_until(Duration::from_secs(10), || {
        try_http_get(ports.addr(), "/tag", &[]).is_ok_and(|r| r.body_str() == "new")
    });
    ops_common::check(&new, serving, "the new process never answered");
    thread::sleep(Duration::from_secs(3));
    assert!(old.is_running(), "the old process left its drain early");
    // A session opened now goes to the new process.
    let (ok, line) = client(&url, &[]);
    assert!(ok, "a new session after the upgrade: {line}");
    // Each session went on talking for 3 s at least after the upgrade.
    let stats = sessions.stop_and_check(6);
    // With its last tunnel closed, the old process ends before the drain.
    let exited = old.wait_exit(Duration::from_secs(12));
    println!(
        "old process exited {:?} after the upgrade ({exited:?}): {stats}",
        upgraded.elapsed()
    );
    assert!(exited.is_some_and(|s| s.success()), "{}", old.stderr());
    assert!(new.is_running(), "{}", new.stderr());
    new.terminate();
    assert!(new.wait_exit(Duration::from_secs(15)).is_some());
}

#[test]
fn a_websocket_over_http2_is_not_cut_by_reloads() {
    // An RFC 8441 WebSocket (a stream of an HTTP/2 connection): twelve
    // messages 250 ms apart while the config changes every 200 ms.
    let echo = Echo::start();
    let ports = ops_common::Ports::new();
    let gw = ops_common::start(ports, &sessions_config(ports, echo.port, "0"));
    let messages: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    let mut args = vec!["--gap-ms".to_string(), "250".to_string()];
    args.extend(messages.iter().cloned());
    let port = ports.listen;
    let session = thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ws8441(port, &args)
    });
    let mut reloads = 0;
    while !session.is_finished() && reloads < 30 {
        thread::sleep(Duration::from_millis(200));
        reloads += 1;
        gw.write_config(&sessions_config(ports, echo.port, &reloads.to_string()));
        gw.reload_signal();
    }
    let text = session.join().unwrap();
    assert!(
        reloads >= 10,
        "{reloads} reloads during the session: {text}"
    );
    let mut want = vec!["settings 1".to_string(), "status 200".to_string()];
    want.extend(messages.iter().map(|m| format!("message {m}")));
    want.extend(["close 1000".to_string(), "end".to_string()]);
    assert_eq!(text.lines().collect::<Vec<_>>(), want, "{reloads} reloads");
}
