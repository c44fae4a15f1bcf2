//! The Redis plane: one task on the main runtime (never on a worker) that
//! keeps every global limit's lease ahead of its demand, returns what an
//! idle limit holds, renews this instance's heartbeat and counts the
//! instances alive, and notices when Redis is lost and when it is back.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sluicegate_config::RedisConfig;
use tokio::sync::watch;

use super::conn::{connect, Conn};
use super::leasing::{grant_credit, lease_all, lease_keyed, KeyState, KeyedStates};
use super::scripts::Scripts;
use super::{Globals, STATE};
use crate::apps::limit::{window_of, LimitState, PlanRt};

/// How often the plane looks at every lease.
const TICK: Duration = Duration::from_millis(10);
/// Longest wait, at stop, for the leases to be given back.
const STOP_WAIT: Duration = Duration::from_secs(3);
/// Heartbeats: how often, and how long an instance counts without one.
const BEAT: Duration = Duration::from_secs(1);
const BEAT_TTL_MS: u64 = 3000;
/// Wait between attempts to reach Redis again.
const RETRY: Duration = Duration::from_millis(500);
const INSTANCES_KEY: &str = "sluicegate:instances";

/// The plane of a process: started once (with or without `cluster.redis`),
/// told of each config applied, and stopped after the workers have drained,
/// when it gives back what this process holds.
pub struct Plane {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts the plane on the current runtime. `globals` gives the global
/// limits of the snapshot in force; `cfg` the `cluster.redis` in force (a
/// reload that changes it moves the leases to the new Redis).
pub fn spawn(
    globals: impl Fn() -> Arc<Globals> + Send + Sync + 'static,
    cfg: watch::Receiver<Option<RedisConfig>>,
) -> Plane {
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(run(globals, cfg, stop_rx));
    Plane { stop, task }
}

impl Plane {
    /// Gives back the leases this process holds (what it has not spent
    /// goes back to the fleet at once, not at expiry) and ends the plane;
    /// bounded by [`STOP_WAIT`].
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(STOP_WAIT, self.task).await.is_err() {
            tracing::warn!("redis plane: leases not given back in {STOP_WAIT:?}");
        }
    }
}

/// Why the plane left a Redis.
enum End {
    /// `cluster.redis` changed.
    Changed,
    /// The process stops.
    Stop,
}

async fn run(
    globals: impl Fn() -> Arc<Globals>,
    mut cfg: watch::Receiver<Option<RedisConfig>>,
    mut stop: watch::Receiver<bool>,
) {
    let me = format!("{}-{:016x}", std::process::id(), fastrand::u64(..));
    let scripts = Scripts::new();
    loop {
        let current = cfg.borrow_and_update().clone();
        let end = match current {
            Some(c) => {
                STATE.configured.store(true, Ordering::Relaxed);
                let end = serve(&globals, &c, &me, &scripts, &mut cfg, &mut stop).await;
                // Whatever was leased from that Redis is void for the next.
                let snap = globals();
                snap.each_state(|s| s.lease.reset());
                end
            }
            None => {
                STATE.configured.store(false, Ordering::Relaxed);
                STATE.redis_up.store(true, Ordering::Relaxed);
                ended(&mut cfg, &mut stop).await
            }
        };
        match end {
            End::Stop => return,
            End::Changed => {
                let now = cfg.borrow().clone();
                tracing::info!(
                    url = now.as_ref().map(|c| c.url.as_str()),
                    "cluster.redis changed: global limits are leased from the new redis"
                );
            }
        }
    }
}

/// Resolves when the process stops or `cluster.redis` changes.
async fn ended(
    cfg: &mut watch::Receiver<Option<RedisConfig>>,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let changed = tokio::select! {
        _ = stop.wait_for(|s| *s) => return End::Stop,
        r = cfg.changed() => r.is_ok(),
    };
    if !changed {
        // No more configs: only a stop can end this one.
        let _ = stop.wait_for(|s| *s).await;
        return End::Stop;
    }
    End::Changed
}

/// Runs the plane against one Redis until the config changes or the
/// process stops, then gives back what is held there.
async fn serve(
    globals: &impl Fn() -> Arc<Globals>,
    cfg: &RedisConfig,
    me: &str,
    scripts: &Scripts,
    cfg_rx: &mut watch::Receiver<Option<RedisConfig>>,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let mut keys: HashMap<Arc<str>, KeyState> = HashMap::new();
    let mut kkeys: KeyedStates = HashMap::new();
    let mut known: Option<Arc<Globals>> = None;
    let mut found = Vec::new();
    loop {
        let conn = tokio::select! {
            c = connect(cfg) => c,
            end = ended(cfg_rx, stop) => return end,
        };
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                lost(&globals(), &e);
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => continue,
                    end = ended(cfg_rx, stop) => return end,
                }
            }
        };
        let mut next_beat = Instant::now();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let err = loop {
            tokio::select! {
                _ = tick.tick() => {}
                end = ended(cfg_rx, stop) => {
                    give_back(&mut conn, scripts, me, &globals(), &keys).await;
                    return end;
                }
            }
            let now = Instant::now();
            if now >= next_beat {
                let mut inv = scripts.heartbeat.key(INSTANCES_KEY);
                inv.arg(me).arg(BEAT_TTL_MS);
                match conn.call::<u64>(&inv).await {
                    Ok(n) => STATE.instances.store(n.max(1), Ordering::Relaxed),
                    Err(e) => break e,
                }
                next_beat = now + BEAT;
                back(cfg);
            }
            let snap = globals();
            if !known.as_ref().is_some_and(|k| Arc::ptr_eq(k, &snap)) {
                // A new snapshot: forget the limits it no longer has.
                let live: std::collections::HashSet<&str> =
                    snap.list.iter().map(|g| &*g.key).collect();
                keys.retain(|k, _| live.contains(&**k));
                let live_keyed: std::collections::HashSet<&str> =
                    snap.keyed.iter().map(|g| &*g.prefix).collect();
                kkeys.retain(|(p, _), _| live_keyed.contains(&**p));
                // Limits never used yet get their credit, as idle ones do.
                let n = STATE.instances.load(Ordering::Relaxed).max(1);
                for g in &snap.list {
                    if let (Some((_, burst)), Some(s)) = (g.plan.rate, snap.state(g)) {
                        let l = &s.lease;
                        if l.asked.load(Ordering::Relaxed) == 0
                            && l.rate.load(Ordering::Relaxed) == 0
                            && l.owed.load(Ordering::Relaxed) == 0
                        {
                            grant_credit(l, burst, n);
                        }
                    }
                }
                known = Some(snap.clone());
            }
            let pass = lease_all(&mut conn, scripts, &snap, &mut keys, now).await;
            let pass = match pass {
                Ok(()) => lease_keyed(&mut conn, scripts, &snap, &mut kkeys, &mut found, now).await,
                Err(e) => Err(e),
            };
            // Requests waiting at the end of a quota look again.
            super::quota_news();
            if let Err(e) = pass {
                break e;
            }
        };
        STATE.errors.fetch_add(1, Ordering::Relaxed);
        lost(&globals(), &err);
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            end = ended(cfg_rx, stop) => return end,
        }
    }
}

/// Gives back every rate token and quota unit this process holds of
/// Redis's (never what it holds on credit), and takes its heartbeat out;
/// the counters are left empty. Stops at the first call that fails.
async fn give_back(
    conn: &mut Conn,
    scripts: &Scripts,
    me: &str,
    snap: &Globals,
    keys: &HashMap<Arc<str>, KeyState>,
) {
    let mut tokens = 0;
    let mut units = 0;
    let result: Result<(), String> = async {
        for g in &snap.list {
            let Some(state) = snap.state(g) else {
                continue;
            };
            let win = keys.get(&g.key).map(|k| k.window).unwrap_or(0);
            let (t, u) = give_back_one(conn, scripts, &g.key, state, &g.plan, win).await?;
            tokens += t;
            units += u;
        }
        let mut found = Vec::new();
        for g in &snap.keyed {
            found.clear();
            // Only keys holding tokens of Redis's (not just credit).
            let holds = |s: &LimitState| {
                s.lease.rate.load(Ordering::Relaxed) > s.lease.owed.load(Ordering::Relaxed)
            };
            g.table.each(holds, &mut found);
            for (key, state) in &found {
                let redis_key = g.redis_key(*key);
                let (t, _) = give_back_one(conn, scripts, &redis_key, state, &g.plan, 0).await?;
                tokens += t;
            }
        }
        // The others count one instance fewer at once (their shares grow).
        let mut inv = scripts.leave.key(INSTANCES_KEY);
        inv.arg(me);
        conn.call::<u64>(&inv).await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => tracing::info!(tokens, units, "redis plane: leases given back"),
        Err(e) => {
            tracing::warn!(error = %e, tokens, units, "redis plane: leases not all given back")
        }
    }
}

/// Gives back what one limit holds of Redis's: its rate tokens, and its
/// quota units of window `win` (if that is still the window now);
/// returns how many of each.
async fn give_back_one(
    conn: &mut Conn,
    scripts: &Scripts,
    key: &str,
    state: &LimitState,
    plan: &PlanRt,
    win: u64,
) -> Result<(i64, i64), String> {
    let lease = &state.lease;
    let (mut tokens, mut units) = (0, 0);
    if let Some((interval, burst)) = plan.rate {
        let held = lease.rate.swap(0, Ordering::Relaxed);
        let spare = held - lease.owed.swap(0, Ordering::Relaxed);
        if spare > 0 {
            let mut inv = scripts.take.key(key);
            inv.arg(interval as f64 / 1000.0).arg(burst).arg(-spare);
            conn.call::<i64>(&inv).await?;
            tokens = spare;
        }
    }
    if let Some((limit, w)) = plan.quota {
        let held = lease.quota.swap(0, Ordering::Relaxed);
        if held > 0 && win == window_of(SystemTime::now(), w).0 {
            let mut inv = scripts.quota.key(format!("{key}:q:{win}"));
            inv.arg(limit).arg(-held).arg(0);
            conn.call::<(i64, i64)>(&inv).await?;
            units = held;
        }
    }
    Ok((tokens, units))
}

/// Redis answered: leases are back in force.
fn back(cfg: &RedisConfig) {
    if !STATE.redis_up.swap(true, Ordering::Relaxed) {
        tracing::info!(
            url = %cfg.url,
            "redis reachable again: global limits are leased from redis"
        );
    }
}

/// Redis is lost: every global limit follows its `on_failure` from now.
fn lost(globals: &Globals, err: &str) {
    if STATE.redis_up.swap(false, Ordering::Relaxed) {
        globals.each_state(|s| s.reset_counts());
        super::quota_news();
        tracing::warn!(
            error = %err,
            instances = STATE.instances.load(Ordering::Relaxed),
            "redis unreachable: global limits now run on their on_failure mode \
             (local: this instance's share of each limit; deny: refused) until it is back"
        );
    }
}
