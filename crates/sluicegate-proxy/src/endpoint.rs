//! Per-endpoint state shared by every worker and kept across reloads:
//! the in-flight limit, latency average, counters, health and circuit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::balancer::Ewma;

#[derive(Debug)]
pub struct EndpointState {
    /// Stable slot of this endpoint in every worker's connection pool.
    pub id: usize,
    /// As written in the config; used in logs and metrics labels.
    pub name: String,
    pub addr: SocketAddr,
    pub weight: u32,
    /// `max_connections_per_endpoint`: in-flight requests allowed at once.
    pub max: usize,
    permits: Arc<Semaphore>,
    pub ewma: Ewma,
    /// Idle pooled connections, summed over workers.
    pub idle: AtomicI64,
    pub connect_errors: AtomicU64,
    pub requests: AtomicU64,
    /// Attempts it got as a retry after another endpoint failed.
    pub retries: AtomicU64,
    /// Set by the active health checks; balancers skip unhealthy endpoints.
    pub healthy: std::sync::atomic::AtomicBool,
    /// Consecutive passed and failed health checks.
    pub health_oks: std::sync::atomic::AtomicU32,
    pub health_fails: std::sync::atomic::AtomicU32,
    /// Passive outlier detection from the requests it serves.
    pub breaker: crate::breaker::Breaker,
}

impl EndpointState {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether balancers may pick it: healthy, and its circuit not open
    /// (the clock is read only when a circuit has opened).
    pub fn in_rotation(&self) -> bool {
        self.is_healthy() && self.breaker.available_now()
    }

    pub fn new(id: usize, name: String, addr: SocketAddr, weight: u32, max: usize) -> Self {
        EndpointState {
            id,
            name,
            addr,
            weight: weight.max(1),
            max,
            permits: Arc::new(Semaphore::new(max)),
            ewma: Ewma::default(),
            idle: AtomicI64::new(0),
            connect_errors: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            healthy: std::sync::atomic::AtomicBool::new(true),
            health_oks: std::sync::atomic::AtomicU32::new(0),
            health_fails: std::sync::atomic::AtomicU32::new(0),
            breaker: crate::breaker::Breaker::default(),
        }
    }

    pub fn in_flight(&self) -> usize {
        self.max.saturating_sub(self.permits.available_permits())
    }

    /// Cost for power-of-two-choices: latency average times load.
    pub fn p2c_cost(&self) -> f64 {
        (self.ewma.get() + 1.0) * (self.in_flight() as f64 + 1.0) / f64::from(self.weight)
    }

    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Waits up to `wait` for an in-flight slot.
    pub async fn acquire(&self, wait: Duration) -> Option<OwnedSemaphorePermit> {
        if let Some(p) = self.try_acquire() {
            return Some(p);
        }
        match tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(p)) => Some(p),
            _ => None,
        }
    }

    pub fn idle_changed(&self, delta: i64) {
        self.idle.fetch_add(delta, Ordering::Relaxed);
    }
}
