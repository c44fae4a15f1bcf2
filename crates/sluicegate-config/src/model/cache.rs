//! The HTTP cache in the model: the store (`cache` at the top level) and
//! what a route's `cache` asks of it.

use std::time::Duration;

/// `cache: { memory, max_object }` at the top level: one store shared by
/// every worker and every route with a `cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStore {
    /// The bound of the store in bytes, everything of an object counted.
    pub memory: u64,
    /// Larger answers pass through uncached (8MiB by default, at most
    /// `memory`).
    pub max_object: u64,
}

/// One part of a route's cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheKeyPart {
    /// The request's host (without its port).
    Host,
    /// The path as forwarded (normalised).
    Path,
    /// The query, as sent.
    Query,
    /// The app the route's auth identified.
    App,
    /// A request header's values (`header:NAME`); the name in lower case.
    Header(String),
}

/// A route's `cache`: answers of its service are stored and served from
/// the store, by RFC 9111's rules for a shared cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCache {
    /// What makes two requests the same object; `[host, path, query]` by
    /// default.
    pub key: Vec<CacheKeyPart>,
    /// Freshness of an answer whose upstream gives none (a heuristically
    /// cacheable status only); zero: such answers are not stored.
    pub default_ttl: Duration,
    /// How long past its freshness a stale object is served at once while
    /// one fetch refreshes it.
    pub stale_while_revalidate: Duration,
    /// How long past its freshness a stale object is served while the
    /// upstream fails or answers 5xx.
    pub stale_if_error: Duration,
    /// The response header whose comma-separated values tag the object
    /// for purging (lower case).
    pub tags_header: Option<String>,
}

impl CacheKeyPart {
    /// The default key: `[host, path, query]`.
    pub fn default_key() -> Vec<CacheKeyPart> {
        vec![CacheKeyPart::Host, CacheKeyPart::Path, CacheKeyPart::Query]
    }
}
