//! The process-wide [`Shared`] state: the current snapshot behind an
//! `ArcSwap`, the registry under its lock and the global counters; the
//! first compile, reloads, and the Prometheus text for all of it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluicegate_config::Config;

use super::compile::compile;
use super::{Registry, Snapshot};
use crate::observe::metrics::GlobalMetrics;
use crate::upstream::endpoint::EndpointState;

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

    /// The live counters of the running snapshot (see `observe::live`).
    pub fn live(&self) -> crate::observe::live::Counts {
        let unrouted =
            std::array::from_fn(|i| self.global.unrouted.status[i].load(Ordering::Relaxed));
        crate::observe::live::read(&self.snapshot.load(), unrouted)
    }

    /// The global limits of the snapshot in force (for the Redis plane).
    pub fn globals(&self) -> Arc<crate::cluster::Globals> {
        self.snapshot.load().globals.clone()
    }

    /// Prometheus text for everything this crate counts.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(8192);
        crate::observe::metrics::render_global(&mut out, &self.global);
        if let Some(t) = &self.tracer {
            t.render(&mut out);
        }
        crate::cluster::render_metrics(&mut out);
        let Ok(reg) = self.registry.lock() else {
            return out;
        };
        crate::observe::metrics::render_routes(&mut out, reg.route_order.iter().map(|r| &**r));
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
                        .is_open(crate::apps::limit::mono_ns(std::time::Instant::now())),
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
                        .is_ejected(crate::apps::limit::mono_ns(std::time::Instant::now())),
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
}
