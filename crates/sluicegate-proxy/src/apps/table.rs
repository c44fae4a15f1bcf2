//! The apps table's layout and its lookups: apps in shards by the hash of
//! their id, keys in shards by the hash of the key, each shard shared
//! between the tables that did not change it.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hashbrown::HashTable;
use subtle::ConstantTimeEq;

use super::keys::KeyTable;
use super::limit::{LimitState, PlanRt};
use super::policy::{JwtKeyRt, Policy};
use super::slab::Slab;
use super::slot::{slot_in, AppSlot};

/// Shards of each kind: a change copies about 1/256 of the apps and of
/// the keys, a few thousand at a million apps.
pub(super) const SHARD_BITS: u32 = 8;
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;
/// An app's index in its table: its shard in the high bits, its place in
/// the shard in the low ones.
pub(super) const PLACE_BITS: u32 = 24;
const PLACE_MASK: u32 = (1 << PLACE_BITS) - 1;

/// The shard of a hash: bits the key index does not use for its bucket
/// (the low ones) or its tag (the top 16).
pub(super) fn shard_of(hash: u64) -> usize {
    (hash >> 40) as usize & (SHARDS - 1)
}

pub(super) fn index_of(shard: usize, place: u32) -> u32 {
    (shard as u32) << PLACE_BITS | place
}

pub(crate) fn split_index(index: u32) -> (usize, usize) {
    (
        (index >> PLACE_BITS) as usize,
        (index & PLACE_MASK) as usize,
    )
}

/// One app: 28 bytes, the rest shared or in its shard's arena.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppRec {
    /// The id in the shard's text; `id_len` 0: the app was removed (its
    /// place is kept, since key records name it).
    pub(super) id: u32,
    pub(super) id_len: u16,
    /// How many keys, whose hashes start at `keys` in `key_hashes`.
    pub(super) nkeys: u16,
    pub(super) keys: u32,
    pub(super) policy: u32,
    pub(super) jwt: u32,
    pub(crate) slot: u32,
    pub(super) extra: u32,
}

impl AppRec {
    pub(super) fn live(&self) -> bool {
        self.id_len != 0
    }
}

/// The apps whose id hashes to one shard.
#[derive(Debug, Clone, Default)]
pub(crate) struct AppShard {
    /// The ids, back to back (ASCII).
    pub(super) text: String,
    pub(super) apps: Slab<AppRec>,
    /// Places in `apps`, by keyed hash of the id (JWTs name their app).
    pub(super) by_id: HashTable<u32>,
    /// Rules shared by the shard's apps that have the same.
    pub(super) policies: Vec<Policy>,
    pub(super) jwts: Vec<JwtKeyRt>,
    /// The slots of each app's `plans_by_service` entries, in order.
    pub(super) extra_slots: Vec<u32>,
    /// The hashes of each app's keys (to find its key records).
    pub(super) key_hashes: Vec<u64>,
}

impl AppShard {
    pub(super) fn id(&self, place: usize) -> &str {
        let r = &self.apps[place];
        &self.text[r.id as usize..][..r.id_len as usize]
    }

    pub(super) fn find(&self, hash: u64, id: &str) -> Option<u32> {
        self.by_id
            .find(hash, |&a| self.id(a as usize) == id)
            .copied()
    }

    /// The slot app `place` has for the service called `name`.
    pub(super) fn service_slot(&self, place: usize, name: &str) -> Option<u32> {
        let rec = &self.apps[place];
        let p = &self.policies[rec.policy as usize];
        let i = p.by_service.iter().position(|e| &*e.1 == name)?;
        Some(self.extra_slots[rec.extra as usize + i])
    }

    /// Every slot of app `place`: its own, then its services'.
    pub(super) fn slots_of(&self, place: usize) -> impl Iterator<Item = u32> + '_ {
        let rec = &self.apps[place];
        let n = self.policies[rec.policy as usize].by_service.len();
        std::iter::once(rec.slot).chain(self.extra_slots[rec.extra as usize..][..n].iter().copied())
    }

    pub(super) fn key_hashes_of(&self, place: usize) -> &[u64] {
        let rec = &self.apps[place];
        &self.key_hashes[rec.keys as usize..][..rec.nkeys as usize]
    }
}

/// The keys whose hash falls in one shard.
#[derive(Debug, Clone)]
pub(crate) struct KeyShard {
    /// The keys, back to back (ASCII).
    pub(super) text: Slab<u8>,
    pub(super) table: KeyTable,
    pub(super) len: usize,
}

impl KeyShard {
    pub(super) fn key(&self, r: &super::keys::KeyRec) -> &[u8] {
        &self.text[r.at as usize..][..r.len as usize]
    }
}

#[derive(Debug)]
pub struct AppTable {
    pub(crate) app_shards: Box<[Arc<AppShard>]>,
    pub(crate) key_shards: Box<[Arc<KeyShard>]>,
    pub(super) plans: Arc<[PlanRt]>,
    pub(super) chunks: Box<[Arc<[AppSlot]>]>,
    pub(super) secret: RandomState,
    /// Apps in the table (removed ones not counted).
    pub(super) len: usize,
    pub generation: u64,
}

/// An app of a table, with its shard and record found once.
#[derive(Debug, Clone, Copy)]
pub struct AppRef<'a> {
    pub table: &'a Arc<AppTable>,
    pub index: u32,
    shard: &'a AppShard,
    rec: &'a AppRec,
}

/// The plan that applies to a call and the slot it charges.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    pub plan: &'a PlanRt,
    pub slot: u32,
}

impl<'a> AppRef<'a> {
    fn new(table: &'a Arc<AppTable>, index: u32) -> AppRef<'a> {
        let (s, p) = split_index(index);
        let shard = &*table.app_shards[s];
        AppRef {
            table,
            index,
            shard,
            rec: &shard.apps[p],
        }
    }

    fn shard(&self) -> &'a AppShard {
        self.shard
    }

    fn rec(&self) -> &'a AppRec {
        self.rec
    }

    fn policy(&self) -> &'a Policy {
        &self.shard().policies[self.rec().policy as usize]
    }

    pub fn id(&self) -> &'a str {
        let r = self.rec;
        &self.shard.text[r.id as usize..][..r.id_len as usize]
    }

    /// The app's own slot (its metrics).
    pub fn slot(&self) -> &'a AppSlot {
        self.table.slot(self.rec().slot)
    }

    pub fn jwt(&self) -> Option<&'a JwtKeyRt> {
        self.shard().jwts.get(self.rec().jwt as usize)
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
                self.shard().extra_slots[rec.extra as usize + i],
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
    pub(crate) fn find_id(&self, id: &str) -> Option<u32> {
        let hash = self.secret.hash_one(id.as_bytes());
        let shard = shard_of(hash);
        let place = self.app_shards[shard].find(hash, id)?;
        Some(index_of(shard, place))
    }

    pub(crate) fn rec(&self, index: u32) -> &AppRec {
        let (s, p) = split_index(index);
        &self.app_shards[s].apps[p]
    }

    fn id(&self, index: u32) -> &str {
        let (s, p) = split_index(index);
        self.app_shards[s].id(p)
    }

    /// The slot app `index` has for the service called `name`.
    fn service_slot(&self, index: u32, name: &str) -> Option<u32> {
        let (s, p) = split_index(index);
        self.app_shards[s].service_slot(p, name)
    }

    /// Every live app's index, shard by shard.
    pub(super) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.app_shards.iter().enumerate().flat_map(|(s, shard)| {
            shard
                .apps
                .iter()
                .enumerate()
                .filter(|(_, r)| r.live())
                .map(move |(p, _)| index_of(s, p as u32))
        })
    }

    pub(super) fn all_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.indices().flat_map(|a| {
            let (s, p) = split_index(a);
            self.app_shards[s].slots_of(p)
        })
    }

    pub fn slot(&self, s: u32) -> &AppSlot {
        slot_in(&self.chunks, s)
    }

    /// Counts the end of a request of app `index` (its status and time).
    pub fn record(&self, index: u32, status: u16, us: u64) {
        let (s, p) = split_index(index);
        let Some(a) = self.app_shards.get(s).and_then(|sh| sh.apps.get(p)) else {
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
        Some(AppRef::new(self, index))
    }

    /// The app holding `key`. Every candidate under the key's hash is
    /// compared in full, in constant time.
    pub fn by_key<'a>(self: &'a Arc<Self>, key: &[u8]) -> Option<AppRef<'a>> {
        let hash = self.secret.hash_one(key);
        let shard = &self.key_shards[shard_of(hash)];
        let mut found = None;
        for r in shard.table.candidates(hash) {
            // Start the loads the request needs next (the app record and
            // its counter slot) now, so that their cache misses overlap the
            // key comparison's instead of following it.
            std::hint::black_box(self.rec(r.app).policy);
            std::hint::black_box(self.slot(r.slot).requests.load(Ordering::Relaxed));
            if bool::from(shard.key(r).ct_eq(key)) {
                found = Some(r.app);
            }
        }
        found.map(|index| AppRef::new(self, index))
    }

    /// Whether app `index` holds a key whose fingerprint is `fp` (see
    /// [`super::fingerprint`]): what a stream admitted with that key is
    /// checked against when the apps change.
    pub fn has_key_fp(&self, index: u32, fp: u32) -> bool {
        let (s, p) = split_index(index);
        let shard = &self.app_shards[s];
        shard.key_hashes_of(p).iter().any(|&hash| {
            let keys = &self.key_shards[shard_of(hash)];
            keys.table
                .candidates(hash)
                .any(|r| r.app == index && super::fingerprint(keys.key(r)) == fp)
        })
    }

    /// Every slot of the app with this id (none if there is none).
    pub(crate) fn slots_of_id(&self, id: &str) -> Vec<u32> {
        self.find_id(id).map_or_else(Vec::new, |a| {
            let (s, p) = split_index(a);
            self.app_shards[s].slots_of(p).collect()
        })
    }

    /// The id of app `index` (as the access log names it).
    pub fn app_id(&self, index: u32) -> &str {
        self.id(index)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether any plan is `scope: global`.
    pub(crate) fn has_global_plans(&self) -> bool {
        self.plans.iter().any(|p| p.global.is_some())
    }

    /// The names of the plans, in config order.
    pub fn plan_names(&self) -> impl Iterator<Item = &str> {
        self.plans.iter().map(|p| &*p.name)
    }

    /// Every plan state of every app, for an upgrade: the app's id, the
    /// service a `plans_by_service` slot is for (`None`: the app's own
    /// plan), and the state.
    pub(crate) fn limit_states(&self) -> impl Iterator<Item = (&str, Option<&str>, &LimitState)> {
        self.indices().flat_map(move |a| {
            let (s, p) = split_index(a);
            let shard = &self.app_shards[s];
            let rec = &shard.apps[p];
            let own = std::iter::once((shard.id(p), None, &self.slot(rec.slot).limit));
            let by_service = shard.policies[rec.policy as usize]
                .by_service
                .iter()
                .enumerate()
                .map(move |(i, (_, name, _))| {
                    let slot = shard.extra_slots[rec.extra as usize + i];
                    (shard.id(p), Some(&**name), &self.slot(slot).limit)
                });
            own.chain(by_service)
        })
    }

    /// Every app slot under a `scope: global` plan: the Redis key of its
    /// limit (the app, the service of a `plans_by_service` entry or `*`,
    /// the plan), the slot and the plan.
    pub(crate) fn global_slots(&self) -> impl Iterator<Item = (String, u32, &PlanRt)> + '_ {
        // Without a global plan no app is walked (a million of them).
        let any = self.plans.iter().any(|p| p.global.is_some());
        any.then(|| self.indices().flat_map(|a| self.global_slots_of(a)))
            .into_iter()
            .flatten()
    }

    /// [`AppTable::global_slots`] of app `index` alone.
    pub(crate) fn global_slots_of(
        &self,
        index: u32,
    ) -> impl Iterator<Item = (String, u32, &PlanRt)> + '_ {
        let global = move |p: u32| self.plans.get(p as usize).filter(|p| p.global.is_some());
        let (s, p) = split_index(index);
        let shard = &self.app_shards[s];
        let rec = &shard.apps[p];
        let id = shard.id(p);
        let policy = &shard.policies[rec.policy as usize];
        let own = global(policy.default_plan)
            .map(|pl| (format!("sg:{{{id}}}:*:{}", pl.name), rec.slot, pl));
        let by_service = policy
            .by_service
            .iter()
            .enumerate()
            .filter_map(move |(i, e)| {
                let pl = global(e.2)?;
                let slot = shard.extra_slots[rec.extra as usize + i];
                Some((format!("sg:{{{id}}}:{}:{}", e.1, pl.name), slot, pl))
            });
        own.into_iter().chain(by_service)
    }

    /// The plan state of app `id` for `service` (`None`: its own plan), if
    /// the app has that slot: the same slot a reload would keep.
    pub(crate) fn limit_state(&self, id: &str, service: Option<&str>) -> Option<&LimitState> {
        let a = self.find_id(id)?;
        let slot = match service {
            None => self.rec(a).slot,
            Some(name) => self.service_slot(a, name)?,
        };
        Some(&self.slot(slot).limit)
    }

    /// Every app's id and own slot.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AppSlot)> {
        self.indices()
            .map(|a| (self.id(a), self.slot(self.rec(a).slot)))
    }
}
