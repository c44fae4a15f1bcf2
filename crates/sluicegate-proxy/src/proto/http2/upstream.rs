//! One HTTP/2 stream to an upstream as the byte stream forwarding writes
//! an HTTP/1.1 request to and reads an HTTP/1.1 response from: the request
//! head written to it goes out as HEADERS (its `Host` as `:authority`,
//! without the connection's own fields), its body (by length or chunked)
//! as DATA; the response comes back as an HTTP/1.1 head, its body framed
//! by its length or chunked, and its trailers (gRPC's status) as the
//! chunked body's trailer fields. So forwarding, retries and the response
//! path serve HTTP/2 upstreams with no second path.
//!
//! Readiness based like a socket (see [`super::exchange`]); the stream
//! is opened on the connection's [`SendRequest`] when the request head is
//! whole, and counted in the connection's open streams until dropped.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{Reason, RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};

use super::exchange::{body_bytes, connection_specific, Framing};
use super::{has_room, poll_room, Staged, WANT};
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::codec::MAX_HEADERS;
use crate::proto::response::reason;

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
    /// `https` or `http`, for `:scheme`.
    scheme: &'static str,
    /// `:authority` when the request has no `Host`.
    authority: Box<str>,
    req: Req,
    res: Res,
    /// The stream was refused before the upstream processed it (REFUSED_STREAM,
    /// or beyond a GOAWAY's last stream): safe to send again.
    refused: bool,
    /// Response bytes framed as HTTP/1.1, not read yet.
    staged: Staged,
}

enum Req {
    Head(Vec<u8>),
    Body {
        send: SendStream<Bytes>,
        framing: Framing,
    },
    Done,
    Failed,
}

enum Res {
    /// No request sent yet.
    Unsent,
    Waiting(ResponseFuture),
    Body {
        recv: RecvStream,
        chunked: bool,
    },
    Trailers(RecvStream),
    Done,
    Failed,
}

impl UpExchange {
    /// A stream to open on `conn` (counted in `state` from now on).
    pub(crate) fn new(
        conn: SendRequest<Bytes>,
        state: ConnState,
        https: bool,
        authority: &str,
    ) -> UpExchange {
        state.open.set(state.open.get() + 1);
        UpExchange {
            inner: RefCell::new(Inner {
                conn,
                state,
                scheme: if https { "https" } else { "http" },
                authority: authority.into(),
                req: Req::Head(Vec::new()),
                res: Res::Unsent,
                refused: false,
                staged: Staged::default(),
            }),
        }
    }

    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        if let Req::Body { send, .. } = &mut i.req {
            if !has_room(send) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        i.write(bytes)?;
        Ok(bytes.len())
    }

    #[inline(never)]
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let Req::Body { send, .. } = &mut i.req else {
            return Poll::Ready(Ok(()));
        };
        match poll_room(send, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(())) => {
                i.req = Req::Failed;
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
        }
    }

    #[inline(never)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        if i.staged.pending() {
            return Ok(i.staged.read_into(buf));
        }
        match i.res {
            Res::Done => Ok(0),
            Res::Failed => Err(io::ErrorKind::ConnectionReset.into()),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Ready when a read would not block: the response head, body bytes,
    /// the end (with the trailers) or a failure.
    #[inline(never)]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        loop {
            if i.staged.pending() || matches!(i.res, Res::Done | Res::Failed) {
                return Poll::Ready(Ok(()));
            }
            match &mut i.res {
                // Nothing was asked: nothing will come.
                Res::Unsent => return Poll::Pending,
                Res::Waiting(fut) => match Pin::new(fut).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        tracing::debug!(error = %e, "HTTP/2 upstream stream failed");
                        if e.is_go_away() || e.reason() == Some(Reason::REFUSED_STREAM) {
                            i.state.usable.set(false);
                            i.refused = true;
                        }
                        i.res = Res::Failed;
                    }
                    Poll::Ready(Ok(resp)) => {
                        let (parts, recv) = resp.into_parts();
                        let chunked = render_head(&parts, recv.is_end_stream(), i.staged.buf());
                        i.res = if recv.is_end_stream() {
                            Res::Done
                        } else {
                            Res::Body { recv, chunked }
                        };
                    }
                },
                Res::Body { recv, chunked } => match recv.poll_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(data))) => {
                        let _ = recv.flow_control().release_capacity(data.len());
                        if data.is_empty() {
                            continue;
                        }
                        i.staged.data(&data, *chunked);
                    }
                    Poll::Ready(None) => {
                        if *chunked {
                            let Res::Body { recv, .. } = std::mem::replace(&mut i.res, Res::Done)
                            else {
                                unreachable!()
                            };
                            i.res = Res::Trailers(recv);
                        } else {
                            i.res = Res::Done;
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tracing::debug!(error = %e, "HTTP/2 upstream body failed");
                        i.res = Res::Failed;
                    }
                },
                Res::Trailers(recv) => match recv.poll_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(trailers)) => {
                        let out = i.staged.buf();
                        out.extend_from_slice(b"0\r\n");
                        for (name, value) in trailers.iter().flat_map(|t| t.iter()) {
                            out.extend_from_slice(name.as_str().as_bytes());
                            out.extend_from_slice(b": ");
                            out.extend_from_slice(value.as_bytes());
                            out.extend_from_slice(b"\r\n");
                        }
                        out.extend_from_slice(b"\r\n");
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

    /// The upstream refused the stream before processing it (see
    /// [`Inner::refused`]): the request can go again.
    pub(crate) fn refused(&self) -> bool {
        self.inner.borrow().refused
    }

    /// The writer is done early (the exchange is given up): the stream is
    /// reset unless it ended.
    pub(crate) fn finish(&self) {
        let mut i = self.inner.borrow_mut();
        if let Req::Body { send, .. } = &mut i.req {
            send.send_reset(Reason::CANCEL);
            i.req = Req::Done;
        }
    }
}

impl Drop for UpExchange {
    fn drop(&mut self) {
        let i = self.inner.get_mut();
        i.state.open.set(i.state.open.get() - 1);
        // A response not read to its end: the stream is cancelled (the h2
        // crate resets a stream whose handles all went).
        if let Req::Body { send, .. } = &mut i.req {
            send.send_reset(Reason::CANCEL);
        }
    }
}

impl Inner {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match &mut self.req {
                Req::Head(buf) => {
                    buf.extend_from_slice(bytes);
                    bytes = &[];
                    self.send_head()?;
                }
                Req::Body { send, framing } => {
                    let (taken, end) = body_bytes(send, framing, bytes)?;
                    bytes = &bytes[taken..];
                    if end {
                        self.req = Req::Done;
                    }
                }
                // Bytes past a complete request are not the request's.
                Req::Done => return Ok(()),
                Req::Failed => return Err(io::ErrorKind::BrokenPipe.into()),
            }
        }
        Ok(())
    }

    /// Opens the stream once the request head is whole in the buffer;
    /// what came after it goes on as body.
    fn send_head(&mut self) -> io::Result<()> {
        let Req::Head(buf) = &mut self.req else {
            return Ok(());
        };
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Request::new(&mut fields);
        let len = match r.parse(buf) {
            Ok(httparse::Status::Partial) => return Ok(()),
            Ok(httparse::Status::Complete(len)) => len,
            Err(_) => {
                self.req = Req::Failed;
                return Err(io::ErrorKind::InvalidData.into());
            }
        };
        let mut authority: Option<&[u8]> = None;
        let mut framing = None;
        let mut grpc = false;
        let mut head = http::Request::builder().method(r.method.unwrap_or("GET"));
        for f in r.headers.iter() {
            let name = f.name.as_bytes();
            if name.eq_ignore_ascii_case(b"host") {
                authority = Some(f.value);
                continue;
            }
            if name.eq_ignore_ascii_case(b"content-length") {
                framing = std::str::from_utf8(f.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .map(Framing::Length);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                framing = Some(Framing::Chunked(ChunkedDecoder::new(), Vec::new()));
            } else if name.eq_ignore_ascii_case(b"content-type") {
                grpc = f.value.starts_with(b"application/grpc");
            }
            if connection_specific(name) || name.eq_ignore_ascii_case(b"expect") {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name),
                HeaderValue::from_bytes(f.value),
            ) {
                head = head.header(n, v);
            }
        }
        if grpc {
            // gRPC servers want `te: trailers` (a hop-by-hop field on
            // HTTP/1.1, so not forwarded as such).
            head = head.header(http::header::TE, "trailers");
        }
        let authority = match authority {
            Some(a) => String::from_utf8_lossy(a).into_owned(),
            None => self.authority.to_string(),
        };
        let uri = http::Uri::builder()
            .scheme(self.scheme)
            .authority(authority)
            .path_and_query(r.path.unwrap_or("/"))
            .build();
        let req = match uri.ok().and_then(|u| head.uri(u).body(()).ok()) {
            Some(req) => req,
            None => {
                self.req = Req::Failed;
                return Err(io::ErrorKind::InvalidData.into());
            }
        };
        let empty = matches!(framing, None | Some(Framing::Length(0)));
        let rest = buf.split_off(len);
        match self.conn.send_request(req, empty) {
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 upstream refused a new stream");
                self.state.usable.set(false);
                self.refused = true;
                self.req = Req::Failed;
                return Err(io::ErrorKind::ConnectionReset.into());
            }
            Ok((fut, mut send)) => {
                self.res = Res::Waiting(fut);
                self.req = if empty {
                    Req::Done
                } else {
                    send.reserve_capacity(WANT);
                    Req::Body {
                        send,
                        framing: framing.unwrap_or(Framing::UntilEnd),
                    }
                };
            }
        }
        if rest.is_empty() {
            Ok(())
        } else {
            self.write(&rest)
        }
    }
}

/// Writes the HTTP/1.1 head of an upstream's HTTP/2 response into `out`;
/// returns whether its body is given chunked (it has no length).
fn render_head(parts: &http::response::Parts, end: bool, out: &mut Vec<u8>) -> bool {
    let status = parts.status.as_u16();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut length = false;
    for (name, value) in parts.headers.iter() {
        if name == http::header::CONTENT_LENGTH {
            length = true;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    let chunked = !bodiless && !length && !end;
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !bodiless && !length {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"\r\n");
    chunked
}
