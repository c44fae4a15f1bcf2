//! The reload history: each config change applied or refused, whatever
//! its source (the file, a signal, the admin API), with its time, the
//! revision it made (or the one that stayed) and its problems. The newest
//! [`KEEP`] are kept.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Entries kept; older ones are dropped.
pub const KEEP: usize = 100;

/// Where a config change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The config file changed on disk (or a file it names did).
    File,
    #[serde(rename = "SIGHUP")]
    Sighup,
    #[serde(rename = "SIGUSR2")]
    Sigusr2,
    /// A write through the admin API.
    Api,
    /// A change seen by the watch on etcd (`config_source.etcd`).
    Etcd,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Sighup => "SIGHUP",
            Source::Sigusr2 => "SIGUSR2",
            Source::Api => "api",
            Source::Etcd => "etcd",
        }
    }
}

/// One problem of a refused change: the field's path (`$` when it has
/// none, or a file's `FILE:LINE:COL` for a file) and the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Issue {
    pub path: String,
    pub message: String,
}

/// One change, applied or refused.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Entry {
    /// RFC 3339, UTC, to the millisecond.
    pub time: String,
    pub source: Source,
    pub applied: bool,
    /// The config revision after the change (unchanged when refused).
    pub revision: u64,
    pub errors: Vec<Issue>,
}

#[derive(Debug, Default)]
pub struct History {
    entries: VecDeque<Entry>,
}

impl History {
    pub fn push(&mut self, source: Source, applied: bool, revision: u64, errors: Vec<Issue>) {
        if self.entries.len() == KEEP {
            self.entries.pop_front();
        }
        self.entries.push_back(Entry {
            time: rfc3339(SystemTime::now()),
            source,
            applied,
            revision,
            errors,
        });
    }

    /// Newest first.
    pub fn newest_first(&self) -> Vec<Entry> {
        self.entries.iter().rev().cloned().collect()
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01.
fn civil(days: u64) -> (u64, u64, u64) {
    // Counted in 400-year eras from 0000-03-01, so leap days end a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339_utc() {
        let at = |s: u64, ms: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_795_000_000, 0), "2026-11-18T11:06:40.000Z");
    }

    #[test]
    fn only_the_newest_are_kept() {
        let mut h = History::default();
        for i in 0..(KEEP as u64 + 5) {
            h.push(Source::Api, true, i, Vec::new());
        }
        let all = h.newest_first();
        assert_eq!(all.len(), KEEP);
        assert_eq!(all[0].revision, KEEP as u64 + 4);
    }
}
