//! Cache purges carried across a fleet on etcd. `POST /cache/purge` on
//! one gateway purges its own store, then puts a record,
//! `{"origin": O, "purge": {...}}`, at `PREFIX meta/cache-purge/O-N` with
//! a lease of [`TTL_SECS`] (old records vanish). Every gateway's watch
//! sees the record and purges its store by it on a blocking thread,
//! each record once (the watch may bring a record again after a
//! reconnect: records at or below the highest revision seen are
//! skipped), and the gateway that took the purge skips its own. The
//! config loader never reads these keys (`meta/` is the gateway's own);
//! a malformed record is logged and skipped.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, PutOptions};
use serde_json::{json, Value};
use sluicegate_proxy::{cache_admin, Shared};

/// Where purge records live under the prefix.
pub(crate) const KEYS: &str = "meta/cache-purge/";
/// How long a record lives in etcd: long enough for a gateway whose
/// watch was briefly lost to replay it, short enough not to pile up.
const TTL_SECS: i64 = 60;
/// How long publishing a purge may take.
const PUBLISH_LIMIT: Duration = Duration::from_secs(3);

/// This gateway's part in fleet purges.
pub(crate) struct Fleet {
    /// This process's name in the records it puts (random at start).
    origin: String,
    /// Numbers this process's records.
    seq: AtomicU64,
    /// The highest revision of a record seen (applied or skipped).
    seen: AtomicU64,
    /// The watch's client and the prefix, once connected.
    link: Mutex<Option<(Client, String)>>,
}

impl Default for Fleet {
    fn default() -> Self {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        Fleet {
            origin: format!("{:016x}", h.finish()),
            seq: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            link: Mutex::new(None),
        }
    }
}

impl Fleet {
    /// The watch's client, for publishing (set on each connection).
    pub(crate) fn connected(&self, client: Client, prefix: &str) {
        *self.link.lock().unwrap_or_else(|e| e.into_inner()) = Some((client, prefix.to_string()));
    }

    /// Puts a record of `selector` (a purge's JSON body, already
    /// validated) for the other gateways; `Err` when etcd could not be
    /// reached or refused it.
    pub(crate) async fn publish(&self, selector: &Value) -> Result<(), String> {
        let link = self.link.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some((mut client, prefix)) = link else {
            return Err("etcd is not reachable".to_string());
        };
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let key = format!("{prefix}{KEYS}{}-{n}", self.origin);
        let record = json!({ "origin": self.origin, "purge": selector }).to_string();
        let put = async move {
            let lease = client
                .lease_grant(TTL_SECS, None)
                .await
                .map_err(|e| e.to_string())?
                .id();
            client
                .put(key, record, Some(PutOptions::new().with_lease(lease)))
                .await
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(PUBLISH_LIMIT, put).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("etcd: {e}")),
            Err(_) => Err(format!("etcd did not answer in {PUBLISH_LIMIT:?}")),
        }
    }

    /// A record the watch saw put at `revision` (`key` under the
    /// prefix, starting with [`KEYS`]): applied to this gateway's store
    /// on a blocking thread unless already seen, this gateway's own, or
    /// malformed (logged). Runs on the runtime.
    pub(crate) fn seen(&self, shared: &Arc<Shared>, key: &str, value: &[u8], revision: u64) {
        if self.seen.fetch_max(revision, Ordering::AcqRel) >= revision {
            return;
        }
        let what = match self.read(value) {
            Ok(Some(what)) => what,
            Ok(None) => return,
            Err(why) => {
                tracing::warn!(key, revision, "cache: a fleet purge record skipped: {why}");
                return;
            }
        };
        let shared = shared.clone();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || {
            match cache_admin::purge(&shared.snapshot.load(), &what) {
                Some(n) => tracing::info!(key, revision, purged = n, "cache: fleet purge applied"),
                None => tracing::debug!(key, revision, "cache: fleet purge, no route caches"),
            }
        });
    }

    /// The purge a record asks for; `Ok(None)` for this gateway's own.
    fn read(&self, value: &[u8]) -> Result<Option<cache_admin::Purge>, String> {
        let v: Value = serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
        let origin = v
            .get("origin")
            .and_then(Value::as_str)
            .ok_or("no origin string")?;
        if origin == self.origin {
            return Ok(None);
        }
        let purge = v.get("purge").ok_or("no purge")?;
        crate::purge::purge_of(purge).map(Some).map_err(|issues| {
            issues
                .iter()
                .map(|i| format!("{}: {}", i.path, i.message))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_once_own_skipped_malformed_refused() {
        let f = Fleet::default();
        let other = json!({"origin": "elsewhere", "purge": {"tag": "t"}}).to_string();
        let p = f.read(other.as_bytes()).unwrap().unwrap();
        assert_eq!(p.tag.as_deref(), Some(&b"t"[..]));
        let own = json!({"origin": f.origin, "purge": {"tag": "t"}}).to_string();
        assert!(f.read(own.as_bytes()).unwrap().is_none());
        assert!(f.read(b"{").is_err());
        assert!(f.read(br#"{"purge": {"tag": "t"}}"#).is_err());
        let bad = json!({"origin": "o", "purge": {"tag": 3}}).to_string();
        assert!(f.read(bad.as_bytes()).unwrap_err().contains("$.tag"));
        assert_ne!(Fleet::default().origin, f.origin);
    }
}
