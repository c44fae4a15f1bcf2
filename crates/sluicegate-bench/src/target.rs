//! What to send: the target URL(s), the scenario file (several URLs with
//! weights, methods, headers and bodies), and the request bytes built once
//! before the run.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

/// A parsed `http://host[:port]/path?query` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// Path and query, at least "/".
    pub target: String,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, String> {
        let rest = if let Some(r) = text.strip_prefix("http://") {
            r
        } else if text.starts_with("https://") {
            return Err(format!("{text}: https is not supported; use http://"));
        } else {
            return Err(format!("{text}: the URL must start with http://"));
        };
        let (authority, target) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let target = target.split('#').next().unwrap_or("/").to_string();
        if authority.contains('@') {
            return Err(format!("{text}: user info in the URL is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{text}: unclosed [ in the host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("{text}: bad port {p:?}"))?,
                None if after.is_empty() => 80,
                None => return Err(format!("{text}: junk after the host")),
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("{text}: bad port {p:?}"))?,
                ),
                None => (authority.to_string(), 80),
            }
        };
        if host.is_empty() {
            return Err(format!("{text}: no host"));
        }
        if host.bytes().any(|b| b <= b' ' || b"/?#[]@\\".contains(&b)) {
            return Err(format!(
                "{text}: the host has characters a host cannot have"
            ));
        }
        if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("{text}: the path has spaces or control characters"));
        }
        Ok(Url { host, port, target })
    }

    /// The Host header's value.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host (once, before the run).
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("{} has no address", self.host))
    }
}

/// One kind of request of the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    pub url: Url,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub weight: u32,
}

/// A request ready to write.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub bytes: Vec<u8>,
    pub head: bool,
    pub weight: u32,
}

impl RequestSpec {
    /// The request's bytes. `keep_alive: false` asks the server to close
    /// after answering (ab without `-k`).
    pub fn prepare(&self, keep_alive: bool) -> Prepared {
        let mut out = Vec::with_capacity(128 + self.body.len());
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.url.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let has = |name: &str| {
            self.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        if !has("host") {
            out.extend_from_slice(b"Host: ");
            out.extend_from_slice(self.url.authority().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        for (n, v) in &self.headers {
            if n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("connection") {
                continue;
            }
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !keep_alive {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        if !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        Prepared {
            bytes: out,
            head: self.method == "HEAD",
            weight: self.weight,
        }
    }
}

/// Checks a method token and a header line's parts.
pub fn check_method(m: &str) -> Result<(), String> {
    if m.is_empty()
        || !m
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(format!("method {m:?} is not an HTTP token"));
    }
    Ok(())
}

/// Splits `Name: value` (the `-H` form).
pub fn parse_header(line: &str) -> Result<(String, String), String> {
    let (n, v) = line
        .split_once(':')
        .ok_or_else(|| format!("header {line:?} is not Name: value"))?;
    let blank = |c: char| c == ' ' || c == '\t';
    let (n, v) = (n.trim_matches(blank), v.trim_matches(blank));
    check_method(n).map_err(|_| format!("header name {n:?} is not an HTTP token"))?;
    if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("header {n}: the value has CR, LF or NUL"));
    }
    Ok((n.to_string(), v.to_string()))
}

/// Reads a scenario file:
///
/// ```yaml
/// requests:
///   - url: http://127.0.0.1:8080/items   # or `path: /items` beside a base URL
///     weight: 3
///     method: POST
///     headers: { Content-Type: application/json }
///     body: '{"a": 1}'           # or body_file: item.json (relative to the file)
/// ```
///
/// `base` (the command line URL, if any) supplies the host for `path:`
/// entries; `defaults` is the command line's method, headers and body.
pub fn load_scenario(
    path: &Path,
    base: Option<&Url>,
    defaults: &RequestSpec,
) -> Result<Vec<RequestSpec>, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| format!("{name}: {e}"))?;
    let doc = docs
        .into_iter()
        .next()
        .ok_or_else(|| format!("{name}: empty file"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let entries = doc["requests"]
        .as_vec()
        .ok_or_else(|| format!("{name}: `requests` must be a list"))?;
    if entries.is_empty() {
        return Err(format!("{name}: `requests` is empty"));
    }
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("{name}: requests[{i}]");
        let Some(map) = e.as_hash() else {
            return Err(format!("{at}: must be a map"));
        };
        for key in map.keys() {
            let k = key.as_str().unwrap_or("");
            if ![
                "url",
                "path",
                "weight",
                "method",
                "headers",
                "body",
                "body_file",
            ]
            .contains(&k)
            {
                return Err(format!("{at}: unknown field {key:?}"));
            }
        }
        let url = match (str_field(e, "url", &at)?, str_field(e, "path", &at)?) {
            (Some(u), None) => Url::parse(&u).map_err(|m| format!("{at}.url: {m}"))?,
            (None, Some(p)) => {
                let base =
                    base.ok_or_else(|| format!("{at}.path: needs a URL on the command line"))?;
                if !p.starts_with('/') {
                    return Err(format!("{at}.path: must start with /"));
                }
                Url {
                    target: p,
                    ..base.clone()
                }
            }
            (Some(_), Some(_)) => return Err(format!("{at}: give url or path, not both")),
            (None, None) => return Err(format!("{at}: needs url or path")),
        };
        let mut spec = RequestSpec {
            url,
            ..defaults.clone()
        };
        if let Some(m) = str_field(e, "method", &at)? {
            check_method(&m).map_err(|m| format!("{at}.method: {m}"))?;
            spec.method = m;
        }
        match &e["weight"] {
            Yaml::BadValue => {}
            Yaml::Integer(w) if *w >= 1 && *w <= 1_000_000 => spec.weight = *w as u32,
            other => {
                return Err(format!(
                    "{at}.weight: must be a whole number 1..1000000, not {other:?}"
                ))
            }
        }
        match &e["headers"] {
            Yaml::BadValue => {}
            Yaml::Hash(h) => {
                for (k, v) in h {
                    let (Some(k), Some(v)) = (k.as_str(), scalar(v)) else {
                        return Err(format!("{at}.headers: names and values must be strings"));
                    };
                    let pair = parse_header(&format!("{k}: {v}"))
                        .map_err(|m| format!("{at}.headers: {m}"))?;
                    spec.headers
                        .retain(|(n, _)| !n.eq_ignore_ascii_case(&pair.0));
                    spec.headers.push(pair);
                }
            }
            _ => return Err(format!("{at}.headers: must be a map")),
        }
        match (str_field(e, "body", &at)?, str_field(e, "body_file", &at)?) {
            (Some(b), None) => spec.body = b.into_bytes(),
            (None, Some(f)) => {
                let p = dir.join(f);
                spec.body = std::fs::read(&p)
                    .map_err(|err| format!("{at}.body_file: {}: {err}", p.display()))?;
            }
            (Some(_), Some(_)) => return Err(format!("{at}: give body or body_file, not both")),
            (None, None) => {}
        }
        out.push(spec);
    }
    let first = (&out[0].url.host, out[0].url.port);
    if let Some(other) = out.iter().find(|s| (&s.url.host, s.url.port) != first) {
        return Err(format!(
            "{name}: every request must go to the same host and port ({}:{} vs {}:{})",
            first.0, first.1, other.url.host, other.url.port
        ));
    }
    Ok(out)
}

fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn str_field(e: &Yaml, key: &str, at: &str) -> Result<Option<String>, String> {
    match &e[key] {
        Yaml::BadValue => Ok(None),
        v => scalar(v)
            .map(Some)
            .ok_or_else(|| format!("{at}.{key}: must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/a/b?x=1#frag").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("127.0.0.1", 8080, "/a/b?x=1")
        );
        assert_eq!(u.authority(), "127.0.0.1:8080");
        let u = Url::parse("http://localhost").unwrap();
        assert_eq!(
            (u.port, u.target.as_str(), u.authority().as_str()),
            (80, "/", "localhost")
        );
        let u = Url::parse("http://[::1]:81?q").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("::1", 81, "/?q")
        );
        assert_eq!(u.authority(), "[::1]:81");
        for bad in [
            "ftp://x",
            "https://x",
            "http://:80/",
            "http://h:port/",
            "http://a b/",
            "http://u@h/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_bytes() {
        let spec = RequestSpec {
            url: Url::parse("http://127.0.0.1:9/x").unwrap(),
            method: "POST".into(),
            headers: vec![("X-A".into(), "1".into())],
            body: b"hi".to_vec(),
            weight: 1,
        };
        let p = spec.prepare(false);
        assert_eq!(
            String::from_utf8(p.bytes).unwrap(),
            "POST /x HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-A: 1\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
        );
        let get = RequestSpec {
            method: "GET".into(),
            body: vec![],
            headers: vec![],
            ..spec
        };
        assert_eq!(
            String::from_utf8(get.prepare(true).bytes).unwrap(),
            "GET /x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
        );
        assert!(parse_header("X-Bad\r: v").is_err());
        assert!(parse_header("X: a\nb").is_err());
        assert_eq!(
            parse_header(" X-Y :  z ").unwrap(),
            ("X-Y".into(), "z".into())
        );
    }

    #[test]
    fn scenario_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.json"), "{\"k\":1}").unwrap();
        let file = dir.path().join("s.yaml");
        std::fs::write(
            &file,
            "requests:\n  - path: /a\n    weight: 3\n  - url: http://127.0.0.1:9/b\n    method: PUT\n    headers: {Content-Type: application/json}\n    body_file: b.json\n",
        )
        .unwrap();
        let base = Url::parse("http://127.0.0.1:9/").unwrap();
        let defaults = RequestSpec {
            url: base.clone(),
            method: "GET".into(),
            headers: vec![],
            body: vec![],
            weight: 1,
        };
        let s = load_scenario(&file, Some(&base), &defaults).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].url.target.as_str(), s[0].weight, s[0].method.as_str()),
            ("/a", 3, "GET")
        );
        assert_eq!(
            (s[1].method.as_str(), s[1].body.as_slice()),
            ("PUT", b"{\"k\":1}".as_slice())
        );
        assert_eq!(
            s[1].headers,
            vec![("Content-Type".to_string(), "application/json".to_string())]
        );

        std::fs::write(&file, "requests:\n  - path: /a\n    wieght: 3\n").unwrap();
        let e = load_scenario(&file, Some(&base), &defaults).unwrap_err();
        assert!(e.contains("requests[0]") && e.contains("wieght"), "{e}");
        std::fs::write(
            &file,
            "requests:\n  - url: http://127.0.0.1:9/\n  - url: http://127.0.0.1:10/\n",
        )
        .unwrap();
        let e = load_scenario(&file, None, &defaults).unwrap_err();
        assert!(e.contains("same host"), "{e}");
        std::fs::write(&file, "requests:\n  - path: /a\n    weight: 0\n").unwrap();
        assert!(load_scenario(&file, Some(&base), &defaults)
            .unwrap_err()
            .contains("weight"));
    }
}
