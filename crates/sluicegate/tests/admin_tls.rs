//! The admin listener over HTTPS (`admin.tls`, a listener's `tls` keys) on
//! the real binary: curl with the test CA reads `/healthz` and makes an
//! authenticated API write; plain HTTP gets no answer; the certificate
//! files replaced on disk are served to the next connection.

mod ops_common;
mod tls_common;

use std::process::Command;
use std::time::Duration;

use ops_common::{bin, wait_until, Ports, ScratchDir};
use sluicegate_testkit::Gateway;
use tls_common::*;

const TOKEN: &str = "admin-tls-write-token";

/// curl over HTTPS to the admin port as `a.test`, verified with the test
/// CA, with the write token: (status, body).
fn curl(port: u16, ca: &std::path::Path, method: &str, path: &str, body: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--resolve"])
        .arg(format!("a.test:{port}:127.0.0.1"))
        .arg("--cacert")
        .arg(ca)
        .args([
            "-X",
            method,
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
        ])
        .args(["-H", "Content-Type: application/json"])
        .args(["--data-binary", body])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://a.test:{port}{path}"))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn the_admin_listener_speaks_https_with_its_certificate_files() {
    let certs = Certs::new();
    let ports = Ports::new();
    let dir = ScratchDir::new("admin-tls");
    let token = dir.write("write.token", TOKEN);
    // The served pair is a copy, so the test can replace its files.
    let (cert, key) = (dir.path().join("admin.pem"), dir.path().join("admin.key"));
    std::fs::copy(certs.cert("a"), &cert).unwrap();
    std::fs::copy(certs.key("a"), &key).unwrap();
    let yaml = format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin:\n  listen: \"127.0.0.1:{}\"\n  tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }}\n  tokens:\n    - {{ token_file: \"{}\", role: write }}\nworkers: 1\nroutes:\n  - name: hello\n    match: {{ path_prefix: /hello }}\n    respond: {{ status: 200, body: hi }}\n",
        ports.listen,
        ports.admin,
        cert.display(),
        key.display(),
        token.display(),
    );
    let gw = Gateway::start(bin(), &yaml, &ports.both());
    let ca = certs.ca();
    let up = wait_until(Duration::from_secs(10), || {
        curl(ports.admin, &ca, "GET", "/healthz", "").0 == 200
    });
    assert!(up, "no HTTPS /healthz\n{}", gw.stderr());
    let (status, body) = curl(ports.admin, &ca, "GET", "/healthz", "");
    assert_eq!(status, 200);
    assert!(body.contains("\"status\":\"ok\""), "{body}");

    let (status, body) = curl(ports.admin, &ca, "GET", "/routes/hello", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"name\":\"hello\""), "{body}");
    let route = r#"{"match":{"path_prefix":"/new"},"respond":{"status":200,"body":"new"}}"#;
    let (status, body) = curl(ports.admin, &ca, "PUT", "/routes/new", route);
    assert_eq!(status, 201, "{body}");
    let served = sluicegate_testkit::http_get(ports.addr(), "/new", &[]);
    assert_eq!(served.body_str(), "new");

    // Plain HTTP on the admin port is not answered as HTTP.
    let plain = sluicegate_testkit::try_http_get(ports.admin_addr(), "/healthz", &[]);
    assert!(plain.is_err() || plain.unwrap().status != 200);

    // The files replaced (renamed over, as a renewal does): the next
    // connection gets the new certificate.
    assert_eq!(
        s_client(ports.admin, &["-servername", "a.test"]).served(&certs),
        "a"
    );
    let tmp = dir.path().join("next.pem");
    std::fs::copy(certs.cert("a2"), &tmp).unwrap();
    let tmp_key = dir.path().join("next.key");
    std::fs::copy(certs.key("a2"), &tmp_key).unwrap();
    std::fs::rename(&tmp_key, &key).unwrap();
    std::fs::rename(&tmp, &cert).unwrap();
    let renewed = wait_until(Duration::from_secs(10), || {
        s_client(ports.admin, &["-servername", "a.test"]).served(&certs) == "a2"
    });
    assert!(
        renewed,
        "the new certificate is not served\n{}",
        gw.stderr()
    );
    assert_eq!(curl(ports.admin, &ca, "GET", "/healthz", "").0, 200);
}

/// A listener's certificate changed through the API: `PATCH /settings`
/// with the whole `listen` list, the address kept, applies without a
/// restart; a certificate file that does not exist is `400` and the
/// running one stays.
#[test]
fn a_listener_certificate_is_changed_through_the_settings() {
    let certs = Certs::new();
    let ports = Ports::new();
    let tls_port = sluicegate_testkit::free_port();
    let listen = |name: &str| {
        serde_json::json!({ "listen": [
            format!("127.0.0.1:{}", ports.listen),
            { "addr": format!("127.0.0.1:{tls_port}"), "tls": { "certificates": [
                { "cert": certs.cert(name), "key": certs.key(name) } ] } }
        ] })
    };
    let yaml = format!(
        "listen:\n  - \"127.0.0.1:{}\"\n  - {{ addr: \"127.0.0.1:{tls_port}\", tls: {} }}\nadmin: {{ listen: \"127.0.0.1:{}\" }}\nworkers: 1\nroutes:\n  - name: hello\n    match: {{ path_prefix: /hello }}\n    respond: {{ status: 200, body: hi }}\n",
        ports.listen,
        certs.tls(&["a"], None, ""),
        ports.admin,
    );
    let _gw = Gateway::start(bin(), &yaml, &[ports.listen, ports.admin, tls_port]);
    let served = || s_client(tls_port, &["-servername", "a.test"]).served(&certs);
    assert_eq!(served(), "a");

    let patch = |body: serde_json::Value| {
        let mut c = sluicegate_testkit::KeepAliveClient::connect(ports.admin_addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let headers = [
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ];
        c.send("PATCH", "/settings", &headers, body.to_string().as_bytes())
            .unwrap();
        c.read_response_for("PATCH").unwrap()
    };
    let resp = patch(listen("a2"));
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(served(), "a2");

    let mut missing = listen("a");
    missing["listen"][1]["tls"]["certificates"][0]["cert"] = "/nonexistent/a.pem".into();
    let resp = patch(missing);
    assert_eq!(resp.status, 400, "{}", resp.body_str());
    assert!(
        resp.body_str().contains("/nonexistent/a.pem"),
        "{}",
        resp.body_str()
    );
    assert_eq!(served(), "a2");
}
