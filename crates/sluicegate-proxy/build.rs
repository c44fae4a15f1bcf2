//! Records the commit and the compiler the crate is built from, for
//! `sluicegate_build_info` (empty when git or rustc cannot tell; a build
//! outside a checkout may set SLUICEGATE_COMMIT itself).

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Watches a file git reads HEAD from, when it exists (a missing one
/// would rerun this script on every build).
fn watch(path: Option<String>) {
    if let Some(p) = path.filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLUICEGATE_COMMIT");
    let commit = std::env::var("SLUICEGATE_COMMIT")
        .ok()
        .or_else(|| output("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_default();
    // Rebuilt when HEAD moves: the files git reads it from.
    for path in ["HEAD", "packed-refs"] {
        watch(output("git", &["rev-parse", "--git-path", path]));
    }
    if let Some(r) = output("git", &["symbolic-ref", "-q", "HEAD"]) {
        watch(output("git", &["rev-parse", "--git-path", &r]));
    }
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(&rustc, &["--version"]).unwrap_or_default();
    // "rustc 1.83.0 (90b35a623 2024-11-26)": the version number.
    let version = version.split_whitespace().nth(1).unwrap_or("").to_string();
    println!("cargo:rustc-env=SLUICEGATE_COMMIT={commit}");
    println!("cargo:rustc-env=SLUICEGATE_RUSTC={version}");
}
