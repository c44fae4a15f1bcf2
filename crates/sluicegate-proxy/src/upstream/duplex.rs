//! Full-duplex forwarding for gRPC calls whose request streams: the
//! client's body keeps going upstream while the response head and body
//! come back, so a call where each side waits for the other's message
//! (bidirectional streaming) works through the gateway. Either direction
//! may sit idle up to `timeouts.tunnel_idle` (a stream's messages come
//! when they come), and the request's total size is not capped by
//! `limits.max_body_bytes` (a long-lived stream is not one big body).
//!
//! Forwarding otherwise sends the whole body first and cuts it when the
//! upstream answers early; that is right for an HTTP request the upstream
//! refuses, not for a stream.

use std::time::Instant;

use crate::balance::endpoint::EndpointState;
use crate::proto::codec::BodyKind;
use crate::proto::compress::Recode;
use crate::proto::response::ErrorKind;
use crate::snapshot::Snapshot;
use crate::transport::io::RecvBuf;
use crate::transport::stream::Stream;
use crate::upstream::attempt::Verdict;
use crate::upstream::body::{relay_body, send_body, BodyError, Fault};
use crate::upstream::head::{head_grpc_status, read_response_head, write_response_head, HeadError};
use crate::upstream::outcome::{fail, Outcome};
use crate::worker::{Bufs, Downstream};

/// One call's state when its head went upstream.
pub(super) struct Call<'a, 's> {
    pub down: &'a Downstream<'a>,
    pub snap: &'s Snapshot,
    pub ep: &'s EndpointState,
    /// The request body's framing, and what of it is still to send.
    pub body: BodyKind,
    pub remaining: u64,
    /// Body bytes sent with the head.
    pub bytes_in: u64,
    pub client_minor: u8,
    pub is_head: bool,
    /// When the response head must have come.
    pub deadline: Instant,
    /// The connection closes after this request anyway.
    pub close: bool,
}

/// How the response side ended.
enum Answered {
    /// No response head: why.
    NoHead(HeadError),
    /// The head went to the client, then the body (or part of it).
    Relayed {
        status: u16,
        upstream_us: u64,
        close: bool,
        relay: Result<u64, (u64, Fault)>,
    },
}

/// Sends the rest of the request body while relaying the response.
pub(super) async fn run<'s>(
    c: Call<'_, 's>,
    up: Stream,
    admit: &mut Verdict<'_>,
    bufs: &mut Bufs,
) -> Outcome<'s> {
    let worker = c.down.worker;
    let idle = c.snap.timeouts.tunnel_idle;
    // The request side reads from its own buffers (the chunked head may
    // still be in `out`); the response side has the set's.
    let mut inb = std::mem::replace(&mut bufs.inb, RecvBuf::new(0));
    let mut side = std::mem::take(&mut bufs.out);
    let (sent, answered) = {
        let sending = send_body(
            &worker.deadlines,
            c.down.client,
            &up,
            &mut inb,
            &mut side,
            c.body,
            c.remaining,
            u64::MAX,
            idle,
            None,
        );
        let answering = answer(&c, &up, admit, bufs);
        tokio::pin!(sending, answering);
        let mut sent = None;
        loop {
            tokio::select! {
                r = &mut sending, if sent.is_none() => {
                    let failed = r.is_err();
                    sent = Some(r);
                    if failed {
                        break (sent, None);
                    }
                }
                a = &mut answering => break (sent, Some(a)),
            }
        }
    };
    bufs.inb = inb;
    if bufs.out.capacity() < side.capacity() {
        bufs.out = side;
    }
    let bytes_in = c.bytes_in
        + sent
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .copied()
            .unwrap_or(0);
    let answered = match answered {
        Some(a) => a,
        None => {
            // The request side failed while the answer was under way: the
            // exchange cannot go on, and the connection ends.
            if let Some(Err(BodyError::Upstream)) = sent {
                admit.failed(c.ep);
            }
            let mut o = Outcome::local(502, 0, true);
            o.bytes_in = bytes_in;
            o.endpoint = Some(c.ep);
            return o;
        }
    };
    match answered {
        Answered::NoHead(e) => {
            let kind = match e {
                HeadError::Timeout => ErrorKind::UpstreamTimeout,
                _ => ErrorKind::UpstreamFailed,
            };
            let mut o = fail((c.down, c.snap), bufs, kind, true).await;
            o.bytes_in = bytes_in;
            o.endpoint = Some(c.ep);
            o
        }
        Answered::Relayed {
            status,
            upstream_us,
            close,
            relay,
        } => {
            // The request body not read to its end: an HTTP/1.1 client's
            // connection cannot carry another request.
            let unfinished = !matches!(sent, Some(Ok(_)));
            let (bytes_out, failed) = match relay {
                Ok(n) => (n, false),
                Err((n, _)) => (n, true),
            };
            Outcome {
                status,
                bytes_in,
                bytes_out,
                close: close || unfinished || failed,
                upstream_us: Some(upstream_us),
                endpoint: Some(c.ep),
            }
        }
    }
}

/// The response side: its head (counted by the endpoint's circuit), then
/// its body, to the client.
async fn answer(
    c: &Call<'_, '_>,
    up: &Stream,
    admit: &mut Verdict<'_>,
    bufs: &mut Bufs,
) -> Answered {
    let sent_at = Instant::now();
    let head = read_response_head(
        up,
        c.down.worker,
        Some(c.down),
        bufs,
        c.is_head,
        c.client_minor,
        c.deadline,
        false,
    )
    .await;
    if let Err(e) = head {
        admit.failed(c.ep);
        return Answered::NoHead(e);
    }
    let status = bufs.res.status;
    bufs.grpc_status = head_grpc_status(bufs);
    if c.ep.breaker.counts_status(status) {
        admit.failed(c.ep);
    } else {
        admit.succeeded(c.ep);
    }
    let upstream_us = sent_at.elapsed().as_micros() as u64;
    c.ep.response_time.observe(upstream_us);
    let res_body = bufs.res_framing.body;
    let close = c.close
        || c.down.worker.shutting_down()
        || res_body == BodyKind::UntilClose
        || (matches!(res_body, BodyKind::Chunked | BodyKind::Stream) && c.client_minor == 0);
    write_response_head(bufs, close, c.client_minor, c.down.client, Recode::Keep);
    let relay = relay_body(
        c.down,
        up,
        bufs,
        res_body,
        c.client_minor == 1,
        c.snap.timeouts.tunnel_idle,
        c.snap.timeouts.client_write,
    )
    .await;
    Answered::Relayed {
        status,
        upstream_us,
        close,
        relay,
    }
}
