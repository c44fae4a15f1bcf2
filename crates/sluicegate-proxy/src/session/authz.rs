//! A route's external authorization, run after its filters and before its
//! action (on routes with `forward_auth` or `ext_authz` only): the check's
//! request made through the internal client, within the check's
//! `timeout`, and its decision applied: headers set on (and clients'
//! copies removed from) the request upstream, or the service's denial
//! answered to the client.
//!
//! **forward_auth** sends a GET to its URL with the request's listed
//! headers (every value the client sent), `X-Forwarded-Method` and
//! `X-Forwarded-Uri` (the method and target as received), and, where the
//! service takes forwarded headers, `X-Forwarded-For`, `-Proto` and
//! `-Host` as the client's own request would carry them. A 2xx answer
//! lets the request through with the answer's `response_headers` set on
//! it (the client's own copies of those names removed first, so a client
//! cannot forge them); any other answer is given to the client: its
//! status, its header fields (but framing, hop-by-hop and the request-id
//! header, which the gateway writes) and its body (at most
//! [`MAX_DENIAL_BODY`] bytes: a longer one counts as a failed check). A
//! gRPC request is denied with a gRPC status instead, that of the HTTP
//! status as the gateway maps its own errors' (`ErrorKind::Denied`): 401
//! is UNAUTHENTICATED, 403 PERMISSION_DENIED, 429 RESOURCE_EXHAUSTED,
//! 404 UNIMPLEMENTED, another 4xx INTERNAL, any other UNKNOWN.
//!
//! A check that fails (no answer within `timeout`, a refused connection,
//! an answer that cannot be read) follows `on_error`: `deny` answers 503
//! (gRPC: UNAVAILABLE), `allow` lets the request through with none of the
//! copied headers (and still without the client's copies of them).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sluicegate_config::OnAuthError;

use super::answer::{answer_locally, Local};
use super::extauthz::{origin, verdict, Failure, Verdict};
use super::req::Req;
use crate::observe::metrics::{AuthzMetrics, CheckMetrics};
use crate::proto::fields::{self, Fields};
use crate::proto::response::{ErrorKind, Head};
use crate::route::target::Target;
use crate::snapshot::authz::{AuthzRt, Decision, ForwardAuthRt};
use crate::snapshot::ServiceRt;
use crate::upstream::client::{self, Event, Response};
use crate::upstream::forward::Outcome;
use crate::worker::Bufs;

/// Longest denial body passed on to the client.
pub(crate) const MAX_DENIAL_BODY: usize = 64 * 1024;

/// Runs the route's checks on the request in `bufs`: `None` when it goes
/// on (the checks' header edits applied), else the answer written for it.
/// `own`: the route's own forward-auth service, for a URL with an address;
/// `m`: the route's counters of its checks.
pub(super) async fn authorize(
    rq: &Req<'_>,
    rt: &AuthzRt,
    m: &AuthzMetrics,
    own: Option<&Arc<ServiceRt>>,
    bufs: &mut Bufs,
    client: IpAddr,
    target: &Target,
) -> Option<Outcome<'static>> {
    if let Some(f) = &rt.forward {
        let verdict = forward(rq, f, &m.forward, own, bufs, client, target).await;
        let removed = &f.response_headers;
        if let Some(o) = apply(rq, bufs, verdict, f.on_error, &m.forward, removed).await {
            return Some(o);
        }
    }
    if let Some(e) = &rt.ext {
        let verdict = super::extauthz::check(rq, e, bufs, client, target).await;
        if let Some(o) = apply(rq, bufs, verdict, e.on_error, &m.ext, &[]).await {
            return Some(o);
        }
    }
    None
}

/// Applies `verdict` to the request in `bufs`, counted in `m`: `None`
/// when it goes on. `own` names the fields a check copies, whose
/// clients' copies are removed whatever it decided.
async fn apply(
    rq: &Req<'_>,
    bufs: &mut Bufs,
    verdict: Verdict,
    on_error: OnAuthError,
    m: &CheckMetrics,
    own: &[http::HeaderName],
) -> Option<Outcome<'static>> {
    use std::sync::atomic::Ordering::Relaxed;
    remove(bufs, own);
    let decision = match verdict {
        Verdict::Decided(d) => d,
        Verdict::Failed(why) => {
            m.errors[why as usize].fetch_add(1, Relaxed);
            if on_error == OnAuthError::Allow {
                m.on_error_allowed.fetch_add(1, Relaxed);
                return None;
            }
            m.on_error_denied.fetch_add(1, Relaxed);
            let local = Local::Error(ErrorKind::UpstreamBusy, &fields::NONE);
            let (link, snap, is_head) = (*rq.link, rq.snap, bufs.is_head);
            return Some(answer_locally(link, snap, bufs, local, is_head).await);
        }
    };
    let counter = match &*decision {
        Decision::Allow { .. } => &m.allowed,
        Decision::Deny { .. } => &m.denied,
    };
    counter.fetch_add(1, Relaxed);
    match &*decision {
        Decision::Allow { add, remove: names } => {
            remove(bufs, names);
            for (name, value) in add {
                bufs.edits
                    .request_headers
                    .push(name.as_str().as_bytes(), value.as_bytes());
            }
            None
        }
        Decision::Deny {
            status,
            fields,
            body,
        } => {
            let (link, snap, is_head) = (*rq.link, rq.snap, bufs.is_head);
            let local = if bufs.grpc {
                // A gRPC status, not the service's body: trailers-only.
                Local::Error(ErrorKind::Denied(*status), &fields::NONE)
            } else {
                Local::Fixed(Head::Fields(*status, fields), body)
            };
            Some(answer_locally(link, snap, bufs, local, is_head).await)
        }
    }
}

/// Marks the request's fields named in `names` as not forwarded.
fn remove(bufs: &mut Bufs, names: &[http::HeaderName]) {
    if names.is_empty() {
        return;
    }
    let raw = bufs.inb.filled();
    for h in bufs.req.headers.iter_mut() {
        let name = &raw[h.name.clone()];
        if names
            .iter()
            .any(|n| n.as_str().as_bytes().eq_ignore_ascii_case(name))
        {
            h.skip = true;
        }
    }
}

/// Asks the forward-auth service about the request in `bufs` (or its
/// cache, its hits counted in `m`).
async fn forward(
    rq: &Req<'_>,
    f: &ForwardAuthRt,
    m: &CheckMetrics,
    own: Option<&Arc<ServiceRt>>,
    bufs: &Bufs,
    client: IpAddr,
    target: &Target,
) -> Verdict {
    let raw = bufs.inb.filled();
    let req = &bufs.req;
    let method = &raw[req.method.clone()];
    let uri = &raw[req.target.clone()];
    let mut b = http::Request::get(http::Uri::from(f.path.clone()));
    let mut q = f.cache.as_ref().map(|c| c.question());
    if let Some(q) = &mut q {
        q.part(method);
        q.part(uri);
        q.part(target.host(raw).unwrap_or_default());
        q.part(&[u8::from(rq.link.peer.tls.is_some())]);
        q.part(rq.link.peer.ip.as_bytes());
        q.part(client.to_string().as_bytes());
        for v in req.xff.iter() {
            q.part(&raw[v.clone()]);
        }
    }
    for name in f.request_headers.iter() {
        if let Some(q) = &mut q {
            q.part(name.as_str().as_bytes());
        }
        for h in req
            .headers
            .iter()
            .filter(|h| raw[h.name.clone()].eq_ignore_ascii_case(name.as_str().as_bytes()))
        {
            let value = &raw[h.value.clone()];
            if let Some(q) = &mut q {
                q.part(value);
            }
            if let Ok(v) = http::HeaderValue::from_bytes(value) {
                b = b.header(name.clone(), v);
            }
        }
    }
    let now = Instant::now();
    if let (Some(c), Some(q)) = (&f.cache, &q) {
        if let Some(d) = c.get(q, now) {
            m.cache_hits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Verdict::Decided(d);
        }
    }
    for (name, value) in [
        (&b"x-forwarded-method"[..], method),
        (b"x-forwarded-uri", uri),
    ] {
        if let Ok(v) = http::HeaderValue::from_bytes(value) {
            b = b.header(http::HeaderName::from_bytes(name).expect("a field name"), v);
        }
    }
    let Ok(check) = b.body(Bytes::new()) else {
        return Verdict::Failed(Failure::BadAnswer);
    };
    let opts = origin(rq, bufs, client, target);
    let (worker, snap) = (rq.link.worker, rq.snap);
    let service = match (f.service, own) {
        (Some(i), _) => snap.service(i),
        (None, Some(s)) => s,
        (None, None) => return Verdict::Failed(Failure::Unreachable),
    };
    let call = async {
        let res = client::send_with(worker, snap, service, check, &opts)
            .await
            .map_err(|e| Failure::of(&e))?;
        decide(res, &f.response_headers, &snap.request_id_header).await
    };
    let decided = worker
        .deadlines
        .at(now + f.timeout)
        .bound(call)
        .await
        .map_err(|_| ());
    let v = verdict(decided);
    if let (Verdict::Decided(d), Some(c), Some(q)) = (&v, &f.cache, &q) {
        c.put(q, Instant::now(), d.clone());
    }
    v
}

/// The decision a forward-auth answer gives; why not when it cannot be
/// read whole.
async fn decide(
    mut res: Response<'_, '_>,
    copied: &[http::HeaderName],
    rid_header: &[u8],
) -> Result<Decision, Failure> {
    let status = res.status();
    let body = read_body(&mut res, MAX_DENIAL_BODY).await?;
    if (200..300).contains(&status) {
        let mut add = Vec::new();
        for name in copied {
            for v in res.fields().get_all(name) {
                add.push((name.clone(), v.clone()));
            }
        }
        return Ok(Decision::Allow {
            add,
            remove: copied.to_vec(),
        });
    }
    if status < 300 {
        return Err(Failure::BadAnswer);
    }
    let mut fields = Fields::new();
    for (name, value) in res.fields() {
        let n = name.as_str().as_bytes();
        if n.eq_ignore_ascii_case(rid_header) || n == b"date" || n == b"server" {
            continue;
        }
        fields.push(n, value.as_bytes());
    }
    Ok(Decision::Deny {
        status,
        fields,
        body,
    })
}

/// The response's body read to its end: a bad answer past `max` bytes,
/// else what failed.
pub(super) async fn read_body(res: &mut Response<'_, '_>, max: usize) -> Result<Bytes, Failure> {
    let mut body = Vec::new();
    loop {
        match res.next().await.map_err(|e| Failure::of(&e))? {
            Event::Data(d) => {
                if body.len() + d.len() > max {
                    return Err(Failure::BadAnswer);
                }
                body.extend_from_slice(&d);
            }
            Event::Trailers(_) => {}
            Event::End => return Ok(body.into()),
        }
    }
}
