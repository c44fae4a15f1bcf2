//! The admin API's OpenAPI document, as the real binary serves it, checked
//! against the OpenAPI 3.1 schema by openapi-spec-validator (from the test
//! tools' virtual environment, `scripts/test-venv`).

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
