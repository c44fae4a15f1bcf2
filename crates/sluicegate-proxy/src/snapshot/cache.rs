//! A route's `cache` as requests use it: its key's parts, its freshness
//! default and stale windows, its tags header, and the store it shares
//! with every other caching route (kept in the registry across reloads
//! while `cache.memory` and `cache.max_object` stay the same).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_config::{CacheKeyPart, CacheStore, RouteCache};

use crate::cache::store::Store;

/// One part of a route's cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    Host,
    Path,
    Query,
    App,
    /// A request header's value (its name in lower case).
    Header(Box<[u8]>),
}

/// A route's `cache`.
#[derive(Debug)]
pub struct CacheRt {
    pub key: Box<[KeyPart]>,
    pub default_ttl: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// The response header whose values tag an object (lower case).
    pub tags_header: Option<Box<[u8]>>,
    pub store: Arc<Store>,
}

impl CacheRt {
    pub(super) fn new(c: &RouteCache, store: Arc<Store>) -> CacheRt {
        CacheRt {
            key: c
                .key
                .iter()
                .map(|p| match p {
                    CacheKeyPart::Host => KeyPart::Host,
                    CacheKeyPart::Path => KeyPart::Path,
                    CacheKeyPart::Query => KeyPart::Query,
                    CacheKeyPart::App => KeyPart::App,
                    CacheKeyPart::Header(h) => KeyPart::Header(h.as_bytes().into()),
                })
                .collect(),
            default_ttl: c.default_ttl,
            stale_while_revalidate: c.stale_while_revalidate,
            stale_if_error: c.stale_if_error,
            tags_header: c.tags_header.as_deref().map(|h| h.as_bytes().into()),
            store,
        }
    }
}

/// The store for `config`: the one kept (`kept`, with the settings it was
/// made for) when they are the same, else a new, empty one.
pub(super) fn store_for(
    config: &CacheStore,
    kept: &mut Option<(CacheStore, Arc<Store>)>,
) -> Arc<Store> {
    match kept {
        Some((c, s)) if c == config => s.clone(),
        _ => {
            let s = Arc::new(Store::new(config.memory, config.max_object));
            *kept = Some((config.clone(), s.clone()));
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_keeps_the_store_while_its_settings_stay() {
        let mut kept = None;
        let c = CacheStore {
            memory: 8 << 20,
            max_object: 1 << 20,
        };
        let a = store_for(&c, &mut kept);
        let key: &[&[u8]] = &[b"/k"];
        let parts = crate::cache::store::Parts {
            status: 200,
            fields: Box::new([]),
            body: bytes::Bytes::from_static(b"x"),
            stored: std::time::Instant::now(),
            initial_age: Duration::ZERO,
            fresh_for: Duration::from_secs(1),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            must_revalidate: false,
            no_cache: false,
            etag: None,
            last_modified: None,
            vary: Box::new([]),
            tags: Box::new([]),
            route: Arc::from("r"),
        };
        a.insert(a.hash(key), key, parts).unwrap();
        let b = store_for(&c.clone(), &mut kept);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.usage().1, 1);
        let bigger = CacheStore {
            memory: 16 << 20,
            ..c
        };
        let d = store_for(&bigger, &mut kept);
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(d.usage(), (0, 0));
    }
}
