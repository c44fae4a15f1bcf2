//! Time below everything else: the process's monotonic clock origin,
//! calendar dates, and the worker-local deadlines and shutdown signal
//! that bound every wait on a socket.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(crate) mod calendar;
pub(crate) mod deadline;

/// A fixed instant before any request of this process (an hour before the
/// first call, or less on a machine up for less), so request times taken
/// just before the first call do not saturate to zero.
fn clock_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let now = Instant::now();
        [3600, 60, 1]
            .iter()
            .find_map(|&s| now.checked_sub(Duration::from_secs(s)))
            .unwrap_or(now)
    })
}

/// Nanoseconds since the process's clock origin (never zero).
pub fn mono_ns(now: Instant) -> u64 {
    now.saturating_duration_since(clock_origin()).as_nanos() as u64 + 1
}
