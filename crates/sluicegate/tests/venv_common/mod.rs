//! The PyPI test tools' Python: the virtual environment `scripts/test-venv`
//! makes (websockets, h2, grpcio, kosoku), made once per test run.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The virtual environment's Python.
pub fn python() -> &'static PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = Command::new(root.join("scripts/test-venv"))
            .output()
            .expect("run scripts/test-venv");
        assert!(
            out.status.success(),
            "scripts/test-venv failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/python")
    })
}
