//! How a request ended (for metrics, the access log and the connection),
//! and the error answers forwarding writes itself (rendered by
//! [`crate::proto::response`]: HTTP/1.1 text, or an HTTP/2 stream's
//! fields with its body as data).

use crate::balance::endpoint::EndpointState;
use crate::proto::response::{self, Answer, ErrorKind, What};
use crate::snapshot::Snapshot;
use crate::transport::io::write_all_by;
use crate::upstream::body::client_write_failed;
use crate::worker::{Bufs, Downstream};

/// How a request ended, for metrics, the access log and the connection.
#[derive(Debug)]
pub struct Outcome<'s> {
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub close: bool,
    pub upstream_us: Option<u64>,
    pub endpoint: Option<&'s EndpointState>,
}

impl Outcome<'_> {
    pub fn local(status: u16, bytes_out: u64, close: bool) -> Self {
        Outcome {
            status,
            bytes_in: 0,
            bytes_out,
            close,
            upstream_us: None,
            endpoint: None,
        }
    }
}

/// [`fail`] for a request refused before it was prepared: its head is
/// taken out of the buffer first, so that a connection kept alive reads
/// the next request, not this one again.
pub(super) async fn fail_unsent<'s>(
    cx: (&Downstream<'_>, &Snapshot),
    bufs: &mut Bufs,
    kind: ErrorKind,
    close: bool,
) -> Outcome<'s> {
    bufs.inb.consume(bufs.req_framing.len);
    fail(cx, bufs, kind, close).await
}

/// Answers an error to the client from inside `forward`.
pub(super) async fn fail<'s>(
    (down, snap): (&Downstream<'_>, &Snapshot),
    bufs: &mut Bufs,
    kind: ErrorKind,
    close: bool,
) -> Outcome<'s> {
    let close = close || kind.closes();
    let answer = Answer {
        what: What::Error {
            kind,
            grpc: bufs.grpc,
            extra: &[],
        },
        rid: &bufs.ids.rid,
        close,
        head_only: bufs.is_head,
        http10: false,
    };
    let rendered = response::render(&answer, down.client.h2(), &mut bufs.out);
    if bufs.grpc {
        bufs.grpc_status = Some(kind.grpc_status());
    }
    let len = bufs.out.len() as u64;
    let wait = down.worker.deadlines.after(snap.timeouts.client_write);
    let write = match rendered {
        Ok(()) => write_all_by(down.client, &bufs.out, wait).await,
        failed => failed,
    };
    if let Err(e) = &write {
        client_write_failed(down.worker, e);
    }
    Outcome::local(kind.status(), len, close || write.is_err())
}
