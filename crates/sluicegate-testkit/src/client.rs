//! Blocking HTTP/1.1 clients for tests: one-shot requests over a fresh
//! connection ([`http_get`], [`http_request`]), a raw byte exchange
//! ([`raw_exchange`]) and a [`KeepAliveClient`] for keep-alive and
//! pipelining tests. All use std sockets with a 5 s default timeout.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::wire::{self, Reader};

/// Connect, read and write timeout of the helpers here.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed response. Interim (1xx) responses are returned as they come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    pub status: u16,
    pub reason: String,
    /// Header fields in order, names with their original case.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
    /// Whether the body came with `Transfer-Encoding: chunked`.
    pub chunked: bool,
}

impl Response {
    /// First value of header `name`, case-insensitive.
    pub fn header(&self, name: &str) -> Option<&str> {
        wire::header(&self.headers, name)
    }

    /// Every value of header `name`, case-insensitive, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        wire::header_all(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` on a fresh connection with `Connection: close`; panics on error.
pub fn http_get(addr: impl ToSocketAddrs, path: &str, headers: &[(&str, &str)]) -> Response {
    http_request(addr, "GET", path, headers, b"")
}

/// Like [`http_get`], returning the error instead of panicking.
pub fn try_http_get(
    addr: impl ToSocketAddrs,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<Response> {
    try_http_request(addr, "GET", path, headers, b"")
}

/// One request on a fresh connection with `Connection: close`; panics on error.
/// `Host` and `Content-Length` are added unless `headers` has them.
pub fn http_request(
    addr: impl ToSocketAddrs,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let addr = resolve(addr).expect("resolve address");
    try_http_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path} failed: {e}"))
}

/// Like [`http_request`], returning the error instead of panicking.
pub fn try_http_request(
    addr: impl ToSocketAddrs,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    let mut client = KeepAliveClient::connect(addr)?;
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if wire_header(headers, "connection").is_none() {
        all.push(("Connection", "close"));
    }
    client.send(method, path, &all, body)?;
    loop {
        let resp = client.read_response_for(method)?;
        if !(100..200).contains(&resp.status) || resp.status == 101 {
            return Ok(resp);
        }
    }
}

/// Writes `bytes` (without half-closing) and reads until the peer closes or
/// no byte arrives for `read_timeout`. Write and read errors end the exchange
/// and return what was read; a failed connect panics.
pub fn raw_exchange(addr: impl ToSocketAddrs, bytes: &[u8], read_timeout: Duration) -> Vec<u8> {
    let addr = resolve(addr).expect("resolve address");
    let mut stream = TcpStream::connect_timeout(&addr, DEFAULT_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to {addr} failed: {e}"));
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(DEFAULT_TIMEOUT));
    let _ = stream.set_read_timeout(Some(read_timeout));
    let _ = stream.write_all(bytes);
    Reader::new(stream).read_to_close().unwrap_or_default()
}

/// One connection carrying several requests, answered in order.
pub struct KeepAliveClient {
    addr: SocketAddr,
    writer: TcpStream,
    reader: Reader<TcpStream>,
}

impl KeepAliveClient {
    /// Connects with [`DEFAULT_TIMEOUT`] for connect, reads and writes.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<KeepAliveClient> {
        let addr = resolve(addr)?;
        let writer = TcpStream::connect_timeout(&addr, DEFAULT_TIMEOUT)?;
        writer.set_nodelay(true)?;
        writer.set_read_timeout(Some(DEFAULT_TIMEOUT))?;
        writer.set_write_timeout(Some(DEFAULT_TIMEOUT))?;
        let reader = Reader::new(writer.try_clone()?);
        Ok(KeepAliveClient {
            addr,
            writer,
            reader,
        })
    }

    /// The underlying stream (for timeouts, shutdown, local address).
    pub fn stream(&self) -> &TcpStream {
        &self.writer
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.writer.set_read_timeout(timeout)
    }

    /// Writes bytes as they are (one or more requests, or a fragment).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    /// Writes one request. `Host` and (when a body is given or the method is
    /// POST/PUT/PATCH) `Content-Length` are added unless `headers` has them.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut req = format!("{method} {path} HTTP/1.1\r\n");
        if wire_header(headers, "host").is_none() {
            req.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        let framed = wire_header(headers, "content-length").is_some()
            || wire_header(headers, "transfer-encoding").is_some();
        let wants_length = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
        if !framed && wants_length {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.send_raw(&bytes)
    }

    /// Sends one request and reads its final response (1xx skipped).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        self.send(method, path, headers, body)?;
        loop {
            let resp = self.read_response_for(method)?;
            if !(100..200).contains(&resp.status) || resp.status == 101 {
                return Ok(resp);
            }
        }
    }

    /// `GET path` on this connection.
    pub fn get(&mut self, path: &str) -> io::Result<Response> {
        self.request("GET", path, &[], b"")
    }

    /// Reads the next response to a request that was not HEAD.
    pub fn read_response(&mut self) -> io::Result<Response> {
        self.read_response_for("GET")
    }

    /// Reads the next response to a request with `method` (HEAD has no body).
    pub fn read_response_for(&mut self, method: &str) -> io::Result<Response> {
        let head = self.reader.read_head()?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            )
        })?;
        let mut headers = [httparse::EMPTY_HEADER; wire::MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut headers);
        match parsed.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(wire::invalid("incomplete response head")),
            Err(e) => return Err(wire::invalid(&format!("bad response head: {e}"))),
        }
        let status = parsed.code.unwrap_or_default();
        let mut resp = Response {
            version: if parsed.version == Some(0) {
                "HTTP/1.0"
            } else {
                "HTTP/1.1"
            }
            .to_string(),
            status,
            reason: parsed.reason.unwrap_or_default().to_string(),
            headers: wire::own_headers(parsed.headers),
            body: Vec::new(),
            chunked: false,
        };
        let bodyless = method.eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&status)
            || status == 204
            || status == 304;
        if bodyless {
            return Ok(resp);
        }
        if wire::is_chunked(&resp.headers) {
            resp.chunked = true;
            resp.body = self.reader.read_chunked()?;
        } else if let Some(n) = wire::content_length(&resp.headers)? {
            resp.body = self.reader.read_exact_vec(n)?;
        } else {
            resp.body = self.reader.read_to_close()?;
        }
        Ok(resp)
    }

    /// True if the peer closes the connection within `timeout`. Bytes that
    /// arrive meanwhile are kept for the next `read_response`.
    pub fn wait_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            let _ = self.writer.set_read_timeout(Some(left));
            match self.reader.fill_more() {
                Ok(false) => break true,
                Ok(true) => {}
                Err(e) if wire::is_reset(&e) => break true,
                Err(_) => break false,
            }
        };
        let _ = self.writer.set_read_timeout(Some(DEFAULT_TIMEOUT));
        result
    }

    /// Half-closes the writing side (the peer sees end of stream).
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.writer.shutdown(Shutdown::Write)
    }
}

fn wire_header<'a>(headers: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

fn resolve(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing"))
}
