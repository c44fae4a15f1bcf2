//! Answers the gateway makes itself on a client connection: a `respond`
//! route's, a filter's refusal, an error before or without routing (a
//! refused head among them), the redirect to HTTPS. Described here,
//! rendered by [`crate::proto::response`] (HTTP/1.1 text, or an HTTP/2
//! stream's fields with its body as data) and written here, with the
//! request body dropped (when small) or the connection closed. They take
//! the request's [`Link`] to its connection, never the connection itself.

use std::time::Instant;

use super::peer::Link;
use crate::filters::{Answer as Refusal, Refuse};
use crate::observe::accesslog;
use crate::proto::codec::{BodyKind, HeadError};
use crate::proto::fields::{self, Fields};
use crate::proto::response::{self, Answer, ErrorKind, Head, What};
use crate::route::target::Target;
use crate::snapshot::Snapshot;
use crate::transport::io::write_all_by;
use crate::upstream::body::{client_write_failed, linger};
use crate::upstream::forward::Outcome;
use crate::worker::Bufs;

/// Bodies up to this size are read and discarded when the gateway answers
/// without forwarding; larger ones close the connection instead.
const DISCARD_MAX: u64 = 64 * 1024;
/// At most this much is read and dropped after refusing a request (or,
/// over HTTP/2, a whole connection) before the close (see
/// [`refuse_and_close`]).
pub(super) const LINGER_MAX: u64 = 1024 * 1024;

/// A response the gateway writes itself.
pub(super) enum Local<'a> {
    /// A fixed answer (a `respond` route's, a 204, a redirect): its head
    /// and body.
    Fixed(Head<'a>, &'a [u8]),
    /// An error, with extra header fields.
    Error(ErrorKind, &'a Fields),
}

/// Answers an error before any route was chosen, and logs it; the
/// caller closes. `parsed`: the head in `bufs.req` is this request's
/// (its method and target go in the log line). True when the answer
/// was written.
pub(super) async fn fail_early(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    kind: ErrorKind,
    parsed: bool,
) -> bool {
    // No head to read one from: a new id.
    bufs.ids.sampled = None;
    bufs.ids.rid.set_name(&snap.request_id_header);
    link.worker.make_request_id(&mut bufs.ids.rid);
    let answer = Answer {
        what: What::Error {
            kind,
            grpc: false,
            extra: &[],
        },
        rid: &bufs.ids.rid,
        close: true,
        head_only: false,
        http10: false,
    };
    let rendered = response::render(&answer, link.client.h2(), &mut bufs.out);
    link.worker.shared.global.unrouted.record(kind.status());
    let written = write_answer(link, snap, &bufs.out, rendered).await;
    log_refused(link, snap, bufs, kind.status(), parsed, written);
    written
}

/// The access log line of a request refused before routing (a
/// malformed or too large head, a slow one, a bad target): what is
/// known of it, and the listener. It costs what a routed request's
/// line costs (the target is cut at [`accesslog::REFUSED_TARGET_MAX`]
/// bytes), and the refusal closes the connection, so a flood of bad
/// requests writes no more log than as many good ones.
#[cold]
fn log_refused(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &Bufs,
    status: u16,
    parsed: bool,
    written: bool,
) {
    let Some(sink) = &snap.access_log else { return };
    let raw = bufs.inb.filled();
    let (method, target): (&[u8], &[u8]) = if parsed {
        let t = &raw[bufs.req.target.clone()];
        (
            &raw[bufs.req.method.clone()],
            &t[..t.len().min(accesslog::REFUSED_TARGET_MAX)],
        )
    } else {
        (b"", b"")
    };
    let entry = accesslog::Entry {
        client: &link.peer.ip,
        method,
        target,
        status,
        route: "",
        service: "",
        endpoint: "",
        bytes_in: raw.len() as u64,
        bytes_out: if written { bufs.out.len() as u64 } else { 0 },
        total_us: 0,
        upstream_us: None,
        app: None,
        key_fp: None,
        tls: link.peer.tls,
        http2: link.http2(),
        // The id the refusal's body and header carried.
        request_id: bufs.ids.rid.value(),
        trace_id: None,
        fault: None,
        fallback: None,
    };
    link.worker
        .append_refused_log(sink, &entry, link.peer.listener);
}

/// Refuses a request the client may still be sending (a head over the
/// limit, a malformed one, its body): answers, ends our side, then reads
/// and drops what the client still sends (bounded in bytes and time)
/// before the close. Closing with its bytes unread would reset the
/// connection, and a reset can destroy the answer before the client
/// reads it.
pub(super) async fn refuse_and_close(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    kind: ErrorKind,
    parsed: bool,
) {
    if fail_early(link, snap, bufs, kind, parsed).await {
        link.client.shutdown_write();
        linger(
            &link.worker.deadlines,
            link.client,
            &mut bufs.inb,
            LINGER_MAX,
        )
        .await;
    }
}

/// Answers a request whose head was refused, and closes (an HTTP/2
/// stream: ends it).
pub(super) async fn refuse_head(link: Link<'_>, snap: &Snapshot, bufs: &mut Bufs, e: HeadError) {
    let kind = match e {
        HeadError::Bad(why) => {
            tracing::debug!(peer = %link.peer.addr, why, "bad request");
            ErrorKind::BadRequest
        }
        HeadError::TooLarge => ErrorKind::HeadersTooLarge,
        HeadError::NotImplemented(_) => ErrorKind::NotImplemented,
        HeadError::ExpectationFailed => ErrorKind::ExpectationFailed,
    };
    refuse_and_close(link, snap, bufs, kind, false).await;
}

/// Writes a response the gateway makes itself: a `respond` route's, or
/// an error (404, or a filter's refusal). A request body is read and dropped when small,
/// otherwise the connection closes after the answer. An HTTP/2 stream's
/// body is never waited for: its answer goes at once, whole, and the
/// stream's end leaves the body unread (RST_STREAM `NO_ERROR`, see
/// [`crate::proto::http2::exchange`]). Its head went out as it was
/// rendered, and a client that stops sending when it sees an error's
/// head (curl does), ending its body short of its `content-length`,
/// would otherwise have the stream reset as malformed (`PROTOCOL_ERROR`)
/// before the answer's body went.
pub(super) async fn answer_locally(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    fixed: Local<'_>,
    is_head: bool,
) -> Outcome<'static> {
    let framing = bufs.req_framing;
    let head_len = framing.len;
    let body = framing.body;
    let mut close = framing.close || link.worker.shutting_down();
    let discardable = match body {
        BodyKind::None => true,
        BodyKind::Length(n) => n <= DISCARD_MAX && !framing.expect_continue,
        BodyKind::Chunked | BodyKind::UntilClose | BodyKind::Stream => false,
    };
    if !discardable {
        close = true;
    }
    let (rendered, status, body_len) = render_local(link, bufs, fixed, is_head, close);
    bufs.inb.consume(head_len);
    let mut outcome = Outcome::local(status, body_len as u64, close);
    let h2 = link.client.h2().is_some();
    if let (false, false, BodyKind::Length(n)) = (h2, close, body) {
        let deadline = Instant::now() + snap.timeouts.client_write;
        if crate::upstream::body::discard(
            link.client,
            &mut bufs.inb,
            n,
            link.worker.until(deadline),
        )
        .await
        .is_err()
        {
            outcome.close = true;
            return outcome;
        }
    }
    if !write_answer(link, snap, &bufs.out, rendered).await {
        outcome.close = true;
    }
    outcome
}

/// Writes an answer the gateway makes itself for a request forwarding
/// already took out of the buffer (its head, and its body as far as it
/// was read): a route's fallback. Nothing more is read; the connection
/// closes after it when `close`.
pub(super) async fn answer_consumed(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    fixed: Local<'_>,
    is_head: bool,
    close: bool,
) -> Outcome<'static> {
    let close = close || link.worker.shutting_down();
    let (rendered, status, body_len) = render_local(link, bufs, fixed, is_head, close);
    let mut outcome = Outcome::local(status, body_len as u64, close);
    if !write_answer(link, snap, &bufs.out, rendered).await {
        outcome.close = true;
    }
    outcome
}

/// Writes an answer rendered into `out` (`rendered`: whether that went
/// well) within the client-write timeout; false, the failure counted,
/// when it could not be rendered or written.
async fn write_answer(
    link: Link<'_>,
    snap: &Snapshot,
    out: &[u8],
    rendered: std::io::Result<()>,
) -> bool {
    let wait = link.worker.deadlines.after(snap.timeouts.client_write);
    let written = match rendered {
        Ok(()) => write_all_by(link.client, out, wait).await,
        failed => failed,
    };
    match written {
        Ok(()) => true,
        Err(e) => {
            client_write_failed(link.worker, &e);
            false
        }
    }
}

/// Renders a local answer into `bufs.out` (with the filters' response
/// fields); its status and body length (the gRPC status it gives set in
/// `bufs`).
#[inline]
fn render_local(
    link: Link<'_>,
    bufs: &mut Bufs,
    fixed: Local<'_>,
    is_head: bool,
    close: bool,
) -> (std::io::Result<()>, u16, usize) {
    let edits = &bufs.edits;
    let ops = edits
        .response_ops
        .as_ref()
        .map_or(&fields::NONE, |o| &o.fields);
    let extra;
    let what = match fixed {
        Local::Fixed(head, body) => What::Fixed {
            head,
            edits: &edits.response_headers,
            ops,
            body,
        },
        Local::Error(kind, own) => {
            // Filters' response fields (CORS) go on refusals too.
            extra = [own, &edits.response_headers];
            What::Error {
                kind,
                grpc: bufs.grpc,
                extra: &extra,
            }
        }
    };
    let answer = Answer {
        what,
        rid: &bufs.ids.rid,
        close,
        head_only: is_head,
        http10: bufs.req.minor == 0,
    };
    let rendered = response::render(&answer, link.client.h2(), &mut bufs.out);
    let (status, body_len, grpc_status) = match answer.what {
        What::Fixed { head, body, .. } => {
            let status = head.status();
            let len = if response::bodiless(status) {
                0
            } else {
                body.len()
            };
            (status, len, None)
        }
        What::Streamed { head, .. } => (head.status(), 0, None),
        What::Error { kind, grpc, .. } => (
            kind.status(),
            bufs.out.len(),
            grpc.then(|| kind.grpc_status()),
        ),
    };
    if grpc_status.is_some() {
        bufs.grpc_status = grpc_status;
    }
    (rendered, status, body_len)
}

impl Refuse {
    /// The answer to write.
    pub(super) fn local(&self) -> Local<'_> {
        match self.answer {
            Refusal::Error(kind) => Local::Error(kind, &self.headers),
            Refusal::NoContent => Local::Fixed(Head::Fields(204, &self.headers), &[]),
        }
    }
}

/// A redirect of the request to the same host and target over HTTPS (on
/// its default port): 301 for GET and HEAD, 308 (which keeps the method
/// and body) for others, and its `location` field. `None` when the
/// request names no host.
pub(super) fn https_redirect(raw: &[u8], target: &Target, method: &[u8]) -> Option<(u16, Fields)> {
    let host = crate::route::target::strip_port(target.host(raw)?);
    if host.is_empty() {
        return None;
    }
    let status = if method == b"GET" || method == b"HEAD" {
        301
    } else {
        308
    };
    let mut fields = Fields::new();
    fields.push_with(b"location", |v| {
        v.extend_from_slice(b"https://");
        v.extend_from_slice(host);
        v.extend_from_slice(&raw[target.path.clone()]);
        v.extend_from_slice(&raw[target.query.clone()]);
    });
    Some((status, fields))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::deadline::OwnSlot;
    use crate::proto::codec::{self, Parsed};
    use crate::session::peer::Peer;
    use crate::session::testing::{read_some, runtime, worker};
    use crate::transport::duplex;
    use crate::transport::stream::Stream;
    use std::time::Duration;

    /// A local answer needs no connection: given a `Link` to a stream, a
    /// snapshot and the buffers with a request head in them, it writes the
    /// answer, drops the small body, and leaves the next request in place.
    #[test]
    fn a_local_answer_is_written_from_a_link_and_the_buffers() {
        runtime().block_on(async {
            let worker = worker();
            let (client, ours) = duplex::pair();
            let (client, ours) = (Stream::Duplex(client), Stream::Duplex(ours));
            let addr = "192.0.2.7:40000".parse().unwrap();
            let peer = Peer {
                addr,
                ip: "192.0.2.7".into(),
                listener: "127.0.0.1:9".parse().unwrap(),
                tls: None,
                redirect_https: false,
                identity: None,
            };
            let slot = OwnSlot::new(&worker.deadlines);
            let link = Link {
                worker: &worker,
                client: &ours,
                slot: &slot,
                revoke_slot: &slot,
                peer: &peer,
            };
            let snap = worker.shared.snapshot.load_full();
            let mut bufs = worker.take_bufs();
            let next = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
            bufs.inb
                .put(b"POST /nowhere HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc");
            bufs.inb.put(next);
            let max = snap.limits.max_header_bytes;
            let Ok(Parsed::Complete(framing)) =
                codec::parse_request(bufs.inb.filled(), max, &mut bufs.req)
            else {
                panic!("the head does not parse");
            };
            bufs.req_framing = framing;
            let path = bufs.req.target.clone();
            crate::session::ids::request_ids(&worker, addr.ip(), &snap, &mut bufs, path);
            let none = Local::Error(ErrorKind::NoRoute, &fields::NONE);
            let outcome = answer_locally(link, &snap, &mut bufs, none, false).await;
            assert_eq!((outcome.status, outcome.close), (404, false));
            assert_eq!(
                bufs.inb.filled(),
                next,
                "the body is dropped, not the next request"
            );
            let got = read_some(&client, Duration::from_millis(200))
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 404 "), "{text}");
            let rid = String::from_utf8_lossy(bufs.ids.rid.value()).into_owned();
            assert!(!rid.is_empty() && text.contains(&rid), "{text}");
            assert_eq!(outcome.bytes_out, got.len() as u64);
            worker.give_bufs(bufs);
        });
    }
}
