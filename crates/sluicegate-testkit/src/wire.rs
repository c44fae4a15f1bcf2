//! Byte-level HTTP/1.1 framing shared by the test upstream and the clients:
//! a buffered reader that yields message heads, fixed-length bodies, chunked
//! bodies and bodies delimited by close, plus header lookups.

use std::io::{self, Read};

/// Largest message head either side accepts before giving up.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most headers parsed in one message head.
pub(crate) const MAX_HEADERS: usize = 128;
const MAX_LINE: usize = 8 * 1024;

/// A reader that keeps bytes read past the current message (pipelining).
pub(crate) struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: Read> Reader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Reader {
            inner,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    pub(crate) fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Bytes read and not yet taken (the start of a pipelined message).
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Reads more bytes into the buffer; `Ok(0)` means end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.inner.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for more input, buffering it. `Ok(false)` on end of stream.
    pub(crate) fn fill_more(&mut self) -> io::Result<bool> {
        Ok(self.fill()? > 0)
    }

    /// Reads one message head through its blank line and returns it.
    /// `Ok(None)` means the stream ended cleanly before any byte of a new head.
    pub(crate) fn read_head(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut scanned = 0;
        loop {
            if let Some(end) = head_end(&self.buf, scanned) {
                return Ok(Some(self.buf.drain(..end).collect()));
            }
            scanned = self.buf.len().saturating_sub(3);
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("message head too large"));
            }
            if self.fill()? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(eof("stream ended inside a message head"));
            }
        }
    }

    /// Reads exactly `n` body bytes.
    pub(crate) fn read_exact_vec(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(eof("stream ended inside a fixed-length body"));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads one line and returns it without its line ending.
    fn read_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.buf.len() > MAX_LINE {
                return Err(invalid("line too long"));
            }
            if self.fill()? == 0 {
                return Err(eof("stream ended inside a line"));
            }
        }
    }

    /// Reads and decodes a chunked body, discarding chunk extensions and
    /// trailer fields.
    pub(crate) fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line()?;
            let size = parse_chunk_size(&line)?;
            if size == 0 {
                break;
            }
            let data = self.read_exact_vec(size)?;
            body.extend_from_slice(&data);
            if !self.read_line()?.is_empty() {
                return Err(invalid("chunk data not followed by CRLF"));
            }
        }
        // Trailer section: lines up to an empty one.
        while !self.read_line()?.is_empty() {}
        Ok(body)
    }

    /// Reads until the peer closes; a read timeout or reset also ends the body.
    pub(crate) fn read_to_close(&mut self) -> io::Result<Vec<u8>> {
        loop {
            match self.fill() {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if is_timeout(&e) || is_reset(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }
}

/// Index just past the blank line ending a head (CRLF or bare LF endings),
/// searching from `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

fn parse_chunk_size(line: &[u8]) -> io::Result<usize> {
    let end = line.iter().position(|&b| b == b';').unwrap_or(line.len());
    let digits = std::str::from_utf8(&line[..end])
        .map_err(|_| invalid("chunk size is not ASCII"))?
        .trim_matches([' ', '\t']);
    if digits.is_empty() || digits.len() > 15 {
        return Err(invalid("bad chunk size"));
    }
    usize::from_str_radix(digits, 16).map_err(|_| invalid("bad chunk size"))
}

/// Converts httparse headers into owned (name, value) pairs, in order.
pub(crate) fn own_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// First value of header `name` (case-insensitive).
pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Every value of header `name` (case-insensitive), in order.
pub(crate) fn header_all<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// True when the final transfer coding is `chunked`.
pub(crate) fn is_chunked(headers: &[(String, String)]) -> bool {
    header_all(headers, "transfer-encoding")
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .rfind(|t| !t.is_empty())
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
}

/// The Content-Length, if present; an error when values are invalid or differ.
pub(crate) fn content_length(headers: &[(String, String)]) -> io::Result<Option<usize>> {
    let mut found: Option<usize> = None;
    for value in header_all(headers, "content-length") {
        for part in value.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("invalid Content-Length"));
            }
            let n: usize = part
                .parse()
                .map_err(|_| invalid("invalid Content-Length"))?;
            if found.is_some_and(|f| f != n) {
                return Err(invalid("conflicting Content-Length values"));
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// Whether a header holds `token` in its comma-separated list.
pub(crate) fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    header_all(headers, name)
        .iter()
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

pub(crate) fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

pub(crate) fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn eof(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, msg.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pipelined_heads_and_bodies() {
        let input: &[u8] = b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\n\n";
        let mut r = Reader::new(input);
        let head = r.read_head().unwrap().unwrap();
        assert!(head.ends_with(b"3\r\n\r\n"));
        assert_eq!(r.read_exact_vec(3).unwrap(), b"abc");
        assert_eq!(r.read_head().unwrap().unwrap(), b"GET /b HTTP/1.1\n\n");
        assert!(r.read_head().unwrap().is_none());
    }

    #[test]
    fn decodes_chunked_with_extensions_and_trailers() {
        let input: &[u8] = b"3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\nrest";
        let mut r = Reader::new(input);
        assert_eq!(r.read_chunked().unwrap(), b"abc0123456789");
        assert_eq!(r.read_to_close().unwrap(), b"rest");
    }

    #[test]
    fn framing_headers() {
        let h = vec![
            ("Transfer-Encoding".to_string(), "gzip, chunked".to_string()),
            ("content-length".to_string(), "5, 5".to_string()),
        ];
        assert!(is_chunked(&h));
        assert_eq!(content_length(&h).unwrap(), Some(5));
        let bad = vec![("Content-Length".to_string(), "5, 6".to_string())];
        assert!(content_length(&bad).is_err());
    }
}
