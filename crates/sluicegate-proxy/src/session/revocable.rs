//! Requests and tunnels of authenticated apps made revocable: what their
//! [`Grant`] holds, taken from the request before it is forwarded
//! ([`Admitted`]: plain data, no allocation), and the forward raced against
//! the grant's revocation once the request has been under way for
//! [`REGISTER_AFTER`] (so a request that ends sooner registers nothing). A
//! revoked request's forward is dropped (its upstream side closes); then
//! an HTTP/2 stream is reset with `CANCEL` ([`cancel`]), an HTTP/1.1
//! connection closed. Tunnels register from their own task
//! ([`super::tunneled`]).
//!
//! What a request that ends sooner pays: the copy of its method and path
//! (the forward holds the request's buffers from then on, so they cannot
//! be read when the wait ends), and one wait in the connection's own
//! deadline slot (`Link::revoke_slot`), timed from the request's start:
//! re-armed per request, with no clock read, slot insert or waker clone
//! (an HTTP/2 stream's slot is its stream's, so it takes one entry). The
//! forward is polled where the caller pinned it, never moved.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use super::peer::Link;
use crate::filters::grant::{Credential, Revoked};
use crate::route::target::Target;
use crate::snapshot::{RouteRt, Snapshot};
use crate::transport::tls::identity::ClientIdentity;
use crate::worker::revoke::Grant;
use crate::worker::Bufs;

/// How long a request runs before it registers: then it is a stream
/// (a gRPC call, a server-sent event stream, a long upload). A change is
/// seen by a registering request at once, so a stream is closed within
/// this plus a worker tick of the change.
pub(super) const REGISTER_AFTER: Duration = Duration::from_millis(300);

/// Method and path kept inline up to this length (longer ones are copied
/// to the heap: rare).
const INLINE: usize = 120;

/// What a grant needs of an admitted request, copied before the forward
/// takes the request's buffers.
pub(super) struct Admitted<'s> {
    app: &'s str,
    cred: Credential,
    route: &'s RouteRt,
    generation: u64,
    method_len: usize,
    /// Method then path, inline...
    inline: [u8; INLINE],
    len: usize,
    /// ...or on the heap when longer.
    long: Option<Box<[u8]>>,
    /// The request asks to upgrade to WebSocket.
    pub(super) websocket: bool,
}

impl<'s> Admitted<'s> {
    /// The facts of the authenticated request in `bufs`; `None` when no
    /// app was authenticated.
    pub(super) fn of(
        snap: &'s Snapshot,
        bufs: &Bufs,
        route: &'s RouteRt,
        target: &Target,
    ) -> Option<Admitted<'s>> {
        let app = bufs.edits.app?;
        let raw = bufs.inb.filled();
        let method = &raw[bufs.req.method.clone()];
        let path = bufs
            .edits
            .path
            .as_deref()
            .unwrap_or(&raw[target.path.clone()]);
        let len = method.len() + path.len();
        let mut a = Admitted {
            app: snap.apps.app_id(app),
            cred: bufs.edits.cred,
            route,
            generation: snap.generation,
            method_len: method.len(),
            inline: [0; INLINE],
            len,
            long: None,
            websocket: is_websocket(&bufs.req, raw),
        };
        if len <= INLINE {
            a.inline[..method.len()].copy_from_slice(method);
            a.inline[method.len()..len].copy_from_slice(path);
        } else {
            a.long = Some([method, path].concat().into());
        }
        Some(a)
    }

    pub(super) fn grant(&self, identity: Option<&ClientIdentity>) -> Grant {
        let both = self.long.as_deref().unwrap_or(&self.inline[..self.len]);
        let (method, path) = both.split_at(self.method_len);
        Grant::new(
            self.app,
            self.cred,
            identity,
            self.route.name.clone(),
            method,
            path,
            self.generation,
        )
    }
}

/// Runs `fwd` (the request's forward, the request begun at `started`);
/// once the request has run [`REGISTER_AFTER`], registers its grant and
/// races it against its revocation. `Err`: revoked; the caller drops
/// `fwd` (its upstream side closes), then calls [`cancel`].
pub(super) async fn forward<F: Future>(
    link: Link<'_>,
    admitted: &Admitted<'_>,
    started: Instant,
    mut fwd: Pin<&mut F>,
) -> Result<F::Output, Revoked> {
    let worker = link.worker;
    let early = worker
        .deadlines
        .at(started + REGISTER_AFTER)
        .in_slot(link.revoke_slot);
    if let Ok(done) = early.bound(fwd.as_mut()).await {
        return Ok(done);
    }
    {
        let identity = link.peer.identity.as_deref();
        let reg = worker
            .revocations
            .register(&worker.shared, admitted.grant(identity));
        tokio::select! {
            biased;
            done = fwd.as_mut() => Ok(done),
            () = reg.grant.wait() => Err(reg.grant.revoked().unwrap_or(Revoked::AuthChanged)),
        }
    }
}

/// After a revoked request's forward was dropped: resets the client's
/// HTTP/2 stream (an HTTP/1.1 connection is closed by its answer).
pub(super) fn cancel(link: Link<'_>) {
    if let Some(x) = link.client.h2() {
        x.cancel();
    }
}

/// Whether the request upgraded to WebSocket (its tunnel can be closed
/// with a close frame).
fn is_websocket(req: &crate::proto::head::RequestHead, raw: &[u8]) -> bool {
    req.upgrade.as_ref().is_some_and(|u| {
        raw[u.clone()]
            .windows(9)
            .any(|w| w.eq_ignore_ascii_case(b"websocket"))
    })
}
