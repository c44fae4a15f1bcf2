//! TLS from the gateway to its upstreams, against a real nginx speaking TLS
//! with a certificate from a CA made at test time (SAN `DNS:up.test,
//! IP:127.0.0.1`): SNI and the negotiated protocol as nginx saw them,
//! keep-alive reuse of upstream TLS connections, certificate verification
//! (system roots, another CA, `verify: false`, a wrong name), a client
//! certificate presented to an nginx that requires one, and health checks
//! over TLS.
//!
//! nginx, the test PKI and the gateway in front are in `tls_common::upstream`.

mod ops_common;
mod tls_common;

use std::thread;
use std::time::{Duration, Instant};

use ops_common::wait_until;
use tls_common::upstream::*;
use tls_common::*;

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
    // nginx writes its access line after the answer: give it a moment.
    wait_until(Duration::from_secs(5), || {
        let lines = nginx.access();
        ["/withcert/x", "/nocert/x"]
            .iter()
            .all(|u| lines.iter().any(|l| l.uri == *u))
    });
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
