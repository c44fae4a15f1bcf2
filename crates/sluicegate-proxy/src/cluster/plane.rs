//! The Redis plane: one task on the main runtime (never on a worker) that
//! keeps every global limit's lease ahead of its demand, returns what an
//! idle limit holds, renews this instance's heartbeat and counts the
//! instances alive, and notices when Redis is lost and when it is back.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, IntoConnectionInfo, ScriptInvocation};
use sluicegate_config::RedisConfig;

use super::scripts::Scripts;
use super::{GlobalRt, Globals, STATE};
use crate::apps::limit::window_of;

/// How often the plane looks at every lease.
const TICK: Duration = Duration::from_millis(10);
/// A lease holds about this much of the recent demand (refilled when half
/// is spent: the plane may be late by up to half of it under load).
const HORIZON: f64 = 0.25;
/// The demand is measured over windows this long (seconds).
const MEASURE: f64 = 0.1;
/// A limit with no request for this long gives its lease back.
const IDLE: Duration = Duration::from_secs(1);
/// Longest wait for one call to Redis before it counts as lost.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// Heartbeats: how often, and how long an instance counts without one.
const BEAT: Duration = Duration::from_secs(1);
const BEAT_TTL_MS: u64 = 3000;
/// Wait between attempts to reach Redis again.
const RETRY: Duration = Duration::from_millis(500);
const INSTANCES_KEY: &str = "sluicegate:instances";

/// A connection to one server or to a Redis Cluster.
enum Conn {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    async fn call<T: FromRedisValue>(&mut self, inv: &ScriptInvocation<'_>) -> Result<T, String> {
        STATE.calls.fetch_add(1, Ordering::Relaxed);
        let fut = async {
            match self {
                Conn::One(c) => inv.invoke_async(c).await,
                Conn::Cluster(c) => inv.invoke_async(c).await,
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer in {CALL_TIMEOUT:?}")),
        }
    }
}

async fn connect(cfg: &RedisConfig) -> Result<Conn, String> {
    let url = match cfg.url.strip_prefix("redis://") {
        Some(rest) if cfg.tls => format!("rediss://{rest}"),
        _ => cfg.url.clone(),
    };
    let password = match &cfg.password_file {
        None => None,
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("password_file {}: {e}", p.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
    };
    let fut = async {
        if cfg.cluster {
            let mut b = redis::cluster::ClusterClient::builder(vec![url.as_str()]);
            if let Some(p) = &password {
                b = b.password(p.clone());
            }
            let client = b.build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let mut info = url.as_str().into_connection_info()?;
            if let Some(p) = &password {
                let settings = info.redis_settings().clone().set_password(p);
                info = info.set_redis_settings(settings);
            }
            let client = redis::Client::open(info)?;
            Ok(Conn::One(client.get_multiplexed_async_connection().await?))
        }
    };
    match tokio::time::timeout(Duration::from_secs(2), fut).await {
        Ok(r) => r.map_err(|e: redis::RedisError| e.to_string()),
        Err(_) => Err("no answer in 2s".to_string()),
    }
}

/// What the plane remembers of one global limit between ticks.
struct KeyState {
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
    window: u64,
    quota_next: Instant,
}

/// Runs the plane for `cfg` until the process ends; `globals` gives the
/// global limits of the snapshot in force.
pub async fn run(globals: impl Fn() -> Arc<Globals>, cfg: RedisConfig) {
    STATE.configured.store(true, Ordering::Relaxed);
    let me = format!("{}-{:016x}", std::process::id(), fastrand::u64(..));
    let scripts = Scripts::new();
    let mut keys: HashMap<Arc<str>, KeyState> = HashMap::new();
    let mut known: Option<Arc<Globals>> = None;
    loop {
        let mut conn = match connect(&cfg).await {
            Ok(c) => c,
            Err(e) => {
                lost(&globals(), &e);
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let mut next_beat = Instant::now();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let err = loop {
            tick.tick().await;
            let now = Instant::now();
            if now >= next_beat {
                let mut inv = scripts.heartbeat.key(INSTANCES_KEY);
                inv.arg(&me).arg(BEAT_TTL_MS);
                match conn.call::<u64>(&inv).await {
                    Ok(n) => STATE.instances.store(n.max(1), Ordering::Relaxed),
                    Err(e) => break e,
                }
                next_beat = now + BEAT;
                back(&cfg);
            }
            let snap = globals();
            if !known.as_ref().is_some_and(|k| Arc::ptr_eq(k, &snap)) {
                // A new snapshot: forget the limits it no longer has.
                let live: std::collections::HashSet<&str> =
                    snap.list.iter().map(|g| &*g.key).collect();
                keys.retain(|k, _| live.contains(&**k));
                known = Some(snap.clone());
            }
            if let Err(e) = lease_all(&mut conn, &scripts, &snap, &mut keys, now).await {
                break e;
            }
        };
        STATE.errors.fetch_add(1, Ordering::Relaxed);
        lost(&globals(), &err);
        tokio::time::sleep(RETRY).await;
    }
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
        for g in &globals.list {
            if let Some(s) = globals.state(g) {
                s.reset_counts();
            }
        }
        tracing::warn!(
            error = %err,
            instances = STATE.instances.load(Ordering::Relaxed),
            "redis unreachable: global limits now run on their on_failure mode \
             (local: this instance's share of each limit; deny: refused) until it is back"
        );
    }
}

/// One pass over every global limit of the snapshot.
async fn lease_all(
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
        // At rest (most limits, most of the time): nothing asked, nothing
        // held, nothing to do; no lookup, no clock.
        let lease = &state.lease;
        if lease.asked.load(Ordering::Relaxed) == 0
            && lease.rate.load(Ordering::Relaxed) <= 0
            && lease.quota.load(Ordering::Relaxed) <= 0
        {
            continue;
        }
        let ks = keys.entry(g.key.clone()).or_insert_with(|| KeyState {
            demand: 0.0,
            counted: 0,
            since: now,
            visited: now,
            last_demand: now - IDLE,
            rate_next: now,
            window: 0,
            quota_next: now,
        });
        lease_one(conn, scripts, snap, g, ks, n, now).await?;
    }
    Ok(())
}

async fn lease_one(
    conn: &mut Conn,
    scripts: &Scripts,
    snap: &Globals,
    g: &GlobalRt,
    ks: &mut KeyState,
    n: u64,
    now: Instant,
) -> Result<(), String> {
    let Some(state) = snap.state(g) else {
        return Ok(());
    };
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
    let idle = now.duration_since(ks.last_demand) >= IDLE;
    if let Some((interval, burst)) = g.plan.rate {
        let interval_us = interval as f64 / 1000.0;
        let level = lease.rate.load(Ordering::Relaxed);
        if idle {
            // Only what is held goes back; a debt stays to be repaid.
            let spare = level;
            if spare > 0 {
                lease.rate.fetch_sub(spare, Ordering::Relaxed);
                let mut inv = scripts.take.key(&*g.key);
                inv.arg(interval_us).arg(burst).arg(-spare);
                conn.call::<i64>(&inv).await?;
            }
        } else if now >= ks.rate_next {
            let cap = (burst / (2 * n)).max(1) as f64;
            let target = (demand * HORIZON).ceil().clamp(1.0, cap) as i64;
            if level <= 0 || level < (target + 1) / 2 {
                let want = (target - level).max(1);
                let mut inv = scripts.take.key(&*g.key);
                inv.arg(interval_us).arg(burst).arg(want);
                let got: i64 = conn.call(&inv).await?;
                lease.rate.fetch_add(got, Ordering::Relaxed);
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
    if let Some((limit, w)) = g.plan.quota {
        let wall = SystemTime::now();
        let (win, left) = window_of(wall, w);
        if ks.window != win {
            // Units of a past window are worth nothing now (a debt taken
            // on credit before the first lease stays to be repaid).
            if ks.window != 0 {
                lease.quota.store(0, Ordering::Relaxed);
            }
            ks.window = win;
            ks.quota_next = now;
        }
        let key = format!("{}:q:{win}", g.key);
        let expire_at = wall
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            + left
            + 60;
        let level = lease.quota.load(Ordering::Relaxed);
        if idle {
            let spare = level;
            if spare > 0 {
                lease.quota.fetch_sub(spare, Ordering::Relaxed);
                let mut inv = scripts.quota.key(&key);
                inv.arg(limit).arg(-spare).arg(expire_at);
                conn.call::<(i64, i64)>(&inv).await?;
            }
        } else if now >= ks.quota_next {
            let cap = (limit / (10 * n)).max(1) as f64;
            let target = (demand * HORIZON).ceil().clamp(1.0, cap) as i64;
            if level <= 0 || level < (target + 1) / 2 {
                let want = (target - level).max(1);
                let mut inv = scripts.quota.key(&key);
                inv.arg(limit).arg(want).arg(expire_at);
                let (got, used): (i64, i64) = conn.call(&inv).await?;
                lease.quota.fetch_add(got, Ordering::Relaxed);
                let left_units = limit.saturating_sub(used.max(0) as u64);
                // Stored plus one: zero means not known yet.
                let share = left_units / n + 1;
                lease.quota_share.store(share, Ordering::Relaxed);
                if got < want {
                    // Used up (others may give units back): look again later.
                    ks.quota_next = now + Duration::from_secs(1);
                }
            }
        }
    }
    Ok(())
}
