//! The gateway's own log on the real binary: `log.format: json` writes one
//! JSON object a line (start, health and reload lines alike), text stays
//! the default, and health-state lines name the service and endpoint.

mod ops_common;

use std::time::Duration;

use ops_common::*;
use serde_json::Value;
use sluicegate_testkit::{free_port, TestUpstream};

fn config(ports: Ports, format: &str, up: u16, dead: u16, body: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\nlog: {{ level: info, format: {format} }}\n\
         services:\n  - name: shop\n    endpoints: [\"127.0.0.1:{up}\", \"127.0.0.1:{dead}\"]\n\
         \x20   health: {{ type: tcp, interval: 50ms, timeout: 100ms, unhealthy_after: 1 }}\n\
         routes:\n{}{}",
        ports.head(),
        proxy_route("shop", "/shop", "shop"),
        respond_route("hello", "/hello", body)
    )
}

#[test]
fn json_log_is_one_object_a_line_and_health_lines_name_the_service() {
    let up = TestUpstream::start();
    let dead = free_port(); // nothing listens there
    let ports = Ports::new();
    let gw = start(ports, &config(ports, "json", up.port(), dead, "a"));
    let down = wait_until(Duration::from_secs(5), || {
        gw.stderr().contains("endpoint unhealthy")
    });
    check(&gw, down, "no unhealthy line");
    let before = generation(ports);
    gw.write_config(&config(ports, "json", up.port(), dead, "b"));
    gw.reload_signal();
    let reloaded = wait_generation_above(ports, before, Duration::from_secs(5));
    check(&gw, reloaded, "reload not applied");
    std::thread::sleep(Duration::from_millis(200));

    let stderr = gw.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    assert!(lines.len() >= 3, "{stderr}");
    for l in &lines {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(l[field].is_string(), "no {field} in {l}");
        }
    }
    let unhealthy = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("unhealthy"))
        })
        .unwrap();
    assert_eq!(unhealthy["service"], "shop", "{unhealthy}");
    assert_eq!(
        unhealthy["endpoint"],
        format!("127.0.0.1:{dead}").as_str(),
        "{unhealthy}"
    );
    assert_eq!(unhealthy["level"], "WARN", "{unhealthy}");
    assert!(
        lines
            .iter()
            .any(|l| l["message"].as_str().is_some_and(|m| m.contains("reload"))),
        "no reload line in {stderr}"
    );
}

#[test]
fn text_log_is_the_default_and_names_the_service() {
    let up = TestUpstream::start();
    let dead = free_port();
    let ports = Ports::new();
    let gw = start(ports, &config(ports, "text", up.port(), dead, "a"));
    let down = wait_until(Duration::from_secs(5), || {
        gw.stderr().contains("endpoint unhealthy")
    });
    check(&gw, down, "no unhealthy line");
    let stderr = gw.stderr();
    let line = stderr
        .lines()
        .find(|l| l.contains("endpoint unhealthy"))
        .unwrap();
    assert!(line.contains("service=shop"), "{line}");
    assert!(
        line.contains(&format!("endpoint=127.0.0.1:{dead}")),
        "{line}"
    );
    assert!(!line.starts_with('{'), "{line}");
}
