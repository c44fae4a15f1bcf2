//! A route's mirror (`mirror`) as requests use it: the service that gets
//! copies, and the share of requests copied, drawn from the worker's own
//! [`Rng`] (a `Cell`, no lock, no system call). The copy itself is
//! [`crate::upstream::mirror`]'s.

use sluicegate_config::Mirror;

use super::fault::{threshold, Rng, SCALE};

/// A route's mirror settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRt {
    /// The mirror service's place in the snapshot's services.
    pub(crate) service: u32,
    /// The share copied, as a threshold on a draw below [`SCALE`].
    share: u64,
}

impl MirrorRt {
    pub(crate) fn new(cfg: &Mirror, service: u32) -> MirrorRt {
        MirrorRt {
            service,
            share: threshold(cfg.percent),
        }
    }

    /// Whether this request is copied.
    #[inline]
    pub(crate) fn draw(&self, rng: &Rng) -> bool {
        rng.below(SCALE) < self.share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copied(percent: f64, n: u32) -> u32 {
        let m = MirrorRt::new(
            &Mirror {
                service: "s".into(),
                percent,
            },
            0,
        );
        let rng = Rng::new(7);
        (0..n).filter(|_| m.draw(&rng)).count() as u32
    }

    #[test]
    fn the_share_drawn_is_the_percent_asked() {
        assert_eq!(copied(100.0, 10_000), 10_000);
        assert_eq!(copied(0.0, 10_000), 0);
        let half = copied(50.0, 100_000);
        assert!((49_000..=51_000).contains(&half), "{half}");
        let tenth = copied(0.1, 1_000_000);
        assert!((900..=1_100).contains(&tenth), "{tenth}");
    }
}
