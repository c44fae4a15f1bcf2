//! Global limits against a real `redis-server` on loopback: three gateways
//! share one plan of 100/s (admitted requests over 10 s within 5% of it), a
//! quota survives a gateway restart, a Redis restart under load moves the
//! limit to each instance's local share and back, and a Redis Cluster of
//! three masters serves the same leases. Also: a burst after a pause, a
//! stopping gateway's lease given back, `cluster.redis` changed by a
//! reload, `password_file` against `requirepass`, TLS with a private CA.
//! Quotas hold exactly: a global quota of 20 on three gateways admits 20
//! under requests in turn and at once, and none more after all three
//! restart. A route limit per header, and one per token claim, counted
//! globally on two gateways.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluicegate_testkit::{
    free_port, http_get, Gateway, KeepAliveClient, RedisCluster, RedisServer, RedisTls,
};

mod ops_common;
mod tls_common;

const KEY: &str = "key-aaaa-0123456789";

fn bin() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_sluicegate"))
}

/// A gateway with one `auth: app_key` route answered by the gateway, one
/// app on `plan`, and `cluster.redis` (`cluster`: a Redis Cluster).
struct Node {
    gw: Gateway,
    port: u16,
    admin: u16,
}

fn start(redis_url: &str, cluster: bool, plan: &str) -> Node {
    start_with(&format!("url: \"{redis_url}\", cluster: {cluster}"), plan)
}

/// The config of a node: `redis` is the body of `cluster.redis`.
fn config(port: u16, admin: u16, redis: &str, plan: &str) -> String {
    format!(
        r#"listen: ["127.0.0.1:{port}"]
workers: 1
admin: {{ listen: "127.0.0.1:{admin}" }}
log: {{ level: info, access: off }}
reload: {{ watch: false }}
routes:
  - name: hello
    match: {{ path_prefix: / }}
    respond: {{ status: 200, body: "ok" }}
    auth: app_key
plans:
  p: {{ {plan} }}
apps:
  - id: shop
    keys: ["{KEY}"]
    plan: p
cluster: {{ redis: {{ {redis} }} }}
"#
    )
}

fn start_with(redis: &str, plan: &str) -> Node {
    let node = spawn_node(redis, plan);
    // The plane has reached Redis once (its first heartbeat).
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.metric("sluicegate_cluster_redis_calls_total") < Some(1.0) {
        assert!(Instant::now() < deadline, "the plane never reached redis");
        thread::sleep(Duration::from_millis(20));
    }
    node
}

/// A node started, not waited for.
fn spawn_node(redis: &str, plan: &str) -> Node {
    let (port, admin) = (free_port(), free_port());
    let gw = Gateway::start(bin(), &config(port, admin, redis, plan), &[port, admin]);
    Node { gw, port, admin }
}

impl Node {
    /// Failed calls to Redis so far.
    fn redis_errors(&self) -> Option<f64> {
        self.metric("sluicegate_cluster_redis_errors_total")
    }

    fn metric(&self, name: &str) -> Option<f64> {
        let body = http_get(("127.0.0.1", self.admin), "/metrics", &[]).body_str();
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The plane has had its first answer and seen the first snapshot
    /// (a second heartbeat has begun): a new limit has its credit.
    fn settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.metric("sluicegate_cluster_redis_calls_total") < Some(2.0) {
            assert!(Instant::now() < deadline, "no second call to redis");
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(self.metric("sluicegate_cluster_redis_up"), Some(1.0));
    }

    fn wait_metric(&self, name: &str, want: f64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.metric(name) == Some(want) {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// Counts of 200 and 429 answers.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    limited: AtomicU64,
    other: AtomicU64,
}

/// Sends requests to `port` at `per_sec` for as long as `run` is set,
/// counting into `tally` while `counting` is set.
fn drive(
    port: u16,
    per_sec: u64,
    run: Arc<AtomicBool>,
    counting: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut c = KeepAliveClient::connect(("127.0.0.1", port)).expect("connect");
        let gap = Duration::from_nanos(1_000_000_000 / per_sec);
        let mut next = Instant::now();
        while run.load(Ordering::Relaxed) {
            let status = match c.request("GET", "/x", &[("X-App-Key", KEY)], b"") {
                Ok(r) => r.status,
                Err(_) => {
                    c = KeepAliveClient::connect(("127.0.0.1", port)).expect("reconnect");
                    0
                }
            };
            if counting.load(Ordering::Relaxed) {
                match status {
                    200 => &tally.ok,
                    429 => &tally.limited,
                    _ => &tally.other,
                }
                .fetch_add(1, Ordering::Relaxed);
            }
            next += gap;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
        }
    })
}

/// Admitted requests over `secs` s with each node driven at `per_node`
/// requests a second, after `warm` of load (the burst spent).
fn admitted(nodes: &[&Node], per_node: u64, warm: Duration, secs: u64) -> (u64, u64, f64) {
    let run = Arc::new(AtomicBool::new(true));
    let counting = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let drivers: Vec<_> = nodes
        .iter()
        .map(|n| {
            drive(
                n.port,
                per_node,
                run.clone(),
                counting.clone(),
                tally.clone(),
            )
        })
        .collect();
    let calls = || -> f64 {
        nodes
            .iter()
            .filter_map(|n| n.metric("sluicegate_cluster_redis_calls_total"))
            .sum()
    };
    thread::sleep(warm);
    let before = calls();
    counting.store(true, Ordering::Relaxed);
    thread::sleep(Duration::from_secs(secs));
    counting.store(false, Ordering::Relaxed);
    let made = calls() - before;
    run.store(false, Ordering::Relaxed);
    for d in drivers {
        d.join().unwrap();
    }
    assert_eq!(tally.other.load(Ordering::Relaxed), 0, "only 200 and 429");
    (
        tally.ok.load(Ordering::Relaxed),
        tally.limited.load(Ordering::Relaxed),
        made,
    )
}

#[test]
fn three_gateways_share_a_global_plan() {
    let redis = RedisServer::start();
    let plan = "rate: 100/s, burst: 20, scope: global";
    let nodes: Vec<Node> = (0..3).map(|_| start(&redis.url(), false, plan)).collect();
    for n in &nodes {
        assert!(n.wait_metric("sluicegate_cluster_instances", 3.0, Duration::from_secs(5)));
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    // 3 x 70/s = 210/s offered against a plan of 100/s, 10 s counted.
    let (ok, limited, calls) = admitted(&refs, 70, Duration::from_secs(2), 10);
    eprintln!("admitted {ok}, refused {limited}, redis calls {calls}");
    assert!(
        (950..=1050).contains(&ok),
        "admitted {ok} of a plan of 1000 in 10 s (refused {limited})"
    );
    assert!(
        limited > 800,
        "the load was over the plan: {limited} refused"
    );
}

#[test]
fn a_quota_survives_a_gateway_restart() {
    let redis = RedisServer::start();
    let plan = "quota: 10/day, scope: global";
    let send = |n: &Node, count: usize| {
        let mut c = KeepAliveClient::connect(("127.0.0.1", n.port)).unwrap();
        (0..count)
            .filter(|_| {
                thread::sleep(Duration::from_millis(20));
                c.request("GET", "/x", &[("X-App-Key", KEY)], b"")
                    .unwrap()
                    .status
                    == 200
            })
            .count()
    };
    let first = start(&redis.url(), false, plan);
    assert_eq!(send(&first, 6), 6);
    // A graceful stop gives what its lease holds back to Redis.
    stop_all(vec![first]);
    let second = start(&redis.url(), false, plan);
    // Four are left, exactly: nothing is admitted on credit.
    assert_eq!(send(&second, 10), 4);
}

/// Stops nodes gracefully (they give their leases back), all at once.
fn stop_all(nodes: Vec<Node>) {
    for n in &nodes {
        n.gw.terminate();
    }
    for mut n in nodes {
        assert!(
            n.gw.wait_exit(Duration::from_secs(10)).is_some(),
            "a gateway did not stop"
        );
    }
}

/// Three nodes on one plan with a global quota of 20 a day, each counting
/// the three instances.
fn quota_nodes(redis: &RedisServer) -> Vec<Node> {
    let plan = "quota: 20/day, scope: global";
    let nodes: Vec<Node> = (0..3).map(|_| start(&redis.url(), false, plan)).collect();
    for n in &nodes {
        assert!(n.wait_metric("sluicegate_cluster_instances", 3.0, Duration::from_secs(5)));
    }
    nodes
}

/// `count` requests one at a time, in turn over `nodes`: how many were
/// admitted (every other answer must be a 429).
fn in_turn(nodes: &[Node], count: usize) -> usize {
    let mut clients: Vec<KeepAliveClient> = nodes
        .iter()
        .map(|n| KeepAliveClient::connect(("127.0.0.1", n.port)).unwrap())
        .collect();
    let mut ok = 0;
    for i in 0..count {
        let k = i % clients.len();
        let r = clients[k]
            .request("GET", "/x", &[("X-App-Key", KEY)], b"")
            .unwrap();
        match r.status {
            200 => ok += 1,
            429 => {}
            s => panic!("request {i}: status {s}"),
        }
    }
    ok
}

/// `count` requests at once, spread over `nodes`, each on its own
/// connection: how many were admitted (every other answer must be a 429).
fn at_once(nodes: &[Node], count: usize) -> usize {
    let start = Arc::new(std::sync::Barrier::new(count));
    let threads: Vec<_> = (0..count)
        .map(|i| {
            let port = nodes[i % nodes.len()].port;
            let start = start.clone();
            thread::spawn(move || {
                let mut c = KeepAliveClient::connect(("127.0.0.1", port)).unwrap();
                start.wait();
                c.request("GET", "/x", &[("X-App-Key", KEY)], b"")
                    .unwrap()
                    .status
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    statuses.iter().filter(|s| **s == 200).count()
}

/// The issue's case: three gateways sharing Redis, requests in turn. The
/// quota of 20 admits 20, not 23; restarted, the three admit none.
#[test]
fn a_global_quota_holds_exactly_in_turn_and_after_restarts() {
    let redis = RedisServer::start();
    let nodes = quota_nodes(&redis);
    assert_eq!(in_turn(&nodes, 36), 20);
    stop_all(nodes);
    let nodes = quota_nodes(&redis);
    assert_eq!(in_turn(&nodes, 9), 0, "admitted after the restart");
}

/// Sixty requests at once over three gateways: exactly 20 admitted; and
/// none after all three restart.
#[test]
fn a_global_quota_holds_exactly_under_concurrent_requests() {
    let redis = RedisServer::start();
    let nodes = quota_nodes(&redis);
    assert_eq!(at_once(&nodes, 60), 20);
    // Requests found their lease empty and waited for Redis (and are
    // counted), since nothing is admitted on credit.
    let waited: f64 = nodes
        .iter()
        .map(|n| n.metric("sluicegate_cluster_quota_waits_total").unwrap())
        .sum();
    assert!(waited >= 3.0, "{waited} waited");
    // What is left of Redis's counter: the whole quota, used.
    let used: Vec<String> = redis
        .cli(&["--scan", "--pattern", "sg:*:q:*"])
        .lines()
        .map(|k| redis.cli(&["get", k]).trim().to_string())
        .collect();
    assert_eq!(used, ["20"]);
    stop_all(nodes);
    let nodes = quota_nodes(&redis);
    assert_eq!(at_once(&nodes, 30), 0, "admitted after the restart");
}

/// A node with `routes` (the YAML under `routes:`) and no apps.
fn start_routes(redis_url: &str, routes: &str) -> Node {
    let (port, admin) = (free_port(), free_port());
    let yaml = format!(
        r#"listen: ["127.0.0.1:{port}"]
workers: 1
admin: {{ listen: "127.0.0.1:{admin}" }}
log: {{ level: info, access: off }}
reload: {{ watch: false }}
routes:
{routes}cluster: {{ redis: {{ url: "{redis_url}" }} }}
"#
    );
    let node = Node {
        gw: Gateway::start(bin(), &yaml, &[port, admin]),
        port,
        admin,
    };
    node.settled();
    node
}

/// What voids a global rate's tight bound in one run on a busy machine,
/// both documented: a key of one gateway not asked for as long as the
/// plane's idle time (that gateway's share of the burst comes back on
/// credit: "one burst after a pause"), or a Redis call that failed (the
/// gateway falls back to its local share).
struct Noise {
    errors: Vec<Option<f64>>,
    last: std::collections::HashMap<(usize, usize), Instant>,
    longest: Duration,
}

/// A key's pause the plane may have taken for idle (its idle time is 1 s;
/// it looks every 10 ms).
const PAUSE: Duration = Duration::from_millis(800);

impl Noise {
    fn start(nodes: &[Node]) -> Noise {
        Noise {
            errors: nodes.iter().map(Node::redis_errors).collect(),
            last: Default::default(),
            longest: Duration::ZERO,
        }
    }

    /// A request for `key` on `node` is about to be sent.
    fn sending(&mut self, node: usize, key: usize) {
        let now = Instant::now();
        if let Some(t) = self.last.insert((node, key), now) {
            self.longest = self.longest.max(now - t);
        }
    }

    /// `Err` with the reason when the run was not quiet.
    fn quiet(&self, nodes: &[Node]) -> Result<(), String> {
        let errors: Vec<Option<f64>> = nodes.iter().map(Node::redis_errors).collect();
        if errors != self.errors {
            return Err(format!(
                "redis calls failed: {:?} -> {errors:?}",
                self.errors
            ));
        }
        if self.longest >= PAUSE {
            return Err(format!("a key paused {:?}", self.longest));
        }
        Ok(())
    }
}

/// Makes `run` (a fresh Redis and fresh gateways each time) until one run
/// is quiet ([`Noise`]), at most three times; its bounds are asserted on
/// that run.
fn until_quiet(mut run: impl FnMut() -> Result<(), String>) {
    for n in 0..3 {
        match run() {
            Ok(()) => return,
            Err(why) => eprintln!("run {n} not quiet, made again: {why}"),
        }
    }
    panic!("no quiet run in three: the machine stalled or redis failed in each");
}

/// Two gateways, one limit per tenant header counted in Redis: each
/// tenant gets about its 20 across both (a credit of one request per
/// instance at most beyond), independently of the other tenant. And a
/// global limit per client address.
#[test]
fn a_global_limit_per_header_on_two_gateways() {
    until_quiet(global_limit_per_header);
}

fn global_limit_per_header() -> Result<(), String> {
    let redis = RedisServer::start();
    let routes =
        "  - name: ip\n    match: { path_prefix: /ip }\n    respond: { status: 200 }\n    \
                  limit: { rate: 5/h, scope: global }\n  \
                  - name: t\n    match: { path_prefix: / }\n    respond: { status: 200 }\n    \
                  limit: { rate: 20/h, per: \"header:x-tenant\", scope: global }\n";
    let nodes: Vec<Node> = (0..2).map(|_| start_routes(&redis.url(), routes)).collect();
    for n in &nodes {
        assert!(n.wait_metric("sluicegate_cluster_instances", 2.0, Duration::from_secs(5)));
    }
    let mut clients: Vec<KeepAliveClient> = nodes
        .iter()
        .map(|n| KeepAliveClient::connect(("127.0.0.1", n.port)).unwrap())
        .collect();
    let mut noise = Noise::start(&nodes);
    let mut ok = [0usize; 2];
    for i in 0..160 {
        let tenant = i % 2;
        let node = (i / 2) % 2;
        let t = ["acme", "globex"][tenant];
        noise.sending(node, tenant);
        let r = clients[node]
            .request("GET", "/x", &[("X-Tenant", t)], b"")
            .unwrap();
        match r.status {
            200 => ok[tenant] += 1,
            429 => {}
            s => panic!("request {i}: status {s}"),
        }
        thread::sleep(Duration::from_millis(5));
    }
    // Per client address, globally too: one client over both gateways.
    let mut ip_ok = 0;
    for i in 0..60 {
        noise.sending(i % 2, 2);
        let r = clients[i % 2].request("GET", "/ip", &[], b"").unwrap();
        ip_ok += usize::from(r.status == 200);
        thread::sleep(Duration::from_millis(10));
    }
    noise.quiet(&nodes)?;
    for (t, n) in ok.iter().enumerate() {
        assert!(
            (18..=22).contains(n),
            "tenant {t}: {n} admitted of 20 ({ok:?})"
        );
    }
    assert!(
        (5..=7).contains(&ip_ok),
        "{ip_ok} admitted of 5 for one address"
    );
    // One bucket per tenant in Redis, none per gateway.
    let buckets = redis.cli(&["--scan", "--pattern", "sg:{rk:t:header:x-tenant:*"]);
    assert_eq!(buckets.lines().count(), 2, "{buckets}");
    Ok(())
}

/// Two gateways, one limit per tenant claim of the caller's JWT counted
/// in Redis: one app's tokens for two tenants get about 20 each across
/// both gateways, independently; a token without the claim counts under
/// the shared "absent" key.
#[test]
fn a_global_limit_per_claim_on_two_gateways() {
    until_quiet(global_limit_per_claim);
}

fn global_limit_per_claim() -> Result<(), String> {
    use jsonwebtoken::{encode, EncodingKey, Header};
    const SECRET: &str = "claim-limit-secret-0123456789abcdef";
    let redis = RedisServer::start();
    let routes = format!(
        "  - name: c\n    match: {{ path_prefix: / }}\n    respond: {{ status: 200 }}\n    \
         auth: jwt\n    limit: {{ rate: 20/h, per: \"claim:tenant\", scope: global }}\n\
         apps:\n  - id: shop\n    jwt: {{ alg: HS256, secret: \"{SECRET}\" }}\n"
    );
    let nodes: Vec<Node> = (0..2)
        .map(|_| start_routes(&redis.url(), &routes))
        .collect();
    for n in &nodes {
        assert!(n.wait_metric("sluicegate_cluster_instances", 2.0, Duration::from_secs(5)));
    }
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let token = |claims: serde_json::Value| encode(&Header::default(), &claims, &key).unwrap();
    let tokens = [
        token(serde_json::json!({ "sub": "shop", "tenant": "acme", "exp": exp })),
        token(serde_json::json!({ "sub": "shop", "tenant": 42, "exp": exp })),
        token(serde_json::json!({ "sub": "shop", "exp": exp })),
    ];
    let mut clients: Vec<KeepAliveClient> = nodes
        .iter()
        .map(|n| KeepAliveClient::connect(("127.0.0.1", n.port)).unwrap())
        .collect();
    let mut noise = Noise::start(&nodes);
    let mut ok = [0usize; 3];
    for i in 0..180 {
        let t = i % 3;
        let bearer = format!("Bearer {}", tokens[t]);
        noise.sending((i / 3) % 2, t);
        let r = clients[(i / 3) % 2]
            .request("GET", "/x", &[("Authorization", &bearer)], b"")
            .unwrap();
        match r.status {
            200 => ok[t] += 1,
            429 => {}
            s => panic!("request {i}: status {s}"),
        }
        thread::sleep(Duration::from_millis(5));
    }
    noise.quiet(&nodes)?;
    for (t, n) in ok.iter().enumerate() {
        assert!(
            (18..=22).contains(n),
            "token {t}: {n} admitted of 20 ({ok:?})"
        );
    }
    // One bucket per tenant value and one for the absent claim.
    let buckets = redis.cli(&["--scan", "--pattern", "sg:{rk:c:claim:tenant:*"]);
    assert_eq!(buckets.lines().count(), 3, "{buckets}");
    // Without a token: refused by auth, never counted.
    let r = clients[0].request("GET", "/x", &[], b"").unwrap();
    assert_eq!(r.status, 401);
    Ok(())
}

#[test]
fn a_redis_restart_under_load_falls_back_and_recovers() {
    let mut redis = RedisServer::start();
    let plan = "rate: 50/s, burst: 10, scope: global, on_failure: local";
    let node = start(&redis.url(), false, plan);
    let run = Arc::new(AtomicBool::new(true));
    let counting = Arc::new(AtomicBool::new(true));
    let tally = Arc::new(Tally::default());
    let d = drive(node.port, 100, run.clone(), counting.clone(), tally.clone());
    thread::sleep(Duration::from_secs(2));
    redis.stop();
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 0.0, Duration::from_secs(5)));
    let during = tally.ok.load(Ordering::Relaxed);
    thread::sleep(Duration::from_secs(2));
    let admitted_down = tally.ok.load(Ordering::Relaxed) - during;
    redis.restart();
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 1.0, Duration::from_secs(5)));
    let back = tally.ok.load(Ordering::Relaxed);
    thread::sleep(Duration::from_secs(2));
    let admitted_back = tally.ok.load(Ordering::Relaxed) - back;
    run.store(false, Ordering::Relaxed);
    d.join().unwrap();
    // Alone, this instance's share is the whole plan: about 50/s either way.
    assert!(
        (70..=130).contains(&admitted_down),
        "down: {admitted_down} in 2 s"
    );
    assert!(
        (70..=130).contains(&admitted_back),
        "back: {admitted_back} in 2 s"
    );
    assert!(node.metric("sluicegate_cluster_fallback_requests_total{mode=\"local\"}") > Some(0.0));
    let log = node.gw.stderr() + &node.gw.stdout();
    assert!(log.contains("redis unreachable"), "{log}");
    assert!(log.contains("redis reachable again"), "{log}");
    assert_eq!(tally.other.load(Ordering::Relaxed), 0);
}

#[test]
fn deny_refuses_while_redis_is_away() {
    let mut redis = RedisServer::start();
    let node = start(
        &redis.url(),
        false,
        "rate: 50/s, scope: global, on_failure: deny",
    );
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 1.0, Duration::from_secs(5)));
    redis.stop();
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 0.0, Duration::from_secs(5)));
    let r = http_get(("127.0.0.1", node.port), "/x", &[("X-App-Key", KEY)]);
    assert_eq!(r.status, 429);
    redis.restart();
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 1.0, Duration::from_secs(5)));
    let r = http_get(("127.0.0.1", node.port), "/x", &[("X-App-Key", KEY)]);
    assert_eq!(r.status, 200);
}

#[test]
fn a_redis_cluster_of_three_masters() {
    let cluster = RedisCluster::start();
    let plan = "rate: 100/s, burst: 20, scope: global";
    let nodes: Vec<Node> = (0..2).map(|_| start(&cluster.url(), true, plan)).collect();
    for n in &nodes {
        assert!(n.wait_metric("sluicegate_cluster_redis_up", 1.0, Duration::from_secs(5)));
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    let (ok, _, _) = admitted(&refs, 100, Duration::from_secs(1), 5);
    assert!((450..=550).contains(&ok), "admitted {ok} of 500 in 5 s");
    // The limit's key lives on one of the masters.
    let found = cluster
        .nodes
        .iter()
        .any(|n| n.cli(&["-c", "exists", "sg:{shop}:*:p"]).trim() == "1");
    assert!(found, "the bucket is in the cluster");
}

/// Sends `count` requests at once on one connection: the statuses.
fn burst(port: u16, count: usize) -> Vec<u16> {
    let mut c = KeepAliveClient::connect(("127.0.0.1", port)).unwrap();
    (0..count)
        .map(|_| {
            c.request("GET", "/x", &[("X-App-Key", KEY)], b"")
                .unwrap()
                .status
        })
        .collect()
}

/// The bucket of the app's plan in Redis: its tokens.
fn tokens(redis: &RedisServer) -> f64 {
    let out = redis.cli(&["hget", "sg:{shop}:*:p", "tok"]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("no bucket: {out:?}"))
}

#[test]
fn a_burst_after_a_pause_is_admitted() {
    let redis = RedisServer::start();
    // A slow rate: the burst is what the bucket holds.
    let node = start(&redis.url(), false, "rate: 10/s, burst: 20, scope: global");
    assert_eq!(burst(node.port, 1), [200]);
    thread::sleep(Duration::from_millis(200));
    // Idle for longer than the plane waits before giving a lease back.
    thread::sleep(Duration::from_millis(2500));
    let statuses = burst(node.port, 30);
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    assert!(
        statuses[..20].iter().all(|&s| s == 200),
        "a burst of 20 after a pause: {statuses:?}"
    );
    // Not more than the bucket: its 20, one on credit, what 10/s refills.
    assert!(ok <= 22, "{ok} of 30 admitted: {statuses:?}");
    // And the credit is repaid: the bucket in Redis is spent.
    thread::sleep(Duration::from_millis(100));
    assert!(tokens(&redis) < 3.0, "bucket left: {}", tokens(&redis));
}

#[test]
fn a_stopping_gateway_gives_its_lease_back() {
    let redis = RedisServer::start();
    // Refilled at 1/s: what is in the bucket is what was not spent.
    let mut node = start(&redis.url(), false, "rate: 1/s, burst: 100, scope: global");
    assert!(node.wait_metric("sluicegate_cluster_instances", 1.0, Duration::from_secs(5)));
    spend_30(&node, &redis);
    // Stopped before the lease would go back for being idle.
    node.gw.terminate();
    assert!(node.gw.wait_exit(Duration::from_secs(10)).is_some());
    let left = tokens(&redis);
    assert!(
        left >= 69.0,
        "after the stop the bucket holds {left} (30 spent of 100)"
    );
    let log = node.gw.stderr() + &node.gw.stdout();
    assert!(log.contains("leases given back"), "{log}");
    // And the fleet no longer counts it.
    assert_eq!(redis.cli(&["zcard", "sluicegate:instances"]).trim(), "0");
}

/// Spends 30 of a bucket of 100 refilled at 1/s, at 100/s: the plane,
/// leasing ahead of the demand, then holds more than was spent.
fn spend_30(node: &Node, redis: &RedisServer) {
    let mut c = KeepAliveClient::connect(("127.0.0.1", node.port)).unwrap();
    for _ in 0..30 {
        let r = c.request("GET", "/x", &[("X-App-Key", KEY)], b"").unwrap();
        assert_eq!(r.status, 200);
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(100));
    let held = 100.0 - 30.0 - tokens(redis);
    assert!(held >= 5.0, "the lease held {held}");
}

#[test]
fn an_upgrade_gives_the_old_process_lease_back() {
    let redis = RedisServer::start();
    let plan = "rate: 1/s, burst: 100, scope: global";
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("handover.sock");
    let extra = ["--handover-socket", sock.to_str().unwrap()];
    let (port, admin) = (free_port(), free_port());
    let yaml = config(port, admin, &format!("url: \"{}\"", redis.url()), plan);
    let mut gw = Gateway::spawn_args(bin(), &yaml, &extra);
    gw.wait_ready(&[port, admin], Duration::from_secs(10))
        .unwrap();
    let mut old = Node { gw, port, admin };
    old.settled();
    spend_30(&old, &redis);
    let upgrade = [extra[0], extra[1], "--upgrade"];
    let new = Gateway::spawn_args(bin(), &yaml, &upgrade);
    let exited = old.gw.wait_exit(Duration::from_secs(15));
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}\n{}",
        new.stderr()
    );
    // The new process has taken nothing yet (its limits start on credit).
    let left = tokens(&redis);
    assert!(left >= 69.0, "after the upgrade the bucket holds {left}");
    let log = old.gw.stderr() + &old.gw.stdout();
    assert!(log.contains("leases given back"), "{log}");
    assert_eq!(redis.cli(&["zcard", "sluicegate:instances"]).trim(), "1");
    let r = http_get(("127.0.0.1", port), "/x", &[("X-App-Key", KEY)]);
    assert_eq!(r.status, 200);
}

#[test]
fn a_reload_moves_the_leases_to_a_new_redis() {
    let (first, second) = (RedisServer::start(), RedisServer::start());
    let plan = "rate: 100/s, burst: 20, scope: global";
    let node = start(&first.url(), false, plan);
    assert_eq!(burst(node.port, 1), [200]);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(first.cli(&["exists", "sg:{shop}:*:p"]).trim(), "1");
    let redis = format!("url: \"{}\"", second.url());
    node.gw
        .write_config(&config(node.port, node.admin, &redis, plan));
    node.gw.reload_signal();
    let deadline = Instant::now() + Duration::from_secs(5);
    while second.cli(&["zcard", "sluicegate:instances"]).trim() != "1" {
        assert!(
            Instant::now() < deadline,
            "the plane never reached the new redis"
        );
        thread::sleep(Duration::from_millis(20));
    }
    // The old Redis is left (heartbeat taken out), the new one leases.
    assert_eq!(first.cli(&["zcard", "sluicegate:instances"]).trim(), "0");
    let statuses = burst(node.port, 10);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    thread::sleep(Duration::from_millis(200));
    assert_eq!(second.cli(&["exists", "sg:{shop}:*:p"]).trim(), "1");
    let log = node.gw.stderr() + &node.gw.stdout();
    assert!(log.contains("cluster.redis changed"), "{log}");
}

#[test]
fn password_file_against_requirepass() {
    let redis = RedisServer::start_args(&["--requirepass", "s3cret-pw"]);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::write(&good, "s3cret-pw\n").unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "wrong\n").unwrap();
    let redis_yaml = |f: &std::path::Path| {
        format!(
            "url: \"{}\", password_file: \"{}\"",
            redis.url(),
            f.display()
        )
    };
    let plan = "rate: 100/s, scope: global, on_failure: deny";
    let node = start_with(&redis_yaml(&good), plan);
    node.settled();
    assert_eq!(burst(node.port, 3), [200, 200, 200]);
    drop(node);
    // A wrong password: Redis counts as unreachable, the log says why and
    // which mode is in force, and `deny` refuses.
    let node = spawn_node(&redis_yaml(&bad), plan);
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 0.0, Duration::from_secs(5)));
    assert_eq!(burst(node.port, 1), [429]);
    let log = node.gw.stderr() + &node.gw.stdout();
    assert!(log.contains("redis unreachable"), "{log}");
    assert!(log.contains("Password authentication failed"), "{log}");
}

#[test]
fn tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    tls_common::make_ca(dir.path(), "ca", "Redis Test CA");
    let san = Some("IP:127.0.0.1");
    tls_common::make_leaf(dir.path(), "ca", "redis", "redis", san, "serverAuth");
    let tls = RedisTls {
        cert: dir.path().join("redis.pem"),
        key: dir.path().join("redis.key"),
        ca: dir.path().join("ca.pem"),
    };
    let redis = RedisServer::start_tls(tls.clone());
    let plain = redis.url().replace("rediss://", "redis://");
    let plan = "rate: 100/s, scope: global, on_failure: deny";
    // tls: true on a redis:// URL, the test CA trusted.
    let with_ca = format!(
        "url: \"{plain}\", tls: true, ca_file: \"{}\"",
        tls.ca.display()
    );
    let node = start_with(&with_ca, plan);
    node.settled();
    assert_eq!(burst(node.port, 3), [200, 200, 200]);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(redis.cli(&["exists", "sg:{shop}:*:p"]).trim(), "1");
    drop(node);
    // The system's roots do not know the test CA: the handshake fails,
    // said in the log, and deny refuses.
    let node = spawn_node(&format!("url: \"{}\"", redis.url()), plan);
    assert!(node.wait_metric("sluicegate_cluster_redis_up", 0.0, Duration::from_secs(5)));
    assert_eq!(burst(node.port, 1), [429]);
    let log = node.gw.stderr() + &node.gw.stdout();
    assert!(log.contains("redis unreachable"), "{log}");
    assert!(log.to_lowercase().contains("certificate"), "{log}");
}
