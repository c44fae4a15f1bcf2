//! The admin API's OpenAPI document, as the real binary serves it, checked
//! against the OpenAPI 3.1 schema by openapi-spec-validator (from the test
//! tools' virtual environment, `scripts/test-venv`) and linted by Redocly
//! CLI (`scripts/test-npm`) with the rules of `tools/npm/redocly.yaml`.

mod admin_common;
mod ops_common;
mod venv_common;

use std::process::Command;

use admin_common::*;
use ops_common::*;

#[test]
fn the_openapi_document_is_valid_openapi_3_1() {
    let ports = Ports::new();
    let _gw = start(
        ports,
        &format!("{}routes:\n{}", ports.head(), respond_route("r", "/r", "r")),
    );
    let resp = call(ports, "GET", "/openapi.json", &[], "");
    assert_eq!(resp.status, 200);
    let dir = ScratchDir::new("openapi");
    let file = dir.write("openapi.json", &resp.body_str());
    let out = Command::new(venv_common::python())
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))\nprint('valid')",
        ])
        .arg(&file)
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
}

#[test]
fn the_openapi_document_passes_the_redocly_lint() {
    let ports = Ports::new();
    let _gw = start(
        ports,
        &format!("{}routes:\n{}", ports.head(), respond_route("r", "/r", "r")),
    );
    let resp = call(ports, "GET", "/openapi.json", &[], "");
    assert_eq!(resp.status, 200);
    let dir = ScratchDir::new("openapi-lint");
    let file = dir.write("openapi.json", &resp.body_str());
    let root = repo_root();
    let npm = Command::new(root.join("scripts/test-npm"))
        .output()
        .expect("run scripts/test-npm");
    assert!(
        npm.status.success(),
        "scripts/test-npm: {}",
        String::from_utf8_lossy(&npm.stderr)
    );
    let bin = String::from_utf8_lossy(&npm.stdout).trim().to_string();
    let out = Command::new(format!("{bin}/redocly"))
        .arg("lint")
        .arg("--config")
        .arg(root.join("tools/npm/redocly.yaml"))
        .arg("--format=stylish")
        .arg(&file)
        .env("REDOCLY_TELEMETRY", "off")
        .env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true")
        .output()
        .expect("run redocly");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    // Every rule is an error (recommended-strict): a pass is a clean lint.
    assert!(said.contains("Your API description is valid"), "{said}");
}
