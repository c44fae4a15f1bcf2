//! Fuzz-only: the gateway's HTTP/2 server side run over bytes in memory,
//! for the `h2_session` fuzz target and the seed-replay test. Not an API.
//!
//! The bytes are a client's connection: they go to the `h2` crate's server
//! (built with the settings `session::h2` gives it) through the flood
//! watcher the gateway's connections read through
//! ([`crate::transport::h2io`]); each stream accepted has its head laid
//! out as the protocol-neutral head ([`crate::proto::http2::request::fill_head`],
//! whose ranges and framing are checked), and is answered through an
//! [`Exchange`] (the stream the gateway's request code reads and answers
//! on) as the gateway answers: a status, fields and a body, rendered by
//! the gateway's own renderer ([`crate::proto::response::render`]) or
//! given as forwarding gives an upstream's (informational heads, a body
//! to its end, trailers); no HTTP/1.1 text. Everything is polled by hand, with a waker that only
//! notes it was woken, for a bounded number of rounds: no runtime, no
//! timers, no sockets, the same run for the same input.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use h2::Reason;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::proto::codec::BodyKind;
use crate::proto::fields::{Fields, NONE};
use crate::proto::head::RequestHead;
use crate::proto::http2::exchange::{AnswerBody, Exchange};
use crate::proto::http2::request::{fill_head, BodyAt};
use crate::proto::http2::response::append_field;
use crate::proto::request_id::RequestId;
use crate::proto::response::{render, Answer, ErrorKind, Head, What};
use crate::transport::h2io::Frames;

/// The connection preface a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Rounds of polling (the connection, then every stream) at most.
pub const MAX_ROUNDS: usize = 4096;
/// What the gateway may write before the client is taken as gone.
const MAX_OUTPUT: usize = 4 << 20;
/// Request body bytes a stream reads before it answers, at most.
const MAX_BODY: usize = 1 << 20;
/// The largest request head (`limits.max_header_bytes`' default).
const MAX_HEAD: usize = 16_384;

/// Header fields, as names and values.
type Pairs = &'static [(&'static str, &'static str)];

/// How a stream is answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// A fixed answer, rendered: its status, fields and body; after an
    /// informational head when there is one.
    Fixed(Option<u16>, u16, Pairs, &'static str),
    /// An error, rendered (`true`: as a gRPC status), answered before the
    /// request's body is read.
    Error(ErrorKind, bool),
    /// A `200` with these fields whose body runs to its end: the body,
    /// then these trailers, or the stream's end when there are none.
    ToEnd(Pairs, &'static str, Pairs),
}

/// The answers, chosen by stream: a length (and a field that names the
/// connection, never sent), a body to its end with trailers, an
/// informational head then a bodyless answer, a body to its end (the
/// writer's end ends it), an error and a gRPC status.
const REPLIES: [Reply; 6] = [
    Reply::Fixed(None, 200, &[("connection", "keep-alive")], "hello"),
    Reply::ToEnd(&[("x-a", "1")], "hello", &[("x-t", "2")]),
    Reply::Fixed(Some(100), 204, &[("x-b", "2")], ""),
    Reply::ToEnd(&[("upgrade", "x")], "to the end", &[]),
    Reply::Error(ErrorKind::NoRoute, false),
    Reply::Error(ErrorKind::TooManyRequests, true),
];

/// What a run did, for [`H2Session::check`].
#[derive(Debug, Default)]
pub struct H2Session {
    /// What the gateway wrote to the client.
    pub output: Vec<u8>,
    /// More than `MAX_OUTPUT` was written (the rest was refused).
    pub truncated: bool,
    /// The streams accepted, by id, in order.
    pub accepted: Vec<u32>,
    /// The flood watcher stopped the connection, and the gateway's
    /// answer to that (GOAWAY `ENHANCE_YOUR_CALM`) was given.
    pub flood: bool,
    /// The connection ended (closed, failed or was ended) within the
    /// rounds.
    pub ended: bool,
    /// Rounds polled; `MAX_ROUNDS` means the run never went idle.
    pub rounds: usize,
    /// What was found wrong while it ran (a stream's head as text that
    /// the codec read otherwise than written).
    pub violations: Vec<String>,
}

/// Notes that it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The client's side as the framing layer sees it: the input given in
/// reads of `chunk` bytes, through the flood watcher, then silence until
/// the connection's end (`eof`); what is written is kept.
struct ClientIo {
    input: Vec<u8>,
    at: usize,
    chunk: usize,
    /// The client has ended the connection (once it was answered).
    eof: Rc<Cell<bool>>,
    frames: Frames,
    flood: Rc<Cell<bool>>,
    out: Rc<RefCell<(Vec<u8>, bool)>>,
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // As `H2Io` does: once flooding, nothing more is read.
        if this.flood.get() {
            return Poll::Pending;
        }
        if this.at == this.input.len() {
            return if this.eof.get() {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let n = this
            .chunk
            .min(this.input.len() - this.at)
            .min(buf.remaining());
        let piece = &this.input[this.at..this.at + n];
        this.at += n;
        if this.frames.feed(piece) {
            this.flood.set(true);
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        buf.put_slice(piece);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut out = self.out.borrow_mut();
        if out.0.len() + bytes.len() > MAX_OUTPUT {
            out.1 = true;
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        out.0.extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Runs the server side over `data`: its first byte chooses how the rest
/// is read (bit 0: once the gateway has nothing more to do, the client
/// ends the connection, else it stays silent; the other bits: bytes per
/// read, 0 for 16 KiB), the rest is the connection, the preface put
/// before it unless it starts with `P`.
pub fn h2_session(data: &[u8]) -> H2Session {
    let mut report = H2Session::default();
    let Some((&ctl, rest)) = data.split_first() else {
        return report;
    };
    let mut input = Vec::with_capacity(PREFACE.len() + rest.len());
    if rest.first() != Some(&b'P') {
        input.extend_from_slice(PREFACE);
    }
    input.extend_from_slice(rest);
    let chunk = match usize::from(ctl >> 1) {
        0 => 16 * 1024,
        n => n,
    };
    let flood = Rc::new(Cell::new(false));
    let eof = Rc::new(Cell::new(false));
    let out = Rc::new(RefCell::new((Vec::new(), false)));
    let io = ClientIo {
        input,
        at: 0,
        chunk,
        eof: eof.clone(),
        frames: Frames::new(),
        flood: flood.clone(),
        out: out.clone(),
    };
    let ends = (ctl & 1 == 1).then_some(&*eof);
    run(io, &flood, ends, &mut report);
    let (output, truncated) = out.take();
    report.output = output;
    report.truncated = truncated;
    report
}

/// Polls the handshake, then the connection and its streams, until
/// nothing more happens (then the client ends the connection if `ends`,
/// and polling goes on) or for `MAX_ROUNDS`.
fn run(io: ClientIo, flood: &Cell<bool>, ends: Option<&Cell<bool>>, report: &mut H2Session) {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    // The settings `session::h2::serve` gives the framing layer, with the
    // config's defaults.
    let settings = sluicegate_config::Http2Settings::default();
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(settings.max_concurrent_streams)
        .initial_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_header_list_size(MAX_HEAD as u32)
        .max_send_buffer_size(256 * 1024)
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(Some(256));
    let mut handshake = std::pin::pin!(b.handshake::<_, Bytes>(io));
    let mut conn = loop {
        if report.rounds == MAX_ROUNDS {
            return;
        }
        report.rounds += 1;
        flag.0.store(false, Ordering::Relaxed);
        match handshake.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(c)) => break c,
            Poll::Ready(Err(_)) => {
                report.ended = true;
                return;
            }
            // A handshake that is not woken waits for bytes that never
            // come, until the client ends the connection.
            Poll::Pending if !flag.0.load(Ordering::Relaxed) && !flood.get() => match ends {
                Some(eof) if !eof.get() => eof.set(true),
                _ => return,
            },
            Poll::Pending => {}
        }
    };
    let mut tasks: Vec<Task> = Vec::new();
    let mut open = true;
    while open && report.rounds < MAX_ROUNDS {
        report.rounds += 1;
        flag.0.store(false, Ordering::Relaxed);
        let mut progress = false;
        if flood.get() {
            // As `session::h2::calm_down`: GOAWAY, and the connection
            // closes.
            conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            report.flood = true;
            break;
        }
        loop {
            match conn.poll_accept(&mut cx) {
                Poll::Ready(Some(Ok((req, respond)))) => {
                    progress = true;
                    let id = u32::from(respond.stream_id());
                    report.accepted.push(id);
                    tasks.push(Box::pin(stream(req, respond, id, &mut report.violations)));
                }
                Poll::Ready(Some(Err(_)) | None) => {
                    report.ended = true;
                    open = false;
                    break;
                }
                Poll::Pending => break,
            }
        }
        tasks.retain_mut(|t| {
            let done = t.as_mut().poll(&mut cx).is_ready();
            progress |= done;
            !done
        });
        if !progress && !flag.0.load(Ordering::Relaxed) && !flood.get() {
            match ends {
                Some(eof) if !eof.get() => eof.set(true),
                _ => break,
            }
        }
    }
    // The streams left are given up (their exchanges reset them), and the
    // connection gets out what it has to say.
    drop(tasks);
    for _ in 0..64 {
        flag.0.store(false, Ordering::Relaxed);
        if report.flood {
            if conn.poll_closed(&mut cx).is_ready() {
                report.ended = true;
                break;
            }
        } else {
            match conn.poll_accept(&mut cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(Some(Err(_)) | None) => {
                    report.ended = true;
                    break;
                }
                Poll::Pending => {}
            }
        }
        if !flag.0.load(Ordering::Relaxed) {
            break;
        }
    }
}

/// One stream as `session::h2::stream` serves it, its laid-out head
/// checked, answered with one of [`REPLIES`], chosen by stream.
fn stream(
    req: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    id: u32,
    violations: &mut Vec<String>,
) -> impl Future<Output = ()> {
    let (parts, recv) = req.into_parts();
    let end = recv.is_end_stream();
    let mut laid = Vec::new();
    let body = if end { BodyAt::None } else { BodyAt::Streams };
    let mut head = RequestHead::default();
    if let Ok(framing) = fill_head(&parts, body, None, &mut laid, &mut head) {
        if framing.len != laid.len() {
            violations.push(format!(
                "stream {id}: head of {} bytes said to be {}",
                laid.len(),
                framing.len
            ));
        }
        let fields = head.headers.iter().flat_map(|h| [&h.name, &h.value]);
        let parts_in = [&head.method, &head.target].into_iter().chain(fields);
        if parts_in.chain(head.xff.iter()).any(|r| r.end > laid.len()) {
            violations.push(format!("stream {id}: a head range past its buffer"));
        }
        if head.headers.iter().any(|h| h.name.is_empty()) {
            violations.push(format!("stream {id}: a field without a name"));
        }
        if end && framing.body != BodyKind::None {
            violations.push(format!("stream {id}: a body on a stream that ended"));
        }
        if head.upgrade.is_some() {
            violations.push(format!("stream {id}: an HTTP/2 stream asks to upgrade"));
        }
    }
    let is_head = parts.method == http::Method::HEAD;
    let exchange = Exchange::new(recv, respond, is_head, Vec::new());
    let reply = REPLIES[(id as usize / 2) % REPLIES.len()];
    let read_first = !matches!(reply, Reply::Error(..));
    async move {
        if read_first && read_body(&exchange).await.is_err() {
            return;
        }
        if answer(&exchange, reply, id, is_head).await.is_err() {
            return;
        }
        if !read_first {
            let _ = read_body(&exchange).await;
        }
        exchange.finish();
    }
}

/// Answers `x` as `reply` says, its body in two writes cut where the
/// stream's id says.
async fn answer(x: &Exchange, reply: Reply, id: u32, is_head: bool) -> io::Result<()> {
    let map = |pairs: Pairs| {
        let mut map = http::HeaderMap::new();
        for (n, v) in pairs {
            append_field(&mut map, n.as_bytes(), v.as_bytes());
        }
        map
    };
    let mut fields = Fields::new();
    let what = match reply {
        Reply::ToEnd(own, body, trailers) => {
            x.answer(200, map(own), AnswerBody::UntilEnd)?;
            write_cut(x, body.as_bytes(), id).await?;
            return match trailers {
                [] => Ok(()),
                t => x.send_trailers(map(t)),
            };
        }
        Reply::Fixed(early, status, own, body) => {
            if let Some(status) = early {
                // Refused on a stream reset already: the answer fails too.
                let _ = x.informational(status, http::HeaderMap::new());
            }
            own.iter()
                .for_each(|(n, v)| fields.push(n.as_bytes(), v.as_bytes()));
            What::Fixed {
                head: Head::Fields(status, &fields),
                edits: &NONE,
                ops: &NONE,
                body: body.as_bytes(),
            }
        }
        Reply::Error(kind, grpc) => What::Error {
            kind,
            grpc,
            extra: &[],
        },
    };
    let answer = Answer {
        what,
        rid: &RequestId::default(),
        close: false,
        head_only: is_head,
        http10: false,
    };
    let mut out = Vec::new();
    render(&answer, Some(x), &mut out)?;
    write_cut(x, &out, id).await
}

/// Writes `bytes` in two writes, cut where the stream's id says.
async fn write_cut(x: &Exchange, bytes: &[u8], id: u32) -> io::Result<()> {
    let cut = (id as usize * 7) % (bytes.len() + 1);
    write_all(x, &bytes[..cut]).await?;
    write_all(x, &bytes[cut..]).await
}

async fn read_body(x: &Exchange) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    while total < MAX_BODY {
        match x.try_recv(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => total += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::future::poll_fn(|cx| x.poll_read_ready(cx)).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn write_all(x: &Exchange, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match x.try_send(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::future::poll_fn(|cx| x.poll_write_ready(cx)).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl H2Session {
    /// Checks what the gateway wrote: whole frames, its SETTINGS first;
    /// connection frames on stream 0 and stream frames on streams the
    /// client opened; HEADERS and DATA only on streams it accepted, DATA
    /// only after HEADERS and never HTTP/1.1 text, nothing after a
    /// stream's end or reset; no
    /// server push; GOAWAY `ENHANCE_YOUR_CALM` for a flood. And what was
    /// found while it ran.
    pub fn check(&self) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(v.clone());
        }
        let out = &self.output;
        let mut at = 0;
        let mut headers: Vec<u32> = Vec::new();
        let mut ended: Vec<u32> = Vec::new();
        let mut calm = false;
        while at < out.len() {
            if out.len() - at < 9 {
                return Err(format!("a partial frame header at {at}"));
            }
            let h = &out[at..at + 9];
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let (kind, flags) = (h[3], h[4]);
            let raw_id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
            let id = raw_id & 0x7fff_ffff;
            if raw_id != id {
                return Err(format!("the reserved bit set at {at}"));
            }
            if out.len() - at - 9 < len {
                if self.truncated {
                    break;
                }
                return Err(format!("a partial frame at {at}"));
            }
            let payload = &out[at + 9..at + 9 + len];
            if at == 0 && (kind != 4 || flags & 1 != 0 || id != 0) {
                return Err("the first frame is not the server's SETTINGS".into());
            }
            match kind {
                // SETTINGS, PING, GOAWAY: the connection's.
                4 | 6 | 7 if id != 0 => return Err(format!("frame {kind} on stream {id}")),
                4 if flags & 1 == 1 && len != 0 => {
                    return Err("a SETTINGS ack with a payload".into())
                }
                4 if len % 6 != 0 => return Err(format!("SETTINGS of {len} bytes")),
                6 if len != 8 => return Err(format!("PING of {len} bytes")),
                7 if len < 8 => return Err(format!("GOAWAY of {len} bytes")),
                7 => calm |= payload[4..8] == [0, 0, 0, 0xb],
                8 if len != 4 => return Err(format!("WINDOW_UPDATE of {len} bytes")),
                // RST_STREAM: any stream but the connection's. (The
                // framing layer resets a stream whose header block it
                // cannot take whatever its id, an even or idle one too.)
                3 if len != 4 || id == 0 => {
                    return Err(format!("RST_STREAM on stream {id}, {len} bytes"))
                }
                3 => ended.push(id),
                // HEADERS, DATA: a stream accepted, not ended.
                0 | 1 => {
                    if !self.accepted.contains(&id) {
                        return Err(format!("frame {kind} on stream {id}, never accepted"));
                    }
                    if ended.contains(&id) {
                        return Err(format!("frame {kind} on stream {id} after its end"));
                    }
                    if kind == 0 && !headers.contains(&id) {
                        return Err(format!("DATA on stream {id} before its HEADERS"));
                    }
                    if kind == 0 && payload.windows(7).any(|w| w == b"HTTP/1.") {
                        return Err(format!("HTTP/1.1 text in DATA on stream {id}"));
                    }
                    if kind == 1 && flags & 4 == 0 {
                        return Err(format!("HEADERS on stream {id} needs CONTINUATION"));
                    }
                    headers.push(id);
                    if flags & 1 == 1 {
                        ended.push(id);
                    }
                }
                4 | 6 | 8 => {}
                _ => return Err(format!("frame type {kind} at {at}")),
            }
            at += 9 + len;
        }
        if self.flood && !calm && !self.truncated {
            return Err("a flood without GOAWAY ENHANCE_YOUR_CALM".into());
        }
        Ok(())
    }
}
