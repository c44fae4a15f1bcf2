//! Global limits: `scope: global` plans and route limits counted across a
//! fleet in Redis, without Redis on the request path. Workers spend tokens
//! from a [`Lease`] beside the local counters; the plane (`plane`, a
//! task on the main runtime) leases them from Redis in batches with atomic
//! scripts (`scripts`), refills ahead of the demand and returns what is not
//! used. While Redis is unreachable each limit follows its `on_failure`.

mod plane;
mod scripts;

pub use plane::{spawn, Plane};

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sluicegate_config::OnFailure;

use crate::apps::lease::Lease;
use crate::apps::limit::{window_of, Charged, LimitState, PlanRt, Refusal};
use crate::apps::AppTable;

/// What the workers read of the plane's view of Redis.
#[derive(Debug)]
pub(crate) struct ClusterState {
    /// A plane runs (`cluster.redis` was set at start).
    configured: AtomicBool,
    /// Redis answered the plane's last call.
    redis_up: AtomicBool,
    /// Instances alive in Redis when last seen (at least 1).
    instances: AtomicU64,
    /// Script calls made, and failed.
    calls: AtomicU64,
    errors: AtomicU64,
    /// Requests admitted on a local share, and refused for `deny`, while
    /// Redis was unreachable.
    fallback_local: AtomicU64,
    fallback_denied: AtomicU64,
}

pub(crate) static STATE: ClusterState = ClusterState {
    configured: AtomicBool::new(false),
    redis_up: AtomicBool::new(true),
    instances: AtomicU64::new(1),
    calls: AtomicU64::new(0),
    errors: AtomicU64::new(0),
    fallback_local: AtomicU64::new(0),
    fallback_denied: AtomicU64::new(0),
};

/// The global limits of a snapshot, with the apps table their app slots
/// are in.
#[derive(Debug, Default)]
pub struct Globals {
    pub(crate) apps: Option<Arc<AppTable>>,
    pub(crate) list: Vec<GlobalRt>,
}

impl Globals {
    /// The counters of limit `g`.
    pub(crate) fn state<'a>(&'a self, g: &'a GlobalRt) -> Option<&'a LimitState> {
        match &g.holder {
            Holder::App(slot) => Some(&self.apps.as_deref()?.slot(*slot).limit),
            Holder::Route(s) => Some(s),
        }
    }
}

/// A global limit of the snapshot: its Redis key, whose counters it
/// charges, and its numbers.
#[derive(Debug, Clone)]
pub(crate) struct GlobalRt {
    pub key: Arc<str>,
    pub holder: Holder,
    pub plan: PlanRt,
}

/// Where a global limit's [`LimitState`] lives.
#[derive(Debug, Clone)]
pub(crate) enum Holder {
    /// An app's slot in the snapshot's apps table.
    App(u32),
    /// A route's counters (`per: route`).
    Route(Arc<LimitState>),
}

/// Checks and charges one request against a global plan: its lease while
/// Redis is up, otherwise its `on_failure`. No lock, no call, no
/// allocation: a few atomics, as for a local plan.
pub(crate) fn admit(
    state: &LimitState,
    plan: &PlanRt,
    on_failure: OnFailure,
    now: Instant,
    wall: impl FnOnce() -> SystemTime,
) -> Result<(bool, Charged), Refusal> {
    if !STATE.redis_up.load(Ordering::Relaxed) {
        return fallback(state, plan, on_failure, now, wall);
    }
    // Concurrency stays per process.
    let (slot, _) = state.admit_parts(None, None, plan.concurrency, now, wall_never)?;
    let lease = &state.lease;
    lease.asked.fetch_add(1, Ordering::Relaxed);
    let refuse = |r: Refusal| {
        if slot {
            state.unadmit_slot();
        }
        Err(r)
    };
    let mut charged = Charged::default();
    if let Some((interval, burst)) = plan.rate {
        if !Lease::spend(&lease.rate) {
            return refuse(Refusal {
                retry_after: Duration::from_nanos(interval),
                limit: burst,
                reset: interval.div_ceil(1_000_000_000).max(1),
                what: "rate limit exceeded",
            });
        }
        let left = lease.rate.load(Ordering::Relaxed).max(0) as u64;
        charged = Charged {
            limit: burst,
            remaining: left.min(burst),
            reset: 1,
        };
    }
    if let Some((limit, w)) = plan.quota {
        if !Lease::spend(&lease.quota) {
            if plan.rate.is_some() {
                lease.rate.fetch_add(1, Ordering::Relaxed);
            }
            let (_, left) = window_of(wall(), w);
            return refuse(Refusal {
                retry_after: Duration::from_secs(left),
                limit,
                reset: left,
                what: "quota exhausted",
            });
        }
        if plan.rate.is_none() {
            let left = lease.quota.load(Ordering::Relaxed).max(0) as u64;
            charged = Charged {
                limit,
                remaining: left.min(limit),
                reset: window_of(wall(), w).1,
            };
        }
    }
    Ok((slot, charged))
}

/// A concurrency-only check never reads the wall clock.
fn wall_never() -> SystemTime {
    SystemTime::UNIX_EPOCH
}

/// Redis is unreachable: this instance's share of the limit, counted
/// locally, or a refusal.
#[cold]
fn fallback(
    state: &LimitState,
    plan: &PlanRt,
    on_failure: OnFailure,
    now: Instant,
    wall: impl FnOnce() -> SystemTime,
) -> Result<(bool, Charged), Refusal> {
    if on_failure == OnFailure::Deny {
        STATE.fallback_denied.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal {
            retry_after: Duration::from_secs(1),
            limit: 0,
            reset: 1,
            what: "global limit unavailable",
        });
    }
    let n = STATE.instances.load(Ordering::Relaxed).max(1);
    let rate = plan
        .rate
        .map(|(interval, burst)| (interval.saturating_mul(n), (burst / n).max(1)));
    let quota = plan.quota.map(|(limit, w)| {
        // What was left of the quota when last seen, shared (plus one).
        let share = state.lease.quota_share.load(Ordering::Relaxed);
        (share.checked_sub(1).unwrap_or((limit / n).max(1)), w)
    });
    let out = state.admit_parts(rate, quota, plan.concurrency, now, wall);
    if out.is_ok() {
        STATE.fallback_local.fetch_add(1, Ordering::Relaxed);
    }
    out
}

/// Prometheus text for the plane, when one runs.
pub(crate) fn render_metrics(out: &mut String) {
    if !STATE.configured.load(Ordering::Relaxed) {
        return;
    }
    let up = u8::from(STATE.redis_up.load(Ordering::Relaxed));
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let _ = write!(
        out,
        "# HELP sluicegate_cluster_redis_up Whether Redis answered the last call (0: global limits run on their on_failure mode).\n\
         # TYPE sluicegate_cluster_redis_up gauge\nsluicegate_cluster_redis_up {up}\n\
         # HELP sluicegate_cluster_instances Gateway instances alive in Redis when last seen.\n\
         # TYPE sluicegate_cluster_instances gauge\nsluicegate_cluster_instances {}\n\
         # HELP sluicegate_cluster_redis_calls_total Script calls to Redis (leases, returns, heartbeats).\n\
         # TYPE sluicegate_cluster_redis_calls_total counter\nsluicegate_cluster_redis_calls_total {}\n\
         # HELP sluicegate_cluster_redis_errors_total Calls to Redis that failed or timed out.\n\
         # TYPE sluicegate_cluster_redis_errors_total counter\nsluicegate_cluster_redis_errors_total {}\n\
         # HELP sluicegate_cluster_fallback_requests_total Requests under a global limit while Redis was unreachable, by on_failure mode.\n\
         # TYPE sluicegate_cluster_fallback_requests_total counter\n\
         sluicegate_cluster_fallback_requests_total{{mode=\"local\"}} {}\n\
         sluicegate_cluster_fallback_requests_total{{mode=\"deny\"}} {}\n",
        get(&STATE.instances),
        get(&STATE.calls),
        get(&STATE.errors),
        get(&STATE.fallback_local),
        get(&STATE.fallback_denied),
    );
}
