//! The one watch per process: connects (with backoff), lists the prefix
//! when it has nothing to start from, watches it from the last applied
//! revision + 1 with progress notifications, and on a compacted start
//! revision lists the prefix again at a known revision and watches from
//! there. Every response is queued and applied under the reloader's lock
//! before the next is read, so changes apply in order, each once. Fleet
//! cache purges (`purge.rs`) are applied as they are seen.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, EventType, GetOptions, WatchClient, WatchOptions, WatchResponse, WatchStream,
};
use sluicegate_config::EtcdSource;

use super::client::connect;
use super::inbox::{Batch, Change, Inbox};
use super::purge;
use super::status::Status;
use crate::reload::Reloader;

/// Backoff between reconnections: doubles from the first to the last.
pub(super) const BACKOFF_FIRST: Duration = Duration::from_millis(100);
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often progress is asked for when no event comes.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Keys a list reads at once.
const PAGE: i64 = 10_000;
/// Largest message taken from etcd (a watch response may carry many
/// revisions' events after a reconnect).
const MAX_MESSAGE: usize = 256 << 20;

pub(crate) struct Watch {
    pub reloader: Arc<Mutex<Reloader>>,
    pub source: EtcdSource,
    pub status: Arc<Status>,
    pub inbox: Arc<Inbox>,
    pub client: Arc<Mutex<Option<Client>>>,
    /// The running snapshot, for fleet cache purges.
    pub shared: Arc<sluicegate_proxy::Shared>,
}

/// Why a watch stopped.
enum Stop {
    /// Its start revision was compacted: list again.
    Compacted,
    /// etcd went away (or answered an error).
    Lost(String),
}

pub(crate) async fn run(w: Watch) {
    let mut backoff = BACKOFF_FIRST;
    // Whether the prefix must be listed first: nothing applied yet, or
    // the revision to watch from was compacted.
    let mut list = w.status.revision.load(Ordering::Relaxed) == 0;
    // The revision last listed while no event came after it.
    let mut listed = None;
    loop {
        let stop = match connect(&w.source.connection).await {
            Ok(client) => {
                *w.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(client.clone());
                w.status.fleet.connected(client.clone(), &w.source.prefix);
                follow(&w, client, &mut list, &mut listed, &mut backoff).await
            }
            Err(e) => Stop::Lost(e),
        };
        w.status.connected.store(false, Ordering::Relaxed);
        match stop {
            Stop::Compacted => {
                tracing::warn!("etcd source: the watch's start revision was compacted; listing the prefix again");
                list = true;
                continue;
            }
            Stop::Lost(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "etcd source: etcd unreachable, serving the last applied config");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Has what is queued applied off the runtime thread, under the
/// reloader's lock, without waiting: the watch goes on reading (an API
/// write may hold the lock while it waits for its own change to come).
fn apply(w: &Watch) {
    if w.inbox.scheduled.swap(true, Ordering::AcqRel) {
        return;
    }
    let r = w.reloader.clone();
    tokio::task::spawn_blocking(move || Reloader::locked(&r).drain());
}

/// Lists if needed, then follows the watch until it stops.
async fn follow(
    w: &Watch,
    client: Client,
    list: &mut bool,
    listed: &mut Option<u64>,
    backoff: &mut Duration,
) -> Stop {
    let prefix = w.source.prefix.clone();
    if *list {
        let (revision, kvs) = match list_prefix(&client, &prefix).await {
            Ok(l) => l,
            Err(e) => return Stop::Lost(e.to_string()),
        };
        w.inbox.push(Batch::Listed { revision, kvs });
        apply(w);
        w.status.synced();
        *list = false;
        *listed = Some(revision);
    }
    // From what was listed, else from what was applied: any overlap with
    // batches still queued is dropped when they are applied.
    let from = listed.unwrap_or(w.status.revision.load(Ordering::Relaxed)) + 1;
    let mut watch = match PrefixWatch::open(&client, &prefix, from).await {
        Ok(watch) => watch,
        Err(e) => return Stop::Lost(e),
    };
    w.status.connected.store(true, Ordering::Relaxed);
    tracing::info!(from, "etcd source: watching {prefix}");
    loop {
        let resp = match watch.next().await {
            Ok(Seen::Response(r)) => r,
            Ok(Seen::Compacted) => return Stop::Compacted,
            Err(e) => return Stop::Lost(e),
        };
        *backoff = BACKOFF_FIRST;
        w.status.synced();
        if resp.events().is_empty() {
            continue;
        }
        let changes = resp
            .events()
            .iter()
            .filter_map(|ev| {
                let kv = ev.kv()?;
                let key = strip(&prefix, kv.key());
                // A fleet cache purge: applied here; the config ignores
                // it (`meta/`) but its revision still counts.
                if key.starts_with(purge::KEYS) && ev.event_type() == EventType::Put {
                    let rev = kv.mod_revision() as u64;
                    w.status.fleet.seen(&w.shared, &key, kv.value(), rev);
                }
                Some(Change {
                    key,
                    value: (ev.event_type() == EventType::Put).then(|| kv.value().to_vec()),
                    revision: kv.mod_revision() as u64,
                })
            })
            .collect();
        *listed = None;
        w.inbox.push(Batch::Changes(changes));
        apply(w);
    }
}

/// A watch on every key under a prefix from a revision on, asking etcd for
/// progress every [`PROGRESS_EVERY`] while no event comes (so a quiet
/// watch still says the connection is alive).
pub(super) struct PrefixWatch {
    _client: WatchClient,
    stream: WatchStream,
    progress: tokio::time::Interval,
}

/// What a watch brought.
pub(super) enum Seen {
    /// Events (or none: a progress notification).
    Response(WatchResponse),
    /// The start revision was compacted: list again.
    Compacted,
}

impl PrefixWatch {
    pub(super) async fn open(client: &Client, prefix: &str, from: u64) -> Result<Self, String> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from as i64)
            .with_progress_notify();
        let mut watcher = client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        let stream = watcher
            .watch(prefix.to_string(), Some(options))
            .await
            .map_err(|e| e.to_string())?;
        let mut progress = tokio::time::interval(PROGRESS_EVERY);
        progress.tick().await;
        Ok(PrefixWatch {
            _client: watcher,
            stream,
            progress,
        })
    }

    /// The next response; `Err`: the watch is lost (stream ended, failed
    /// or canceled).
    pub(super) async fn next(&mut self) -> Result<Seen, String> {
        loop {
            let msg = tokio::select! {
                m = self.stream.message() => m,
                _ = self.progress.tick() => {
                    self.stream.request_progress().await.map_err(|e| e.to_string())?;
                    continue;
                }
            };
            let resp = match msg {
                Ok(Some(r)) => r,
                Ok(None) => return Err("the watch stream ended".to_string()),
                Err(e) => return Err(e.to_string()),
            };
            if resp.compact_revision() > 0 {
                return Ok(Seen::Compacted);
            }
            if resp.canceled() {
                return Err(format!("watch canceled: {}", resp.cancel_reason()));
            }
            return Ok(Seen::Response(resp));
        }
    }
}

/// Every key under `prefix` and its value, listed in pages all read at the
/// revision of the first (a compaction meanwhile fails the list, which is
/// then tried again).
pub(super) async fn list_prefix(
    client: &Client,
    prefix: &str,
) -> Result<(u64, Vec<(String, Vec<u8>)>), etcd_client::Error> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    // The prefix ends with `/`: its range ends at the same key with `0`.
    let end = format!("{}0", &prefix[..prefix.len() - 1]);
    let mut start = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut out = Vec::new();
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let got = kv.get(start.clone(), Some(options)).await?;
        if revision == 0 {
            revision = got.header().map_or(0, |h| h.revision());
        }
        for item in got.kvs() {
            out.push((strip(prefix, item.key()), item.value().to_vec()));
        }
        match got.kvs().last() {
            Some(last) if got.more() => {
                start = last.key().to_vec();
                start.push(0);
            }
            _ => return Ok((revision as u64, out)),
        }
    }
}

/// `key` without the prefix, as text.
pub(super) fn strip(prefix: &str, key: &[u8]) -> String {
    let key = String::from_utf8_lossy(key);
    key.strip_prefix(prefix).unwrap_or(&key).to_string()
}
