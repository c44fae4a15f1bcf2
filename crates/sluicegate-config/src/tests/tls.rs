//! Listeners (TLS, PROXY protocol, the https redirect), `trusted_proxies`,
//! `timeouts.tls_handshake`, a service's `tls`, an app's `mtls` and
//! `auth: mtls`: what they decode to, and each error.

use std::net::IpAddr;
use std::time::Duration;

use super::{error, errors, ok};
use crate::*;

/// A TLS listener with `client_ca`, so that `auth: mtls` routes are valid.
const MTLS_LISTEN: &str = "listen:
  - addr: 127.0.0.1:8443
    tls: { certificates: [{ cert: a.pem, key: a.key }], client_ca: ca.pem }
";

fn listen_tls(tls: &str) -> String {
    format!("listen:\n  - addr: 127.0.0.1:8443\n    tls: {tls}\n")
}

fn cert(cert: &str, key: &str) -> CertKeyPaths {
    CertKeyPaths {
        cert: cert.into(),
        key: key.into(),
    }
}

#[test]
fn http2_settings_and_listener_flags_are_checked() {
    let c = ok(r#"
listen: ["127.0.0.1:8080"]
http2: { max_concurrent_streams: 64, stream_window: 256KiB, connection_window: 8MiB, max_streams_per_second: 500 }
"#);
    assert_eq!(
        c.http2,
        Http2Settings {
            max_concurrent_streams: 64,
            stream_window: 256 * 1024,
            connection_window: 8 * 1024 * 1024,
            max_streams_per_second: 500,
        }
    );
    assert!(c.listen[0].http2);
    let err = |text: &str, want: &str| {
        let e = error(text);
        assert!(e.contains(want), "{e}");
    };
    err(
        "listen: [\"127.0.0.1:8080\"]\nhttp2: { stream_window: 1000 }\n",
        "http2.stream_window: must be from 65535",
    );
    err(
        "listen: [\"127.0.0.1:8080\"]\nhttp2: { max_concurrent_streams: 0 }\n",
        "http2.max_concurrent_streams: expected an integer from 1 to 100000",
    );
    err(
        "listen: [\"127.0.0.1:8080\"]\nhttp2: { streams: 5 }\n",
        "streams",
    );
    err(
        "listen: [{ addr: \"127.0.0.1:8443\", h2c: true, tls: { certificates: [{ cert: a.pem, key: a.key }] } }]\n",
        "listen[0].h2c: only applies to plain listeners",
    );
    err(
        "listen: [{ addr: \"127.0.0.1:8080\", h2c: true, http2: false }]\n",
        "listen[0].h2c: says the opposite of http2",
    );
}

#[test]
fn listeners_decode() {
    let c = ok(r#"
listen:
  - "0.0.0.0:8080"
  - { addr: "0.0.0.0:8081", redirect_https: true, h2c: false }
  - addr: "0.0.0.0:8443"
    proxy_protocol: true
    http2: false
    tls:
      certificates:
        - { cert: a.pem, key: a.key }
        - { cert: /etc/tls/b.pem, key: /etc/tls/b.key }
      default: /etc/tls/b.pem
      client_ca: ca.pem
      client_auth: request
      min_version: "1.3"
  - addr: "[::1]:8444"
    tls: { certificates: [{ cert: c.pem, key: c.key }] }
admin: { listen: "127.0.0.1:9901" }
"#);
    assert_eq!(
        c.listen,
        [
            Listener::plain("0.0.0.0:8080".parse().unwrap()),
            Listener {
                addr: "0.0.0.0:8081".parse().unwrap(),
                tls: None,
                proxy_protocol: false,
                redirect_https: true,
                http2: false,
            },
            Listener {
                addr: "0.0.0.0:8443".parse().unwrap(),
                tls: Some(ListenerTls {
                    certificates: vec![
                        cert("a.pem", "a.key"),
                        cert("/etc/tls/b.pem", "/etc/tls/b.key")
                    ],
                    default: 1,
                    client_ca: Some("ca.pem".into()),
                    client_auth: ClientAuth::Request,
                    min_version: TlsVersion::V1_3,
                }),
                proxy_protocol: true,
                redirect_https: false,
                http2: false,
            },
            Listener {
                addr: "[::1]:8444".parse().unwrap(),
                tls: Some(ListenerTls {
                    certificates: vec![cert("c.pem", "c.key")],
                    default: 0,
                    client_ca: None,
                    client_auth: ClientAuth::Require,
                    min_version: TlsVersion::V1_2,
                }),
                proxy_protocol: false,
                redirect_https: false,
                http2: true,
            },
        ]
    );
    let tls = c.listen[2].tls.as_ref().unwrap();
    assert_eq!(
        tls.default_certificate(),
        &cert("/etc/tls/b.pem", "/etc/tls/b.key")
    );
    assert!(c.has_client_ca());
    // The defaults, an unquoted version, false flags and null keys.
    let c = ok(&listen_tls(
        "{ certificates: [{ cert: a.pem, key: a.key }], client_ca: ca.pem, min_version: 1.2 }\n    proxy_protocol: false\n    redirect_https:",
    ));
    let tls = c.listen[0].tls.as_ref().unwrap();
    assert_eq!(tls.client_auth, ClientAuth::Require);
    assert_eq!(tls.min_version, TlsVersion::V1_2);
    assert!(!c.listen[0].proxy_protocol && !c.listen[0].redirect_https);
    // A plain mapping entry, and the scalar form.
    let c = ok("listen: [{ addr: 127.0.0.1:1 }]\n");
    assert_eq!(c.listen, [Listener::plain("127.0.0.1:1".parse().unwrap())]);
    assert!(!c.has_client_ca());
    let c = ok("listen: 127.0.0.1:1\n");
    assert_eq!(c.listen, [Listener::plain("127.0.0.1:1".parse().unwrap())]);
    assert!(c.trusted_proxies.is_empty());
    assert_eq!(c.timeouts.tls_handshake, Duration::from_secs(10));
}

#[test]
fn listener_errors() {
    assert_eq!(
        error("listen: [[127.0.0.1:1]]\n"),
        "1:10: listen[0]: expected an address IP:port or a mapping with addr, tls, proxy_protocol, redirect_https, http2, found a list"
    );
    assert_eq!(
        error("listen: [{ addr: 127.0.0.1:1, port: 2 }]\n"),
        "1:31: unknown key \"port\" in listener (expected one of: addr, tls, proxy_protocol, redirect_https, http2, h2c)"
    );
    assert_eq!(
        error("listen: [{ proxy_protocol: true }]\n"),
        "1:10: listen[0]: missing required key \"addr\""
    );
    assert_eq!(
        error("listen: [{ addr: nowhere }]\n"),
        "1:18: listen[0].addr: bad address \"nowhere\" (expected IP:port, e.g. 127.0.0.1:8080 or [::1]:8080)"
    );
    assert_eq!(
        error("listen: [127.0.0.1:1, { addr: 127.0.0.1:1, proxy_protocol: true }]\n"),
        "1:31: listen[1]: duplicate address 127.0.0.1:1 (also listen[0] at 1:10)"
    );
    assert_eq!(
        error("listen: [{ addr: 127.0.0.1:1 }]\nadmin: { listen: 127.0.0.1:1 }\n"),
        "2:18: admin.listen: 127.0.0.1:1 is already used by listen[0]"
    );
    assert_eq!(
        error("listen: [{ addr: 127.0.0.1:1, proxy_protocol: yes }]\n"),
        "1:47: listen[0].proxy_protocol: expected true or false, found \"yes\""
    );
    assert_eq!(
        error("listen: [{ addr: 127.0.0.1:1, redirect_https: 1 }]\n"),
        "1:47: listen[0].redirect_https: expected true or false, found \"1\""
    );
    assert_eq!(
        error("listen:\n  - addr: 127.0.0.1:1\n    redirect_https: true\n    tls: { certificates: [{ cert: a.pem, key: a.key }] }\n"),
        "3:21: listen[0].redirect_https: only applies to plain listeners (it sends their clients to https): remove it or tls"
    );
}

#[test]
fn listener_tls_errors() {
    let e = |tls: &str| error(&listen_tls(tls));
    assert_eq!(
        e("{}"),
        "3:10: listen[0].tls: missing required key \"certificates\""
    );
    assert_eq!(
        e("true"),
        "3:10: listen[0].tls: expected a mapping with keys certificates, default, client_ca, client_auth, min_version, found \"true\""
    );
    assert_eq!(
        e("{ certificates: [] }"),
        "3:26: listen[0].tls.certificates: needs at least one { cert, key }"
    );
    assert_eq!(
        e("{ certificates: { cert: a.pem, key: a.key } }"),
        "3:26: listen[0].tls.certificates: expected a list of { cert, key } mappings, found a mapping"
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem }] }"),
        "3:27: listen[0].tls.certificates[0]: missing required key \"key\""
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key, chain: c.pem }] }"),
        "3:54: unknown key \"chain\" in certificate (expected one of: cert, key)"
    );
    assert_eq!(
        e("{ certificates: [{ cert: \"\", key: a.key }] }"),
        "3:35: listen[0].tls.certificates[0].cert: expected a file path, found \"\""
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }, { cert: a.pem, key: b.key }] }"),
        "3:64: listen[0].tls.certificates[1].cert: duplicate cert \"a.pem\" (also certificates[0])"
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }, { cert: b.pem, key: b.key }], default: a.key }"),
        "3:95: listen[0].tls.default: \"a.key\" is not the cert of any of certificates (expected one of: \"a.pem\", \"b.pem\")"
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }], client_auth: require }"),
        "3:70: listen[0].tls.client_auth: only applies with client_ca (the CA client certificates are checked against)"
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }], client_ca: ca.pem, client_auth: optional }"),
        "3:89: listen[0].tls.client_auth: expected require or request, found \"optional\""
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }], min_version: \"1.1\" }"),
        "3:70: listen[0].tls.min_version: expected \"1.2\" or \"1.3\", found \"1.1\""
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }], client_ca: [ca.pem] }"),
        "3:68: listen[0].tls.client_ca: expected a file path, found a list"
    );
    assert_eq!(
        e("{ certificates: [{ cert: a.pem, key: a.key }], sni: a }"),
        "3:57: unknown key \"sni\" in listener tls (expected one of: certificates, default, client_ca, client_auth, min_version)"
    );
}

#[test]
fn trusted_proxies_and_tls_handshake() {
    let c = ok("listen: 127.0.0.1:1\ntrusted_proxies: [\"10.0.0.0/8\", \"::1\"]\ntimeouts: { tls_handshake: 3s }\n");
    assert_eq!(
        c.trusted_proxies,
        [
            Cidr::parse("10.0.0.0/8").unwrap(),
            Cidr::parse("::1/128").unwrap()
        ]
    );
    assert_eq!(c.timeouts.tls_handshake, Duration::from_secs(3));
    assert_eq!(
        c.timeouts.client_header,
        ClientTimeouts::default().client_header
    );
    assert_eq!(
        error("listen: 127.0.0.1:1\ntrusted_proxies: 10.0.0.0/8\n"),
        "2:18: trusted_proxies: expected a list of address blocks like 10.0.0.0/8 or ::1, found \"10.0.0.0/8\""
    );
    assert_eq!(
        error("listen: 127.0.0.1:1\ntrusted_proxies: [10.0.0.1/8]\n"),
        "2:19: trusted_proxies[0]: \"10.0.0.1/8\" has bits set after the prefix; the block is 10.0.0.0/8"
    );
    assert_eq!(
        error("listen: 127.0.0.1:1\ntrusted_proxies: [lb.internal]\n"),
        "2:19: trusted_proxies[0]: expected an address block like 10.0.0.0/8 or 2001:db8::/32, found \"lb.internal\""
    );
    assert!(
        error("listen: 127.0.0.1:1\ntimeouts: { tls_handshake: 5 }\n")
            .starts_with("2:28: timeouts.tls_handshake: expected a duration like 250ms"),
    );
}

#[test]
fn cidr_contains() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let c = |s: &str| Cidr::parse(s).unwrap();
    assert!(c("10.0.0.0/8").contains(ip("10.255.1.2")));
    assert!(!c("10.0.0.0/8").contains(ip("11.0.0.1")));
    assert!(c("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
    assert!(!c("10.0.0.0/8").contains(ip("::ffff:11.1.2.3")));
    assert!(c("0.0.0.0/0").contains(ip("203.0.113.9")));
    assert!(!c("0.0.0.0/0").contains(ip("2001:db8::1")));
    assert!(c("192.0.2.7").contains(ip("192.0.2.7")));
    assert!(!c("192.0.2.7").contains(ip("192.0.2.8")));
    assert!(c("::1").contains(ip("::1")));
    assert!(!c("::1").contains(ip("::2")));
    assert!(!c("::1").contains(ip("127.0.0.1")));
    assert!(c("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
    assert!(!c("2001:db8::/32").contains(ip("2001:db9::1")));
    assert!(c("::/0").contains(ip("2001:db8::1")));
    // A mapped address is IPv4 only: an IPv6 block does not take it.
    assert!(!c("::ffff:0:0/96").contains(ip("::ffff:10.1.2.3")));
}

const SVC: &str = "services:\n  - name: api\n    endpoints: [\"127.0.0.1:9001\"]\n";

fn svc_tls(tls: &str) -> String {
    format!("listen: 127.0.0.1:1\n{SVC}    tls: {tls}\n")
}

#[test]
fn upstream_tls_decodes() {
    let tls = |t: &str| ok(&svc_tls(t)).services[0].tls.clone();
    assert_eq!(tls("true"), Some(UpstreamTls::default()));
    assert_eq!(tls("{}"), Some(UpstreamTls::default()));
    assert_eq!(tls("false"), None);
    assert_eq!(
        ok(&format!("listen: 127.0.0.1:1\n{SVC}")).services[0].tls,
        None
    );
    assert_eq!(
        tls("{ sni: API.Internal, verify: true, ca: ca.pem, client_cert: c.pem, client_key: c.key }"),
        Some(UpstreamTls {
            sni: Some("api.internal".into()),
            verify: true,
            ca: Some("ca.pem".into()),
            client_cert: Some("c.pem".into()),
            client_key: Some("c.key".into()),
        })
    );
    assert_eq!(
        tls("{ verify: false }"),
        Some(UpstreamTls {
            verify: false,
            ..UpstreamTls::default()
        })
    );
    let d = UpstreamTls::default();
    assert!(d.verify && d.sni.is_none() && d.ca.is_none() && d.client_cert.is_none());
}

#[test]
fn upstream_protocol_goes_with_tls_or_without() {
    let with = |tls: &str, p: &str| format!("listen: 127.0.0.1:1\n{SVC}{tls}    protocol: {p}\n");
    let tls = "    tls: true\n";
    let protocol = |text: &str| ok(text).services[0].protocol;
    assert_eq!(
        ok(&format!("listen: 127.0.0.1:1\n{SVC}")).services[0].protocol,
        UpstreamProtocol::Http1
    );
    assert_eq!(protocol(&with("", "h2c")), UpstreamProtocol::H2c);
    assert_eq!(protocol(&with(tls, "h2")), UpstreamProtocol::H2);
    assert_eq!(protocol(&with(tls, "auto")), UpstreamProtocol::Auto);
    assert_eq!(protocol(&with(tls, "http1")), UpstreamProtocol::Http1);
    assert_eq!(
        error(&with("", "h2")),
        "5:15: services[0].protocol: h2 needs tls (HTTP/2 over TLS is chosen by ALPN); for HTTP/2 in the clear use h2c"
    );
    assert_eq!(
        error(&with(tls, "h2c")),
        "6:15: services[0].protocol: h2c is HTTP/2 in the clear and cannot go with tls; over TLS use h2"
    );
    assert_eq!(
        error(&with("", "http2")),
        "5:15: services[0].protocol: expected one of http1, h2, h2c, auto, found \"http2\""
    );
}

#[test]
fn upstream_tls_errors() {
    let e = |t: &str| error(&svc_tls(t));
    assert_eq!(
        e("yes"),
        "5:10: services[0].tls: expected true, false or a mapping with keys sni, verify, ca, client_cert, client_key, found \"yes\""
    );
    assert_eq!(
        e("[a]"),
        "5:10: services[0].tls: expected true, false or a mapping with keys sni, verify, ca, client_cert, client_key, found a list"
    );
    assert_eq!(
        e("{ server_name: a }"),
        "5:12: unknown key \"server_name\" in service tls (expected one of: sni, verify, ca, client_cert, client_key)"
    );
    assert_eq!(
        e("{ sni: \"api internal\" }"),
        "5:17: services[0].tls.sni: expected a DNS name like api.internal, found \"api internal\""
    );
    assert_eq!(
        e("{ sni: 10.0.0.1 }"),
        "5:17: services[0].tls.sni: expected a DNS name like api.internal, found \"10.0.0.1\""
    );
    assert_eq!(
        e("{ sni: \"*.internal\" }"),
        "5:17: services[0].tls.sni: expected a DNS name like api.internal, found \"*.internal\""
    );
    assert_eq!(
        e("{ verify: no }"),
        "5:20: services[0].tls.verify: expected true or false, found \"no\""
    );
    assert_eq!(
        e("{ verify: false, ca: ca.pem }"),
        "5:31: services[0].tls.ca: does not apply with verify: false (nothing is verified)"
    );
    assert_eq!(
        e("{ client_cert: c.pem }"),
        "5:25: services[0].tls.client_cert: needs client_key too (give both or neither)"
    );
    assert_eq!(
        e("{ client_key: c.key }"),
        "5:24: services[0].tls.client_key: needs client_cert too (give both or neither)"
    );
    assert_eq!(
        e("{ ca: \"\" }"),
        "5:16: services[0].tls.ca: expected a file path, found \"\""
    );
}

fn mtls_config(apps: &str) -> String {
    format!(
        "{MTLS_LISTEN}{SVC}routes:\n  - name: api\n    service: api\n    auth: mtls\napps:\n{apps}"
    )
}

const FP: &str = "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89";

#[test]
fn app_mtls_and_auth_mtls_decode() {
    let c = ok(&mtls_config(&format!(
        "  - id: billing\n    mtls: {{ names: [Billing.Internal, billing-cn], sha256: [\"{FP}\", \"{}\"] }}\n  - id: plain\n  - id: none\n    mtls: {{}}\n",
        "00".repeat(32)
    )));
    assert_eq!(c.routes[0].auth, Auth::Mtls);
    let fp: [u8; 32] =
        std::array::from_fn(|i| [0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89][i % 8]);
    assert_eq!(
        c.apps[0].mtls,
        Some(AppMtls {
            names: vec!["billing.internal".into(), "billing-cn".into()],
            sha256: vec![fp, [0; 32]],
        })
    );
    assert_eq!(c.apps[1].mtls, None);
    assert_eq!(c.apps[2].mtls, Some(AppMtls::default()));
    // A name equal to the id of an app that has mtls is no conflict.
    ok(&mtls_config(
        "  - id: billing\n    mtls: { names: [a] }\n  - id: other\n    mtls: { names: [billing] }\n",
    ));
}

#[test]
fn app_mtls_errors() {
    let e = |apps: &str| error(&mtls_config(apps));
    assert_eq!(
        e("  - id: a\n    mtls: { cn: [a] }\n"),
        "13:13: unknown key \"cn\" in app mtls (expected one of: names, sha256)"
    );
    assert_eq!(
        e("  - id: a\n    mtls: { names: a }\n"),
        "13:20: apps[0].mtls.names: expected a list of certificate names, found \"a\""
    );
    assert_eq!(
        e("  - id: a\n    mtls: { names: [\" \"] }\n"),
        "13:21: apps[0].mtls.names[0]: expected a certificate name (a subject CN or DNS name), found \" \""
    );
    assert_eq!(
        e("  - id: a\n    mtls: { names: [x.internal, X.Internal] }\n"),
        "13:33: apps[0].mtls.names[1]: name \"X.Internal\" listed twice (first at 13:21)"
    );
    assert_eq!(
        e("  - id: a\n    mtls: { sha256: [\"AB:CD\"] }\n"),
        "13:22: apps[0].mtls.sha256[0]: expected a SHA-256 fingerprint (64 hex digits, optionally as AB:CD:... pairs), found \"AB:CD\" (2 bytes, not 32)"
    );
    assert_eq!(
        e(&format!(
            "  - id: a\n    mtls: {{ sha256: [\"{FP}\", \"{}\"] }}\n",
            FP.replace(':', "").to_lowercase()
        )),
        "13:121: apps[0].mtls.sha256[1]: fingerprint listed twice (first at 13:22)"
    );
    assert_eq!(
        e("  - id: a\n    mtls: { names: [x.internal] }\n  - id: b\n    mtls: { names: [X.INTERNAL] }\n"),
        "15:21: apps[1].mtls.names[0]: name \"x.internal\" is also listed by app \"a\" (apps[0].mtls.names[0] at 13:21)"
    );
    assert_eq!(
        e(&format!("  - id: a\n    mtls: {{ sha256: [\"{FP}\"] }}\n  - id: b\n    mtls: {{ names: [b], sha256: [\"{FP}\"] }}\n")),
        "15:34: apps[1].mtls.sha256[0]: fingerprint is also listed by app \"a\" (apps[0].mtls.sha256[0] at 13:22)"
    );
    assert_eq!(
        e("  - id: Billing\n  - id: b\n    mtls: { names: [billing] }\n"),
        "14:21: apps[1].mtls.names[0]: name \"billing\" is also the id of app \"Billing\" (apps[0] at 12:9), which has no mtls and so is named by a certificate with that subject CN: give that app an mtls key, or list another name"
    );
}

#[test]
fn auth_mtls_needs_a_client_ca() {
    let routes = "routes:\n  - name: api\n    service: api\n    auth: mtls\n";
    let text = format!("listen: 127.0.0.1:1\n{SVC}{routes}");
    assert_eq!(
        error(&text),
        "8:11: routes[0].auth: mtls needs a listener with tls.client_ca (no listener asks clients for a certificate)"
    );
    // A TLS listener without client_ca does not do either.
    let text = format!(
        "{}{SVC}{routes}",
        listen_tls("{ certificates: [{ cert: a.pem, key: a.key }] }")
    );
    assert!(errors(&text)[0].contains("mtls needs a listener with tls.client_ca"));
    assert_eq!(ok(&mtls_config("")).routes[0].auth, Auth::Mtls);
    // A listener with errors may have been the one: only its error shows.
    let text = format!(
        "{}{SVC}{routes}",
        listen_tls("{ certificates: [{ cert: a.pem }], client_ca: ca.pem }")
    );
    assert_eq!(
        error(&text),
        "3:27: listen[0].tls.certificates[0]: missing required key \"key\""
    );
}

#[test]
fn hostile_listeners_and_tls_never_panic() {
    let inputs = [
        "listen: [{ addr: ~, tls: { certificates: [~, [], { cert: [], key: {} }], default: [] } }]",
        "listen: [{ addr: 127.0.0.1:1, tls: { certificates: ~, default: a, client_auth: [] } }]",
        "listen: [{ addr: 127.0.0.1:1, tls: [] }, {}, [], ~, 1]",
        "listen: 127.0.0.1:1\ntrusted_proxies: [~, [], {}, \"::/200\", \"1.2.3.4/-1\"]",
        "listen: 127.0.0.1:1\nservices: [{ name: s, endpoints: [\"127.0.0.1:1\"], tls: { sni: [], verify: ~, ca: {}, client_cert: \"\\0\" } }]",
        "listen: 127.0.0.1:1\napps: [{ id: a, mtls: { names: [~, [], \"\"], sha256: [~, \":\", \"::::\", \"é\"] } }, { mtls: [] }]",
        "listen: 127.0.0.1:1\nroutes: [{ name: r, respond: {}, auth: mtls }]",
    ];
    for text in inputs {
        assert!(crate::parse(text).is_err(), "{text}");
    }
}
