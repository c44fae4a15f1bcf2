//! Traffic split between services (`split`, `split_by`) on the real
//! binary, over three test upstreams that name themselves: shares by
//! weight over 10,000 requests, weight 0, each kind of key sticky, pinned
//! apps, a change of weights by a reload moving about the least it can
//! while the per-service counters keep counting, the access log and
//! metrics naming the service that answered, and HTTP/2.

mod http_common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use http_common::load::id;
use http_common::{bin, service, wait_until};
use serde_json::Value;
use sluicegate_testkit::{free_port, http_get, Gateway, KeepAliveClient, Proto, TestUpstream};

const BETA_KEY: &str = "key-beta-0123456789abcdef";
const PLAIN_KEY: &str = "key-plain-0123456789abcdef";

/// A gateway on free loopback ports (listener, admin), the access log on
/// stdout when `logged`, with services a, b, c (one upstream each, named
/// by its id) and `routes`.
struct Gw {
    gw: Gateway,
    port: u16,
    admin: u16,
}

fn yaml(port: u16, admin: u16, ups: &[TestUpstream; 3], logged: bool, routes: &str) -> String {
    let access = if logged { "stdout" } else { "off" };
    format!(
        "listen: [\"127.0.0.1:{port}\"]\nworkers: 2\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
         log: {{ level: warn, access: {access} }}\nreload: {{ watch: false }}\n\
         trusted_proxies: [\"127.0.0.1/32\"]\nservices:\n{}{}{}\
         apps:\n  - {{ id: beta-co, keys: [\"{BETA_KEY}\"] }}\n  - {{ id: plain-co, keys: [\"{PLAIN_KEY}\"] }}\n{routes}",
        service("a", &[ups[0].addr()], ""),
        service("b", &[ups[1].addr()], ""),
        service("c", &[ups[2].addr()], ""),
    )
}

impl Gw {
    fn start(ups: &[TestUpstream; 3], logged: bool, routes: &str) -> Gw {
        let mut last = String::new();
        for _ in 0..3 {
            let (port, admin) = (free_port(), free_port());
            let mut gw = Gateway::spawn(bin(), &yaml(port, admin, ups, logged, routes));
            match gw.wait_ready(&[port, admin], Duration::from_secs(10)) {
                Ok(()) => return Gw { gw, port, admin },
                Err(why) => last = format!("{why}\n{}\n{}", gw.stdout(), gw.stderr()),
            }
        }
        panic!("gateway did not start: {last}");
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn metrics(&self) -> String {
        http_get(("127.0.0.1", self.admin), "/metrics", &[]).body_str()
    }

    /// The value of the metric line starting with `prefix` (labels
    /// included), if any.
    fn metric(&self, prefix: &str) -> Option<u64> {
        let text = self.metrics();
        let line = text.lines().find(|l| l.starts_with(prefix))?;
        line.rsplit(' ').next()?.parse().ok()
    }

    fn generation(&self) -> u64 {
        self.metric("sluicegate_config_generation ").unwrap_or(0)
    }

    /// Writes `routes` as the new config and reloads, waiting until it runs.
    fn reload(&self, ups: &[TestUpstream; 3], routes: &str) {
        let before = self.generation();
        self.gw
            .write_config(&yaml(self.port, self.admin, ups, false, routes));
        self.gw.reload_signal();
        assert!(
            wait_until(Duration::from_secs(10), || self.generation() > before),
            "no reload: {}",
            self.gw.stderr()
        );
    }
}

fn three() -> [TestUpstream; 3] {
    [
        TestUpstream::start_with_id("a"),
        TestUpstream::start_with_id("b"),
        TestUpstream::start_with_id("c"),
    ]
}

/// Sends `n` requests for `path` over `clients` keep-alive connections and
/// counts the answers by upstream id.
fn spread(
    addr: std::net::SocketAddr,
    path: &str,
    clients: usize,
    n: usize,
) -> HashMap<String, u64> {
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let path = path.to_string();
            thread::spawn(move || {
                let mut seen: HashMap<String, u64> = HashMap::new();
                let mut client = KeepAliveClient::connect(addr).unwrap();
                client
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                for _ in 0..n / clients {
                    let r = client.get(&path).unwrap();
                    assert_eq!(r.status, 200);
                    *seen.entry(id(&r)).or_default() += 1;
                }
                seen
            })
        })
        .collect();
    let mut all = HashMap::new();
    for t in threads {
        for (k, v) in t.join().unwrap() {
            *all.entry(k).or_default() += v;
        }
    }
    all
}

#[test]
fn weights_hold_within_two_points_over_10000_requests_and_weight_0_takes_none() {
    let ups = three();
    let gw = Gw::start(
        &ups,
        false,
        r#"routes:
  - name: w
    match: { path_prefix: /w }
    split:
      - { service: a, weight: 80 }
      - { service: b, weight: 20 }
      - { service: c, weight: 0 }
"#,
    );
    let seen = spread(gw.addr(), "/w/x", 4, 10_000);
    let get = |k: &str| seen.get(k).copied().unwrap_or(0);
    assert_eq!(get("a") + get("b"), 10_000, "{seen:?}");
    assert_eq!(get("c"), 0, "weight 0 took requests: {seen:?}");
    let share = get("a") as f64 / 10_000.0;
    assert!((share - 0.8).abs() <= 0.02, "a's share {share}: {seen:?}");
    // The metrics name the service that answered, and agree.
    for (svc, n) in [("a", get("a")), ("b", get("b")), ("c", 0)] {
        let line = format!(
            "sluicegate_split_requests_total{{route=\"w\",service=\"{svc}\",class=\"2xx\"}} {n}"
        );
        // A request is counted just after its answer is written.
        let counted = || gw.metrics().lines().any(|l| l == line);
        assert!(
            wait_until(Duration::from_secs(5), counted),
            "{line} not in metrics"
        );
    }
    let count = format!(
        "sluicegate_split_request_duration_seconds_count{{route=\"w\",service=\"b\"}} {}",
        get("b")
    );
    let counted = || gw.metrics().lines().any(|l| l == count);
    assert!(wait_until(Duration::from_secs(5), counted), "{count}");
    assert_eq!(ups[2].requests_seen(), 0);
}

/// The header (name, value) carrying the i-th client's key.
type KeyOf = fn(usize) -> (String, String);

#[test]
fn each_key_kind_keeps_a_client_on_one_service_and_pinned_apps_go_to_theirs() {
    let ups = three();
    let split = "    split: [{ service: a, weight: 1 }, { service: b, weight: 1 }]\n";
    let gw = Gw::start(
        &ups,
        false,
        &format!(
            r#"routes:
  - name: by-ip
    match: {{ path_prefix: /ip }}
{split}    split_by: client_ip
  - name: by-header
    match: {{ path_prefix: /h }}
{split}    split_by: "header:x-user"
  - name: by-cookie
    match: {{ path_prefix: /c }}
{split}    split_by: "cookie:sid"
  - name: by-param
    match: {{ path: "/u/{{uid}}/orders" }}
    rewrite: {{ regex: "^/u/", replacement: "/users/" }}
{split}    split_by: "param:uid"
  - name: by-app
    match: {{ path_prefix: /app }}
    auth: app_key
    split:
      - {{ service: a, weight: 1 }}
      - {{ service: b, weight: 1 }}
      - {{ service: c, weight: 0, apps: [beta-co] }}
    split_by: app
"#
        ),
    );
    let cases: [(&str, KeyOf); 3] = [
        ("/ip/x", |i| {
            (
                "X-Forwarded-For".into(),
                format!("10.1.{}.{}", i / 200, i % 200),
            )
        }),
        ("/h/x", |i| ("X-User".into(), format!("user-{i}"))),
        ("/c/x", |i| {
            ("Cookie".into(), format!("theme=dark; sid=s{i}"))
        }),
    ];
    for (path, key) in cases {
        let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
        let mut used: HashMap<String, u32> = HashMap::new();
        for i in 0..60 {
            let (name, value) = key(i);
            let mut first = None;
            for _ in 0..3 {
                let r = client
                    .request("GET", path, &[(&name, &value)], b"")
                    .unwrap();
                assert_eq!(r.status, 200);
                let got = id(&r);
                assert_eq!(
                    *first.get_or_insert_with(|| got.clone()),
                    got,
                    "{path} {value} moved"
                );
            }
            *used.entry(first.unwrap()).or_default() += 1;
        }
        // Sixty keys over two equal weights: both services used.
        assert_eq!(used.len(), 2, "{path}: {used:?}");
    }
    // A path parameter (hashed as routed, before the rewrite), whatever
    // else the requests carry.
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let mut used: HashMap<String, u32> = HashMap::new();
    for i in 0..60 {
        let path = format!("/u/user{i}/orders");
        let mut first = None;
        for j in 0..3 {
            let xff = format!("10.2.{i}.{j}");
            let r = client
                .request("GET", &path, &[("X-Forwarded-For", &xff)], b"")
                .unwrap();
            assert_eq!(r.status, 200);
            let got = id(&r);
            assert_eq!(
                *first.get_or_insert_with(|| got.clone()),
                got,
                "{path} moved"
            );
        }
        *used.entry(first.unwrap()).or_default() += 1;
    }
    assert_eq!(used.len(), 2, "param: {used:?}");
    // Apps: the pinned one always to c (weight 0), the other sticky on a or b.
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let mut plain = None;
    for _ in 0..20 {
        let r = client
            .request("GET", "/app/x", &[("X-App-Key", BETA_KEY)], b"")
            .unwrap();
        assert_eq!((r.status, id(&r)), (200, "c".to_string()));
        let r = client
            .request("GET", "/app/x", &[("X-App-Key", PLAIN_KEY)], b"")
            .unwrap();
        assert_eq!(r.status, 200);
        let got = id(&r);
        assert_ne!(got, "c");
        assert_eq!(*plain.get_or_insert_with(|| got.clone()), got);
    }
    assert_eq!(client.get("/app/x").unwrap().status, 401);
}

#[test]
fn a_reload_with_new_weights_moves_about_the_least_and_keeps_the_counters() {
    let ups = three();
    let routes = |a: u32, b: u32| {
        format!(
            "routes:\n  - name: canary\n    match: {{ path_prefix: / }}\n    split: [{{ service: a, weight: {a} }}, {{ service: b, weight: {b} }}]\n    split_by: \"header:x-user\"\n"
        )
    };
    let gw = Gw::start(&ups, false, &routes(90, 10));
    let owners = |gw: &Gw| -> Vec<String> {
        let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
        (0..1000)
            .map(|i| {
                let user = format!("user-{i}");
                let r = client
                    .request("GET", "/x", &[("X-User", &user)], b"")
                    .unwrap();
                assert_eq!(r.status, 200);
                id(&r)
            })
            .collect()
    };
    let before = owners(&gw);
    let b_before = gw
        .metric("sluicegate_split_requests_total{route=\"canary\",service=\"b\",class=\"2xx\"}")
        .unwrap();
    gw.reload(&ups, &routes(75, 25));
    let after = owners(&gw);
    let mut moved = 0;
    for (x, y) in before.iter().zip(&after) {
        if x != y {
            assert_eq!((x.as_str(), y.as_str()), ("a", "b"), "a key left b");
            moved += 1;
        }
    }
    // The least any scheme can move is b's gain, 15% of the keys.
    let frac = f64::from(moved) / 1000.0;
    assert!((0.10..=0.20).contains(&frac), "moved {frac}");
    let b_now = after.iter().filter(|s| *s == "b").count() as u64;
    let b_after = gw
        .metric("sluicegate_split_requests_total{route=\"canary\",service=\"b\",class=\"2xx\"}")
        .unwrap();
    assert_eq!(
        b_after,
        b_before + b_now,
        "b's counter did not carry over the reload"
    );
}

#[test]
fn the_access_log_names_the_service_and_http2_is_split_too() {
    let ups = three();
    let gw = Gw::start(
        &ups,
        true,
        r#"routes:
  - name: only-b
    match: { path_prefix: / }
    split: [{ service: a, weight: 0 }, { service: b, weight: 5 }]
"#,
    );
    for proto in [Proto::Http1, Proto::H2c] {
        let r = proto.request(gw.addr(), "GET", "/x", &[], b"");
        assert_eq!((r.status, r.header("x-upstream-id")), (200, Some("b")));
    }
    let mut lines: Vec<Value> = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        lines = gw
            .gw
            .stdout()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.len() >= 2
    }));
    for l in &lines {
        assert_eq!(l["route"], "only-b", "{l}");
        assert_eq!(l["service"], "b", "{l}");
    }
}
