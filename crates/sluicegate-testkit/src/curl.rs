//! One-shot HTTP/2 requests for tests, made by the `curl` CLI (Debian's
//! curl with nghttp2): [`curl_request`] with any curl options (HTTP/2 over
//! TLS by ALPN, client certificates), and [`Proto`] to run one test body
//! over HTTP/1.1 and over HTTP/2 streams in the clear (prior knowledge)
//! alike. One request per curl run: curl 7.88 cannot
//! reuse an HTTP/2 connection. Paths are sent as given (`--path-as-is`).

use std::io;
use std::net::SocketAddr;
use std::process::Command;

use crate::client::{http_request, Response};

/// The protocol a test's requests go over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 on a fresh connection ([`http_request`]).
    Http1,
    /// HTTP/2 in the clear with prior knowledge (by [`curl_request`]).
    H2c,
}

impl Proto {
    /// One request over this protocol; panics on error. The answer's
    /// version is checked (`HTTP/1.1` or `HTTP/2`).
    pub fn request(
        self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        match self {
            Proto::Http1 => {
                let r = http_request(addr, method, path, headers, body);
                assert_eq!(r.version, "HTTP/1.1", "{method} {path}");
                r
            }
            Proto::H2c => {
                let url = format!("http://{addr}{path}");
                let r = curl_request(&["--http2-prior-knowledge"], &url, method, headers, body)
                    .unwrap_or_else(|e| panic!("{method} {url} over h2c failed: {e}"));
                assert_eq!(r.version, "HTTP/2", "{method} {url}");
                r
            }
        }
    }

    /// `GET path` over this protocol.
    pub fn get(self, addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
        self.request(addr, "GET", path, headers, b"")
    }
}

/// One request by curl with `args` (e.g. `--http2`, `--cacert`,
/// `--resolve`) to `url`. `headers` go as they are (`Host` becomes the
/// HTTP/2 `:authority`); `body` is sent with its length when not empty.
/// Bounded by curl's `--max-time 10`. The response is the last head curl
/// got (after any 1xx) and the body; an error when curl fails.
pub fn curl_request(
    args: &[&str],
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Response> {
    let dir = tempfile::tempdir()?;
    let (head_file, body_file, in_file) = (
        dir.path().join("head"),
        dir.path().join("body"),
        dir.path().join("in"),
    );
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "--path-as-is"])
        .args(args)
        .arg("-D")
        .arg(&head_file)
        .arg("-o")
        .arg(&body_file);
    if method == "HEAD" {
        cmd.arg("-I");
    } else {
        cmd.args(["-X", method]);
    }
    for (name, value) in headers {
        if value.is_empty() {
            cmd.args(["-H", &format!("{name};")]);
        } else {
            cmd.args(["-H", &format!("{name}: {value}")]);
        }
    }
    if !body.is_empty() {
        std::fs::write(&in_file, body)?;
        cmd.arg("--data-binary")
            .arg(format!("@{}", in_file.display()));
    }
    let out = cmd.arg(url).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "curl {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let head = std::fs::read_to_string(&head_file)?;
    let mut resp = parse_last_head(&head)
        .ok_or_else(|| io::Error::other(format!("no response head in {head:?}")))?;
    resp.body = std::fs::read(&body_file).unwrap_or_default();
    Ok(resp)
}

/// The last head (`HTTP/... STATUS` and its fields) in curl's `-D` dump
/// (trailers, if curl wrote any, are passed over).
fn parse_last_head(dump: &str) -> Option<Response> {
    let block = dump
        .split("\r\n\r\n")
        .filter(|b| b.starts_with("HTTP/"))
        .last()?;
    let mut lines = block.lines();
    let status_line = lines.next()?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next()?.to_string();
    let status = parts.next()?.trim().parse().ok()?;
    let reason = parts.next().unwrap_or("").trim().to_string();
    let headers = lines
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    Some(Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
        chunked: false,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_last_head;

    #[test]
    fn the_last_head_of_a_dump_is_parsed() {
        let dump = "HTTP/2 100 \r\n\r\nHTTP/2 403 \r\ncontent-type: application/json\r\n\
                    x-a: 1:2\r\nvia: HTTP/1.1 x\r\n\r\ngrpc-status: 0\r\n\r\n";
        let r = parse_last_head(dump).unwrap();
        assert_eq!((r.version.as_str(), r.status), ("HTTP/2", 403));
        assert_eq!(r.header("x-a"), Some("1:2"));
        assert_eq!(r.headers.len(), 3);
    }
}
