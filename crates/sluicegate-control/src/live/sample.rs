//! The samples of the data plane's counters that `/live` compares: one
//! taken a second while `/live` is asked for, the last minute of them kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluicegate_proxy::live::Counts;
use sluicegate_proxy::Shared;

/// Samples kept: one a second for a minute, and the one before.
pub(super) const KEEP: usize = 61;
/// Sampling stops this long after the last `/live`.
pub(super) const IDLE: Duration = Duration::from_secs(120);

/// The counters at one moment.
pub(crate) struct Sample {
    pub at: Instant,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub counts: Counts,
}

impl Sample {
    pub(super) fn take(shared: &Shared) -> Sample {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        Sample {
            at: Instant::now(),
            unix_ms,
            counts: shared.live(),
        }
    }
}

/// The samples of the last minute, oldest first.
#[derive(Default)]
pub(crate) struct Samples {
    ring: Mutex<VecDeque<Arc<Sample>>>,
    /// When `/live` was last asked for.
    asked: Mutex<Option<Instant>>,
}

impl Samples {
    pub(super) fn push(&self, s: Sample) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == KEEP {
            ring.pop_front();
        }
        ring.push_back(Arc::new(s));
    }

    /// Forgets every sample (`/live` is no longer asked for).
    pub(super) fn clear(&self) {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub(super) fn asked(&self) {
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    pub(super) fn wanted(&self) -> bool {
        let asked = *self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.is_some_and(|t| t.elapsed() < IDLE)
    }

    pub(super) fn all(&self) -> Vec<Arc<Sample>> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }
}
