//! Global limits: `scope: global` plans and route limits counted across a
//! fleet in Redis, without Redis on the request path. Workers spend tokens
//! from a [`Lease`] beside the local counters; the plane (`plane`, a
//! task on the main runtime) leases them from Redis in batches with atomic
//! scripts (`scripts`), refills ahead of the demand and returns what is not
//! used. While Redis is unreachable each limit follows its `on_failure`.
//!
//! A rate may overshoot by a bounded amount (the credit below); a quota
//! never does: its units are spent only once Redis has granted them, its
//! leases shrink to one unit near its end, and a request that finds the
//! lease empty before the quota is known to be spent waits for the plane
//! ([`quota_wait`], at most [`QUOTA_WAIT`]).

mod conn;
mod leasing;
mod plane;
mod scripts;

pub use plane::{spawn, Plane};

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use sluicegate_config::OnFailure;

use crate::apps::lease::Lease;
use crate::apps::limit::{window_of, Charged, LimitState, ParamLimits, PlanRt, Refusal};
use crate::apps::AppTable;

/// A wait a filter awaits (the filters' `Wait`).
pub(crate) type Waiting<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

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
    /// Requests waiting for the plane at the end of a quota, and how many
    /// waited in all.
    waiting: AtomicU64,
    waited: AtomicU64,
}

/// Wakes the requests waiting for quota units after each pass of the
/// plane (and when Redis is lost).
static QUOTA_NEWS: Notify = Notify::const_new();

/// Longest wait of a request for Redis at the end of a quota: past it the
/// request is refused (429) unless Redis is known to be unreachable (then
/// `on_failure` decides). Covers a call (500 ms) and a first connection.
pub const QUOTA_WAIT: Duration = Duration::from_secs(2);

thread_local! {
    /// The state whose quota unit the last [`quota_wait`] on this thread
    /// took for its request: that request's filter runs right after the
    /// wait, on the same thread, with no await between, and charges it.
    static PREPAID: Cell<usize> = const { Cell::new(0) };
}

/// Whether the unit of `state`'s quota was taken by a wait (and clears it).
fn take_prepaid(state: &LimitState) -> bool {
    let me = state as *const LimitState as usize;
    PREPAID.with(|p| p.replace(0) == me)
}

pub(crate) static STATE: ClusterState = ClusterState {
    configured: AtomicBool::new(false),
    redis_up: AtomicBool::new(true),
    instances: AtomicU64::new(1),
    calls: AtomicU64::new(0),
    errors: AtomicU64::new(0),
    fallback_local: AtomicU64::new(0),
    fallback_denied: AtomicU64::new(0),
    waiting: AtomicU64::new(0),
    waited: AtomicU64::new(0),
};

/// The global limits of a snapshot, with the apps table their app slots
/// are in.
#[derive(Debug, Default)]
pub struct Globals {
    pub(crate) apps: Option<Arc<AppTable>>,
    pub(crate) list: Vec<GlobalRt>,
    /// Route limits counted per key (app, header, parameter) across the
    /// fleet: a bucket per key in Redis, leased per key.
    pub(crate) keyed: Vec<KeyedGlobal>,
}

/// A route limit per key with `scope: global`: its keys' counters, and the
/// start of their Redis keys (the key in hex and `}` follow, so each key
/// is its own Redis Cluster slot).
#[derive(Debug, Clone)]
pub(crate) struct KeyedGlobal {
    pub prefix: Arc<str>,
    pub table: Arc<ParamLimits>,
    pub plan: PlanRt,
}

impl KeyedGlobal {
    /// The Redis key of `key`'s bucket.
    pub(crate) fn redis_key(&self, key: u128) -> String {
        format!("{}{key:032x}}}", self.prefix)
    }
}

impl Globals {
    /// Runs `f` on the counters of every global limit, keyed ones too.
    pub(crate) fn each_state(&self, mut f: impl FnMut(&LimitState)) {
        for g in &self.list {
            if let Some(s) = self.state(g) {
                f(s);
            }
        }
        let mut found = Vec::new();
        for g in &self.keyed {
            found.clear();
            g.table.each(|_| true, &mut found);
            for (_, s) in &found {
                f(s);
            }
        }
    }

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
    let lease = &state.lease;
    // A unit a wait took for this request (given back if it is refused).
    let prepaid = plan.quota.is_some() && take_prepaid(state);
    let unpay = || {
        if prepaid {
            lease.quota.fetch_add(1, Ordering::Relaxed);
        }
    };
    if !STATE.redis_up.load(Ordering::Relaxed) {
        unpay();
        return fallback(state, plan, on_failure, now, wall);
    }
    // Concurrency stays per process.
    let (slot, _) = state
        .admit_parts(None, None, plan.concurrency, now, wall_never)
        .inspect_err(|_| unpay())?;
    lease.asked.fetch_add(1, Ordering::Relaxed);
    let refuse = |r: Refusal| {
        if slot {
            state.unadmit_slot();
        }
        unpay();
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
        if !prepaid && !Lease::spend_exact(&lease.quota) {
            if plan.rate.is_some() {
                lease.rate.fetch_add(1, Ordering::Relaxed);
            }
            let (win, left) = window_of(wall(), w);
            // Spent (as Redis said), or not granted in time: then soon.
            let spent = lease.seen(win) == Some(0);
            return refuse(Refusal {
                retry_after: Duration::from_secs(if spent { left } else { 1 }),
                limit,
                reset: left,
                what: if spent {
                    "quota exhausted"
                } else {
                    "quota not granted by redis in time"
                },
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

/// What a request charged to a global quota waits for before it is
/// charged: nothing while the lease holds units or the quota is known to
/// be spent (the common cases: no wait, no clock but a quota's), else
/// for the plane to lease from Redis, at most [`QUOTA_WAIT`]. A unit it
/// takes is handed to the request's [`admit`] (same thread, no await
/// between).
pub(crate) fn quota_wait<'a>(state: &'a LimitState, plan: &PlanRt) -> Option<Waiting<'a>> {
    let (_, w) = plan.quota?;
    plan.global?;
    let lease = &state.lease;
    if lease.quota.load(Ordering::Relaxed) > 0 || !STATE.redis_up.load(Ordering::Relaxed) {
        return None;
    }
    if lease.seen(window_of(SystemTime::now(), w).0) == Some(0) {
        return None;
    }
    Some(Box::pin(async move {
        /// Counts the request out of the waiting ones however it ends.
        struct Out;
        impl Drop for Out {
            fn drop(&mut self) {
                STATE.waiting.fetch_sub(1, Ordering::Relaxed);
            }
        }
        STATE.waiting.fetch_add(1, Ordering::Relaxed);
        STATE.waited.fetch_add(1, Ordering::Relaxed);
        let _out = Out;
        let deadline = tokio::time::Instant::now() + QUOTA_WAIT;
        loop {
            let news = QUOTA_NEWS.notified();
            tokio::pin!(news);
            news.as_mut().enable();
            if Lease::spend_exact(&lease.quota) {
                PREPAID.with(|p| p.set(state as *const LimitState as usize));
                return;
            }
            let spent = lease.seen(window_of(SystemTime::now(), w).0) == Some(0);
            if spent || !STATE.redis_up.load(Ordering::Relaxed) {
                return;
            }
            // Demand the plane sees (it leases for what is asked).
            lease.asked.fetch_add(1, Ordering::Relaxed);
            if tokio::time::timeout_at(deadline, news).await.is_err() {
                return;
            }
        }
    }))
}

/// Wakes the requests waiting at the end of a quota (the plane leased,
/// learnt the quota is spent, or lost Redis).
pub(crate) fn quota_news() {
    if STATE.waiting.load(Ordering::Relaxed) > 0 {
        QUOTA_NEWS.notify_waiters();
    }
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
        // What was left of the quota when last seen, shared.
        let share = state
            .lease
            .seen_any()
            .map_or((limit / n).max(1), |left| left / n);
        (share, w)
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
         sluicegate_cluster_fallback_requests_total{{mode=\"deny\"}} {}\n\
         # HELP sluicegate_cluster_quota_waits_total Requests that waited for Redis at the end of a global quota.\n\
         # TYPE sluicegate_cluster_quota_waits_total counter\nsluicegate_cluster_quota_waits_total {}\n",
        get(&STATE.instances),
        get(&STATE.calls),
        get(&STATE.errors),
        get(&STATE.fallback_local),
        get(&STATE.fallback_denied),
        get(&STATE.waited),
    );
}
