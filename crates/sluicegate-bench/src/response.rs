//! An incremental HTTP/1.x response reader: fed whatever the socket gave, it
//! says how many bytes it used and when a response ended, across any split
//! of the bytes and with several responses in one read (pipelining).

/// How the body of the response being read ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a complete head.
    Head,
    /// `remaining` bytes of a Content-Length body.
    Fixed { remaining: u64 },
    /// A chunk-size line.
    ChunkSize,
    /// `remaining` bytes of chunk data, then its CRLF.
    ChunkData { remaining: u64 },
    /// The CRLF after chunk data (`seen` of its two bytes).
    ChunkEnd { seen: u8 },
    /// Trailer lines after the last chunk, up to an empty line.
    Trailers,
    /// The body ends when the connection closes.
    UntilClose,
}

/// A response read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub status: u16,
    /// The server will close the connection after this response.
    pub close: bool,
    /// Body bytes (after chunked decoding: data bytes only).
    pub body_len: u64,
}

/// What the reader made of the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// All the bytes were used and the response is not complete.
    More,
    /// A response ended after `used` bytes.
    Done { used: usize, done: Done },
}

/// Why the bytes are not an HTTP/1.x response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// The head may be at most this long.
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

#[derive(Debug)]
pub struct Reader {
    state: State,
    status: u16,
    close: bool,
    body_len: u64,
    /// Whether the request being answered was HEAD (the response has no body).
    head_request: bool,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

impl Reader {
    pub fn new() -> Reader {
        Reader {
            state: State::Head,
            status: 0,
            close: false,
            body_len: 0,
            head_request: false,
        }
    }

    /// True until the first byte of a head is used.
    pub fn at_start(&self) -> bool {
        self.state == State::Head
    }

    /// True while reading a body that ends only with the connection.
    pub fn until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// True while a declared-length body or a chunked body is incomplete.
    pub fn in_body(&self) -> bool {
        !matches!(self.state, State::Head | State::UntilClose)
    }

    /// Starts on the response to the next request; `head_request` if it was
    /// a HEAD (no body follows the head).
    pub fn expect(&mut self, head_request: bool) {
        self.head_request = head_request;
    }

    /// The connection closed: ends a close-delimited body.
    pub fn finish_at_close(&mut self) -> Option<Done> {
        if self.state == State::UntilClose {
            self.state = State::Head;
            return Some(Done {
                status: self.status,
                close: true,
                body_len: self.body_len,
            });
        }
        None
    }

    /// Uses bytes of `buf` from the start. A head is only used whole, so
    /// `More` with an incomplete head means: read more, keep the bytes.
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, Option<Done>), Malformed> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Head => {
                    let used = match self.parse_head(&buf[pos..])? {
                        Some(n) => n,
                        None => return Ok((pos, None)),
                    };
                    pos += used;
                    if let Some(done) = self.maybe_done() {
                        return Ok((pos, Some(done)));
                    }
                }
                State::Fixed { remaining } => {
                    let take = remaining.min((buf.len() - pos) as u64);
                    pos += take as usize;
                    self.body_len += take;
                    self.state = State::Fixed {
                        remaining: remaining - take,
                    };
                    if remaining == take {
                        return Ok((pos, Some(self.end())));
                    }
                    return Ok((pos, None));
                }
                State::ChunkSize => {
                    match httparse::parse_chunk_size(&buf[pos..]) {
                        Ok(httparse::Status::Complete((n, size))) => {
                            pos += n;
                            self.state = if size == 0 {
                                State::Trailers
                            } else {
                                State::ChunkData { remaining: size }
                            };
                        }
                        Ok(httparse::Status::Partial) => {
                            if buf.len() - pos > 1024 {
                                return Err(Malformed("chunk size line too long"));
                            }
                            return Ok((pos, None));
                        }
                        Err(_) => return Err(Malformed("bad chunk size")),
                    };
                }
                State::ChunkData { remaining } => {
                    let take = remaining.min((buf.len() - pos) as u64);
                    pos += take as usize;
                    self.body_len += take;
                    if take == remaining {
                        self.state = State::ChunkEnd { seen: 0 };
                    } else {
                        self.state = State::ChunkData {
                            remaining: remaining - take,
                        };
                        return Ok((pos, None));
                    }
                }
                State::ChunkEnd { seen } => {
                    let Some(&b) = buf.get(pos) else {
                        return Ok((pos, None));
                    };
                    let want = if seen == 0 { b'\r' } else { b'\n' };
                    if b != want {
                        return Err(Malformed("chunk data not followed by CRLF"));
                    }
                    pos += 1;
                    self.state = if seen == 0 {
                        State::ChunkEnd { seen: 1 }
                    } else {
                        State::ChunkSize
                    };
                }
                State::Trailers => {
                    let rest = &buf[pos..];
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() >= MAX_HEAD {
                            return Err(Malformed("trailers too long"));
                        }
                        return Ok((pos, None));
                    };
                    let line = &rest[..nl];
                    pos += nl + 1;
                    if line.is_empty() || line == b"\r" {
                        return Ok((pos, Some(self.end())));
                    }
                }
                State::UntilClose => {
                    self.body_len += (buf.len() - pos) as u64;
                    return Ok((buf.len(), None));
                }
            }
        }
    }

    fn end(&mut self) -> Done {
        self.state = State::Head;
        Done {
            status: self.status,
            close: self.close,
            body_len: self.body_len,
        }
    }

    /// After a head: a response without a body is done now.
    fn maybe_done(&mut self) -> Option<Done> {
        match self.state {
            State::Fixed { remaining: 0 } => Some(self.end()),
            State::Head => None,
            _ => None,
        }
    }

    /// Parses a head at the start of `buf`: `None` if incomplete.
    fn parse_head(&mut self, buf: &[u8]) -> Result<Option<usize>, Malformed> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let used = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if buf.len() >= MAX_HEAD {
                    return Err(Malformed("response head too long"));
                }
                return Ok(None);
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Malformed("too many response headers"))
            }
            Err(_) => return Err(Malformed("malformed response head")),
        };
        let status = resp.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            // An interim response: the final one follows; state stays Head.
            return Ok(Some(used));
        }
        let http10 = resp.version == Some(0);
        let mut close = http10;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or(Malformed("bad Content-Length"))?;
                if length.is_some_and(|l| l != v) {
                    return Err(Malformed("conflicting Content-Length"));
                }
                length = Some(v);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                        close = false;
                    }
                }
            }
        }
        self.status = status;
        self.close = close;
        self.body_len = 0;
        let bodiless = self.head_request || status == 204 || status == 304;
        self.state = if bodiless {
            State::Fixed { remaining: 0 }
        } else if chunked {
            State::ChunkSize
        } else if let Some(len) = length {
            State::Fixed { remaining: len }
        } else {
            self.close = true;
            State::UntilClose
        };
        Ok(Some(used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` split at every `step` bytes, keeping unused bytes the way
    /// a connection's buffer does; returns the responses.
    fn feed_split(bytes: &[u8], step: usize, head_request: bool) -> Vec<Done> {
        let mut r = Reader::new();
        r.expect(head_request);
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for piece in bytes.chunks(step) {
            pending.extend_from_slice(piece);
            loop {
                let (used, done) = r.feed(&pending).unwrap();
                pending.drain(..used);
                match done {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
        }
        if let Some(d) = r.finish_at_close() {
            out.push(d);
        }
        out
    }

    const TWO: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n";

    #[test]
    fn pipelined_responses_in_any_split() {
        for step in [1, 2, 3, 7, 16, 1000] {
            let got = feed_split(TWO, step, false);
            assert_eq!(
                got,
                vec![
                    Done {
                        status: 200,
                        close: false,
                        body_len: 5
                    },
                    Done {
                        status: 500,
                        close: false,
                        body_len: 5
                    },
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn close_delimited_and_http10() {
        let got = feed_split(b"HTTP/1.0 200 OK\r\n\r\nabcdef", 4, false);
        assert_eq!(
            got,
            vec![Done {
                status: 200,
                close: true,
                body_len: 6
            }]
        );
        let got = feed_split(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            5,
            false,
        );
        assert_eq!(
            got,
            vec![Done {
                status: 200,
                close: false,
                body_len: 0
            }]
        );
        let got = feed_split(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
            5,
            false,
        );
        assert_eq!(
            got,
            vec![Done {
                status: 200,
                close: true,
                body_len: 1
            }]
        );
    }

    #[test]
    fn bodiless_responses() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 75\r\n\r\n";
        assert_eq!(
            feed_split(head, 3, true),
            vec![Done {
                status: 200,
                close: false,
                body_len: 0
            }]
        );
        let r204 = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(
            feed_split(r204, 3, false),
            vec![Done {
                status: 204,
                close: false,
                body_len: 0
            }]
        );
        let interim =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(
            feed_split(interim, 4, false),
            vec![Done {
                status: 201,
                close: false,
                body_len: 2
            }]
        );
    }

    #[test]
    fn short_body_is_seen_as_in_body() {
        let mut r = Reader::new();
        let (used, done) = r
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            .unwrap();
        assert_eq!(used, 50);
        assert!(done.is_none());
        assert!(r.in_body());
        assert!(r.finish_at_close().is_none());
    }

    #[test]
    fn malformed_responses() {
        let mut r = Reader::new();
        assert!(r
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
            .is_err());
        let mut r = Reader::new();
        assert!(r.feed(b"garbage\r\n\r\n").is_err());
        let mut r = Reader::new();
        assert!(r
            .feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            .is_err());
        let mut r = Reader::new();
        let cl = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert!(r.feed(cl).is_err());
    }
}
