//! The HTTP cache: one store shared by every worker (a sharded index
//! bounded in bytes, CLOCK eviction by size), the cache key hashed from
//! the request's parts in place, and RFC 9111's rules for a shared cache
//! (what is stored, for how long, how old it is). See `docs/cache.md`.

pub mod fill;
pub mod flight;
pub mod key;
pub mod rules;
pub mod store;
