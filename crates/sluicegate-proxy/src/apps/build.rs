//! Building the apps table: the whole of it from a config
//! ([`AppTable::new`]), or from the table in force and the apps that
//! changed ([`AppTable::with_changes`]), which copies only the shards those
//! apps touch (their id's, and their old and new keys') and shares every
//! other shard with the table in force. Slots follow apps by id either way.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use sluicegate_config::{App, Config};

use super::keys::{KeyRec, KeyTable};
use super::limit::PlanRt;
use super::policy::{jwt_key, policy, PolicyKey, NONE};
use super::pool::{Delta, SlotPool};
use super::slab::{pack, Slab};
use super::table::{
    index_of, shard_of, split_index, AppRec, AppShard, AppTable, KeyShard, PLACE_BITS, SHARDS,
};

/// One change to the apps of a table.
#[derive(Debug, Clone, Copy)]
pub enum AppChange<'a> {
    /// The app with this id is added, or replaces the one with its id.
    Upsert(&'a App),
    /// The app with this id is removed (nothing happens if there is none).
    Remove(&'a str),
}

/// Why a table could not be made from changes.
#[derive(Debug, PartialEq, Eq)]
pub enum DeltaError {
    /// The change is right, but only a whole compile applies it (an app
    /// with `mtls`: the routes' certificate index is built from all apps).
    NeedsFull,
    /// Problems: the app's id, the field (`keys[1]`), the message.
    Invalid(Vec<(String, String, String)>),
}

/// Service and plan names by index, for compiling an app's policy.
struct Names<'a> {
    services: HashMap<&'a str, u32>,
    plans: HashMap<&'a str, u32>,
}

impl<'a> Names<'a> {
    fn new(services: &[&'a str], plans: impl Iterator<Item = &'a str>) -> Names<'a> {
        Names {
            services: services
                .iter()
                .enumerate()
                .map(|(i, s)| (*s, i as u32))
                .collect(),
            plans: plans.enumerate().map(|(i, p)| (p, i as u32)).collect(),
        }
    }
}

/// Where new slots come from, and the list of those taken.
struct Taker<'p> {
    pool: &'p mut SlotPool,
    taken: &'p mut Vec<u32>,
}

impl Taker<'_> {
    fn take(&mut self) -> u32 {
        let s = self.pool.take();
        self.taken.push(s);
        s
    }
}

/// A key on its way into a key shard.
struct NewKey<'a> {
    hash: u64,
    key: &'a [u8],
    app: u32,
    slot: u32,
}

/// Where `s` goes in a text of `before` bytes (checked to fit).
fn text_place(before: usize, s: &str) -> Result<(u32, u16), String> {
    let at = u32::try_from(before)
        .ok()
        .filter(|at| at.checked_add(s.len() as u32).is_some())
        .ok_or("apps: ids and keys of one shard exceed 4 GiB")?;
    let len = u16::try_from(s.len()).map_err(|_| "apps: an id or key is too long")?;
    Ok((at, len))
}

impl AppShard {
    /// Adds app `rec` (its `id` to be set from `id`) under `hash`; returns
    /// its place.
    fn push(
        &mut self,
        hash: u64,
        id: &str,
        mut rec: AppRec,
        secret: &RandomState,
    ) -> Result<u32, String> {
        let place = u32::try_from(self.apps.len())
            .ok()
            .filter(|p| *p < 1 << PLACE_BITS)
            .ok_or("apps: too many apps in one shard")?;
        (rec.id, rec.id_len) = text_place(self.text.len(), id)?;
        self.text.push_str(id);
        self.apps.make_mut().push(rec);
        let AppShard {
            by_id, apps, text, ..
        } = self;
        by_id.insert_unique(hash, place, |&a| {
            let r = &apps[a as usize];
            secret.hash_one(&text.as_bytes()[r.id as usize..][..r.id_len as usize])
        });
        Ok(place)
    }

    /// The record of `app` (id not set), its `plans_by_service` slots
    /// (each kept from `keep` by service name, or taken) and its key
    /// hashes pushed; `policy` is its rules' index here.
    fn record(
        &mut self,
        app: &App,
        policy: u32,
        slot: u32,
        mut keep: impl FnMut(&str) -> Option<u32>,
        slots: &mut Taker<'_>,
        secret: &RandomState,
    ) -> Result<AppRec, String> {
        let jwt = match &app.jwt {
            None => NONE,
            Some(j) => {
                self.jwts
                    .push(jwt_key(j).map_err(|e| format!("apps {}: jwt: {e}", app.id))?);
                self.jwts.len() as u32 - 1
            }
        };
        let extra = self.extra_slots.len() as u32;
        let by_service = self.policies[policy as usize].by_service.clone();
        for (_, name, _) in by_service.iter() {
            let s = keep(name).unwrap_or_else(|| slots.take());
            self.extra_slots.push(s);
        }
        let keys = self.key_hashes.len() as u32;
        self.key_hashes
            .extend(app.keys.iter().map(|k| secret.hash_one(k.as_bytes())));
        Ok(AppRec {
            id: 0,
            id_len: 0,
            nkeys: u16::try_from(app.keys.len()).map_err(|_| "apps: too many keys")?,
            keys,
            policy,
            jwt,
            slot,
            extra,
        })
    }
}

impl KeyShard {
    fn build<'k>(keys: impl Iterator<Item = NewKey<'k>>, n: usize) -> Result<KeyShard, String> {
        let mut shard = KeyShard {
            text: Slab::default(),
            table: KeyTable::with_capacity(n),
            len: 0,
        };
        for k in keys {
            shard.insert(k)?;
        }
        Ok(shard)
    }

    fn insert(&mut self, k: NewKey<'_>) -> Result<(), String> {
        let key = std::str::from_utf8(k.key).map_err(|_| "apps: a key is not ASCII")?;
        let (at, len) = text_place(self.text.len(), key)?;
        self.text.make_mut().extend_from_slice(key.as_bytes());
        self.table.insert(
            k.hash,
            KeyRec {
                at,
                app: k.app,
                slot: k.slot,
                len,
                tag: 0,
            },
        );
        self.len += 1;
        Ok(())
    }
}

/// Shards shared by every empty place of a table.
fn empties() -> (Arc<AppShard>, Arc<KeyShard>) {
    (
        Arc::new(AppShard::default()),
        Arc::new(KeyShard {
            text: Slab::default(),
            table: KeyTable::with_capacity(0),
            len: 0,
        }),
    )
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
        let names = Names::new(services, config.plans.iter().map(|p| p.name.as_str()));
        let plans: Arc<[PlanRt]> = config.plans.iter().map(PlanRt::new).collect();
        // Ids' hashes first: each shard is then sized once.
        let hashes: Vec<u64> = config
            .apps
            .iter()
            .map(|a| secret.hash_one(a.id.as_bytes()))
            .collect();
        let mut counts = vec![0usize; SHARDS];
        for h in &hashes {
            counts[shard_of(*h)] += 1;
        }
        let mut shards: Vec<AppShard> = counts
            .iter()
            .map(|&n| AppShard {
                apps: Slab::Own(Vec::with_capacity(n)),
                text: String::with_capacity(n * 16),
                by_id: hashbrown::HashTable::with_capacity(n),
                ..AppShard::default()
            })
            .collect();
        let mut policies: Vec<HashMap<PolicyKey<'_>, u32>> =
            (0..SHARDS).map(|_| HashMap::new()).collect();
        let mut keys: Vec<Vec<NewKey<'_>>> = (0..SHARDS).map(|_| Vec::new()).collect();
        let mut taken = Vec::new();
        for (app, &hash) in config.apps.iter().zip(&hashes) {
            let s = shard_of(hash);
            let shard = &mut shards[s];
            let key: PolicyKey<'_> = (
                &app.services,
                &app.methods,
                &app.paths,
                &app.plan,
                &app.plans_by_service,
            );
            let policy = *policies[s].entry(key).or_insert_with(|| {
                shard
                    .policies
                    .push(policy(app, &names.services, &names.plans));
                shard.policies.len() as u32 - 1
            });
            let prev = old.and_then(|o| o.find_id(&app.id).map(|a| (o, a)));
            let slot = prev.map_or_else(|| pool.take(), |(o, a)| o.rec(a).slot);
            let keep = |name: &str| prev.and_then(|(o, a)| o.service_slot_of(a, name));
            let mut slots = Taker {
                pool: &mut *pool,
                taken: &mut taken,
            };
            let rec = shard.record(app, policy, slot, keep, &mut slots, secret)?;
            let place = shard.push(hash, &app.id, rec, secret)?;
            let index = index_of(s, place);
            for k in &app.keys {
                let hash = secret.hash_one(k.as_bytes());
                keys[shard_of(hash)].push(NewKey {
                    hash,
                    key: k.as_bytes(),
                    app: index,
                    slot,
                });
            }
        }
        let mut built_keys: Vec<Option<KeyShard>> = keys
            .into_iter()
            .map(|list| {
                let n = list.len();
                (n > 0)
                    .then(|| KeyShard::build(list.into_iter(), n))
                    .transpose()
            })
            .collect::<Result<_, String>>()?;
        // What a request reads at random (key buckets, key text, app
        // records) goes into one block per kind: a few large allocations
        // on huge pages, where 256 small ones each would be on 4 KiB pages.
        pack(shards.iter_mut().map(|s| &mut s.apps));
        pack(
            built_keys
                .iter_mut()
                .flatten()
                .map(|k| &mut k.table.buckets),
        );
        pack(built_keys.iter_mut().flatten().map(|k| &mut k.text));
        let (empty_apps, empty_keys) = empties();
        let app_shards = shards
            .into_iter()
            .map(|s| {
                if s.apps.is_empty() {
                    empty_apps.clone()
                } else {
                    Arc::new(s)
                }
            })
            .collect();
        let key_shards = built_keys
            .into_iter()
            .map(|k| k.map_or_else(|| empty_keys.clone(), Arc::new))
            .collect();
        Ok(AppTable {
            app_shards,
            key_shards,
            plans,
            chunks: pool.chunks.clone().into_boxed_slice(),
            secret: secret.clone(),
            len: config.apps.len(),
            generation,
        })
    }

    /// A table with no apps.
    #[cfg(test)]
    pub(crate) fn empty() -> Arc<AppTable> {
        let config = sluicegate_config::parse("listen: [\"127.0.0.1:9\"]\n").expect("valid");
        let mut pool = SlotPool::default();
        Arc::new(
            AppTable::new(&config, &[], None, &mut pool, &RandomState::new(), 0).expect("empty"),
        )
    }

    /// A table that is this one with `changes` made, sharing every shard
    /// they do not touch. Ids and keys are checked as a whole config's
    /// are (a key held by another app is refused); `services` are the
    /// services' names in index order (those of the snapshot in force).
    pub fn with_changes(
        &self,
        changes: &[AppChange<'_>],
        services: &[&str],
        pool: &mut SlotPool,
        generation: u64,
    ) -> Result<(AppTable, Delta), DeltaError> {
        if changes
            .iter()
            .any(|c| matches!(c, AppChange::Upsert(a) if a.mtls.is_some()))
        {
            return Err(DeltaError::NeedsFull);
        }
        let mut delta = Delta::default();
        match self.changed(changes, services, pool, &mut delta) {
            Ok(t) => Ok((AppTable { generation, ..t }, delta)),
            Err(e) => {
                pool.abandoned_delta(delta);
                Err(e)
            }
        }
    }

    fn changed(
        &self,
        changes: &[AppChange<'_>],
        services: &[&str],
        pool: &mut SlotPool,
        delta: &mut Delta,
    ) -> Result<AppTable, DeltaError> {
        let invalid = |id: &str, field: &str, m: String| {
            DeltaError::Invalid(vec![(id.to_string(), field.to_string(), m)])
        };
        let names = Names::new(services, self.plan_names());
        let mut app_shards: HashMap<usize, AppShard> = HashMap::new();
        // Apps whose old keys go, by index, and the key shards they are in.
        let mut gone: HashSet<u32> = HashSet::new();
        let mut key_shards: HashSet<usize> = HashSet::new();
        let mut new_keys: Vec<(NewKey<'_>, &str, usize)> = Vec::new();
        let mut len = self.len;
        let mut seen_ids: HashSet<&str> = HashSet::new();
        for change in changes {
            let id = match change {
                AppChange::Upsert(a) => a.id.as_str(),
                AppChange::Remove(id) => id,
            };
            if !seen_ids.insert(id) {
                return Err(invalid(
                    id,
                    "id",
                    format!("app {id:?} changed twice in one delta"),
                ));
            }
            let hash = self.secret.hash_one(id.as_bytes());
            let s = shard_of(hash);
            let shard = app_shards
                .entry(s)
                .or_insert_with(|| (*self.app_shards[s]).clone());
            let place = shard.find(hash, id);
            if let Some(p) = place {
                let index = index_of(s, p);
                gone.insert(index);
                key_shards.extend(shard.key_hashes_of(p as usize).iter().map(|h| shard_of(*h)));
            }
            match (change, place) {
                (AppChange::Remove(_), None) => {}
                (AppChange::Remove(_), Some(p)) => {
                    delta.dropped.extend(shard.slots_of(p as usize));
                    shard.apps.make_mut()[p as usize].id_len = 0;
                    if let Ok(e) = shard.by_id.find_entry(hash, |&a| a == p) {
                        e.remove();
                    }
                    len -= 1;
                }
                (AppChange::Upsert(app), place) => {
                    let p = policy(app, &names.services, &names.plans);
                    let policy = match shard.policies.iter().position(|q| *q == p) {
                        Some(i) => i as u32,
                        None => {
                            shard.policies.push(p);
                            shard.policies.len() as u32 - 1
                        }
                    };
                    let (slot, old_slots) = match place {
                        Some(p) => (
                            shard.apps[p as usize].slot,
                            shard.slots_of(p as usize).collect::<Vec<u32>>(),
                        ),
                        None => {
                            let s = pool.take();
                            delta.taken.push(s);
                            (s, Vec::new())
                        }
                    };
                    let before = shard.clone_service_slots(place);
                    let keep =
                        |name: &str| before.iter().find(|(n, _)| &**n == name).map(|(_, s)| *s);
                    let mut rec = shard
                        .record(
                            app,
                            policy,
                            slot,
                            keep,
                            &mut Taker {
                                pool: &mut *pool,
                                taken: &mut delta.taken,
                            },
                            &self.secret,
                        )
                        .map_err(|m| invalid(id, "", m))?;
                    let place = match place {
                        Some(p) => {
                            let old = shard.apps[p as usize];
                            (rec.id, rec.id_len) = (old.id, old.id_len);
                            shard.apps.make_mut()[p as usize] = rec;
                            p
                        }
                        None => {
                            len += 1;
                            shard
                                .push(hash, id, rec, &self.secret)
                                .map_err(|m| invalid(id, "id", m))?
                        }
                    };
                    let kept: HashSet<u32> = shard.slots_of(place as usize).collect();
                    delta
                        .dropped
                        .extend(old_slots.into_iter().filter(|s| !kept.contains(s)));
                    for (j, k) in app.keys.iter().enumerate() {
                        let hash = self.secret.hash_one(k.as_bytes());
                        key_shards.insert(shard_of(hash));
                        new_keys.push((
                            NewKey {
                                hash,
                                key: k.as_bytes(),
                                app: index_of(s, place),
                                slot,
                            },
                            id,
                            j,
                        ));
                    }
                }
            }
        }
        // Every touched key shard again: what stays, then the new keys.
        let mut built: HashMap<usize, KeyShard> = HashMap::new();
        for &s in &key_shards {
            let old = &self.key_shards[s];
            let more = new_keys
                .iter()
                .filter(|(k, ..)| shard_of(k.hash) == s)
                .count();
            let stay = old.table.records().filter(|r| !gone.contains(&r.app));
            let n = old.len + more;
            let shard = KeyShard::build(
                stay.map(|r| NewKey {
                    hash: self.secret.hash_one(old.key(r)),
                    key: old.key(r),
                    app: r.app,
                    slot: r.slot,
                }),
                n,
            )
            .map_err(|m| invalid("", "", m))?;
            built.insert(s, shard);
        }
        for (k, id, j) in new_keys {
            let shard = built.get_mut(&shard_of(k.hash)).expect("touched");
            let owner = shard
                .table
                .candidates(k.hash)
                .find(|r| shard.key(r) == k.key)
                .map(|r| r.app);
            if let Some(owner) = owner {
                let whose = if owner == k.app {
                    "this app"
                } else {
                    "another app"
                };
                return Err(invalid(
                    id,
                    &format!("keys[{j}]"),
                    format!("key already given to {whose}"),
                ));
            }
            shard.insert(k).map_err(|m| invalid(id, "keys", m))?;
        }
        let mut apps = self.app_shards.clone();
        for (s, shard) in app_shards {
            apps[s] = Arc::new(shard);
        }
        let mut keys = self.key_shards.clone();
        for (s, shard) in built {
            keys[s] = Arc::new(shard);
        }
        Ok(AppTable {
            app_shards: apps,
            key_shards: keys,
            plans: self.plans.clone(),
            chunks: pool.chunks.clone().into_boxed_slice(),
            secret: self.secret.clone(),
            len,
            generation: 0,
        })
    }

    /// The slot app `index` has for the service called `name`.
    fn service_slot_of(&self, index: u32, name: &str) -> Option<u32> {
        let (s, p) = split_index(index);
        self.app_shards[s].service_slot(p, name)
    }
}

impl AppShard {
    /// An app's `plans_by_service` slots by service name (none for `None`).
    fn clone_service_slots(&self, place: Option<u32>) -> Vec<(Arc<str>, u32)> {
        let Some(p) = place else {
            return Vec::new();
        };
        let rec = &self.apps[p as usize];
        self.policies[rec.policy as usize]
            .by_service
            .iter()
            .enumerate()
            .map(|(i, e)| (e.1.clone(), self.extra_slots[rec.extra as usize + i]))
            .collect()
    }
}
