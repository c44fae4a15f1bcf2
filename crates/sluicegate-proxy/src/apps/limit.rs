//! Plan limits shared by every worker thread: a rate with a burst (GCRA,
//! one atomic), a quota per calendar window (one atomic), and requests in
//! flight (one atomic). The state lives in [`LimitState`], which an app's
//! slot keeps across reloads ([`crate::apps::SlotPool`]), while the numbers come
//! from the plan in force ([`PlanRt`]), so a reload that changes a plan
//! applies at once without resetting anyone's bucket.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluicegate_config::{OnFailure, Plan, QuotaWindow, Scope};

use crate::apps::lease::Lease;
use crate::clock::mono_ns;

/// A plan compiled for the data plane.
#[derive(Debug, Clone)]
pub struct PlanRt {
    pub name: Arc<str>,
    /// Nanoseconds between requests at the steady rate, and the burst.
    pub(crate) rate: Option<(u64, u64)>,
    pub(crate) quota: Option<(u64, QuotaWindow)>,
    pub(crate) concurrency: Option<u64>,
    /// `scope: global`: the rate and quota are spent from the state's
    /// [`Lease`] (the filters ask `crate::cluster`); what to do without
    /// Redis.
    pub(crate) global: Option<OnFailure>,
}

impl PlanRt {
    pub fn new(p: &Plan) -> PlanRt {
        PlanRt {
            name: p.name.as_str().into(),
            rate: p.rate.map(|r| {
                let interval = (r.per.as_nanos() / u128::from(r.count)).max(1) as u64;
                (interval, p.burst.unwrap_or(r.count).max(1))
            }),
            quota: p.quota.map(|q| (q.limit, q.window)),
            concurrency: p.concurrency,
            global: (p.scope == Scope::Global).then_some(p.on_failure),
        }
    }
}

/// One app's counters for one scope (the whole app, or one service).
#[derive(Debug, Default)]
pub struct LimitState {
    /// GCRA theoretical arrival time, nanoseconds since the process's clock
    /// origin ([`crate::clock::mono_ns`]).
    tat: AtomicU64,
    /// Quota window number (low 24 bits, high part) and count (low 40 bits).
    quota: AtomicU64,
    in_flight: AtomicU64,
    /// Tokens leased from Redis, for a `scope: global` plan.
    pub(crate) lease: Lease,
}

/// Why a request was refused, and what to tell the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub retry_after: Duration,
    /// `RateLimit-Limit` for the limit that refused.
    pub limit: u64,
    /// Seconds until the limit has room again (`RateLimit-Reset`).
    pub reset: u64,
    pub what: &'static str,
}

/// What the request was charged, for the `RateLimit-*` headers of an
/// accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Charged {
    pub limit: u64,
    pub remaining: u64,
    pub reset: u64,
}

/// A concurrency slot taken by [`LimitState::admit`], released when
/// dropped. (Filters hold theirs as `crate::filters::InFlight`.)
#[derive(Debug)]
pub struct Slot(Arc<LimitState>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Gives a concurrency slot back unless disarmed (a refusal after the slot
/// was taken).
struct Undo<'a>(Option<&'a AtomicU64>);

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Largest quota window tag and count a state holds.
pub(crate) const QUOTA_TAG_MAX: u64 = (1 << (64 - COUNT_BITS)) - 1;
pub(crate) const QUOTA_COUNT_MAX: u64 = COUNT_MASK;

/// The calendar window `t` falls in (UTC), as a number that changes
/// when the window does, and the seconds left in it.
pub(crate) fn window_of(t: SystemTime, w: QuotaWindow) -> (u64, u64) {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let span = |len: u64| (secs / len, len - secs % len);
    match w {
        QuotaWindow::Minute => span(60),
        QuotaWindow::Hour => span(3600),
        QuotaWindow::Day => span(86_400),
        QuotaWindow::Month => {
            let days = secs / 86_400;
            let (y, m, _) = crate::clock::calendar::civil_from_days(days as i64);
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let next = crate::clock::calendar::days_from_civil(ny, nm, 1) as u64 * 86_400;
            (
                (y as u64) * 12 + u64::from(m),
                next.saturating_sub(secs).max(1),
            )
        }
    }
}

impl LimitState {
    /// Checks and charges one request against `plan`: the concurrency
    /// slot first (released by dropping the returned guard), then the rate,
    /// then the quota. Nothing is charged when the request is refused.
    /// `wall` is read only for a quota.
    pub fn admit(
        self: &Arc<Self>,
        plan: &PlanRt,
        now: Instant,
        wall: impl FnOnce() -> SystemTime,
    ) -> Result<(Option<Slot>, Charged), Refusal> {
        let (slot, charged) = self.try_admit(plan, now, wall)?;
        Ok((slot.then(|| Slot(self.clone())), charged))
    }

    /// [`LimitState::admit`] for state owned elsewhere: says whether a
    /// concurrency slot was taken, which the caller must give back with
    /// [`LimitState::release`] when the request ends.
    pub fn try_admit(
        &self,
        plan: &PlanRt,
        now: Instant,
        wall: impl FnOnce() -> SystemTime,
    ) -> Result<(bool, Charged), Refusal> {
        self.admit_parts(plan.rate, plan.quota, plan.concurrency, now, wall)
    }

    /// [`LimitState::try_admit`] with the numbers given one by one (a
    /// global plan's share while Redis is unreachable). Inlined, so a local
    /// plan's check reads its numbers in place as before.
    #[inline(always)]
    pub(crate) fn admit_parts(
        &self,
        rate: Option<(u64, u64)>,
        quota: Option<(u64, QuotaWindow)>,
        concurrency: Option<u64>,
        now: Instant,
        wall: impl FnOnce() -> SystemTime,
    ) -> Result<(bool, Charged), Refusal> {
        let mut undo = Undo(None);
        if let Some(max) = concurrency {
            if self.in_flight.fetch_add(1, Ordering::Relaxed) >= max {
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                return Err(Refusal {
                    retry_after: Duration::from_secs(1),
                    limit: max,
                    reset: 1,
                    what: "too many requests in flight",
                });
            }
            undo.0 = Some(&self.in_flight);
        }
        let mut charged = Charged::default();
        let mut rate_undo = None;
        if let Some((interval, burst)) = rate {
            let now_ns = mono_ns(now);
            let window = interval.saturating_mul(burst);
            let mut cur = self.tat.load(Ordering::Relaxed);
            loop {
                let new = cur.max(now_ns) + interval;
                let ahead = new - now_ns;
                if ahead > window {
                    let wait = ahead - window;
                    return Err(Refusal {
                        retry_after: Duration::from_nanos(wait),
                        limit: burst,
                        reset: (wait.div_ceil(1_000_000_000)).max(1),
                        what: "rate limit exceeded",
                    });
                }
                match self
                    .tat
                    .compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        charged = Charged {
                            limit: burst,
                            remaining: (window - ahead) / interval,
                            reset: ahead.div_ceil(1_000_000_000),
                        };
                        rate_undo = Some(interval);
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        if let Some((limit, w)) = quota {
            let (win, left) = window_of(wall(), w);
            let tag = win & ((1 << (64 - COUNT_BITS)) - 1);
            let mut cur = self.quota.load(Ordering::Relaxed);
            loop {
                let used = if cur >> COUNT_BITS == tag {
                    cur & COUNT_MASK
                } else {
                    0
                };
                if used >= limit {
                    // Give the rate token back: this request is not served.
                    if let Some(interval) = rate_undo {
                        self.tat.fetch_sub(interval, Ordering::Relaxed);
                    }
                    return Err(Refusal {
                        retry_after: Duration::from_secs(left),
                        limit,
                        reset: left,
                        what: "quota exhausted",
                    });
                }
                let new = (tag << COUNT_BITS) | (used + 1).min(COUNT_MASK);
                match self.quota.compare_exchange_weak(
                    cur,
                    new,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        if rate_undo.is_none() {
                            charged = Charged {
                                limit,
                                remaining: limit - used - 1,
                                reset: left,
                            };
                        }
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        let slot = undo.0.take().is_some();
        Ok((slot, charged))
    }

    /// Gives back a concurrency slot taken by [`LimitState::try_admit`].
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Back to rest (a slot handed to another app).
    pub(crate) fn reset(&self) {
        for c in [&self.tat, &self.quota, &self.in_flight] {
            c.store(0, Ordering::Relaxed);
        }
        self.lease.reset();
    }

    /// The rate and quota back to rest, requests in flight kept (a global
    /// plan starting to count its share locally).
    pub(crate) fn reset_counts(&self) {
        self.tat.store(0, Ordering::Relaxed);
        self.quota.store(0, Ordering::Relaxed);
    }

    /// Takes back a concurrency slot from a refused request.
    pub(crate) fn unadmit_slot(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests now in flight under this state.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// What an upgrade carries of this state to the new process
    /// ([`crate::snapshot::carry`]): how far ahead of `now_ns` the rate's
    /// arrival time is (0: a full bucket), and the quota's window tag and
    /// count (the tag comes from the wall clock, so it means the same in
    /// any process). Requests in flight are not carried: their guards
    /// belong to the old process.
    pub(crate) fn carried(&self, now_ns: u64) -> (u64, u64, u64) {
        let ahead = self.tat.load(Ordering::Relaxed).saturating_sub(now_ns);
        let q = self.quota.load(Ordering::Relaxed);
        (ahead, q >> COUNT_BITS, q & COUNT_MASK)
    }

    /// Takes over what [`LimitState::carried`] gave in another process:
    /// the rate's arrival time `ahead` nanoseconds after `now_ns` (or
    /// later, if this state is already further), and the quota window and
    /// count as they were. `window` must fit [`QUOTA_TAG_MAX`] and `count`
    /// [`QUOTA_COUNT_MAX`].
    pub(crate) fn restore(&self, now_ns: u64, ahead: u64, window: u64, count: u64) {
        if ahead > 0 {
            self.tat
                .fetch_max(now_ns.saturating_add(ahead), Ordering::Relaxed);
        }
        if count > 0 {
            let q = (window.min(QUOTA_TAG_MAX) << COUNT_BITS) | count.min(COUNT_MASK);
            self.quota.store(q, Ordering::Relaxed);
        }
    }

    /// Nothing in flight and the rate bucket full again (no quota used):
    /// forgetting this state changes nothing for its client.
    /// A global limit's state is at rest once it holds none of Redis's
    /// tokens (only its credit, or nothing).
    fn is_idle(&self, now_ns: u64) -> bool {
        self.tat.load(Ordering::Relaxed) <= now_ns
            && self.in_flight.load(Ordering::Relaxed) == 0
            && self.quota.load(Ordering::Relaxed) == 0
            && self.lease.rate.load(Ordering::Relaxed) <= self.lease.owed.load(Ordering::Relaxed)
            && self.lease.asked.load(Ordering::Relaxed) == 0
    }
}

/// Shards of the per-client table; a lookup locks one shard briefly.
const SHARDS: usize = 64;
/// A shard with more clients than this forgets its idle ones.
const SWEEP_AT: usize = 4096;

type KeyMap<K> = HashMap<K, Arc<LimitState>, RandomState>;

/// Counters per key for a route's `limit`, shared by the workers: per
/// client IP address ([`ClientLimits`]) or per value of a path parameter
/// ([`ParamLimits`]). Keys whose counters are back to rest are forgotten
/// when a shard grows, so memory follows the keys active now. The hash is
/// keyed (random per table) because clients choose their keys.
#[derive(Debug)]
pub struct KeyedLimits<K> {
    shards: Box<[Mutex<KeyMap<K>>]>,
    pick: RandomState,
    /// Keys are the same in every instance of the fleet (a global limit's
    /// keys name its Redis buckets): a value's key is the first 128 bits
    /// of its SHA-256, not a hash keyed per process.
    fleet: bool,
}

/// Counters per client IP address.
pub type ClientLimits = KeyedLimits<IpAddr>;

/// Counters per value (of a path parameter, a header, an app's id), keyed
/// by a 128-bit hash of the value: the same memory per key as an address,
/// whatever the value's length, and nothing allocated for a new one.
pub type ParamLimits = KeyedLimits<u128>;

impl<K> Default for KeyedLimits<K> {
    fn default() -> Self {
        KeyedLimits {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            pick: RandomState::new(),
            fleet: false,
        }
    }
}

impl<K> KeyedLimits<K> {
    /// A table whose keys are the same in every instance (for a global
    /// limit; see [`KeyedLimits::key_of`]).
    pub fn for_fleet() -> Self {
        KeyedLimits {
            fleet: true,
            ..KeyedLimits::default()
        }
    }

    /// Whether keys are the same in every instance.
    pub fn is_fleet(&self) -> bool {
        self.fleet
    }
}

impl<K: std::hash::Hash + Eq + Copy> KeyedLimits<K> {
    /// The counters of `key`, created on first use.
    pub fn state(&self, key: K, now: Instant) -> Arc<LimitState> {
        let shard = &self.shards[self.pick.hash_one(key) as usize % SHARDS];
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(&key) {
            return s.clone();
        }
        if map.len() >= SWEEP_AT {
            let now_ns = mono_ns(now);
            map.retain(|_, s| Arc::strong_count(s) > 1 || !s.is_idle(now_ns));
        }
        map.entry(key).or_default().clone()
    }

    /// The counters of every key for which `pick` holds, added to `out`
    /// (the Redis plane's pass over a global limit's keys: `pick` reads a
    /// few atomics, so a key at rest costs no reference count; locks each
    /// shard once, briefly).
    pub(crate) fn each(
        &self,
        pick: impl Fn(&LimitState) -> bool,
        out: &mut Vec<(K, Arc<LimitState>)>,
    ) {
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(
                map.iter()
                    .filter(|(_, s)| pick(s))
                    .map(|(k, s)| (*k, s.clone())),
            );
        }
    }

    #[cfg(test)]
    /// Keys with counters now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// The key of requests that do not carry the value a table counts by (no
/// such header, no app): one shared set of counters. No value maps to it
/// but by a 2^-128 chance.
pub const ABSENT: u128 = 0;

impl KeyedLimits<u128> {
    /// The counters of a value (a parameter as routed, a header's value,
    /// an app's id), or of the shared "absent" key for `None`.
    #[cfg(test)]
    pub fn state_of(&self, value: Option<&[u8]>, now: Instant) -> Arc<LimitState> {
        self.state(self.key_of(value), now)
    }

    /// A value's 128-bit key: hashed with this table's own random key, or
    /// for a fleet table with SHA-256 (the same everywhere, and still no
    /// two values a client can choose to share counters).
    #[inline]
    pub fn key_of(&self, value: Option<&[u8]>) -> u128 {
        let Some(value) = value else { return ABSENT };
        let key = if self.fleet {
            let d = ring::digest::digest(&ring::digest::SHA256, value);
            let mut b = [0u8; 16];
            b.copy_from_slice(&d.as_ref()[..16]);
            u128::from_be_bytes(b)
        } else {
            let lo = self.pick.hash_one((0u8, value));
            let hi = self.pick.hash_one((1u8, value));
            u128::from(hi) << 64 | u128::from(lo)
        };
        key.max(1)
    }
}

impl KeyedLimits<IpAddr> {
    /// Clients whose rate bucket is not full at `now_ns`, and how far
    /// ahead their arrival time is (for an upgrade; locks each shard once).
    pub(crate) fn carried(&self, now_ns: u64) -> Vec<(IpAddr, u64)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (ip, s) in map.iter() {
                let (ahead, _, _) = s.carried(now_ns);
                if ahead > 0 {
                    out.push((*ip, ahead));
                }
            }
        }
        out
    }

    /// Takes over a client's bucket from another process (see
    /// [`LimitState::restore`]).
    pub(crate) fn restore(&self, ip: IpAddr, now: Instant, ahead: u64) {
        self.state(ip, now).restore(mono_ns(now), ahead, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_config::{Quota, Rate};

    fn plan(
        rate: Option<(u64, u64)>,
        burst: Option<u64>,
        quota: Option<u64>,
        conc: Option<u64>,
    ) -> PlanRt {
        PlanRt::new(&Plan {
            name: "p".into(),
            rate: rate.map(|(count, secs)| Rate {
                count,
                per: Duration::from_secs(secs),
            }),
            burst,
            quota: quota.map(|limit| Quota {
                limit,
                window: QuotaWindow::Day,
            }),
            concurrency: conc,
            scope: Scope::Local,
            on_failure: OnFailure::Local,
        })
    }

    #[test]
    fn burst_then_steady_rate() {
        let s = Arc::new(LimitState::default());
        let p = plan(Some((10, 1)), Some(5), None, None); // 10/s, burst 5
        let t0 = Instant::now();
        let wall = SystemTime::now();
        for i in 0..5 {
            let (_, c) = s.admit(&p, t0, || wall).unwrap();
            assert_eq!(c.remaining, 4 - i);
        }
        let r = s.admit(&p, t0, || wall).unwrap_err();
        assert_eq!(r.what, "rate limit exceeded");
        assert_eq!(r.retry_after, Duration::from_millis(100));
        // 100 ms later one more token is there, and only one.
        let t1 = t0 + Duration::from_millis(100);
        s.admit(&p, t1, || wall).unwrap();
        s.admit(&p, t1, || wall).unwrap_err();
        // After a long pause the bucket is full again (burst, not more).
        let t2 = t1 + Duration::from_secs(10);
        for _ in 0..5 {
            s.admit(&p, t2, || wall).unwrap();
        }
        s.admit(&p, t2, || wall).unwrap_err();
    }

    #[test]
    fn quota_counts_per_window_and_refunds_the_rate() {
        let s = Arc::new(LimitState::default());
        let p = plan(Some((1000, 1)), None, Some(3), None);
        let t = Instant::now();
        let day1 = UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 5);
        for _ in 0..3 {
            s.admit(&p, t, || day1).unwrap();
        }
        let r = s.admit(&p, t, || day1).unwrap_err();
        assert_eq!(r.what, "quota exhausted");
        assert_eq!(r.retry_after, Duration::from_secs(86_400 - 5));
        // The refused request gave its rate token back.
        let tat = s.tat.load(Ordering::Relaxed);
        assert_eq!(tat, mono_ns(t).max(1) + 3 * 1_000_000);
        // Next day: a fresh quota.
        let day2 = day1 + Duration::from_secs(86_400);
        s.admit(&p, t + Duration::from_secs(1), || day2).unwrap();
    }

    #[test]
    fn concurrency_slots_are_released_on_drop() {
        let s = Arc::new(LimitState::default());
        let p = plan(None, None, None, Some(2));
        let t = Instant::now();
        let w = SystemTime::now();
        let a = s.admit(&p, t, || w).unwrap().0;
        let b = s.admit(&p, t, || w).unwrap().0;
        assert_eq!(
            s.admit(&p, t, || w).unwrap_err().what,
            "too many requests in flight"
        );
        drop(a);
        let c = s.admit(&p, t, || w).unwrap().0;
        assert_eq!(s.in_flight(), 2);
        drop((b, c));
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn shared_by_threads_without_overcharging() {
        let s = Arc::new(LimitState::default());
        let p = plan(Some((1, 3600)), Some(1000), None, None);
        let t = Instant::now();
        let w = SystemTime::now();
        let ok = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..500 {
                        if s.admit(&p, t, || w).is_ok() {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(ok.load(Ordering::Relaxed), 1000);
    }

    #[test]
    fn idle_clients_are_forgotten_busy_ones_kept() {
        let t = ClientLimits::default();
        let p = plan(Some((1, 3600)), Some(1), None, None);
        let now = Instant::now();
        let w = SystemTime::now();
        // One client uses up its bucket; thousands of others stay at rest.
        let busy: IpAddr = "10.0.0.1".parse().unwrap();
        t.state(busy, now).admit(&p, now, || w).unwrap();
        for i in 0..(SHARDS * SWEEP_AT) as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i));
            drop(t.state(ip, now));
        }
        assert!(t.len() < SHARDS * SWEEP_AT, "idle clients were swept");
        // The busy client still has no token: it was not forgotten.
        assert!(t.state(busy, now).admit(&p, now, || w).is_err());
    }

    #[test]
    fn keyed_values_and_the_absent_key() {
        let (a, b) = (ParamLimits::default(), ParamLimits::default());
        // A process's own keys differ from another's; a fleet's agree.
        assert_ne!(a.key_of(Some(b"acme")), b.key_of(Some(b"acme")));
        let (f, g) = (ParamLimits::for_fleet(), ParamLimits::for_fleet());
        assert_eq!(f.key_of(Some(b"acme")), g.key_of(Some(b"acme")));
        assert_ne!(f.key_of(Some(b"acme")), f.key_of(Some(b"acme2")));
        // Requests without the value share one key, no value's.
        for t in [&a, &f] {
            assert_eq!(t.key_of(None), ABSENT);
            assert_ne!(t.key_of(Some(b"")), ABSENT);
        }
        let p = plan(Some((1, 3600)), Some(1), None, None);
        let now = Instant::now();
        let w = SystemTime::now();
        a.state_of(None, now).admit(&p, now, || w).unwrap();
        assert!(a.state_of(None, now).admit(&p, now, || w).is_err());
        a.state_of(Some(b"x"), now).admit(&p, now, || w).unwrap();
    }

    #[test]
    fn a_key_holding_leased_tokens_is_not_forgotten() {
        let s = LimitState::default();
        let now_ns = mono_ns(Instant::now());
        assert!(s.is_idle(now_ns));
        s.lease.rate.store(3, Ordering::Relaxed);
        assert!(!s.is_idle(now_ns), "tokens of Redis's are held");
        s.lease.owed.store(3, Ordering::Relaxed);
        assert!(s.is_idle(now_ns), "only credit is held");
    }

    #[test]
    fn month_windows() {
        // 2026-11-22 12:00 UTC: the window ends at 2026-12-01 00:00.
        let t = UNIX_EPOCH + Duration::from_secs(1_795_348_800);
        let (w, left) = window_of(t, QuotaWindow::Month);
        assert_eq!(w, 2026 * 12 + 11);
        assert_eq!(left, 8 * 86_400 + 12 * 3600);
    }
}
