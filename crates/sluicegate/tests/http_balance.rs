//! Load balancing end to end over three test upstreams with ids: smooth
//! weighted round robin, consistent hashing on a header, least connections,
//! weighted random.

mod http_common;

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use http_common::{wait_until, Gw};
use sluicegate_testkit::{http_get, KeepAliveClient, TestUpstream};

fn three() -> [TestUpstream; 3] {
    [
        TestUpstream::start_with_id("a"),
        TestUpstream::start_with_id("b"),
        TestUpstream::start_with_id("c"),
    ]
}

/// A gateway with one service over `ups` (weights given) and `extra` keys.
fn gateway(ups: &[TestUpstream], weights: &[u32], extra: &str) -> Gw {
    let endpoints: Vec<String> = ups
        .iter()
        .zip(weights)
        .map(|(u, w)| format!("{{ addr: \"{}\", weight: {w} }}", u.addr()))
        .collect();
    Gw::start(&format!(
        r#"services:
  - name: pool
    endpoints: [{}]
{extra}routes:
  - name: all
    match: {{ path_prefix: / }}
    service: pool
"#,
        endpoints.join(", ")
    ))
}

fn id(resp: &sluicegate_testkit::Response) -> String {
    resp.header("x-upstream-id")
        .expect("response carries x-upstream-id")
        .to_string()
}

#[test]
fn round_robin_weights_1_1_2_split_400_requests_exactly() {
    let ups = three();
    let gw = gateway(&ups, &[1, 1, 2], "    balance: round_robin\n");
    let mut counts: HashMap<String, usize> = HashMap::new();
    // Four client connections (possibly on different workers), 100 each.
    for _ in 0..4 {
        let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
        for _ in 0..100 {
            let resp = client.get("/x").unwrap();
            assert_eq!(resp.status, 200);
            *counts.entry(id(&resp)).or_default() += 1;
        }
    }
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    assert_eq!(get("a") + get("b") + get("c"), 400);
    for (k, want) in [("a", 100usize), ("b", 100), ("c", 200)] {
        assert!(
            get(k).abs_diff(want) <= 2,
            "{k}: {} requests, want {want} +-2 ({counts:?})",
            get(k)
        );
    }
    // The upstreams agree with what the client saw.
    assert_eq!(ups[2].requests_seen(), get("c"));
}

#[test]
fn round_robin_interleaves_smoothly() {
    let ups = three();
    let gw = gateway(&ups, &[1, 1, 2], "    balance: round_robin\n");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let seq: Vec<String> = (0..40).map(|_| id(&client.get("/x").unwrap())).collect();
    // Smooth weighted round robin never sends the light ones twice in a row,
    // and every window of 4 consecutive picks holds c twice.
    for w in seq.windows(2) {
        assert!(!(w[0] == w[1] && w[0] != "c"), "{seq:?}");
    }
    for w in seq.windows(4) {
        let cs = w.iter().filter(|x| *x == "c").count();
        assert_eq!(cs, 2, "window {w:?} in {seq:?}");
    }
}

#[test]
fn hash_on_header_sends_each_user_to_one_instance() {
    let ups = three();
    let gw = gateway(
        &ups,
        &[1, 1, 1],
        "    balance: hash\n    hash_key: \"header:x-user-id\"\n",
    );
    let mut owner: HashMap<String, String> = HashMap::new();
    for round in 0..4 {
        for user in 0..20 {
            let user = format!("user-{user}");
            // Fresh connections, so requests land on both workers.
            let resp = http_get(gw.addr(), &format!("/x?r={round}"), &[("X-User-Id", &user)]);
            assert_eq!(resp.status, 200);
            let got = id(&resp);
            let first = owner.entry(user.clone()).or_insert_with(|| got.clone());
            assert_eq!(*first, got, "{user} moved between instances");
        }
    }
    let mut used: Vec<&String> = owner.values().collect();
    used.sort();
    used.dedup();
    assert!(used.len() >= 2, "20 users all hashed to {used:?}");
}

#[test]
fn least_conn_prefers_idle_instances_while_one_is_busy() {
    let ups = three();
    let gw = gateway(&ups, &[1, 1, 1], "    balance: least_conn\n");
    let addr = gw.addr();
    let slow = thread::spawn(move || http_get(addr, "/x?delay=1500", &[]));
    assert!(
        wait_until(Duration::from_secs(3), || ups
            .iter()
            .map(TestUpstream::requests_seen)
            .sum::<usize>()
            == 1),
        "slow request never arrived"
    );
    let busy = ups
        .iter()
        .find(|u| u.requests_seen() == 1)
        .and_then(TestUpstream::id)
        .unwrap()
        .to_string();
    let mut picked: HashMap<String, usize> = HashMap::new();
    for _ in 0..12 {
        // Fresh connections: the busy instance may be known to another worker.
        let resp = http_get(gw.addr(), "/x", &[]);
        assert_eq!(resp.status, 200);
        *picked.entry(id(&resp)).or_default() += 1;
    }
    assert_eq!(
        picked.get(&busy),
        None,
        "busy instance {busy} got requests: {picked:?}"
    );
    assert_eq!(picked.len(), 2, "both idle instances used: {picked:?}");
    let slow = slow.join().unwrap();
    assert_eq!(id(&slow), busy);
}

#[test]
fn random_uses_both_upstreams_in_proportion() {
    let ups = [
        TestUpstream::start_with_id("a"),
        TestUpstream::start_with_id("b"),
    ];
    let gw = gateway(&ups, &[1, 3], "    balance: random\n");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..400 {
        let resp = client.get("/x").unwrap();
        assert_eq!(resp.status, 200);
        *counts.entry(id(&resp)).or_default() += 1;
    }
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    assert_eq!(get("a") + get("b"), 400);
    // 100 expected for "a" (a standard deviation near 9): both used, and
    // the weights show.
    assert!((50..=150).contains(&get("a")), "{counts:?}");
    assert_eq!(ups[0].requests_seen(), get("a"));
}
