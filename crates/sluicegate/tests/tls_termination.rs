//! TLS termination on the real binary, with real clients (`curl`,
//! `openssl s_client`, Python's `ssl`) and certificates made at test time:
//! routes over TLS, SNI and ECDSA/RSA certificate choice, versions, ALPN,
//! and session resumption (also across a reload).
//!
//! Certificate files (reloads, refused reloads, expired certificates) are
//! tested in `tls_certificates`, bad input on TLS and plain ports in
//! `tls_bad_input`.

mod ops_common;
mod tls_common;

use std::time::Duration;

use ops_common::{generation, wait_generation_above};
use sluicegate_testkit::{http_get, TestUpstream};
use tls_common::termination::{config, routes, start_default};
use tls_common::*;

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
        Some("h2"),
        "h2 is offered first (http2 is on by default): {}",
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
