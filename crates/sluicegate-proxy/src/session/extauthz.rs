//! `ext_authz`: Envoy's `envoy.service.auth.v3.Authorization/Check` over
//! gRPC, sent through the internal client to the route's service (its
//! balancing, pool and health apply; it must speak HTTP/2), so that
//! existing ext_authz servers (OPA's Envoy plugin, say) work unchanged.
//!
//! The messages are written here as prost structs with the v3 API's
//! package, field names and numbers, holding only the fields used. The
//! request tells the request's source and destination addresses and its
//! HTTP facts (id, method, header fields, path with query, host, scheme,
//! protocol). As Envoy does: a `status` of OK allows, with `ok_response`'s
//! `headers` set on the request upstream (`append: true` adds instead of
//! replacing) and its `headers_to_remove` removed; any other status
//! denies, with `denied_response`'s status (403 when it gives none), its
//! headers and its body; a gRPC request is denied with the gRPC status
//! of that HTTP status (see `session::authz`). An answer that is not a
//! gRPC OK (`grpc-status` other than 0) or cannot be decoded is a failed
//! check, as a timeout is: `on_error` decides.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;

use super::req::Req;
use crate::proto::fields::Fields;
use crate::route::target::Target;
use crate::snapshot::authz::{Decision, ExtAuthzRt};
use crate::upstream::client::{self, Event, Options, Origin};
use crate::worker::Bufs;

/// The check's path.
const CHECK: &str = "/envoy.service.auth.v3.Authorization/Check";
/// Longest answer read.
const MAX_ANSWER: usize = 256 * 1024;

/// What a check came to (an `ext_authz` or a `forward_auth` one).
pub(super) enum Verdict {
    Decided(Arc<Decision>),
    /// The service could not answer: `on_error` decides.
    Failed(Failure),
}

/// Why a check failed: its index in the `errors` counters (the `error`
/// label of `sluicegate_authz_errors_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// No answer within the check's `timeout`.
    Timeout = 0,
    /// The check could not be sent (no endpoint, connection refused).
    Unreachable = 1,
    /// An answer that could not be read as one.
    BadAnswer = 2,
}

impl Failure {
    /// What an internal client's error says of the service.
    pub(super) fn of(e: &client::Error) -> Failure {
        use crate::upstream::failure::AttemptError;
        use crate::upstream::head::HeadError;
        match e {
            client::Error::Deadline(_)
            | client::Error::Attempt(AttemptError::Head {
                e: HeadError::Timeout,
                ..
            }) => Failure::Timeout,
            client::Error::Attempt(AttemptError::Head {
                e: HeadError::Invalid,
                ..
            })
            | client::Error::Body
            | client::Error::TooLarge => Failure::BadAnswer,
            _ => Failure::Unreachable,
        }
    }
}

/// The verdict of a check bounded by its timeout: `Ok(None)` is a
/// timeout.
pub(super) fn verdict(decided: Result<Result<Decision, Failure>, ()>) -> Verdict {
    match decided {
        Ok(Ok(d)) => Verdict::Decided(Arc::new(d)),
        Ok(Err(f)) => Verdict::Failed(f),
        Err(()) => Verdict::Failed(Failure::Timeout),
    }
}

/// The facts of the client's request a check is made on behalf of.
pub(super) fn origin(rq: &Req<'_>, bufs: &Bufs, client: IpAddr, target: &Target) -> Options {
    let down = rq.link.downstream();
    Options {
        origin: Some(Origin::of(
            &down,
            client,
            bufs.inb.filled(),
            &bufs.req,
            target,
        )),
        ..Options::default()
    }
}

/// `envoy.service.auth.v3.CheckRequest`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CheckRequest {
    #[prost(message, optional, tag = "1")]
    pub attributes: Option<AttributeContext>,
}

/// `envoy.service.auth.v3.AttributeContext`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct AttributeContext {
    #[prost(message, optional, tag = "1")]
    pub source: Option<Peer>,
    #[prost(message, optional, tag = "2")]
    pub destination: Option<Peer>,
    #[prost(message, optional, tag = "4")]
    pub request: Option<Request>,
}

/// `AttributeContext.Peer`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Peer {
    #[prost(message, optional, tag = "1")]
    pub address: Option<Address>,
}

/// `envoy.config.core.v3.Address`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Address {
    #[prost(message, optional, tag = "1")]
    pub socket_address: Option<SocketAddress>,
}

/// `envoy.config.core.v3.SocketAddress`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SocketAddress {
    #[prost(string, tag = "2")]
    pub address: String,
    #[prost(uint32, tag = "3")]
    pub port_value: u32,
}

/// `AttributeContext.Request`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Request {
    #[prost(message, optional, tag = "2")]
    pub http: Option<HttpRequest>,
}

/// `AttributeContext.HttpRequest`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct HttpRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(btree_map = "string, string", tag = "3")]
    pub headers: std::collections::BTreeMap<String, String>,
    #[prost(string, tag = "4")]
    pub path: String,
    #[prost(string, tag = "5")]
    pub host: String,
    #[prost(string, tag = "6")]
    pub scheme: String,
    #[prost(string, tag = "10")]
    pub protocol: String,
}

/// `envoy.service.auth.v3.CheckResponse`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CheckResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(message, optional, tag = "2")]
    pub denied_response: Option<DeniedHttpResponse>,
    #[prost(message, optional, tag = "3")]
    pub ok_response: Option<OkHttpResponse>,
}

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `envoy.service.auth.v3.DeniedHttpResponse`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct DeniedHttpResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, tag = "3")]
    pub body: String,
}

/// `envoy.type.v3.HttpStatus`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct HttpStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
}

/// `envoy.service.auth.v3.OkHttpResponse`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct OkHttpResponse {
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, repeated, tag = "5")]
    pub headers_to_remove: Vec<String>,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
    #[prost(message, optional, tag = "2")]
    pub append: Option<BoolValue>,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.BoolValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct BoolValue {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

/// Asks the ext_authz service about the request in `bufs`.
pub(super) async fn check(
    rq: &Req<'_>,
    e: &ExtAuthzRt,
    bufs: &Bufs,
    client: IpAddr,
    target: &Target,
) -> Verdict {
    let raw = bufs.inb.filled();
    let req = &bufs.req;
    let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&raw[r]).into_owned();
    let mut headers = std::collections::BTreeMap::<String, String>::new();
    for h in req.headers.iter() {
        let name = String::from_utf8_lossy(&raw[h.name.clone()]).to_ascii_lowercase();
        let value = text(h.value.clone());
        headers
            .entry(name)
            .and_modify(|v| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let host = target
        .host(raw)
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .unwrap_or_default();
    let peer = |addr: String, port: u16| Peer {
        address: Some(Address {
            socket_address: Some(SocketAddress {
                address: addr,
                port_value: u32::from(port),
            }),
        }),
    };
    let link = rq.link;
    let message = CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(peer(client.to_string(), link.peer.addr.port())),
            destination: Some(peer(
                link.peer.listener.ip().to_string(),
                link.peer.listener.port(),
            )),
            request: Some(Request {
                http: Some(HttpRequest {
                    id: String::from_utf8_lossy(bufs.ids.rid.value()).into_owned(),
                    method: text(req.method.clone()),
                    headers,
                    path: text(req.target.clone()),
                    host,
                    scheme: if link.peer.tls.is_some() {
                        "https"
                    } else {
                        "http"
                    }
                    .into(),
                    protocol: if link.http2() { "HTTP/2" } else { "HTTP/1.1" }.into(),
                }),
            }),
        }),
    };
    let encoded = message.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + encoded.len());
    framed.push(0);
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    let Ok(call) = http::Request::post(CHECK)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(Bytes::from(framed))
    else {
        return Verdict::Failed(Failure::BadAnswer);
    };
    let opts = origin(rq, bufs, client, target);
    let (worker, snap) = (link.worker, rq.snap);
    let service = snap.service(e.service);
    let asked = async {
        let bad = Failure::BadAnswer;
        let mut res = client::send_with(worker, snap, service, call, &opts)
            .await
            .map_err(|e| Failure::of(&e))?;
        if res.status() != 200 {
            return Err(bad);
        }
        let mut grpc_status = res
            .fields()
            .get("grpc-status")
            .map(|v| v.as_bytes().to_vec());
        let mut body = Vec::new();
        loop {
            match res.next().await.map_err(|e| Failure::of(&e))? {
                Event::Data(d) => {
                    if body.len() + d.len() > MAX_ANSWER {
                        return Err(bad);
                    }
                    body.extend_from_slice(&d);
                }
                Event::Trailers(t) => {
                    if let Some(v) = t.get("grpc-status") {
                        grpc_status = Some(v.as_bytes().to_vec());
                    }
                }
                Event::End => break,
            }
        }
        if grpc_status.as_deref() != Some(b"0") || body.len() < 5 || body[0] != 0 {
            return Err(bad);
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let answer = body
            .get(5..5 + len)
            .and_then(|m| CheckResponse::decode(m).ok())
            .ok_or(bad)?;
        Ok(decision(answer))
    };
    let decided = worker
        .deadlines
        .at(Instant::now() + e.timeout)
        .bound(asked)
        .await
        .map_err(|_| ());
    verdict(decided)
}

/// What a check's answer decides, as Envoy reads it.
fn decision(answer: CheckResponse) -> Decision {
    let code = answer.status.map_or(0, |s| s.code);
    if code == 0 {
        let ok = answer.ok_response.unwrap_or_default();
        let mut add = Vec::new();
        let mut remove = Vec::new();
        for name in &ok.headers_to_remove {
            if let Ok(n) = http::HeaderName::from_bytes(name.as_bytes()) {
                remove.push(n);
            }
        }
        for o in ok.headers {
            let Some(h) = o.header else { continue };
            let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(h.key.as_bytes()),
                http::HeaderValue::from_str(&h.value),
            ) else {
                continue;
            };
            if !o.append.is_some_and(|a| a.value) {
                remove.push(n.clone());
            }
            add.push((n, v));
        }
        return Decision::Allow { add, remove };
    }
    let denied = answer.denied_response.unwrap_or_default();
    let status = denied
        .status
        .map(|s| s.code)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (200..=599).contains(c))
        .unwrap_or(403);
    let mut fields = Fields::new();
    for o in &denied.headers {
        if let Some(h) = &o.header {
            let framing = ["content-length", "transfer-encoding", "connection"];
            if http::HeaderName::from_bytes(h.key.as_bytes()).is_ok()
                && !framing.iter().any(|f| h.key.eq_ignore_ascii_case(f))
                && !h.value.bytes().any(|b| b < b' ' && b != b'\t')
            {
                fields.push(h.key.to_ascii_lowercase().as_bytes(), h.value.as_bytes());
            }
        }
    }
    Decision::Deny {
        status,
        fields,
        body: Bytes::from(denied.body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ok_sets_and_appends_and_a_denial_defaults_to_403() {
        let hv = |k: &str, v: &str, append: Option<bool>| HeaderValueOption {
            header: Some(HeaderValue {
                key: k.into(),
                value: v.into(),
            }),
            append: append.map(|value| BoolValue { value }),
        };
        let ok = CheckResponse {
            status: Some(RpcStatus::default()),
            ok_response: Some(OkHttpResponse {
                headers: vec![hv("x-user", "ann", None), hv("x-tag", "b", Some(true))],
                headers_to_remove: vec!["x-drop".into()],
            }),
            ..Default::default()
        };
        // Through the wire form, as a server's answer comes.
        let ok = CheckResponse::decode(&ok.encode_to_vec()[..]).unwrap();
        let Decision::Allow { add, remove } = decision(ok) else {
            panic!("not allowed")
        };
        assert_eq!(add.len(), 2);
        assert_eq!(remove, ["x-drop", "x-user"]);
        let denied = CheckResponse {
            status: Some(RpcStatus {
                code: 16,
                message: "no".into(),
            }),
            ..Default::default()
        };
        let Decision::Deny { status, .. } = decision(denied) else {
            panic!("not denied")
        };
        assert_eq!(status, 403);
    }
}
