//! The HTTP cache against two reference caches: the same sequence of
//! requests goes to Sluicegate, to nginx's `proxy_cache` and to Varnish,
//! each in front of its own copy of one counting upstream on loopback,
//! which answers per path with each `Cache-Control` form (and `Expires`,
//! `Vary`, `Set-Cookie`, statuses, validators and `304`s). Each step
//! records, for each cache, the status, which of the upstream's answers
//! the body is (`v1`, `v2`...) and how many requests the upstream saw for
//! that path. Sluicegate must agree with each reference on every step but
//! the known differences listed here, each explained in docs/cache.md
//! ("Compared with nginx and Varnish"); a listed difference that no longer
//! differs fails too, so that the list and the docs stay true.

mod http_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_common::{service, Gw};
use sluicegate_testkit::{http_request, nginx, Nginx, RawUpstream, Varnish};

/// The counting upstream: per path, how many requests it has seen.
#[derive(Default)]
struct Counts(Mutex<HashMap<String, usize>>);

impl Counts {
    fn bump(&self, path: &str) -> usize {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(path.to_string()).or_insert(0);
        *n += 1;
        *n
    }

    fn of(&self, path: &str) -> usize {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(path).copied().unwrap_or(0)
    }
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) of `secs` since the epoch.
fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

const ETAG: &str = "\"e1\"";
const LAST_MODIFIED: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// The upstream's answer for `path`: status and header fields (its body,
/// `PATH vN`, is added by `serve`).
fn answer_for(path: &str, conditional: bool) -> (u16, Vec<(&'static str, String)>) {
    let cc = |v: &str| vec![("Cache-Control", v.to_string())];
    let with = |mut h: Vec<(&'static str, String)>, name, value: &str| {
        h.push((name, value.to_string()));
        h
    };
    match path {
        "/max-age" => (200, cc("max-age=1")),
        "/s-maxage" => (200, cc("max-age=0, s-maxage=60")),
        "/expires" => (200, vec![("Expires", http_date(now_secs() + 60))]),
        "/expired" => (200, vec![("Expires", http_date(now_secs() - 60))]),
        "/no-store" => (200, cc("no-store, max-age=60")),
        "/private" => (200, cc("private, max-age=60")),
        "/no-cache" => (200, cc("no-cache, max-age=60")),
        "/must-revalidate" => (200, cc("max-age=60, must-revalidate")),
        "/auth" => (200, cc("max-age=60")),
        "/auth-public" => (200, cc("public, max-age=60")),
        "/cookie" => (200, with(cc("max-age=60"), "Set-Cookie", "session=abc")),
        "/vary" => (200, with(cc("max-age=60"), "Vary", "Accept-Language")),
        "/404" => (404, cc("max-age=60")),
        "/410" => (410, cc("max-age=60")),
        "/301" => (301, with(cc("max-age=60"), "Location", "/elsewhere")),
        "/206" => (
            206,
            with(cc("max-age=60"), "Content-Range", "bytes 0-6/100"),
        ),
        "/etag" => {
            let h = with(cc("max-age=1"), "ETag", ETAG);
            let h = with(h, "Last-Modified", LAST_MODIFIED);
            (if conditional { 304 } else { 200 }, h)
        }
        _ => (200, cc("max-age=60")),
    }
}

/// Serves one keep-alive connection: each request is counted for its path
/// (the query dropped) and answered by `answer_for`, with a body naming
/// which of that path's answers it is; a matching `If-None-Match` on
/// `/etag` gets a `304`.
fn serve(stream: TcpStream, counts: &Counts) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("/").to_string();
        let (mut length, mut inm) = (0usize, None::<String>);
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((name, value)) = h.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("if-none-match") {
                    inm = Some(value.to_string());
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = target.split('?').next().unwrap_or("/").to_string();
        let n = counts.bump(&path);
        let conditional = inm.as_deref().is_some_and(|v| v.contains(ETAG));
        let (status, fields) = answer_for(&path, conditional);
        let body = format!("{path} v{n}\n");
        let mut head = format!(
            "HTTP/1.1 {status} X\r\nDate: {}\r\nContent-Type: text/plain\r\n",
            http_date(now_secs())
        );
        for (name, value) in fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let bodyless = status == 304 || method == "HEAD";
        if status != 304 {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        if !bodyless {
            head.push_str(&body);
        }
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
    }
}

/// One cache under test, in front of its own counting upstream.
struct Cache {
    name: &'static str,
    addr: SocketAddr,
    counts: Arc<Counts>,
}

/// What one request got from one cache.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    status: u16,
    /// Which upstream answer the body is (`v2`), `-` for no body.
    body: String,
    /// The upstream's requests for the path so far.
    upstream: usize,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} up={}", self.status, self.body, self.upstream)
    }
}

fn counting_upstream() -> (RawUpstream, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let c = Arc::clone(&counts);
    (RawUpstream::start(move |s| serve(s, &c)), counts)
}

/// nginx's `proxy_cache` set as close to a shared cache of RFC 9111 as its
/// directives allow (docs/cache.md, "Compared with nginx and Varnish").
fn nginx_conf(dir: &Path, port: u16, upstream: SocketAddr) -> String {
    let d = dir.display();
    let user = nginx::user_line(dir);
    format!(
        r#"{user}worker_processes 1;
pid {d}/logs/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/client_body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    proxy_cache_path {d}/tmp/cache levels=1:2 keys_zone=ref:1m max_size=64m inactive=10m use_temp_path=off;
    # A client's no-cache or max-age=0 goes upstream (and stores the answer).
    map $http_cache_control $client_refresh {{ ~*(no-cache|max-age=0) 1; default 0; }}
    # An answer to a request with Authorization is stored only when it
    # says public, s-maxage or must-revalidate (RFC 9111 section 3.5).
    map $http_authorization $has_auth {{ "" 0; default 1; }}
    map "$has_auth:$upstream_http_cache_control" $auth_no_store {{
        ~*^1:.*(public|s-maxage|must-revalidate) 0;
        ~^1: 1;
        default 0;
    }}
    upstream origin {{ server {upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache ref;
            proxy_cache_key $scheme$host$request_uri;
            proxy_cache_revalidate on;
            proxy_cache_lock on;
            proxy_cache_bypass $client_refresh;
            proxy_no_cache $auth_no_store;
            add_header X-Cache $upstream_cache_status always;
        }}
    }}
}}
"#
    )
}

/// Varnish's VCL: only the backend; the built-in VCL does the rest.
fn varnish_vcl(upstream: SocketAddr) -> String {
    format!(
        "vcl 4.1;\nbackend origin {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}\n",
        upstream.port()
    )
}

/// Varnish's parameters: no freshness of its own for answers without one
/// (as Sluicegate's `default_ttl: 0s`), no grace (no stale answers), and a
/// stale object with validators kept 10 s to be revalidated.
const VARNISH_PARAMS: &[&str] = &["default_ttl=0", "default_grace=0", "default_keep=10"];

enum Step {
    /// A request: label, method, path, request fields.
    Req(
        &'static str,
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    ),
    /// Waits out the 1 s lifetimes of `/max-age` and `/etag`.
    WaitTtl,
}

use Step::{Req, WaitTtl};

const AUTH: &[(&str, &str)] = &[("Authorization", "Bearer token")];
const FR: &[(&str, &str)] = &[("Accept-Language", "fr")];
const DE: &[(&str, &str)] = &[("Accept-Language", "de")];

const STEPS: &[Step] = &[
    Req("max-age: miss", "GET", "/max-age", &[]),
    Req("max-age: hit", "GET", "/max-age", &[]),
    Req("etag: miss", "GET", "/etag", &[]),
    Req("etag: hit", "GET", "/etag", &[]),
    Req(
        "etag: client's If-None-Match",
        "GET",
        "/etag",
        &[("If-None-Match", ETAG)],
    ),
    Req("s-maxage: miss", "GET", "/s-maxage", &[]),
    Req("s-maxage: again", "GET", "/s-maxage", &[]),
    Req("expires: miss", "GET", "/expires", &[]),
    Req("expires: again", "GET", "/expires", &[]),
    Req("expired: miss", "GET", "/expired", &[]),
    Req("expired: again", "GET", "/expired", &[]),
    Req("no-store: miss", "GET", "/no-store", &[]),
    Req("no-store: again", "GET", "/no-store", &[]),
    Req("private: miss", "GET", "/private", &[]),
    Req("private: again", "GET", "/private", &[]),
    Req("no-cache: miss", "GET", "/no-cache", &[]),
    Req("no-cache: again", "GET", "/no-cache", &[]),
    Req("must-revalidate: miss", "GET", "/must-revalidate", &[]),
    Req("must-revalidate: again", "GET", "/must-revalidate", &[]),
    Req("authorization: miss", "GET", "/auth", AUTH),
    Req("authorization: again", "GET", "/auth", AUTH),
    Req("authorization, public: miss", "GET", "/auth-public", AUTH),
    Req("authorization, public: again", "GET", "/auth-public", AUTH),
    Req("set-cookie: miss", "GET", "/cookie", &[]),
    Req("set-cookie: again", "GET", "/cookie", &[]),
    Req("vary: fr miss", "GET", "/vary", FR),
    Req("vary: de miss", "GET", "/vary", DE),
    Req("vary: fr again", "GET", "/vary", FR),
    Req("vary: de again", "GET", "/vary", DE),
    Req("404: miss", "GET", "/404", &[]),
    Req("404: again", "GET", "/404", &[]),
    Req("410: miss", "GET", "/410", &[]),
    Req("410: again", "GET", "/410", &[]),
    Req("301: miss", "GET", "/301", &[]),
    Req("301: again", "GET", "/301", &[]),
    Req("206: miss", "GET", "/206", &[]),
    Req("206: again", "GET", "/206", &[]),
    Req("post: miss", "GET", "/post", &[]),
    Req("post: the POST", "POST", "/post", &[]),
    Req("post: GET after it", "GET", "/post", &[]),
    Req("client: miss", "GET", "/client", &[]),
    Req(
        "client: no-cache",
        "GET",
        "/client",
        &[("Cache-Control", "no-cache")],
    ),
    Req(
        "client: max-age=0",
        "GET",
        "/client",
        &[("Cache-Control", "max-age=0")],
    ),
    Req("client: plain after", "GET", "/client", &[]),
    Req("head: GET miss", "GET", "/head", &[]),
    Req("head: HEAD after it", "HEAD", "/head", &[]),
    Req("head: HEAD first", "HEAD", "/head-first", &[]),
    Req("head: GET after HEAD", "GET", "/head-first", &[]),
    WaitTtl,
    Req("max-age: expired", "GET", "/max-age", &[]),
    Req("max-age: hit again", "GET", "/max-age", &[]),
    Req("etag: expired, revalidated", "GET", "/etag", &[]),
    Req("etag: hit after revalidation", "GET", "/etag", &[]),
];

/// The steps where Sluicegate differs from a reference, and why (each
/// explained in docs/cache.md, "Compared with nginx and Varnish").
const KNOWN: &[(&str, &str, &str)] = &[
    (
        "authorization, public: again",
        "varnish",
        "Varnish's built-in VCL passes every request with Authorization, whatever the answer says",
    ),
    (
        "206: miss",
        "varnish",
        "Varnish fails a fetch whose 206 it did not ask for (503)",
    ),
    (
        "206: again",
        "varnish",
        "Varnish fails a fetch whose 206 it did not ask for (503)",
    ),
    (
        "206: again",
        "nginx",
        "nginx drops Range from its fetches and stores what comes, a 206 too; Sluicegate never stores a 206",
    ),
    (
        "client: no-cache",
        "varnish",
        "Varnish ignores the request's Cache-Control",
    ),
    (
        "client: max-age=0",
        "varnish",
        "Varnish ignores the request's Cache-Control",
    ),
    (
        "client: plain after",
        "varnish",
        "Varnish kept its first object (it did not refetch)",
    ),
    (
        "head: GET after HEAD",
        "nginx",
        "Sluicegate forwards a HEAD as a HEAD and stores nothing; nginx fetches a GET for it and stores that",
    ),
    (
        "head: GET after HEAD",
        "varnish",
        "Sluicegate forwards a HEAD as a HEAD and stores nothing; Varnish fetches a GET for it and stores that",
    ),
    (
        "post: GET after it",
        "nginx",
        "Sluicegate removes a key's object on a successful POST (RFC 9111 section 4.4); nginx never invalidates",
    ),
    (
        "post: GET after it",
        "varnish",
        "Sluicegate removes a key's object on a successful POST; Varnish's built-in VCL passes a POST without invalidating",
    ),
];

fn run(cache: &Cache, method: &str, path: &str, headers: &[(&str, &str)]) -> Outcome {
    let body: &[u8] = if method == "POST" { b"new" } else { b"" };
    let r = http_request(cache.addr, method, path, headers, body);
    let text = r.body_str();
    let version = text
        .strip_prefix(path)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| match text.lines().next() {
            None => "-".into(),
            Some(line) => format!("other: {:.24}", line.trim()),
        });
    Outcome {
        status: r.status,
        body: version,
        upstream: cache.counts.of(path),
    }
}

#[test]
fn sluicegate_agrees_with_nginx_and_varnish_but_for_the_known_differences() {
    let started = Instant::now();
    let (sg_up, sg_counts) = counting_upstream();
    let (ng_up, ng_counts) = counting_upstream();
    let (vn_up, vn_counts) = counting_upstream();
    let gw = Gw::start(&format!(
        "cache: {{ memory: 8MiB, max_object: 64KiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: all\n    match: {{ path_prefix: / }}\n    service: web\n    cache: {{}}\n",
        service("web", &[sg_up.addr()], "")
    ));
    let ng_addr = ng_up.addr();
    let nginx = Nginx::start_with(move |dir, port| nginx_conf(dir, port, ng_addr));
    let varnish = Varnish::start(&varnish_vcl(vn_up.addr()), VARNISH_PARAMS);
    let caches = [
        Cache {
            name: "sluicegate",
            addr: gw.addr(),
            counts: sg_counts,
        },
        Cache {
            name: "nginx",
            addr: nginx.addr(),
            counts: ng_counts,
        },
        Cache {
            name: "varnish",
            addr: varnish.addr(),
            counts: vn_counts,
        },
    ];

    let mut table = String::from("step | sluicegate | nginx | varnish\n");
    let mut wrong = Vec::new();
    let mut ttl_from: Option<Instant> = None;
    for step in STEPS {
        let (label, method, path, headers) = match step {
            WaitTtl => {
                // nginx counts lifetimes in whole seconds: a 1 s one
                // ends within 2 s of the fetch.
                let until = ttl_from.expect("TTL paths fetched") + Duration::from_millis(2_300);
                thread::sleep(until.saturating_duration_since(Instant::now()));
                continue;
            }
            Req(label, method, path, headers) => (label, method, path, headers),
        };
        let got: Vec<Outcome> = caches
            .iter()
            .map(|c| run(c, method, path, headers))
            .collect();
        if matches!(*label, "max-age: miss" | "etag: miss") {
            // The later of the two first fetches.
            ttl_from = Some(Instant::now());
        }
        table.push_str(&format!("{label} | {} | {} | {}\n", got[0], got[1], got[2]));
        for (i, reference) in caches.iter().enumerate().skip(1) {
            let known = KNOWN
                .iter()
                .any(|(l, r, _)| l == label && *r == reference.name);
            let agree = got[0] == got[i];
            if agree == known {
                wrong.push(format!(
                    "{label}: sluicegate {} / {} {}{}",
                    got[0],
                    reference.name,
                    got[i],
                    if known {
                        " (listed as a known difference, but they agree: update KNOWN and docs/cache.md)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    eprintln!("{table}");
    assert!(
        wrong.is_empty(),
        "Sluicegate and the references disagree:\n{}\n\n{table}\nnginx: {}\nvarnish: {}",
        wrong.join("\n"),
        nginx.logs(),
        varnish.logs()
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}
