//! The process-wide [`Shared`] state: the current snapshot behind an
//! `ArcSwap`, the registry under its lock and the global counters; the
//! first compile, reloads, and the Prometheus text for all of it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluicegate_config::Config;

use std::collections::HashSet;

use super::compile::compile;
use super::{Registry, Snapshot};
use crate::apps::{AppChange, AppTable, DeltaError};
use crate::balance::endpoint::EndpointState;
use crate::cluster::{GlobalRt, Globals, Holder};
use crate::observe::metrics::GlobalMetrics;

/// The global limits of `cur` with those of the changed apps replaced by
/// what `table` has for them (route limits and other apps' are kept).
fn changed_globals(
    cur: &Snapshot,
    table: &Arc<AppTable>,
    changes: &[AppChange<'_>],
) -> Arc<Globals> {
    if cur.globals.list.is_empty() && !table.has_global_plans() {
        return cur.globals.clone();
    }
    let mut old: HashSet<u32> = HashSet::new();
    for c in changes {
        let id = match c {
            AppChange::Upsert(a) => a.id.as_str(),
            AppChange::Remove(id) => id,
        };
        old.extend(cur.apps.slots_of_id(id));
    }
    let mut list: Vec<GlobalRt> = cur
        .globals
        .list
        .iter()
        .filter(|g| !matches!(g.holder, Holder::App(s) if old.contains(&s)))
        .cloned()
        .collect();
    for c in changes {
        if let AppChange::Upsert(a) = c {
            if let Some(app) = table.by_id(&a.id) {
                list.extend(
                    table
                        .global_slots_of(app.index)
                        .map(|(key, slot, plan)| GlobalRt {
                            key: key.into(),
                            holder: Holder::App(slot),
                            plan: plan.clone(),
                        }),
                );
            }
        }
    }
    let any_app = list.iter().any(|g| matches!(g.holder, Holder::App(_)));
    Arc::new(Globals {
        apps: any_app.then(|| table.clone()),
        list,
        // Routes (and so their limits per key) are the same.
        keyed: cur.globals.keyed.clone(),
    })
}

/// Process-wide state: the current snapshot, the registry, global counters.
#[derive(Debug)]
pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub registry: Mutex<Registry>,
    pub global: GlobalMetrics,
    /// The queue of sampled requests' spans, when `tracing` was configured
    /// at start (its exporter runs for the whole process).
    pub(crate) tracer: Option<Arc<crate::observe::trace::Tracer>>,
}

impl Shared {
    /// Compiles the first snapshot.
    pub fn new(config: &Config) -> Result<Arc<Shared>, String> {
        let mut registry = Registry::default();
        let snap = compile(config, &mut registry)?;
        Ok(Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(snap),
            registry: Mutex::new(registry),
            global: GlobalMetrics::default(),
            tracer: config
                .tracing
                .as_ref()
                .map(|t| Arc::new(crate::observe::trace::Tracer::new(t.queue))),
        }))
    }

    /// Compiles `config` and publishes it; on error the running snapshot stays.
    pub fn reload(&self, config: &Config) -> Result<u64, String> {
        let mut reg = self.registry.lock().map_err(|_| "registry poisoned")?;
        match compile(config, &mut reg) {
            Ok(snap) => {
                let generation = snap.generation;
                self.snapshot.store(Arc::new(snap));
                self.global.reloads_ok.fetch_add(1, Ordering::Relaxed);
                Ok(generation)
            }
            Err(e) => {
                self.global.reloads_failed.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Publishes a snapshot that is the running one with `changes` made
    /// to its apps: the router, routes, services and listeners are shared,
    /// only the shards of the apps table those apps touch are new, and
    /// apps keep their slots (plan state and counters) as on a reload.
    /// On error the running snapshot stays; [`DeltaError::NeedsFull`]
    /// asks for a whole reload instead.
    pub fn apply_apps(&self, changes: &[AppChange<'_>]) -> Result<u64, DeltaError> {
        let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let started = std::time::Instant::now();
        let cur = self.snapshot.load_full();
        let services: Vec<&str> = cur.services.iter().map(|s| &*s.name).collect();
        let generation = reg.generation + 1;
        let (table, delta) =
            cur.apps
                .with_changes(changes, &services, &mut reg.slots, generation)?;
        let table = Arc::new(table);
        let table_ms = started.elapsed().as_secs_f64() * 1e3;
        let globals = changed_globals(&cur, &table, changes);
        let snap = Snapshot {
            apps: table.clone(),
            globals,
            ..cur.next(generation)
        };
        reg.generation = generation;
        reg.slots.published_delta(&table, delta);
        reg.apps = Some(table);
        self.snapshot.store(Arc::new(snap));
        self.global.reloads_ok.fetch_add(1, Ordering::Relaxed);
        drop(cur);
        tracing::info!(
            generation,
            changes = changes.len(),
            table_ms,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "apps changed: new apps table published"
        );
        Ok(generation)
    }

    /// Checks `changes` as [`Shared::apply_apps`] would make them (ids,
    /// keys against every other app's, JWT keys) without publishing.
    pub fn check_apps(&self, changes: &[AppChange<'_>]) -> Result<(), DeltaError> {
        let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.snapshot.load_full();
        let services: Vec<&str> = cur.services.iter().map(|s| &*s.name).collect();
        let generation = reg.generation + 1;
        let (_, delta) = cur
            .apps
            .with_changes(changes, &services, &mut reg.slots, generation)?;
        reg.slots.abandoned_delta(delta);
        Ok(())
    }

    /// The live counters of the running snapshot (see `snapshot::live`).
    pub fn live(&self) -> crate::snapshot::live::Counts {
        let unrouted = self.global.unrouted.classes();
        crate::snapshot::live::read(&self.snapshot.load(), unrouted)
    }

    /// The split entries of route `route` in the running snapshot, with
    /// their weights and cumulative counters (see
    /// [`crate::snapshot::live::split`]); `None`: no such route, or no split.
    pub fn split_counts(
        &self,
        route: &str,
    ) -> Option<Vec<crate::snapshot::live::SplitEntryCounts>> {
        crate::snapshot::live::split(&self.snapshot.load(), route)
    }

    /// The global limits of the snapshot in force (for the Redis plane).
    pub fn globals(&self) -> Arc<crate::cluster::Globals> {
        self.snapshot.load().globals.clone()
    }

    /// Prometheus text for everything this crate counts.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(8192);
        crate::observe::metrics::render_global(&mut out, &self.global);
        crate::observe::process::render(&mut out);
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "# HELP sluicegate_config_generation Generation of the running config (1 at start, one more per reload or API change).\n# TYPE sluicegate_config_generation gauge\nsluicegate_config_generation {}\n",
                self.snapshot.load().generation
            ),
        );
        if let Some(t) = &self.tracer {
            t.render(&mut out);
        }
        if let Some(store) = super::cache_admin::store(&self.snapshot.load()) {
            let (bytes, objects) = store.usage();
            let evictions = store.stats.evictions.load(Ordering::Relaxed);
            let s = crate::observe::metrics::StoreUse {
                memory: store.memory,
                bytes,
                objects,
                evictions,
            };
            crate::observe::metrics::render_store(&mut out, s);
        }
        crate::cluster::render_metrics(&mut out);
        let Ok(reg) = self.registry.lock() else {
            return out;
        };
        crate::observe::metrics::render_routes(&mut out, reg.route_order.iter().map(|r| &**r));
        if !reg.split_order.is_empty() {
            crate::observe::metrics::render_splits(&mut out, reg.split_order.iter().map(|m| &**m));
        }
        if !reg.part_order.is_empty() {
            crate::observe::metrics::render_parts(&mut out, reg.part_order.iter().map(|m| &**m));
        }
        let issuers: Vec<_> = reg
            .jwt_issuers
            .iter()
            .map(|i| crate::observe::metrics::IssuerUse {
                name: i.cfg.name.clone(),
                fetches_ok: i.fetches_ok.load(Ordering::Relaxed),
                fetches_failed: i.fetches_failed.load(Ordering::Relaxed),
                refetches: i.asks.load(Ordering::Relaxed),
                introspection: i.introspect.as_ref().map(|x| x.counts()),
            })
            .collect();
        crate::observe::metrics::render_issuers(&mut out, &issuers);
        render_endpoints(&mut out, &reg.endpoint_order);
        crate::observe::metrics::render_listeners(
            &mut out,
            &reg.listeners.counters(),
            &self.snapshot.load().listeners,
        );
        if let Some(apps) = &reg.apps {
            let mut called: Vec<_> = apps
                .iter()
                .filter(|(_, s)| s.requests.load(Ordering::Relaxed) > 0)
                .collect();
            called.sort_unstable_by(|a, b| a.0.cmp(b.0));
            crate::observe::metrics::render_apps(&mut out, called.into_iter());
        }
        out
    }
}

/// Metric name, type, help text, and how to read it from an endpoint.
type EndpointFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&EndpointState) -> u64,
);

fn render_endpoints(out: &mut String, eps: &[(Arc<str>, Arc<EndpointState>)]) {
    use crate::observe::metrics::label;
    use std::fmt::Write as _;
    let families: [EndpointFamily; 10] = [
        (
            "sluicegate_upstream_requests_total",
            "counter",
            "Requests sent to an endpoint.",
            |e| e.requests.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_connect_errors_total",
            "counter",
            "Failed connection attempts to an endpoint.",
            |e| e.connect_errors.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_retries_total",
            "counter",
            "Attempts sent to an endpoint as a retry after another failed.",
            |e| e.retries.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_healthy",
            "gauge",
            "1 while an endpoint is in rotation, 0 while its health checks fail.",
            |e| u64::from(e.is_healthy()),
        ),
        (
            "sluicegate_upstream_circuit_open",
            "gauge",
            "1 while an endpoint's circuit breaker is open (not half-open).",
            |e| {
                u64::from(
                    e.breaker
                        .is_open(crate::clock::mono_ns(std::time::Instant::now())),
                )
            },
        ),
        (
            "sluicegate_upstream_circuit_opened_total",
            "counter",
            "Times an endpoint's circuit breaker opened.",
            |e| e.breaker.opened.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_ejected",
            "gauge",
            "1 while an endpoint is out of rotation after a failed connect.",
            |e| {
                u64::from(
                    e.eject
                        .is_ejected(crate::clock::mono_ns(std::time::Instant::now())),
                )
            },
        ),
        (
            "sluicegate_upstream_ejections_total",
            "counter",
            "Times an endpoint left rotation after a failed connect.",
            |e| e.eject.ejections.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_in_flight",
            "gauge",
            "Requests in flight to an endpoint.",
            |e| e.in_flight() as u64,
        ),
        (
            "sluicegate_upstream_pool_idle_connections",
            "gauge",
            "Idle keep-alive connections pooled for an endpoint, all workers.",
            |e| e.idle.load(Ordering::Relaxed).max(0) as u64,
        ),
    ];
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (svc, e) in eps {
            let _ = writeln!(
                out,
                "{name}{{service=\"{}\",endpoint=\"{}\"}} {}",
                label(svc),
                label(&e.name),
                get(e)
            );
        }
    }
    render_response_times(out, eps);
}

/// Upstream response times: one histogram per service (its endpoints'
/// summed), and one per endpoint that has answered. An endpoint costs 16
/// series only once used, so a service of many endpoints that are never
/// picked adds none; the per-service family is the one to graph when
/// endpoints come and go.
fn render_response_times(out: &mut String, eps: &[(Arc<str>, Arc<EndpointState>)]) {
    use crate::observe::metrics::{label, render_histogram, BUCKETS_US};
    use std::fmt::Write as _;
    let name = "sluicegate_upstream_service_response_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from a request sent upstream to its response head, by service.\n# TYPE {name} histogram"
    );
    let mut i = 0;
    while i < eps.len() {
        let svc = &eps[i].0;
        let mut counts = [0u64; BUCKETS_US.len() + 1];
        let mut sum_us = 0;
        while i < eps.len() && eps[i].0 == *svc {
            let (c, s) = eps[i].1.response_time.read();
            for (t, v) in counts.iter_mut().zip(c) {
                *t += v;
            }
            sum_us += s;
            i += 1;
        }
        let l = format!("service=\"{}\"", label(svc));
        render_histogram(out, name, &l, &counts, sum_us);
    }
    let name = "sluicegate_upstream_response_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from a request sent upstream to its response head, by service and endpoint (endpoints that have answered).\n# TYPE {name} histogram"
    );
    for (svc, e) in eps {
        let (counts, sum_us) = e.response_time.read();
        if counts.iter().all(|&c| c == 0) {
            continue;
        }
        let l = format!("service=\"{}\",endpoint=\"{}\"", label(svc), label(&e.name));
        render_histogram(out, name, &l, &counts, sum_us);
    }
}

#[cfg(test)]
mod apps;

#[cfg(test)]
mod tests {
    use super::Shared;

    #[test]
    fn a_reload_neither_refills_nor_empties_a_budget() {
        let config = |services: &[&str]| {
            let mut text = String::from("listen: [\"127.0.0.1:9\"]\nservices:\n");
            for s in services {
                text.push_str(&format!(
                    "  - {{ name: {s}, endpoints: [\"127.0.0.1:9\"] }}\n"
                ));
            }
            sluicegate_config::parse(&text).unwrap()
        };
        // The service `name` of the snapshot in force.
        let service = |shared: &Shared, name: &str| {
            let snap = shared.snapshot.load();
            let found = snap.services.iter().find(|s| &*s.name == name);
            found.unwrap().clone()
        };
        let shared = Shared::new(&config(&["a"])).unwrap();
        // An outage spends a's budget.
        while service(&shared, "a").retries.withdraw() {}
        // Reloads (a's retry settings unchanged, or not) keep it spent.
        shared.reload(&config(&["a", "b"])).unwrap();
        shared.reload(&config(&["b", "a"])).unwrap();
        assert!(!service(&shared, "a").retries.withdraw());
        // A service new to the config starts with a fresh budget.
        assert!(service(&shared, "b").retries.withdraw());
        // Requests still earn retries back.
        for _ in 0..5 {
            service(&shared, "a").retries.deposit();
        }
        assert!(service(&shared, "a").retries.withdraw());
    }
}
