//! A route's `split` as requests use it: which of its services takes a
//! request.
//!
//! - An app pinned to an entry (`apps`) always goes there.
//! - With a key (`split_by` other than `random`, and the request has one),
//!   weighted rendezvous hashing: each entry scores `weight / -ln(u)`,
//!   where `u` in (0, 1) comes from a hash of (key, the entry's service
//!   name); the highest score wins. An entry wins a share of the keys
//!   equal to its share of the weights, the same key always lands on the
//!   same entry, and a change of one entry's weight moves only keys to or
//!   from that entry: as few as the new shares require. The hash is fixed
//!   (not seeded per process), so every gateway of a fleet, and every
//!   snapshot after a reload, places a key alike.
//! - Otherwise (`random`, or no key), a draw from the worker's generator
//!   over the running sums of the weights.
//!
//! Nothing here allocates; routes without `split` never come here.

use std::net::IpAddr;
use std::sync::Arc;

use sluicegate_config::{Split, SplitBy};

use crate::filters::fault::Rng;
use crate::observe::metrics::SplitMetrics;
use crate::route::template::Params;
use crate::route::values::cookie;

/// One service of a split.
#[derive(Debug)]
pub struct SplitEntryRt {
    /// The service's place in the snapshot's services.
    pub service: u32,
    pub weight: u32,
    /// A hash of the service's name: what keys are scored against.
    seed: u64,
    /// This entry's counters, kept across reloads by (route, service).
    pub metrics: Arc<SplitMetrics>,
}

/// What keeps a client on one entry (`split_by`). Another kind is one
/// more variant here and one more arm in [`SplitRt::key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SplitKey {
    Random,
    ClientIp,
    App,
    /// The first field of this header (lower-case name).
    Header(Box<[u8]>),
    /// The first cookie of this name.
    Cookie(Box<[u8]>),
    /// A parameter of the route's path template, by place: hashed right
    /// after routing ([`SplitRt::param_key`]), while the routed path is at
    /// hand (a filter may replace the path later).
    Param(usize),
}

/// A route's split.
#[derive(Debug)]
pub struct SplitRt {
    pub entries: Box<[SplitEntryRt]>,
    /// The running sums of the weights (the last: their total).
    cumulative: Box<[u64]>,
    pub(crate) by: SplitKey,
    /// App id -> the entry it is pinned to.
    pinned: Box<[(Box<str>, u32)]>,
}

/// What a request offers as its key.
pub(crate) struct KeySource<'a> {
    /// The request head's bytes and its fields.
    pub raw: &'a [u8],
    pub headers: &'a [crate::proto::head::HeaderRef],
    pub client: IpAddr,
    /// The app the route's auth identified.
    pub app: Option<&'a str>,
    /// The hash of the parameter `split_by: param:NAME` names, taken when
    /// the request was routed.
    pub param: Option<u64>,
}

impl SplitRt {
    /// Builds the split of `route` from its config; `service` gives a
    /// service's place by name, `metrics` an entry's counters.
    pub(crate) fn new(
        split: &Split,
        service: impl Fn(&str) -> Option<u32>,
        mut metrics: impl FnMut(&str) -> Arc<SplitMetrics>,
    ) -> Result<SplitRt, String> {
        let mut entries = Vec::with_capacity(split.entries.len());
        let mut cumulative = Vec::with_capacity(split.entries.len());
        let mut pinned = Vec::new();
        let mut total = 0u64;
        for (i, e) in split.entries.iter().enumerate() {
            let index =
                service(&e.service).ok_or_else(|| format!("unknown service {}", e.service))?;
            total += u64::from(e.weight);
            cumulative.push(total);
            entries.push(SplitEntryRt {
                service: index,
                weight: e.weight,
                seed: mix(hash(e.service.as_bytes())),
                metrics: metrics(&e.service),
            });
            pinned.extend(e.apps.iter().map(|a| (a.as_str().into(), i as u32)));
        }
        if total == 0 {
            return Err("every weight of the split is 0".into());
        }
        let by = match &split.by {
            SplitBy::Random => SplitKey::Random,
            SplitBy::ClientIp => SplitKey::ClientIp,
            SplitBy::App => SplitKey::App,
            SplitBy::Header(h) => SplitKey::Header(h.to_ascii_lowercase().into_bytes().into()),
            SplitBy::Cookie(c) => SplitKey::Cookie(c.as_bytes().into()),
            SplitBy::Param(i) => SplitKey::Param(*i),
        };
        Ok(SplitRt {
            entries: entries.into(),
            cumulative: cumulative.into(),
            by,
            pinned: pinned.into(),
        })
    }

    /// The entry that takes a request: pinned app, else by key, else at
    /// random from `rng`.
    pub(crate) fn pick(&self, src: &KeySource<'_>, rng: &Rng) -> usize {
        if let (Some(app), false) = (src.app, self.pinned.is_empty()) {
            if let Some((_, i)) = self.pinned.iter().find(|(id, _)| **id == *app) {
                return *i as usize;
            }
        }
        match self.key(src) {
            Some(key) => self.by_key(key),
            None => self.at_random(rng.next_u64()),
        }
    }

    /// The hash of the request's key, when `split_by` has one and the
    /// request carries it.
    fn key(&self, src: &KeySource<'_>) -> Option<u64> {
        match &self.by {
            SplitKey::Random => None,
            SplitKey::ClientIp => Some(match src.client {
                IpAddr::V4(a) => hash(&a.octets()),
                IpAddr::V6(a) => match a.to_ipv4_mapped() {
                    Some(v4) => hash(&v4.octets()),
                    None => hash(&a.octets()),
                },
            }),
            SplitKey::App => src.app.map(|a| hash(a.as_bytes())),
            SplitKey::Header(name) => src
                .headers
                .iter()
                .find(|h| src.raw[h.name.clone()].eq_ignore_ascii_case(name))
                .map(|h| hash(&src.raw[h.value.clone()])),
            SplitKey::Cookie(name) => src
                .headers
                .iter()
                .filter(|h| src.raw[h.name.clone()].eq_ignore_ascii_case(b"cookie"))
                .find_map(|h| cookie(&src.raw[h.value.clone()], name))
                .map(hash),
            SplitKey::Param(_) => src.param,
        }
    }

    /// With `split_by: param:NAME`, the hash of that parameter's value
    /// (as routed, escapes kept) in `path`, the path the router matched
    /// and captured `params` in; `None` for any other `split_by`.
    #[inline]
    pub(crate) fn param_key(&self, params: &Params, path: &[u8]) -> Option<u64> {
        match self.by {
            SplitKey::Param(i) => params.get(path, i).map(hash),
            _ => None,
        }
    }

    /// Weighted rendezvous: the entry of highest `weight / -ln(u)`.
    pub(crate) fn by_key(&self, key: u64) -> usize {
        let mut best = (0usize, f64::NEG_INFINITY);
        for (i, e) in self.entries.iter().enumerate() {
            if e.weight == 0 {
                continue;
            }
            // 53 bits, never 0 nor 1: -ln(u) is finite and above zero.
            let u = ((mix(key ^ e.seed) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let score = f64::from(e.weight) / -u.ln();
            if score > best.1 {
                best = (i, score);
            }
        }
        best.0
    }

    /// The entry whose share of the running sums `draw` falls in; entries
    /// of weight 0 have none.
    fn at_random(&self, draw: u64) -> usize {
        let total = *self.cumulative.last().unwrap_or(&1);
        let at = ((u128::from(draw) * u128::from(total)) >> 64) as u64;
        self.cumulative.partition_point(|&c| c <= at)
    }
}

/// FNV-1a over `bytes`: fixed, so a key hashes alike in every process.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The splitmix64 finaliser: every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;
