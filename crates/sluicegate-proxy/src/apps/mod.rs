//! The apps table compiled from `apps` and `plans`, laid out for a million
//! apps: ids and keys in one text arena, a fixed-size record per app,
//! access rules and plan choices shared between apps that have the same,
//! and each app's counters in a slot of a pool that outlives snapshots.
//!
//! Keys are found through a bucketed hash table of key records (four to a
//! cache line) under a keyed hash (the secret is random per process);
//! every candidate's stored key is compared in constant time, so the time
//! a lookup takes says nothing about how much of a guess was right.
//!
//! The key index is in `keys`, an app's rules and JWT key in `policy`.

mod keys;
pub(crate) mod lease;
pub(crate) mod limit;
mod policy;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use hashbrown::HashTable;
use sluicegate_config::Config;
use subtle::ConstantTimeEq;

use crate::apps::limit::{LimitState, PlanRt};
use keys::{KeyRec, KeyTable};
use policy::{jwt_key, policy, JwtKeyRt, Policy, PolicyKey, NONE};

/// One app's counters for one scope (the app's own plan, or one service's):
/// its limit state, and (for the app's own slot) its metrics.
#[derive(Debug, Default)]
pub struct AppSlot {
    pub limit: LimitState,
    /// Requests that authenticated as the app.
    pub requests: AtomicU64,
    /// Refused 403: a service, method or path the app may not use.
    pub forbidden: AtomicU64,
    /// Refused 429: over the app's plan.
    pub limited: AtomicU64,
    /// Answered 4xx (the 403s and 429s above among them) and 5xx.
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    /// Microseconds from request head to response end, summed.
    pub latency_us: AtomicU64,
}

impl AppSlot {
    fn reset(&self) {
        self.limit.reset();
        for c in [
            &self.requests,
            &self.forbidden,
            &self.limited,
            &self.client_errors,
            &self.server_errors,
            &self.latency_us,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The first chunk's slots; each later chunk is twice the one before, so a
/// million apps take 8 chunks, and the big ones are large enough for the
/// allocator to put on huge pages (a slot is touched at random per request).
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Chunk `k` holds slots `CHUNK * (2^k - 1) .. CHUNK * (2^(k+1) - 1)`.
fn chunk_of(s: u32) -> (usize, usize) {
    let q = (s as usize >> CHUNK_BITS) + 1;
    let k = q.ilog2() as usize;
    (k, s as usize - (((1 << k) - 1) << CHUNK_BITS))
}

fn slot_in(chunks: &[Arc<[AppSlot]>], s: u32) -> &AppSlot {
    let (k, i) = chunk_of(s);
    &chunks[k][i]
}

/// The slots of every app, in chunks that never move, kept by the registry
/// across reloads. A slot whose app is gone is reused only once no table
/// that named it is alive any more (in-flight guards hold their table).
#[derive(Debug, Default)]
pub struct SlotPool {
    chunks: Vec<Arc<[AppSlot]>>,
    used: u32,
    free: Vec<u32>,
    /// Slots dropped by the table of each generation, waiting for every
    /// table up to that generation to be gone.
    retired: Vec<(u64, Vec<u32>)>,
    /// Tables that may still be in use, by generation.
    tables: Vec<(u64, Weak<AppTable>)>,
}

impl SlotPool {
    fn take(&mut self) -> u32 {
        if let Some(s) = self.free.pop() {
            return s;
        }
        let k = self.chunks.len();
        if self.used as usize == ((1 << k) - 1) << CHUNK_BITS {
            self.chunks
                .push((0..CHUNK << k).map(|_| AppSlot::default()).collect());
        }
        self.used += 1;
        self.used - 1
    }

    fn get(&self, s: u32) -> &AppSlot {
        slot_in(&self.chunks, s)
    }

    /// Slots in use or waiting to be reused.
    pub fn live(&self) -> usize {
        self.used as usize - self.free.len()
    }

    /// Frees the retired slots no live table can still reach.
    fn collect(&mut self) {
        self.tables.retain(|(_, t)| t.strong_count() > 0);
        let oldest = self.tables.iter().map(|(g, _)| *g).min();
        let mut i = 0;
        while i < self.retired.len() {
            // Retired by generation g: named only by tables older than g.
            if oldest.is_none_or(|o| o >= self.retired[i].0) {
                let (_, slots) = self.retired.swap_remove(i);
                for &s in &slots {
                    self.get(s).reset();
                }
                self.free.extend(slots);
            } else {
                i += 1;
            }
        }
    }

    /// Gives back the slots a table that was never published took.
    pub fn abandoned(&mut self, table: &AppTable, old: Option<&AppTable>) {
        let mut old_slots = vec![false; self.used as usize];
        for s in old.into_iter().flat_map(|o| o.all_slots()) {
            old_slots[s as usize] = true;
        }
        for s in table.all_slots().filter(|&s| !old_slots[s as usize]) {
            self.get(s).reset();
            self.free.push(s);
        }
    }

    /// Records the table now published and the old table's slots it no
    /// longer uses.
    pub fn published(&mut self, table: &Arc<AppTable>, old: Option<&AppTable>) {
        if let Some(old) = old {
            let mut kept = vec![false; self.used as usize];
            for s in table.all_slots() {
                kept[s as usize] = true;
            }
            let dropped: Vec<u32> = old.all_slots().filter(|&s| !kept[s as usize]).collect();
            if !dropped.is_empty() {
                self.retired.push((table.generation, dropped));
            }
        }
        self.tables.push((table.generation, Arc::downgrade(table)));
        self.collect();
    }
}

/// One app: 24 bytes, the rest shared or in the arena.
#[derive(Debug, Clone, Copy)]
struct AppRec {
    id: u32,
    id_len: u16,
    policy: u32,
    jwt: u32,
    slot: u32,
    extra: u32,
}

#[derive(Debug)]
pub struct AppTable {
    /// Every id and key, back to back (all ASCII).
    text: String,
    apps: Vec<AppRec>,
    /// Every key's record, by keyed hash of the key.
    by_key: KeyTable,
    /// Indices into `apps`, by keyed hash of the id (JWTs name their app).
    by_id: HashTable<u32>,
    policies: Vec<Policy>,
    plans: Vec<PlanRt>,
    jwts: Vec<JwtKeyRt>,
    extra_slots: Vec<u32>,
    chunks: Box<[Arc<[AppSlot]>]>,
    secret: RandomState,
    pub generation: u64,
}

/// An app of a table.
#[derive(Debug, Clone, Copy)]
pub struct AppRef<'a> {
    pub table: &'a Arc<AppTable>,
    pub index: u32,
}

/// The plan that applies to a call and the slot it charges.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    pub plan: &'a PlanRt,
    pub slot: u32,
}

impl<'a> AppRef<'a> {
    fn rec(&self) -> &'a AppRec {
        &self.table.apps[self.index as usize]
    }

    fn policy(&self) -> &'a Policy {
        &self.table.policies[self.rec().policy as usize]
    }

    pub fn id(&self) -> &'a str {
        self.table.id(self.index)
    }

    /// The app's own slot (its metrics).
    pub fn slot(&self) -> &'a AppSlot {
        self.table.slot(self.rec().slot)
    }

    pub fn jwt(&self) -> Option<&'a JwtKeyRt> {
        self.table.jwts.get(self.rec().jwt as usize)
    }

    pub fn may_call(&self, service: u32) -> bool {
        self.policy()
            .services
            .as_ref()
            .is_none_or(|s| s.binary_search(&service).is_ok())
    }

    /// Whether the app may use `method` on `path` (normalised).
    pub fn may_request(&self, method: &[u8], path: &[u8]) -> bool {
        let p = self.policy();
        (p.methods.is_empty() || p.methods.iter().any(|m| **m == *method))
            && (p.paths.is_empty()
                || p.paths.iter().any(|p| {
                    p.as_ref() == b"/"
                        || (path.starts_with(p) && matches!(path.get(p.len()), None | Some(b'/')))
                }))
    }

    /// The plan that applies to a call of `service`, if any.
    pub fn charge_for(&self, service: u32) -> Option<Charge<'a>> {
        let (rec, p) = (self.rec(), self.policy());
        let (plan, slot) = match p.by_service.binary_search_by_key(&service, |e| e.0) {
            Ok(i) => (
                p.by_service[i].2,
                self.table.extra_slots[rec.extra as usize + i],
            ),
            Err(_) => (p.default_plan, rec.slot),
        };
        Some(Charge {
            plan: self.table.plans.get(plan as usize)?,
            slot,
        })
    }
}

impl AppTable {
    /// Compiles the apps of `config`. `services` are the services' names in
    /// index order; `old` is the table in force, whose slots the same apps
    /// keep (their buckets, quotas and metrics).
    pub fn new(
        config: &Config,
        services: &[&str],
        old: Option<&AppTable>,
        pool: &mut SlotPool,
        secret: &RandomState,
        generation: u64,
    ) -> Result<AppTable, String> {
        let service_index: HashMap<&str, u32> = services
            .iter()
            .enumerate()
            .map(|(i, s)| (*s, i as u32))
            .collect();
        let plan_index: HashMap<&str, u32> = config
            .plans
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i as u32))
            .collect();
        let n = config.apps.len();
        let mut t = AppTable {
            text: String::with_capacity(n * 40),
            apps: Vec::with_capacity(n),
            by_key: KeyTable::with_capacity(config.apps.iter().map(|a| a.keys.len()).sum()),
            by_id: HashTable::with_capacity(n),
            policies: Vec::new(),
            plans: config.plans.iter().map(PlanRt::new).collect(),
            jwts: Vec::new(),
            extra_slots: Vec::new(),
            chunks: Box::new([]),
            secret: secret.clone(),
            generation,
        };
        let mut policies: HashMap<PolicyKey<'_>, u32> = HashMap::new();
        for (i, app) in config.apps.iter().enumerate() {
            let key: PolicyKey<'_> = (
                &app.services,
                &app.methods,
                &app.paths,
                &app.plan,
                &app.plans_by_service,
            );
            let policy = *policies.entry(key).or_insert_with(|| {
                t.policies.push(policy(app, &service_index, &plan_index));
                t.policies.len() as u32 - 1
            });
            let jwt = match &app.jwt {
                None => NONE,
                Some(j) => {
                    t.jwts
                        .push(jwt_key(j).map_err(|e| format!("apps {}: jwt: {e}", app.id))?);
                    t.jwts.len() as u32 - 1
                }
            };
            let id = t.push_text(&app.id)?;
            let prev = old.and_then(|o| o.find_id(&app.id).map(|a| (o, a)));
            let slot = prev.map_or_else(|| pool.take(), |(o, a)| o.apps[a as usize].slot);
            let extra = t.extra_slots.len() as u32;
            for (_, name, _) in t.policies[policy as usize].by_service.iter() {
                let kept = prev.and_then(|(o, a)| o.service_slot(a, name));
                t.extra_slots.push(kept.unwrap_or_else(|| pool.take()));
            }
            t.apps.push(AppRec {
                id: id.0,
                id_len: id.1,
                policy,
                jwt,
                slot,
                extra,
            });
            let hash = t.secret.hash_one(app.id.as_bytes());
            let AppTable {
                by_id,
                apps,
                text,
                secret,
                ..
            } = &mut t;
            by_id.insert_unique(hash, i as u32, |&a| {
                let r = &apps[a as usize];
                secret.hash_one(&text.as_bytes()[r.id as usize..][..r.id_len as usize])
            });
            for k in &app.keys {
                let (at, len) = t.push_text(k)?;
                let rec = KeyRec {
                    at,
                    app: i as u32,
                    slot,
                    len,
                    tag: 0,
                };
                t.by_key.insert(t.secret.hash_one(k.as_bytes()), rec);
            }
        }
        t.chunks = pool.chunks.clone().into_boxed_slice();
        Ok(t)
    }

    fn push_text(&mut self, s: &str) -> Result<(u32, u16), String> {
        let at = u32::try_from(self.text.len())
            .ok()
            .filter(|at| at.checked_add(s.len() as u32).is_some())
            .ok_or("apps: ids and keys exceed 4 GiB")?;
        let len = u16::try_from(s.len()).map_err(|_| "apps: an id or key is too long")?;
        self.text.push_str(s);
        Ok((at, len))
    }

    fn find_id(&self, id: &str) -> Option<u32> {
        self.by_id
            .find(self.secret.hash_one(id.as_bytes()), |&a| self.id(a) == id)
            .copied()
    }

    /// The slot app `a` of this table has for the service called `name`.
    fn service_slot(&self, a: u32, name: &str) -> Option<u32> {
        let rec = &self.apps[a as usize];
        let p = &self.policies[rec.policy as usize];
        let i = p.by_service.iter().position(|e| &*e.1 == name)?;
        Some(self.extra_slots[rec.extra as usize + i])
    }

    fn all_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.apps
            .iter()
            .map(|a| a.slot)
            .chain(self.extra_slots.iter().copied())
    }

    fn id(&self, a: u32) -> &str {
        let r = &self.apps[a as usize];
        &self.text[r.id as usize..][..r.id_len as usize]
    }

    pub fn slot(&self, s: u32) -> &AppSlot {
        slot_in(&self.chunks, s)
    }

    /// Counts the end of a request of app `index` (its status and time).
    pub fn record(&self, index: u32, status: u16, us: u64) {
        let Some(a) = self.apps.get(index as usize) else {
            return;
        };
        let slot = self.slot(a.slot);
        slot.latency_us.fetch_add(us, Ordering::Relaxed);
        match status {
            400..=499 => slot.client_errors.fetch_add(1, Ordering::Relaxed),
            500.. => slot.server_errors.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// The app with this id.
    pub fn by_id<'a>(self: &'a Arc<Self>, id: &str) -> Option<AppRef<'a>> {
        let index = self.find_id(id)?;
        Some(AppRef { table: self, index })
    }

    /// The app holding `key`. Every candidate under the key's hash is
    /// compared in full, in constant time.
    pub fn by_key<'a>(self: &'a Arc<Self>, key: &[u8]) -> Option<AppRef<'a>> {
        let mut found = None;
        for r in self.by_key.candidates(self.secret.hash_one(key)) {
            // Start the loads the request needs next (the app record and
            // its counter slot) now, so that their cache misses overlap the
            // key comparison's instead of following it.
            std::hint::black_box(self.apps[r.app as usize].policy);
            std::hint::black_box(self.slot(r.slot).requests.load(Ordering::Relaxed));
            let stored = &self.text.as_bytes()[r.at as usize..][..r.len as usize];
            if bool::from(stored.ct_eq(key)) {
                found = Some(AppRef {
                    table: self,
                    index: r.app,
                });
            }
        }
        found
    }

    /// The id of app `index` (as the access log names it).
    pub fn app_id(&self, index: u32) -> &str {
        self.id(index)
    }

    pub fn len(&self) -> usize {
        self.apps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// Every plan state of every app, for an upgrade: the app's id, the
    /// service a `plans_by_service` slot is for (`None`: the app's own
    /// plan), and the state.
    pub(crate) fn limit_states(&self) -> impl Iterator<Item = (&str, Option<&str>, &LimitState)> {
        (0..self.apps.len() as u32).flat_map(move |a| {
            let rec = &self.apps[a as usize];
            let own = std::iter::once((self.id(a), None, &self.slot(rec.slot).limit));
            let by_service = self.policies[rec.policy as usize]
                .by_service
                .iter()
                .enumerate()
                .map(move |(i, (_, name, _))| {
                    let slot = self.extra_slots[rec.extra as usize + i];
                    (self.id(a), Some(&**name), &self.slot(slot).limit)
                });
            own.chain(by_service)
        })
    }

    /// Every app slot under a `scope: global` plan: the Redis key of its
    /// limit (the app, the service of a `plans_by_service` entry or `*`,
    /// the plan), the slot and the plan.
    pub(crate) fn global_slots(&self) -> impl Iterator<Item = (String, u32, &PlanRt)> + '_ {
        let global = move |p: u32| self.plans.get(p as usize).filter(|p| p.global.is_some());
        (0..self.apps.len() as u32).flat_map(move |a| {
            let rec = &self.apps[a as usize];
            let policy = &self.policies[rec.policy as usize];
            let own = global(policy.default_plan)
                .map(|p| (format!("sg:{{{}}}:*:{}", self.id(a), p.name), rec.slot, p));
            let by_service = policy
                .by_service
                .iter()
                .enumerate()
                .filter_map(move |(i, e)| {
                    let p = global(e.2)?;
                    let slot = self.extra_slots[rec.extra as usize + i];
                    Some((format!("sg:{{{}}}:{}:{}", self.id(a), e.1, p.name), slot, p))
                });
            own.into_iter().chain(by_service)
        })
    }

    /// The plan state of app `id` for `service` (`None`: its own plan), if
    /// the app has that slot: the same slot a reload would keep.
    pub(crate) fn limit_state(&self, id: &str, service: Option<&str>) -> Option<&LimitState> {
        let a = self.find_id(id)?;
        let slot = match service {
            None => self.apps[a as usize].slot,
            Some(name) => self.service_slot(a, name)?,
        };
        Some(&self.slot(slot).limit)
    }

    /// Every app's id and own slot, in config order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AppSlot)> {
        (0..self.apps.len() as u32).map(|a| (self.id(a), self.slot(self.apps[a as usize].slot)))
    }
}

/// A short, stable fingerprint of a key for logs (written as 8 hex
/// digits): never the key itself.
pub fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5167_6174_6557_6179) >> 32) as u32
}

#[cfg(test)]
mod tests;
