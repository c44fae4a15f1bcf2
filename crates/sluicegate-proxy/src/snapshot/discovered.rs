//! What the discovery planes read from and publish to [`Shared`]: the
//! services they resolve or follow, and a service's endpoints found,
//! published without compiling the config again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluicegate_config::Endpoint;

use super::members::build;
use super::{ServiceRt, Shared, Snapshot};
use crate::balance::budget::RetryBudget;

impl Shared {
    /// Publishes `found` as the discovered endpoints of service `service`
    /// (sorted by name, as the discovery plane hands them): a snapshot
    /// that is the running one with that service's entry replaced, the
    /// routes, router and apps shared. Endpoints still present keep their
    /// state; requests in flight to a removed one finish on the snapshot
    /// they started with. Returns false when nothing changed (an unchanged
    /// answer, or a service no longer configured).
    pub fn apply_endpoints(&self, service: &str, found: Vec<Endpoint>) -> bool {
        let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cfg) = reg.service_cfg.get(service).cloned() else {
            return false;
        };
        if reg.discovered.get(service) == Some(&found) {
            return false;
        }
        let cur = self.snapshot.load_full();
        let Some(old) = cur.services.iter().find(|s| &*s.name == service).cloned() else {
            return false;
        };
        let m = build(&cfg, &found, &mut reg);
        reg.endpoints.retain(|k, _| k.0 != service);
        for (k, e) in m.keys.into_iter().zip(&m.eps) {
            e.breaker.configure(cfg.breaker.as_ref());
            e.eject.configure(cfg.ejection.as_ref());
            reg.endpoints.insert(k, e.clone());
        }
        reg.balancers
            .insert(service.to_string(), (m.fingerprint, m.bstate));
        let tokens = reg
            .budgets
            .entry(service.to_string())
            .or_insert_with(RetryBudget::fresh_tokens)
            .clone();
        let rt = Arc::new(ServiceRt {
            name: old.name.clone(),
            index: old.index,
            endpoints: m.eps,
            balancer: m.balancer,
            timeouts: old.timeouts.clone(),
            health: old.health.clone(),
            retries: RetryBudget::with_tokens(cfg.retries.clone(), tokens),
            forwarded_headers: old.forwarded_headers,
            tls: old.tls.clone(),
            protocol: old.protocol,
        });
        let services: Arc<[Arc<ServiceRt>]> = cur
            .services
            .iter()
            .map(|s| {
                if Arc::ptr_eq(s, &old) {
                    rt.clone()
                } else {
                    s.clone()
                }
            })
            .collect();
        reg.endpoint_order = services
            .iter()
            .flat_map(|s| s.endpoints.iter().map(|e| (s.name.clone(), e.clone())))
            .collect();
        reg.discovered.insert(service.to_string(), found);
        reg.generation += 1;
        let snap = Snapshot {
            services,
            ..cur.next(reg.generation)
        };
        self.snapshot.store(Arc::new(snap));
        self.global.discoveries.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The `jwt.issuers` in force, for the JWKS plane.
    pub fn jwt_issuers(&self) -> Vec<Arc<crate::apps::jwks::IssuerState>> {
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        reg.jwt_issuers.clone()
    }

    /// What the DNS discovery plane resolves: the `dns` settings and each
    /// service with names to resolve, from the config in force.
    pub fn discovery_targets(
        &self,
    ) -> (
        sluicegate_config::DnsSettings,
        Vec<(String, sluicegate_config::Discovery)>,
    ) {
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<_> = reg
            .service_cfg
            .values()
            .filter(|s| s.discovery.uses_dns())
            .map(|s| (s.name.clone(), s.discovery.clone()))
            .collect();
        list.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        (reg.dns.clone(), list)
    }

    /// What the etcd discovery plane follows: the etcd to read and each
    /// service with `discovery.etcd` and its prefix, from the config in
    /// force (sorted by service).
    pub fn etcd_discovery_targets(
        &self,
    ) -> (
        Option<sluicegate_config::EtcdConnection>,
        Vec<(String, String)>,
    ) {
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<_> = reg
            .service_cfg
            .values()
            .filter_map(|s| Some((s.name.clone(), s.discovery.etcd.clone()?)))
            .collect();
        list.sort_unstable();
        (reg.discovery_etcd.clone(), list)
    }
}
