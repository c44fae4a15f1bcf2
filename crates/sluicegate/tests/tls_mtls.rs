//! `auth: mtls` on the real binary: a TLS listener with `client_ca`, apps
//! named by client certificates (subject CN equal to the id, a listed DNS
//! name, a listed SHA-256 fingerprint), `curl` presenting certificates made
//! by a test CA at test time; `X-App-Id` as the upstream sees it, 401s, a
//! certificate from another CA, `client_auth: require` and `request`, the
//! app's plan, and the refusal of `auth: mtls` without any `client_ca`.
//! Each request test runs over HTTP/1.1 and over HTTP/2 (ALPN `h2` on the
//! TLS listener), the version of every answer checked.

mod ops_common;
mod tls_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ops_common::bin;
use sluicegate_testkit::{Gateway, TestUpstream};
use tls_common::*;

/// The test CA (from [`Certs`], whose `a` is the gateway's server
/// certificate) and, in the same dir, client certificates (clientAuth):
///
/// | name | CA | CN | SAN |
/// | --- | --- | --- | --- |
/// | `c_billing` | test CA | billing | none |
/// | `c_svc` | test CA | someone | DNS:svc.internal |
/// | `c_svcapp_cn` | test CA | svcapp | none |
/// | `c_fp` | test CA | fp-client | none |
/// | `c_limited` | test CA | limited | none |
/// | `c_nobody` | test CA | nobody | none |
/// | `c_foreign` | `ca2` (another CA) | billing | none |
struct Pki {
    certs: Certs,
}

impl Pki {
    fn new() -> Pki {
        let certs = Certs::new();
        let dir = certs.dir();
        for (name, cn, san) in [
            ("c_billing", "billing", None),
            ("c_svc", "someone", Some("DNS:svc.internal")),
            ("c_svcapp_cn", "svcapp", None),
            ("c_fp", "fp-client", None),
            ("c_limited", "limited", None),
            ("c_nobody", "nobody", None),
        ] {
            make_leaf(dir, "ca", name, cn, san, "clientAuth");
        }
        make_ca(dir, "ca2", "Another Test CA");
        make_leaf(dir, "ca2", "c_foreign", "billing", None, "clientAuth");
        Pki { certs }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.certs.dir().join(name)
    }
}

/// The listener's `tls` with certificate `a`, `client_ca` (unless `None`)
/// and `client_auth` (unless `None`).
fn listener_tls(pki: &Pki, client_ca: Option<&Path>, client_auth: Option<&str>) -> String {
    let mut extra = String::new();
    if let Some(ca) = client_ca {
        extra.push_str(&format!(", client_ca: \"{}\"", ca.display()));
    }
    if let Some(mode) = client_auth {
        extra.push_str(&format!(", client_auth: {mode}"));
    }
    pki.certs.tls(&["a"], None, &extra)
}

/// The routes (`/echo` proxied to `upstream` with `auth: mtls`, `/open`
/// answered without auth), a plan `tiny` (2/s, burst 2) and the apps.
fn body(pki: &Pki, upstream: u16) -> String {
    let fp = openssl_fingerprint(&pki.file("c_fp.pem"));
    format!(
        "services:\n{}routes:\n  - name: echo\n    match: {{ path_prefix: /echo }}\n    service: api\n    auth: mtls\n{}\
         plans:\n  tiny: {{ rate: 2/s, burst: 2 }}\n\
         apps:\n  - id: billing\n  - id: svcapp\n    mtls: {{ names: [svc.internal] }}\n  \
         - id: fpapp\n    mtls: {{ sha256: [\"{fp}\"] }}\n  - id: limited\n    plan: tiny\n",
        ops_common::service("api", &[upstream]),
        ops_common::respond_route("open", "/open", "open"),
    )
}

/// A gateway whose TLS listener (extra port 0) has `client_ca` and
/// `client_auth: mode` (the default when `None`).
fn start_mtls(pki: &Pki, up: &TestUpstream, mode: Option<&str>) -> TlsGw {
    let (ports, extra) = tls_common::ports(1);
    let tls = listener_tls(pki, Some(&pki.certs.ca()), mode);
    let yaml = format!(
        "{}{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {tls} }}",
                extra[0]
            )]
        ),
        body(pki, up.port())
    );
    tls_common::start(ports, extra, &yaml)
}

/// The HTTP version a client asks for by ALPN.
#[derive(Debug, Clone, Copy)]
enum Alpn {
    Http11,
    H2,
}

impl Alpn {
    /// curl's option for it, and its `%{http_version}`.
    fn curl(self) -> (&'static str, &'static str) {
        match self {
            Alpn::Http11 => ("--http1.1", "1.1"),
            Alpn::H2 => ("--http2", "2"),
        }
    }
}

/// `curl` to `https://a.test:PORT` for each of `paths` (one connection,
/// kept alive between them) over `alpn`, verifying the gateway with the
/// test CA and presenting client certificate `cert` (a name in the PKI
/// dir) if given, with extra request headers. Returns the status of each
/// (0 when there was none) and the run; an answer in another HTTP version
/// than asked fails the test.
fn curl(
    pki: &Pki,
    alpn: Alpn,
    port: u16,
    paths: &[&str],
    cert: Option<&str>,
    headers: &[&str],
) -> (Vec<u16>, Run) {
    let mut cmd = Command::new("curl");
    let (flag, version) = alpn.curl();
    cmd.args(["-sS", "--max-time", "5", flag, "--resolve"])
        .arg(format!("a.test:{port}:127.0.0.1"))
        .arg("--cacert")
        .arg(pki.certs.ca());
    if let Some(c) = cert {
        cmd.arg("--cert")
            .arg(pki.file(&format!("{c}.pem")))
            .arg("--key")
            .arg(pki.file(&format!("{c}.key")));
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.args(["-w", "%{http_version} %{http_code}\\n"]);
    for p in paths {
        cmd.args(["-o", "/dev/null"])
            .arg(format!("https://a.test:{port}{p}"));
    }
    let run = run_cmd(&mut cmd, b"", CLIENT_DEADLINE);
    assert!(!run.timed_out, "curl did not finish:\n{}", run.all());
    let codes = run
        .stdout
        .lines()
        .map(|l| {
            let (v, code) = l.trim().split_once(' ').unwrap_or(("", ""));
            let code = code.parse().unwrap_or(0);
            assert!(
                code == 0 || v == version,
                "asked for HTTP/{version}, answered in HTTP/{v}:\n{}",
                run.all()
            );
            code
        })
        .collect();
    (codes, run)
}

/// One request: (status, run).
fn curl1(
    pki: &Pki,
    alpn: Alpn,
    port: u16,
    path: &str,
    cert: Option<&str>,
    headers: &[&str],
) -> (u16, Run) {
    let (codes, run) = curl(pki, alpn, port, &[path], cert, headers);
    (codes.first().copied().unwrap_or(0), run)
}

#[test]
fn a_certificate_whose_cn_is_an_app_id_names_that_app_upstream() {
    cn_names_app(Alpn::Http11);
}

#[test]
fn a_certificate_whose_cn_is_an_app_id_names_that_app_upstream_over_http2() {
    cn_names_app(Alpn::H2);
}

fn cn_names_app(alpn: Alpn) {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let g = start_mtls(&pki, &up, Some("request"));
    let port = g.port(0);

    let (code, run) = curl1(
        &pki,
        alpn,
        port,
        "/echo/a",
        Some("c_billing"),
        &["X-App-Id: evil"],
    );
    g.check(
        code == 200,
        &format!("CN=billing: expected 200: {}", run.all()),
    );
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.path(), "/echo/a", "{seen:?}");
    assert_eq!(
        seen.header_all("x-app-id"),
        ["billing"],
        "the upstream's X-App-Id (the client sent `evil`): {seen:?}"
    );
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{seen:?}");

    // A valid certificate naming no app.
    let (code, run) = curl1(&pki, alpn, port, "/echo/b", Some("c_nobody"), &[]);
    g.check(
        code == 401,
        &format!("CN=nobody: expected 401: {}", run.all()),
    );
    assert_eq!(up.requests_seen(), 1, "a 401 reached the upstream");
}

#[test]
fn an_app_with_mtls_names_is_named_by_a_listed_dns_name_not_by_its_id_as_cn() {
    dns_name_names_app(Alpn::Http11);
}

#[test]
fn an_app_with_mtls_names_is_named_by_a_listed_dns_name_not_by_its_id_as_cn_over_http2() {
    dns_name_names_app(Alpn::H2);
}

fn dns_name_names_app(alpn: Alpn) {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let g = start_mtls(&pki, &up, Some("request"));
    let port = g.port(0);

    let (code, run) = curl1(&pki, alpn, port, "/echo/svc", Some("c_svc"), &[]);
    g.check(
        code == 200,
        &format!("SAN DNS:svc.internal: expected 200: {}", run.all()),
    );
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.header_all("x-app-id"), ["svcapp"], "{seen:?}");

    // The app has `mtls`, so a certificate with CN = its id is not its.
    let (code, run) = curl1(&pki, alpn, port, "/echo/cn", Some("c_svcapp_cn"), &[]);
    g.check(
        code == 401,
        &format!(
            "CN=svcapp (not listed in its mtls.names): expected 401: {}",
            run.all()
        ),
    );
    assert_eq!(up.requests_seen(), 1, "the 401 reached the upstream");
}

#[test]
fn an_app_with_a_listed_sha256_fingerprint_is_named_by_that_certificate() {
    fingerprint_names_app(Alpn::Http11);
}

#[test]
fn an_app_with_a_listed_sha256_fingerprint_is_named_by_that_certificate_over_http2() {
    fingerprint_names_app(Alpn::H2);
}

fn fingerprint_names_app(alpn: Alpn) {
    let pki = Pki::new();
    let fp = openssl_fingerprint(&pki.file("c_fp.pem"));
    assert!(
        fp.len() == 95 && fp.matches(':').count() == 31,
        "openssl's fingerprint with colons: {fp:?}"
    );
    let up = TestUpstream::start();
    let g = start_mtls(&pki, &up, Some("request"));
    let port = g.port(0);

    let (code, run) = curl1(
        &pki,
        alpn,
        port,
        "/echo/fp",
        Some("c_fp"),
        &["X-App-Id: evil"],
    );
    g.check(
        code == 200,
        &format!("fingerprint {fp}: expected 200: {}", run.all()),
    );
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.header_all("x-app-id"), ["fpapp"], "{seen:?}");
}

#[test]
fn no_certificate_is_401_and_a_certificate_from_another_ca_is_refused() {
    no_or_foreign_certificate(Alpn::Http11);
}

#[test]
fn no_certificate_is_401_and_a_certificate_from_another_ca_is_refused_over_http2() {
    no_or_foreign_certificate(Alpn::H2);
}

fn no_or_foreign_certificate(alpn: Alpn) {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let g = start_mtls(&pki, &up, Some("request"));
    let port = g.port(0);

    // `request`: the handshake works without a certificate...
    let (code, run) = curl1(&pki, alpn, port, "/open", None, &[]);
    g.check(
        code == 200,
        &format!(
            "no certificate, route without auth: expected 200: {}",
            run.all()
        ),
    );
    // ...and the mtls route answers 401.
    let (code, run) = curl1(&pki, alpn, port, "/echo/none", None, &["X-App-Id: billing"]);
    g.check(
        code == 401,
        &format!(
            "no certificate on an mtls route: expected 401: {}",
            run.all()
        ),
    );

    // A certificate from another CA (CN billing, an app's id) is rejected
    // by the listener's verifier, `request` or not.
    let (code, run) = curl1(&pki, alpn, port, "/echo/foreign", Some("c_foreign"), &[]);
    g.check(
        code != 200 && !run.success,
        &format!(
            "a certificate from another CA: expected the request to fail, got status {code}: {}",
            run.all()
        ),
    );
    eprintln!(
        "foreign certificate: status {code}, curl: {}",
        run.stderr.trim()
    );
    assert_eq!(
        up.requests_seen(),
        0,
        "a refused request reached the upstream"
    );
}

#[test]
fn client_auth_require_refuses_a_client_without_a_certificate() {
    require_refuses(Alpn::Http11);
}

#[test]
fn client_auth_require_refuses_a_client_without_a_certificate_over_http2() {
    require_refuses(Alpn::H2);
}

fn require_refuses(alpn: Alpn) {
    let pki = Pki::new();
    let up = TestUpstream::start();
    // No `client_auth`: `require` is the default.
    let g = start_mtls(&pki, &up, None);
    let port = g.port(0);

    let (code, run) = curl1(&pki, alpn, port, "/open", None, &[]);
    g.check(
        code == 0 && !run.success,
        &format!(
            "require, no certificate: expected curl to fail, got status {code}: {}",
            run.all()
        ),
    );
    eprintln!("require without a certificate: curl: {}", run.stderr.trim());
    let (code, run) = curl1(&pki, alpn, port, "/echo/x", None, &[]);
    g.check(
        code == 0 && !run.success,
        &format!(
            "require, no certificate (mtls route): expected curl to fail, got {code}: {}",
            run.all()
        ),
    );

    let (code, run) = curl1(&pki, alpn, port, "/echo/x", Some("c_billing"), &[]);
    g.check(
        code == 200,
        &format!("require, with a certificate: expected 200: {}", run.all()),
    );
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.header_all("x-app-id"), ["billing"], "{seen:?}");
    let (code, run) = curl1(&pki, alpn, port, "/open", Some("c_billing"), &[]);
    g.check(code == 200, &format!("require, /open: {}", run.all()));
    assert_eq!(up.requests_seen(), 1);
}

#[test]
fn the_plan_of_the_app_named_by_the_certificate_applies() {
    plan_applies(Alpn::Http11);
}

#[test]
fn the_plan_of_the_app_named_by_the_certificate_applies_over_http2() {
    plan_applies(Alpn::H2);
}

fn plan_applies(alpn: Alpn) {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let g = start_mtls(&pki, &up, Some("request"));
    let port = g.port(0);

    // Four requests on one kept-alive connection, well within the 500 ms
    // a token takes to come back at 2/s: the bucket holds 2.
    let paths = ["/echo/1", "/echo/2", "/echo/3", "/echo/4"];
    let (codes, run) = curl(&pki, alpn, port, &paths, Some("c_limited"), &[]);
    g.check(
        codes == [200, 200, 429, 429],
        &format!(
            "plan tiny (2/s, burst 2): expected [200, 200, 429, 429], got {codes:?}: {}",
            run.all()
        ),
    );
    assert_eq!(
        up.requests_seen(),
        2,
        "refused requests reached the upstream"
    );

    // Another app's counters are its own.
    let (codes, run) = curl(&pki, alpn, port, &paths, Some("c_billing"), &[]);
    g.check(
        codes == [200, 200, 200, 200],
        &format!("billing (no plan): {codes:?}: {}", run.all()),
    );
}

#[test]
fn auth_mtls_without_any_client_ca_is_refused_at_startup() {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls = listener_tls(&pki, None, None);
    let yaml = format!(
        "{}{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {tls} }}",
                extra[0]
            )]
        ),
        body(&pki, up.port())
    );
    let mut gw = Gateway::spawn(bin(), &yaml);
    let status = gw.wait_exit(Duration::from_secs(10));
    let stderr = gw.stderr();
    assert!(
        status.is_some_and(|s| !s.success()),
        "expected the gateway to refuse the config and exit non-zero, got {status:?}\nconfig:\n{yaml}\n--- stderr ---\n{stderr}"
    );
    assert!(
        stderr.contains("routes[0].auth") && stderr.contains("client_ca"),
        "the error should name routes[0].auth and client_ca:\n{stderr}"
    );
    eprintln!("refused at startup: {}", stderr.trim());
    // Nothing listens.
    assert!(
        std::net::TcpStream::connect(ops_common::local(extra[0])).is_err(),
        "the TLS port accepts although the config was refused"
    );

    // `validate` says the same.
    let file = gw.config_path().to_path_buf();
    let out = ops_common::run_cli(&["validate", file.to_str().expect("utf-8 path")]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && text.contains("routes[0].auth"),
        "validate: {:?}\n{text}",
        out.status
    );
}
