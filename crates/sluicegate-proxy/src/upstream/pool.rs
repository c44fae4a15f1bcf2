//! The worker-local keep-alive pool of upstream connections, by endpoint:
//! most recently used first, each kept until its idle timeout.

use std::sync::Arc;
use std::time::Instant;

use crate::transport::stream::Stream;
use crate::upstream::endpoint::EndpointState;

/// An idle upstream connection and when it stops being usable. Counted in
/// its endpoint's idle gauge while it exists.
#[derive(Debug)]
struct Idle {
    stream: Option<Stream>,
    expires: Instant,
    /// Its last response had no body: check the socket itself before reuse
    /// (see [`Stream::quiet_now`]).
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
    /// its last response had no body (`recheck` when it was put).
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
    /// already. `recheck`: its last response had no body.
    pub fn put(
        &mut self,
        ep: &Arc<EndpointState>,
        stream: Stream,
        expires: Instant,
        cap: usize,
        recheck: bool,
    ) {
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
