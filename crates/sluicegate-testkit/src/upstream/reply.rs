//! How `TestUpstream` answers: the reply plan read from the request target's
//! query string, and writing that reply (status, delays, close modes, chunked
//! or fixed-length bodies, the `/echo` JSON document).

use std::io::{self, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use super::seen::SeenRequest;

/// What the connection does after a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// Keep the connection if the request allows it.
    No,
    /// `close=1`: reply with `Connection: close`, then close.
    After,
    /// `close=before`: close without replying.
    Before,
    /// `close=mid`: promise 100 body bytes, send 10, close.
    Mid,
}

/// The reply asked for by one request target.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) echo: bool,
    pub(crate) status: u16,
    pub(crate) delay: Option<Duration>,
    pub(crate) body_delay: Option<Duration>,
    /// `first=N`: with `body_delay`, the body's first N bytes go with the
    /// head, the rest after the delay.
    pub(crate) first: usize,
    pub(crate) close: Close,
    pub(crate) chunked: bool,
    pub(crate) size: Option<usize>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) idle_close: Option<Duration>,
}

impl Plan {
    pub(crate) fn from_target(target: &str) -> Plan {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut plan = Plan {
            echo: path.starts_with("/echo"),
            status: 200,
            delay: None,
            body_delay: None,
            first: 0,
            close: Close::No,
            chunked: false,
            size: None,
            headers: Vec::new(),
            idle_close: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            let millis = || value.parse::<u64>().ok().map(Duration::from_millis);
            match key {
                "status" => {
                    if let Some(s) = value.parse().ok().filter(|s| (100..1000).contains(s)) {
                        plan.status = s;
                    }
                }
                "delay" => plan.delay = millis(),
                "body_delay" => plan.body_delay = millis(),
                "first" => plan.first = value.parse().unwrap_or(0),
                "idle_close_ms" => plan.idle_close = millis(),
                "close" => {
                    plan.close = match value.as_str() {
                        "before" => Close::Before,
                        "mid" => Close::Mid,
                        "0" | "" => Close::No,
                        _ => Close::After,
                    }
                }
                "chunked" => plan.chunked = value != "0",
                "size" => plan.size = value.parse().ok(),
                "header" => {
                    if let Some((n, v)) = value.split_once(':') {
                        plan.headers
                            .push((n.trim().to_string(), v.trim().to_string()));
                    }
                }
                _ => {}
            }
        }
        plan
    }
}

/// Writes the reply for `req`. Returns whether the connection may be reused.
pub(crate) fn respond(
    out: &mut TcpStream,
    plan: &Plan,
    req: &SeenRequest,
    id: Option<&str>,
    keep_alive: bool,
) -> io::Result<bool> {
    if plan.close == Close::Before {
        return Ok(false);
    }
    if let Some(d) = plan.delay {
        thread::sleep(d);
    }
    let body = if plan.echo {
        echo_json(req, id).into_bytes()
    } else if let Some(n) = plan.size {
        pattern(n)
    } else {
        b"ok\n".to_vec()
    };
    let bodyless_status = (100..200).contains(&plan.status) || matches!(plan.status, 204 | 304);
    let send_body = !bodyless_status && !req.method.eq_ignore_ascii_case("HEAD");
    let keep = keep_alive && plan.close == Close::No;

    let mut head = format!("HTTP/1.1 {} {}\r\n", plan.status, reason(plan.status));
    let content_type = if plan.echo {
        "application/json"
    } else {
        "text/plain"
    };
    head.push_str(&format!("Content-Type: {content_type}\r\n"));
    if let Some(id) = id {
        head.push_str(&format!("x-upstream-id: {id}\r\n"));
    }
    for (name, value) in &plan.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if plan.close == Close::Mid {
        head.push_str("Content-Length: 100\r\nConnection: close\r\n\r\n");
        write_flush(out, head.as_bytes())?;
        if let Some(d) = plan.body_delay {
            thread::sleep(d);
        }
        write_flush(out, &pattern(10))?;
        return Ok(false);
    }
    if !bodyless_status {
        if plan.chunked {
            head.push_str("Transfer-Encoding: chunked\r\n");
        } else {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
    }
    if !keep {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");

    let mut first = head.into_bytes();
    if !send_body {
        write_flush(out, &first)?;
        return Ok(keep);
    }
    if plan.body_delay.is_none() && !plan.chunked {
        first.extend_from_slice(&body);
        write_flush(out, &first)?;
        return Ok(keep);
    }
    let early = plan.first.min(body.len());
    let (early, late) = body.split_at(early);
    if plan.chunked && !early.is_empty() {
        first.extend_from_slice(format!("{:x}\r\n", early.len()).as_bytes());
        first.extend_from_slice(early);
        first.extend_from_slice(b"\r\n");
    } else {
        first.extend_from_slice(early);
    }
    write_flush(out, &first)?;
    if let Some(d) = plan.body_delay {
        thread::sleep(d);
    }
    if plan.chunked {
        write_chunks(out, late)?;
    } else {
        write_flush(out, late)?;
    }
    Ok(keep)
}

/// Sends `body` as up to four chunks, each in its own write, then the last chunk.
fn write_chunks(out: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let piece = body.len().div_ceil(4).max(1);
    for chunk in body.chunks(piece) {
        let mut buf = format!("{:x}\r\n", chunk.len()).into_bytes();
        buf.extend_from_slice(chunk);
        buf.extend_from_slice(b"\r\n");
        write_flush(out, &buf)?;
    }
    write_flush(out, b"0\r\n\r\n")
}

fn write_flush(out: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}

/// A deterministic body of `len` bytes: `abc...xyzabc...`.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The `/echo` document: method, target, version, headers in order, body.
pub(crate) fn echo_json(req: &SeenRequest, id: Option<&str>) -> String {
    let mut s = String::with_capacity(256 + req.body.len());
    s.push_str("{\"method\":");
    json_str(&mut s, &req.method);
    s.push_str(",\"target\":");
    json_str(&mut s, &req.target);
    s.push_str(",\"version\":");
    json_str(&mut s, &req.version);
    s.push_str(",\"headers\":[");
    for (i, (name, value)) in req.headers.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push('[');
        json_str(&mut s, name);
        s.push(',');
        json_str(&mut s, value);
        s.push(']');
    }
    s.push_str(&format!(
        "],\"body_len\":{},\"chunked\":{},\"connection\":{},\"upstream_id\":",
        req.body.len(),
        req.chunked,
        req.connection
    ));
    match id {
        Some(id) => json_str(&mut s, id),
        None => s.push_str("null"),
    }
    s.push_str(",\"body\":");
    json_str(&mut s, &String::from_utf8_lossy(&req.body));
    s.push_str("}\n");
    s
}

fn json_str(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reason phrase for the status codes tests use; a generic one otherwise.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_from_query() {
        let p = Plan::from_target(
            "/x?status=503&delay=20&chunked=1&size=7&header=x-a:b%20c&header=x-d:e&close=mid",
        );
        assert!(!p.echo);
        assert_eq!(p.status, 503);
        assert_eq!(p.delay, Some(Duration::from_millis(20)));
        assert!(p.chunked);
        assert_eq!(p.size, Some(7));
        assert_eq!(p.close, Close::Mid);
        assert_eq!(
            p.headers,
            vec![
                ("x-a".to_string(), "b c".to_string()),
                ("x-d".to_string(), "e".to_string())
            ]
        );
        assert!(Plan::from_target("/echo/more").echo);
        assert_eq!(Plan::from_target("/?close=1").close, Close::After);
        assert_eq!(Plan::from_target("/?close=before").close, Close::Before);
    }

    #[test]
    fn pattern_and_json() {
        assert_eq!(pattern(28), b"abcdefghijklmnopqrstuvwxyzab");
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n\u{1}");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(percent_decode("a%2Fb%zz%4"), "a/b%zz%4");
    }
}
