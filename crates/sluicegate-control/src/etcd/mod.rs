//! The etcd config source (`config_source.etcd`), which `start` puts in
//! place of the file as the reloader's `ConfigSource`: objects one per key
//! under a prefix, followed by one watch per process (`watch.rs`),
//! assembled into the config document (`objects.rs`) and published as a
//! file's config is (`apply.rs`; apps alone in place, `apps.rs`), with
//! the last applied config cached on disk (`cache.rs`), resources read
//! straight from the objects (`reads.rs`) and admin API writes sent to
//! etcd as transactions; and the discovery of endpoints registered in
//! etcd (`discover.rs`).

mod apply;
mod apps;
mod cache;
pub mod discover;
mod objects;
mod reads;
mod watch;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, ConnectOptions};
use sluicegate_config::{Document, EtcdConnection, EtcdSource};

use crate::reload::Reloader;

/// One object's key under the prefix (`routes/web`) and its JSON value.
/// A persistent map: a copy is shared until changed and a change copies
/// a path of nodes, so the cache writer can hold the objects of a
/// million apps while the next change is made.
pub(crate) type Objects = imbl::OrdMap<String, serde_json::Value>;

/// What the watch saw, waiting to be applied under the reloader's lock.
#[derive(Debug)]
pub(crate) enum Batch {
    /// Changes from a watch response: key under the prefix, new value
    /// (`None`: deleted), the revision each was made at.
    Changes(Vec<Change>),
    /// Every key under the prefix as listed at `revision` (at start, or
    /// after the watch's start revision was compacted).
    Listed {
        revision: u64,
        kvs: Vec<(String, Vec<u8>)>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub key: String,
    pub value: Option<Vec<u8>>,
    pub revision: u64,
}

/// The watch's queue of batches; applied by whoever holds the reloader's
/// lock next (the watch task, or an API write waiting for its own change).
#[derive(Default)]
pub(crate) struct Inbox {
    queue: Mutex<VecDeque<Batch>>,
    /// Signalled when a batch is queued.
    arrived: Condvar,
    /// A drain is on its way (set by the watch, cleared by the drain).
    pub(crate) scheduled: AtomicBool,
}

impl Inbox {
    pub(crate) fn push(&self, batch: Batch) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(batch);
        self.arrived.notify_all();
    }

    fn take(&self) -> Vec<Batch> {
        self.scheduled.store(false, Ordering::Release);
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits up to `limit` for a batch to be queued (returns at once if one is).
    fn wait(&self, limit: std::time::Duration) {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            let _ = self.arrived.wait_timeout(q, limit);
        }
    }
}

/// What the metrics show of the etcd source; shared with the admin listener.
#[derive(Default)]
pub struct Status {
    /// The etcd revision the running config reflects (every change up to
    /// it seen, applied or refused).
    pub revision: AtomicU64,
    pub connected: AtomicBool,
    /// Unix time (ms) of the last answer from etcd (list, watch event,
    /// progress notification); 0: never.
    pub last_sync_ms: AtomicU64,
    /// Objects refused because the config they made did not validate.
    pub rejected: AtomicU64,
}

impl Status {
    pub(crate) fn synced(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        self.last_sync_ms
            .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The Prometheus lines of the etcd source.
    pub fn render(&self) -> String {
        let since = match self.last_sync_ms.load(Ordering::Relaxed) {
            0 => -1.0,
            ms => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as f64;
                ((now - ms as f64) / 1000.0).max(0.0)
            }
        };
        format!(
            "# HELP sluicegate_config_revision etcd revision the running config reflects.\n\
             # TYPE sluicegate_config_revision gauge\n\
             sluicegate_config_revision {}\n\
             # HELP sluicegate_etcd_connected 1 while the watch on etcd is open.\n\
             # TYPE sluicegate_etcd_connected gauge\n\
             sluicegate_etcd_connected {}\n\
             # HELP sluicegate_etcd_seconds_since_sync Seconds since etcd last answered (-1: never).\n\
             # TYPE sluicegate_etcd_seconds_since_sync gauge\n\
             sluicegate_etcd_seconds_since_sync {since:.3}\n\
             # HELP sluicegate_etcd_rejected_objects_total Objects from etcd refused as invalid.\n\
             # TYPE sluicegate_etcd_rejected_objects_total counter\n\
             sluicegate_etcd_rejected_objects_total {}\n",
            self.revision.load(Ordering::Relaxed),
            u8::from(self.connected.load(Ordering::Relaxed)),
            self.rejected.load(Ordering::Relaxed),
        )
    }
}

/// The etcd config source: the file's document the objects are laid
/// over, the objects of the running config, and how to reach etcd.
pub(crate) struct Etcd {
    pub source: EtcdSource,
    /// The config file's document (listen, admin, config_source, defaults).
    pub base: Document,
    /// The objects the running config was made of (refused ones left out).
    pub good: Arc<Objects>,
    /// The running config's document, once asked for; made again from
    /// the objects after a change.
    pub doc: Option<Arc<Document>>,
    pub cache: PathBuf,
    /// To the thread that writes the cache (the newest revision wins).
    pub cache_tx: std::sync::mpsc::Sender<(u64, Arc<Objects>)>,
    pub status: Arc<Status>,
    pub inbox: Arc<Inbox>,
    /// The connected client, once the watch has one (for API writes).
    pub client: Arc<Mutex<Option<etcd_client::Client>>>,
    pub runtime: tokio::runtime::Handle,
}

impl Etcd {
    pub(crate) fn revision(&self) -> u64 {
        self.status.revision.load(Ordering::Relaxed)
    }
}

/// A client of the etcd cluster `source` names (timeouts and keep-alive
/// set, TLS and credentials read from their files now).
pub(crate) async fn connect(source: &EtcdConnection) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
    if let (Some(user), Some(file)) = (&source.username, &source.password_file) {
        let password =
            std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        options = options.with_user(user.clone(), password.trim().to_string());
    }
    if let Some(tls) = &source.tls {
        let mut t = etcd_client::TlsOptions::new();
        if let Some(ca) = &tls.ca {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            t = t.ca_certificate(etcd_client::Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            let c = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
            let k = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
            t = t.identity(etcd_client::Identity::from_pem(c, k));
        }
        options = options.with_tls(t);
    }
    tokio::time::timeout(
        Duration::from_secs(3),
        Client::connect(&source.endpoints, Some(options)),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| e.to_string())
}

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
    {
        let mut r = Reloader::locked(reloader);
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
    }));
    status
}
