//! What a load thread counts: its live counts while it runs, what it hands
//! the coordinator each second and at the end.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::stats::{new_histogram, Second};

/// What a thread tells the coordinator.
pub enum Report {
    /// Counts of one second (or of the last part of one, at the end).
    Second(Second),
    /// The thread is done.
    Final(Box<ThreadTotals>),
}

/// A thread's counts kept for the whole run.
pub struct ThreadTotals {
    pub sent: u64,
    pub bytes_written: u64,
    pub connections_opened: u64,
    pub statuses: Vec<(u16, u64)>,
    pub connect: Histogram<u64>,
    pub waiting: Histogram<u64>,
    pub processing: Histogram<u64>,
    pub document_length: Option<u64>,
    /// Requests completed in each full second.
    pub rates: Vec<u64>,
    /// When its last connection finished.
    pub finished: Instant,
}

/// A thread's live counts.
pub(super) struct Recorder {
    pub(super) second: Second,
    pub(super) sent: u64,
    pub(super) bytes_written: u64,
    pub(super) connections_opened: u64,
    pub(super) statuses: Box<[u64; 1000]>,
    pub(super) connect: Histogram<u64>,
    pub(super) waiting: Histogram<u64>,
    pub(super) processing: Histogram<u64>,
    pub(super) document_length: Option<u64>,
}

impl Recorder {
    pub(super) fn new() -> Recorder {
        Recorder {
            second: Second::new(0),
            sent: 0,
            bytes_written: 0,
            connections_opened: 0,
            statuses: Box::new([0; 1000]),
            connect: new_histogram(),
            waiting: new_histogram(),
            processing: new_histogram(),
            document_length: None,
        }
    }
}
