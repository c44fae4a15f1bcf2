//! Worker-local deadlines and the shutdown signal for waits on sockets.
//!
//! Every read and write on the data path is bounded by a deadline, and most
//! of them finish long before it. Registering each wait in tokio's timer
//! wheel costs about a thousand instructions per request; here a wait that
//! has to sleep takes one slab slot (its deadline and waker), and a single
//! sweeper task per worker wakes the waits whose deadline has passed. The
//! sweeper sleeps until the earliest deadline it knows of, so it runs about
//! once per shortest timeout, not once per request; deadlines fire at most
//! [`GRANULARITY`] late, so a burst of expiries costs one scan.
//!
//! The same slots carry the worker's shutdown signal: a wait made with
//! [`Wait::or_shutdown`] ends at once when the worker starts
//! draining, which is how idle keep-alive connections close.
//!
//! A connection waits many times over its life, one wait at a time: its
//! [`OwnSlot`] is registered once and then only re-armed, so those waits
//! cost no slab insert or removal and no waker clone.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

/// How late a deadline may fire; expiries this close together share a scan.
pub const GRANULARITY: Duration = Duration::from_millis(10);

/// When a wait gives up: at a fixed time, or a span after it starts to
/// sleep (so a wait that never sleeps never reads the clock).
#[derive(Debug, Clone, Copy)]
pub enum When {
    At(Instant),
    After(Duration),
}

impl When {
    fn resolve(self) -> Instant {
        match self {
            When::At(t) => t,
            When::After(d) => Instant::now() + d,
        }
    }
}

/// Why a bounded wait ended without its future completing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Timeout,
    Shutdown,
}

struct Entry {
    deadline: Instant,
    waker: Waker,
    fired: Option<Stop>,
    on_shutdown: bool,
    /// False while an [`OwnSlot`]'s entry has no wait in progress.
    active: bool,
}

/// One worker's pending deadlines. Not `Sync`: it lives on its worker's
/// thread, and its sweeper ([`Deadlines::run`]) must run on the same one.
#[derive(Default)]
pub struct Deadlines {
    entries: RefCell<Slab<Entry>>,
    /// When the sweeper looks next; `None` while it has nothing to wait for.
    armed: Cell<Option<Instant>>,
    kicked: Cell<bool>,
    sweeper: RefCell<Option<Waker>>,
    shutting_down: Cell<bool>,
}

impl Deadlines {
    pub fn new() -> Self {
        Self::default()
    }

    #[cfg(test)]
    /// `fut`, or `Err(Stop::Timeout)` once `deadline` has passed.
    pub fn until<F: Future>(&self, deadline: Instant, fut: F) -> Bounded<'_, F> {
        Bounded {
            fut,
            slot: Slot {
                deadlines: self,
                key: None,
                own: None,
            },
            when: When::At(deadline),
            on_shutdown: false,
        }
    }

    /// A deadline to hand to the socket helpers in [`crate::transport::io`].
    pub fn at(&self, deadline: Instant) -> Wait<'_> {
        Wait {
            deadlines: self,
            when: When::At(deadline),
            on_shutdown: false,
            own: None,
        }
    }

    /// A deadline `span` after the wait starts to sleep.
    pub fn after(&self, span: Duration) -> Wait<'_> {
        Wait {
            deadlines: self,
            when: When::After(span),
            on_shutdown: false,
            own: None,
        }
    }

    /// True once [`Deadlines::shutdown`] was called.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// Starts the shutdown: ends every wait made with [`Wait::or_shutdown`].
    pub fn shutdown(&self) {
        self.shutting_down.set(true);
        for (_, e) in self.entries.borrow_mut().iter_mut() {
            if e.active && e.on_shutdown && e.fired.is_none() {
                e.fired = Some(Stop::Shutdown);
                e.waker.wake_by_ref();
            }
        }
    }

    #[cfg(test)]
    /// Waits now pending.
    pub fn pending(&self) -> usize {
        self.entries
            .borrow()
            .iter()
            .filter(|(_, e)| e.active)
            .count()
    }

    #[cfg(test)]
    /// Slots held, pending or not (own slots stay between their waits).
    pub fn slots(&self) -> usize {
        self.entries.borrow().len()
    }

    /// The sweeper: wakes the waits whose deadline passed. Runs until the
    /// worker's runtime stops; spawn it once per worker.
    pub async fn run(&self) {
        let sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(sleep);
        let mut sleeping_until: Option<Instant> = None;
        loop {
            std::future::poll_fn(|cx| {
                {
                    let mut w = self.sweeper.borrow_mut();
                    if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        *w = Some(cx.waker().clone());
                    }
                }
                if self.kicked.replace(false) {
                    return Poll::Ready(());
                }
                match self.armed.get() {
                    Some(at) => {
                        if sleeping_until != Some(at) {
                            sleep.as_mut().reset(at.into());
                            sleeping_until = Some(at);
                        }
                        sleep.as_mut().poll(cx)
                    }
                    None => Poll::Pending,
                }
            })
            .await;
            let now = Instant::now();
            let next = self.fire(now).map(|at| at.max(now + GRANULARITY));
            self.armed.set(next);
        }
    }

    /// Fires every entry due at `now`; returns the earliest deadline left.
    fn fire(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (_, e) in self.entries.borrow_mut().iter_mut() {
            if !e.active || e.fired.is_some() {
                continue;
            }
            if e.deadline <= now {
                e.fired = Some(Stop::Timeout);
                e.waker.wake_by_ref();
            } else if next.is_none_or(|n| e.deadline < n) {
                next = Some(e.deadline);
            }
        }
        next
    }

    fn register(&self, deadline: Instant, waker: &Waker, on_shutdown: bool) -> usize {
        let key = self.entries.borrow_mut().insert(Entry {
            deadline,
            waker: waker.clone(),
            fired: None,
            on_shutdown,
            active: true,
        });
        self.note(deadline);
        key
    }

    /// Starts a wait in `own`: re-arms its entry, or registers it on its
    /// first wait. The key of the entry the wait uses, and whether that is
    /// `own`'s (a second wait while one is in progress gets an entry of its
    /// own instead, so no wait can lose its deadline).
    fn arm(
        &self,
        own: &OwnSlot<'_>,
        deadline: Instant,
        waker: &Waker,
        on_shutdown: bool,
    ) -> (usize, bool) {
        let Some(k) = own.key.get() else {
            let k = self.register(deadline, waker, on_shutdown);
            own.key.set(Some(k));
            return (k, true);
        };
        {
            let mut entries = self.entries.borrow_mut();
            let e = &mut entries[k];
            if e.active {
                drop(entries);
                return (self.register(deadline, waker, on_shutdown), false);
            }
            e.deadline = deadline;
            e.fired = None;
            e.on_shutdown = on_shutdown;
            e.active = true;
            if !e.waker.will_wake(waker) {
                e.waker = waker.clone();
            }
        }
        self.note(deadline);
        (k, true)
    }

    /// Wakes the sweeper when `deadline` is earlier than its next look.
    fn note(&self, deadline: Instant) {
        if self.armed.get().is_none_or(|at| deadline < at) {
            self.armed.set(Some(deadline));
            self.kicked.set(true);
            if let Some(w) = &*self.sweeper.borrow() {
                w.wake_by_ref();
            }
        }
    }
}

/// A deadline slot one owner (a connection) keeps for its life and uses
/// for one wait at a time ([`Wait::in_slot`]). Dropping it frees the slot.
pub struct OwnSlot<'d> {
    deadlines: &'d Deadlines,
    key: Cell<Option<usize>>,
}

impl<'d> OwnSlot<'d> {
    /// Takes no slot until its first wait.
    pub fn new(deadlines: &'d Deadlines) -> Self {
        OwnSlot {
            deadlines,
            key: Cell::new(None),
        }
    }
}

impl Drop for OwnSlot<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.deadlines.entries.borrow_mut().remove(k);
        }
    }
}

/// A deadline on a worker's [`Deadlines`], maybe also ending at shutdown.
#[derive(Clone, Copy)]
pub struct Wait<'d> {
    deadlines: &'d Deadlines,
    when: When,
    on_shutdown: bool,
    own: Option<&'d OwnSlot<'d>>,
}

impl<'d> Wait<'d> {
    /// The same deadline, also ending the wait when the worker shuts down.
    pub fn or_shutdown(mut self) -> Self {
        self.on_shutdown = true;
        self
    }

    /// The same deadline, waited for in `slot` (of the same worker's
    /// deadlines) instead of a slot of its own.
    pub fn in_slot(mut self, slot: &'d OwnSlot<'d>) -> Self {
        debug_assert!(std::ptr::eq(slot.deadlines, self.deadlines));
        self.own = Some(slot);
        self
    }

    /// The same wait with an `After` span turned into a fixed time from
    /// now, so repeated waits share one deadline.
    pub fn fix(mut self) -> Self {
        self.when = When::At(self.when.resolve());
        self
    }

    /// Bounds `fut` by this wait.
    pub fn bound<F: Future>(self, fut: F) -> Bounded<'d, F> {
        Bounded {
            fut,
            slot: Slot {
                deadlines: self.deadlines,
                key: None,
                own: self.own,
            },
            when: self.when,
            on_shutdown: self.on_shutdown,
        }
    }
}

/// A wait's registration in [`Deadlines`], ended when the wait ends or is
/// dropped: removed, or disarmed when it is an [`OwnSlot`]'s entry.
struct Slot<'d> {
    deadlines: &'d Deadlines,
    key: Option<usize>,
    /// The owner's slot to wait in; `None` once the wait took an entry of
    /// its own.
    own: Option<&'d OwnSlot<'d>>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            let mut entries = self.deadlines.entries.borrow_mut();
            if self.own.is_some() {
                let e = &mut entries[k];
                e.active = false;
                e.fired = None;
            } else {
                entries.remove(k);
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A future bounded by a deadline (and maybe by shutdown); see
    /// [`Deadlines::until`].
    pub struct Bounded<'d, F> {
        #[pin]
        fut: F,
        slot: Slot<'d>,
        when: When,
        on_shutdown: bool,
    }
}

impl<F: Future> Future for Bounded<'_, F> {
    type Output = Result<F::Output, Stop>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let d = this.slot.deadlines;
        match this.slot.key {
            Some(k) => {
                let mut entries = d.entries.borrow_mut();
                let e = &mut entries[k];
                if let Some(stop) = e.fired {
                    return Poll::Ready(Err(stop));
                }
                if !e.waker.will_wake(cx.waker()) {
                    e.waker = cx.waker().clone();
                }
            }
            None => {
                if *this.on_shutdown && d.shutting_down.get() {
                    return Poll::Ready(Err(Stop::Shutdown));
                }
                let deadline = this.when.resolve();
                let key = match this.slot.own {
                    Some(own) => {
                        let (k, in_own) = d.arm(own, deadline, cx.waker(), *this.on_shutdown);
                        if !in_own {
                            this.slot.own = None;
                        }
                        k
                    }
                    None => d.register(deadline, cx.waker(), *this.on_shutdown),
                };
                this.slot.key = Some(key);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
