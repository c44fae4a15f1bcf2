//! The store: objects indexed by the hash of their key in shards, each
//! shard one short lock, shared by every worker; bounded in bytes, with
//! everything of an object counted ([`Object::size`]), and evicting by
//! CLOCK over bytes (second chance: an object read since the hand last
//! passed it is kept once more).
//!
//! A key is a list of parts (host, path...) hashed where they lie, never
//! copied for a lookup; the stored key is compared part by part to rule
//! out a hash collision. A key holds several objects when its answers
//! carry `Vary`: each keeps the request's values of the fields it names.
//! An object may also keep coded copies of its body (one per content
//! coding, made by a compressing route's first hit that asks for it),
//! counted with it and dropped with it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use xxhash_rust::xxh3::Xxh3;

/// Shards of the index at most: enough that workers seldom meet on one
/// lock. A store has fewer when each shard's share of the memory would
/// hold fewer than four of its largest objects.
const SHARDS: usize = 64;
/// Objects one key holds at most (its `Vary` variants); a new one past
/// this replaces the oldest.
const MAX_VARIANTS: usize = 16;
/// Coded copies an object may keep: one per content coding the gateway
/// makes (the slots are `proto::compress::Encoding::index`'s).
pub const CODINGS: usize = 3;

/// A field `Vary` names (lower case) and the request's value of it
/// (trimmed; empty when absent).
pub type VaryValue = (Box<[u8]>, Box<[u8]>);

/// A stored answer and what serving it needs.
#[derive(Debug)]
pub struct Object {
    pub status: u16,
    /// The answer's header fields as HTTP/1.1 lines (`name: value\r\n`),
    /// without the hop-by-hop and framing fields nor `Age`.
    pub fields: Box<[u8]>,
    pub body: Bytes,
    /// When it arrived (or was last revalidated).
    pub stored: Instant,
    /// Its age then (`Age`, `Date`).
    pub initial_age: Duration,
    /// Its freshness lifetime.
    pub fresh_for: Duration,
    /// How long past `fresh_for` it may be served while one fetch
    /// refreshes it, and while the upstream fails.
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// `must-revalidate` / `proxy-revalidate` / `no-cache`: never served
    /// stale, nor (no-cache) fresh without revalidating.
    pub must_revalidate: bool,
    pub no_cache: bool,
    /// Its validators, for a conditional request.
    pub etag: Option<Box<[u8]>>,
    pub last_modified: Option<Box<[u8]>>,
    /// The fields `Vary` names (lower case) with the request's values.
    pub vary: Box<[VaryValue]>,
    /// Its purge tags (`tags_header`).
    pub tags: Box<[Box<[u8]>]>,
    /// The route that stored it (its place in the routes' counters).
    pub route: Arc<str>,
    /// Read since the CLOCK hand last passed.
    referenced: AtomicBool,
    /// The hash of its key (where [`Store::add_coded`] finds it).
    hash: u64,
    /// Its body coded for clients that take a content coding, made on
    /// demand ([`Store::add_coded`]); none on routes that do not compress.
    coded: OnceLock<Box<Coded>>,
}

/// An object's coded bodies, a slot per coding, each set once.
#[derive(Debug, Default)]
struct Coded([OnceLock<Box<[u8]>>; CODINGS]);

/// What an object is made of; [`Store::insert`] makes the object.
#[derive(Debug)]
pub struct Parts {
    pub status: u16,
    pub fields: Box<[u8]>,
    pub body: Bytes,
    pub stored: Instant,
    pub initial_age: Duration,
    pub fresh_for: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    pub must_revalidate: bool,
    pub no_cache: bool,
    pub etag: Option<Box<[u8]>>,
    pub last_modified: Option<Box<[u8]>>,
    pub vary: Box<[VaryValue]>,
    pub tags: Box<[Box<[u8]>]>,
    pub route: Arc<str>,
}

/// The index's own bytes for one object, besides its parts: its
/// `Arc`'d struct, its slot in the map (hash, entry, control byte, at a
/// load factor of 7/8 rounded up), its pointer in the entry, and its
/// place on the CLOCK ring. Checked against the types by a test.
pub const OVERHEAD: usize = std::mem::size_of::<Object>()
    + 16 // Arc's counts
    + (std::mem::size_of::<(u64, Entry)>() + 1) * 8 / 7 + 1
    + std::mem::size_of::<Arc<Object>>()
    + std::mem::size_of::<Weak<Object>>();

/// What an object's first coded body adds besides its bytes: the slots
/// (boxed, on the heap).
const CODED_OVERHEAD: u64 = std::mem::size_of::<Coded>() as u64;

// Small beside the 1 KiB object of the benchmark.
const _: () = assert!(OVERHEAD < 512);

impl Object {
    /// Its age now (RFC 9111 section 4.2.3).
    pub fn age(&self, now: Instant) -> Duration {
        self.initial_age + now.saturating_duration_since(self.stored)
    }

    /// How long it is fresh still (`None`: stale, by how much).
    pub fn fresh(&self, now: Instant) -> Result<Duration, Duration> {
        let age = self.age(now);
        match self.fresh_for.checked_sub(age) {
            Some(left) if !left.is_zero() => Ok(left),
            _ => Err(age - self.fresh_for.min(age)),
        }
    }

    /// Its body coded in the coding of slot `coding` (below
    /// [`CODINGS`]), when that was made and kept.
    pub fn coded(&self, coding: usize) -> Option<&[u8]> {
        self.coded.get()?.0.get(coding)?.get().map(|b| &b[..])
    }

    /// Everything it holds, in bytes, with the index's own
    /// ([`OVERHEAD`]) and the key's (`key_len`).
    fn size_of(p: &Parts, key_len: usize) -> u64 {
        let vary: usize = p.vary.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        let tags: usize = p.tags.iter().map(|t| t.len() + 16).sum();
        let validators = p.etag.as_ref().map_or(0, |e| e.len())
            + p.last_modified.as_ref().map_or(0, |l| l.len());
        (OVERHEAD + key_len + p.fields.len() + p.body.len() + vary + tags + validators) as u64
    }

    /// Whether a request whose fields `header` gives matches its `Vary`.
    fn varies_as<'h>(&self, header: &dyn Fn(&[u8]) -> Option<&'h [u8]>) -> bool {
        self.vary
            .iter()
            .all(|(name, value)| header(name).unwrap_or_default().trim_ascii() == &value[..])
    }
}

/// One key's objects.
#[derive(Debug)]
struct Entry {
    /// The key's parts, each after its length (u32, little endian).
    key: Box<[u8]>,
    variants: Vec<(Arc<Object>, u64)>,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<u64, Entry, BuildHasherDefault<Prehashed>>,
    /// The CLOCK ring: every object inserted, its hand at the front. An
    /// entry whose object is gone (replaced, purged) is skipped.
    ring: VecDeque<(u64, Weak<Object>)>,
    bytes: u64,
    objects: u64,
}

/// The map's keys are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The store's counters.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub evictions: AtomicU64,
}

/// The cache's store: every worker's, bounded to `memory` bytes.
#[derive(Debug)]
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's share of the memory.
    shard_memory: u64,
    pub max_object: u64,
    pub memory: u64,
    seed: u64,
    pub stats: StoreStats,
    /// The fetches in flight, for coalescing.
    pub flights: Arc<super::flight::Flights>,
}

/// Whether `stored` (length-prefixed parts) holds exactly `parts`.
fn same_key(stored: &[u8], parts: &[&[u8]]) -> bool {
    let mut rest = stored;
    for p in parts {
        let Some((len, after)) = rest.split_first_chunk::<4>() else {
            return false;
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len != p.len() || after.get(..len) != Some(p) {
            return false;
        }
        rest = &after[len..];
    }
    rest.is_empty()
}

/// `parts` laid out as [`Entry::key`] holds them.
fn encode_key(parts: &[&[u8]]) -> Box<[u8]> {
    let mut k = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
    for p in parts {
        k.extend_from_slice(&(p.len() as u32).to_le_bytes());
        k.extend_from_slice(p);
    }
    k.into_boxed_slice()
}

/// The parts of a stored key.
pub fn key_parts(stored: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = stored;
    std::iter::from_fn(move || {
        let (len, after) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let part = after.get(..len)?;
        rest = &after[len..];
        Some(part)
    })
}

impl Store {
    /// A store of `memory` bytes whose objects are at most `max_object`.
    pub fn new(memory: u64, max_object: u64) -> Store {
        let fit = (memory / max_object.max(1) / 4).clamp(1, SHARDS as u64);
        // A power of two: the shard is a mask of the hash.
        let shards = 1usize << (63 - fit.leading_zeros());
        Store {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            shard_memory: memory / shards as u64,
            max_object,
            memory,
            seed: fastrand::u64(..),
            stats: StoreStats::default(),
            flights: Arc::default(),
        }
    }

    /// How many shards the index has.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The hash of a key's parts, read where they lie.
    pub fn hash(&self, parts: &[&[u8]]) -> u64 {
        let mut h = Xxh3::with_seed(self.seed);
        for p in parts {
            h.update(&(p.len() as u32).to_le_bytes());
            h.update(p);
        }
        h.digest()
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Bits the map's own use (the low and the top seven) leave alone.
        let i = (hash >> 32) as usize & (self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The object for a key (`hash` of `parts`) whose `Vary` the
    /// request's fields (`header`) match; marked as read.
    pub fn get<'h>(
        &self,
        hash: u64,
        parts: &[&[u8]],
        header: &dyn Fn(&[u8]) -> Option<&'h [u8]>,
    ) -> Option<Arc<Object>> {
        let shard = self.shard(hash);
        let entry = shard.map.get(&hash)?;
        if !same_key(&entry.key, parts) {
            return None;
        }
        let (o, _) = entry.variants.iter().find(|(o, _)| o.varies_as(header))?;
        o.referenced.store(true, Ordering::Relaxed);
        Some(o.clone())
    }

    /// Stores an object under a key, in place of the key's object with
    /// the same `Vary` values; evicts what it must to stay in bounds.
    /// `None` when it is larger than `max_object`.
    pub fn insert(&self, hash: u64, parts: &[&[u8]], p: Parts) -> Option<Arc<Object>> {
        let key_len: usize = parts.iter().map(|p| p.len() + 4).sum();
        let size = Object::size_of(&p, key_len);
        if p.body.len() as u64 > self.max_object || size > self.shard_memory {
            return None;
        }
        let o = Arc::new(Object {
            status: p.status,
            fields: p.fields,
            body: p.body,
            stored: p.stored,
            initial_age: p.initial_age,
            fresh_for: p.fresh_for,
            stale_while_revalidate: p.stale_while_revalidate,
            stale_if_error: p.stale_if_error,
            must_revalidate: p.must_revalidate,
            no_cache: p.no_cache,
            etag: p.etag,
            last_modified: p.last_modified,
            vary: p.vary,
            tags: p.tags,
            route: p.route,
            referenced: AtomicBool::new(false),
            hash,
            coded: OnceLock::new(),
        });
        let mut shard = self.shard(hash);
        let sh = &mut *shard;
        let entry = sh.map.entry(hash).or_insert_with(|| Entry {
            key: encode_key(parts),
            variants: Vec::new(),
        });
        if !same_key(&entry.key, parts) {
            // A collision: the newer key takes the slot.
            for (_, s) in entry.variants.drain(..) {
                sh.bytes -= s;
                sh.objects -= 1;
            }
            entry.key = encode_key(parts);
        }
        let same_vary = |x: &Object| x.vary == o.vary;
        if let Some(i) = entry.variants.iter().position(|(x, _)| same_vary(x)) {
            let (_, s) = entry.variants.remove(i);
            sh.bytes -= s;
            sh.objects -= 1;
        } else if entry.variants.len() >= MAX_VARIANTS {
            let (_, s) = entry.variants.remove(0);
            sh.bytes -= s;
            sh.objects -= 1;
        }
        entry.variants.push((o.clone(), size));
        sh.bytes += size;
        sh.objects += 1;
        sh.ring.push_back((hash, Arc::downgrade(&o)));
        let evicted = evict(sh, self.shard_memory);
        if evicted > 0 {
            self.stats.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
        // The ring holds dead entries (replaced or purged objects): when
        // they are most of it, it is swept.
        if sh.ring.len() > 64 && sh.ring.len() as u64 > 2 * sh.objects {
            sh.ring.retain(|(_, w)| w.strong_count() > 0);
        }
        Some(o)
    }

    /// Keeps `data` as `o`'s body coded in the coding of slot `coding`,
    /// counted against the memory bound with `o` (evicting what it must),
    /// when `o` is still stored and has none in that slot yet: then true,
    /// and [`Object::coded`] gives it. Otherwise (`o` evicted, replaced or
    /// purged meanwhile, or another request made that coding first) the
    /// data is handed back, not kept.
    pub fn add_coded(
        &self,
        o: &Arc<Object>,
        coding: usize,
        data: Box<[u8]>,
    ) -> Result<(), Box<[u8]>> {
        if coding >= CODINGS {
            return Err(data);
        }
        let mut shard = self.shard(o.hash);
        let sh = &mut *shard;
        let Some(entry) = sh.map.get_mut(&o.hash) else {
            return Err(data);
        };
        let Some((_, size)) = entry.variants.iter_mut().find(|(x, _)| Arc::ptr_eq(x, o)) else {
            return Err(data);
        };
        // Set under the shard's lock only: what is kept is what is
        // counted.
        let first = o.coded.get().is_none();
        if o.coded(coding).is_some() {
            return Err(data);
        }
        let added = data.len() as u64 + if first { CODED_OVERHEAD } else { 0 };
        o.coded.get_or_init(Box::default).0[coding].set(data)?;
        *size += added;
        sh.bytes += added;
        let evicted = evict(sh, self.shard_memory);
        if evicted > 0 {
            self.stats.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Drops every object of a key; how many.
    pub fn remove(&self, hash: u64, parts: &[&[u8]]) -> usize {
        let mut shard = self.shard(hash);
        let sh = &mut *shard;
        match sh.map.get(&hash) {
            Some(e) if same_key(&e.key, parts) => {}
            _ => return 0,
        }
        let e = sh.map.remove(&hash).expect("just found");
        for (_, s) in &e.variants {
            sh.bytes -= s;
            sh.objects -= 1;
        }
        e.variants.len()
    }

    /// Drops every object that `doomed` (given the stored key and the
    /// object) names; how many.
    pub fn purge(&self, doomed: &dyn Fn(&[u8], &Object) -> bool) -> usize {
        let mut n = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let sh = &mut *shard;
            let (mut bytes, mut objects) = (sh.bytes, sh.objects);
            sh.map.retain(|_, e| {
                e.variants.retain(|(o, s)| {
                    let drop = doomed(&e.key, o);
                    if drop {
                        bytes -= s;
                        objects -= 1;
                        n += 1;
                    }
                    !drop
                });
                !e.variants.is_empty()
            });
            (sh.bytes, sh.objects) = (bytes, objects);
        }
        n
    }

    /// Bytes and objects held now.
    pub fn usage(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(b, o), s| {
            let s = s.lock().unwrap_or_else(|p| p.into_inner());
            (b + s.bytes, o + s.objects)
        })
    }

    /// Calls `visit` with every object held (for reports).
    pub fn each(&self, visit: &mut dyn FnMut(&[u8], &Object, u64)) {
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for e in shard.map.values() {
                for (o, s) in &e.variants {
                    visit(&e.key, o, *s);
                }
            }
        }
    }
}

/// Moves the CLOCK hand until the shard is within `memory`: an object
/// read since the hand last passed is kept (its mark cleared, back of
/// the ring), any other evicted. How many were.
fn evict(sh: &mut Shard, memory: u64) -> u64 {
    let mut evicted = 0;
    while sh.bytes > memory {
        let Some((hash, weak)) = sh.ring.pop_front() else {
            break;
        };
        let Some(o) = weak.upgrade() else {
            continue;
        };
        let Some(entry) = sh.map.get_mut(&hash) else {
            continue;
        };
        let Some(i) = entry.variants.iter().position(|(x, _)| Arc::ptr_eq(x, &o)) else {
            continue;
        };
        if o.referenced.swap(false, Ordering::Relaxed) {
            sh.ring.push_back((hash, weak));
            continue;
        }
        let (_, s) = entry.variants.remove(i);
        if entry.variants.is_empty() {
            sh.map.remove(&hash);
        }
        sh.bytes -= s;
        sh.objects -= 1;
        evicted += 1;
    }
    evicted
}

#[cfg(test)]
mod tests;
