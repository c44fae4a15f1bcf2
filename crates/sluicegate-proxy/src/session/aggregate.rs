//! An `aggregate` route's action: its parts called through the internal
//! client, level by level (the parts of a level at once, as futures
//! joined in the request's own task), their JSON answers made into one
//! JSON object, written as the gateway's own answer.
//!
//! A part fails when its call fails (no endpoint, retries used up, its
//! `timeout`), its status is not 2xx, its body is not JSON or is larger
//! than `limits.max_body_bytes`, the app may not call its service, or a
//! value its path reads is missing (or not a string or number) or comes
//! from a failed part. A failed optional part is `null`, named in
//! `Sluicegate-Partial`; a failed required one answers 502 naming it, or
//! 403 naming it when the app may not call its service (the part is
//! never called: nothing of it reaches the client).
//! The whole request has the first part's service's `timeouts.request`.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;

use super::answer::{answer_locally, Local};
use super::req::Req;
use crate::proto::fields::{self, Fields};
use crate::proto::response::{error_body, ErrorKind, Head};
use crate::route::target::Target;
use crate::snapshot::aggregate::{AggregateRt, PartRt, Piece};
use crate::upstream::client::{self, Event, Options, Origin};
use crate::upstream::forward::Outcome;
use crate::worker::Bufs;

/// A part's answer: its body as received, and parsed.
type Answered = Option<(Bytes, Value)>;

/// A part's call in flight: its index and answer when it ends.
type Call<'a> = Pin<Box<dyn Future<Output = (usize, Answered)> + 'a>>;

/// Runs the aggregate route `agg` for the request in `bufs` (its target
/// `t`, from `client`) and writes the answer.
pub(super) async fn aggregate(
    rq: &Req<'_>,
    agg: &AggregateRt,
    bufs: &mut Bufs,
    client: std::net::IpAddr,
    t: &Target,
    started: Instant,
) -> Outcome<'static> {
    let (link, snap, is_head) = (*rq.link, rq.snap, bufs.is_head);
    let raw = bufs.inb.filled();
    let method = &raw[bufs.req.method.clone()];
    if method != b"GET" && method != b"HEAD" {
        let local = Local::Error(ErrorKind::MethodNotAllowed, &fields::NONE);
        return answer_locally(link, snap, bufs, local, is_head).await;
    }
    let down = link.downstream();
    let opts = Options {
        origin: Some(Origin::of(&down, client, raw, &bufs.req, t)),
        ..Options::default()
    };
    // The path the router saw (an aggregate route has no rewrite).
    let path: Vec<u8> = bufs
        .edits
        .path
        .as_deref()
        .unwrap_or(&raw[t.path.clone()])
        .to_vec();
    let app = bufs
        .edits
        .app
        .and_then(|a| snap.apps.by_id(snap.apps.app_id(a)));
    let rid = Bytes::copy_from_slice(bufs.ids.rid.value());
    let first = snap.service(agg.parts[0].service);
    let until = started + first.timeouts.request;
    let max_body = snap.limits.max_body_bytes;

    let mut answers: Vec<Answered> = vec![None; agg.parts.len()];
    // Parts the app may not call (their service's ACL).
    let mut denied: Vec<bool> = vec![false; agg.parts.len()];
    for level in agg.levels.iter() {
        let mut calls: Vec<Call<'_>> = Vec::new();
        for &i in level.iter() {
            let part = &agg.parts[i];
            let service = snap.service(part.service);
            let allowed = app.as_ref().is_none_or(|a| a.may_call(service.index));
            denied[i] = !allowed;
            let uri = if allowed {
                part_uri(part, &bufs.params, &path, &answers)
            } else {
                None
            };
            let Some(uri) = uri else {
                part.metrics.record(false, None);
                continue;
            };
            let timeout = part.timeout.unwrap_or(service.timeouts.request);
            let deadline = until.min(Instant::now() + timeout);
            let (worker, opts, rid) = (link.worker, &opts, rid.clone());
            calls.push(Box::pin(async move {
                let at = Instant::now();
                let call = call(worker, snap, service, uri, rid, opts, max_body);
                let got = worker
                    .deadlines
                    .at(deadline)
                    .bound(call)
                    .await
                    .ok()
                    .flatten();
                part.metrics
                    .record(got.is_some(), Some(at.elapsed().as_micros() as u64));
                (i, got)
            }));
        }
        for (i, got) in join_all(calls).await {
            answers[i] = got;
        }
    }

    // The answer: every member, or the first required part that failed.
    let mut partial: Vec<&str> = Vec::new();
    for ((part, got), denied) in agg.parts.iter().zip(&answers).zip(&denied) {
        if got.is_none() {
            if !part.optional {
                let mut body = Vec::with_capacity(96);
                let kind = if *denied {
                    ErrorKind::Forbidden
                } else {
                    ErrorKind::UpstreamFailed
                };
                error_body(&mut body, kind, Some(("part", &part.name)), &bufs.ids.rid);
                let mut f = Fields::new();
                f.push(b"content-type", b"application/json");
                let local = Local::Fixed(Head::Fields(kind.status(), &f), &body);
                return answer_locally(link, snap, bufs, local, is_head).await;
            }
            partial.push(&part.name);
        }
    }
    let mut body = Vec::with_capacity(256);
    body.push(b'{');
    for (n, (part, got)) in agg.parts.iter().zip(&answers).enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.push(b'"');
        body.extend_from_slice(part.name.as_bytes());
        body.extend_from_slice(b"\":");
        match got {
            Some((raw, _)) => body.extend_from_slice(raw.trim_ascii()),
            None => body.extend_from_slice(b"null"),
        }
    }
    body.extend_from_slice(b"}\n");
    let mut f = Fields::new();
    f.push(b"content-type", b"application/json");
    if !partial.is_empty() {
        f.push(b"sluicegate-partial", partial.join(",").as_bytes());
    }
    let local = Local::Fixed(Head::Fields(200, &f), &body);
    answer_locally(link, snap, bufs, local, is_head).await
}

/// The part's path and query, its references replaced; `None` when a
/// value it reads is missing, not a string or number, or comes from a
/// failed part.
fn part_uri(
    part: &PartRt,
    params: &crate::route::template::Params,
    path: &[u8],
    answers: &[Answered],
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    for piece in part.path.iter() {
        match piece {
            Piece::Text(t) => out.extend_from_slice(t),
            Piece::Param(i) => out.extend_from_slice(params.get(path, *i)?),
            Piece::Field(j, steps) => {
                let (_, json) = answers[*j].as_ref()?;
                let mut v = json;
                for step in steps.iter() {
                    v = match v {
                        Value::Object(m) => m.get(&**step)?,
                        Value::Array(a) => a.get(step.parse::<usize>().ok()?)?,
                        _ => return None,
                    };
                }
                match v {
                    Value::String(s) => encode(s.as_bytes(), &mut out),
                    Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
                    _ => return None,
                }
            }
        }
    }
    Some(out)
}

/// Appends `s` percent-encoded but for unreserved characters: fit for one
/// path segment or one query value.
fn encode(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// One part's call: a GET of `uri` with the client's request id and
/// `Accept: application/json`; its body read whole (at most `max` bytes)
/// and parsed. `None` on any failure.
async fn call(
    worker: &crate::worker::Worker,
    snap: &crate::snapshot::Snapshot,
    service: &crate::snapshot::ServiceRt,
    uri: Vec<u8>,
    rid: Bytes,
    opts: &Options,
    max: u64,
) -> Answered {
    let mut b = http::Request::get(http::Uri::try_from(uri).ok()?)
        .header(http::header::ACCEPT, "application/json");
    if !rid.is_empty() {
        let name = http::HeaderName::from_bytes(&snap.request_id_header).ok()?;
        b = b.header(name, http::HeaderValue::from_maybe_shared(rid).ok()?);
    }
    let req = b.body(Bytes::new()).ok()?;
    let mut res = client::send_with(worker, snap, service, req, opts)
        .await
        .ok()?;
    if !(200..300).contains(&res.status()) {
        return None;
    }
    let mut body = Vec::new();
    loop {
        match res.next().await.ok()? {
            Event::Data(d) => {
                if (body.len() + d.len()) as u64 > max {
                    return None;
                }
                body.extend_from_slice(&d);
            }
            Event::Trailers(_) => {}
            Event::End => break,
        }
    }
    let json: Value = serde_json::from_slice(&body).ok()?;
    Some((body.into(), json))
}

/// Runs `futs` at once in this task; their outputs in the order they
/// ended.
async fn join_all<T>(mut futs: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    let mut out = Vec::with_capacity(futs.len());
    std::future::poll_fn(|cx| {
        let mut i = 0;
        while i < futs.len() {
            match futs[i].as_mut().poll(cx) {
                Poll::Ready(v) => {
                    out.push(v);
                    drop(futs.swap_remove(i));
                }
                Poll::Pending => i += 1,
            }
        }
        if futs.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out
}
