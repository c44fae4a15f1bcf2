//! TLS termination on the real binary, with real clients (`curl`,
//! `openssl s_client`, Python's `ssl`) and certificates made at test time:
//! routes over TLS, SNI and ECDSA/RSA certificate choice, versions, ALPN,
//! session resumption (also across a reload), certificate reloads under
//! load and refused reloads, expired certificates, and bad input on TLS and
//! plain ports (plain HTTP, a ClientHello on a plain port, silent clients,
//! thousands of stalled handshakes).

mod ops_common;
mod tls_common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use ops_common::{generation, metric, run_cli, wait_generation_above, wait_until, Ports};
use sluicegate_testkit::{http_get, TestUpstream};
use tls_common::*;

/// Routes: `/hello` answers `body`, `/api` goes to the upstream.
fn routes(upstream: u16, body: &str) -> String {
    format!(
        "services:\n{}routes:\n{}{}",
        ops_common::service("api", &[upstream]),
        ops_common::proxy_route("api", "/api", "api"),
        ops_common::respond_route("hello", "/hello", body)
    )
}

/// A plain listener plus one TLS listener with `a`, `b` and `a_rsa`
/// (`b` the default), min version `min`, and the routes.
fn config(
    ports: Ports,
    tls_port: u16,
    certs: &Certs,
    min: &str,
    upstream: u16,
    body: &str,
) -> String {
    let tls = certs.tls(
        &["a", "b", "a_rsa"],
        Some("b"),
        &format!(", min_version: \"{min}\""),
    );
    format!(
        "{}{}",
        head(
            ports,
            &[format!("{{ addr: \"127.0.0.1:{tls_port}\", tls: {tls} }}")]
        ),
        routes(upstream, body)
    )
}

fn start_default(certs: &Certs, up: &TestUpstream) -> TlsGw {
    let (ports, extra) = tls_common::ports(1);
    let yaml = config(ports, extra[0], certs, "1.2", up.port(), "hello");
    tls_common::start(ports, extra, &yaml)
}

#[test]
fn curl_over_tls_reaches_respond_and_proxied_routes() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);

    let (code, body, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    g.check(
        code == 200 && body == "hello",
        &format!("GET /hello over TLS: {}", run.all()),
    );

    let (code, _, run) = curl_tls(port, "a.test", "/api/x", Some(&certs.ca()));
    g.check(code == 200, &format!("GET /api/x over TLS: {}", run.all()));
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{seen:?}");

    // The plain listener of the same gateway says http.
    let plain = http_get(g.plain(), "/api/y", &[]);
    assert_eq!(plain.status, 200);
    let seen = up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.path(), "/api/y");
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{seen:?}");
    assert_eq!(up.requests_seen(), 2);

    // The wildcard certificate serves a name under b.test.
    let (code, body, run) = curl_tls(port, "x.b.test", "/hello", Some(&certs.ca()));
    g.check(
        code == 200 && body == "hello",
        &format!("GET /hello as x.b.test: {}", run.all()),
    );
}

#[test]
fn sni_picks_the_exact_the_wildcard_or_the_default_certificate() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);

    let cases: [(&[&str], &str); 5] = [
        (&["-servername", "a.test"], "a"),
        (&["-servername", "x.b.test"], "b"),
        (&["-servername", "deep.x.b.test"], "b"),
        (&["-servername", "unknown.test"], "b"),
        (&["-noservername"], "b"),
    ];
    let mut wrong = Vec::new();
    for (args, want) in cases {
        let s = s_client(port, args);
        if !s.handshake_ok() {
            g.check(
                false,
                &format!("handshake with {args:?} failed:\n{}", s.all()),
            );
        }
        let got = s.served(&certs);
        if got != want {
            wrong.push(format!("{args:?}: expected certificate {want}, got {got}"));
        }
    }
    // `deep.x.b.test` is two labels under b.test: a wildcard covers one
    // label only, so it gets the default (`b` here too); check with a
    // default that is not `b` below.
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_default_certificate_is_the_configured_one_not_the_first() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(2);
    // Listener 0: `a` default (explicitly); listener 1: no default, `b` first.
    let l0 = certs.tls(&["b", "a"], Some("a"), "");
    let l1 = certs.tls(&["b", "a"], None, "");
    let yaml = format!(
        "{}{}",
        head(
            ports,
            &[
                format!("{{ addr: \"127.0.0.1:{}\", tls: {l0} }}", extra[0]),
                format!("{{ addr: \"127.0.0.1:{}\", tls: {l1} }}", extra[1]),
            ]
        ),
        routes(up.port(), "hello")
    );
    let g = tls_common::start(ports, extra, &yaml);
    let mut wrong = Vec::new();
    for (port, args, want) in [
        (g.port(0), &["-noservername"][..], "a"),
        (g.port(0), &["-servername", "nobody.test"][..], "a"),
        // One label too many for `*.b.test`.
        (g.port(0), &["-servername", "deep.x.b.test"][..], "a"),
        (g.port(0), &["-servername", "x.b.test"][..], "b"),
        (g.port(1), &["-noservername"][..], "b"),
        (g.port(1), &["-servername", "a.test"][..], "a"),
    ] {
        let s = s_client(port, args);
        let got = s.served(&certs);
        if got != want {
            wrong.push(format!(
                "port {port} {args:?}: expected {want}, got {got} (handshake {:?})",
                s.version()
            ));
        }
    }
    g.check(wrong.is_empty(), &format!("{wrong:#?}"));
}

#[test]
fn ecdsa_or_rsa_certificate_by_the_clients_signature_algorithms() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let mut wrong = Vec::new();
    for version in ["-tls1_2", "-tls1_3"] {
        for (sigalgs, want) in [
            (None, "a"),
            (Some("rsa_pss_rsae_sha256"), "a_rsa"),
            (Some("RSA-PSS+SHA256:RSA+SHA256"), "a_rsa"),
            (Some("ECDSA+SHA256"), "a"),
        ] {
            let mut args = vec![version, "-servername", "a.test"];
            if let Some(s) = sigalgs {
                args.extend(["-sigalgs", s]);
            }
            let s = s_client(port, &args);
            let got = s.served(&certs);
            if got != want {
                wrong.push(format!(
                    "{args:?}: expected {want}, got {got} (handshake {:?})\n{}",
                    s.version(),
                    s.run.stderr.lines().take(3).collect::<Vec<_>>().join("\n")
                ));
            }
        }
    }
    g.check(wrong.is_empty(), &format!("{wrong:#?}"));
}

#[test]
fn tls_versions_and_alpn() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);

    let s = s_client(port, &["-tls1_2", "-servername", "a.test"]);
    assert_eq!(s.version().as_deref(), Some("TLSv1.2"), "{}", s.all());
    assert!(
        s.run.stdout.contains("HTTP/1.1 404"),
        "a request over TLS 1.2: {}",
        s.all()
    );
    let s = s_client(port, &["-tls1_3", "-servername", "a.test"]);
    assert_eq!(s.version().as_deref(), Some("TLSv1.3"), "{}", s.all());
    let s = s_client_path(port, &["-tls1_3", "-servername", "a.test"], "/hello");
    assert!(
        s.run.stdout.contains("HTTP/1.1 200"),
        "GET /hello over TLS 1.3: {}",
        s.all()
    );
    // TLS 1.1 (the client's security level lowered so that it offers it).
    let s = s_client(
        port,
        &[
            "-tls1_1",
            "-cipher",
            "DEFAULT@SECLEVEL=0",
            "-servername",
            "a.test",
        ],
    );
    assert!(!s.handshake_ok(), "TLS 1.1 was accepted: {}", s.all());
    assert!(
        s.all().contains("alert"),
        "TLS 1.1 not refused by the server: {}",
        s.all()
    );

    // ALPN.
    let s = s_client(port, &["-alpn", "http/1.1", "-servername", "a.test"]);
    assert_eq!(s.alpn().as_deref(), Some("http/1.1"), "{}", s.all());
    let s = s_client(port, &["-alpn", "h2,http/1.1", "-servername", "a.test"]);
    assert_eq!(
        s.alpn().as_deref(),
        Some("http/1.1"),
        "h2 is not offered yet, so http/1.1 is chosen: {}",
        s.all()
    );
    let s = s_client(port, &["-servername", "a.test"]);
    assert!(
        s.handshake_ok() && s.alpn().is_none(),
        "no ALPN sent: {}",
        s.all()
    );

    // min_version 1.3.
    let (ports, extra) = tls_common::ports(1);
    let yaml = config(ports, extra[0], &certs, "1.3", up.port(), "hello");
    let g13 = tls_common::start(ports, extra, &yaml);
    let s = s_client(g13.port(0), &["-tls1_2", "-servername", "a.test"]);
    g13.check(
        !s.handshake_ok() && s.all().contains("alert"),
        &format!("TLS 1.2 accepted with min_version 1.3: {}", s.all()),
    );
    let s = s_client(g13.port(0), &["-tls1_3", "-servername", "a.test"]);
    assert_eq!(s.version().as_deref(), Some("TLSv1.3"), "{}", s.all());
    drop(g);
}

/// Runs s_client twice with `version`: saving the session, then offering it.
fn resume(port: u16, version: &str, sess: &std::path::Path) -> (SClient, SClient) {
    let path = sess.to_str().unwrap();
    let first = s_client(port, &[version, "-servername", "a.test", "-sess_out", path]);
    let second = s_client(port, &[version, "-servername", "a.test", "-sess_in", path]);
    (first, second)
}

#[test]
fn sessions_resume_with_tls_1_2_and_1_3() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let mut wrong = Vec::new();
    for version in ["-tls1_2", "-tls1_3"] {
        let sess = certs.dir().join(format!("sess{version}"));
        let (first, second) = resume(port, version, &sess);
        assert!(first.handshake_ok() && !first.reused(), "{}", first.all());
        assert!(
            sess.exists(),
            "no session saved with {version}: {}",
            first.all()
        );
        if !second.reused() {
            wrong.push(format!(
                "{version}: the saved session was not resumed (got {:?})",
                second
                    .run
                    .stdout
                    .lines()
                    .find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
            ));
        }
    }
    g.check(wrong.is_empty(), &format!("{wrong:#?}"));
}

#[test]
fn sessions_resume_across_a_reload() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let g = tls_common::start(
        ports,
        extra,
        &config(ports, tls_port, &certs, "1.2", up.port(), "before"),
    );
    let mut saved = Vec::new();
    for version in ["-tls1_2", "-tls1_3"] {
        let sess = certs.dir().join(format!("reload{version}"));
        let path = sess.to_str().unwrap().to_string();
        let first = s_client(
            tls_port,
            &[version, "-servername", "a.test", "-sess_out", &path],
        );
        assert!(first.handshake_ok() && sess.exists(), "{}", first.all());
        saved.push((version, path));
    }

    let gen = generation(ports);
    g.gw.write_config(&config(ports, tls_port, &certs, "1.2", up.port(), "after"));
    g.gw.reload_signal();
    g.check(
        wait_generation_above(ports, gen, Duration::from_secs(5)),
        "the reload was not applied",
    );
    let (code, body, run) = curl_tls(tls_port, "a.test", "/hello", Some(&certs.ca()));
    assert!(code == 200 && body == "after", "{}", run.all());

    let mut wrong = Vec::new();
    for (version, path) in &saved {
        let s = s_client(
            tls_port,
            &[version, "-servername", "a.test", "-sess_in", path],
        );
        if !s.reused() {
            wrong.push(format!(
                "{version}: a session saved before the reload was not resumed after it (handshake {:?})",
                s.version()
            ));
        }
    }
    g.check(wrong.is_empty(), &format!("{wrong:#?}"));
}

#[test]
fn python_ssl_makes_a_verified_request() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    for (host, cert) in [("a.test", "a"), ("x.b.test", "b")] {
        let run = python_get(g.port(0), host, &certs.ca(), "/hello", b"");
        g.check(run.success, &format!("python ssl to {host}: {}", run.all()));
        let first = run.stdout.lines().next().unwrap_or("");
        let parts: Vec<&str> = first.split_whitespace().collect();
        assert_eq!(parts.first(), Some(&"TLSv1.3"), "{first}");
        assert!(first.contains("HTTP/1.1 200"), "{}", run.stdout);
        assert_eq!(
            parts.last().copied(),
            Some(certs.sha256(cert).as_str()),
            "{first}"
        );
        assert!(run.stdout.ends_with("hello"), "{}", run.stdout);
    }
}

/// `a.test` served by `cert` (an `a.test` pair) alone, default `b`.
fn reload_config(ports: Ports, tls_port: u16, certs: &Certs, a_cert: &str, up: u16) -> String {
    let tls = certs.tls(&[a_cert, "b"], Some("b"), "");
    format!(
        "{}{}",
        head(
            ports,
            &[format!("{{ addr: \"127.0.0.1:{tls_port}\", tls: {tls} }}")]
        ),
        routes(up, "hello")
    )
}

#[test]
fn a_certificate_reload_under_load_fails_no_request() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let g = tls_common::start(
        ports,
        extra,
        &reload_config(ports, tls_port, &certs, "a", up.port()),
    );
    let (old_fp, new_fp) = (certs.sha256("a"), certs.sha256("a2"));
    let ca = certs.ca();

    let client = thread::spawn(move || {
        python(
            PY_LOOP,
            &[
                tls_port.to_string(),
                "a.test".into(),
                ca.display().to_string(),
                "/hello".into(),
                "2.2".into(),
            ],
            Duration::from_secs(20),
        )
    });
    thread::sleep(Duration::from_millis(800));
    let gen = generation(ports);
    g.gw.write_config(&reload_config(ports, tls_port, &certs, "a2", up.port()));
    g.gw.reload_signal();
    let applied = wait_generation_above(ports, gen, Duration::from_secs(3));
    let run = client.join().unwrap();
    g.check(applied, "the reload was not applied");
    assert!(run.success, "client loop: {}", run.all());

    let lines: Vec<&str> = run.stdout.lines().collect();
    let failed: Vec<&&str> = lines.iter().filter(|l| !l.starts_with("ok ")).collect();
    let fps: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("ok ")).collect();
    let old = fps.iter().filter(|f| **f == old_fp).count();
    let new = fps.iter().filter(|f| **f == new_fp).count();
    g.check(
        failed.is_empty(),
        &format!(
            "{} of {} requests failed: {:?}",
            failed.len(),
            lines.len(),
            &failed[..failed.len().min(5)]
        ),
    );
    assert!(
        lines.len() >= 20,
        "too little traffic: {} requests",
        lines.len()
    );
    assert_eq!(
        old + new,
        fps.len(),
        "an unknown certificate was served: {lines:?}"
    );
    assert!(
        old > 0 && new > 0,
        "old {old}, new {new}: the reload fell outside the traffic"
    );
    // Once the new certificate is served, the old one never comes back.
    let first_new = fps.iter().position(|f| *f == new_fp).unwrap();
    assert!(
        fps[first_new..].iter().all(|f| *f == new_fp),
        "the old certificate was served after the new one: {fps:?}"
    );
    // And a fresh client after the reload gets the new certificate.
    let one = python_get(tls_port, "a.test", &certs.ca(), "/hello", b"");
    assert!(
        one.stdout.lines().next().unwrap_or("").ends_with(&new_fp),
        "{}",
        one.all()
    );
}

#[test]
fn overwritten_certificate_files_are_served_after_sighup() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let g = tls_common::start(
        ports,
        extra,
        &reload_config(ports, tls_port, &certs, "a", up.port()),
    );
    let s = s_client(tls_port, &["-servername", "a.test"]);
    assert_eq!(s.served(&certs), "a");

    // The same config, new files under the same names (a renewal).
    let (a2_pem, a2_key) = (
        std::fs::read(certs.cert("a2")).unwrap(),
        std::fs::read(certs.key("a2")).unwrap(),
    );
    std::fs::write(certs.key("a"), a2_key).unwrap();
    std::fs::write(certs.cert("a"), &a2_pem).unwrap();
    let gen = generation(ports);
    g.gw.reload_signal();
    let reloaded = wait_generation_above(ports, gen, Duration::from_secs(3));
    let a2_b64 = pem_b64(&String::from_utf8_lossy(&a2_pem)).unwrap();
    let served = wait_until(Duration::from_secs(3), || {
        s_client(tls_port, &["-servername", "a.test"])
            .cert_b64()
            .as_deref()
            == Some(a2_b64.as_str())
    });
    g.check(
        served,
        &format!(
            "after rewriting a.pem/a.key and SIGHUP (generation advanced: {reloaded}) the old certificate is still served"
        ),
    );
}

#[test]
fn a_missing_certificate_or_a_mismatched_key_is_refused_on_reload() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let good = reload_config(ports, tls_port, &certs, "a", up.port());
    let g = tls_common::start(ports, extra, &good);
    let failures = "sluicegate_config_reload_failures_total";

    // A missing certificate file.
    let missing = certs.dir().join("missing.pem");
    let bad = good.replace(
        &certs.cert("a").display().to_string(),
        &missing.display().to_string(),
    );
    assert_ne!(bad, good);
    g.gw.write_config(&bad);
    g.gw.reload_signal();
    g.check(
        wait_metric(ports, failures, Duration::from_secs(3), |v| v >= 1.0),
        "a config naming a missing certificate was not refused",
    );
    let named = wait_until(Duration::from_secs(2), || {
        g.gw.stderr().contains(&missing.display().to_string())
    });
    g.check(
        named,
        &format!("stderr does not name {}", missing.display()),
    );
    assert_eq!(generation(ports), 1);
    let s = s_client(tls_port, &["-servername", "a.test"]);
    assert_eq!(
        s.served(&certs),
        "a",
        "the old certificate keeps serving: {}",
        s.all()
    );

    // A key that is not the certificate's.
    let bad = good.replace(
        &certs.key("a").display().to_string(),
        &certs.key("a2").display().to_string(),
    );
    assert_ne!(bad, good);
    g.gw.write_config(&bad);
    g.gw.reload_signal();
    g.check(
        wait_metric(ports, failures, Duration::from_secs(3), |v| v >= 2.0),
        "a config with a key that does not match its certificate was not refused",
    );
    let a_pem = certs.cert("a").display().to_string();
    let a2_key = certs.key("a2").display().to_string();
    let named = wait_until(Duration::from_secs(2), || {
        let err = g.gw.stderr();
        err.lines()
            .any(|l| l.contains(&a_pem) || l.contains(&a2_key))
            && err.to_ascii_lowercase().contains("match")
    });
    g.check(
        named,
        &format!("stderr does not report that {a2_key} does not match {a_pem}"),
    );
    assert_eq!(generation(ports), 1);
    let (code, body, run) = curl_tls(tls_port, "a.test", "/hello", Some(&certs.ca()));
    assert!(code == 200 && body == "hello", "{}", run.all());
    assert_eq!(
        s_client(tls_port, &["-servername", "a.test"]).served(&certs),
        "a"
    );
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 0.0);
}

#[test]
fn startup_with_a_missing_certificate_fails_naming_the_file() {
    let certs = Certs::new();
    let (ports, extra) = tls_common::ports(1);
    let missing = certs.dir().join("nope.pem");
    let yaml = format!(
        "{}routes:\n{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}",
                extra[0],
                missing.display(),
                certs.key("a").display()
            )]
        ),
        ops_common::respond_route("hello", "/hello", "x")
    );
    let mut gw = sluicegate_testkit::Gateway::spawn(ops_common::bin(), &yaml);
    let status = gw.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| !s.success()),
        "run with a missing certificate did not fail: {status:?}\n{}",
        gw.stderr()
    );
    assert!(
        gw.stderr().contains(&missing.display().to_string()),
        "stderr does not name {}:\n{}",
        missing.display(),
        gw.stderr()
    );

    // `validate` reads the YAML only (docs/config.md, "File paths"): it
    // must at least not crash; when it fails, it names the file.
    let file = certs.dir().join("gw.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let out = run_cli(&["validate", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "validate was killed: {out:?}");
    if !out.status.success() {
        assert!(
            stderr.contains(&missing.display().to_string()),
            "validate failed without naming {}: {stderr}",
            missing.display()
        );
    }
}

#[test]
fn an_expired_certificate_loads_with_a_warning() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls = certs.tls(&["expired"], None, "");
    let yaml = format!(
        "{}{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {tls} }}",
                extra[0]
            )]
        ),
        routes(up.port(), "hello")
    );
    let g = tls_common::start(ports, extra, &yaml);
    let (code, body, run) = curl_tls(g.port(0), "a.test", "/hello", None);
    assert!(code == 200 && body == "hello", "curl -k: {}", run.all());
    let s = s_client(g.port(0), &["-servername", "a.test"]);
    assert_eq!(s.served(&certs), "expired");
    // A verifying client refuses it.
    let (code, _, run) = curl_tls(g.port(0), "a.test", "/hello", Some(&certs.ca()));
    assert!(
        code != 200 && !run.success,
        "a verifying curl accepted an expired certificate"
    );
    let expired = certs.cert("expired").display().to_string();
    let warned = g.gw.stderr().lines().any(|l| {
        l.contains(&expired) && l.to_ascii_lowercase().contains("expired") && l.contains("WARN")
    });
    g.check(warned, &format!("no warning naming {expired} as expired"));
}

fn handshakes(port: u16, result: &str) -> String {
    format!(
        "sluicegate_tls_handshakes_total{{listener=\"{}\",result=\"{result}\"}}",
        listener(port)
    )
}

#[test]
fn plain_http_on_the_tls_port_is_closed_and_counted() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let series = handshakes(port, "not_tls");
    let before = metric_or_zero(g.ports, &series);

    let ex = exchange(
        port,
        b"GET /hello HTTP/1.1\r\nHost: a.test\r\n\r\n",
        Duration::from_secs(3),
    );
    g.check(
        ex.closed,
        &format!(
            "plain HTTP on the TLS port: not closed within 3 s, got {:?}",
            ex.text()
        ),
    );
    assert!(
        !ex.text().contains("HTTP/1.1 200"),
        "plain HTTP got an answer on the TLS port: {:?}",
        ex.text()
    );
    g.check(
        wait_metric(g.ports, &series, Duration::from_secs(2), |v| {
            v >= before + 1.0
        }),
        &format!(
            "{series} did not count the plain HTTP request:\n{}",
            ops_common::metrics(g.ports)
        ),
    );
    // Still serving both kinds.
    let (code, _, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    assert_eq!(code, 200, "{}", run.all());
    assert_eq!(http_get(g.plain(), "/hello", &[]).status, 200);
    let ok = metric(g.ports, &handshakes(port, "ok"));
    assert!(ok >= 1.0, "result=\"ok\" is {ok}");
}

/// A record header and the start of a ClientHello (a full one is never sent).
const HALF_CLIENT_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\
\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10";

#[test]
fn a_client_hello_on_a_plain_port_gets_400() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    for bytes in [&b"\x16\x03\x01\x00\x05hello"[..], HALF_CLIENT_HELLO] {
        let ex = exchange(g.ports.listen, bytes, Duration::from_secs(3));
        g.check(
            ex.text().starts_with("HTTP/1.1 400"),
            &format!(
                "a ClientHello on the plain port got {:?} (closed {})",
                ex.text(),
                ex.closed
            ),
        );
    }
    // A real client speaking TLS to the plain port fails cleanly.
    let s = s_client(g.ports.listen, &["-servername", "a.test"]);
    assert!(!s.handshake_ok(), "{}", s.all());
    assert_eq!(http_get(g.plain(), "/hello", &[]).status, 200);
}

#[test]
fn a_silent_client_is_closed_after_the_handshake_timeout() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let series = handshakes(port, "timeout");
    let before = metric_or_zero(g.ports, &series);

    let silent = exchange(port, b"", Duration::from_secs(4));
    let half = exchange(port, HALF_CLIENT_HELLO, Duration::from_secs(4));
    for (what, ex) in [("sending nothing", &silent), ("half a ClientHello", &half)] {
        g.check(
            ex.closed
                && ex.elapsed >= Duration::from_millis(900)
                && ex.elapsed < Duration::from_millis(3_000),
            &format!(
                "a client {what} on the TLS port (tls_handshake: 1s): closed {} after {:?}",
                ex.closed, ex.elapsed
            ),
        );
    }
    g.check(
        wait_metric(g.ports, &series, Duration::from_secs(2), |v| {
            v >= before + 2.0
        }),
        &format!(
            "{series} did not count two timeouts:\n{}",
            ops_common::metrics(g.ports)
        ),
    );
}

#[test]
fn stalled_handshakes_do_not_hold_up_a_real_client() {
    const STALLED: usize = 5_000;
    ensure_nofile(STALLED as u64 + 1_000);
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    // A handshake timeout longer than the test, so every stalled
    // connection is still open while the real client comes.
    let yaml = config(ports, extra[0], &certs, "1.2", up.port(), "hello")
        .replace("tls_handshake: 1s", "tls_handshake: 30s");
    let g = tls_common::start(ports, extra, &yaml);
    let port = g.port(0);
    let addr = ops_common::local(port);

    let began = Instant::now();
    let mut conns = Vec::with_capacity(STALLED);
    for i in 0..STALLED {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(mut c) => {
                let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = c.write_all(HALF_CLIENT_HELLO);
                conns.push(c);
            }
            Err(e) => panic!(
                "connection {i} of {STALLED} failed after {:?}: {e}",
                began.elapsed()
            ),
        }
    }
    let opened = began.elapsed();

    let t = Instant::now();
    let (code, body, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    let took = t.elapsed();
    g.check(
        code == 200 && body == "hello" && took < Duration::from_secs(2),
        &format!(
            "with {STALLED} stalled handshakes (opened in {opened:?}) curl took {took:?}: {}",
            run.all()
        ),
    );
    drop(conns);
    // Gone with their clients, without a crash.
    let mut g = g;
    let running = g.gw.is_running();
    g.check(running, "the gateway exited");
    let (code, _, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    assert_eq!(code, 200, "{}", run.all());
}
