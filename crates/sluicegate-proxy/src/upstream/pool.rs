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
    /// Takes a usable idle connection for endpoint `id`.
    pub fn take(&mut self, id: usize, now: Instant) -> Option<Stream> {
        let slot = self.slots.get_mut(id)?;
        while let Some(mut idle) = slot.pop() {
            if idle.expires > now {
                return idle.stream.take();
            }
        }
        None
    }

    /// Keeps `stream` for reuse until `expires`, unless `cap` are kept already.
    pub fn put(&mut self, ep: &Arc<EndpointState>, stream: Stream, expires: Instant, cap: usize) {
        if self.slots.len() <= ep.id {
            self.slots.resize_with(ep.id + 1, Vec::new);
        }
        let slot = &mut self.slots[ep.id];
        if slot.len() < cap {
            ep.idle_changed(1);
            slot.push(Idle {
                stream: Some(stream),
                expires,
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
