//! One HTTP/2 stream of a client's connection, as the request's lifecycle
//! reads and answers it: the request body comes out as the DATA it
//! arrived in (no HTTP/1.1 framing: the head given to the lifecycle says
//! `BodyKind::Stream` or a length), its trailers kept once it ended
//! ([`Exchange::take_trailers`]), and the answer goes out as HTTP/2,
//! never as HTTP/1.1 text: informational heads and the final one given as
//! fields ([`Exchange::informational`], [`Exchange::answer`]; an extended
//! CONNECT's tunnel opened by [`Exchange::open_tunnel`]), then its body,
//! written as bytes, as DATA frames, its trailers
//! ([`Exchange::send_trailers`]) as a trailing HEADERS, its end as
//! END_STREAM. Bytes written before a head was given are an error: the
//! stream is reset.
//!
//! Readiness based like a socket ([`crate::transport::stream::Stream`]):
//! a read with nothing received is `WouldBlock` until
//! [`Exchange::poll_read_ready`]; a write the peer's flow-control window
//! has no room for is `WouldBlock` until [`Exchange::poll_write_ready`].
//! One write past the window is taken (so a head and what came with it
//! go at once), never more: a client that holds its window at zero holds
//! one buffer of the gateway's, until the write timeout ends the stream.
//!
//! An answer may end before the request's body did (RFC 9113 8.1: a 404,
//! a 405, a refusal, an upstream's early answer). Whoever serves the
//! stream then reads and drops what of the body comes at once, bounded
//! ([`Exchange::body_left`]): a client that sends its body whatever the
//! answer (curl 7.88 fails a transfer whose stream is reset, even with
//! `NO_ERROR`, while its body is still going) ends its stream cleanly.
//! When the exchange goes with the body still coming, the framing layer,
//! its last handle on the stream gone, follows the answer's frames with
//! RST_STREAM `NO_ERROR`, so the client stops sending and keeps the
//! answer, and ignores the DATA still on its way.

use std::cell::RefCell;
use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};

use super::{has_room, poll_room, send_bytes, Staged};

/// One stream: its request body in, its answer out.
pub(crate) struct Exchange {
    inner: RefCell<Inner>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange").finish_non_exhaustive()
    }
}

struct Inner {
    recv: RecvStream,
    /// Body bytes received, not read yet.
    staged: Staged,
    /// The client's body ended (or failed: `in_failed`).
    in_done: bool,
    in_failed: bool,
    /// The client's DATA ended and its trailers (if any) are next.
    in_trailers: bool,
    /// The trailers the client's body ended with, until taken.
    trailers: Option<HeaderMap>,
    /// A HEAD request: its answer has no body whatever its head says.
    is_head: bool,
    /// An extended CONNECT (RFC 8441): the upstream's `101` is the
    /// stream's `200`, and the tunnel's bytes its DATA both ways.
    connect: bool,
    out: Out,
}

/// Where the answer is.
enum Out {
    /// Its head is not given yet.
    Head { respond: SendResponse<Bytes> },
    /// Its body is being written, framed as the head said.
    Body {
        send: SendStream<Bytes>,
        framing: Framing,
    },
    /// Sent whole (END_STREAM went out).
    Done,
    /// Cut: the stream was reset (by either side), or the answer was not
    /// one (bytes before a head, a status not final).
    Failed,
}

enum Framing {
    /// Body bytes still due.
    Length(u64),
    /// Until the writer is done ([`Exchange::finish`]) or its trailers
    /// ([`Exchange::send_trailers`]).
    UntilEnd,
}

/// How an answer's body comes after its head ([`Exchange::answer`]): the
/// bytes written then are the body's, unframed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerBody {
    /// None (HEAD, 204, 304, a zero length).
    Empty,
    /// This many bytes.
    Length(u64),
    /// Until the writer is done.
    UntilEnd,
}

/// The connection's own header fields, which HTTP/2 does not carry
/// (RFC 9113 8.2.2).
pub(crate) fn connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

fn broken() -> io::Error {
    io::ErrorKind::BrokenPipe.into()
}

impl Exchange {
    /// A stream whose request head was given to the lifecycle; its body
    /// is read from `recv` after `early` (what of it was taken in already).
    pub(crate) fn new(
        recv: RecvStream,
        respond: SendResponse<Bytes>,
        is_head: bool,
        early: Vec<u8>,
    ) -> Exchange {
        let in_done = recv.is_end_stream();
        Exchange {
            inner: RefCell::new(Inner {
                recv,
                staged: Staged::from_vec(early),
                in_done,
                in_failed: false,
                in_trailers: false,
                trailers: None,
                is_head,
                connect: false,
                out: Out::Head { respond },
            }),
        }
    }

    /// The trailers the client's body ended with, taken in with its data
    /// before the exchange began (see [`take_ready`]).
    pub(crate) fn set_trailers(&self, trailers: HeaderMap) {
        self.inner.borrow_mut().trailers = Some(trailers);
    }

    /// The trailers the request body ended with, once it ended (taken:
    /// asked once).
    pub(crate) fn take_trailers(&self) -> Option<HeaderMap> {
        self.inner.borrow_mut().trailers.take()
    }

    /// Whether the client sent trailers that no one took: those the
    /// request's body ended with, kept or still in the framing layer
    /// (looked at without waiting, once the request is over). A body not
    /// read to its end says no, and so does an extended CONNECT, whose
    /// DATA is its tunnel's.
    pub(crate) fn trailers_left(&self) -> bool {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        if i.trailers.is_none() && !i.in_done && !i.staged.pending() && !i.connect {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let ended = i.in_trailers
                || match i.recv.poll_data(&mut cx) {
                    Poll::Ready(None) => true,
                    // Data never read: the window it took is given back.
                    Poll::Ready(Some(Ok(d))) => {
                        let _ = i.recv.flow_control().release_capacity(d.len());
                        false
                    }
                    _ => false,
                };
            if ended {
                if let Poll::Ready(Ok(t)) = i.recv.poll_trailers(&mut cx) {
                    i.trailers = t;
                }
            }
        }
        i.trailers.as_ref().is_some_and(|t| !t.is_empty())
    }

    /// Whether the answer went whole (END_STREAM is out or queued) while
    /// the request's body is still coming: what of it comes now is to be
    /// read and dropped before the exchange goes (see the module's
    /// notes). Never for an extended CONNECT, whose DATA is its tunnel's.
    pub(crate) fn body_left(&self) -> bool {
        let i = self.inner.borrow();
        matches!(i.out, Out::Done)
            && !i.connect
            && !i.in_done
            && (i.staged.pending() || !i.recv.is_end_stream())
    }

    /// Marks the stream an extended CONNECT (see [`Inner::connect`]).
    pub(crate) fn set_connect(&self) {
        self.inner.borrow_mut().connect = true;
    }

    /// Sends the answer's head: its status (a final one) and fields; its
    /// body follows through [`Exchange::try_send`], as `body` says. Only
    /// once: an error when the head went already or the stream is gone.
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn answer(
        &self,
        status: u16,
        fields: HeaderMap,
        body: AnswerBody,
    ) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let Out::Head { .. } = i.out else {
            return Err(broken());
        };
        let code = match StatusCode::from_u16(status) {
            Ok(code) if status >= 200 => code,
            _ => return Err(i.fail()),
        };
        let framing = match body {
            AnswerBody::Empty => Framing::Length(0),
            AnswerBody::Length(n) => Framing::Length(n),
            AnswerBody::UntilEnd => Framing::UntilEnd,
        };
        i.start(code, fields, framing)
    }

    /// Sends an informational head (a 1xx other than 101: 103 Early Hints,
    /// say) before the answer's. Not on a stream reset already (the
    /// framing layer would send it whatever the stream's state), nor once
    /// the answer's head went: then nothing is sent, and an error says so.
    #[cold]
    pub(crate) fn informational(&self, status: u16, fields: HeaderMap) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let Out::Head { respond } = &mut i.out else {
            return Err(broken());
        };
        let code = match StatusCode::from_u16(status) {
            Ok(code) if code.is_informational() && status != 101 => code,
            _ => return Err(io::ErrorKind::InvalidData.into()),
        };
        // Found by the `h2_session` fuzz target: a `100 Continue` went out
        // as HEADERS after the stream's RST_STREAM.
        if reset(respond) {
            return Err(broken());
        }
        let mut head = http::Response::new(());
        *head.status_mut() = code;
        *head.headers_mut() = fields;
        respond.send_informational(head).map_err(|e| {
            tracing::debug!(error = %e, "HTTP/2 informational head not sent");
            broken()
        })
    }

    /// Opens an extended CONNECT's tunnel (RFC 8441) once the upstream
    /// switched protocols: its `101` is the stream's `200`, with
    /// `fields`, and the tunnel's bytes are then the stream's DATA both
    /// ways, until the writer is done. An error (the stream reset) on a
    /// stream that is not an extended CONNECT.
    #[cold]
    pub(crate) fn open_tunnel(&self, fields: HeaderMap) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let Out::Head { .. } = i.out else {
            return Err(broken());
        };
        if !i.connect {
            return Err(i.fail());
        }
        i.start(StatusCode::OK, fields, Framing::UntilEnd)
    }

    /// Reads request body bytes received so far; `Ok(0)` at its end.
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        i.staged.recv(buf, i.in_done, i.in_failed)
    }

    /// Ready when a read would not block: body bytes, their end or an
    /// error. Takes the next DATA frame in and gives its room in the
    /// flow-control window back to the client.
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        loop {
            if i.staged.pending() || i.in_done {
                return Poll::Ready(Ok(()));
            }
            if i.in_trailers {
                // The DATA ended: what ends the stream is its trailers
                // (a HEADERS with END_STREAM) or nothing.
                match i.recv.poll_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(t)) => {
                        if t.is_some() {
                            i.trailers = t;
                        }
                        i.in_done = true;
                    }
                    Poll::Ready(Err(e)) => {
                        tracing::debug!(error = %e, "HTTP/2 request trailers failed");
                        i.in_done = true;
                        i.in_failed = true;
                    }
                }
                continue;
            }
            match i.recv.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    let _ = i.recv.flow_control().release_capacity(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    i.staged.data(&data);
                }
                Poll::Ready(None) => i.in_trailers = true,
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(error = %e, "HTTP/2 request body failed");
                    i.in_done = true;
                    i.in_failed = true;
                }
            }
        }
    }

    /// Takes answer bytes: all of them, or `WouldBlock` when the client's
    /// window has no room (see the module's notes).
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        if let Out::Body { send, .. } = &mut i.out {
            if !has_room(send) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        i.write(bytes)?;
        Ok(bytes.len())
    }

    /// Ready when a write would take bytes: the client's window has room
    /// (or there is no body under way).
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.inner.borrow_mut();
        let Out::Body { send, .. } = &mut i.out else {
            return Poll::Ready(Ok(()));
        };
        let room = poll_room(send, cx);
        if let Poll::Ready(Err(_)) = room {
            i.out = Out::Failed;
        }
        room
    }

    /// Ends the answer's body with `trailers` (a trailing HEADERS with
    /// END_STREAM). Only while a body runs to its end (`AnswerBody::UntilEnd`).
    #[inline(never)]
    pub(crate) fn send_trailers(&self, trailers: http::HeaderMap) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        match std::mem::replace(&mut i.out, Out::Done) {
            Out::Body { mut send, .. } => send.send_trailers(trailers).map_err(|e| {
                tracing::debug!(error = %e, "HTTP/2 response trailers not sent");
                broken()
            }),
            other => {
                i.out = other;
                Err(broken())
            }
        }
    }

    /// Resets the stream with `CANCEL` whatever its answer's framing or
    /// what it was doing: an answer cut short that must not look whole, a
    /// stream whose authentication was revoked. A later
    /// [`Exchange::finish`] does nothing.
    pub(crate) fn cancel(&self) {
        let mut i = self.inner.borrow_mut();
        match std::mem::replace(&mut i.out, Out::Done) {
            Out::Body { mut send, .. } => send.send_reset(Reason::CANCEL),
            Out::Head { mut respond, .. } => respond.send_reset(Reason::CANCEL),
            Out::Done => {}
            Out::Failed => i.out = Out::Failed,
        }
    }

    /// The writer is done: an answer whose body runs to its end gets its
    /// END_STREAM; one cut short, or never begun (the request failed: its
    /// body stalled, its client stopped reading), is reset with `CANCEL`.
    pub(crate) fn finish(&self) {
        let mut i = self.inner.borrow_mut();
        match std::mem::replace(&mut i.out, Out::Done) {
            Out::Body {
                mut send,
                framing: Framing::UntilEnd,
            } => {
                let _ = send.send_data(Bytes::new(), true);
            }
            Out::Body { mut send, .. } => send.send_reset(Reason::CANCEL),
            Out::Head { mut respond, .. } => respond.send_reset(Reason::CANCEL),
            Out::Done => {}
            Out::Failed => i.out = Out::Failed,
        }
    }
}

/// What [`take_ready`] found of a request body.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Some of it (or none): the rest is still coming.
    Part,
    /// All of it; then the trailers the stream ended with, if it did with
    /// some.
    Whole(Option<HeaderMap>),
}

/// Takes in the request body bytes `recv` holds now, without waiting, up
/// to about `max`; whether that was all of it (the stream ended), with
/// its trailers.
pub(crate) fn take_ready(recv: &mut RecvStream, out: &mut Vec<u8>, max: usize) -> Taken {
    if recv.is_end_stream() {
        return Taken::Whole(None);
    }
    let mut cx = Context::from_waker(std::task::Waker::noop());
    while out.len() <= max {
        match recv.poll_data(&mut cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = recv.flow_control().release_capacity(data.len());
                out.extend_from_slice(&data);
            }
            Poll::Ready(None) => {
                return match recv.poll_trailers(&mut cx) {
                    Poll::Ready(Ok(t)) => Taken::Whole(t.filter(|t| !t.is_empty())),
                    // Failed: the exchange's own reads see it.
                    Poll::Ready(Err(_)) | Poll::Pending => Taken::Part,
                };
            }
            // An error or nothing yet: the exchange's own reads see it.
            Poll::Ready(Some(Err(_))) | Poll::Pending => return Taken::Part,
        }
    }
    Taken::Part
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Inner {
    /// Takes `bytes` of the answer's body, whatever the window (the caller
    /// checked it).
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        match &mut self.out {
            // No head given: bytes are not an answer.
            Out::Head { .. } => Err(self.fail()),
            Out::Body { send, framing } => {
                if body_bytes(send, framing, bytes)? {
                    self.out = Out::Done;
                }
                Ok(())
            }
            // Bytes past the end of a complete answer: none are due.
            Out::Done => Ok(()),
            Out::Failed => Err(broken()),
        }
    }

    /// Resets a stream whose answer is not one (`INTERNAL_ERROR`): the
    /// error to return.
    fn fail(&mut self) -> io::Error {
        if let Out::Head { respond } = &mut self.out {
            respond.send_reset(Reason::INTERNAL_ERROR);
        }
        self.out = Out::Failed;
        io::ErrorKind::InvalidData.into()
    }

    /// Sends a final answer's head, framed as `framing` says: with
    /// END_STREAM when it has no body (HEAD, 204, 304, a zero length).
    fn start(&mut self, status: StatusCode, fields: HeaderMap, framing: Framing) -> io::Result<()> {
        let Out::Head { respond } = &mut self.out else {
            return Err(broken());
        };
        let empty = self.is_head
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || matches!(framing, Framing::Length(0));
        let mut head = http::Response::new(());
        *head.status_mut() = status;
        *head.headers_mut() = fields;
        self.out = match respond.send_response(head, empty) {
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 response head not sent");
                Out::Failed
            }
            Ok(_) if empty => Out::Done,
            // No capacity asked for before there are bytes to send (see
            // [`send_bytes`]).
            Ok(send) => Out::Body { send, framing },
        };
        if matches!(self.out, Out::Failed) {
            return Err(broken());
        }
        Ok(())
    }
}

/// Whether the stream was reset (by either side) or the connection went
/// away: a look, without waiting.
fn reset(respond: &mut SendResponse<Bytes>) -> bool {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    respond
        .poll_reset(&mut Context::from_waker(&waker))
        .is_ready()
}

/// Sends `bytes` of the body as DATA: whether the body ended with them.
fn body_bytes(
    send: &mut SendStream<Bytes>,
    framing: &mut Framing,
    bytes: &[u8],
) -> io::Result<bool> {
    let (data, end) = match framing {
        Framing::Length(due) => {
            let take = (*due).min(bytes.len() as u64) as usize;
            *due -= take as u64;
            // Bytes past the length are not the body's: dropped.
            (&bytes[..take], *due == 0)
        }
        Framing::UntilEnd => (bytes, false),
    };
    send_bytes(send, Bytes::copy_from_slice(data), end).map_err(|e| {
        tracing::debug!(error = %e, "HTTP/2 response body not sent");
        broken()
    })?;
    Ok(end)
}

/// Trailer field lines (`name: value` CRLF, as the chunked decoder hands
/// them back) as a header map; a line that is not a valid field is left
/// out.
pub(crate) fn trailer_map(lines: &[u8]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(value),
        ) {
            if !connection_specific(n.as_str().as_bytes()) {
                map.append(n, v);
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;

    use super::*;

    /// A GET sent by a client over an in-memory connection, as the
    /// gateway's side takes it (an exchange), and what the client reads
    /// of its answer: its status, or the reason it was reset.
    fn answered(serve: impl FnOnce(&Exchange)) -> Result<u16, Reason> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let client = async {
                let (mut send, conn) = h2::client::handshake(a).await.unwrap();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                let req = http::Request::get("http://gw.test/").body(()).unwrap();
                let (res, _) = send.send_request(req, true).unwrap();
                match res.await {
                    Ok(res) => Ok(res.status().as_u16()),
                    Err(e) => Err(e.reason().unwrap()),
                }
            };
            let server = async {
                let mut conn = h2::server::handshake(b).await.unwrap();
                let (req, respond) = conn.accept().await.unwrap().unwrap();
                let x = Exchange::new(req.into_body(), respond, false, Vec::new());
                serve(&x);
                drop(x);
                // Serve the connection until the client is done with it.
                while conn.accept().await.is_some() {}
            };
            tokio::select! {
                got = client => got,
                () = server => unreachable!("the server ends after the client"),
            }
        })
    }

    #[test]
    fn bytes_before_a_head_reset_the_stream() {
        let text = answered(|x| {
            let e = x.try_send(b"HTTP/1.1 200 OK\r\n\r\n").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidData);
            // Nothing more goes on it.
            assert!(x.answer(200, HeaderMap::new(), AnswerBody::Empty).is_err());
        });
        assert_eq!(text, Err(Reason::INTERNAL_ERROR));
        // A head as fields, then the body as bytes.
        let fields = answered(|x| {
            x.answer(201, HeaderMap::new(), AnswerBody::Length(2))
                .unwrap();
            assert_eq!(x.try_send(b"ok").unwrap(), 2);
        });
        assert_eq!(fields, Ok(201));
    }

    #[test]
    fn only_an_extended_connect_opens_a_tunnel_and_only_a_1xx_is_informational() {
        let got = answered(|x| {
            assert!(x.informational(200, HeaderMap::new()).is_err());
            assert!(x.informational(101, HeaderMap::new()).is_err());
            let e = x.open_tunnel(HeaderMap::new()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidData);
        });
        assert_eq!(got, Err(Reason::INTERNAL_ERROR));
        let got = answered(|x| {
            x.informational(103, HeaderMap::new()).unwrap();
            x.set_connect();
            x.open_tunnel(HeaderMap::new()).unwrap();
            // The head went: no second one.
            assert!(x.informational(103, HeaderMap::new()).is_err());
            assert!(x.answer(200, HeaderMap::new(), AnswerBody::Empty).is_err());
        });
        assert_eq!(got, Ok(200));
    }

    /// A frame: its header (length, type, flags, stream) and payload.
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len().to_be_bytes();
        let mut f = vec![len[5], len[6], len[7], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn no_informational_head_goes_out_on_a_stream_reset() {
        // A GET on stream 5 (which the fuzz driver answers with a `100
        // Continue` and then a 204), reset by the client at once.
        let block = [
            0x82, 0x87, 0x84, 0x41, 0x88, 0x1d, 0x66, 0x5c, 0xbe, 0x47, 0x4d, 0x74, 0x17,
        ];
        let mut input = vec![0u8]; // read at once; the client stays.
        input.extend(frame(4, 0, 0, &[]));
        input.extend(frame(1, 5, 5, &block));
        input.extend(frame(3, 0, 5, &8u32.to_be_bytes()));
        let s = crate::fuzzing::h2_session(&input);
        s.check().unwrap();
        assert_eq!(s.accepted, [5]);
        let (mut at, out) = (0, &s.output);
        while at + 9 <= out.len() {
            let len = usize::from(out[at]) << 16
                | usize::from(out[at + 1]) << 8
                | usize::from(out[at + 2]);
            let stream = u32::from_be_bytes([out[at + 5], out[at + 6], out[at + 7], out[at + 8]]);
            assert!(
                !(out[at + 3] == 1 && stream == 5),
                "HEADERS on the reset stream"
            );
            at += 9 + len;
        }
    }
}
