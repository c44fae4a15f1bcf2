//! The cache as the admin plane sees it, through the running snapshot:
//! purges ([`purge`]: by key, key prefix, tag, route; every condition
//! given must hold) and a report ([`report`]: the store's use, the
//! caching routes' hits and misses, the routes holding the most). Off
//! the request path: each takes the store's shard locks one at a time,
//! as a lookup does.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::cache::store::{key_parts, Object, Store};
use crate::snapshot::{ActionRt, Snapshot};

/// What to purge: the objects meeting every condition given.
#[derive(Debug, Clone, Default)]
pub struct Purge {
    /// The key, its parts run together (the default key, host, path and
    /// query: `example.com/a?b=1`).
    pub key: Option<Vec<u8>>,
    /// A prefix of the key, its parts run together.
    pub prefix: Option<Vec<u8>>,
    /// One of the object's tags (the route's `tags_header` values).
    pub tag: Option<Vec<u8>>,
    /// The route that stored it.
    pub route: Option<String>,
}

impl Purge {
    fn dooms(&self, key: &[u8], o: &Object) -> bool {
        let text = || key_parts(key).flatten().copied().collect::<Vec<u8>>();
        self.route.as_deref().is_none_or(|r| *o.route == *r)
            && self
                .tag
                .as_deref()
                .is_none_or(|t| o.tags.iter().any(|x| **x == *t))
            && self.key.as_deref().is_none_or(|k| text() == k)
            && self.prefix.as_deref().is_none_or(|p| text().starts_with(p))
    }
}

/// The store the snapshot's caching routes share, if any route caches.
pub fn store(snap: &Snapshot) -> Option<&Arc<Store>> {
    snap.routes.iter().find_map(|r| match &r.action {
        ActionRt::Proxy {
            extras: Some(x), ..
        } => x.cache.as_ref().map(|c| &c.store),
        _ => None,
    })
}

/// Removes the objects `what` names; how many. `None` without a store.
pub fn purge(snap: &Snapshot, what: &Purge) -> Option<usize> {
    let store = store(snap)?;
    Some(store.purge(&|key, o| what.dooms(key, o)))
}

/// The cache's state now.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `cache.memory` and `cache.max_object`.
    pub memory: u64,
    pub max_object: u64,
    /// What the store holds, counted as its bound counts.
    pub bytes: u64,
    pub objects: u64,
    pub evictions: u64,
    /// The caching routes' lookups answered from memory and not, since
    /// they were configured.
    pub hits: u64,
    pub misses: u64,
    /// The routes holding the most bytes, the most first (at most
    /// `top`).
    pub routes: Vec<RouteUse>,
}

/// What one route's objects hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteUse {
    pub route: String,
    pub bytes: u64,
    pub objects: u64,
}

/// The cache's report, with the `top` routes holding the most; `None`
/// without a store.
pub fn report(snap: &Snapshot, top: usize) -> Option<Report> {
    let store = store(snap)?;
    let (bytes, objects) = store.usage();
    let (mut hits, mut misses) = (0, 0);
    for r in snap.routes.iter() {
        if let ActionRt::Proxy {
            extras: Some(x), ..
        } = &r.action
        {
            if x.cache.is_none() {
                continue;
            }
            hits += r.metrics.cache.hits.load(Relaxed);
            misses += r.metrics.cache.misses.load(Relaxed);
        }
    }
    let mut by_route: HashMap<Arc<str>, (u64, u64)> = HashMap::new();
    store.each(&mut |_, o, size| {
        let e = by_route.entry(o.route.clone()).or_default();
        e.0 += size;
        e.1 += 1;
    });
    let mut routes: Vec<RouteUse> = by_route
        .into_iter()
        .map(|(route, (bytes, objects))| RouteUse {
            route: route.to_string(),
            bytes,
            objects,
        })
        .collect();
    routes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.route.cmp(&b.route)));
    routes.truncate(top);
    Some(Report {
        memory: store.memory,
        max_object: store.max_object,
        bytes,
        objects,
        evictions: store.stats.evictions.load(Relaxed),
        hits,
        misses,
        routes,
    })
}
