//! A property-based run of the admin API from its own OpenAPI document:
//! schemathesis (from `scripts/test-venv`) reads `/openapi.json` from the
//! real binary and sends generated requests with a write token, bounded in
//! examples and time, on loopback. No answer may be a `5xx`, have a status
//! the document does not list, or break the schema, content type or
//! headers the document gives it.

mod admin_common;
mod ops_common;
mod venv_common;

use std::process::Command;

use ops_common::*;

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
    let gw = start(ports, &yaml);
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
}
