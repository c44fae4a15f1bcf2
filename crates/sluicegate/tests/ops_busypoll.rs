//! `busy_poll`: after a request the worker keeps polling (its CPU time grows
//! for the window), then sleeps again (it stops growing); a reload turns it
//! off. Read from the process's utime + stime in /proc.

mod ops_common;

use std::thread::sleep;
use std::time::Duration;

use ops_common::*;
use sluicegate_testkit::http_get;

/// The process's user + system CPU time, in clock ticks (1/100 s here).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("stat has a command") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// CPU ticks the process uses over `span`.
fn used(pid: u32, span: Duration) -> u64 {
    let t0 = cpu_ticks(pid);
    sleep(span);
    cpu_ticks(pid) - t0
}

fn config(ports: Ports, busy: &str) -> String {
    format!(
        "{}busy_poll: {busy}\nreload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    )
}

#[test]
fn a_worker_polls_for_the_window_after_a_request_then_sleeps() {
    let ports = Ports::new();
    let gw = start(ports, &config(ports, "500ms"));
    let pid = gw.pid();
    // The window that opens at start-up passes; then the gateway is idle.
    sleep(Duration::from_millis(700));
    let idle = used(pid, Duration::from_millis(400));
    check(&gw, idle <= 8, &format!("idle: {idle} ticks in 400 ms"));
    // A request opens the window: the worker polls instead of sleeping.
    assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    let busy = used(pid, Duration::from_millis(400));
    // A shared CI machine may give it well under a whole core.
    check(
        &gw,
        busy >= 12,
        &format!("window: only {busy} ticks in 400 ms"),
    );
    // It closes 500 ms after the request: asleep again.
    sleep(Duration::from_millis(300));
    let after = used(pid, Duration::from_millis(400));
    check(&gw, after <= 8, &format!("after: {after} ticks in 400 ms"));

    // A reload turns it off: a request no longer opens a window.
    gw.write_config(&config(ports, "off"));
    gw.reload_signal();
    let reloaded = wait_until(Duration::from_secs(10), || {
        metric(ports, "sluicegate_config_reloads_total") >= 1.0
    });
    check(&gw, reloaded, "the reload was not applied");
    sleep(Duration::from_millis(700));
    assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    let off = used(pid, Duration::from_millis(400));
    check(
        &gw,
        off <= 8,
        &format!("off: {off} ticks in 400 ms after a request"),
    );
}
