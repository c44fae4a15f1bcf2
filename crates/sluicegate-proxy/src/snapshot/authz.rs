//! A route's external authorization as compiled: `forward_auth` (the
//! service it asks, the headers it sends and copies back, its decision
//! cache) and `ext_authz` (the gRPC service it asks). The calls are made
//! by `session::authz`.
//!
//! The decision cache holds forward auth's answers, allows and denials
//! alike, for the route's `cache` time, keyed by a keyed 128-bit hash of
//! everything the check sent (the listed headers' values, the method, the
//! URI, the host, the scheme and the client's address): two requests get
//! the same decision only when the auth service was asked the same
//! question. It is split in [`SHARDS`] maps, each behind its own lock held
//! for one lookup or insert, and bounded ([`MAX_PER_SHARD`] decisions a
//! shard: a full shard drops its expired decisions, then an arbitrary
//! one). It outlives reloads that leave the route's `forward_auth` as it
//! was (the registry keeps it by route name).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use sluicegate_config::OnAuthError;

use crate::proto::fields::Fields;

/// Maps a decision cache is split in.
pub const SHARDS: usize = 16;
/// Most decisions one shard holds.
pub const MAX_PER_SHARD: usize = 4096;

/// A route's `forward_auth` and `ext_authz`, boxed in its extras.
#[derive(Debug)]
pub struct AuthzRt {
    pub forward: Option<ForwardAuthRt>,
    pub ext: Option<ExtAuthzRt>,
}

/// `forward_auth` compiled.
#[derive(Debug)]
pub struct ForwardAuthRt {
    /// A configured service, by its place in the snapshot (discovery may
    /// replace it); `None`: the route's own one-endpoint service, for a
    /// URL with an address (`ProxyExtras::auth_service`).
    pub service: Option<u32>,
    /// The check's path and query.
    pub path: http::uri::PathAndQuery,
    pub request_headers: Box<[HeaderName]>,
    pub response_headers: Box<[HeaderName]>,
    pub timeout: Duration,
    pub on_error: OnAuthError,
    /// `None` when `cache` is zero.
    pub cache: Option<Arc<DecisionCache>>,
}

/// `ext_authz` compiled.
#[derive(Debug)]
pub struct ExtAuthzRt {
    pub service: u32,
    pub timeout: Duration,
    pub on_error: OnAuthError,
}

/// What an authorization service decided.
#[derive(Debug)]
pub enum Decision {
    /// Let through, with these fields set on the request upstream (and
    /// these names removed from it first).
    Allow {
        add: Vec<(HeaderName, HeaderValue)>,
        remove: Vec<HeaderName>,
    },
    /// Answered for it: the status, fields and body the client gets.
    Deny {
        status: u16,
        fields: Fields,
        body: Bytes,
    },
}

/// One shard: decisions by question, with when they expire.
type Shard = Mutex<HashMap<u128, (Instant, Arc<Decision>)>>;

/// Recent decisions by the keyed hash of what was asked.
pub struct DecisionCache {
    ttl: Duration,
    keys: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for DecisionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCache")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// The hash of what a check asks, built part by part.
pub struct Question(std::hash::DefaultHasher, std::hash::DefaultHasher);

impl Question {
    /// Adds one part (its length first, so parts cannot run together).
    pub fn part(&mut self, bytes: &[u8]) {
        for h in [&mut self.0, &mut self.1] {
            h.write_usize(bytes.len());
            h.write(bytes);
        }
    }

    fn key(&self) -> u128 {
        (u128::from(self.0.finish()) << 64) | u128::from(self.1.finish())
    }
}

impl DecisionCache {
    pub fn new(ttl: Duration) -> DecisionCache {
        DecisionCache {
            ttl,
            keys: Default::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A question to hash the check's parts into.
    pub fn question(&self) -> Question {
        Question(self.keys.0.build_hasher(), self.keys.1.build_hasher())
    }

    fn shard(&self, key: u128) -> &Shard {
        &self.shards[(key as usize) % SHARDS]
    }

    /// The decision for `q`, while it is fresh at `now`.
    pub fn get(&self, q: &Question, now: Instant) -> Option<Arc<Decision>> {
        let key = q.key();
        let shard = self.shard(key).lock().ok()?;
        match shard.get(&key) {
            Some((until, d)) if *until > now => Some(d.clone()),
            _ => None,
        }
    }

    /// Keeps `d` for `q` until `now` plus the cache's time.
    pub fn put(&self, q: &Question, now: Instant, d: Arc<Decision>) {
        let key = q.key();
        let Ok(mut shard) = self.shard(key).lock() else {
            return;
        };
        if shard.len() >= MAX_PER_SHARD && !shard.contains_key(&key) {
            shard.retain(|_, (until, _)| *until > now);
            if shard.len() >= MAX_PER_SHARD {
                if let Some(k) = shard.keys().next().copied() {
                    shard.remove(&k);
                }
            }
        }
        shard.insert(key, (now + self.ttl, d));
    }

    /// Decisions held (fresh or not).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.len()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow() -> Arc<Decision> {
        Arc::new(Decision::Allow {
            add: Vec::new(),
            remove: Vec::new(),
        })
    }

    #[test]
    fn a_decision_is_found_by_the_same_question_until_it_expires() {
        let c = DecisionCache::new(Duration::from_secs(10));
        let now = Instant::now();
        let mut q = c.question();
        q.part(b"Bearer a");
        q.part(b"/x");
        c.put(&q, now, allow());
        let mut same = c.question();
        same.part(b"Bearer a");
        same.part(b"/x");
        assert!(c.get(&same, now + Duration::from_secs(9)).is_some());
        assert!(c.get(&same, now + Duration::from_secs(10)).is_none());
        // Parts that run together differently are another question.
        let mut other = c.question();
        other.part(b"Bearer a/");
        other.part(b"x");
        assert!(c.get(&other, now).is_none());
    }

    #[test]
    fn the_cache_stays_bounded() {
        let c = DecisionCache::new(Duration::from_secs(10));
        let now = Instant::now();
        for i in 0..(SHARDS * MAX_PER_SHARD + 5000) {
            let mut q = c.question();
            q.part(&i.to_le_bytes());
            c.put(&q, now, allow());
        }
        assert!(c.len() <= SHARDS * MAX_PER_SHARD);
    }
}
