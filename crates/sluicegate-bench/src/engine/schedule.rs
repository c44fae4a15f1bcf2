//! Open-loop timing: each connection's send times, and where a request's
//! latency starts so that a server's stall is charged to the server and
//! the generator's own delay is not.

use std::time::{Duration, Instant};

/// The open-loop send times of one connection: connection `g` of `conns`
/// sends its `k`-th request at `start + (g + k * conns) / rate` seconds, so
/// all connections together send evenly at `rate`.
#[derive(Debug, Clone)]
pub struct Schedule {
    start: Instant,
    g: u64,
    conns: u64,
    rate: f64,
    k: u64,
    next: Instant,
}

impl Schedule {
    pub fn new(start: Instant, g: usize, conns: usize, rate: f64) -> Schedule {
        let mut s = Schedule {
            start,
            g: g as u64,
            conns: conns as u64,
            rate,
            k: 0,
            next: start,
        };
        s.next = s.at(0);
        s
    }

    fn at(&self, k: u64) -> Instant {
        let slot = (self.g + k * self.conns) as f64;
        self.start + Duration::from_secs_f64(slot / self.rate)
    }

    /// The next slot's number among all connections' slots (0, 1, ... in
    /// time order), for a run of `-n` requests.
    pub fn slot(&self) -> u64 {
        self.g + self.k * self.conns
    }

    /// When the next request is due.
    pub fn next(&self) -> Instant {
        self.next
    }

    /// Takes the next slot: returns its intended time and moves on.
    pub fn advance(&mut self) -> Instant {
        let at = self.next;
        self.k += 1;
        self.next = self.at(self.k);
        at
    }
}

/// Where an open-loop request's latency starts. `room_at` is when its
/// connection last became free to send (a response freed the pipeline);
/// `ready` is when the generator could send it on its own account.
///
/// - The server kept the connection busy past the intended time: latency
///   counts from the intended time, the wait included (no coordinated
///   omission).
/// - The connection was idle at the intended time: any later send is the
///   generator's delay (its timer has 1 ms granularity), not the server's,
///   so latency counts from `ready`.
pub fn latency_start(intended: Instant, room_at: Instant, ready: Instant) -> Instant {
    if room_at > intended {
        intended
    } else {
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_share_the_rate_evenly() {
        let t0 = Instant::now();
        let (conns, rate) = (8usize, 1000.0);
        let mut all: Vec<Duration> = Vec::new();
        for g in 0..conns {
            let mut s = Schedule::new(t0, g, conns, rate);
            while s.next() < t0 + Duration::from_secs(1) {
                all.push(s.advance() - t0);
            }
        }
        all.sort();
        // Exactly 1000 slots in the first second, 1 ms apart, none doubled.
        assert_eq!(all.len(), 1000);
        for (i, d) in all.iter().enumerate() {
            let want = Duration::from_micros(i as u64 * 1000);
            assert!(
                d.abs_diff(want) < Duration::from_micros(1),
                "slot {i}: {d:?}"
            );
        }
    }

    #[test]
    fn one_connection_keeps_its_period_without_drift() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 3, 10, 250.0);
        // Its first slot is 3/250 s in; then every 10/250 = 40 ms.
        assert_eq!(s.advance() - t0, Duration::from_millis(12));
        for _ in 0..99_998 {
            s.advance();
        }
        // The 100,000th slot: 12 ms + 99,999 * 40 ms, to the microsecond.
        let d = s.advance() - t0;
        let want = Duration::from_millis(12) + Duration::from_millis(40) * 99_999;
        assert!(
            d.abs_diff(want) < Duration::from_micros(1),
            "{d:?} vs {want:?}"
        );
    }

    #[test]
    fn latency_starts_at_the_intended_time_only_when_the_server_made_us_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let intended = t0 + ms(10);
        // The previous response ended after the intended time: charged.
        assert_eq!(latency_start(intended, t0 + ms(15), t0 + ms(15)), intended);
        // The connection was free before; sent late because the timer fired
        // late: not charged.
        assert_eq!(
            latency_start(intended, t0 + ms(5), t0 + ms(11)),
            t0 + ms(11)
        );
    }
}
