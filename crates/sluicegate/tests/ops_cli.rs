//! The command line, end to end on the real binary: `validate` (good and bad
//! files, FILE:LINE:COL problems), `version`, `run` refusing a bad config,
//! and the `run` overrides (`--max-connections`/`--limit-conn`,
//! `--workers`/`--limit-cpus`, `--log-level`).

mod ops_common;

use std::time::Duration;

use ops_common::*;
use sluicegate_testkit::{http_get, raw_exchange, try_http_get, Gateway, KeepAliveClient};

/// Runs `validate` on `text` written to a scratch file; returns the file's
/// path, the exit success and stderr.
fn validate(text: &str) -> (String, bool, String) {
    let dir = ScratchDir::new("validate");
    let path = dir.write("config.yaml", text);
    let out = run_cli(&["validate", path.to_str().unwrap()]);
    (
        path.display().to_string(),
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts `text` fails validation with exactly the problems `expected`,
/// each given as `LINE:COL: message start`, printed as `FILE:LINE:COL: ...`.
fn assert_problems(text: &str, expected: &[&str]) {
    let (path, ok, stderr) = validate(text);
    assert!(!ok, "validate accepted:\n{text}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        expected.len(),
        "expected {} problems, stderr:\n{stderr}",
        expected.len()
    );
    for (line, want) in lines.iter().zip(expected) {
        let want = format!("{path}:{want}");
        assert!(
            line.starts_with(&want),
            "expected a line starting with\n  {want}\ngot\n  {line}\nstderr:\n{stderr}"
        );
    }
}

const LISTEN: &str = "listen: 127.0.0.1:8080\n";

#[test]
fn validate_accepts_the_example_config() {
    let example = repo_root().join("examples/quickstart.yaml");
    let out = run_cli(&["validate", example.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "validate {}: {:?}\nstdout: {}\nstderr: {}",
        example.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).trim().is_empty(),
        "a good config prints no problems: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn validate_reports_an_unknown_key() {
    assert_problems(
        &format!("{LISTEN}listen_address: 127.0.0.1:9\n"),
        &["2:1: unknown key \"listen_address\""],
    );
    assert_problems(
        &format!("{LISTEN}limits: {{ max_conns: 5 }}\n"),
        &["2:11: unknown key \"max_conns\""],
    );
}

#[test]
fn validate_reports_a_wrong_type() {
    assert_problems(
        &format!("{LISTEN}limits:\n  max_connections: lots\n"),
        &["3:20: limits.max_connections: expected a positive integer"],
    );
    assert_problems(
        &format!("{LISTEN}services: {{ name: web }}\n"),
        &["2:11: services: expected a list of services, found a mapping"],
    );
}

#[test]
fn validate_reports_a_route_to_an_unknown_service() {
    let text = format!(
        "{LISTEN}services:\n  - name: web\n    endpoints: [\"127.0.0.1:9001\"]\nroutes:\n  - name: a\n    service: webb\n"
    );
    assert_problems(
        &text,
        &["7:14: routes[0].service: unknown service \"webb\""],
    );
}

#[test]
fn validate_reports_duplicate_service_names() {
    let text = format!(
        "{LISTEN}services:\n  - name: web\n    endpoints: [\"127.0.0.1:9001\"]\n  - name: web\n    endpoints: [\"127.0.0.1:9002\"]\n"
    );
    assert_problems(
        &text,
        &["5:11: services[1].name: duplicate service name \"web\""],
    );
}

#[test]
fn validate_reports_bad_addresses() {
    assert_problems(
        "listen: [\"127.0.0.1:8080\", \"localhost\"]\n",
        &["1:28: listen[1]: bad address \"localhost\""],
    );
    assert_problems(
        &format!("{LISTEN}admin: {{ listen: \"127.0.0.1:99999\" }}\n"),
        &["2:18: admin.listen: bad address"],
    );
    assert_problems(
        &format!("{LISTEN}services:\n  - name: web\n    endpoints: [\"127.0.0.1\"]\n"),
        &["4:17: services[0].endpoints[0]: bad address \"127.0.0.1\""],
    );
}

#[test]
fn validate_reports_bad_durations() {
    assert_problems(
        &format!("{LISTEN}timeouts: {{ drain: 10 }}\n"),
        &["2:20: timeouts.drain: expected a duration"],
    );
    assert_problems(
        &format!(
            "{LISTEN}services:\n  - name: s\n    endpoints: [\"127.0.0.1:1\"]\n    timeouts: {{ connect: fast }}\n"
        ),
        &["5:26: services[0].timeouts.connect: expected a duration"],
    );
    assert_problems(
        &format!("{LISTEN}reload: {{ poll_interval: 0s }}\n"),
        &["2:26: reload.poll_interval: duration must be greater than zero"],
    );
}

#[test]
fn validate_prints_every_problem_of_a_file() {
    let text = "\
listen: [\"127.0.0.1:8080\"]
colour: blue
workers: many
timeouts: { drain: 5 }
services:
  - name: a
    endpoints: [\"127.0.0.1:9001\"]
  - name: a
    endpoints: [\"nowhere\"]
routes:
  - name: r
    service: b
";
    assert_problems(
        text,
        &[
            "2:1: unknown key \"colour\"",
            "3:10: workers: expected \"auto\" or a positive integer",
            "4:20: timeouts.drain: expected a duration",
            "8:11: services[1].name: duplicate service name \"a\"",
            "9:17: services[1].endpoints[0]: bad address \"nowhere\"",
            "12:14: routes[0].service: unknown service \"b\"",
        ],
    );
}

#[test]
fn validate_reports_a_missing_file() {
    let dir = ScratchDir::new("missing");
    let path = dir.path().join("absent.yaml");
    let out = run_cli(&["validate", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&path.display().to_string()),
        "the error names the file: {stderr}"
    );
}

#[test]
fn version_prints_the_version() {
    let out = run_cli(&["version"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(env!("CARGO_PKG_VERSION")),
        "version output: {stdout}"
    );
    assert!(stdout.contains("sluicegate"), "version output: {stdout}");
}

#[test]
fn run_refuses_an_invalid_config() {
    let port = sluicegate_testkit::free_port();
    let yaml =
        format!("listen: [\"127.0.0.1:{port}\"]\nroutes:\n  - name: r\n    service: nowhere\n");
    let mut gw = Gateway::spawn(bin(), &yaml);
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .expect("run with an invalid config exits");
    assert!(!status.success(), "exit status {status}");
    let want = format!(
        "{}:4:14: routes[0].service: unknown service \"nowhere\"",
        gw.config_path().display()
    );
    assert!(
        gw.stderr().contains(&want),
        "stderr lacks {want:?}:\n{}",
        gw.stderr()
    );
    assert!(try_http_get(local(port), "/", &[]).is_err());
}

/// Starts a gateway whose file allows 100 connections with `flag 2`, and
/// checks that a third connection is refused until one of two closes.
fn connection_limit_override(flag: &str) {
    let ports = Ports::new();
    let yaml = format!(
        "{}limits: {{ max_connections: 100 }}\nreload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let mut gw = Gateway::spawn_args(bin(), &yaml, &[flag, "2"]);
    let ready = gw.wait_ready(&ports.both(), Duration::from_secs(10));
    check(&gw, ready.is_ok(), &format!("not ready: {ready:?}"));
    wait_serving(&gw, ports);
    // The readiness probe's connection must be accepted and gone before
    // counting (under load it can wait in the listen backlog for a while).
    let idle = wait_until(Duration::from_secs(3), || {
        let text = metrics(ports);
        sample(&text, "sluicegate_client_connections_accepted_total") >= Some(1.0)
            && sample(&text, "sluicegate_client_connections") == Some(0.0)
    });
    check(&gw, idle, "probe connections still counted");

    let mut c1 = KeepAliveClient::connect(ports.addr()).unwrap();
    let mut c2 = KeepAliveClient::connect(ports.addr()).unwrap();
    assert_eq!(c1.get("/hello").unwrap().status, 200);
    assert_eq!(c2.get("/hello").unwrap().status, 200);

    let third = try_http_get(ports.addr(), "/hello", &[]);
    assert!(
        third.is_err(),
        "{flag} 2: a third connection was served: {third:?}"
    );
    assert!(metric(ports, "sluicegate_client_connections_refused_total") >= 1.0);

    // The override also wins over the file on reload.
    gw.write_config(&yaml.replace("\"hi\"", "\"reloaded\""));
    gw.reload_signal();
    let applied = wait_until(Duration::from_secs(3), || {
        c1.get("/hello").is_ok_and(|r| r.body_str() == "reloaded")
    });
    check(&gw, applied, "reload not applied");
    let third = try_http_get(ports.addr(), "/hello", &[]);
    assert!(
        third.is_err(),
        "{flag} 2: a third connection was served after a reload: {third:?}"
    );

    // The two kept connections still work; once one closes, a new one is served.
    assert_eq!(c2.get("/hello").unwrap().status, 200);
    drop(c2);
    let served = wait_until(Duration::from_secs(3), || {
        try_http_get(ports.addr(), "/hello", &[]).is_ok_and(|r| r.status == 200)
    });
    check(&gw, served, "no connection served after one of two closed");
}

#[test]
fn max_connections_flag_overrides_the_file() {
    connection_limit_override("--max-connections");
}

#[test]
fn limit_conn_alias_overrides_the_file() {
    connection_limit_override("--limit-conn");
}

/// Starts with `extra` flags (the file says `workers: 2`) and checks the
/// gateway serves.
fn starts_with(extra: &[&str]) -> (Gateway, Ports) {
    let ports = Ports::new();
    let yaml = format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin: {{ listen: \"127.0.0.1:{}\" }}\nworkers: 2\nreload: {{ watch: false }}\nroutes:\n{}",
        ports.listen,
        ports.admin,
        respond_route("hello", "/hello", "hi")
    );
    let mut gw = Gateway::spawn_args(bin(), &yaml, extra);
    let ready = gw.wait_ready(&ports.both(), Duration::from_secs(10));
    check(
        &gw,
        ready.is_ok(),
        &format!("{extra:?}: not ready: {ready:?}"),
    );
    wait_serving(&gw, ports);
    let resp = http_get(ports.addr(), "/hello", &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body_str(), "hi");
    (gw, ports)
}

#[test]
fn workers_and_limit_cpus_flags_are_accepted() {
    for flag in ["--workers", "--limit-cpus"] {
        let (gw, _) = starts_with(&[flag, "1"]);
        // The startup line reports the worker count in force.
        let logged = wait_until(Duration::from_secs(2), || gw.stderr().contains("workers=1"));
        check(
            &gw,
            logged,
            &format!("{flag} 1: startup log lacks workers=1"),
        );
    }
}

#[test]
fn log_level_flag_is_accepted() {
    let (mut gw, ports) = starts_with(&["--log-level", "debug"]);
    assert!(gw.is_running());
    // A malformed request is logged at debug level only.
    let _ = raw_exchange(ports.addr(), b"NOT HTTP\r\n\r\n", Duration::from_secs(2));
    let logged = wait_until(Duration::from_secs(2), || gw.stderr().contains("DEBUG"));
    check(&gw, logged, "--log-level debug: no debug line logged");
}

#[test]
fn bad_log_level_flag_is_refused() {
    let ports = Ports::new();
    let yaml = format!(
        "{}routes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let mut gw = Gateway::spawn_args(bin(), &yaml, &["--log-level", "loud"]);
    let status = gw
        .wait_exit(Duration::from_secs(10))
        .expect("a bad --log-level makes run exit");
    assert!(!status.success(), "exit status {status}");
    assert!(
        gw.stderr().contains("loud"),
        "stderr names the bad level: {}",
        gw.stderr()
    );
    assert!(try_http_get(ports.addr(), "/hello", &[]).is_err());
}
