//! The cache store's families: its bound, what it holds and how many
//! objects it evicted (one store serves every caching route).

use std::fmt::Write as _;

use super::header;

/// What the store holds now, read by the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreUse {
    /// `cache.memory`.
    pub memory: u64,
    /// Bytes held, counted as the bound counts them.
    pub bytes: u64,
    pub objects: u64,
    pub evictions: u64,
}

/// Writes the store's families (no labels).
pub fn render_store(out: &mut String, s: StoreUse) {
    let rows = [
        (
            "sluicegate_cache_memory_bytes",
            "gauge",
            "The cache store's bound (cache.memory), in bytes.",
            s.memory,
        ),
        (
            "sluicegate_cache_bytes",
            "gauge",
            "Bytes the cache store holds, counted as its bound counts them (each object's overhead included).",
            s.bytes,
        ),
        (
            "sluicegate_cache_objects",
            "gauge",
            "Objects the cache store holds.",
            s.objects,
        ),
        (
            "sluicegate_cache_evictions_total",
            "counter",
            "Objects the cache store evicted to stay within its bound (since the store was made).",
            s.evictions,
        ),
    ];
    for (name, kind, help, v) in rows {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_s_families() {
        let mut out = String::new();
        let s = StoreUse {
            memory: 1 << 20,
            bytes: 5000,
            objects: 7,
            evictions: 3,
        };
        render_store(&mut out, s);
        assert!(out.contains("# TYPE sluicegate_cache_bytes gauge\nsluicegate_cache_bytes 5000\n"));
        assert!(out.contains("sluicegate_cache_memory_bytes 1048576\n"));
        assert!(out.contains("sluicegate_cache_objects 7\n"));
        assert!(out.contains(
            "# TYPE sluicegate_cache_evictions_total counter\nsluicegate_cache_evictions_total 3\n"
        ));
    }
}
