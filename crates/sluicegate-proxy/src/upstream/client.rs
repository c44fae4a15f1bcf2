//! The internal client: requests the gateway makes itself (mirroring,
//! cache fills and revalidation, aggregation, forward auth), sent to a
//! service through the same steps as a client's request, and their
//! responses read as events.
//!
//! A request is built in code as an `http::Request<Bytes>`: its method,
//! its path and query, its authority (optional: without one the `Host` is
//! the endpoint's name, and the request never goes to another endpoint),
//! its header fields and its whole body (or, for a mirror's copy,
//! [`send_fed`], a body that streams from the request it copies: sent
//! with the length its fields declare, else chunked). It is laid out in one of the
//! worker's buffer sets as the protocol-neutral head with the body right
//! after it, as an HTTP/2 client's request whose body came whole is
//! ([`fill_head`]), and sent by forwarding's own steps
//! ([`forward::forward`], the client's connection `None`): the service's balancer, the worker's pool
//! and HTTP/2 connections, retries and their budget, the circuit
//! breakers, `timeouts.connect`, `response_header` and `request`, and the
//! endpoint's counters and response times. It gets a request id of its
//! own unless its fields carry one. Made on behalf of a client's request
//! (mirroring, aggregation, forward auth: [`Options::origin`]), it is
//! balanced by that client's address and carries that client's facts as
//! its own request would, where the service takes them: `X-Forwarded-For`
//! (the values it came with, then the address its connection came from),
//! `X-Forwarded-Proto` and `X-Forwarded-Host`. Made for the gateway
//! itself (a JWKS fetch), it carries none; `X-Forwarded-*` fields written
//! in code are never sent. A call may have deadlines of its own
//! ([`Options::head_within`], [`Options::body_within`]), past which it
//! ends with [`Error::Deadline`].
//!
//! The response's head comes owned ([`Response::status`],
//! [`Response::fields`]: its fields but the hop-by-hop and framing ones),
//! then its body as events ([`Response::next`]): [`Event::Data`] as it
//! arrives, [`Event::Trailers`] (a chunked body's trailer section, an
//! HTTP/2 stream's trailers), then [`Event::End`]. An HTTP/1.1 body ends
//! by its length, its last chunk or the upstream's close; an HTTP/2 one
//! with its stream. Each read waits at most the service's
//! `timeouts.response_body`. Once the body was read to its end cleanly,
//! the connection goes back to the worker's pool as a client's would; the
//! endpoint's in-flight slot and the buffer set are held until then, or
//! until the response is dropped (which closes the connection). Errors are
//! [`Error`]s: where they came from, and whether a retry is safe. A
//! response can be held in memory and replayed to a client
//! ([`super::held`]).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderMap;

use crate::balance::endpoint::{EndpointState, Permit};
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::codec::BodyKind;
use crate::proto::head::RequestHead;
use crate::proto::http2::exchange::trailer_map;
use crate::proto::http2::request::{fill_head, BodyAt};
use crate::proto::http2::response::client_fields;
use crate::route::target::Target;
use crate::snapshot::{ServiceRt, Snapshot};
use crate::transport::stream::Stream;
use crate::upstream::attempt::{head_came, pool_back};
use crate::upstream::body::STREAM_BUF;
use crate::upstream::failure::AttemptError;
pub(crate) use crate::upstream::failure::{Error, Part};
use crate::upstream::forward::{self, Ended};
use crate::upstream::head::Forwarded;
use crate::worker::tee::Feed;
use crate::worker::{Bufs, Downstream, Worker};

/// The client a request is made on behalf of, with the facts its own
/// request would carry upstream.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    /// Its address (behind trusted proxies), which balancing reads.
    pub(crate) client: IpAddr,
    /// The address its connection came from, appended to X-Forwarded-For.
    pub(crate) peer: Box<str>,
    /// The X-Forwarded-For values its request came with, in order.
    pub(crate) xff: Vec<Bytes>,
    /// Its connection is TLS.
    pub(crate) https: bool,
    /// The host its request named, if it named one.
    pub(crate) host: Option<Bytes>,
}

impl Origin {
    /// The facts of the client's request `req` (laid out in `raw`, its
    /// target `t`), from `client` on the connection `down`.
    pub(crate) fn of(
        down: &Downstream<'_>,
        client: IpAddr,
        raw: &[u8],
        req: &RequestHead,
        t: &Target,
    ) -> Origin {
        Origin {
            client,
            peer: down.peer_ip.into(),
            xff: req
                .xff
                .iter()
                .map(|v| Bytes::copy_from_slice(&raw[v.clone()]))
                .collect(),
            https: down.https,
            host: t.host(raw).map(Bytes::copy_from_slice),
        }
    }
}

/// How a call is made: on whose behalf, within what time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// The client's request it is made for; none for the gateway's own.
    pub(crate) origin: Option<Origin>,
    /// Longest from the call to its response head, retries included:
    /// past it, [`Error::Deadline`] ([`Part::Head`]).
    pub(crate) head_within: Option<Duration>,
    /// Longest from the response head to the body's end: past it, the
    /// next read is [`Error::Deadline`] ([`Part::Body`]) (and later ones
    /// [`Error::Body`]), the connection closed.
    pub(crate) body_within: Option<Duration>,
}

/// What a response's body gives, in order: data, then its trailers when
/// it has some, then its end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Data(Bytes),
    Trailers(HeaderMap),
    End,
}

/// Where the reading of a response's body is.
#[derive(Debug)]
enum Reading {
    /// This many bytes still due.
    Length(u64),
    /// Chunked: the decoder, and the trailer field lines seen so far.
    Chunked(ChunkedDecoder, Vec<u8>),
    /// Until the upstream closes.
    UntilClose,
    /// An HTTP/2 stream's data until it ends, then its trailers.
    Stream,
    /// Read to its end (trailers given): the end is next.
    Whole,
    /// The end was given: nothing more comes.
    Done,
    /// The body failed: nothing more comes.
    Failed,
}

/// A buffer set lent by the worker for one request, given back when
/// dropped.
struct Lent<'w> {
    worker: &'w Worker,
    bufs: Option<Box<Bufs>>,
}

impl<'w> Lent<'w> {
    fn take(worker: &'w Worker) -> Self {
        Lent {
            worker,
            bufs: Some(worker.take_bufs()),
        }
    }

    fn get(&mut self) -> &mut Bufs {
        self.bufs
            .as_deref_mut()
            .expect("a lent set is held until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.bufs.take() {
            self.worker.give_bufs(b);
        }
    }
}

/// A response to a request the gateway made: its head, and its body as
/// events ([`Response::next`]).
pub(crate) struct Response<'w, 's> {
    service: &'s ServiceRt,
    /// The endpoint that answered, and its place in the service.
    ep: &'s EndpointState,
    index: usize,
    /// The endpoint's in-flight slot, until the body's end.
    permit: Option<Permit<'s>>,
    /// The connection or HTTP/2 stream, until the body's end.
    up: Option<Stream>,
    bufs: Lent<'w>,
    status: u16,
    fields: HeaderMap,
    head_at: Instant,
    upstream_us: u64,
    reading: Reading,
    /// Body bytes read so far.
    read: u64,
    /// The call's deadline for the body, if it has one.
    body_until: Option<Instant>,
}

impl std::fmt::Debug for Response<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("endpoint", &self.ep.name)
            .field("reading", &self.reading)
            .finish_non_exhaustive()
    }
}

/// Sends `req` to `service` (of `snap`) from `worker` for the gateway
/// itself, and reads its response's head: see the module's notes.
pub(crate) async fn send<'w, 's>(
    worker: &'w Worker,
    snap: &'s Snapshot,
    service: &'s ServiceRt,
    req: http::Request<Bytes>,
) -> Result<Response<'w, 's>, Error> {
    send_with(worker, snap, service, req, &Options::default()).await
}

/// [`send`], as `opts` says: on a client's behalf, within deadlines.
pub(crate) async fn send_with<'w, 's>(
    worker: &'w Worker,
    snap: &'s Snapshot,
    service: &'s ServiceRt,
    req: http::Request<Bytes>,
    opts: &Options,
) -> Result<Response<'w, 's>, Error> {
    let (parts, body) = req.into_parts();
    send_parts(worker, snap, service, parts, Body::Whole(&body), opts).await
}

/// [`send_with`] for a mirror's copy of a request: its head `parts`
/// (with a `content-length` field when its body has one), its body read
/// from `feed` as the request's own arrives. The copy fails when its feed
/// was cut ([`Feed::cut`] says why).
pub(crate) async fn send_fed<'w, 's>(
    worker: &'w Worker,
    snap: &'s Snapshot,
    service: &'s ServiceRt,
    parts: http::request::Parts,
    feed: &Feed,
    opts: &Options,
) -> Result<Response<'w, 's>, Error> {
    send_parts(worker, snap, service, parts, Body::Fed(feed), opts).await
}

/// A request's body: whole at hand, or streaming from a feed.
#[derive(Clone, Copy)]
enum Body<'a> {
    Whole(&'a [u8]),
    Fed(&'a Feed),
}

async fn send_parts<'w, 's>(
    worker: &'w Worker,
    snap: &'s Snapshot,
    service: &'s ServiceRt,
    mut parts: http::request::Parts,
    body: Body<'_>,
    opts: &Options,
) -> Result<Response<'w, 's>, Error> {
    let started = Instant::now();
    let mut lent = Lent::take(worker);
    let origin = opts.origin.as_ref();
    // Only the origin's X-Forwarded-For values lead the gateway's.
    parts.headers.remove("x-forwarded-for");
    for v in origin.map_or(&[][..], |o| &o.xff) {
        if let Ok(v) = http::HeaderValue::from_maybe_shared(v.clone()) {
            parts.headers.append("x-forwarded-for", v);
        }
    }
    let bufs = lent.get();
    let target = lay_out(worker, snap, &parts, body, bufs)?;
    let cx = forward::Request {
        worker,
        down: None,
        client: origin.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |o| o.client),
        origin: origin.map(|o| Forwarded {
            client: &o.peer,
            https: o.https,
            host: o.host.as_deref(),
        }),
        snap,
        service,
        target: &target,
        strip: 0,
        started,
        upgrade: None,
        feed: match body {
            Body::Fed(f) => Some(f),
            Body::Whole(_) => None,
        },
        hand_back: crate::upstream::handback::HandBack::NONE,
        compress: None,
    };
    let sending = forward::forward(cx, bufs);
    let ended = match opts.head_within {
        None => sending.await,
        Some(d) => worker
            .deadlines
            .at(started + d)
            .bound(sending)
            .await
            .map_err(|_| Error::Deadline(Part::Head))?,
    };
    let (at, up, sent_at) = match ended {
        Ended::Head(at, up, sent_at) => (at, up, sent_at),
        Ended::Failed(e) => return Err(e),
        // Only a client's call whose body streams ends with the client.
        Ended::Done(_) | Ended::Unanswered(_) => {
            return Err(Error::Attempt(AttemptError::Downstream))
        }
    };
    let (index, ep, permit) = at.answered();
    let (head_at, upstream_us) = head_came(service, ep, sent_at);
    let framing = bufs.res_framing;
    let fields = client_fields(bufs.upb.filled(), framing.len, &bufs.res.headers, 0, |h| {
        !h.skip
    });
    bufs.upb.consume(framing.len);
    let reading = match framing.body {
        BodyKind::None => Reading::Whole,
        BodyKind::Length(n) => Reading::Length(n),
        BodyKind::Chunked => Reading::Chunked(ChunkedDecoder::new(), Vec::new()),
        BodyKind::UntilClose => Reading::UntilClose,
        BodyKind::Stream => Reading::Stream,
    };
    Ok(Response {
        service,
        ep,
        index,
        permit: Some(permit),
        up: Some(up),
        status: bufs.res.status,
        bufs: lent,
        fields,
        head_at,
        upstream_us,
        reading,
        read: 0,
        body_until: opts.body_within.map(|d| head_at + d),
    })
}

/// Lays out the request `parts` with its `body` (when whole) in `bufs`
/// as a client's request would be (its head in `req`, its framing, its
/// facts), and splits its target.
fn lay_out(
    worker: &Worker,
    snap: &Snapshot,
    parts: &http::request::Parts,
    body: Body<'_>,
    bufs: &mut Bufs,
) -> Result<Target, Error> {
    bufs.inb.clear();
    bufs.upb.clear();
    bufs.out.clear();
    let at = match body {
        Body::Whole(b) => BodyAt::Whole(b.len() as u64),
        Body::Fed(_) => BodyAt::Streams,
    };
    let framing =
        fill_head(parts, at, None, &mut bufs.inb, &mut bufs.req).map_err(|_| Error::Request)?;
    if let Body::Whole(b) = body {
        bufs.inb.put(b);
    }
    bufs.req_framing = framing;
    let raw = bufs.inb.filled();
    let target = Target::parse(raw, &bufs.req).map_err(|_| Error::Request)?;
    let method = &parts.method;
    bufs.is_head = method == http::Method::HEAD;
    // A gRPC call (`te: trailers` goes with it to an HTTP/2 upstream, and
    // the service's `grpc:` retries apply).
    bufs.grpc = method == http::Method::POST
        && parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| {
                let v = v.as_bytes();
                v.len() >= 16
                    && v[..16].eq_ignore_ascii_case(b"application/grpc")
                    && v.get(16) != Some(&b'-')
            });
    bufs.grpc_timeout = None;
    bufs.grpc_status = None;
    bufs.edits.clear();
    // Its id: the one its fields carry (passed on as they are), else one
    // made here.
    let ids = &mut bufs.ids;
    let name = &*snap.request_id_header;
    ids.rid.set_name(name);
    ids.sampled = None;
    ids.made = !parts
        .headers
        .keys()
        .any(|n| n.as_str().as_bytes().eq_ignore_ascii_case(name));
    if ids.made {
        worker.make_request_id(&mut ids.rid);
    }
    Ok(target)
}

impl Response<'_, '_> {
    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The head's fields, but the hop-by-hop and framing ones.
    pub(crate) fn fields(&self) -> &HeaderMap {
        &self.fields
    }

    /// The endpoint that answered, by name.
    pub(crate) fn endpoint(&self) -> &str {
        &self.ep.name
    }

    /// Microseconds from the request sent to its response head.
    pub(crate) fn upstream_us(&self) -> u64 {
        self.upstream_us
    }

    /// The body's next event: data as it arrives, then the trailers if
    /// any, then the end (given again if asked again). A body that fails
    /// (the upstream closed early, stalled past `timeouts.response_body`,
    /// sent a malformed chunk) is [`Error::Body`], and so is every later
    /// call.
    pub(crate) async fn next(&mut self) -> Result<Event, Error> {
        loop {
            if let Some(event) = self.buffered()? {
                return Ok(event);
            }
            let Some(up) = &self.up else {
                return Ok(Event::End);
            };
            let deadlines = &self.bufs.worker.deadlines;
            let idle = self.service.timeouts.response_body;
            let wait = match self.body_until {
                None => deadlines.after(idle),
                Some(until) => {
                    let now = Instant::now();
                    if now >= until {
                        self.failed();
                        return Err(Error::Deadline(Part::Body));
                    }
                    deadlines.at(until.min(now + idle))
                }
            };
            let bufs = self.bufs.get();
            match bufs.upb.fill(up, STREAM_BUF, wait).await {
                Ok(n) if n > 0 => {}
                Err(_) if self.body_until.is_some_and(|u| Instant::now() >= u) => {
                    self.failed();
                    return Err(Error::Deadline(Part::Body));
                }
                // The upstream's end: the body's, when it runs until then.
                Ok(_) => match self.reading {
                    Reading::UntilClose => self.reading = Reading::Whole,
                    Reading::Stream => {
                        self.reading = Reading::Whole;
                        if let Some(t) = up.take_trailers().filter(|t| !t.is_empty()) {
                            return Ok(Event::Trailers(t));
                        }
                    }
                    _ => return Err(self.failed()),
                },
                Err(_) => return Err(self.failed()),
            }
        }
    }

    /// The next event from what was received already, if one can be had
    /// without reading more.
    fn buffered(&mut self) -> Result<Option<Event>, Error> {
        let upb = &mut self.bufs.get().upb;
        let data = match &mut self.reading {
            Reading::Done => return Ok(Some(Event::End)),
            Reading::Failed => return Err(Error::Body),
            Reading::Whole | Reading::Length(0) => {
                self.end();
                return Ok(Some(Event::End));
            }
            Reading::Length(left) => {
                let take = (upb.len() as u64).min(*left) as usize;
                *left -= take as u64;
                let data = Bytes::copy_from_slice(&upb.filled()[..take]);
                upb.consume(take);
                data
            }
            Reading::UntilClose | Reading::Stream => {
                let data = Bytes::copy_from_slice(upb.filled());
                upb.clear();
                data
            }
            Reading::Chunked(dec, trailers) => loop {
                if dec.is_done() {
                    let lines = std::mem::take(trailers);
                    self.reading = Reading::Whole;
                    if lines.is_empty() {
                        self.end();
                        return Ok(Some(Event::End));
                    }
                    return Ok(Some(Event::Trailers(trailer_map(&lines))));
                }
                let raw = upb.filled();
                let Ok(step) = dec.step(raw) else {
                    return Err(self.failed());
                };
                let data = step.data.map(|r| Bytes::copy_from_slice(&raw[r]));
                if let Some(r) = step.trailer {
                    trailers.extend_from_slice(&raw[r]);
                }
                upb.consume(step.consumed);
                match data {
                    Some(d) if !d.is_empty() => break d,
                    _ if step.consumed == 0 => return Ok(None),
                    _ => {}
                }
            },
        };
        if data.is_empty() {
            return Ok(None);
        }
        self.read += data.len() as u64;
        Ok(Some(Event::Data(data)))
    }

    /// The body was read whole: the connection back to the pool when it
    /// is clean, the in-flight slot given back.
    fn end(&mut self) {
        self.reading = Reading::Done;
        if let Some(up) = self.up.take() {
            let worker = self.bufs.worker;
            let bufs = self.bufs.get();
            pool_back(
                worker,
                self.service,
                self.index,
                up,
                bufs,
                self.head_at,
                self.read,
            );
        }
        self.permit = None;
    }

    /// The body failed: the connection closed, the slot given back.
    fn failed(&mut self) -> Error {
        self.reading = Reading::Failed;
        self.up = None;
        self.permit = None;
        Error::Body
    }
}

#[cfg(test)]
mod tests;
