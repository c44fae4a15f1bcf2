//! Responses by status code: the codes counted one by one, the table that
//! finds a status's counter, and [`StatusCounts`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Status codes counted one by one: the registered ones and a few that
/// servers and proxies commonly send (nginx's 444 and 494 to 499,
/// Cloudflare's 520 to 527). Any other code is counted as its class's
/// `other` (`code="other"` with `class`); a status outside 100 to 599
/// counts as 1xx or 5xx's other, as its class does.
pub const CODES: [u16; 77] = [
    100, 101, 102, 103, //
    200, 201, 202, 203, 204, 205, 206, 207, 208, 226, //
    300, 301, 302, 303, 304, 305, 306, 307, 308, //
    400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418,
    421, 422, 423, 424, 425, 426, 428, 429, 431, 444, 451, 494, 495, 496, 497, 499, //
    500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511, 520, 521, 522, 523, 524, 525, 526, 527,
];

/// Counters per status: one for each of [`CODES`], then one per class
/// for the other codes.
pub const STATUS_SLOTS: usize = CODES.len() + 5;

/// Slot of each status 0 to 599 (under 100: 1xx's other).
static SLOT: [u8; 600] = {
    let mut t = [0u8; 600];
    let mut s = 0;
    while s < 600 {
        let class = if s < 100 { 0 } else { s / 100 - 1 };
        t[s] = (CODES.len() + class) as u8;
        s += 1;
    }
    let mut i = 0;
    while i < CODES.len() {
        t[CODES[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The counter slot of `status`: one table read, no branch but the
/// bounds clamp.
#[inline]
pub fn status_slot(status: u16) -> usize {
    usize::from(SLOT[usize::from(status).min(599)])
}

/// The status class (0 for 1xx ... 4 for 5xx) a slot counts.
pub fn slot_class(slot: usize) -> usize {
    match CODES.get(slot) {
        Some(c) => usize::from(c / 100) - 1,
        None => slot - CODES.len(),
    }
}

/// Responses by status: see [`CODES`].
#[derive(Debug)]
pub struct StatusCounts([AtomicU64; STATUS_SLOTS]);

impl Default for StatusCounts {
    fn default() -> Self {
        StatusCounts(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl StatusCounts {
    #[inline]
    pub fn record(&self, status: u16) {
        self.0[status_slot(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts by class, 1xx to 5xx.
    pub fn classes(&self) -> [u64; 5] {
        let mut out = [0; 5];
        for (slot, c) in self.0.iter().enumerate() {
            out[slot_class(slot)] += c.load(Ordering::Relaxed);
        }
        out
    }

    /// Writes one line per code counted (codes never seen are left out),
    /// with `labels` (already escaped) first.
    pub(super) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (slot, c) in self.0.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let _ = match CODES.get(slot) {
                Some(code) => writeln!(out, "{name}{{{labels}{sep}code=\"{code}\"}} {n}"),
                None => writeln!(
                    out,
                    "{name}{{{labels}{sep}code=\"other\",class=\"{}xx\"}} {n}",
                    slot - CODES.len() + 1
                ),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_slot_of_its_class() {
        for status in 0..1000u16 {
            let slot = status_slot(status);
            assert!(slot < STATUS_SLOTS);
            let class = usize::from(status / 100).clamp(1, 5) - 1;
            assert_eq!(slot_class(slot), class, "{status}");
            match CODES.iter().position(|&c| c == status) {
                Some(i) => assert_eq!(slot, i),
                None => assert!(slot >= CODES.len(), "{status}"),
            }
        }
        let c = StatusCounts::default();
        for s in [200, 200, 431, 299, 999] {
            c.record(s);
        }
        assert_eq!(c.classes(), [0, 3, 0, 1, 1]);
        let mut out = String::new();
        c.render(&mut out, "x", "r=\"a\"");
        assert_eq!(
            out,
            "x{r=\"a\",code=\"200\"} 2\nx{r=\"a\",code=\"431\"} 1\n\
             x{r=\"a\",code=\"other\",class=\"2xx\"} 1\n\
             x{r=\"a\",code=\"other\",class=\"5xx\"} 1\n"
        );
    }
}
