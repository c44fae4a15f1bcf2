//! A property-based run of the admin API from its own OpenAPI document:
//! schemathesis (from `scripts/test-venv`) reads `/openapi.json` from the
//! real binary and sends generated requests with a write token, bounded in
//! examples and time, on loopback. No answer may be a `5xx`, have a status
//! the document does not list, or break the schema, content type or
//! headers the document gives it. The gateway works in its own temp dir,
//! so that a file a generated config names by a relative path (an access
//! log) is made there, not in the package's folder.

mod admin_common;
mod ops_common;
mod venv_common;

use std::process::Command;

use ops_common::*;
use sluicegate_testkit::Gateway;

/// What every answer is checked for. Not `positive_data_acceptance` nor
/// `negative_data_rejection`: the schemas give each field's form, but the
/// rules between fields (a route has a service or a response, the service
/// it names exists) are the config decoder's, so a body schemathesis
/// thinks valid is often a `400`.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,ignored_auth,unsupported_method";

#[test]
fn schemathesis_finds_no_server_error_and_no_answer_off_the_schema() {
    let ports = Ports::new();
    let dir = ScratchDir::new("schemathesis");
    let token = "schemathesis-write-token";
    let token_file = dir.write("write.token", token);
    let yaml = format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin:\n  listen: \"127.0.0.1:{}\"\n  tokens:\n    - {{ token_file: {}, role: write }}\nworkers: 1\nservices:\n  - name: web\n    endpoints: [\"127.0.0.1:9\"]\nroutes:\n{}{}",
        ports.listen,
        ports.admin,
        token_file.display(),
        respond_route("hello", "/hello", "hi"),
        proxy_route("web", "/web", "web"),
    );
    // The API may put in place a config naming a file by a relative path
    // (an access log named by a generated string): the gateway works in
    // its own temp dir, so that such a file is made there, never in the
    // package's folder, this test's working directory.
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let before = entries(package);
    let gw = Gateway::start_in_own_dir(bin(), &yaml, &ports.both());
    wait_serving(&gw, ports);
    // Such a config, put in place as schemathesis may: its file is made
    // in the gateway's own dir.
    let auth = format!("Bearer {token}");
    let probe = format!("{yaml}log: {{ access: probe.log }}\n");
    let put = sluicegate_testkit::http_request(
        ports.admin_addr(),
        "PUT",
        "/config",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/yaml"),
        ],
        probe.as_bytes(),
    );
    assert_eq!(put.status, 200, "{}", put.body_str());
    assert_eq!(
        sluicegate_testkit::http_get(ports.addr(), "/hello", &[]).status,
        200
    );
    let logged = gw.dir().join("work/probe.log");
    assert!(
        wait_until(std::time::Duration::from_secs(5), || logged.exists()),
        "no access log at {}",
        logged.display()
    );
    let python = venv_common::python();
    let st = python.with_file_name("st");
    let report = dir.path().join("report");
    let out = Command::new(&st)
        .arg("run")
        .arg(format!("http://{}/openapi.json", ports.admin_addr()))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--checks", CHECKS])
        .args(["--max-examples", "30", "--max-time", "90", "--workers", "1"])
        .args(["--request-timeout", "30", "--seed", "21"])
        .arg("--no-color")
        // Its cache goes to the working directory: the scratch one.
        .current_dir(dir.path())
        .arg("--report-dir")
        .arg(&report)
        .output()
        .expect("run schemathesis");
    let said = String::from_utf8_lossy(&out.stdout);
    check(
        &gw,
        out.status.success(),
        &format!(
            "schemathesis failed:\n{said}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    );
    assert!(said.contains("Tested:"), "{said}");
    assert_eq!(
        entries(package),
        before,
        "files made in the package's folder"
    );
}

/// The names in `dir`, sorted.
fn entries(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
}
