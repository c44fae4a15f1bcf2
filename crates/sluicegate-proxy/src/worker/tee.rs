//! The copy of a request body that a mirrored request's relay feeds to
//! its mirror's task: a bounded queue on one worker ([`tee`]). The
//! request's side ([`Tee`]) pushes without ever waiting: past the bound,
//! the copy is given up ([`Cut::Behind`]) and nothing more is queued. The
//! mirror's side ([`Feed`]) reads the data in order, then the end, or why
//! the copy was given up. Either side dropped ends the other's: a request
//! whose body did not arrive whole ([`Cut::Incomplete`]), a mirror that
//! stopped reading (pushes are dropped).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use bytes::Bytes;

/// Most body bytes a copy may have queued, not yet sent to its mirror.
pub(crate) const TEE_BYTES: usize = 1024 * 1024;

/// Why a copy's body ended short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// It fell more than [`TEE_BYTES`] behind the request's body.
    Behind,
    /// The request's body did not arrive whole.
    Incomplete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Ended,
    Cut(Cut),
    /// The mirror's side is gone: nothing more is kept.
    Closed,
}

#[derive(Debug)]
struct Shared {
    queue: RefCell<VecDeque<Bytes>>,
    queued: Cell<usize>,
    state: Cell<State>,
    waker: RefCell<Option<Waker>>,
}

impl Shared {
    fn wake(&self) {
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    fn cut(&self, why: Cut) {
        self.state.set(State::Cut(why));
        self.queue.borrow_mut().clear();
        self.queued.set(0);
        self.wake();
    }
}

/// The request's side of a body copy.
#[derive(Debug)]
pub(crate) struct Tee(Rc<Shared>);

/// The mirror's side of a body copy.
#[derive(Debug)]
pub(crate) struct Feed(Rc<Shared>);

/// A new body copy: its two sides.
pub(crate) fn tee() -> (Tee, Feed) {
    let shared = Rc::new(Shared {
        queue: RefCell::new(VecDeque::new()),
        queued: Cell::new(0),
        state: Cell::new(State::Open),
        waker: RefCell::new(None),
    });
    (Tee(shared.clone()), Feed(shared))
}

impl Tee {
    /// Queues a copy of `data` for the mirror; never waits. Past
    /// [`TEE_BYTES`] queued, the copy is given up instead.
    pub(crate) fn push(&self, data: &[u8]) {
        let s = &*self.0;
        if s.state.get() != State::Open || data.is_empty() {
            return;
        }
        if s.queued.get() + data.len() > TEE_BYTES {
            s.cut(Cut::Behind);
            return;
        }
        s.queued.set(s.queued.get() + data.len());
        s.queue.borrow_mut().push_back(Bytes::copy_from_slice(data));
        s.wake();
    }

    /// The request's body arrived whole: the copy's ends after what is
    /// queued.
    pub(crate) fn end(&self) {
        let s = &*self.0;
        if s.state.get() == State::Open {
            s.state.set(State::Ended);
            s.wake();
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        if self.0.state.get() == State::Open {
            self.0.cut(Cut::Incomplete);
        }
    }
}

impl Feed {
    /// The body's next data, `None` at its end, or why it was cut.
    pub(crate) async fn next(&self) -> Result<Option<Bytes>, Cut> {
        poll_fn(|cx| {
            let s = &*self.0;
            if let State::Cut(why) = s.state.get() {
                return Poll::Ready(Err(why));
            }
            if let Some(b) = s.queue.borrow_mut().pop_front() {
                s.queued.set(s.queued.get() - b.len());
                return Poll::Ready(Ok(Some(b)));
            }
            if s.state.get() == State::Ended {
                return Poll::Ready(Ok(None));
            }
            *s.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Why the copy was cut, if it was.
    pub(crate) fn cut(&self) -> Option<Cut> {
        match self.0.state.get() {
            State::Cut(why) => Some(why),
            _ => None,
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        let s = &*self.0;
        if !matches!(s.state.get(), State::Cut(_)) {
            s.state.set(State::Closed);
        }
        s.queue.borrow_mut().clear();
        s.queued.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(Waker::noop());
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("not ready"),
        }
    }

    #[test]
    fn data_comes_in_order_then_the_end() {
        let (tee, feed) = tee();
        tee.push(b"ab");
        tee.push(b"");
        tee.push(b"cd");
        tee.end();
        tee.push(b"late");
        assert_eq!(now(feed.next()), Ok(Some(Bytes::from_static(b"ab"))));
        assert_eq!(now(feed.next()), Ok(Some(Bytes::from_static(b"cd"))));
        assert_eq!(now(feed.next()), Ok(None));
    }

    #[test]
    fn past_the_bound_the_copy_is_cut_and_the_queue_freed() {
        let (tee, feed) = tee();
        let chunk = vec![7u8; 64 * 1024];
        for _ in 0..TEE_BYTES / chunk.len() {
            tee.push(&chunk);
        }
        assert_eq!(feed.cut(), None);
        tee.push(b"x");
        assert_eq!(feed.cut(), Some(Cut::Behind));
        assert_eq!(tee.0.queued.get(), 0);
        assert_eq!(now(feed.next()), Err(Cut::Behind));
    }

    #[test]
    fn a_request_side_dropped_unended_cuts_the_copy() {
        let (request, feed) = tee();
        request.push(b"ab");
        drop(request);
        assert_eq!(now(feed.next()), Err(Cut::Incomplete));
        let (request, feed) = tee();
        drop(feed);
        request.push(b"ab");
        assert!(request.0.queue.borrow().is_empty());
    }
}
