//! Where a failure to forward came from and what it leaves a retry: one
//! attempt's failures ([`AttemptError`], which the attempt loop in
//! [`super::forward`] decides on), and the errors of a request the gateway
//! made itself ([`Error`], the internal client's, [`super::client`]). Each
//! says its side (downstream, upstream, internal), the answer's kind it
//! maps to (status and gRPC status, by [`ErrorKind`]), and whether sending
//! the request again is safe.

use crate::proto::response::ErrorKind;
use crate::upstream::body::BodyError;
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

impl From<BodyError> for AttemptError {
    /// A request body that could not be sent: the client's side failed,
    /// or the upstream's, or the body itself was bad or too large.
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Client => AttemptError::Downstream,
            BodyError::Upstream => AttemptError::UpstreamBody,
            BodyError::BadChunk => AttemptError::Request(ErrorKind::BadRequest),
            BodyError::TooLarge => AttemptError::Request(ErrorKind::BodyTooLarge),
        }
    }
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

/// Why a request the gateway made itself (the internal client) got no
/// complete response. (Read by the internal client's users: only its
/// tests so far.)
#[derive(Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Error {
    /// The request built in code cannot be sent as it is (its head did not
    /// lay out: an invalid authority, a bad length).
    Request,
    /// No endpoint could take it: none in rotation
    /// ([`ErrorKind::NoHealthyEndpoint`]), or none freed an in-flight slot
    /// in time ([`ErrorKind::UpstreamBusy`]). Nothing was sent.
    Unavailable(ErrorKind),
    /// Its last attempt failed, and no retry was allowed or left.
    Attempt(AttemptError),
    /// The response body failed after its head: the upstream closed,
    /// stalled or sent a malformed body.
    Body,
    /// The response body is longer than its reader takes.
    TooLarge,
    /// The call's own deadline passed (`client::Options`): before its
    /// response head came, or before its body ended.
    Deadline(Part),
}

/// Which part of a response a call's deadline ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Part {
    Head,
    Body,
}

#[cfg_attr(not(test), allow(dead_code))]
impl Error {
    pub(crate) fn side(&self) -> Side {
        match self {
            Error::Request => Side::Internal,
            Error::Attempt(e) => e.side(),
            Error::Unavailable(_) | Error::Body | Error::TooLarge | Error::Deadline(_) => {
                Side::Upstream
            }
        }
    }

    /// The answer's kind, for code that answers a client with it.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            Error::Unavailable(kind) => *kind,
            Error::Attempt(e) => e.kind(),
            Error::Deadline(_) => ErrorKind::UpstreamTimeout,
            Error::Request | Error::Body | Error::TooLarge => ErrorKind::UpstreamFailed,
        }
    }

    /// Whether no upstream processed the request, so that sending it again
    /// is safe whatever its method (its body is whole at hand).
    pub(crate) fn retry_safe(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Attempt(e) => e.unprocessed(true),
            // The upstream may have processed it by then.
            Error::Request | Error::Body | Error::TooLarge | Error::Deadline(_) => false,
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

    #[test]
    fn the_internal_clients_errors_say_the_same() {
        let refused = Error::Attempt(AttemptError::Connect(
            std::io::ErrorKind::ConnectionRefused.into(),
        ));
        assert_eq!(
            (refused.side(), refused.kind()),
            (Side::Upstream, ErrorKind::UpstreamFailed)
        );
        assert!(refused.retry_safe());
        let timeout = Error::Attempt(AttemptError::Head {
            e: HeadError::Timeout,
            untaken: false,
        });
        assert_eq!(timeout.kind().status(), 504);
        assert!(!timeout.retry_safe());
        // Closed before answering on a connection that served before: its
        // body is at hand, so it may go again.
        let closed = Error::Attempt(AttemptError::Head {
            e: HeadError::ClosedEarly,
            untaken: true,
        });
        assert!(closed.retry_safe());
        let none = Error::Unavailable(ErrorKind::NoHealthyEndpoint);
        assert!(none.retry_safe());
        assert_eq!(none.kind().status(), 503);
        assert_eq!(Error::Request.side(), Side::Internal);
        assert!(!Error::Body.retry_safe());
    }
}
