//! A client's request that forwarding hands back unanswered, for its
//! route's fallback to answer: what a route with a fallback asks of
//! [`super::forward`] ([`HandBack`]), and what it gets back
//! ([`Unanswered`]: why the service could not answer, the error the client
//! would get otherwise, and whether the request is still whole to send
//! again). Routes without a fallback never come here: for them forwarding
//! answers its failures itself, as it always did.

use crate::balance::endpoint::EndpointState;
use crate::observe::metrics::FALLBACK_CAUSES;
use crate::proto::response::ErrorKind;
use crate::snapshot::ServiceRt;
use crate::upstream::failure::AttemptError;
use crate::upstream::head::HeadError;

/// What forwarding hands back instead of answering, for a client's
/// request: nothing by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct HandBack {
    /// Failures before any of a response went to the client: no endpoint
    /// (none up, circuits open, every slot busy), connects or attempts used
    /// up, no response head in time, none valid.
    pub failures: bool,
    /// Upstream statuses handed back instead of relayed: bit `s - 500`
    /// for status `s` (500 to 599).
    pub statuses: u128,
    /// Statuses are handed back only for a request still whole (a
    /// fallback that sends it again); otherwise they are relayed.
    pub whole_only: bool,
    /// A `304` is handed back instead of relayed: the request carries
    /// the cache's own validators (a foreground revalidation), and the
    /// client is answered from the refreshed object.
    pub not_modified: bool,
}

impl HandBack {
    pub const NONE: HandBack = HandBack {
        failures: false,
        statuses: 0,
        whole_only: false,
        not_modified: false,
    };

    /// What a cached route with a stale object to serve
    /// (`stale_if_error`) hands back: every failure, every 5xx.
    pub const STALE: HandBack = HandBack {
        failures: true,
        statuses: (1u128 << 100) - 1,
        whole_only: false,
        not_modified: false,
    };

    /// Whether an upstream answer of `status` is handed back.
    #[inline]
    pub fn takes(&self, status: u16) -> bool {
        matches!(status, 500..=599) && self.statuses >> (status - 500) & 1 == 1
    }
}

/// Why a service could not answer; its place in
/// [`FALLBACK_CAUSES`] (the metric's `cause` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No endpoint in rotation (health checks, ejections).
    NoEndpoint = 0,
    /// No endpoint in rotation, and some only because its circuit is open.
    BreakerOpen = 1,
    /// No in-flight slot freed up in time.
    Busy = 2,
    /// The one attempt could not connect.
    ConnectFailed = 3,
    /// More than one attempt was made (retries), and the last failed too.
    RetriesExhausted = 4,
    /// No response head in time.
    Timeout = 5,
    /// The upstream closed before answering, answered something invalid, or
    /// failed while the request went to it.
    UpstreamFailed = 6,
    /// The upstream answered a status `fallback_on` names.
    UpstreamStatus = 7,
}

impl Cause {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        FALLBACK_CAUSES[self.index()]
    }

    /// The cause for a service that had no endpoint for the request
    /// (`kind`: why): an open circuit when some endpoint that is up has
    /// one.
    #[cold]
    pub(super) fn unavailable(service: &ServiceRt, kind: ErrorKind) -> Cause {
        if kind == ErrorKind::UpstreamBusy {
            return Cause::Busy;
        }
        let open = service
            .endpoints
            .iter()
            .any(|e| e.is_healthy() && !e.breaker.available_now());
        if open {
            Cause::BreakerOpen
        } else {
            Cause::NoEndpoint
        }
    }

    /// The cause of a request's last failed attempt, `tries` made in all;
    /// `None` for failures the client or the gateway caused (answered as
    /// errors, never by a fallback).
    pub(super) fn of_attempt(failed: &AttemptError, tries: u32) -> Option<Cause> {
        let cause = match failed {
            AttemptError::Downstream | AttemptError::Request(_) | AttemptError::Encode => {
                return None
            }
            _ if tries > 1 => Cause::RetriesExhausted,
            AttemptError::Connect(_) => Cause::ConnectFailed,
            AttemptError::Head {
                e: HeadError::Timeout,
                ..
            } => Cause::Timeout,
            AttemptError::NotTaken
            | AttemptError::Write
            | AttemptError::UpstreamBody
            | AttemptError::Head { .. } => Cause::UpstreamFailed,
        };
        Some(cause)
    }
}

/// A client's request handed back unanswered: nothing of a response went
/// to the client (a `100 Continue` or other 1xx aside).
#[derive(Debug)]
pub struct Unanswered<'s> {
    pub cause: Cause,
    /// The error the client gets when nothing else answers.
    pub kind: ErrorKind,
    /// The client's connection must close after the answer (its body may
    /// still be coming).
    pub close: bool,
    /// The whole request (head and body) is still where it was in
    /// `bufs.inb` before forwarding ([`crate::transport::io::RecvBuf::rewind`]
    /// brings it back): nothing more was read from the client. False when
    /// its body streamed, wholly or in part.
    pub at_hand: bool,
    /// The endpoint tried last, if any.
    pub endpoint: Option<&'s EndpointState>,
    /// Body bytes sent upstream.
    pub bytes_in: u64,
    /// The upstream's time to its response head, when one came.
    pub upstream_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_bits_from_500() {
        let all = HandBack {
            failures: true,
            statuses: (1u128 << 100) - 1,
            whole_only: false,
            not_modified: false,
        };
        assert!(all.takes(500) && all.takes(503) && all.takes(599));
        assert!(!all.takes(499) && !all.takes(200) && !all.takes(600));
        let one = HandBack {
            statuses: 1 << 3,
            ..HandBack::NONE
        };
        assert!(one.takes(503) && !one.takes(502) && !one.takes(504));
        assert!(!HandBack::NONE.takes(500));
    }

    #[test]
    fn causes_name_the_failure_and_retries_come_first() {
        let refused = AttemptError::Connect(std::io::ErrorKind::ConnectionRefused.into());
        assert_eq!(Cause::of_attempt(&refused, 1), Some(Cause::ConnectFailed));
        assert_eq!(
            Cause::of_attempt(&refused, 2),
            Some(Cause::RetriesExhausted)
        );
        let timeout = AttemptError::Head {
            e: HeadError::Timeout,
            untaken: false,
        };
        assert_eq!(Cause::of_attempt(&timeout, 1), Some(Cause::Timeout));
        let invalid = AttemptError::Head {
            e: HeadError::Invalid,
            untaken: false,
        };
        assert_eq!(Cause::of_attempt(&invalid, 1), Some(Cause::UpstreamFailed));
        assert_eq!(Cause::of_attempt(&AttemptError::Downstream, 1), None);
        assert_eq!(
            Cause::of_attempt(&AttemptError::Request(ErrorKind::BodyTooLarge), 2),
            None
        );
        assert_eq!(Cause::UpstreamStatus.name(), "upstream_5xx");
        assert_eq!(Cause::NoEndpoint.name(), "no_endpoint");
    }
}
