//! The etcd config source (`config_source.etcd`), which `start` puts in
//! place of the file as the reloader's `ConfigSource`: objects one per key
//! under a prefix, followed by one watch per process (`watch.rs`),
//! assembled into the config document (`objects.rs`) and published as a
//! file's config is (`apply.rs`; apps alone in place, `apps.rs`), with
//! the last applied config cached on disk (`cache.rs`), resources read
//! straight from the objects (`reads.rs`) and admin API writes sent to
//! etcd as transactions; cache purges carried to the whole fleet
//! (`purge.rs`); and the discovery of endpoints registered in
//! etcd (`discover.rs`).

mod apply;
mod apps;
mod cache;
mod client;
pub mod discover;
mod inbox;
mod objects;
mod purge;
mod reads;
mod status;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sluicegate_config::{Document, EtcdSource};

use crate::reload::Reloader;
use apply::Etcd;
pub(crate) use client::connect;
use inbox::Inbox;
pub use status::Status;

/// The default cache file: `FILE.etcd-cache.json` beside the config file.
fn default_cache(config: &Path) -> PathBuf {
    let mut name = config.file_name().unwrap_or_default().to_os_string();
    name.push(".etcd-cache.json");
    config.with_file_name(name)
}

/// Puts etcd in place of the file as the reloader's config source: applies
/// the cached config if there is one (so a start while etcd is down serves
/// it), then starts the watch on `runtime`. Returns the status the
/// metrics show.
pub fn start(
    reloader: &Arc<Mutex<Reloader>>,
    source: EtcdSource,
    runtime: &tokio::runtime::Handle,
) -> Arc<Status> {
    let status = Arc::new(Status::default());
    let inbox = Arc::new(Inbox::default());
    let client = Arc::new(Mutex::new(None));
    let shared;
    {
        let mut r = Reloader::locked(reloader);
        shared = r.shared().clone();
        // The file's document is also the running one until etcd's
        // objects (or the cached ones) are applied.
        let (base, doc) = match r.document() {
            Ok(d) => (Document::clone(&d), Some(d)),
            Err(e) => {
                tracing::error!(error = %e, "etcd source: cannot read the config file's document");
                (Document::from_json(&serde_json::json!({})), None)
            }
        };
        let cache = source
            .cache
            .clone()
            .unwrap_or_else(|| default_cache(r.path()));
        r.set_source(Box::new(Etcd {
            source: source.clone(),
            base,
            good: Arc::default(),
            doc,
            cache_tx: cache::writer(cache.clone()),
            cache,
            status: status.clone(),
            inbox: inbox.clone(),
            client: client.clone(),
            runtime: runtime.clone(),
        }));
    }
    runtime.spawn(watch::run(watch::Watch {
        reloader: reloader.clone(),
        source,
        status: status.clone(),
        inbox,
        client,
        shared,
    }));
    status
}
