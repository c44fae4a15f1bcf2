//! TLS from the gateway to its upstreams, against a real nginx speaking TLS
//! with a certificate from a CA made at test time (SAN `DNS:up.test,
//! IP:127.0.0.1`): SNI and the negotiated protocol as nginx saw them,
//! keep-alive reuse of upstream TLS connections, certificate verification
//! (system roots, another CA, `verify: false`, a wrong name), a client
//! certificate presented to an nginx that requires one, and health checks
//! over TLS.
//!
//! nginx runs from a config written here (the testkit's launcher has a
//! fixed plain-HTTP site), in the foreground, killed on drop.

mod ops_common;
mod tls_common;

use std::fs::{self, File};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ops_common::{local, wait_until};
use sluicegate_testkit::nginx::nginx_binary;
use sluicegate_testkit::{free_port, try_http_get, Response};
use tls_common::*;

// ---------------------------------------------------------------- nginx with TLS

/// One access-log line per request: connection serial, requests on it so
/// far, SNI, protocol, client verification, client DN, status, URI.
const LOG_FORMAT: &str = "'$connection $connection_requests sni=$ssl_server_name \
proto=$ssl_protocol verify=$ssl_client_verify dn=\"$ssl_client_s_dn\" $status $request_uri'";

/// nginx serving TLS on a free 127.0.0.1 port with `cert`/`key`; `extra`
/// goes into the `server` block. Killed (SIGTERM, then SIGKILL) on drop.
struct NginxTls {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// One parsed access-log line.
#[derive(Debug, Clone)]
struct LogLine {
    connection: u64,
    requests: u64,
    sni: String,
    proto: String,
    verify: String,
    dn: String,
    status: u16,
    uri: String,
}

impl NginxTls {
    fn start(cert: &Path, key: &Path, extra: &str) -> NginxTls {
        let bin = nginx_binary().expect("nginx not installed: apt-get install nginx-light");
        let mut last_error = String::new();
        // The port can be taken between probing and nginx's bind: retry.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("sluicegate-nginx-tls-")
                .tempdir()
                .expect("create nginx temp dir");
            let port = free_port();
            for sub in ["conf", "logs", "tmp"] {
                fs::create_dir_all(dir.path().join(sub)).expect("create nginx dir");
            }
            let probe = dir.path().join("conf/probe");
            fs::write(&probe, "").expect("write probe");
            // A master started as root runs its worker as `nobody`, which
            // cannot enter a 0700 temp dir: keep the worker as root then.
            let as_root = fs::metadata(&probe).is_ok_and(|m| m.uid() == 0);
            let conf = dir.path().join("conf/nginx.conf");
            fs::write(&conf, render(dir.path(), port, as_root, cert, key, extra))
                .expect("write nginx.conf");
            let child = Command::new(&bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(dir.path().join("logs/error.log"))
                .arg("-c")
                .arg(&conf)
                .arg("-g")
                .arg("daemon off;")
                .stdin(Stdio::null())
                .stdout(File::create(dir.path().join("logs/stdout.log")).expect("stdout log"))
                .stderr(File::create(dir.path().join("logs/stderr.log")).expect("stderr log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut nginx = NginxTls {
                child: Some(child),
                port,
                dir,
            };
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(why) => last_error = format!("{why}\n{}", nginx.logs()),
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("nginx exited with {status}"));
                }
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("port {} not accepting after 5s", self.port));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn addr(&self) -> SocketAddr {
        local(self.port)
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join("logs").join(name));
        format!(
            "--- nginx error.log ---\n{}\n--- nginx stderr ---\n{}\n--- nginx access.log ---\n{}",
            read("error.log").unwrap_or_default(),
            read("stderr.log").unwrap_or_default(),
            read("access.log").unwrap_or_default()
        )
    }

    /// The access log so far, parsed.
    fn access(&self) -> Vec<LogLine> {
        let text = fs::read_to_string(self.dir.path().join("logs/access.log")).unwrap_or_default();
        text.lines()
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("bad access-log line {l:?}")))
            .collect()
    }

    /// Stops nginx (fast shutdown: SIGTERM to the master), waiting up to
    /// 3 s before SIGKILL.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for NginxTls {
    fn drop(&mut self) {
        self.stop();
    }
}

fn render(dir: &Path, port: u16, as_root: bool, cert: &Path, key: &Path, extra: &str) -> String {
    let d = dir.display();
    let user = if as_root { "user root;\n" } else { "" };
    format!(
        r#"{user}worker_processes 1;
pid {d}/logs/nginx.pid;
error_log {d}/logs/error.log info;
events {{ worker_connections 256; }}
http {{
    log_format tlsinfo {LOG_FORMAT};
    access_log {d}/logs/access.log tlsinfo;
    default_type text/plain;
    client_body_temp_path {d}/tmp/client_body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name up.test;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
{extra}
        location = /health-ok {{ return 200 "healthy\n"; }}
        location / {{ return 200 "nginx-tls sni=$ssl_server_name proto=$ssl_protocol\n"; }}
    }}
}}
"#,
        cert = cert.display(),
        key = key.display(),
    )
}

fn parse_line(line: &str) -> Option<LogLine> {
    let (head, rest) = line.split_once(" dn=\"")?;
    let (dn, tail) = rest.split_once("\" ")?;
    let mut h = head.split(' ');
    let connection = h.next()?.parse().ok()?;
    let requests = h.next()?.parse().ok()?;
    let sni = h.next()?.strip_prefix("sni=")?.to_string();
    let proto = h.next()?.strip_prefix("proto=")?.to_string();
    let verify = h.next()?.strip_prefix("verify=")?.to_string();
    let mut t = tail.split(' ');
    let status = t.next()?.parse().ok()?;
    let uri = t.next()?.to_string();
    Some(LogLine {
        connection,
        requests,
        sni,
        proto,
        verify,
        dn: dn.to_string(),
        status,
        uri,
    })
}

// ---------------------------------------------------------------- certificates

/// The test CA (from [`Certs`]), with in the same dir:
/// `up` (CN up.test, SAN DNS:up.test, IP:127.0.0.1, serverAuth),
/// `gwclient` (CN gw.client, clientAuth, signed by the test CA),
/// `ca2` (another CA) and `up2` (like `up`, signed by `ca2`).
struct Pki {
    certs: Certs,
}

impl Pki {
    fn new() -> Pki {
        let certs = Certs::new();
        let dir = certs.dir();
        make_leaf(
            dir,
            "ca",
            "up",
            "up.test",
            Some("DNS:up.test,IP:127.0.0.1"),
            "serverAuth",
        );
        make_leaf(
            dir,
            "ca",
            "gwclient",
            "gw.client",
            Some("DNS:gw.client"),
            "clientAuth",
        );
        make_ca(dir, "ca2", "Another Test CA");
        Pki { certs }
    }

    fn ca(&self) -> PathBuf {
        self.certs.ca()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.certs.dir().join(name)
    }

    /// nginx serving `up` (signed by the test CA).
    fn nginx(&self, extra: &str) -> NginxTls {
        NginxTls::start(&self.file("up.pem"), &self.file("up.key"), extra)
    }
}

// ---------------------------------------------------------------- gateway

/// A service item `name` to `endpoint` with `tls` (a YAML flow value) and
/// `more` (further lines, indented 4), and a route `/name` to it.
struct Svc<'a> {
    name: &'a str,
    tls: String,
    more: &'a str,
}

fn gateway(endpoint: &str, services: &[Svc]) -> TlsGw {
    let (ports, extra) = tls_common::ports(0);
    let mut yaml = head(ports, &[]);
    yaml.push_str("services:\n");
    for s in services {
        yaml.push_str(&format!(
            "  - name: {}\n    endpoints: [\"{endpoint}\"]\n    tls: {}\n    timeouts: {{ connect: 2s, response_header: 5s }}\n{}",
            s.name, s.tls, s.more
        ));
    }
    yaml.push_str("routes:\n");
    for s in services {
        yaml.push_str(&ops_common::proxy_route(
            s.name,
            &format!("/{}", s.name),
            s.name,
        ));
    }
    tls_common::start(ports, extra, &yaml)
}

fn get(g: &TlsGw, path: &str) -> Response {
    match try_http_get(g.plain(), path, &[]) {
        Ok(r) => r,
        Err(e) => {
            g.check(
                false,
                &format!("GET {path} through the gateway failed: {e}"),
            );
            unreachable!()
        }
    }
}

fn quoted(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

// ---------------------------------------------------------------- tests

#[test]
fn requests_reach_nginx_over_tls_with_the_configured_sni() {
    let pki = Pki::new();
    let nginx = pki.nginx("");
    let g = gateway(
        &nginx.endpoint(),
        &[Svc {
            name: "up",
            tls: format!("{{ ca: {}, sni: up.test }}", quoted(&pki.ca())),
            more: "",
        }],
    );
    for i in 0..3 {
        let r = get(&g, &format!("/up/one?i={i}"));
        g.check(
            r.status == 200
                && r.body_str()
                    .starts_with("nginx-tls sni=up.test proto=TLSv1."),
            &format!(
                "request {i}: expected nginx's 200 over TLS, got {} {:?}\n{}",
                r.status,
                r.body_str(),
                nginx.logs()
            ),
        );
    }
    let lines = nginx.access();
    assert_eq!(lines.len(), 3, "{lines:#?}\n{}", nginx.logs());
    for l in &lines {
        assert_eq!(l.sni, "up.test", "{l:?}");
        assert!(
            l.proto == "TLSv1.3" || l.proto == "TLSv1.2",
            "protocol as nginx saw it: {l:?}"
        );
        assert_eq!(l.status, 200, "{l:?}");
        assert!(l.uri.starts_with("/up/one?i="), "{l:?}");
    }
}

#[test]
fn upstream_tls_connections_are_reused_across_requests() {
    let pki = Pki::new();
    let nginx = pki.nginx("");
    let g = gateway(
        &nginx.endpoint(),
        &[Svc {
            name: "up",
            tls: format!("{{ ca: {}, sni: up.test }}", quoted(&pki.ca())),
            more: "",
        }],
    );
    const N: usize = 50;
    for i in 0..N {
        let r = get(&g, &format!("/up/ka?i={i}"));
        g.check(
            r.status == 200,
            &format!("request {i}: {} {:?}", r.status, r.body_str()),
        );
    }
    let lines = nginx.access();
    assert_eq!(lines.len(), N, "{}", nginx.logs());
    let mut conns: Vec<u64> = lines.iter().map(|l| l.connection).collect();
    conns.sort_unstable();
    conns.dedup();
    let most = lines.iter().map(|l| l.requests).max().unwrap_or(0);
    eprintln!(
        "{N} requests over {} upstream TLS connections, at most {most} on one",
        conns.len()
    );
    assert!(
        conns.len() <= 4,
        "{N} sequential requests used {} upstream TLS connections (most requests on one: {most}): {conns:?}",
        conns.len()
    );
    assert!(
        most >= (N / 4) as u64,
        "no upstream connection carried many requests (max $connection_requests {most})"
    );
    assert!(lines.iter().all(|l| l.sni == "up.test"), "{lines:#?}");
}

#[test]
fn upstream_certificates_are_verified() {
    let pki = Pki::new();
    let nginx = pki.nginx("");
    let g = gateway(
        &nginx.endpoint(),
        &[
            Svc {
                name: "sysroots",
                tls: "{}".to_string(),
                more: "",
            },
            Svc {
                name: "otherca",
                tls: format!("{{ ca: {}, sni: up.test }}", quoted(&pki.file("ca2.pem"))),
                more: "",
            },
            Svc {
                name: "noverify",
                tls: "{ verify: false }".to_string(),
                more: "",
            },
            Svc {
                name: "wrongname",
                tls: format!("{{ ca: {}, sni: wrong.test }}", quoted(&pki.ca())),
                more: "",
            },
            Svc {
                name: "good",
                tls: format!("{{ ca: {}, sni: up.test }}", quoted(&pki.ca())),
                more: "",
            },
        ],
    );
    // (path, expected status, what the new log lines must name)
    let cases: [(&str, u16, &[&str]); 5] = [
        ("/sysroots/x", 502, &["UnknownIssuer"]),
        ("/otherca/x", 502, &["UnknownIssuer"]),
        ("/noverify/x", 200, &[]),
        (
            "/wrongname/x",
            502,
            &["NotValidForName", "not valid for name"],
        ),
        ("/good/x", 200, &[]),
    ];
    let mut wrong = Vec::new();
    for (path, want, names) in cases {
        let before = g.gw.stderr().len();
        let r = get(&g, path);
        if r.status != want {
            wrong.push(format!(
                "{path}: expected {want}, got {} {:?}",
                r.status,
                r.body_str()
            ));
        }
        if !names.is_empty() {
            // The warning is written when the connect fails, before the 502
            // is sent; allow a moment for the write to land.
            let found = wait_until(Duration::from_secs(2), || {
                let err = g.gw.stderr();
                let new = err.get(before..).unwrap_or("");
                names.iter().any(|n| new.contains(n))
            });
            eprintln!(
                "{path}: {} ; new gateway log: {}",
                r.status,
                g.gw.stderr().get(before..).unwrap_or("").trim()
            );
            if !found {
                let err = g.gw.stderr();
                wrong.push(format!(
                    "{path}: the gateway's log does not name the certificate problem ({names:?}); new log:\n{}",
                    err.get(before..).unwrap_or("")
                ));
            }
        }
    }
    g.check(wrong.is_empty(), &format!("{wrong:#?}\n{}", nginx.logs()));
    // Only the accepted handshakes reached nginx's HTTP layer.
    let uris: Vec<String> = nginx.access().into_iter().map(|l| l.uri).collect();
    assert_eq!(uris, ["/noverify/x", "/good/x"], "{}", nginx.logs());
}

#[test]
fn a_client_certificate_is_presented_to_an_upstream_that_requires_one() {
    let pki = Pki::new();
    let nginx = pki.nginx(&format!(
        "        ssl_client_certificate {};\n        ssl_verify_client on;\n",
        pki.ca().display()
    ));
    let ca = quoted(&pki.ca());
    let g = gateway(
        &nginx.endpoint(),
        &[
            Svc {
                name: "withcert",
                tls: format!(
                    "{{ ca: {ca}, sni: up.test, client_cert: {}, client_key: {} }}",
                    quoted(&pki.file("gwclient.pem")),
                    quoted(&pki.file("gwclient.key"))
                ),
                more: "",
            },
            Svc {
                name: "nocert",
                tls: format!("{{ ca: {ca}, sni: up.test }}"),
                more: "",
            },
        ],
    );
    let ok = get(&g, "/withcert/x");
    g.check(
        ok.status == 200 && ok.body_str().starts_with("nginx-tls sni=up.test"),
        &format!(
            "with client_cert: expected 200 from nginx, got {} {:?}\n{}",
            ok.status,
            ok.body_str(),
            nginx.logs()
        ),
    );
    let no = get(&g, "/nocert/x");
    // nginx finishes the handshake without a certificate and answers 400
    // ("No required SSL certificate was sent"); the gateway relays it.
    g.check(
        no.status == 400 && no.body_str().contains("No required SSL certificate"),
        &format!(
            "without client_cert: expected nginx's 400 relayed, got {} {:?}\n{}",
            no.status,
            no.body_str(),
            nginx.logs()
        ),
    );
    let lines = nginx.access();
    let with = lines
        .iter()
        .find(|l| l.uri == "/withcert/x")
        .unwrap_or_else(|| panic!("nginx did not log /withcert/x\n{}", nginx.logs()));
    assert_eq!(with.verify, "SUCCESS", "{with:?}");
    assert!(with.dn.contains("CN=gw.client"), "{with:?}");
    assert_eq!(with.status, 200, "{with:?}");
    let without = lines
        .iter()
        .find(|l| l.uri == "/nocert/x")
        .unwrap_or_else(|| panic!("nginx did not log /nocert/x\n{}", nginx.logs()));
    assert_eq!(without.verify, "NONE", "{without:?}");
    assert_eq!(without.status, 400, "{without:?}");
}

#[test]
fn health_checks_run_over_tls_and_notice_a_stopped_upstream() {
    let pki = Pki::new();
    let mut nginx = pki.nginx("");
    let endpoint = nginx.endpoint();
    let g = gateway(
        &endpoint,
        &[Svc {
            name: "up",
            tls: format!("{{ ca: {}, sni: up.test }}", quoted(&pki.ca())),
            more: "    health: { path: /health-ok, interval: 100ms, timeout: 500ms, \
                   unhealthy_after: 2, healthy_after: 1 }\n",
        }],
    );
    let series = format!("sluicegate_upstream_healthy{{service=\"up\",endpoint=\"{endpoint}\"}}");
    // Checks reach nginx over TLS (a plain-HTTP check would get nginx's 400
    // "plain HTTP request was sent to HTTPS port" and fail).
    let checked = wait_until(Duration::from_secs(5), || {
        nginx
            .access()
            .iter()
            .filter(|l| l.uri == "/health-ok" && l.status == 200 && l.sni == "up.test")
            .count()
            >= 5
    });
    g.check(
        checked,
        &format!("fewer than 5 TLS health checks in 5s\n{}", nginx.logs()),
    );
    // And the endpoint stays in rotation over 10 more intervals.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        let v = metric_or_zero(g.ports, &series);
        g.check(
            v == 1.0,
            &format!(
                "{series} = {v} while nginx answers the checks\n{}",
                nginx.logs()
            ),
        );
        thread::sleep(Duration::from_millis(100));
    }
    let bad: Vec<LogLine> = nginx
        .access()
        .into_iter()
        .filter(|l| l.uri == "/health-ok" && (l.status != 200 || l.proto == "-"))
        .collect();
    assert!(
        bad.is_empty(),
        "health checks that were not TLS or not 200: {bad:#?}"
    );
    let r = get(&g, "/up/x");
    g.check(r.status == 200, &format!("proxied request: {}", r.status));

    nginx.stop();
    let stopped = Instant::now();
    let out = wait_metric(g.ports, &series, Duration::from_secs(3), |v| v == 0.0);
    g.check(
        out,
        &format!(
            "{series} still {} 3s after nginx stopped (interval 100ms, unhealthy_after 2)",
            metric_or_zero(g.ports, &series)
        ),
    );
    eprintln!(
        "endpoint out of rotation {:?} after nginx stopped",
        stopped.elapsed()
    );
    let r = get(&g, "/up/x");
    g.check(
        r.status == 503,
        &format!("with the only endpoint out: expected 503, got {}", r.status),
    );
}
