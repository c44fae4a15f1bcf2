//! What the upstream TLS tests (`tls_upstream`) run against: nginx speaking
//! TLS with a certificate from a CA made at test time, its access log
//! parsed, the test PKI, and a gateway with TLS services in front of it.
//!
//! nginx runs from a config written here (the testkit's launcher has a
//! fixed plain-HTTP site), in the foreground, killed on drop.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sluicegate_testkit::nginx::nginx_binary;
use sluicegate_testkit::{free_port, try_http_get, Response};

use super::{head, make_ca, make_leaf, Certs, TlsGw};
use crate::ops_common::{self, local};

/// One access-log line per request: connection serial, requests on it so
/// far, SNI, protocol, client verification, client DN, status, URI.
const LOG_FORMAT: &str = "'$connection $connection_requests sni=$ssl_server_name \
proto=$ssl_protocol verify=$ssl_client_verify dn=\"$ssl_client_s_dn\" $status $request_uri'";

/// nginx serving TLS on a free 127.0.0.1 port with `cert`/`key`; `extra`
/// goes into the `server` block. Killed (SIGTERM, then SIGKILL) on drop.
pub struct NginxTls {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// One parsed access-log line.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub connection: u64,
    pub requests: u64,
    pub sni: String,
    pub proto: String,
    pub verify: String,
    pub dn: String,
    pub status: u16,
    pub uri: String,
}

impl NginxTls {
    pub fn start(cert: &Path, key: &Path, extra: &str) -> NginxTls {
        NginxTls::start_listen("ssl", cert, key, extra)
    }

    /// [`NginxTls::start`] with other `listen` options: `ssl http2` for
    /// HTTP/2 over TLS (ALPN), `http2` for HTTP/2 in the clear (h2c, prior
    /// knowledge; the certificate is then unused).
    pub fn start_listen(listen: &str, cert: &Path, key: &Path, extra: &str) -> NginxTls {
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
            fs::write(
                &conf,
                render(dir.path(), port, listen, as_root, cert, key, extra),
            )
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

    pub fn addr(&self) -> SocketAddr {
        local(self.port)
    }

    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join("logs").join(name));
        format!(
            "--- nginx error.log ---\n{}\n--- nginx stderr ---\n{}\n--- nginx access.log ---\n{}",
            read("error.log").unwrap_or_default(),
            read("stderr.log").unwrap_or_default(),
            read("access.log").unwrap_or_default()
        )
    }

    /// The access log so far, parsed.
    pub fn access(&self) -> Vec<LogLine> {
        let text = fs::read_to_string(self.dir.path().join("logs/access.log")).unwrap_or_default();
        text.lines()
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("bad access-log line {l:?}")))
            .collect()
    }

    /// Stops nginx (fast shutdown: SIGTERM to the master), waiting up to
    /// 3 s before SIGKILL.
    pub fn stop(&mut self) {
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

fn render(
    dir: &Path,
    port: u16,
    listen: &str,
    as_root: bool,
    cert: &Path,
    key: &Path,
    extra: &str,
) -> String {
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
        listen 127.0.0.1:{port} {listen};
        server_name up.test;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
{extra}
        location = /health-ok {{ return 200 "healthy\n"; }}
        location / {{ return 200 "nginx-tls sni=$ssl_server_name proto=$ssl_protocol http=$server_protocol\n"; }}
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
pub struct Pki {
    certs: Certs,
}

impl Pki {
    pub fn new() -> Pki {
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

    pub fn ca(&self) -> PathBuf {
        self.certs.ca()
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.certs.dir().join(name)
    }

    /// nginx serving `up` (signed by the test CA).
    pub fn nginx(&self, extra: &str) -> NginxTls {
        NginxTls::start(&self.file("up.pem"), &self.file("up.key"), extra)
    }
}

// ---------------------------------------------------------------- gateway

/// A service item `name` to `endpoint` with `tls` (a YAML flow value) and
/// `more` (further lines, indented 4), and a route `/name` to it.
pub struct Svc<'a> {
    pub name: &'a str,
    pub tls: String,
    pub more: &'a str,
}

pub fn gateway(endpoint: &str, services: &[Svc]) -> TlsGw {
    let (ports, extra) = super::ports(0);
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
    super::start(ports, extra, &yaml)
}

pub fn get(g: &TlsGw, path: &str) -> Response {
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

pub fn quoted(p: &Path) -> String {
    format!("\"{}\"", p.display())
}
