//! The deadline table: firing order, slots freed and re-armed, a sleeping
//! sweeper woken early, and shutdown ending only the waits that asked.

use super::*;
use std::rc::Rc;

fn local<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// A deadline table with its sweeper running (inside [`local`]).
fn with_sweeper() -> Rc<Deadlines> {
    let d = Rc::new(Deadlines::new());
    tokio::task::spawn_local({
        let d = d.clone();
        async move { d.run().await }
    });
    d
}

fn never() -> std::future::Pending<()> {
    std::future::pending()
}

#[test]
fn ready_future_needs_no_slot() {
    local(async {
        let d = Deadlines::new();
        let r = d.until(Instant::now(), async { 7 }).await;
        assert_eq!(r, Ok(7));
        assert_eq!(d.pending(), 0);
    });
}

#[test]
fn deadlines_fire_in_order_and_free_their_slots() {
    local(async {
        let d = with_sweeper();
        let start = Instant::now();
        let long = d.until(start + Duration::from_millis(300), never());
        let short = d.until(start + Duration::from_millis(50), never());
        let (a, b) = tokio::join!(
            async {
                let r = long.await;
                (r, start.elapsed())
            },
            async {
                let r = short.await;
                (r, start.elapsed())
            }
        );
        assert_eq!(a.0, Err(Stop::Timeout));
        assert_eq!(b.0, Err(Stop::Timeout));
        assert!(b.1 >= Duration::from_millis(50), "{:?}", b.1);
        assert!(
            b.1 < Duration::from_millis(250),
            "short fired late: {:?}",
            b.1
        );
        assert!(a.1 >= Duration::from_millis(300), "{:?}", a.1);
        assert!(
            a.1 < Duration::from_millis(600),
            "long fired late: {:?}",
            a.1
        );
        assert_eq!(d.pending(), 0);
    });
}

#[test]
fn an_earlier_deadline_wakes_a_sleeping_sweeper() {
    local(async {
        let d = with_sweeper();
        // The sweeper first sleeps towards a far deadline...
        let far = tokio::task::spawn_local({
            let d = d.clone();
            async move {
                d.until(Instant::now() + Duration::from_secs(30), never())
                    .await
            }
        });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // ...and a nearer one must still fire in time.
        let start = Instant::now();
        let r = d.until(start + Duration::from_millis(40), never()).await;
        assert_eq!(r, Err(Stop::Timeout));
        assert!(start.elapsed() < Duration::from_millis(500));
        far.abort();
    });
}

#[test]
fn completion_wins_and_drop_unregisters() {
    local(async {
        let d = with_sweeper();
        let r = d
            .until(
                Instant::now() + Duration::from_secs(5),
                tokio::time::sleep(Duration::from_millis(20)),
            )
            .await;
        assert_eq!(r, Ok(()));
        assert_eq!(d.pending(), 0);
        {
            let mut f = Box::pin(d.until(Instant::now() + Duration::from_secs(5), never()));
            let waker = futures_noop_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(f.as_mut().poll(&mut cx).is_pending());
            assert_eq!(d.pending(), 1);
        }
        assert_eq!(d.pending(), 0);
    });
}

#[test]
fn shutdown_ends_only_the_waits_that_asked() {
    local(async {
        let d = with_sweeper();
        let far = Instant::now() + Duration::from_secs(30);
        let idle = tokio::task::spawn_local({
            let d = d.clone();
            async move { d.at(far).or_shutdown().bound(never()).await }
        });
        let busy = tokio::task::spawn_local({
            let d = d.clone();
            async move {
                d.until(
                    Instant::now() + Duration::from_secs(30),
                    tokio::time::sleep(Duration::from_millis(100)),
                )
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        d.shutdown();
        assert_eq!(idle.await.unwrap(), Err(Stop::Shutdown));
        assert_eq!(busy.await.unwrap(), Ok(()));
        // A wait that starts after the shutdown ends at once.
        assert_eq!(
            d.at(far).or_shutdown().bound(never()).await,
            Err(Stop::Shutdown)
        );
    });
}

#[test]
fn an_own_slot_is_registered_once_and_re_armed() {
    local(async {
        let d = with_sweeper();
        let slot = OwnSlot::new(&d);
        assert_eq!(d.slots(), 0, "no slot before the first wait");
        // Waits that end by completion leave the slot, disarmed.
        for _ in 0..3 {
            let r = d
                .after(Duration::from_secs(5))
                .in_slot(&slot)
                .bound(tokio::time::sleep(Duration::from_millis(5)))
                .await;
            assert_eq!(r, Ok(()));
            assert_eq!((d.slots(), d.pending()), (1, 0));
        }
        // A timeout still fires in it, and the next wait starts clean.
        let start = Instant::now();
        let r = d
            .after(Duration::from_millis(30))
            .in_slot(&slot)
            .bound(never())
            .await;
        assert_eq!(r, Err(Stop::Timeout));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let r = d
            .after(Duration::from_secs(5))
            .in_slot(&slot)
            .bound(async { 7 })
            .await;
        assert_eq!(r, Ok(7));
        // A disarmed slot is not woken by the sweeper or by shutdown.
        assert_eq!(d.pending(), 0);
        drop(slot);
        assert_eq!(d.slots(), 0, "dropping the owner frees its slot");
    });
}

#[test]
fn a_second_wait_in_a_busy_own_slot_gets_its_own_entry() {
    local(async {
        let d = with_sweeper();
        let slot = OwnSlot::new(&d);
        let start = Instant::now();
        let long = d
            .after(Duration::from_millis(200))
            .in_slot(&slot)
            .bound(never());
        let short = d
            .after(Duration::from_millis(40))
            .in_slot(&slot)
            .bound(never());
        let both = async {
            tokio::join!(async { (long.await, start.elapsed()) }, async {
                (short.await, start.elapsed())
            })
        };
        let (a, b) = tokio::time::timeout(Duration::from_secs(5), both)
            .await
            .expect("a wait lost its deadline");
        // Each kept its own deadline: neither overwrote the other's.
        assert_eq!((a.0, b.0), (Err(Stop::Timeout), Err(Stop::Timeout)));
        assert!(b.1 >= Duration::from_millis(40) && b.1 < Duration::from_millis(190));
        assert!(a.1 >= Duration::from_millis(200), "{:?}", a.1);
        assert_eq!((d.slots(), d.pending()), (1, 0));
    });
}

#[test]
fn shutdown_ends_a_wait_in_an_own_slot() {
    local(async {
        let d = with_sweeper();
        let idle = tokio::task::spawn_local({
            let d = d.clone();
            async move {
                let slot = OwnSlot::new(&d);
                d.after(Duration::from_secs(30))
                    .or_shutdown()
                    .in_slot(&slot)
                    .bound(never())
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(d.pending(), 1);
        d.shutdown();
        assert_eq!(idle.await.unwrap(), Err(Stop::Shutdown));
        assert_eq!(d.slots(), 0);
    });
}

fn futures_noop_waker() -> Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    Waker::from(std::sync::Arc::new(Noop))
}
