//! Load balancing across a service's endpoints, lock-free and shared by
//! every worker: smooth weighted round robin (a precomputed sequence read
//! through one atomic counter), least connections, power of two choices on
//! latency EWMA, consistent hashing on a ring of virtual nodes, and a
//! weighted random pick.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluicegate_config::{Balance, HashKey};

use crate::balance::endpoint::EndpointState;

/// Longest precomputed round-robin sequence; larger weight sums are scaled.
const MAX_SEQUENCE: u64 = 4096;
/// Virtual nodes per unit of weight on the hash ring.
const VNODES: u32 = 100;

/// Per-service balancer state that survives reloads when the service's
/// endpoints and weights are unchanged.
#[derive(Debug, Default)]
pub struct BalancerState {
    pub counter: AtomicUsize,
}

#[derive(Debug)]
pub struct Balancer {
    kind: Kind,
    state: Arc<BalancerState>,
}

#[derive(Debug)]
enum Kind {
    RoundRobin {
        sequence: Vec<u32>,
    },
    LeastConn,
    P2c,
    Hash {
        key: HashKey,
        ring: Vec<(u64, u32)>,
    },
    /// Running sums of the weights: endpoint `i` owns the draws in
    /// `[bounds[i-1], bounds[i])`.
    Random {
        bounds: Vec<u64>,
    },
}

/// What a balancer may look at in a request.
pub struct PickContext<'a> {
    pub client_ip: std::net::IpAddr,
    pub path: &'a [u8],
    pub header: &'a dyn Fn(&[u8]) -> Option<&'a [u8]>,
}

impl Balancer {
    pub fn new(
        balance: Balance,
        hash_key: &HashKey,
        endpoints: &[Arc<EndpointState>],
        state: Arc<BalancerState>,
    ) -> Balancer {
        let kind = match balance {
            Balance::RoundRobin => Kind::RoundRobin {
                sequence: smooth_sequence(&endpoints.iter().map(|e| e.weight).collect::<Vec<_>>()),
            },
            Balance::LeastConn => Kind::LeastConn,
            Balance::P2cEwma => Kind::P2c,
            Balance::Random => Kind::Random {
                bounds: endpoints
                    .iter()
                    .scan(0u64, |sum, e| {
                        *sum += u64::from(e.weight.max(1));
                        Some(*sum)
                    })
                    .collect(),
            },
            Balance::Hash => {
                let mut ring = Vec::new();
                for (i, e) in endpoints.iter().enumerate() {
                    for v in 0..e.weight * VNODES {
                        let point = format!("{}#{v}", e.name);
                        ring.push((xxhash_rust::xxh3::xxh3_64(point.as_bytes()), i as u32));
                    }
                }
                ring.sort_unstable();
                Kind::Hash {
                    key: hash_key.clone(),
                    ring,
                }
            }
        };
        Balancer { kind, state }
    }

    /// The endpoint for a retry after `failed`: the next one after it in
    /// rotation that is not in `tried` (a bit per index; endpoints past 64
    /// are never excluded). Not the balancer's own choice: that would
    /// move a round robin on twice per request and send every first try
    /// to the same endpoint.
    pub fn pick_other(
        endpoints: &[Arc<EndpointState>],
        failed: usize,
        tried: u64,
    ) -> Option<usize> {
        let was = |i: usize| i < 64 && tried & (1 << i) != 0;
        let n = endpoints.len();
        (1..n)
            .map(|k| (failed + k) % n)
            .find(|&i| !was(i) && endpoints[i].in_rotation())
    }

    /// Whether picks read the endpoints' latency averages
    /// ([`crate::balance::endpoint::Ewma`]);
    /// only then does a request update its endpoint's. An average weighs
    /// its old value by the time since its last sample, so one that starts
    /// to count again after a reload to `p2c` keeps little of a stale one.
    pub fn reads_latency(&self) -> bool {
        matches!(self.kind, Kind::P2c)
    }

    /// Picks an endpoint index among `endpoints` (never empty) that is in
    /// rotation; `None` when none is.
    pub fn pick(&self, endpoints: &[Arc<EndpointState>], cx: &PickContext<'_>) -> Option<usize> {
        self.pick_by(endpoints, cx, EndpointState::in_rotation)
    }

    /// [`Balancer::pick`] among the endpoints `usable` accepts.
    #[inline]
    pub fn pick_by(
        &self,
        endpoints: &[Arc<EndpointState>],
        cx: &PickContext<'_>,
        usable: impl Fn(&EndpointState) -> bool,
    ) -> Option<usize> {
        let n = endpoints.len();
        let ok = |i: usize| usable(&endpoints[i]);
        // A service whose names have not resolved yet has no endpoints.
        if n == 0 {
            return None;
        }
        if n == 1 {
            return ok(0).then_some(0);
        }
        match &self.kind {
            Kind::RoundRobin { sequence } => {
                let c = self.state.counter.fetch_add(1, Ordering::Relaxed);
                // The next healthy entry of the smooth sequence.
                (0..sequence.len())
                    .map(|k| sequence[(c + k) % sequence.len()] as usize)
                    .find(|&i| ok(i))
            }
            Kind::LeastConn => {
                // Rotate the starting point so ties spread evenly.
                let start = self.state.counter.fetch_add(1, Ordering::Relaxed) % n;
                let mut best = start;
                let mut best_load = u64::MAX;
                let mut found = false;
                for k in 0..n {
                    let i = (start + k) % n;
                    let e = &endpoints[i];
                    if !ok(i) {
                        continue;
                    }
                    let load = (e.in_flight() as u64 * 1_000_000) / u64::from(e.weight);
                    if !found || load < best_load {
                        best = i;
                        best_load = load;
                        found = true;
                    }
                }
                found.then_some(best)
            }
            Kind::P2c => {
                let a = fastrand::usize(..n);
                let mut b = fastrand::usize(..n - 1);
                if b >= a {
                    b += 1;
                }
                match (ok(a), ok(b)) {
                    (true, true) => Some(if endpoints[a].p2c_cost() <= endpoints[b].p2c_cost() {
                        a
                    } else {
                        b
                    }),
                    (true, false) => Some(a),
                    (false, true) => Some(b),
                    // Both out: any healthy one, from a random start.
                    (false, false) => (0..n).map(|k| (a + k) % n).find(|&i| ok(i)),
                }
            }
            Kind::Hash { key, ring } => {
                let mut ipbuf = [0u8; 16];
                let bytes: Option<&[u8]> = match key {
                    HashKey::Header(name) => (cx.header)(name.as_bytes()),
                    HashKey::Path => Some(cx.path),
                    HashKey::ClientIp => Some(match cx.client_ip {
                        std::net::IpAddr::V4(v4) => {
                            ipbuf[..4].copy_from_slice(&v4.octets());
                            &ipbuf[..4]
                        }
                        std::net::IpAddr::V6(v6) => {
                            ipbuf = v6.octets();
                            &ipbuf[..]
                        }
                    }),
                };
                match bytes {
                    Some(b) => {
                        let h = xxhash_rust::xxh3::xxh3_64(b);
                        let pos = ring.partition_point(|&(p, _)| p < h);
                        // The first healthy owner clockwise: keys of a
                        // healthy endpoint never move.
                        (0..ring.len())
                            .map(|k| ring[(pos + k) % ring.len()].1 as usize)
                            .find(|&i| ok(i))
                    }
                    // No key in this request: spread like round robin.
                    None => {
                        let c = self.state.counter.fetch_add(1, Ordering::Relaxed);
                        (0..n).map(|k| (c + k) % n).find(|&i| ok(i))
                    }
                }
            }
            Kind::Random { bounds } => weighted_random(endpoints, bounds, ok),
        }
    }
}

/// A pick in proportion to the weights among the endpoints `ok` accepts.
/// The draw comes from the worker thread's own generator (fastrand's
/// thread-local wyrand, seeded once per thread): no lock, no syscall. The
/// first draw is over every endpoint (a binary search); only when it lands
/// on one out of rotation is a second drawn over the usable weights alone,
/// so the picks stay proportional among the endpoints still in.
fn weighted_random(
    endpoints: &[Arc<EndpointState>],
    bounds: &[u64],
    ok: impl Fn(usize) -> bool,
) -> Option<usize> {
    let total = *bounds.last()?;
    let r = fastrand::u64(..total);
    let i = bounds.partition_point(|&b| b <= r);
    if i < endpoints.len() && ok(i) {
        return Some(i);
    }
    let weight = |i: usize| u64::from(endpoints[i].weight.max(1));
    let usable: u64 = (0..endpoints.len()).filter(|&i| ok(i)).map(weight).sum();
    if usable == 0 {
        return None;
    }
    let mut r = fastrand::u64(..usable);
    for i in (0..endpoints.len()).filter(|&i| ok(i)) {
        if r < weight(i) {
            return Some(i);
        }
        r -= weight(i);
    }
    None
}

/// The smooth weighted round-robin order (each step: add every weight to
/// its current value, take the largest, subtract the total from it), for
/// one full cycle of the weights.
fn smooth_sequence(weights: &[u32]) -> Vec<u32> {
    let mut w: Vec<u64> = weights.iter().map(|&w| u64::from(w.max(1))).collect();
    let total: u64 = w.iter().sum();
    if total > MAX_SEQUENCE {
        let g = w.iter().copied().fold(0, gcd);
        w.iter_mut().for_each(|x| *x /= g);
        let total: u64 = w.iter().sum();
        if total > MAX_SEQUENCE {
            w.iter_mut()
                .for_each(|x| *x = (*x * MAX_SEQUENCE / total).max(1));
        }
    }
    let total: i64 = w.iter().sum::<u64>() as i64;
    let mut current = vec![0i64; w.len()];
    let mut seq = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for i in 0..w.len() {
            current[i] += w[i] as i64;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        seq.push(best as u32);
    }
    seq
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn eps(weights: &[u32]) -> Vec<Arc<EndpointState>> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                Arc::new(EndpointState::new(
                    i,
                    format!("127.0.0.1:{}", 9000 + i),
                    format!("127.0.0.1:{}", 9000 + i).parse().unwrap(),
                    w,
                    10,
                ))
            })
            .collect()
    }

    fn cx() -> PickContext<'static> {
        PickContext {
            client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            path: b"/",
            header: &|_| None,
        }
    }

    #[test]
    fn smooth_is_smooth() {
        assert_eq!(smooth_sequence(&[5, 1, 1]), vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_sequence(&[1, 2]), vec![1, 0, 1]);
        let big = smooth_sequence(&[1000, 1000, 999]);
        assert!(big.len() as u64 <= MAX_SEQUENCE);
    }

    #[test]
    fn round_robin_follows_weights() {
        let e = eps(&[1, 2]);
        let b = Balancer::new(
            Balance::RoundRobin,
            &HashKey::ClientIp,
            &e,
            Default::default(),
        );
        let mut counts = [0; 2];
        for _ in 0..300 {
            counts[b.pick(&e, &cx()).unwrap()] += 1;
        }
        assert_eq!(counts, [100, 200]);
    }

    #[test]
    fn least_conn_prefers_idle() {
        let e = eps(&[1, 1, 1]);
        let _p1 = e[0].try_acquire().unwrap();
        let _p2 = e[2].try_acquire().unwrap();
        let b = Balancer::new(
            Balance::LeastConn,
            &HashKey::ClientIp,
            &e,
            Default::default(),
        );
        for _ in 0..10 {
            assert_eq!(b.pick(&e, &cx()).unwrap(), 1);
        }
    }

    #[test]
    fn hash_is_consistent() {
        let e = eps(&[1, 1, 1]);
        let b = Balancer::new(
            Balance::Hash,
            &HashKey::Header("x-user".into()),
            &e,
            Default::default(),
        );
        let mut spread = [0; 3];
        for user in 0..300 {
            let v = format!("user-{user}");
            let lookup = |_: &[u8]| Some(v.as_bytes());
            let c = PickContext {
                client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                path: b"/",
                header: &lookup,
            };
            let first = b.pick(&e, &c).unwrap();
            assert_eq!(first, b.pick(&e, &c).unwrap());
            spread[first] += 1;
        }
        assert!(spread.iter().all(|&n| n > 50), "{spread:?}");
        // Removing one endpoint moves only the keys that were on it.
        let e2 = vec![e[0].clone(), e[1].clone()];
        let b2 = Balancer::new(
            Balance::Hash,
            &HashKey::Header("x-user".into()),
            &e2,
            Default::default(),
        );
        for user in 0..300 {
            let v = format!("user-{user}");
            let lookup = |_: &[u8]| Some(v.as_bytes());
            let c = PickContext {
                client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                path: b"/",
                header: &lookup,
            };
            let before = b.pick(&e, &c).unwrap();
            if before != 2 {
                assert_eq!(b2.pick(&e2, &c).unwrap(), before);
            }
        }
    }

    #[test]
    fn p2c_avoids_slow() {
        let e = eps(&[1, 1]);
        e[0].ewma.observe(1, 50_000.0);
        e[1].ewma.observe(1, 100.0);
        let b = Balancer::new(Balance::P2cEwma, &HashKey::ClientIp, &e, Default::default());
        for _ in 0..20 {
            assert_eq!(b.pick(&e, &cx()).unwrap(), 1);
        }
    }

    #[test]
    fn random_follows_weights_within_tolerance() {
        let e = eps(&[1, 1, 2]);
        let b = Balancer::new(Balance::Random, &HashKey::ClientIp, &e, Default::default());
        let mut counts = [0usize; 3];
        for _ in 0..40_000 {
            counts[b.pick(&e, &cx()).unwrap()] += 1;
        }
        // Expected 10,000 / 10,000 / 20,000; a standard deviation is
        // under 100, so 600 is six of them.
        for (got, want) in counts.iter().zip([10_000usize, 10_000, 20_000]) {
            assert!(got.abs_diff(want) < 600, "{counts:?}");
        }
    }

    #[test]
    fn random_skips_ejected_and_keeps_proportions_among_the_rest() {
        let e = eps(&[1, 3, 1]);
        let b = Balancer::new(Balance::Random, &HashKey::ClientIp, &e, Default::default());
        // The heavy one ejected after a failed connect: the other two
        // share evenly.
        e[1].eject
            .configure(Some(&sluicegate_config::Ejection::default()));
        let now = crate::clock::mono_ns(std::time::Instant::now());
        assert!(e[1].eject.connect_failed(now).ejected_for.is_some());
        let mut counts = [0usize; 3];
        for _ in 0..20_000 {
            counts[b.pick(&e, &cx()).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0, "{counts:?}");
        assert!(counts[0].abs_diff(10_000) < 500, "{counts:?}");
        // Only one left: always that one; none left: none.
        for _ in 0..100 {
            assert_eq!(b.pick_by(&e, &cx(), |ep| ep.id == 2), Some(2));
        }
        assert_eq!(b.pick_by(&e, &cx(), |_| false), None);
    }

    #[test]
    fn unhealthy_endpoints_are_skipped_by_every_balancer() {
        use std::sync::atomic::Ordering::Relaxed;
        let e: Vec<Arc<EndpointState>> = (0..3)
            .map(|i| {
                Arc::new(EndpointState::new(
                    i,
                    format!("10.0.0.{i}:80"),
                    format!("10.0.0.{i}:80").parse().unwrap(),
                    1,
                    8,
                ))
            })
            .collect();
        let ip = "192.0.2.1".parse().unwrap();
        let none = |_: &[u8]| -> Option<&[u8]> { None };
        let c = PickContext {
            client_ip: ip,
            path: b"/x",
            header: &none,
        };
        for balance in [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::P2cEwma,
            Balance::Hash,
            Balance::Random,
        ] {
            let b = Balancer::new(balance, &HashKey::ClientIp, &e, Arc::default());
            e[1].healthy.store(false, Relaxed);
            for _ in 0..50 {
                assert_ne!(b.pick(&e, &c), Some(1), "{balance:?}");
                assert!(b.pick(&e, &c).is_some(), "{balance:?}");
            }
            for x in &e {
                x.healthy.store(false, Relaxed);
            }
            assert_eq!(b.pick(&e, &c), None, "{balance:?}");
            for x in &e {
                x.healthy.store(true, Relaxed);
            }
        }
    }
}
