//! The count of a connection that follows it from task to task
//! ([`Active`]): its worker's `active` and the process's
//! `open_connections`, right however and wherever the connection ends.

use std::rc::Rc;

use crate::worker::Worker;

/// A connection counted in its worker's `active` and the process's
/// `open_connections` for as long as this lives: it moves with the
/// connection from task to task (parked and back), so the counts are right
/// however and wherever the connection ends. In the park set a connection
/// has no `Active`: the set holds its count ([`Active::into_parked`],
/// [`Active::resumed`], [`Active::end_parked`]).
pub(crate) struct Active(Option<Rc<Worker>>);

impl Active {
    pub(crate) fn new(worker: Rc<Worker>) -> Active {
        worker.active.set(worker.active.get() + 1);
        Active(Some(worker))
    }

    pub(crate) fn worker(&self) -> &Rc<Worker> {
        // Only `into_parked` takes it out, and that consumes the `Active`.
        self.0.as_ref().expect("an Active has its worker")
    }

    /// The connection goes on counted, in the park set: the counts stay.
    pub(super) fn into_parked(mut self) {
        self.0 = None;
    }

    /// A connection back from the park set, still counted.
    pub(super) fn resumed(worker: Rc<Worker>) -> Active {
        Active(Some(worker))
    }

    /// A connection in the park set closes: the counts go down.
    pub(super) fn end_parked(worker: &Worker) {
        worker.active.set(worker.active.get() - 1);
        worker
            .shared
            .global
            .open_connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            Active::end_parked(&w);
        }
    }
}
