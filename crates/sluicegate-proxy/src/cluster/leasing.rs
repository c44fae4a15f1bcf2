//! What the plane does for each global limit at each tick: measures its
//! demand, leases rate tokens and quota units from Redis ahead of it, and
//! gives back what an idle limit holds (its share of the burst on credit
//! in their place).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::conn::Conn;
use super::scripts::Scripts;
use super::{Globals, STATE};
use crate::apps::lease::Lease;
use crate::apps::limit::{window_of, LimitState, PlanRt};

/// A lease holds about this much of the recent demand (refilled when half
/// is spent: the plane may be late by up to half of it under load).
const HORIZON: f64 = 0.25;
/// The demand is measured over windows this long (seconds).
const MEASURE: f64 = 0.1;
/// A limit with no request for this long gives its lease back.
const IDLE: Duration = Duration::from_secs(1);

/// What the plane remembers of one global limit between ticks.
pub(super) struct KeyState {
    /// Requests per second lately, the window being counted, and when the
    /// plane last looked.
    demand: f64,
    counted: u64,
    since: Instant,
    visited: Instant,
    last_demand: Instant,
    /// No rate lease before this (Redis's bucket was dry).
    rate_next: Instant,
    /// The quota window leased for, and no quota lease before `quota_next`.
    pub(super) window: u64,
    quota_next: Instant,
}

impl KeyState {
    /// A limit of the snapshot, first looked at: idle until asked (it
    /// exists before any request, and gets its credit as idle ones do).
    fn limit(now: Instant) -> KeyState {
        KeyState::new(now, now - IDLE)
    }

    /// A key of a limit per key, first looked at: a request made it, so
    /// it is in demand even when that request has not counted itself yet
    /// (the plane may look between the table's insert and the count). As
    /// idle, it would get a share of the burst on credit instead of its
    /// one request, which Redis may never repay.
    fn key(now: Instant) -> KeyState {
        KeyState::new(now, now)
    }

    fn new(now: Instant, last_demand: Instant) -> KeyState {
        KeyState {
            demand: 0.0,
            counted: 0,
            since: now,
            visited: now,
            last_demand,
            rate_next: now,
            window: 0,
            quota_next: now,
        }
    }

    /// No demand for [`IDLE`]: what is held of Redis's goes back, and a
    /// rate's share of the burst is granted on credit.
    fn idle(&self, now: Instant) -> bool {
        now.duration_since(self.last_demand) >= IDLE
    }
}

/// What the plane remembers of the keys of route limits per key: by the
/// limit's Redis prefix and the key. Forgotten when a key is at rest.
pub(super) type KeyedStates = HashMap<(Arc<str>, u128), KeyState>;

/// Tops a rate lease's credit up to this instance's share of the burst:
/// tokens in the counter not taken from Redis, which the next lease
/// repays first. At most `burst / n` owed at a time, so the fleet admits
/// at most one burst beyond Redis's bucket before it has paid.
pub(super) fn grant_credit(lease: &Lease, burst: u64, n: u64) {
    let credit = (burst / n).max(1) as i64;
    let owed = lease.owed.load(Ordering::Relaxed);
    if owed < credit {
        lease.rate.fetch_add(credit - owed, Ordering::Relaxed);
        lease.owed.store(credit, Ordering::Relaxed);
    }
}

/// The most quota units one lease takes: a tenth of this instance's
/// share of the quota while much is left, shrinking with what is left in
/// Redis (`left`) down to one unit per call near the end, so that units
/// do not sit in one instance while another refuses.
fn quota_cap(limit: u64, left: u64, n: u64) -> i64 {
    kept(limit, left, n).max(1)
}

/// The quota units an idle instance keeps (units of Redis's, so the quota
/// stays exact; the first requests after a pause need not wait): none
/// near the end, where they go back for the busy instances to use.
fn kept(limit: u64, left: u64, n: u64) -> i64 {
    (limit / (10 * n)).min(left / (4 * n)) as i64
}

/// What is left of a quota in Redis as last seen (all of it when not
/// known).
fn left_of(lease: &Lease, limit: u64) -> u64 {
    lease.seen_any().unwrap_or(limit)
}

/// Nothing to do for a limit (most limits, most of the time): nothing
/// asked, nothing held of Redis's but a quota's small reserve, a rate's
/// credit granted; no lookup, no clock.
fn at_rest(lease: &Lease, plan: &PlanRt, n: u64) -> bool {
    let owed = lease.owed.load(Ordering::Relaxed);
    let rate_rest = plan.rate.is_none() || (owed > 0 && lease.rate.load(Ordering::Relaxed) <= owed);
    let kept = plan.quota.map_or(0, |(l, _)| kept(l, left_of(lease, l), n));
    lease.asked.load(Ordering::Relaxed) == 0
        && rate_rest
        && lease.quota.load(Ordering::Relaxed) <= kept
}

/// One pass over every global limit of the snapshot.
pub(super) async fn lease_all(
    conn: &mut Conn,
    scripts: &Scripts,
    snap: &Globals,
    keys: &mut HashMap<Arc<str>, KeyState>,
    now: Instant,
) -> Result<(), String> {
    let n = STATE.instances.load(Ordering::Relaxed).max(1);
    for g in &snap.list {
        let Some(state) = snap.state(g) else {
            continue;
        };
        if at_rest(&state.lease, &g.plan, n) {
            continue;
        }
        let ks = keys
            .entry(g.key.clone())
            .or_insert_with(|| KeyState::limit(now));
        lease_one(conn, scripts, &g.key, state, &g.plan, ks, n, now).await?;
    }
    Ok(())
}

/// One pass over the keys of every route limit per key: a key whose
/// counters are at rest costs a few loads (and its memory here is
/// dropped); one in use is leased like any other limit. A key never used
/// before starts on its one request of credit, which the first lease
/// repays.
pub(super) async fn lease_keyed(
    conn: &mut Conn,
    scripts: &Scripts,
    snap: &Globals,
    kkeys: &mut KeyedStates,
    found: &mut Vec<(u128, Arc<LimitState>)>,
    now: Instant,
) -> Result<(), String> {
    let n = STATE.instances.load(Ordering::Relaxed).max(1);
    for g in &snap.keyed {
        found.clear();
        g.table.each(|s| !at_rest(&s.lease, &g.plan, n), found);
        for (key, state) in found.iter() {
            let ks = kkeys
                .entry((g.prefix.clone(), *key))
                .or_insert_with(|| KeyState::key(now));
            let redis_key = g.redis_key(*key);
            lease_one(conn, scripts, &redis_key, state, &g.plan, ks, n, now).await?;
        }
    }
    found.clear();
    // Keys at rest are forgotten here (not visited in this pass).
    kkeys.retain(|_, ks| ks.visited == now);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn lease_one(
    conn: &mut Conn,
    scripts: &Scripts,
    key: &str,
    state: &LimitState,
    plan: &PlanRt,
    ks: &mut KeyState,
    n: u64,
    now: Instant,
) -> Result<(), String> {
    let lease = &state.lease;
    let asked = lease.asked.swap(0, Ordering::Relaxed);
    ks.counted += asked;
    if asked > 0 {
        ks.last_demand = now;
    }
    let span = now.duration_since(ks.since).as_secs_f64();
    if span >= MEASURE {
        ks.demand = (ks.demand + ks.counted as f64 / span) / 2.0;
        ks.counted = 0;
        ks.since = now;
    }
    // A sudden rise counts at once (the average follows in a few windows).
    let dt = now.duration_since(ks.visited).as_secs_f64().max(0.001);
    ks.visited = now;
    let demand = ks.demand.max(asked as f64 / dt);
    let idle = ks.idle(now);
    if let Some((interval, burst)) = plan.rate {
        let interval_us = interval as f64 / 1000.0;
        let level = lease.rate.load(Ordering::Relaxed);
        let owed = lease.owed.load(Ordering::Relaxed);
        // Tokens held of Redis's (negative: spent on credit, unpaid).
        let real = level - owed;
        if idle {
            // What is held of Redis's goes back, so the others may use it.
            if real > 0 {
                lease.rate.fetch_sub(real, Ordering::Relaxed);
                let mut inv = scripts.take.key(key);
                inv.arg(interval_us).arg(burst).arg(-real);
                conn.call::<i64>(&inv).await?;
            }
            // In its place, this instance's share of the burst on credit:
            // a burst after a pause is admitted at once, and the next
            // lease pays for it (from the full bucket a pause leaves).
            grant_credit(lease, burst, n);
        } else if now >= ks.rate_next {
            let cap = (burst / (2 * n)).max(1) as f64;
            let target = (demand * HORIZON).ceil().clamp(1.0, cap) as i64;
            if real <= 0 || real < (target + 1) / 2 {
                let want = (target - real).max(1);
                let mut inv = scripts.take.key(key);
                inv.arg(interval_us).arg(burst).arg(want);
                let got: i64 = conn.call(&inv).await?;
                // The credit is repaid first: those tokens are in the
                // counter already.
                let repaid = got.min(owed).max(0);
                if repaid > 0 {
                    lease.owed.store(owed - repaid, Ordering::Relaxed);
                }
                lease.rate.fetch_add(got - repaid, Ordering::Relaxed);
                if got < want {
                    // Dry: wait for this instance's share to grow back,
                    // but not so long that the bucket overflows.
                    let per_s = 1e9 / interval as f64;
                    let wait = ((want - got) as f64 * n as f64 / per_s)
                        .min(burst as f64 / per_s / 2.0)
                        .max(0.005);
                    ks.rate_next = now + Duration::from_secs_f64(wait);
                }
            }
        }
    }
    if let Some((limit, w)) = plan.quota {
        let wall = SystemTime::now();
        let (win, left) = window_of(wall, w);
        if ks.window != win {
            // Units of a past window are worth nothing now.
            if ks.window != 0 {
                lease.quota.store(0, Ordering::Relaxed);
            }
            ks.window = win;
            ks.quota_next = now;
        }
        let qkey = format!("{key}:q:{win}");
        let expire_at = wall
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            + left
            + 60;
        let level = lease.quota.load(Ordering::Relaxed);
        let in_redis = lease.seen(win).unwrap_or(limit);
        if idle {
            // A small reserve stays, none near the end; the rest goes
            // back for the others. The reserve goes back at stop.
            let spare = level - kept(limit, in_redis, n);
            if spare > 0 {
                lease.quota.fetch_sub(spare, Ordering::Relaxed);
                let mut inv = scripts.quota.key(&qkey);
                inv.arg(limit).arg(-spare).arg(expire_at);
                let (_, used): (i64, i64) = conn.call(&inv).await?;
                lease.set_seen(win, limit.saturating_sub(used.max(0) as u64));
            }
        } else if now >= ks.quota_next {
            let cap = quota_cap(limit, in_redis, n) as f64;
            let target = (demand * HORIZON).ceil().clamp(1.0, cap) as i64;
            if level <= 0 || level < (target + 1) / 2 {
                let want = (target - level).max(1);
                let mut inv = scripts.quota.key(&qkey);
                inv.arg(limit).arg(want).arg(expire_at);
                let (got, used): (i64, i64) = conn.call(&inv).await?;
                lease.quota.fetch_add(got, Ordering::Relaxed);
                lease.set_seen(win, limit.saturating_sub(used.max(0) as u64));
                if got < want {
                    // Used up (others may give units back): look again
                    // later; till then requests are refused at once.
                    ks.quota_next = now + Duration::from_secs(1);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_in_demand_and_a_new_limit_idle() {
        let now = Instant::now();
        // The plane may find a key its first request has made but not yet
        // counted: in demand, so one request of credit, not a burst's share.
        assert!(!KeyState::key(now).idle(now));
        assert!(!KeyState::key(now).idle(now + IDLE / 2));
        assert!(KeyState::key(now).idle(now + IDLE));
        // A limit of the snapshot no request has asked for is idle.
        assert!(KeyState::limit(now).idle(now));
    }
}
