//! Where a failure to forward came from and what it leaves a retry: one
//! attempt's failures ([`AttemptError`], which the attempt loop in
//! [`super::forward`] decides on). Each says its side (downstream,
//! upstream, internal), the answer's kind it maps to (status and gRPC
//! status, by [`ErrorKind`]), and whether sending the request again is
//! safe.

use crate::proto::response::ErrorKind;
use crate::upstream::head::HeadError;

/// Where an attempt failed, and what that leaves a retry: the one place
/// that maps a failure to the answer's kind (status and gRPC status, by
/// [`ErrorKind`]) and says whether the request may go again.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// No connection (or stream) could be had: nothing was sent, so any
    /// request may go to another endpoint.
    Connect(std::io::Error),
    /// The upstream took none of it: a pooled connection closed before
    /// it took the head, or an HTTP/2 stream refused unprocessed. The
    /// same request may go again, on a fresh connection or stream.
    NotTaken,
    /// The head (and the body at hand) could not be written.
    Write,
    /// The head could not be encoded for the upstream's protocol.
    Encode,
    /// The client failed while its body was read (gone, stalled), or did
    /// not take the `100 Continue`.
    Downstream,
    /// The client's body was malformed or over the limit.
    Request(ErrorKind),
    /// The upstream failed while the body went to it.
    UpstreamBody,
    /// No response head: why (closed, timed out, invalid); `untaken`:
    /// closed before answering on a connection that served before (or a
    /// stream refused), so it did not process the request.
    Head { e: HeadError, untaken: bool },
}

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client.
    Downstream,
    /// The upstream.
    Upstream,
    /// The gateway itself (a head it could not encode).
    Internal,
}

impl AttemptError {
    pub(crate) fn side(&self) -> Side {
        match self {
            AttemptError::Downstream | AttemptError::Request(_) => Side::Downstream,
            AttemptError::Encode => Side::Internal,
            _ => Side::Upstream,
        }
    }

    /// The answer's kind.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            AttemptError::Request(kind) => *kind,
            AttemptError::Downstream => ErrorKind::BadRequest,
            AttemptError::Head {
                e: HeadError::Timeout,
                ..
            } => ErrorKind::UpstreamTimeout,
            _ => ErrorKind::UpstreamFailed,
        }
    }

    /// Whether nothing of the request was processed upstream, so that
    /// sending it again is safe whatever its method (`at_hand`: the whole
    /// request is still in the buffers).
    pub(crate) fn unprocessed(&self, at_hand: bool) -> bool {
        match self {
            AttemptError::Connect(_) | AttemptError::NotTaken => true,
            AttemptError::Head {
                e: HeadError::ClosedEarly,
                untaken: true,
            } => at_hand,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_say_where_they_came_from_and_what_a_retry_may_do() {
        let refused = AttemptError::Connect(std::io::ErrorKind::ConnectionRefused.into());
        assert_eq!(refused.side(), Side::Upstream);
        assert_eq!(refused.kind(), ErrorKind::UpstreamFailed);
        assert!(refused.unprocessed(false));
        let timeout = AttemptError::Head {
            e: HeadError::Timeout,
            untaken: false,
        };
        assert_eq!(timeout.kind(), ErrorKind::UpstreamTimeout);
        assert!(!timeout.unprocessed(true));
        // Closed before answering on a connection that served before: not
        // processed, but safe to send again only while the request is at
        // hand.
        let closed = AttemptError::Head {
            e: HeadError::ClosedEarly,
            untaken: true,
        };
        assert!(closed.unprocessed(true) && !closed.unprocessed(false));
        let fresh = AttemptError::Head {
            e: HeadError::ClosedEarly,
            untaken: false,
        };
        assert!(!fresh.unprocessed(true));
        assert_eq!(AttemptError::Downstream.side(), Side::Downstream);
        let big = AttemptError::Request(ErrorKind::BodyTooLarge);
        assert_eq!((big.side(), big.kind().status()), (Side::Downstream, 413));
        assert_eq!(AttemptError::Encode.side(), Side::Internal);
        assert!(AttemptError::NotTaken.unprocessed(false));
        assert!(!AttemptError::Write.unprocessed(true));
        assert_eq!(AttemptError::UpstreamBody.kind().grpc_status(), 14);
    }
}
