//! `Gateway` process handling, exercised with a stand-in binary: a shell
//! script that runs `sluicegate-upstream` on the port written in the "config".

use std::os::unix::fs::PermissionsExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluicegate_testkit::{free_port, http_get, Gateway};

/// Held by every test here: a test that writes an executable must not race
/// another test's fork, or the child inherits the write descriptor for a
/// moment and exec of the script fails with ETXTBSY.
static SERIAL: Mutex<()> = Mutex::new(());

/// Polls `read` until it contains `needle` or five seconds pass.
fn eventually_contains(read: impl Fn() -> String, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = read();
        if text.contains(needle) || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn gateway_runner_starts_waits_and_stops() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake-gateway");
    // Invoked as `fake-gateway run --config FILE`; FILE holds a port number.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"args: $*\" >&2\nexec {} --listen 127.0.0.1:$(cat \"$3\") --id gw\n",
            env!("CARGO_BIN_EXE_sluicegate-upstream")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    let port = free_port();
    let mut gw = Gateway::start(&script, &port.to_string(), &[port]);
    assert_eq!(
        std::fs::read_to_string(gw.config_path()).unwrap(),
        port.to_string()
    );
    let resp = http_get(("127.0.0.1", port), "/x", &[]);
    assert_eq!(resp.header("x-upstream-id"), Some("gw"));
    // The stand-in prints after it binds, so a request can beat the line.
    let stdout = eventually_contains(|| gw.stdout(), "listening on 127.0.0.1:");
    assert!(stdout.contains("listening on 127.0.0.1:"), "{stdout}");
    assert!(
        gw.stderr().contains("args: run --config "),
        "{}",
        gw.stderr()
    );
    assert!(gw.is_running());

    gw.terminate();
    let status = gw.wait_exit(Duration::from_secs(5)).expect("exited");
    assert!(!status.success());
}

#[test]
fn gateway_that_exits_early_is_reported() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut gw = Gateway::spawn(std::path::Path::new("/bin/false"), "listen: []");
    let err = gw
        .wait_ready(&[free_port()], Duration::from_secs(5))
        .unwrap_err();
    assert!(err.contains("exited"), "{err}");
}

#[test]
fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
    // An outgoing connection's local port comes from the ephemeral range, so
    // a port from there can be taken between free_port and the server's bind.
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ports.len(),
        "a port handed out twice: {ports:?}"
    );
    for p in ports {
        assert!(
            p < ephemeral,
            "{p} is in the ephemeral range (from {ephemeral})"
        );
        std::net::TcpListener::bind(("127.0.0.1", p)).expect("a free port binds");
    }
}
