//! The admin listener on the real binary: `/metrics` request counts by
//! route and status class and by exact code (on HTTP/1.1 and HTTP/2
//! streams alike), the latency histogram, upstream response times by
//! service and endpoint, upstream connect errors, the client connection
//! gauge, reload counters, the process gauges and build info; `/healthz`
//! and its `config_generation`.

mod ops_common;

use std::time::Duration;

use ops_common::*;
use sluicegate_testkit::{free_port, http_get, KeepAliveClient, Proto, TestUpstream};

fn requests(route: &str, class: &str) -> String {
    format!("sluicegate_requests_total{{route=\"{route}\",class=\"{class}\"}}")
}

fn responses(route: &str, code: &str) -> String {
    format!("sluicegate_responses_total{{route=\"{route}\",code=\"{code}\"}}")
}

fn duration_count(route: &str) -> String {
    format!("sluicegate_request_duration_seconds_count{{route=\"{route}\"}}")
}

#[test]
fn requests_are_counted_by_route_and_class() {
    counted(Proto::Http1);
}

#[test]
fn requests_are_counted_by_route_and_class_over_http2() {
    counted(Proto::H2c);
}

fn counted(proto: Proto) {
    let up = TestUpstream::start();
    let dead = free_port(); // nothing listens there
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}{}routes:\n{}{}{}",
        ports.head(),
        service("api", &[up.port()]),
        service("gone", &[dead]),
        proxy_route("api", "/api", "api"),
        proxy_route("dead", "/dead", "gone"),
        respond_route("hello", "/hello", "hi")
    );
    let gw = start(ports, &yaml);

    let get = |path: &str| proto.get(ports.addr(), path, &[]).status;
    for i in 0..3 {
        assert_eq!(get(&format!("/api/ok/{i}")), 200);
    }
    assert_eq!(get("/api/x?status=404"), 404);
    assert_eq!(get("/api/x?status=429"), 429);
    assert_eq!(get("/api/x?status=503"), 503);
    assert_eq!(
        proto
            .request(ports.addr(), "POST", "/api/post", &[], b"body")
            .status,
        200
    );
    for _ in 0..2 {
        assert_eq!(get("/hello"), 200);
    }
    for _ in 0..2 {
        assert_eq!(get("/dead/x"), 502);
    }
    assert_eq!(get("/nowhere"), 404);

    // Counters are bumped after the response is written: wait for the last.
    let expected = [
        (requests("api", "2xx"), 4.0),
        (requests("api", "4xx"), 2.0),
        (requests("api", "5xx"), 1.0),
        (requests("api", "3xx"), 0.0),
        (requests("hello", "2xx"), 2.0),
        (requests("hello", "5xx"), 0.0),
        (requests("dead", "5xx"), 2.0),
        (requests("dead", "2xx"), 0.0),
        (duration_count("api"), 7.0),
        (duration_count("hello"), 2.0),
        (duration_count("dead"), 2.0),
        (
            "sluicegate_request_duration_seconds_bucket{route=\"api\",le=\"+Inf\"}".to_string(),
            7.0,
        ),
        (
            format!(
                "sluicegate_upstream_connect_errors_total{{service=\"gone\",endpoint=\"127.0.0.1:{dead}\"}}"
            ),
            2.0,
        ),
        (
            format!(
                "sluicegate_upstream_connect_errors_total{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
                up.port()
            ),
            0.0,
        ),
        (
            format!(
                "sluicegate_upstream_requests_total{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
                up.port()
            ),
            7.0,
        ),
        (
            format!(
                "sluicegate_upstream_in_flight{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
                up.port()
            ),
            0.0,
        ),
        (
            "sluicegate_unrouted_requests_total{class=\"4xx\"}".to_string(),
            1.0,
        ),
        // Exact codes: each one seen, nothing else.
        (responses("api", "200"), 4.0),
        (responses("api", "404"), 1.0),
        (responses("api", "429"), 1.0),
        (responses("api", "503"), 1.0),
        (responses("hello", "200"), 2.0),
        (responses("dead", "502"), 2.0),
        (
            "sluicegate_unrouted_responses_total{code=\"404\"}".to_string(),
            1.0,
        ),
        // Upstream response times, by service and by endpoint.
        (
            "sluicegate_upstream_service_response_seconds_count{service=\"api\"}".to_string(),
            7.0,
        ),
        (
            "sluicegate_upstream_service_response_seconds_count{service=\"gone\"}".to_string(),
            0.0,
        ),
        (
            format!(
                "sluicegate_upstream_response_seconds_count{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
                up.port()
            ),
            7.0,
        ),
        (
            format!(
                "sluicegate_upstream_response_seconds_bucket{{service=\"api\",endpoint=\"127.0.0.1:{}\",le=\"+Inf\"}}",
                up.port()
            ),
            7.0,
        ),
    ];
    let mut text = String::new();
    let settled = wait_until(Duration::from_secs(3), || {
        text = metrics(ports);
        expected
            .iter()
            .all(|(series, want)| sample(&text, series) == Some(*want))
    });
    if !settled {
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(series, want)| sample(&text, series) != Some(*want))
            .map(|(series, want)| format!("{series}: want {want}, got {:?}", sample(&text, series)))
            .collect();
        check(
            &gw,
            false,
            &format!("wrong samples:\n{}\n\n{text}", wrong.join("\n")),
        );
    }
    assert_eq!(up.requests_seen(), 7);
    // Only codes that were answered have a series; an endpoint that never
    // answered has no histogram of its own.
    let codes = text
        .lines()
        .filter(|l| l.starts_with("sluicegate_responses_total{"))
        .count();
    assert_eq!(codes, 6, "{text}");
    assert!(
        !text.contains(&format!(
            "sluicegate_upstream_response_seconds_count{{service=\"gone\",endpoint=\"127.0.0.1:{dead}\"}}"
        )),
        "{text}"
    );

    // The histogram's buckets are cumulative and end at the count.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("sluicegate_request_duration_seconds_bucket{route=\"api\","))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.len() > 2, "{text}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert!(
        sample(
            &text,
            "sluicegate_request_duration_seconds_sum{route=\"api\"}"
        )
        .unwrap()
            > 0.0
    );
}

#[test]
fn metrics_is_prometheus_text_with_type_lines() {
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let _gw = start(ports, &yaml);
    let resp = http_get(ports.admin_addr(), "/metrics", &[]);
    assert_eq!(resp.status, 200);
    assert!(
        resp.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        resp.headers
    );
    let text = resp.body_str();
    for family in [
        "sluicegate_requests_total counter",
        "sluicegate_request_duration_seconds histogram",
        "sluicegate_client_connections gauge",
        "sluicegate_upstream_connect_errors_total counter",
        "sluicegate_upstream_pool_idle_connections gauge",
        "sluicegate_upstream_in_flight gauge",
        "sluicegate_config_reloads_total counter",
        "sluicegate_config_reload_failures_total counter",
        "sluicegate_responses_total counter",
        "sluicegate_upstream_response_seconds histogram",
        "sluicegate_upstream_service_response_seconds histogram",
        "sluicegate_config_generation gauge",
        "sluicegate_build_info gauge",
        "process_cpu_seconds_total counter",
        "process_resident_memory_bytes gauge",
        "process_open_fds gauge",
        "process_max_fds gauge",
        "process_start_time_seconds gauge",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family}\n")),
            "no TYPE line for {family}:\n{text}"
        );
    }
    // Every sample line is `name{labels} value` or `name value`.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
    }
    assert_eq!(http_get(ports.admin_addr(), "/nope", &[]).status, 404);
}

#[test]
fn client_connection_gauge_follows_open_connections() {
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let gw = start(ports, &yaml);
    let gauge = || metric(ports, "sluicegate_client_connections");
    let settled = wait_until(Duration::from_secs(3), || gauge() == 0.0);
    check(&gw, settled, "readiness probe connections still counted");

    let mut clients: Vec<KeepAliveClient> = (0..3)
        .map(|_| KeepAliveClient::connect(ports.addr()).unwrap())
        .collect();
    for c in &mut clients {
        assert_eq!(c.get("/hello").unwrap().status, 200);
    }
    let three = wait_until(Duration::from_secs(3), || gauge() == 3.0);
    check(
        &gw,
        three,
        &format!("gauge {} with 3 open connections", gauge()),
    );

    drop(clients.pop());
    let two = wait_until(Duration::from_secs(3), || gauge() == 2.0);
    check(
        &gw,
        two,
        &format!("gauge {} after closing one of 3", gauge()),
    );
    drop(clients);
    let none = wait_until(Duration::from_secs(3), || gauge() == 0.0);
    check(&gw, none, &format!("gauge {} after closing all", gauge()));
    assert!(metric(ports, "sluicegate_client_connections_accepted_total") >= 3.0);
}

#[test]
fn healthz_reports_the_config_generation() {
    let ports = Ports::new();
    let config = |body: &str| {
        format!(
            "{}reload: {{ watch: false }}\nroutes:\n{}",
            ports.head(),
            respond_route("hello", "/hello", body)
        )
    };
    let gw = start(ports, &config("one"));
    for _ in 0..3 {
        assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    }

    let resp = http_get(ports.admin_addr(), "/healthz", &[]);
    assert_eq!(resp.status, 200);
    assert!(
        resp.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        resp.headers
    );
    let doc: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
    let first = doc["config_generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("no config_generation in {doc}"));

    gw.write_config(&config("two"));
    gw.reload_signal();
    let bumped = wait_generation_above(ports, first, Duration::from_secs(3));
    check(
        &gw,
        bumped,
        "config_generation did not increase after a reload",
    );
    assert_eq!(generation(ports), first + 1);
    assert_eq!(http_get(ports.addr(), "/hello", &[]).body_str(), "two");
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 1.0);
    // The reload kept the route's counters.
    let counted = wait_until(Duration::from_secs(2), || {
        metric(ports, &requests("hello", "2xx")) == 4.0
    });
    check(&gw, counted, "route counters reset by the reload");

    // A refused reload leaves the generation alone.
    gw.write_config("listen: nonsense\n");
    gw.reload_signal();
    let counted = wait_until(Duration::from_secs(3), || {
        metric(ports, "sluicegate_config_reload_failures_total") == 1.0
    });
    check(&gw, counted, "refused reload not counted");
    assert_eq!(generation(ports), first + 1);
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 1.0);
}

#[test]
fn in_flight_gauge_counts_a_slow_request() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}",
        ports.head(),
        service("api", &[up.port()]),
        proxy_route("api", "/api", "api")
    );
    let gw = start(ports, &yaml);
    let series = format!(
        "sluicegate_upstream_in_flight{{service=\"api\",endpoint=\"127.0.0.1:{}\"}}",
        up.port()
    );
    let addr = ports.addr();
    let slow = std::thread::spawn(move || http_get(addr, "/api/slow?delay=600", &[]).status);
    let busy = wait_until(Duration::from_secs(3), || metric(ports, &series) == 1.0);
    check(&gw, busy, "in-flight gauge not 1 during a slow request");
    assert_eq!(slow.join().unwrap(), 200);
    let idle = wait_until(Duration::from_secs(3), || metric(ports, &series) == 0.0);
    check(&gw, idle, "in-flight gauge not back to 0");
}

/// The process families read /proc of the gateway itself: descriptors
/// follow its open connections, memory and CPU are its own, the start
/// time is when it started; `sluicegate_build_info` names its version.
#[test]
fn process_metrics_describe_the_gateway_process() {
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let before_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let gw = start(ports, &yaml);
    let text = metrics(ports);
    let get = |text: &str, name: &str| {
        sample(text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let start_time = get(&text, "process_start_time_seconds");
    assert!(
        (start_time - before_start).abs() < 5.0,
        "started at {start_time}, test began {before_start}"
    );
    let rss = get(&text, "process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 4e9, "rss {rss}");
    assert!(get(&text, "process_cpu_seconds_total") >= 0.0);
    let max = get(&text, "process_max_fds");
    let fds = get(&text, "process_open_fds");
    assert!(fds >= 3.0 && fds < max, "{fds} of {max}");
    let version = format!(
        "sluicegate_build_info{{version=\"{}\",",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&version), "{text}");

    // 20 open client connections: 20 more descriptors in the gateway.
    let conns: Vec<_> = (0..20)
        .map(|_| std::net::TcpStream::connect(ports.addr()).unwrap())
        .collect();
    let mut now = 0.0;
    let grew = wait_until(Duration::from_secs(3), || {
        now = get(&metrics(ports), "process_open_fds");
        now >= fds + 20.0
    });
    check(
        &gw,
        grew,
        &format!("open fds {fds} -> {now} with 20 connections"),
    );
    drop(conns);
}
