//! The gRPC health protocol as an active health check (`type: grpc`): a
//! `grpc.health.v1.Health/Check` call on a new HTTP/2 connection (h2c in
//! the clear, h2 over the service's TLS), healthy when it answers
//! `SERVING` with status OK. The call runs on a small runtime of its own
//! on a blocking-pool thread, as the worker-side transport it reuses
//! (streams, TLS with its deadlines, the HTTP/2 I/O) is not `Send`.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluicegate_config::{HealthCheck, UpstreamProtocol};
use tokio::net::TcpStream;

use crate::balance::endpoint::EndpointState;
use crate::clock::deadline::Deadlines;
use crate::transport::h2io::{Flood, H2Io};
use crate::transport::stream::Stream;
use crate::transport::tls::client::UpstreamTlsRt;
use crate::transport::tls::TlsStream;

/// The method every check calls.
const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
/// Most response bytes a check reads (the answer is a few bytes).
const MAX_BODY: usize = 16 * 1024;
/// Most header bytes a check takes, head and trailers each.
const MAX_HEADERS: u32 = 16 * 1024;
/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;

/// Probes `ep` once with the gRPC health protocol for `check`'s service:
/// true when it answers `SERVING`, all within the check's timeout.
pub(super) async fn probe(
    ep: Arc<EndpointState>,
    tls: Option<Arc<UpstreamTlsRt>>,
    protocol: UpstreamProtocol,
    check: HealthCheck,
) -> bool {
    let timeout = check.timeout;
    let service = check.grpc_service.unwrap_or_default();
    let work = move || -> bool {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return false;
        };
        rt.block_on(async {
            let dl = Deadlines::new();
            let deadline = Instant::now() + timeout;
            let call = call(&dl, &ep, tls.as_deref(), protocol, &service, deadline);
            let result = tokio::select! {
                r = tokio::time::timeout(timeout, call) => r
                    .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into())),
                // The sweeper of the TLS handshake's deadline; never ends.
                _ = dl.run() => Err(io::ErrorKind::Interrupted.into()),
            };
            match result {
                Ok(serving) => serving,
                Err(e) => {
                    tracing::debug!(endpoint = %ep.name, error = %e, "gRPC health check failed");
                    false
                }
            }
        })
    };
    // The call bounds itself; this bounds the wait for a thread as well.
    matches!(
        tokio::time::timeout(timeout * 2, tokio::task::spawn_blocking(work)).await,
        Ok(Ok(true))
    )
}

/// Opens the connection and makes the call; `Ok(true)`: `SERVING`.
async fn call(
    dl: &Deadlines,
    ep: &EndpointState,
    tls: Option<&UpstreamTlsRt>,
    protocol: UpstreamProtocol,
    service: &str,
    deadline: Instant,
) -> io::Result<bool> {
    let tcp = TcpStream::connect(ep.addr).await?;
    tcp.set_nodelay(true)?;
    let (stream, scheme) = match tls {
        None => (Stream::Tcp(tcp), "http"),
        Some(tls) => {
            let name = tls.server_name(&ep.name).map_err(io::Error::other)?;
            let s = TlsStream::connect(tcp, tls.config.clone(), name, dl.at(deadline)).await?;
            if protocol == UpstreamProtocol::Auto && !s.alpn_h2() {
                return Err(io::Error::other("the endpoint chose HTTP/1.1 by ALPN"));
            }
            (Stream::Tls(Box::new(s)), "https")
        }
    };
    let io = H2Io::client(stream, Flood::default());
    let (send, mut connection) = h2::client::Builder::new()
        .max_header_list_size(MAX_HEADERS)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(io::Error::other)?;
    let exchange = exchange(send, &ep.name, scheme, service, deadline);
    // The connection is driven alongside the call; should it end first,
    // the call still ends (with what came, or the connection's error).
    let drive = async {
        if let Err(e) = (&mut connection).await {
            tracing::debug!(endpoint = %ep.name, error = %e, "gRPC health connection ended");
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        r = exchange => r,
        _ = drive => unreachable!("pending"),
    }
}

/// Sends the `Check` request and reads the answer.
async fn exchange(
    mut send: h2::client::SendRequest<Bytes>,
    authority: &str,
    scheme: &str,
    service: &str,
    deadline: Instant,
) -> io::Result<bool> {
    let uri = http::Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(CHECK_PATH)
        .build()
        .map_err(io::Error::other)?;
    let left = deadline.saturating_duration_since(Instant::now());
    let req = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, "sluicegate-health")
        .header("grpc-timeout", grpc_timeout(left))
        .body(())
        .map_err(io::Error::other)?;
    send = send.ready().await.map_err(io::Error::other)?;
    let (answer, mut body) = send.send_request(req, false).map_err(io::Error::other)?;
    body.send_data(request_message(service).into(), true)
        .map_err(io::Error::other)?;
    let answer = answer.await.map_err(io::Error::other)?;
    if answer.status() != http::StatusCode::OK {
        return Err(io::Error::other(format!("HTTP status {}", answer.status())));
    }
    // A trailers-only answer carries its status in the head.
    let head_status = answer.headers().get("grpc-status").cloned();
    if head_status.as_ref().is_some_and(|s| s != "0") {
        return Err(io::Error::other(grpc_error(answer.headers())));
    }
    let mut body = answer.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(io::Error::other)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if got.len() + chunk.len() > MAX_BODY {
            return Err(io::Error::other("answer too long"));
        }
        got.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.map_err(io::Error::other)?;
    // The status: in the trailers, else (trailers-only) the head's.
    if let Some(t) = trailers.as_ref().filter(|t| t.contains_key("grpc-status")) {
        if t["grpc-status"] != "0" {
            return Err(io::Error::other(grpc_error(t)));
        }
    } else if head_status.is_none() {
        return Err(io::Error::other("no grpc-status"));
    }
    match serving_status(&got) {
        Some(SERVING) => Ok(true),
        Some(s) => {
            tracing::debug!(service, status = s, "gRPC health: not serving");
            Ok(false)
        }
        None => Err(io::Error::other("malformed HealthCheckResponse")),
    }
}

/// What a non-OK answer said, for the log.
fn grpc_error(h: &http::HeaderMap) -> String {
    let text = |name: &str| {
        h.get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    format!(
        "grpc-status {} {}",
        text("grpc-status"),
        text("grpc-message")
    )
}

/// A `grpc-timeout` value for `left` (milliseconds, at least one).
fn grpc_timeout(left: Duration) -> String {
    format!("{}m", left.as_millis().clamp(1, 99_999_999))
}

/// The request as one gRPC message: flag 0 (not compressed), the length
/// (4 bytes, big-endian), then `HealthCheckRequest { string service = 1 }`
/// (field 1 left out when empty, as proto3 does).
fn request_message(service: &str) -> Vec<u8> {
    let mut msg = Vec::with_capacity(service.len() + 16);
    if !service.is_empty() {
        msg.push(0x0a); // field 1, length-delimited
        push_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(0);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at the start of `b`: the value and the bytes it took.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The `status` (field 1) of the one uncompressed `HealthCheckResponse`
/// message that makes up `body`; 0 (`UNKNOWN`) when the field is absent,
/// as proto3 leaves out defaults. `None`: not such a body.
fn serving_status(body: &[u8]) -> Option<u64> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let (len, mut msg) = rest.split_at(4);
    let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
    if msg.len() != len {
        return None;
    }
    let mut status = 0;
    while !msg.is_empty() {
        let (tag, n) = varint(msg)?;
        msg = &msg[n..];
        let skip = match tag & 7 {
            0 => {
                let (v, n) = varint(msg)?;
                if tag >> 3 == 1 {
                    status = v; // the last one wins
                }
                n
            }
            1 => 8,
            2 => {
                let (len, n) = varint(msg)?;
                n.checked_add(usize::try_from(len).ok()?)?
            }
            5 => 4,
            _ => return None,
        };
        if tag >> 3 == 0 || skip > msg.len() {
            return None;
        }
        msg = &msg[skip..];
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_messages() {
        assert_eq!(request_message(""), [0, 0, 0, 0, 0]);
        assert_eq!(
            request_message("test.Echo"),
            b"\0\0\0\0\x0b\x0a\x09test.Echo".as_slice()
        );
        // A name of 200 bytes: its length takes two varint bytes.
        let m = request_message(&"a".repeat(200));
        assert_eq!(&m[..8], [0, 0, 0, 0, 203, 0x0a, 0xc8, 0x01]);
        assert_eq!(m.len(), 5 + 203);
    }

    #[test]
    fn responses() {
        let frame = |msg: &[u8]| {
            let mut b = vec![0];
            b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            b.extend_from_slice(msg);
            b
        };
        assert_eq!(serving_status(&frame(&[0x08, 0x01])), Some(SERVING));
        assert_eq!(serving_status(&frame(&[0x08, 0x02])), Some(2));
        assert_eq!(serving_status(&frame(&[0x08, 0x03])), Some(3));
        // UNKNOWN is left out.
        assert_eq!(serving_status(&frame(&[])), Some(0));
        // Unknown fields of every wire type are skipped; the last status wins.
        let msg = [
            0x08, 0x02, 0x10, 0x96, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x22, 2, b'h', b'i', 0x2d,
            1, 2, 3, 4, 0x08, 0x01,
        ];
        assert_eq!(serving_status(&frame(&msg)), Some(SERVING));
        // Malformed: compressed, short, long, cut fields, field 0, groups.
        let mut compressed = frame(&[0x08, 0x01]);
        compressed[0] = 1;
        assert_eq!(serving_status(&compressed), None);
        assert_eq!(serving_status(&[]), None);
        assert_eq!(serving_status(&[0, 0, 0]), None);
        assert_eq!(serving_status(&[0, 0, 0, 0, 3, 0x08, 0x01]), None);
        assert_eq!(serving_status(&[0, 0, 0, 0, 1, 0x08, 0x01]), None);
        assert_eq!(serving_status(&frame(&[0x08])), None);
        assert_eq!(serving_status(&frame(&[0x08, 0x81])), None);
        assert_eq!(serving_status(&frame(&[0x22, 5, b'h'])), None);
        assert_eq!(serving_status(&frame(&[0x00, 0x01])), None);
        assert_eq!(serving_status(&frame(&[0x0b, 0x0c])), None);
        assert_eq!(serving_status(&frame(&[0x19, 1, 2])), None);
        // Two messages are not one answer.
        let mut two = frame(&[0x08, 0x01]);
        two.extend(frame(&[0x08, 0x01]));
        assert_eq!(serving_status(&two), None);
        assert_eq!(serving_status(&frame(&[0xff; 11])), None);
    }

    #[test]
    fn timeouts() {
        assert_eq!(grpc_timeout(Duration::from_millis(1500)), "1500m");
        assert_eq!(grpc_timeout(Duration::ZERO), "1m");
    }
}
