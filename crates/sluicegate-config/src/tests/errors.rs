//! Each class of config error: its line:col and a message naming the field.

use std::time::Duration;

use super::{error, errors, ok};
use crate::LogFormat;

const L: &str = "listen: 127.0.0.1:8080\n";

fn with(rest: &str) -> String {
    format!("{L}{rest}")
}

#[test]
fn unknown_key_lists_the_expected_ones() {
    let text = with("services:\n  - name: web\n    endpoint: [\"127.0.0.1:9001\"]\n");
    let all = errors(&text);
    assert_eq!(
        all,
        [
            "3:5: services[0]: missing required key \"endpoints\"",
            "4:5: unknown key \"endpoint\" in service (expected one of: name, endpoints, balance, hash_key, max_connections_per_endpoint, timeouts, health, retries, breaker, ejection, forwarded_headers, tls, protocol, discovery)",
        ]
    );
    assert_eq!(
        error("listne: 127.0.0.1:8080\nlisten: 127.0.0.1:8081\n"),
        "1:1: unknown key \"listne\" in the top level (expected one of: listen, admin, workers, busy_poll, io_uring, limits, timeouts, log, reload, services, routes, plans, apps, app_key, ip, jwt, trusted_proxies, http2, config_source, cluster, request_id, tracing, dns, cache)"
    );
    assert!(error(&with("limits: { max_conns: 1 }")).starts_with(
        "2:11: unknown key \"max_conns\" in limits (expected one of: max_connections,"
    ));
}

#[test]
fn unknown_service() {
    let text = with(
        "services:\n  - name: web\n    endpoints: [\"127.0.0.1:9001\"]\nroutes:\n  - name: a\n    service: web\n  - name: b\n    service: webb\n",
    );
    assert_eq!(
        error(&text),
        "9:14: routes[1].service: unknown service \"webb\""
    );
}

#[test]
fn wrong_integer() {
    assert_eq!(
        error(&with("limits:\n  max_connections: lots\n")),
        "3:20: limits.max_connections: expected a positive integer, found \"lots\""
    );
    assert_eq!(
        error(&with("limits: { max_connections: 0 }")),
        "2:28: limits.max_connections: expected a positive integer, found \"0\""
    );
    assert_eq!(
        error(&with("limits: { max_header_bytes: 100 }")),
        "2:29: limits.max_header_bytes: must be from 1024 (1KiB) to 1048576 (1MiB), found 100"
    );
    assert_eq!(
        error(&with("limits: { max_header_bytes: 2MiB }")),
        "2:29: limits.max_header_bytes: must be from 1024 (1KiB) to 1048576 (1MiB), found 2097152"
    );
    assert!(error(&with("limits: { max_body_bytes: 10M }"))
        .starts_with("2:27: limits.max_body_bytes: expected a size in bytes like"));
    assert_eq!(
        error(&with("workers: 0")),
        "2:10: workers: expected \"auto\" or a positive integer, found \"0\""
    );
    assert_eq!(
        error(&with("busy_poll: 2s")),
        "2:12: busy_poll: at most 1s (a worker spins this long after each request), found 2s"
    );
    assert!(error(&with("busy_poll: fast"))
        .starts_with("2:12: busy_poll: expected a duration like 250ms"));
    assert_eq!(ok(&with("busy_poll: off")).busy_poll, Duration::ZERO);
    assert_eq!(ok(&with("busy_poll: false")).busy_poll, Duration::ZERO);
    assert_eq!(
        ok(&with("busy_poll: 50us")).busy_poll,
        Duration::from_micros(50)
    );
    assert_eq!(ok(L).busy_poll, Duration::ZERO);
}

#[test]
fn wrong_types_name_expected_and_found() {
    assert_eq!(
        error("listen: { a: 1 }\n"),
        "1:9: listen: expected an address or a list of listeners, found a mapping"
    );
    assert_eq!(
        error(&with("services: { name: web }")),
        "2:11: services: expected a list of services, found a mapping"
    );
    assert_eq!(
        error(&with("limits: [1, 2]")),
        "2:9: limits: expected a mapping with keys max_connections, max_header_bytes, max_body_bytes, max_tunnels, found a list"
    );
    assert_eq!(
        error(&with("routes:\n  - name: [a]\n    respond: {}\n")),
        "3:11: routes[0].name: expected a string, found a list"
    );
    assert_eq!(
        error(&with("reload: { watch: yes }")),
        "2:18: reload.watch: expected true or false, found \"yes\""
    );
    assert_eq!(
        error(&with(
            "services:\n  - name: web\n    endpoints: [\"127.0.0.1:9001\"]\n    forwarded_headers: off\n"
        )),
        "5:24: services[0].forwarded_headers: expected true or false, found \"off\""
    );
    assert_eq!(
        error(&with("log: { level: loud }")),
        "2:15: log.level: expected one of error, warn, info, debug, trace, found \"loud\""
    );
    assert_eq!(
        error(&with("log: { format: yaml }")),
        "2:16: log.format: expected text or json, found \"yaml\""
    );
    assert_eq!(
        ok(&with("log: { format: json }")).log.format,
        LogFormat::Json
    );
    assert_eq!(
        error(&with("log: { access: true }")),
        "2:16: log.access: expected off, stdout or a file path, found \"true\""
    );
    assert_eq!(
        error("- a\n- b\n"),
        "1:1: expected a mapping with keys listen, admin, workers, busy_poll, io_uring, limits, timeouts, log, reload, services, routes, plans, apps, app_key, ip, jwt, trusted_proxies, http2, config_source, cluster, request_id, tracing, dns, cache, found a list"
    );
}

#[test]
fn missing_and_empty() {
    assert_eq!(
        error(""),
        "1:1: the config is empty: missing required key \"listen\""
    );
    assert_eq!(
        error("# nothing\n"),
        "1:1: the config is empty: missing required key \"listen\""
    );
    assert_eq!(
        error("workers: 2\n"),
        "1:1: missing required key \"listen\""
    );
    assert_eq!(
        error("listen: []\n"),
        "1:9: listen: needs at least one address"
    );
    assert_eq!(
        error(&with("services:\n  - name: s\n    endpoints: []\n")),
        "4:16: services[0].endpoints: needs at least one endpoint"
    );
    assert_eq!(
        error(&with("services:\n  - endpoints: [\"127.0.0.1:1\"]\n")),
        "3:5: services[0]: missing required key \"name\""
    );
}

#[test]
fn admin_tokens_and_loopback() {
    assert_eq!(
        error(&with("admin: { listen: \"0.0.0.0:9901\" }")),
        "2:18: admin.listen: 0.0.0.0:9901 is not a loopback address: an admin listener without admin.tokens listens on loopback only (127.0.0.1 or [::1]); add tokens to listen elsewhere"
    );
    assert_eq!(
        error(&with(
            "admin: { listen: \"127.0.0.1:9901\", tokens: [{ token_file: t, role: admin }] }"
        )),
        "2:68: admin.tokens[0].role: expected read or write, found \"admin\""
    );
    assert_eq!(
        error(&with(
            "admin: { listen: \"127.0.0.1:9901\", read_only: yes }"
        )),
        "2:47: admin.read_only: expected true or false, found \"yes\""
    );
    let c = crate::parse(&with(
        "admin:\n  listen: \"0.0.0.0:9901\"\n  read_only: true\n  tokens:\n    - { token_file: /r, role: read }\n    - { token_file: /w, role: write }",
    ))
    .unwrap();
    let admin = c.admin.unwrap();
    assert!(admin.read_only);
    assert_eq!(
        admin.tokens,
        [
            crate::AdminToken {
                token_file: "/r".into(),
                role: crate::AdminRole::Read
            },
            crate::AdminToken {
                token_file: "/w".into(),
                role: crate::AdminRole::Write
            },
        ]
    );
}

#[test]
fn addresses() {
    assert_eq!(
        error("listen: [\"127.0.0.1:8080\", \"localhost:80\"]\n"),
        "1:28: listen[1]: bad address \"localhost:80\" (expected IP:port, e.g. 127.0.0.1:8080 or [::1]:8080)"
    );
    assert_eq!(
        error("listen: [\"127.0.0.1:8080\", \"127.0.0.1:8080\"]\n"),
        "1:28: listen[1]: duplicate address 127.0.0.1:8080 (also listen[0] at 1:10)"
    );
    assert_eq!(
        error(&with("admin: { listen: \"127.0.0.1:8080\" }")),
        "2:18: admin.listen: 127.0.0.1:8080 is already used by listen[0]"
    );
    let text = with("services:\n  - name: s\n    endpoints:\n      - 127.0.0.1:9001\n      - { addr: \"127.0.0.1:9001\", weight: 2 }\n      - nosuchhost.invalid:80\n      - { addr: 127.0.0.1:9003, weight: 1001 }\n      - 127.0.0.1\n      - NoSuchHost.invalid:80\n");
    let all = errors(&text);
    // A host name is checked for form only: resolved while serving.
    assert_eq!(all.len(), 4, "{all:#?}");
    assert_eq!(all[0], "6:17: services[0].endpoints[1]: duplicate endpoint \"127.0.0.1:9001\" (same as endpoints[0])");
    assert_eq!(
        all[1],
        "8:41: services[0].endpoints[3].weight: expected an integer from 1 to 1000, found \"1001\""
    );
    assert_eq!(all[2], "9:9: services[0].endpoints[4]: bad address \"127.0.0.1\": expected host:port, e.g. 127.0.0.1:9001 or backend.local:9001");
    assert_eq!(all[3], "10:9: services[0].endpoints[5]: duplicate endpoint \"nosuchhost.invalid:80\" (same as endpoints[2])");
}

#[test]
fn discovery_and_dns() {
    let ok = ok(&with("dns: { servers: [\"127.0.0.1:5353\", \"[::1]:53\"], min_ttl: 100ms, max_ttl: 30s }\nservices:\n  - name: s\n    endpoints: [\"orders.internal:8080\", { addr: \"10.0.0.1:80\", weight: 3 }]\n  - name: t\n    discovery: { dns_srv: _http._tcp.orders.example }\n"));
    assert_eq!(ok.dns.servers.len(), 2);
    assert_eq!(ok.dns.min_ttl, Duration::from_millis(100));
    assert_eq!(ok.dns.max_ttl, Duration::from_secs(30));
    let s = &ok.services[0];
    assert_eq!(s.endpoints.len(), 1);
    assert_eq!(
        s.discovery.names,
        vec![crate::DnsName {
            host: "orders.internal".into(),
            port: 8080,
            weight: 1
        }]
    );
    assert_eq!(
        ok.services[1].discovery.dns_srv.as_deref(),
        Some("_http._tcp.orders.example")
    );
    assert!(ok.services[1].endpoints.is_empty());
    assert_eq!(
        error(&with("dns: { servers: [\"localhost:53\"] }")),
        "2:18: dns.servers[0]: bad address \"localhost:53\" (expected IP:port, e.g. 127.0.0.1:53 or [::1]:53)"
    );
    assert_eq!(
        error(&with("dns: { min_ttl: 5s, max_ttl: 1s }")),
        "2:30: dns.max_ttl: must not be shorter than min_ttl"
    );
    assert_eq!(
        error(&with("services:\n  - name: s\n    discovery: { dns_srv: \"not a name\" }\n")),
        "4:27: services[0].discovery.dns_srv: bad SRV name \"not a name\": expected e.g. _http._tcp.orders.example"
    );
    assert_eq!(
        error(&with("services:\n  - name: s\n    endpoints: []\n")),
        "4:16: services[0].endpoints: needs at least one endpoint"
    );
}

#[test]
fn discovery_from_etcd() {
    let text = with("cluster:\n  etcd: { endpoints: [\"http://127.0.0.1:2379\"] }\nservices:\n  - name: s\n    endpoints: [\"10.0.0.1:80\"]\n    discovery: { etcd: { prefix: /services/orders/ } }\n");
    let c = ok(&text);
    assert_eq!(
        c.services[0].discovery.etcd.as_deref(),
        Some("/services/orders/")
    );
    assert!(!c.services[0].discovery.uses_dns());
    assert_eq!(
        c.discovery_etcd().map(|e| e.endpoints.clone()),
        Some(vec!["http://127.0.0.1:2379".to_string()])
    );
    // config_source.etcd's connection serves when cluster.etcd is absent.
    let c = ok(&with("config_source: { etcd: { endpoints: [\"http://127.0.0.1:2379\"] } }\nservices:\n  - name: s\n    discovery: { etcd: { prefix: /services/orders/ } }\n"));
    assert!(c.discovery_etcd().is_some());
    assert_eq!(
        error(&with("services:\n  - name: s\n    discovery: { etcd: { prefix: /services/orders/ } }\n")),
        "3:3: services: service \"s\" has discovery.etcd but neither cluster.etcd nor config_source.etcd is set"
    );
    let cluster = "cluster: { etcd: { endpoints: [\"http://127.0.0.1:2379\"] } }\n";
    let cases = [
        (
            "discovery: { etcd: { prefix: services } }",
            "services[0].discovery.etcd.prefix: expected a key prefix that starts and ends with /",
        ),
        (
            "discovery: { etcd: {} }",
            "services[0].discovery.etcd: missing required key \"prefix\"",
        ),
        (
            "discovery: { etcd: { prefix: /a/, ttl: 3 } }",
            "unknown key \"ttl\" in discovery.etcd",
        ),
        (
            "discovery: {}",
            "services[0].discovery: needs dns_srv or etcd",
        ),
        (
            "discovery: { dns_srv: _http._tcp.a.example, etcd: { prefix: /a/ } }",
            "give dns_srv or etcd, not both",
        ),
        (
            "endpoints: [\"orders.internal:80\"]\n    discovery: { etcd: { prefix: /a/ } }",
            "services[0].endpoints: with discovery.etcd, endpoints beside it must be IP:port",
        ),
    ];
    for (disc, want) in cases {
        let errs = errors(&with(&format!(
            "{cluster}services:\n  - name: s\n    {disc}\n"
        )));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{disc}: {errs:?} lacks {want:?}"
        );
    }
    let errs = errors(&with(
        "cluster: { etcd: { endpoints: [\"https://a:1\"], tls: { cert: c.pem } } }\n",
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("cluster.etcd.tls: cert and key go together")),
        "{errs:?}"
    );
    let errs = errors(&with(
        "cluster: { etcd: { endpoints: [\"http://a:1\"], prefix: /x/ } }\n",
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("unknown key \"prefix\" in cluster.etcd")),
        "{errs:?}"
    );
}

#[test]
fn durations() {
    assert_eq!(
        error(&with("timeouts: { keepalive: 60 }")),
        "2:24: timeouts.keepalive: expected a duration like 250ms, 1s, 2m, 1h or 1m30s, found 60 (add a unit, e.g. 60s)"
    );
    assert_eq!(
        error(&with("reload: { poll_interval: 0s }")),
        "2:26: reload.poll_interval: duration must be greater than zero, found \"0s\""
    );
    assert_eq!(
        error(&with("services:\n  - name: s\n    endpoints: [\"127.0.0.1:1\"]\n    timeouts: { connect: fast }\n")),
        "5:26: services[0].timeouts.connect: expected a duration like 250ms, 1s, 2m, 1h or 1m30s, found \"fast\""
    );
}

#[test]
fn duplicates() {
    assert_eq!(
        error("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n"),
        "2:1: duplicate key \"listen\" in the top level (first at 1:1)"
    );
    let text = with("services:\n  - { name: a, endpoints: [\"127.0.0.1:1\"] }\n  - { name: a, endpoints: [\"127.0.0.1:2\"] }\nroutes:\n  - { name: r, service: a }\n  - { name: r, service: a }\n");
    assert_eq!(
        errors(&text),
        [
            "4:13: services[1].name: duplicate service name \"a\" (first at 3:13)",
            "7:13: routes[1].name: duplicate route name \"r\" (first at 6:13)",
        ]
    );
    assert_eq!(
        error(&with(
            "routes:\n  - name: r\n    match: { headers: { X-A: 1, x-a: 2 } }\n    respond: {}\n"
        )),
        "4:33: routes[0].match.headers: duplicate header \"x-a\" (first at 4:25)"
    );
    // Each later one names the first, not the one before it.
    let text = with("plans:\n  p: { rate: 1/s }\n  p: { rate: 2/s }\n  p: { rate: 3/s }\n");
    assert_eq!(
        errors(&text),
        [
            "4:3: plans: duplicate plan \"p\" (first at 3:3)",
            "5:3: plans: duplicate plan \"p\" (first at 3:3)",
        ]
    );
}

#[test]
fn names() {
    assert_eq!(
        error(&with(
            "services:\n  - { name: \"my service\", endpoints: [\"127.0.0.1:1\"] }\n"
        )),
        "3:13: services[0].name: bad name \"my service\": use letters, digits, '_', '.' and '-'"
    );
}

#[test]
fn balance_and_hash_key() {
    let svc = "services:\n  - name: s\n    endpoints: [\"127.0.0.1:1\"]\n";
    assert_eq!(
        error(&with(&format!("{svc}    hash_key: path\n"))),
        "5:15: services[0].hash_key: hash_key only applies with balance: hash (balance is round_robin by default)"
    );
    assert_eq!(
        error(&with(&format!("{svc}    balance: least_conn\n    hash_key: client_ip\n"))),
        "6:15: services[0].hash_key: hash_key only applies with balance: hash (balance is least_conn)"
    );
    assert_eq!(
        error(&with(&format!("{svc}    balance: randomly\n"))),
        "5:14: services[0].balance: expected one of round_robin, least_conn, p2c_ewma, hash, random, found \"randomly\""
    );
    assert_eq!(
        error(&with(&format!(
            "{svc}    balance: hash\n    hash_key: \"header:\"\n"
        ))),
        "6:15: services[0].hash_key: expected client_ip, path or header:NAME, found \"header:\""
    );
    assert_eq!(
        error(&with(&format!(
            "{svc}    max_connections_per_endpoint: -5\n"
        ))),
        "5:35: services[0].max_connections_per_endpoint: expected a positive integer, found \"-5\""
    );
}

#[test]
fn route_actions() {
    let svc = "services: [{ name: s, endpoints: [\"127.0.0.1:1\"] }]\n";
    assert_eq!(
        error(&with(&format!("{svc}routes:\n  - name: r\n"))),
        "4:5: routes[0]: missing \"service\" (where to proxy), \"split\" (services by weight), \"respond\" (what to answer) or \"aggregate\" (calls to combine)"
    );
    assert_eq!(
        error(&with(&format!(
            "{svc}routes:\n  - name: r\n    service: s\n    respond: {{}}\n"
        ))),
        "6:14: routes[0]: give either service or respond, not both"
    );
    assert_eq!(
        error(&with(&format!(
            "{svc}routes:\n  - name: r\n    service: s\n    strip_prefix: true\n"
        ))),
        "6:19: routes[0].strip_prefix: needs match.path_prefix (the prefix to strip)"
    );
    assert_eq!(
        error(&with(&format!("{svc}routes:\n  - name: r\n    match: {{ path: /a }}\n    service: s\n    strip_prefix: true\n"))),
        "7:19: routes[0].strip_prefix: needs match.path_prefix (the prefix to strip)"
    );
    assert_eq!(
        error(&with(&format!("{svc}routes:\n  - name: r\n    match: {{ path_prefix: /a }}\n    respond: {{}}\n    strip_prefix: true\n"))),
        "7:19: routes[0].strip_prefix: only applies to routes with a service"
    );
    // strip_prefix: false is harmless anywhere.
    ok(&with(&format!(
        "{svc}routes:\n  - name: r\n    service: s\n    strip_prefix: false\n"
    )));
}

#[test]
fn respond() {
    let r = |respond: &str| {
        error(&with(&format!(
            "routes:\n  - name: r\n    respond: {respond}\n"
        )))
    };
    assert_eq!(
        r("{ status: 600 }"),
        "4:24: routes[0].respond.status: expected an integer from 100 to 599, found \"600\""
    );
    assert_eq!(
        r("{ status: 204, body: x }"),
        "4:35: routes[0].respond.body: a 204 response cannot have a body"
    );
    assert_eq!(
        r("{ headers: { Content-Length: 5 } }"),
        "4:27: routes[0].respond.headers: \"Content-Length\" is set by the gateway, remove it"
    );
    assert_eq!(
        r("{ headers: { \"bad name\": 5 } }"),
        "4:27: routes[0].respond.headers: bad header name \"bad name\""
    );
    assert_eq!(r("{ headers: { x-a: \"a\\nb\" } }"), "4:32: routes[0].respond.headers.x-a: a header value must not contain control characters (such as line breaks)");
    assert_eq!(r("{ headers: [a] }"), "4:25: routes[0].respond.headers: expected a mapping of header names to values, e.g. { content-type: text/plain }, found a list");
    assert_eq!(r("hello"), "4:14: routes[0].respond: expected a mapping with keys status, body, headers, found \"hello\"");
}

#[test]
fn match_rules() {
    let m = |matcher: &str| {
        error(&with(&format!(
            "routes:\n  - name: r\n    match: {matcher}\n    respond: {{}}\n"
        )))
    };
    assert_eq!(
        m("{ path: hello }"),
        "4:20: routes[0].match.path: must start with \"/\", found \"hello\""
    );
    assert_eq!(m("{ path_prefix: \"/a?b\" }"), "4:27: routes[0].match.path_prefix: must not contain '?' or '#' (only the path is matched), found \"/a?b\"");
    assert_eq!(
        m("{ path: /a, path_prefix: /b }"),
        "4:37: routes[0].match: give only one of path, path_prefix, path_regex"
    );
    assert_eq!(
        m("{ path_regex: \"^/(a\" }"),
        "4:26: routes[0].match.path_regex: invalid regex \"^/(a\": unclosed group"
    );
    assert_eq!(m("{ host: \"example.com:8080\" }"), "4:20: routes[0].match.host: bad host \"example.com:8080\": a port is not allowed (hosts are matched without their port)");
    assert_eq!(m("{ host: \"a.*.com\" }"), "4:20: routes[0].match.host: bad host \"a.*.com\": a wildcard is only allowed as a leading \"*.\", e.g. *.example.com");
    assert_eq!(
        m("{ host: \"*\" }"),
        "4:20: routes[0].match.host: bad host \"*\": omit host to match any host"
    );
    assert_eq!(
        m("{ methods: [GET, get] }"),
        "4:29: routes[0].match.methods[1]: duplicate method GET (also methods[0])"
    );
    assert_eq!(m("{ methods: [GET, M-SEARCH] }"), "4:29: routes[0].match.methods[1]: expected an HTTP method like GET or POST, found \"M-SEARCH\"");
    assert_eq!(
        m("{ methods: [] }"),
        "4:23: routes[0].match.methods: must not be empty (omit methods to match any method)"
    );
    assert_eq!(
        m("{ headers: { \"x y\": a } }"),
        "4:25: routes[0].match.headers: bad header name \"x y\""
    );
    assert_eq!(
        m("{ headers: { x-a: [1] } }"),
        "4:30: routes[0].match.headers.x-a: expected a string, found a list"
    );
    assert_eq!(
        m("{ headers: { x-a: \"~v(1\" } }"),
        "4:30: routes[0].match.headers.x-a: invalid regex \"v(1\": unclosed group"
    );
    assert!(m("{ headers: { x-a: \"~\\\\bx\" } }").starts_with(
        "4:30: routes[0].match.headers.x-a: regex \"\\\\bx\" cannot be compiled for matching: "
    ));
    assert_eq!(
        m("{ query: { v: [1] } }"),
        "4:26: routes[0].match.query.v: expected a string, found a list"
    );
    assert_eq!(
        m("{ query: { v: \"a\\nb\" } }"),
        "4:26: routes[0].match.query.v: a query value must not contain control characters"
    );
    assert_eq!(
        m("{ query: {} }"),
        "4:21: routes[0].match.query: must not be empty (omit it to match any request)"
    );
    assert_eq!(
        m("{ query: [v] }"),
        "4:21: routes[0].match.query: expected a mapping of query parameter names to values, e.g. { version: \"2\" }, found a list"
    );
    assert_eq!(
        m("{ cookies: { \"a b\": x } }"),
        "4:25: routes[0].match.cookies: bad cookie name \"a b\""
    );
    assert_eq!(
        m("{ cookies: { beta: \"a;b\" } }"),
        "4:31: routes[0].match.cookies.beta: a cookie value must not contain spaces, '\"', ',', ';', '\\' or control characters"
    );
    assert_eq!(m("{ pth: /a }"), "4:14: unknown key \"pth\" in match (expected one of: host, path, path_prefix, path_regex, methods, headers, query, cookies)");
    assert_eq!(m("/a"), "4:12: routes[0].match: expected a mapping with keys host, path, path_prefix, path_regex, methods, headers, query, cookies, found \"/a\"");
}

#[test]
fn yaml_syntax_errors_stop_with_a_position() {
    assert_eq!(
        error("listen: [\"127.0.0.1:8080\"\nworkers: 2\n"),
        "2:1: invalid YAML: invalid indentation"
    );
    assert_eq!(
        error("listen: a: b\n"),
        "1:10: invalid YAML: mapping values are not allowed in this context"
    );
}

#[test]
fn all_errors_are_reported_sorted_by_position() {
    let text = "\
routes:
  - name: r
    service: nope
listen: [bad]
workers: many
limits: { max_connections: lots, max_body_bytes: 0 }
timeouts: { drain: 10 }
services:
  - name: s
    endpoints: [\"127.0.0.1:0\"]
    colour: blue
";
    assert_eq!(
        errors(text),
        [
            "3:14: routes[0].service: unknown service \"nope\"",
            "4:10: listen[0]: bad address \"bad\" (expected IP:port, e.g. 127.0.0.1:8080 or [::1]:8080)",
            "5:10: workers: expected \"auto\" or a positive integer, found \"many\"",
            "6:28: limits.max_connections: expected a positive integer, found \"lots\"",
            "6:50: limits.max_body_bytes: size must be greater than zero, found \"0\"",
            "7:20: timeouts.drain: expected a duration like 250ms, 1s, 2m, 1h or 1m30s, found 10 (add a unit, e.g. 10s)",
            "10:17: services[0].endpoints[0]: bad address \"127.0.0.1:0\": port 0 is not allowed",
            "11:5: unknown key \"colour\" in service (expected one of: name, endpoints, balance, hash_key, max_connections_per_endpoint, timeouts, health, retries, breaker, ejection, forwarded_headers, tls, protocol, discovery)",
        ]
    );
}
