//! The discovery plane: a background task (never on a worker) that
//! resolves services' host names (A and AAAA) and SRV names, each again
//! when its TTL (held within `dns.min_ttl` and `dns.max_ttl`) runs out,
//! and publishes each service's endpoint set through
//! [`Shared::apply_endpoints`]. A failed lookup keeps the last good
//! answer and is tried again after `min_ttl`; an unchanged answer changes
//! nothing. The task reads the names to resolve from the config in force
//! on every tick, so reloads that add or drop names take effect there.

pub mod jwks;
mod resolve;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_config::{DnsSettings, Endpoint};
use tokio::task::JoinSet;

use crate::snapshot::Shared;
use resolve::{Found, Query};

/// How often the task looks for answers that are due.
const TICK: Duration = Duration::from_millis(10);

/// The last good answer to a query and when to ask again.
struct Answer {
    found: Option<Found>,
    next: Instant,
    in_flight: bool,
    failing: bool,
}

/// Runs the plane for as long as the runtime runs.
pub async fn run(shared: Arc<Shared>) {
    let mut resolver: Option<(DnsSettings, resolve::Resolver)> = None;
    let mut answers: HashMap<Query, Answer> = HashMap::new();
    let mut running: JoinSet<(Query, Result<Found, String>)> = JoinSet::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retry_setup = Instant::now();
    loop {
        let (dns, targets) = tokio::select! {
            _ = tick.tick() => shared.discovery_targets(),
            Some(done) = running.join_next() => {
                let (dns, targets) = shared.discovery_targets();
                if let Ok((query, result)) = done {
                    record(&mut answers, query, result, &dns);
                    publish(&shared, &targets, &answers);
                }
                (dns, targets)
            }
        };
        if targets.is_empty() {
            answers.clear();
            continue;
        }
        if resolver.as_ref().is_none_or(|(s, _)| *s != dns) {
            if Instant::now() < retry_setup {
                continue;
            }
            match resolve::Resolver::new(&dns) {
                Ok(r) => {
                    resolver = Some((dns.clone(), r));
                    // New servers: ask everything again now.
                    for a in answers.values_mut() {
                        a.next = Instant::now();
                    }
                }
                Err(e) => {
                    tracing::warn!("discovery: cannot set up the resolver: {e}");
                    retry_setup = Instant::now() + dns.min_ttl.max(Duration::from_secs(1));
                    continue;
                }
            }
        }
        let Some((_, r)) = &resolver else { continue };
        let wanted: HashSet<Query> = targets
            .iter()
            .flat_map(|(_, d)| resolve::queries(d))
            .collect();
        answers.retain(|q, _| wanted.contains(q));
        let now = Instant::now();
        for q in wanted {
            let a = answers.entry(q.clone()).or_insert(Answer {
                found: None,
                next: now,
                in_flight: false,
                failing: false,
            });
            if a.in_flight || a.next > now {
                continue;
            }
            a.in_flight = true;
            let r = r.clone();
            running.spawn(async move {
                let result = r.resolve(&q).await;
                (q, result)
            });
        }
    }
}

/// Keeps a good answer, or the last good one after a failure.
fn record(
    answers: &mut HashMap<Query, Answer>,
    query: Query,
    result: Result<Found, String>,
    dns: &DnsSettings,
) {
    let Some(a) = answers.get_mut(&query) else {
        return;
    };
    a.in_flight = false;
    let now = Instant::now();
    match result {
        Ok(found) => {
            if a.failing {
                tracing::info!("discovery: {query} resolves again");
            }
            a.failing = false;
            a.next = now + found.ttl.clamp(dns.min_ttl, dns.max_ttl);
            a.found = Some(found);
        }
        Err(e) => {
            if !a.failing {
                tracing::warn!(
                    "discovery: {query}: {e}; keeping the last good answer ({} addresses)",
                    a.found.as_ref().map_or(0, |f| f.addrs.len())
                );
            }
            a.failing = true;
            a.next = now + dns.min_ttl;
        }
    }
}

/// Hands every service the endpoints its names resolve to now.
fn publish(
    shared: &Shared,
    targets: &[(String, sluicegate_config::Discovery)],
    answers: &HashMap<Query, Answer>,
) {
    for (service, d) in targets {
        let mut eps: Vec<Endpoint> = Vec::new();
        let mut seen: HashSet<SocketAddr> = HashSet::new();
        let mut complete = true;
        for q in resolve::queries(d) {
            match answers.get(&q).and_then(|a| a.found.as_ref()) {
                Some(found) => {
                    for &(addr, weight) in &found.addrs {
                        if seen.insert(addr) {
                            eps.push(Endpoint {
                                name: addr.to_string(),
                                addr,
                                weight,
                            });
                        }
                    }
                }
                None => complete = false,
            }
        }
        // Until every name has answered once, publish only a set that
        // adds to nothing: never empty a service on a partial start.
        if eps.is_empty() && !complete {
            continue;
        }
        eps.sort_unstable_by_key(|e| e.addr);
        if shared.apply_endpoints(service, eps) {
            tracing::info!("discovery: service {service}: endpoint set changed");
        }
    }
}
