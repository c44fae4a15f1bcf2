//! A route's `fallback` as requests use it: the fixed answer (rendered as a
//! `respond` route's is) or the other service's place, and the upstream
//! statuses it replaces, as bits.

use sluicegate_config::{Fallback, FallbackAnswer, FallbackOn};

use crate::proto::fields::Fields;
use crate::proto::response::FixedHead;

/// What answers when the route's service cannot.
#[derive(Debug)]
pub struct FallbackRt {
    pub answer: FallbackAnswerRt,
    /// Upstream statuses replaced by the fallback: bit `s - 500` for
    /// status `s`.
    pub statuses: u128,
}

#[derive(Debug)]
pub enum FallbackAnswerRt {
    /// A fixed answer: its head (status and fields) and body.
    Fixed { head: FixedHead, body: Box<[u8]> },
    /// The other service's place in [`super::Snapshot::services`].
    Service(u32),
}

impl FallbackRt {
    /// `service_index` gives a service's place by its name (it exists:
    /// the config was validated).
    pub(super) fn new(
        f: &Fallback,
        service_index: impl Fn(&str) -> Option<u32>,
    ) -> Result<FallbackRt, String> {
        let answer = match &f.answer {
            FallbackAnswer::Respond {
                status,
                body,
                headers,
            } => {
                let mut fields = Fields::new();
                for (k, v) in headers {
                    fields.push(k.as_bytes(), v.as_bytes());
                }
                FallbackAnswerRt::Fixed {
                    head: FixedHead::new(*status, fields),
                    body: body.as_bytes().into(),
                }
            }
            FallbackAnswer::Service(name) => FallbackAnswerRt::Service(
                service_index(name).ok_or_else(|| format!("fallback: unknown service {name}"))?,
            ),
        };
        Ok(FallbackRt {
            answer,
            statuses: statuses(&f.on),
        })
    }
}

/// `fallback_on` as bits from 500.
fn statuses(on: &[FallbackOn]) -> u128 {
    on.iter().fold(0, |bits, o| {
        bits | match o {
            FallbackOn::ServerError => (1u128 << 100) - 1,
            FallbackOn::Status(s) => 1u128 << (s.clamp(&500, &599) - 500),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_on_as_bits() {
        assert_eq!(statuses(&[]), 0);
        assert_eq!(statuses(&[FallbackOn::Status(500)]), 1);
        assert_eq!(
            statuses(&[FallbackOn::Status(503), FallbackOn::Status(599)]),
            (1 << 3) | (1 << 99)
        );
        assert_eq!(
            statuses(&[FallbackOn::ServerError]).count_ones(),
            100,
            "500 to 599"
        );
    }
}
