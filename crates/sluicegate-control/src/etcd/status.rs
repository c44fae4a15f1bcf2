//! What the metrics show of the etcd source: the revision the running
//! config reflects, whether the watch is open, when etcd last answered and
//! how many objects were refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
    /// Cache purges carried across the fleet (`purge.rs`).
    pub(crate) fleet: super::purge::Fleet,
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
