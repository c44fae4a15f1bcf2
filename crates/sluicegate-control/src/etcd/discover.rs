//! The etcd discovery plane: a service with `discovery.etcd` takes its
//! endpoints from the keys under a prefix that its instances write
//! themselves, each under a lease, so one that crashes is gone when its
//! lease runs out. One task per such service lists the prefix, watches it
//! from the listed revision + 1, and publishes the set through
//! [`Shared::apply_endpoints`] after every watch response (an unchanged
//! set changes nothing). While etcd is unreachable the last set stays.
//! The etcd is `cluster.etcd`, or that of `config_source.etcd`; the task
//! list follows the config in force.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::EventType;
use serde::Deserialize;
use sluicegate_config::{Endpoint, EtcdConnection};
use sluicegate_proxy::Shared;
use tokio::task::JoinHandle;

use super::watch::{list_prefix, strip, PrefixWatch, Seen, BACKOFF_FIRST, BACKOFF_MAX};

/// How often the config in force is looked at for services to follow.
const TICK: Duration = Duration::from_millis(100);

/// Largest weight a registration may give (that of the config's endpoints).
const MAX_WEIGHT: u32 = sluicegate_config::MAX_WEIGHT as u32;

/// One service's follow task; stopped when dropped.
struct Follow {
    prefix: String,
    task: JoinHandle<()>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the plane for as long as the runtime runs.
pub async fn run(shared: Arc<Shared>) {
    let mut conn: Option<EtcdConnection> = None;
    let mut follows: HashMap<String, Follow> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (now, targets) = shared.etcd_discovery_targets();
        if now != conn {
            // Another etcd: every service follows it afresh.
            follows.clear();
            conn = now;
        }
        let Some(c) = &conn else {
            follows.clear();
            continue;
        };
        follows.retain(|service, f| targets.iter().any(|(s, p)| s == service && *p == f.prefix));
        for (service, prefix) in targets {
            if follows.contains_key(&service) {
                continue;
            }
            let task = tokio::spawn(follow(
                shared.clone(),
                c.clone(),
                service.clone(),
                prefix.clone(),
            ));
            follows.insert(service, Follow { prefix, task });
        }
    }
}

/// Follows one service's prefix: connects, lists, watches; after a lost
/// connection or a compacted watch, again (with backoff).
async fn follow(shared: Arc<Shared>, conn: EtcdConnection, service: String, prefix: String) {
    let mut s = Session {
        shared,
        service,
        prefix,
        keys: BTreeMap::new(),
        refused: HashSet::new(),
        backoff: BACKOFF_FIRST,
        up: true,
    };
    loop {
        let why = s.run(&conn).await;
        if s.backoff.is_zero() {
            // Compacted: list again now.
            tracing::info!("discovery: service {}: etcd {}: {why}", s.service, s.prefix);
            s.backoff = BACKOFF_FIRST;
            continue;
        }
        // Said once when it starts failing, and again when it recovers.
        if s.up {
            tracing::warn!(
                "discovery: service {}: etcd {}: {why}; keeping the last {} registrations, retrying",
                s.service,
                s.prefix,
                s.keys.len()
            );
            s.up = false;
        }
        tokio::time::sleep(s.backoff).await;
        s.backoff = (s.backoff * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX);
    }
}

struct Session {
    shared: Arc<Shared>,
    service: String,
    prefix: String,
    /// Every key under the prefix (without it) and its value.
    keys: BTreeMap<String, Vec<u8>>,
    /// Keys whose value was refused, with that value (said once each).
    refused: HashSet<(String, Vec<u8>)>,
    backoff: Duration,
    /// The last attempt listed the prefix (or none was made yet).
    up: bool,
}

impl Session {
    /// Lists the prefix and follows its watch; returns why it stopped.
    async fn run(&mut self, conn: &EtcdConnection) -> String {
        let client = match super::client::connect(conn).await {
            Ok(c) => c,
            Err(e) => return format!("cannot connect: {e}"),
        };
        let (revision, kvs) = match list_prefix(&client, &self.prefix).await {
            Ok(l) => l,
            Err(e) => return format!("cannot list: {e}"),
        };
        if !self.up {
            self.up = true;
            tracing::info!(
                "discovery: service {}: etcd {} answers again",
                self.service,
                self.prefix
            );
        }
        self.keys = kvs.into_iter().collect();
        self.publish();
        let mut watch = match PrefixWatch::open(&client, &self.prefix, revision + 1).await {
            Ok(w) => w,
            Err(e) => return format!("cannot watch: {e}"),
        };
        self.backoff = BACKOFF_FIRST;
        loop {
            let resp = match watch.next().await {
                Ok(Seen::Response(r)) => r,
                Ok(Seen::Compacted) => {
                    // Listed again at once: not a failure (zero says so).
                    self.backoff = Duration::ZERO;
                    return "the watch's start revision was compacted; listing again".into();
                }
                Err(e) => return e,
            };
            if resp.events().is_empty() {
                continue;
            }
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let key = strip(&self.prefix, kv.key());
                if ev.event_type() == EventType::Put {
                    self.keys.insert(key, kv.value().to_vec());
                } else {
                    self.keys.remove(&key);
                }
            }
            self.publish();
        }
    }

    /// Publishes the endpoints of the keys now under the prefix.
    fn publish(&mut self) {
        let mut eps: Vec<Endpoint> = Vec::with_capacity(self.keys.len());
        let mut seen = HashSet::new();
        for (key, value) in &self.keys {
            match endpoint(value) {
                Ok(ep) => {
                    if seen.insert(ep.addr) {
                        eps.push(ep);
                    }
                }
                Err(why) => {
                    if self.refused.insert((key.clone(), value.clone())) {
                        tracing::warn!(
                            "discovery: service {}: key {}{key} refused: {why}",
                            self.service,
                            self.prefix
                        );
                    }
                }
            }
        }
        self.refused.retain(|(k, v)| self.keys.get(k) == Some(v));
        eps.sort_unstable_by_key(|e| e.addr);
        if self.shared.apply_endpoints(&self.service, eps) {
            tracing::info!(
                "discovery: service {}: endpoint set changed ({} registered under {})",
                self.service,
                self.keys.len(),
                self.prefix
            );
        }
    }
}

/// A registration's JSON form; other fields are the registrar's own.
#[derive(Deserialize)]
struct Registration {
    addr: String,
    #[serde(default = "one")]
    weight: u32,
}

fn one() -> u32 {
    1
}

/// The endpoint a key's value registers: `IP:port`, or
/// `{"addr": "IP:port", "weight": N}`.
fn endpoint(value: &[u8]) -> Result<Endpoint, String> {
    let text = std::str::from_utf8(value)
        .map_err(|_| "the value is not UTF-8".to_string())?
        .trim();
    let (addr, weight) = if text.starts_with('{') {
        let r: Registration = serde_json::from_str(text).map_err(|e| {
            format!("expected IP:port or {{\"addr\": \"IP:port\", \"weight\": N}}: {e}")
        })?;
        (r.addr, r.weight)
    } else {
        (text.to_string(), 1)
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a @ SocketAddr::V4(_) | a @ SocketAddr::V6(_)) if a.port() != 0 => a,
        _ => {
            return Err(format!(
                "bad address {addr:?} (expected IP:port, e.g. 10.0.0.5:8080 or [fd00::5]:8080)"
            ))
        }
    };
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(format!("weight {weight} is not from 1 to {MAX_WEIGHT}"));
    }
    Ok(Endpoint {
        name: addr.to_string(),
        addr,
        weight,
    })
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn registrations_are_read_or_refused_with_a_reason() {
        let e = endpoint(b"10.0.0.5:8080\n").unwrap();
        assert_eq!((e.name.as_str(), e.weight), ("10.0.0.5:8080", 1));
        let e = endpoint(br#"{"addr": "[fd00::5]:80", "weight": 7, "zone": "a"}"#).unwrap();
        assert_eq!((e.addr.to_string().as_str(), e.weight), ("[fd00::5]:80", 7));
        for (value, why) in [
            (&b"orders.internal:80"[..], "bad address"),
            (b"10.0.0.5", "bad address"),
            (b"10.0.0.5:0", "bad address"),
            (br#"{"addr": "10.0.0.5:80", "weight": 0}"#, "weight 0"),
            (br#"{"addr": "10.0.0.5:80", "weight": 1001}"#, "weight 1001"),
            (br#"{"address": "10.0.0.5:80"}"#, "missing field `addr`"),
            (b"\xff", "not UTF-8"),
        ] {
            let err = endpoint(value).unwrap_err();
            assert!(err.contains(why), "{value:?}: {err}");
        }
    }
}
