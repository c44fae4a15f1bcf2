//! Tests of `parse` and `load` on whole configs: valid ones here, errors and hostile input in submodules.

mod aggregate;
mod apps;
mod authz;
mod cache;
mod cluster;
mod compress;
mod errors;
mod fallback;
mod fault;
mod hostile;
mod mirror;
mod resilience;
mod rollout;
mod source;
mod split;
mod template;
mod tls;
mod trace;

use std::time::Duration;

use crate::*;

/// Every error of `text`, formatted "LINE:COL: message".
pub(crate) fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(config) => panic!("expected errors, parsed {config:#?}"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// The only error of `text`.
pub(crate) fn error(text: &str) -> String {
    let all = errors(text);
    assert_eq!(all.len(), 1, "expected one error, got {all:#?}");
    all.into_iter().next().unwrap_or_default()
}

pub(crate) fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(config) => config,
        Err(errors) => panic!("expected a valid config, got {errors:#?}"),
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const FULL: &str = r#"
listen: ["127.0.0.1:8080", "[::1]:8080"]
admin: { listen: "127.0.0.1:9901" }
workers: 4
busy_poll: 200us
limits: { max_connections: 20000, max_header_bytes: 32768, max_body_bytes: 1MiB }
timeouts: { client_header: 5s, client_body: 1m30s, keepalive: 2m, drain: 250ms, client_write: 45s }
log: { level: debug, access: /var/log/sluicegate/access.log }
reload: { watch: false, poll_interval: 1500us }
services:
  - name: web
    endpoints: ["127.0.0.1:9001", { addr: "127.0.0.1:9002", weight: 2 }]
    balance: hash
    hash_key: "header:X-User-Id"
    max_connections_per_endpoint: 64
    timeouts: { connect: 500ms, response_header: 2s, idle: 1h }
  - name: api.v2
    endpoints:
      - addr: "[::1]:9003"
    forwarded_headers: false
routes:
  - name: web
    match: { host: "*.Example.com", path_prefix: /web/, methods: [get, POST], headers: { X-Env: canary } }
    service: web
    strip_prefix: true
  - name: hello
    match: { path: /hello }
    respond: { status: 201, body: "hello\n", headers: { Content-Type: text/plain } }
  - name: re
    match: { host: api.example.com, path_regex: '^/v[0-9]+/' }
    service: api.v2
  - name: fallback
    service: api.v2
"#;

#[test]
fn full_example_parses_to_the_expected_model() {
    let expected = Config {
        listen: vec![
            Listener::plain("127.0.0.1:8080".parse().unwrap()),
            Listener::plain("[::1]:8080".parse().unwrap()),
        ],
        admin: Some(AdminConfig {
            listen: "127.0.0.1:9901".parse().unwrap(),
            tokens: Vec::new(),
            read_only: false,
            tls: None,
        }),
        workers: Some(4),
        busy_poll: Duration::from_micros(200),
        io_uring: None,
        limits: Limits {
            max_connections: 20_000,
            max_header_bytes: 32_768,
            max_body_bytes: 1 << 20,
            max_tunnels: 10_000,
        },
        timeouts: ClientTimeouts {
            client_header: secs(5),
            client_body: secs(90),
            keepalive: secs(120),
            drain: Duration::from_millis(250),
            client_write: secs(45),
            tls_handshake: secs(10),
            tunnel_idle: secs(3600),
        },
        log: LogConfig {
            level: "debug".into(),
            format: LogFormat::Text,
            access: AccessLog::File("/var/log/sluicegate/access.log".into()),
        },
        reload: ReloadConfig {
            watch: false,
            poll_interval: Duration::from_micros(1500),
        },
        services: vec![
            Service {
                name: "web".into(),
                endpoints: vec![
                    Endpoint {
                        name: "127.0.0.1:9001".into(),
                        addr: "127.0.0.1:9001".parse().unwrap(),
                        weight: 1,
                    },
                    Endpoint {
                        name: "127.0.0.1:9002".into(),
                        addr: "127.0.0.1:9002".parse().unwrap(),
                        weight: 2,
                    },
                ],
                discovery: Default::default(),
                balance: Balance::Hash,
                hash_key: HashKey::Header("x-user-id".into()),
                max_connections_per_endpoint: 64,
                timeouts: UpstreamTimeouts {
                    connect: Duration::from_millis(500),
                    response_header: secs(2),
                    response_body: secs(15),
                    idle: secs(3600),
                    request: secs(30),
                },
                health: None,
                retries: Default::default(),
                breaker: None,
                ejection: Some(crate::model::Ejection::default()),
                forwarded_headers: true,
                tls: None,
                protocol: UpstreamProtocol::Http1,
            },
            Service {
                name: "api.v2".into(),
                endpoints: vec![Endpoint {
                    name: "[::1]:9003".into(),
                    addr: "[::1]:9003".parse().unwrap(),
                    weight: 1,
                }],
                discovery: Default::default(),
                balance: Balance::RoundRobin,
                hash_key: HashKey::ClientIp,
                max_connections_per_endpoint: 512,
                timeouts: UpstreamTimeouts::default(),
                health: None,
                retries: Default::default(),
                breaker: None,
                ejection: Some(crate::model::Ejection::default()),
                forwarded_headers: false,
                tls: None,
                protocol: UpstreamProtocol::Http1,
            },
        ],
        routes: vec![
            Route {
                name: "web".into(),
                matcher: Match {
                    host: Some(HostMatch::Suffix(".example.com".into())),
                    path: PathMatch::Prefix("/web".into()),
                    methods: vec!["GET".into(), "POST".into()],
                    headers: vec![("x-env".into(), ValueMatch::Exact("canary".into()))],
                    query: vec![],
                    cookies: vec![],
                },
                action: Action::Proxy {
                    service: "web".into(),
                    strip_prefix: true,
                    split: None,
                },
                auth: Auth::None,
                limit: None,
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
                cors: None,
                ip: IpRules::default(),
                rewrite: None,
                fault: None,
                mirror: None,
                fallback: None,
                cache: None,
                rollout: None,
                compress: None,
                scopes: Vec::new(),
                forward_auth: None,
                ext_authz: None,
                upgrade: vec!["websocket".to_string()],
            },
            Route {
                name: "hello".into(),
                matcher: Match {
                    host: None,
                    path: PathMatch::Exact("/hello".into()),
                    methods: vec![],
                    headers: vec![],
                    query: vec![],
                    cookies: vec![],
                },
                action: Action::Respond {
                    status: 201,
                    body: "hello\n".into(),
                    headers: vec![("Content-Type".into(), "text/plain".into())],
                },
                auth: Auth::None,
                limit: None,
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
                cors: None,
                ip: IpRules::default(),
                rewrite: None,
                fault: None,
                mirror: None,
                fallback: None,
                cache: None,
                rollout: None,
                compress: None,
                scopes: Vec::new(),
                forward_auth: None,
                ext_authz: None,
                upgrade: vec!["websocket".to_string()],
            },
            Route {
                name: "re".into(),
                matcher: Match {
                    host: Some(HostMatch::Exact("api.example.com".into())),
                    path: PathMatch::Regex("^/v[0-9]+/".into()),
                    methods: vec![],
                    headers: vec![],
                    query: vec![],
                    cookies: vec![],
                },
                action: Action::Proxy {
                    service: "api.v2".into(),
                    strip_prefix: false,
                    split: None,
                },
                auth: Auth::None,
                limit: None,
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
                cors: None,
                ip: IpRules::default(),
                rewrite: None,
                fault: None,
                mirror: None,
                fallback: None,
                cache: None,
                rollout: None,
                compress: None,
                scopes: Vec::new(),
                forward_auth: None,
                ext_authz: None,
                upgrade: vec!["websocket".to_string()],
            },
            Route {
                name: "fallback".into(),
                matcher: Match {
                    host: None,
                    path: PathMatch::Any,
                    methods: vec![],
                    headers: vec![],
                    query: vec![],
                    cookies: vec![],
                },
                action: Action::Proxy {
                    service: "api.v2".into(),
                    strip_prefix: false,
                    split: None,
                },
                auth: Auth::None,
                limit: None,
                request_headers: HeaderOps::default(),
                response_headers: HeaderOps::default(),
                cors: None,
                ip: IpRules::default(),
                rewrite: None,
                fault: None,
                mirror: None,
                fallback: None,
                cache: None,
                rollout: None,
                compress: None,
                scopes: Vec::new(),
                forward_auth: None,
                ext_authz: None,
                upgrade: vec!["websocket".to_string()],
            },
        ],
        plans: vec![],
        apps: vec![],
        app_key: AppKeySources::default(),
        ip: IpRules::default(),
        jwt: JwtSettings::default(),
        trusted_proxies: vec![],
        http2: Http2Settings::default(),
        config_source: None,
        cluster: ClusterConfig::default(),
        request_id: RequestIdConfig::default(),
        tracing: None,
        dns: Default::default(),
        cache: None,
    };
    assert_eq!(ok(FULL), expected);
}

#[test]
fn minimal_config_takes_the_defaults() {
    let c = ok("listen: 0.0.0.0:8080\n");
    assert_eq!(
        c.listen,
        vec![Listener::plain("0.0.0.0:8080".parse().unwrap())]
    );
    assert_eq!(c.admin, None);
    assert_eq!(c.workers, None);
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.timeouts, ClientTimeouts::default());
    assert_eq!(c.log, LogConfig::default());
    assert_eq!(c.reload, ReloadConfig::default());
    assert!(c.services.is_empty() && c.routes.is_empty());
}

#[test]
fn quickstart_example_is_valid() {
    let c = ok(include_str!("../../../../examples/quickstart.yaml"));
    assert_eq!(
        c.listen,
        vec![Listener::plain("127.0.0.1:8080".parse().unwrap())]
    );
    assert_eq!(
        c.admin.map(|a| a.listen.to_string()).as_deref(),
        Some("127.0.0.1:9901")
    );
    assert_eq!(c.log.access, AccessLog::Stdout);
    let api = &c.services[0];
    assert_eq!(api.name, "api");
    let addrs: Vec<String> = api.endpoints.iter().map(|e| e.addr.to_string()).collect();
    assert_eq!(addrs, ["127.0.0.1:9001", "127.0.0.1:9002"]);
    let hello = c.routes.iter().find(|r| r.name == "hello").unwrap();
    assert_eq!(hello.matcher.path, PathMatch::Exact("/hello".into()));
    assert_eq!(
        hello.action,
        Action::Respond {
            status: 200,
            body: "hello\n".into(),
            headers: vec![("content-type".into(), "text/plain".into())],
        }
    );
    let route = c.routes.iter().find(|r| r.name == "api").unwrap();
    assert_eq!(route.matcher.path, PathMatch::Prefix("/api".into()));
    assert_eq!(
        route.action,
        Action::Proxy {
            service: "api".into(),
            strip_prefix: true,
            split: None,
        }
    );
}

#[test]
fn accepted_spellings() {
    let c = ok("listen: [\"127.0.0.1:1\"]\nworkers: auto\nlog: { access: off, level: WARN }\n");
    assert_eq!(c.workers, None);
    assert_eq!(c.log.access, AccessLog::Off);
    assert_eq!(c.log.level, "warn");
    let c = ok("listen: 127.0.0.1:1\nlog: { access: false }\nlimits: { max_body_bytes: 512 }\n");
    assert_eq!(c.log.access, AccessLog::Off);
    assert_eq!(c.limits.max_body_bytes, 512);
    let c = ok("listen: 127.0.0.1:1\nlimits: { max_header_bytes: 64KiB, max_body_bytes: 1GB }\n");
    assert_eq!(c.limits.max_header_bytes, 65_536);
    assert_eq!(c.limits.max_body_bytes, 1_000_000_000);
    // Null values count as absent; the prefix "/" stays "/".
    let c = ok("listen: 127.0.0.1:1\nadmin:\nroutes:\n  - name: r\n    match: { path_prefix: /, methods: GET }\n    respond: {}\n");
    assert_eq!(c.admin, None);
    assert_eq!(c.routes[0].matcher.path, PathMatch::Prefix("/".into()));
    assert_eq!(c.routes[0].matcher.methods, ["GET"]);
    assert_eq!(
        c.routes[0].action,
        Action::Respond {
            status: 200,
            body: String::new(),
            headers: vec![]
        }
    );
    // Host names in endpoints are resolved while serving, not at load.
    let c = ok("listen: 127.0.0.1:1\nservices: [{ name: s, endpoints: [\"localhost:9001\"], balance: hash, hash_key: path }]\n");
    assert!(c.services[0].endpoints.is_empty());
    assert_eq!(c.services[0].discovery.names[0].host, "localhost");
    assert_eq!(c.services[0].discovery.names[0].port, 9001);
    assert_eq!(c.services[0].hash_key, HashKey::Path);
}

#[test]
fn load_reports_the_path() {
    let dir = std::env::temp_dir().join(format!("sluicegate-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.yaml");
    std::fs::write(&good, "listen: 127.0.0.1:8080\n").unwrap();
    assert!(load(&good).is_ok());

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "listen: nowhere\nworkers: -1\n").unwrap();
    let err = load(&bad).unwrap_err();
    let p = bad.display();
    assert_eq!(
        err.to_string(),
        format!(
            "{p}:1:9: listen: bad address \"nowhere\" (expected IP:port, e.g. 127.0.0.1:8080 or [::1]:8080)\n\
             {p}:2:10: workers: expected \"auto\" or a positive integer, found \"-1\""
        )
    );
    assert!(matches!(err, LoadError::Invalid { ref errors, .. } if errors.len() == 2));

    let missing = dir.join("missing.yaml");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read: ", missing.display())),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parse_never_resolves_host_names() {
    let text = "listen: 127.0.0.1:8080\nservices:\n  - name: s\n    endpoints: [\"backend.example:80\", \"127.0.0.1:81\"]\nroutes:\n  - name: all\n    service: s\n";
    let t0 = std::time::Instant::now();
    let c = crate::parse(text).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(c.services[0].discovery.names[0].host, "backend.example");
    assert_eq!(c.services[0].endpoints[0].name, "127.0.0.1:81");
}
