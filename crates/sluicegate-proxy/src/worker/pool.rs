//! The worker-local keep-alive pool of upstream connections, by endpoint:
//! most recently used first, each kept until its idle timeout.
//!
//! What goes back in the pool. Nothing in an HTTP/1.1 response ties it to
//! its request: whatever an upstream sends when no request is outstanding
//! is read as the answer to the next request written on its connection.
//! So a connection goes back only after a response whose end the upstream
//! stated itself (a `Content-Length`, zero included, or the last chunk),
//! with nothing read past that end ([`reusable_after`]). A response the
//! rules end at its head instead (a `204`, a `304`, any answer to `HEAD`)
//! is where an upstream that disagrees sends a body, or a whole response,
//! afterwards, at once or much later: its connection is closed, so nothing
//! sent on it then can reach another request. At reuse, a connection that
//! got bytes or a close while idle is dropped (see `take_pooled` in
//! `upstream/attempt.rs`). Left open: what an
//! upstream sends unasked after a response it framed itself, so late that the next
//! request is already on its way; no HTTP/1.1 client can tell that from
//! the answer (see `docs/reliability.md`).

use std::sync::Arc;
use std::time::Instant;

use crate::balance::endpoint::EndpointState;
use crate::proto::codec::BodyKind;
use crate::transport::stream::Stream;

/// An idle upstream connection and when it stops being usable. Counted in
/// its endpoint's idle gauge while it exists.
#[derive(Debug)]
struct Idle {
    stream: Option<Stream>,
    expires: Instant,
    /// Its last response had a body of zero length: check the socket
    /// itself before reuse (see [`Stream::quiet_now`]).
    recheck: bool,
    ep: Arc<EndpointState>,
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.ep.idle_changed(-1);
    }
}

/// One worker's keep-alive connections, by endpoint id. Most recently used
/// first, so a quiet period lets the others expire.
#[derive(Debug, Default)]
pub struct Pool {
    slots: Vec<Vec<Idle>>,
}

impl Pool {
    /// Takes an unexpired idle connection for endpoint `id`, and whether
    /// its last response had a body of zero length (`recheck`).
    pub fn take(&mut self, id: usize, now: Instant) -> Option<(Stream, bool)> {
        let slot = self.slots.get_mut(id)?;
        while let Some(mut idle) = slot.pop() {
            if idle.expires > now {
                return idle.stream.take().map(|s| (s, idle.recheck));
            }
        }
        None
    }

    /// Keeps `stream` for reuse until `expires`, unless `cap` are kept
    /// already or its last response, framed as `body` with `relayed` bytes
    /// of body, leaves it in doubt ([`reusable_after`]); a stream not kept
    /// closes.
    pub fn put(
        &mut self,
        ep: &Arc<EndpointState>,
        stream: Stream,
        expires: Instant,
        cap: usize,
        body: BodyKind,
        relayed: u64,
    ) {
        if !reusable_after(body) {
            return;
        }
        // A body of zero length: the socket itself is asked at reuse.
        let recheck = relayed == 0;
        if self.slots.len() <= ep.id {
            self.slots.resize_with(ep.id + 1, Vec::new);
        }
        let slot = &mut self.slots[ep.id];
        if slot.len() < cap {
            ep.idle_changed(1);
            slot.push(Idle {
                stream: Some(stream),
                expires,
                recheck,
                ep: ep.clone(),
            });
        }
    }

    /// Drops expired connections.
    pub fn sweep(&mut self, now: Instant) {
        for slot in &mut self.slots {
            slot.retain(|i| i.expires > now);
        }
    }

    /// Drops everything (shutdown).
    pub fn clear(&mut self) {
        self.slots.clear();
    }
}

/// Whether a connection can carry another request after a response framed
/// as `body`: not when the rules ended the response at its head whatever
/// the upstream meant to send (`204`, `304`, an answer to `HEAD`), since
/// what it sends next, at any time, would answer the next request.
pub(crate) fn reusable_after(body: BodyKind) -> bool {
    body != BodyKind::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_responses_the_upstream_framed_itself_leave_a_connection_reusable() {
        assert!(!reusable_after(BodyKind::None));
        for body in [BodyKind::Length(0), BodyKind::Length(5), BodyKind::Chunked] {
            assert!(reusable_after(body), "{body:?}");
        }
    }
}
