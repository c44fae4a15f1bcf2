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
use tokio::sync::watch;

use super::scripts::Scripts;
use super::{Globals, STATE};
use crate::apps::lease::Lease;
use crate::apps::limit::{window_of, LimitState, PlanRt};

/// How often the plane looks at every lease.
const TICK: Duration = Duration::from_millis(10);
/// A lease holds about this much of the recent demand (refilled when half
/// is spent: the plane may be late by up to half of it under load).
const HORIZON: f64 = 0.25;
/// The demand is measured over windows this long (seconds).
const MEASURE: f64 = 0.1;
/// A limit with no request for this long gives its lease back.
const IDLE: Duration = Duration::from_secs(1);
/// Longest wait, at stop, for the leases to be given back.
const STOP_WAIT: Duration = Duration::from_secs(3);
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
    // A private CA instead of the system's roots.
    let certs = match &cfg.ca_file {
        None => None,
        Some(p) => Some(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(p).map_err(|e| format!("ca_file {}: {e}", p.display()))?),
        }),
    };
    let fut = async {
        if cfg.cluster {
            let mut b = redis::cluster::ClusterClient::builder(vec![url.as_str()]);
            if let Some(p) = &password {
                b = b.password(p.clone());
            }
            if let Some(c) = certs {
                b = b.certs(c);
            }
            let client = b.build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let mut info = url.as_str().into_connection_info()?;
            if let Some(p) = &password {
                let settings = info.redis_settings().clone().set_password(p);
                info = info.set_redis_settings(settings);
            }
            let client = match certs {
                Some(c) => redis::Client::build_with_tls(info, c)?,
                None => redis::Client::open(info)?,
            };
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
type KeyedStates = HashMap<(Arc<str>, u128), KeyState>;

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

/// Tops a rate lease's credit up to this instance's share of the burst:
/// tokens in the counter not taken from Redis, which the next lease
/// repays first. At most `burst / n` owed at a time, so the fleet admits
/// at most one burst beyond Redis's bucket before it has paid.
fn grant_credit(lease: &Lease, burst: u64, n: u64) {
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
async fn lease_keyed(
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
