//! One `TestUpstream` connection: read pipelined requests (Content-Length or
//! chunked bodies, `Expect: 100-continue`), record each, and reply in order
//! until the peer, the reply plan or an idle timeout closes the connection.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::lock;
use super::reply::{self, Close, Plan};
use super::seen::{SeenRequest, State, LOG_CAP};
use crate::wire::{self, Reader};

/// Serves requests on `stream` until it closes.
pub(crate) fn serve(stream: TcpStream, connection: u64, state: &State) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let peer = stream.peer_addr().ok();
    let mut out = stream;
    let mut reader = Reader::new(read_half);
    let mut idle: Option<Duration> = None;
    loop {
        // A zero idle time closes at once unless the next request has begun
        // to arrive (a zero read timeout is not one the socket accepts).
        if idle == Some(Duration::ZERO) && reader.buffered() == 0 && !data_waiting(reader.get_ref())
        {
            break;
        }
        let _ = reader.get_ref().set_read_timeout(idle);
        let head = match reader.read_head() {
            Ok(Some(head)) => head,
            // Clean close, idle timeout, reset or an oversized head: just close.
            Ok(None) | Err(_) => break,
        };
        let _ = reader.get_ref().set_read_timeout(None);
        let mut req = match parse_head(&head) {
            Ok(req) => req,
            Err(msg) => {
                let _ = bad_request(&mut out, msg);
                break;
            }
        };
        req.connection = connection;
        req.peer = peer;
        if wants_continue(&req) && out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err() {
            break;
        }
        let body = if req.chunked {
            reader.read_chunked()
        } else {
            match wire::content_length(&req.headers) {
                Ok(n) => reader.read_exact_vec(n.unwrap_or(0)),
                Err(e) => {
                    let _ = bad_request(&mut out, &e.to_string());
                    break;
                }
            }
        };
        let Ok(body) = body else {
            break;
        };
        req.body = body;
        let plan = Plan::from_target(&req.target);
        let keep_alive = keep_alive(&req);
        record(state, req.clone());
        match reply::respond(&mut out, &plan, &req, state.id.as_deref(), keep_alive) {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                if plan.close != Close::Before {
                    let _ = out.shutdown(Shutdown::Write);
                }
                break;
            }
        }
        idle = plan.idle_close;
    }
}

/// Whether bytes (or an EOF) wait on `s`, looked at without blocking.
fn data_waiting(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let peeked = s.peek(&mut [0u8; 1]);
    let _ = s.set_nonblocking(false);
    peeked.is_ok()
}

fn record(state: &State, req: SeenRequest) {
    let mut log = lock(&state.log);
    if log.len() == LOG_CAP {
        log.pop_front();
    }
    log.push_back(req);
    // Counted under the lock so `requests_seen` never runs ahead of the log.
    state.requests.fetch_add(1, Ordering::SeqCst);
}

fn parse_head(head: &[u8]) -> Result<SeenRequest, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; wire::MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err("malformed request head"),
    }
    let version = match parsed.version {
        Some(0) => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let headers = wire::own_headers(parsed.headers);
    let chunked = wire::is_chunked(&headers);
    if !chunked && wire::header(&headers, "transfer-encoding").is_some() {
        return Err("unsupported transfer coding");
    }
    Ok(SeenRequest {
        method: parsed.method.unwrap_or_default().to_string(),
        target: parsed.path.unwrap_or_default().to_string(),
        version: version.to_string(),
        headers,
        body: Vec::new(),
        chunked,
        connection: 0,
        peer: None,
    })
}

fn wants_continue(req: &SeenRequest) -> bool {
    req.version == "HTTP/1.1"
        && wire::header(&req.headers, "expect")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
}

fn keep_alive(req: &SeenRequest) -> bool {
    if req.version == "HTTP/1.0" {
        wire::has_token(&req.headers, "connection", "keep-alive")
    } else {
        !wire::has_token(&req.headers, "connection", "close")
    }
}

fn bad_request(out: &mut TcpStream, msg: &str) -> io::Result<()> {
    let body = format!("{msg}\n");
    let reply = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    out.write_all(reply.as_bytes())?;
    out.shutdown(Shutdown::Write)
}
