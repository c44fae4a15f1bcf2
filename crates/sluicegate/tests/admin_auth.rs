//! The admin API's bearer tokens and `read_only` on the real binary: no or
//! a wrong token 401, a read token on a write 403, a write token writes;
//! `/metrics` and `/healthz` stay open; a read-only API answers writes 405;
//! an admin address off loopback without tokens does not start.

mod admin_common;
mod ops_common;

use admin_common::*;
use ops_common::*;

fn admin_config(ports: Ports, dir: &ScratchDir, extra: &str) -> String {
    let read = dir.write("read.token", "reader-token-1\n");
    let write = dir.write("write.token", "  writer-token-2  \n");
    format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin:\n  listen: \"127.0.0.1:{}\"\n{extra}  tokens:\n    - {{ token_file: {}, role: read }}\n    - {{ token_file: {}, role: write }}\nworkers: 1\nroutes:\n{}",
        ports.listen,
        ports.admin,
        read.display(),
        write.display(),
        respond_route("hello", "/hello", "hi")
    )
}

#[test]
fn tokens_gate_the_api_by_role() {
    let dir = ScratchDir::new("admin-auth");
    let ports = Ports::new();
    let _gw = start(ports, &admin_config(ports, &dir, ""));
    let read = [("Authorization", "Bearer reader-token-1")];
    let write = [("Authorization", "Bearer writer-token-2")];

    let none = call(ports, "GET", "/config", &[], "");
    assert_eq!(none.status, 401);
    assert!(none
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Bearer")));
    let wrong = call(
        ports,
        "GET",
        "/config",
        &[("Authorization", "Bearer nope")],
        "",
    );
    assert_eq!(wrong.status, 401);
    let basic = call(
        ports,
        "GET",
        "/config",
        &[("Authorization", "Basic cmVhZGVy")],
        "",
    );
    assert_eq!(basic.status, 401);

    let got = call(ports, "GET", "/config", &read, "");
    assert_eq!(got.status, 200, "{}", got.body_str());
    let doc = json(&got).to_string();
    let forbidden = call(ports, "PUT", "/config", &read, &doc);
    assert_eq!(forbidden.status, 403, "{}", forbidden.body_str());
    assert_eq!(
        call(ports, "POST", "/config/validate", &read, &doc).status,
        403
    );
    let put = call(ports, "PUT", "/config", &write, &doc);
    assert_eq!(put.status, 200, "{}", put.body_str());
    assert_eq!(call(ports, "GET", "/reloads", &write, "").status, 200);

    // Open without a token.
    assert_eq!(call(ports, "GET", "/healthz", &[], "").status, 200);
    assert_eq!(call(ports, "GET", "/metrics", &[], "").status, 200);
}

#[test]
fn a_read_only_api_answers_writes_405() {
    let dir = ScratchDir::new("admin-ro");
    let ports = Ports::new();
    let gw = start(ports, &admin_config(ports, &dir, "  read_only: true\n"));
    let write = [("Authorization", "Bearer writer-token-2")];
    let got = call(ports, "GET", "/config", &write, "");
    assert_eq!(got.status, 200);
    let before = std::fs::read_to_string(gw.config_path()).unwrap();
    let put = call(ports, "PUT", "/config", &write, &json(&got).to_string());
    assert_eq!(put.status, 405, "{}", put.body_str());
    assert_eq!(put.header("allow"), Some("GET, HEAD"));
    assert_eq!(std::fs::read_to_string(gw.config_path()).unwrap(), before);
}

#[test]
fn an_admin_address_off_loopback_needs_tokens() {
    let dir = ScratchDir::new("admin-lo");
    let ports = Ports::new();
    let file = dir.write(
        "gw.yaml",
        &format!(
            "listen: [\"127.0.0.1:{}\"]\nadmin: {{ listen: \"0.0.0.0:{}\" }}\n",
            ports.listen, ports.admin
        ),
    );
    let out = run_cli(&["validate", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("admin.listen: 0.0.0.0:") && err.contains("is not a loopback address"),
        "{err}"
    );
}
