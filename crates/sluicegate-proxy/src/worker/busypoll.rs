//! Busy polling (`busy_poll`): for a while after its last request, a worker
//! keeps polling its sockets instead of sleeping in `epoll_wait`.
//!
//! A request that finds its worker's core idle waits for that core to wake
//! up, and on a virtual machine that wake-up is most of the latency a proxy
//! adds to a lone request (`docs/benchmarks.md`, "c1: where the added
//! latency goes"). With `busy_poll: D`, each worker runs one task that,
//! until D has passed since the last request began or ended, yields at once
//! every time it is polled: the runtime then polls the sockets without
//! blocking and comes straight back. After D without a request it parks
//! until the next one. The price is a core at 100% while traffic comes
//! less than D apart, so it is off by default. When it is off, requests
//! only bump a counter; the task looks at the setting again once a second,
//! so a reload can turn it on.

use std::cell::Cell;
use std::future::poll_fn;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// How often a worker with `busy_poll` off looks whether a reload set it.
const RECHECK: Duration = Duration::from_secs(1);

/// One worker's busy poller: its activity count and, while it is parked,
/// its waker.
#[derive(Default)]
pub struct BusyPoll {
    activity: Cell<u64>,
    parked: Cell<Option<Waker>>,
}

impl BusyPoll {
    /// Marks activity (a request beginning or ending); wakes the poller if
    /// it parked since the last request.
    #[inline]
    pub fn touch(&self) {
        self.activity.set(self.activity.get().wrapping_add(1));
        if let Some(w) = self.parked.take() {
            w.wake();
        }
    }

    /// The poller; spawn it once per worker. `window` reads the setting in
    /// force (zero: off); the task ends once `stop` says so.
    pub async fn run(&self, window: impl Fn() -> Duration, stop: impl Fn() -> bool) {
        while !stop() {
            let d = window();
            if d.is_zero() {
                tokio::time::sleep(RECHECK).await;
                continue;
            }
            self.spin(d, &stop).await;
            if stop() {
                return;
            }
            self.park().await;
        }
    }

    /// Yields until `d` has passed without activity.
    async fn spin(&self, d: Duration, stop: &impl Fn() -> bool) {
        let mut seen = self.activity.get();
        let mut last = Instant::now();
        loop {
            tokio::task::yield_now().await;
            // A yielding task keeps the runtime from parking, so the
            // before-park hook never runs: the ring's turn (its sends, its
            // one enter) is made here instead (a no-op on epoll).
            crate::transport::uring::turn();
            if stop() {
                return;
            }
            let now = self.activity.get();
            if now != seen {
                seen = now;
                last = Instant::now();
            } else if last.elapsed() >= d {
                return;
            }
        }
    }

    /// Waits for the next activity.
    async fn park(&self) {
        let seen = self.activity.get();
        poll_fn(|cx| {
            if self.activity.get() != seen {
                return Poll::Ready(());
            }
            self.parked.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
    }

    #[cfg(test)]
    /// Whether the poller is parked (for tests).
    pub fn is_parked(&self) -> bool {
        let w = self.parked.take();
        let parked = w.is_some();
        self.parked.set(w);
        parked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn local_rt() -> (tokio::runtime::Runtime, tokio::task::LocalSet) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        (rt, tokio::task::LocalSet::new())
    }

    #[test]
    fn spins_for_the_window_then_parks_until_touched() {
        // A window long enough that a loaded machine's scheduling delays
        // (tens of milliseconds) cannot pass for it.
        const WINDOW: Duration = Duration::from_millis(400);
        let (rt, local) = local_rt();
        local.block_on(&rt, async {
            let bp = Rc::new(BusyPoll::default());
            let stop = Rc::new(Cell::new(false));
            let task = tokio::task::spawn_local({
                let (bp, stop) = (bp.clone(), stop.clone());
                async move { bp.run(|| WINDOW, move || stop.get()).await }
            });
            // While it spins, other tasks still run and timers still fire
            // (well before the window would have ended a blocked spin).
            let t0 = Instant::now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(!bp.is_parked());
            assert!(t0.elapsed() < WINDOW, "{:?}", t0.elapsed());
            // A touch restarts the window: still spinning past the first
            // window's end.
            tokio::time::sleep_until((t0 + WINDOW * 3 / 4).into()).await;
            bp.touch();
            let touched = Instant::now();
            tokio::time::sleep_until((t0 + WINDOW * 5 / 4).into()).await;
            assert!(!bp.is_parked(), "parked within the window after a touch");
            // Parked once a whole window passed without a touch.
            let deadline = touched + WINDOW * 8;
            while !bp.is_parked() {
                assert!(
                    Instant::now() < deadline,
                    "still spinning long after the window"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(touched.elapsed() >= WINDOW, "{:?}", touched.elapsed());
            // The next touch wakes it; then it stops when told.
            bp.touch();
            tokio::task::yield_now().await;
            assert!(!bp.is_parked());
            stop.set(true);
            tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .expect("the poller ends when stopped")
                .unwrap();
        });
    }

    #[test]
    fn off_never_parks_so_touch_wakes_nothing() {
        let (rt, local) = local_rt();
        local.block_on(&rt, async {
            let bp = Rc::new(BusyPoll::default());
            tokio::task::spawn_local({
                let bp = bp.clone();
                async move { bp.run(|| Duration::ZERO, || false).await }
            });
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                bp.touch();
                assert!(!bp.is_parked());
            }
        });
    }
}
