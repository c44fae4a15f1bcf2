//! Answers the gateway makes itself on a client connection: a `respond`
//! route's, a filter's refusal, an error before or without routing, the
//! redirect to HTTPS. Rendered by [`crate::proto::response`]; written here,
//! with the request body dropped (when small) or the connection closed.

use std::time::Instant;

use super::conn::Conn;
use crate::filters::{Answer, Refuse};
use crate::observe::accesslog;
use crate::proto::codec::BodyKind;
use crate::proto::fields::Fields;
use crate::proto::response::{self, ErrorKind};
use crate::route::target::Target;
use crate::runtime::worker::Bufs;
use crate::snapshot::Snapshot;
use crate::transport::io::write_all_by;
use crate::upstream::body::{client_write_failed, linger};
use crate::upstream::forward::Outcome;

/// Bodies up to this size are read and discarded when the gateway answers
/// without forwarding; larger ones close the connection instead.
const DISCARD_MAX: u64 = 64 * 1024;
/// At most this much is read and dropped after refusing a request before
/// the close (see [`Conn::refuse_and_close`]).
const LINGER_MAX: u64 = 1024 * 1024;

/// A response the gateway writes itself.
pub(super) enum Local<'a> {
    /// A `respond` route's: status, status line and headers, body.
    Fixed(u16, &'a [u8], &'a [u8]),
    /// An error, with extra header fields.
    Error(ErrorKind, &'a Fields),
}

impl Conn<'_> {
    /// Answers an error before any route was chosen, and logs it; the
    /// caller closes. `parsed`: the head in `bufs.req` is this request's
    /// (its method and target go in the log line). True when the answer
    /// was written.
    pub(super) async fn fail_early(
        &self,
        snap: &Snapshot,
        bufs: &mut Bufs,
        kind: ErrorKind,
        parsed: bool,
    ) -> bool {
        bufs.out.clear();
        // No head to read one from: a new id.
        bufs.ids.sampled = None;
        bufs.ids.rid.set_name(&snap.request_id_header);
        self.worker.make_request_id(&mut bufs.ids.rid);
        response::error(&mut bufs.out, kind, true, false, false, &bufs.ids.rid);
        self.worker.shared.global.unrouted.record(kind.status());
        let limit = snap.timeouts.client_write;
        let written =
            match write_all_by(&self.client, &bufs.out, self.worker.deadlines.after(limit)).await {
                Ok(()) => true,
                Err(e) => {
                    client_write_failed(self.worker, &e);
                    false
                }
            };
        self.log_refused(snap, bufs, kind.status(), parsed, written);
        written
    }

    /// The access log line of a request refused before routing (a
    /// malformed or too large head, a slow one, a bad target): what is
    /// known of it, and the listener. It costs what a routed request's
    /// line costs (the target is cut at [`accesslog::REFUSED_TARGET_MAX`]
    /// bytes), and the refusal closes the connection, so a flood of bad
    /// requests writes no more log than as many good ones.
    #[cold]
    fn log_refused(&self, snap: &Snapshot, bufs: &Bufs, status: u16, parsed: bool, written: bool) {
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
            client: &self.peer_ip,
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
            tls: self.tls,
            http2: matches!(self.client, crate::transport::stream::Stream::H2(_)),
            // The id the refusal's body and header carried.
            request_id: bufs.ids.rid.value(),
            trace_id: None,
        };
        self.worker.append_refused_log(sink, &entry, self.listener);
    }

    /// Refuses a request the client may still be sending (a head over the
    /// limit, a malformed one, its body): answers, ends our side, then reads
    /// and drops what the client still sends (bounded in bytes and time)
    /// before the close. Closing with its bytes unread would reset the
    /// connection, and a reset can destroy the answer before the client
    /// reads it.
    pub(super) async fn refuse_and_close(
        &self,
        snap: &Snapshot,
        bufs: &mut Bufs,
        kind: ErrorKind,
        parsed: bool,
    ) {
        if self.fail_early(snap, bufs, kind, parsed).await {
            self.client.shutdown_write();
            linger(
                &self.worker.deadlines,
                &self.client,
                &mut bufs.inb,
                LINGER_MAX,
            )
            .await;
        }
    }

    /// Writes a response the gateway makes itself: a `respond` route's, or
    /// an error (404, or a filter's refusal). A request body is read and dropped when small,
    /// otherwise the connection closes after the answer.
    pub(super) async fn answer_locally(
        &self,
        snap: &Snapshot,
        bufs: &mut Bufs,
        fixed: Local<'_>,
        is_head: bool,
    ) -> Outcome<'static> {
        let framing = bufs.req_framing;
        let head_len = framing.len;
        let body = framing.body;
        let mut close = framing.close || self.worker.shutting_down();
        let discardable = match body {
            BodyKind::None => true,
            BodyKind::Length(n) => n <= DISCARD_MAX && !framing.expect_continue,
            BodyKind::Chunked | BodyKind::UntilClose | BodyKind::Stream => false,
        };
        if !discardable {
            close = true;
        }
        bufs.out.clear();
        let (status, body_len) = match fixed {
            Local::Fixed(status, head, body) => {
                bufs.out.extend_from_slice(head);
                bufs.edits.response_headers.write_h1(&mut bufs.out);
                bufs.ids.rid.write_h1(&mut bufs.out);
                if let Some(o) = &bufs.edits.response_ops {
                    o.fields.write_h1(&mut bufs.out);
                }
                // 1xx, 204 and 304 carry no body and no Content-Length.
                let bodiless = status < 200 || status == 204 || status == 304;
                if !bodiless {
                    response::content_length(&mut bufs.out, body.len() as u64);
                }
                if close {
                    bufs.out.extend_from_slice(b"connection: close\r\n");
                } else if bufs.req.minor == 0 {
                    bufs.out.extend_from_slice(b"connection: keep-alive\r\n");
                }
                bufs.out.extend_from_slice(b"\r\n");
                if !is_head && !bodiless {
                    bufs.out.extend_from_slice(body);
                }
                (status, if bodiless { 0 } else { body.len() })
            }
            Local::Error(kind, extra) => {
                let before = bufs.out.len();
                // Filters' response fields (CORS) go on refusals too.
                let extra = [extra, &bufs.edits.response_headers];
                let rid = &bufs.ids.rid;
                response::error_with(&mut bufs.out, kind, close, is_head, bufs.grpc, &extra, rid);
                if bufs.grpc {
                    bufs.grpc_status = Some(kind.grpc_status());
                }
                (kind.status(), bufs.out.len() - before)
            }
        };
        bufs.inb.consume(head_len);
        let mut outcome = Outcome::local(status, body_len as u64, close);
        if let (false, BodyKind::Length(n)) = (close, body) {
            let deadline = Instant::now() + snap.timeouts.client_write;
            if crate::upstream::body::discard(
                &self.client,
                &mut bufs.inb,
                n,
                self.worker.until(deadline),
            )
            .await
            .is_err()
            {
                outcome.close = true;
                return outcome;
            }
        }
        let limit = snap.timeouts.client_write;
        if let Err(e) =
            write_all_by(&self.client, &bufs.out, self.worker.deadlines.after(limit)).await
        {
            client_write_failed(self.worker, &e);
            outcome.close = true;
        }
        outcome
    }
}

impl Refuse {
    /// The answer to write; a 204's head is built into `head`.
    pub(super) fn local<'a>(&'a self, head: &'a mut Vec<u8>) -> Local<'a> {
        match self.answer {
            Answer::Error(kind) => Local::Error(kind, &self.headers),
            Answer::NoContent => {
                response::status_line(head, 204);
                self.headers.write_h1(head);
                Local::Fixed(204, head, &[])
            }
        }
    }
}

/// A redirect of the request to the same host and target over HTTPS (on
/// its default port): 301 for GET and HEAD, 308 (which keeps the method
/// and body) for others. Its status line and headers go in `head`; `None`
/// when the request names no host.
pub(super) fn https_redirect(
    head: &mut Vec<u8>,
    raw: &[u8],
    target: &Target,
    method: &[u8],
) -> Option<u16> {
    let host = crate::route::target::strip_port(target.host(raw)?);
    if host.is_empty() {
        return None;
    }
    let status = if method == b"GET" || method == b"HEAD" {
        301
    } else {
        308
    };
    response::status_line(head, status);
    head.extend_from_slice(b"location: https://");
    head.extend_from_slice(host);
    head.extend_from_slice(&raw[target.path.clone()]);
    head.extend_from_slice(&raw[target.query.clone()]);
    head.extend_from_slice(b"\r\n");
    Some(status)
}
