//! One HTTP/2 stream to an upstream, as forwarding drives it with the
//! protocol-neutral message: the request head given as fields
//! ([`UpExchange::open`], built by forwarding's HTTP/2 encoder), its body
//! written as DATA and ended explicitly ([`UpExchange::end_body`]); the
//! response head handed back as fields ([`UpExchange::poll_head`]), its
//! body read as the DATA it came in and its trailers kept for whoever
//! relays the end ([`UpExchange::take_trailers`]). No HTTP/1.1 text is
//! written or parsed on this path.
//!
//! Readiness based like a socket (see [`super::exchange`]) for the body
//! bytes both ways; the stream is counted in the connection's open
//! streams until dropped.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{Reason, RecvStream, SendStream};

use super::{has_room, poll_room, send_bytes, Staged};

/// What a connection's streams share with the pool that holds it: how
/// many are open, and whether new ones may go on it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnState {
    pub(crate) open: Rc<Cell<usize>>,
    /// False once the connection ended or refused a new stream (GOAWAY).
    pub(crate) usable: Rc<Cell<bool>>,
}

/// One request's stream to an upstream.
pub(crate) struct UpExchange {
    inner: RefCell<Inner>,
}

impl std::fmt::Debug for UpExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpExchange").finish_non_exhaustive()
    }
}

struct Inner {
    conn: SendRequest<Bytes>,
    state: ConnState,
    req: Req,
    res: Res,
    /// The stream was refused before the upstream processed it (REFUSED_STREAM,
    /// or beyond a GOAWAY's last stream): safe to send again.
    refused: bool,
    /// Response body bytes received, not read yet.
    staged: Staged,
    /// The trailers the response ended with, until taken.
    trailers: Option<http::HeaderMap>,
}

enum Req {
    /// Not opened yet.
    Unopened,
    /// Its body is being sent.
    Body(SendStream<Bytes>),
    Done,
    Failed,
}

enum Res {
    /// No request sent yet.
    Unsent,
    Waiting(ResponseFuture),
    /// The head came and was not taken yet.
    Head(http::Response<RecvStream>),
    Body(RecvStream),
    Trailers(RecvStream),
    Done,
    Failed,
}

/// A response head as the stream gives it: its fields, and whether the
/// stream ended with it (no body).
pub(crate) struct Head {
    pub(crate) parts: http::response::Parts,
    pub(crate) end: bool,
}

impl UpExchange {
    /// A stream to open on `conn` (counted in `state` from now on).
    pub(crate) fn new(conn: SendRequest<Bytes>, state: ConnState) -> UpExchange {
        state.open.set(state.open.get() + 1);
        UpExchange {
            inner: RefCell::new(Inner {
                conn,
                state,
                req: Req::Unopened,
                res: Res::Unsent,
                refused: false,
                staged: Staged::default(),
                trailers: None,
            }),
        }
    }

    /// Opens the stream with the request head `req`; `body`: the whole
    /// body, sent with END_STREAM (`Some(&[])`: none), or `None` when it
    /// follows through writes and [`UpExchange::end_body`].
    pub(crate) fn open(&self, req: http::Request<()>, body: Option<&[u8]>) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        if !matches!(i.req, Req::Unopened) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let empty = body.is_some_and(<[u8]>::is_empty);
        match i.conn.send_request(req, empty) {
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 upstream refused a new stream");
                i.state.usable.set(false);
                i.refused = true;
                i.req = Req::Failed;
                Err(io::ErrorKind::ConnectionReset.into())
            }
            Ok((fut, mut send)) => {
                i.res = Res::Waiting(fut);
                i.req = match body {
                    Some([]) => Req::Done,
                    Some(bytes) => {
                        send.send_data(Bytes::copy_from_slice(bytes), true)
                            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
                        Req::Done
                    }
                    // No capacity asked for before there are bytes to
                    // send (see [`send_bytes`]).
                    None => Req::Body(send),
                };
                Ok(())
            }
        }
    }

    /// Takes request body bytes: all of them, or `WouldBlock` when the
    /// upstream's window has no room (one write past it is taken).
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        match &mut i.req {
            Req::Body(send) => {
                if !has_room(send) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                send_bytes(send, Bytes::copy_from_slice(bytes), false).map_err(|e| {
                    tracing::debug!(error = %e, "HTTP/2 upstream body not sent");
                    io::Error::from(io::ErrorKind::BrokenPipe)
                })?;
                Ok(bytes.len())
            }
            // Bytes past a complete request are not the request's.
            Req::Done => Ok(bytes.len()),
            Req::Unopened | Req::Failed => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Ends the request body (END_STREAM), with `trailers` when given.
    pub(crate) fn end_body(&self, trailers: Option<http::HeaderMap>) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let Req::Body(send) = &mut i.req else {
            return Ok(());
        };
        let sent = match trailers {
            Some(t) => send.send_trailers(t),
            None => send.send_data(Bytes::new(), true),
        };
        i.req = Req::Done;
        sent.map_err(|_| io::ErrorKind::BrokenPipe.into())
    }

    #[inline(never)]
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let Req::Body(send) = &mut i.req else {
            return Poll::Ready(Ok(()));
        };
        let room = poll_room(send, cx);
        if let Poll::Ready(Err(_)) = room {
            i.req = Req::Failed;
        }
        room
    }

    /// Ready when the response head came (or the stream failed), without
    /// taking it: true when it came.
    pub(crate) fn poll_head_ready(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut i = self.inner.borrow_mut();
        match i.poll_response(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(matches!(i.res, Res::Head(_))),
        }
    }

    /// The response head, once it came: `Err` when the stream failed
    /// before it (`refused` says whether it may go again).
    pub(crate) fn poll_head(&self, cx: &mut Context<'_>) -> Poll<io::Result<Head>> {
        let mut i = self.inner.borrow_mut();
        if i.poll_response(cx).is_pending() {
            return Poll::Pending;
        }
        match std::mem::replace(&mut i.res, Res::Failed) {
            Res::Head(resp) => {
                let (parts, recv) = resp.into_parts();
                let end = recv.is_end_stream();
                i.res = if end { Res::Done } else { Res::Body(recv) };
                Poll::Ready(Ok(Head { parts, end }))
            }
            _ => Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
        }
    }

    #[inline(never)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        let (ended, failed) = (matches!(i.res, Res::Done), matches!(i.res, Res::Failed));
        i.staged.recv(buf, ended, failed)
    }

    /// Ready when a read of the response body would not block: bytes, the
    /// end (with the trailers kept) or a failure. Not before the head was
    /// taken.
    #[inline(never)]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        loop {
            if i.staged.pending() || matches!(i.res, Res::Done | Res::Failed) {
                return Poll::Ready(Ok(()));
            }
            match &mut i.res {
                // Nothing was asked, or the head is not taken: no body yet.
                Res::Unsent | Res::Waiting(_) | Res::Head(_) => return Poll::Pending,
                Res::Body(recv) => match recv.poll_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(data))) => {
                        let _ = recv.flow_control().release_capacity(data.len());
                        if !data.is_empty() {
                            i.staged.data(&data);
                        }
                    }
                    Poll::Ready(None) => {
                        let Res::Body(recv) = std::mem::replace(&mut i.res, Res::Done) else {
                            unreachable!()
                        };
                        i.res = Res::Trailers(recv);
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!(error = %e, "HTTP/2 upstream body failed");
                        i.res = Res::Failed;
                    }
                },
                Res::Trailers(recv) => match recv.poll_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(trailers)) => {
                        i.trailers = trailers;
                        i.res = Res::Done;
                    }
                    Poll::Ready(Err(e)) => {
                        tracing::debug!(error = %e, "HTTP/2 upstream trailers failed");
                        i.res = Res::Failed;
                    }
                },
                Res::Done | Res::Failed => unreachable!("returned above"),
            }
        }
    }

    /// The trailers the response ended with (taken).
    pub(crate) fn take_trailers(&self) -> Option<http::HeaderMap> {
        self.inner.borrow_mut().trailers.take()
    }

    /// The upstream refused the stream before processing it (see
    /// [`Inner::refused`]): the request can go again.
    pub(crate) fn refused(&self) -> bool {
        self.inner.borrow().refused
    }

    /// The writer is done early (the exchange is given up): the stream is
    /// reset unless it ended.
    pub(crate) fn finish(&self) {
        let mut i = self.inner.borrow_mut();
        if let Req::Body(send) = &mut i.req {
            send.send_reset(Reason::CANCEL);
            i.req = Req::Done;
        }
    }
}

impl Inner {
    /// Polls for the response head until it came or the stream failed.
    fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Res::Waiting(fut) = &mut self.res else {
            return match self.res {
                // Nothing was asked: nothing will come.
                Res::Unsent => Poll::Pending,
                _ => Poll::Ready(()),
            };
        };
        match Pin::new(fut).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "HTTP/2 upstream stream failed");
                let refused = e.is_go_away() || e.reason() == Some(Reason::REFUSED_STREAM);
                // Anything but a reset of this one stream ended the
                // connection (its socket, a GOAWAY): no new stream goes on
                // it from now, before its driver gets to run and notice.
                // A request sent again at once would otherwise take the
                // same dead connection, and use up its tries there.
                if refused || !e.is_reset() {
                    self.state.usable.set(false);
                }
                self.refused = refused;
                self.res = Res::Failed;
                Poll::Ready(())
            }
            Poll::Ready(Ok(resp)) => {
                self.res = Res::Head(resp);
                Poll::Ready(())
            }
        }
    }
}

impl Drop for UpExchange {
    fn drop(&mut self) {
        let i = self.inner.get_mut();
        i.state.open.set(i.state.open.get() - 1);
        // A response not read to its end: the stream is cancelled (the h2
        // crate resets a stream whose handles all went).
        if let Req::Body(send) = &mut i.req {
            send.send_reset(Reason::CANCEL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GET opened as a stream on a new client connection over `io` (its
    /// driver spawned), with the connection's shared state.
    async fn get_on(io: tokio::io::DuplexStream) -> (UpExchange, ConnState) {
        let (send, conn) = h2::client::handshake(io).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let state = ConnState::default();
        state.usable.set(true);
        let up = UpExchange::new(send, state.clone());
        let req = http::Request::get("http://up.test/").body(()).unwrap();
        up.open(req, Some(&[])).unwrap();
        (up, state)
    }

    /// A stream whose connection the upstream closes before answering: the
    /// stream fails, and the connection is unusable at once (nothing waits
    /// for the driver task to notice).
    #[test]
    fn a_connection_that_dies_under_a_stream_takes_no_new_one() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let server = tokio::spawn(async move {
                let mut conn = h2::server::handshake(b).await.unwrap();
                // Take the request and drop the connection unanswered.
                let _ = conn.accept().await;
            });
            let (up, state) = get_on(a).await;
            let head = std::future::poll_fn(|cx| up.poll_head(cx)).await;
            assert!(head.is_err());
            assert!(!state.usable.get(), "a dead connection stays usable");
            assert!(
                !up.refused(),
                "a stream the upstream may have taken is refused"
            );
            server.await.unwrap();
        });
    }

    /// A stream reset on its own (not REFUSED_STREAM) leaves its connection
    /// usable.
    #[test]
    fn a_stream_reset_alone_leaves_its_connection_usable() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let (done, wait) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(async move {
                let mut conn = h2::server::handshake(b).await.unwrap();
                let (_, mut respond) = conn.accept().await.unwrap().unwrap();
                respond.send_reset(Reason::INTERNAL_ERROR);
                // Keep serving the connection until the client is done.
                tokio::select! {
                    _ = conn.accept() => {}
                    _ = wait => {}
                }
            });
            let (up, state) = get_on(a).await;
            let head = std::future::poll_fn(|cx| up.poll_head(cx)).await;
            assert!(head.is_err());
            assert!(state.usable.get());
            assert!(!up.refused());
            let _ = done.send(());
            server.await.unwrap();
        });
    }
}
