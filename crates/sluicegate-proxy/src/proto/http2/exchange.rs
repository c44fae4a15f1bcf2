//! One HTTP/2 stream of a client's connection, as the request's lifecycle
//! reads and answers it: the request body comes out as the DATA it
//! arrived in (no HTTP/1.1 framing: the head given to the lifecycle says
//! `BodyKind::Stream` or a length), and the answer goes out as HTTP/2:
//! its head given as fields ([`Exchange::answer`]) or, for the gateway's
//! own answers rendered as HTTP/1.1, parsed from that rendering; its body
//! as DATA frames, its trailers ([`Exchange::send_trailers`]) as a
//! trailing HEADERS, its end as END_STREAM.
//!
//! Readiness based like a socket ([`crate::transport::stream::Stream`]):
//! a read with nothing received is `WouldBlock` until
//! [`Exchange::poll_read_ready`]; a write the peer's flow-control window
//! has no room for is `WouldBlock` until [`Exchange::poll_write_ready`].
//! One write past the window is taken (so a head and what came with it
//! go at once), never more: a client that holds its window at zero holds
//! one buffer of the gateway's, until the write timeout ends the stream.

use std::cell::RefCell;
use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue};

use super::{has_room, poll_room, Staged, WANT};
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::codec::MAX_HEADERS;

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
    /// A HEAD request: its answer has no body whatever its head says.
    is_head: bool,
    /// An extended CONNECT (RFC 8441): the upstream's `101` is the
    /// stream's `200`, and the tunnel's bytes its DATA both ways.
    connect: bool,
    out: Out,
}

/// Where the answer is.
enum Out {
    /// Its head is still being written: the bytes so far.
    Head {
        respond: SendResponse<Bytes>,
        buf: Vec<u8>,
    },
    /// Its body is being written, framed as the head said.
    Body {
        send: SendStream<Bytes>,
        framing: Framing,
    },
    /// Sent whole (END_STREAM went out).
    Done,
    /// Cut: the stream was reset (by either side) or the answer was not
    /// HTTP.
    Failed,
}

pub(super) enum Framing {
    /// Body bytes still due.
    Length(u64),
    /// The decoder, and the trailer fields seen so far (sent as a
    /// trailing HEADERS frame at the end).
    Chunked(ChunkedDecoder, Vec<u8>),
    /// Until the writer is done ([`Exchange::finish`]).
    UntilEnd,
}

/// How an answer's body comes when its head is given as fields
/// ([`Exchange::answer`]): the bytes written after it are the body as
/// HTTP/1.1 would frame it.
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
                is_head,
                connect: false,
                out: Out::Head {
                    respond,
                    buf: Vec::new(),
                },
            }),
        }
    }

    /// Marks the stream an extended CONNECT (see [`Inner::connect`]).
    pub(crate) fn set_connect(&self) {
        self.inner.borrow_mut().connect = true;
    }

    /// Sends the answer's head given as fields rather than as HTTP/1.1
    /// text, so that what forwarding parsed already is not written and
    /// parsed again; its body follows through [`Exchange::try_send`],
    /// framed as `body` says. Only before any of the answer was written.
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn answer(
        &self,
        status: u16,
        fields: http::HeaderMap,
        body: AnswerBody,
    ) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let Out::Head { respond, buf } = &mut i.out else {
            return Err(broken());
        };
        let code = match http::StatusCode::from_u16(status) {
            Ok(code) if buf.is_empty() && status >= 200 => code,
            _ => {
                respond.send_reset(Reason::INTERNAL_ERROR);
                i.out = Out::Failed;
                return Err(io::ErrorKind::InvalidData.into());
            }
        };
        let mut head = http::Response::new(());
        *head.status_mut() = code;
        *head.headers_mut() = fields;
        let framing = match body {
            AnswerBody::Empty => Framing::Length(0),
            AnswerBody::Length(n) => Framing::Length(n),
            AnswerBody::UntilEnd => Framing::UntilEnd,
        };
        i.start(head, framing)
    }

    /// Reads request body bytes received so far; `Ok(0)` at its end.
    // Out of line: the plain-TCP branch of `Stream`'s match stays small.
    #[inline(never)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.inner.borrow_mut();
        let i = &mut *i;
        if i.staged.pending() {
            return Ok(i.staged.read_into(buf));
        }
        if i.in_failed {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if i.in_done {
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
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
            match i.recv.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) => {
                    let _ = i.recv.flow_control().release_capacity(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    i.staged.data(&data);
                }
                Poll::Ready(None) => i.in_done = true,
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
        match poll_room(send, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(())) => {
                i.out = Out::Failed;
                Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
            }
        }
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

/// Takes in the request body bytes `recv` holds now, without waiting, up
/// to about `max`; true when that was all of it (the stream ended).
pub(crate) fn take_ready(recv: &mut RecvStream, out: &mut Vec<u8>, max: usize) -> bool {
    if recv.is_end_stream() {
        return true;
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    while out.len() <= max {
        match recv.poll_data(&mut cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = recv.flow_control().release_capacity(data.len());
                out.extend_from_slice(&data);
            }
            Poll::Ready(None) => return true,
            // An error or nothing yet: the exchange's own reads see it.
            Poll::Ready(Some(Err(_))) | Poll::Pending => return false,
        }
    }
    false
}

/// A waker for a look at what is there: nothing waits on it.
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: std::sync::Arc<Self>) {}
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Inner {
    /// Takes `bytes` of the answer, whatever the window (the caller
    /// checked it).
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match &mut self.out {
                Out::Head { buf, .. } => {
                    buf.extend_from_slice(bytes);
                    bytes = &[];
                    self.answer_head()?;
                }
                Out::Body { send, framing } => {
                    let (taken, end) = body_bytes(send, framing, bytes)?;
                    bytes = &bytes[taken..];
                    if end {
                        self.out = Out::Done;
                    }
                }
                // Bytes past the end of a complete answer: none are due.
                Out::Done => return Ok(()),
                Out::Failed => return Err(broken()),
            }
        }
        Ok(())
    }

    /// Sends the answer's head once it is whole in the head buffer (an
    /// informational one as such, then the final one); what came after it
    /// goes on as body.
    fn answer_head(&mut self) -> io::Result<()> {
        loop {
            let Out::Head { respond, buf } = &mut self.out else {
                return Ok(());
            };
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut r = httparse::Response::new(&mut fields);
            let len = match r.parse(buf) {
                Ok(httparse::Status::Partial) => return Ok(()),
                Ok(httparse::Status::Complete(len)) => len,
                Err(_) => {
                    respond.send_reset(Reason::INTERNAL_ERROR);
                    self.out = Out::Failed;
                    return Err(io::ErrorKind::InvalidData.into());
                }
            };
            let mut status = r.code.unwrap_or(502);
            let switched = self.connect && status == 101;
            if switched {
                // The tunnel is open: over HTTP/2 that is a 200 whose
                // DATA carries it.
                status = 200;
            }
            // The field values are slices of one shared copy of the head:
            // one allocation for all of them, none per value.
            let shared = Bytes::copy_from_slice(&buf[..len]);
            let base = buf.as_ptr() as usize;
            let mut head = http::Response::new(());
            let mut framing = Framing::UntilEnd;
            let Ok(code) = http::StatusCode::from_u16(status) else {
                respond.send_reset(Reason::INTERNAL_ERROR);
                self.out = Out::Failed;
                return Err(io::ErrorKind::InvalidData.into());
            };
            *head.status_mut() = code;
            let fields = head.headers_mut();
            fields.reserve(r.headers.len());
            for f in r.headers.iter() {
                let name = f.name.as_bytes();
                if name.eq_ignore_ascii_case(b"content-length") {
                    framing = std::str::from_utf8(f.value)
                        .ok()
                        .and_then(|v| v.trim().parse().ok())
                        .map_or(Framing::UntilEnd, Framing::Length);
                } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    framing = Framing::Chunked(ChunkedDecoder::new(), Vec::new());
                }
                if connection_specific(name)
                    || (switched && name.eq_ignore_ascii_case(b"sec-websocket-accept"))
                {
                    continue;
                }
                let at = f.value.as_ptr() as usize - base;
                let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name),
                    HeaderValue::from_maybe_shared(shared.slice(at..at + f.value.len())),
                ) else {
                    continue;
                };
                fields.append(n, v);
            }
            if (100..200).contains(&status) {
                // 100 Continue (and 103): relayed as informational; the
                // final head follows in the same buffer or a later write.
                // Not on a stream already reset: the framing layer sends
                // an informational head whatever the stream's state.
                if !reset(respond) {
                    let _ = respond.send_informational(head);
                }
                buf.drain(..len);
                continue;
            }
            if switched {
                framing = Framing::UntilEnd;
            }
            let rest = buf.split_off(len);
            self.start(head, framing)?;
            return if rest.is_empty() {
                Ok(())
            } else {
                self.write(&rest)
            };
        }
    }

    /// Sends a final answer's head, framed as `framing` says: with
    /// END_STREAM when it has no body (HEAD, 204, 304, a zero length).
    fn start(&mut self, head: http::Response<()>, framing: Framing) -> io::Result<()> {
        let Out::Head { respond, .. } = &mut self.out else {
            return Err(broken());
        };
        let status = head.status().as_u16();
        let empty =
            self.is_head || status == 204 || status == 304 || matches!(framing, Framing::Length(0));
        self.out = match respond.send_response(head, empty) {
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/2 response head not sent");
                Out::Failed
            }
            Ok(_) if empty => Out::Done,
            Ok(mut send) => {
                send.reserve_capacity(WANT);
                Out::Body { send, framing }
            }
        };
        if matches!(self.out, Out::Failed) {
            return Err(broken());
        }
        Ok(())
    }
}

/// Whether the stream was reset (by either side) or the connection went
/// away: a look, without waiting. (Found by the `h2_session` fuzz target:
/// a `100 Continue` went out as HEADERS after the stream's RST_STREAM.)
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

/// Sends what of `bytes` belongs to the body as DATA: how many bytes were
/// taken, and whether the body ended with them.
pub(super) fn body_bytes(
    send: &mut SendStream<Bytes>,
    framing: &mut Framing,
    bytes: &[u8],
) -> io::Result<(usize, bool)> {
    let failed = |e: h2::Error| {
        tracing::debug!(error = %e, "HTTP/2 response body not sent");
        broken()
    };
    match framing {
        Framing::Length(due) => {
            let take = (*due).min(bytes.len() as u64) as usize;
            *due -= take as u64;
            let end = *due == 0;
            send.send_data(Bytes::copy_from_slice(&bytes[..take]), end)
                .map_err(failed)?;
            // Bytes past the length are not the body's: dropped.
            Ok((bytes.len(), end))
        }
        Framing::Chunked(dec, trailers) => {
            let mut data = Vec::with_capacity(bytes.len());
            let mut at = 0;
            while at < bytes.len() && !dec.is_done() {
                let step = dec
                    .step(&bytes[at..])
                    .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
                if let Some(r) = step.data {
                    data.extend_from_slice(&bytes[at + r.start..at + r.end]);
                }
                if let Some(r) = step.trailer {
                    trailers.extend_from_slice(&bytes[at + r.start..at + r.end]);
                }
                at += step.consumed;
                if step.consumed == 0 {
                    break;
                }
            }
            let end = dec.is_done();
            if end && !trailers.is_empty() {
                if !data.is_empty() {
                    send.send_data(Bytes::from(data), false).map_err(failed)?;
                }
                send.send_trailers(trailer_map(trailers)).map_err(failed)?;
            } else if !data.is_empty() || end {
                send.send_data(Bytes::from(data), end).map_err(failed)?;
            }
            Ok((bytes.len(), end))
        }
        Framing::UntilEnd => {
            send.send_data(Bytes::copy_from_slice(bytes), false)
                .map_err(failed)?;
            Ok((bytes.len(), false))
        }
    }
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
