//! The watch's queue: what each watch response (or a list of the prefix)
//! brought, kept until whoever next holds the reloader's lock applies it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

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

    pub(super) fn take(&self) -> Vec<Batch> {
        self.scheduled.store(false, Ordering::Release);
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Waits up to `limit` for a batch to be queued (returns at once if one is).
    pub(super) fn wait(&self, limit: std::time::Duration) {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.is_empty() {
            let _ = self.arrived.wait_timeout(q, limit);
        }
    }
}
