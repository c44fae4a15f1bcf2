//! Helpers for the `etcd_*` end-to-end tests: a real etcd (Debian's
//! `etcd-server`) started on free loopback ports with a temporary data
//! directory and killed on drop, `etcdctl` calls, and gateways whose config
//! comes from it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sluicegate_testkit::free_port;
use sluicegate_testkit::gateway::wait_for_port;

use crate::ops_common::Ports;

/// The `etcd` binary, or `None` (the test then says it is skipped).
pub fn etcd_binary() -> Option<PathBuf> {
    ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// One etcd member on 127.0.0.1; killed on drop.
pub struct Etcd {
    child: Option<Child>,
    pub client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

impl Etcd {
    pub fn start() -> Option<Etcd> {
        etcd_binary()?;
        let mut e = Etcd {
            child: None,
            client_port: free_port(),
            peer_port: free_port(),
            dir: tempfile::tempdir().expect("etcd temp dir"),
        };
        e.resume();
        Some(e)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Starts (again, on the same data) the member.
    pub fn resume(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).expect("etcd log");
        let child = Command::new(etcd_binary().expect("etcd"))
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--experimental-watch-progress-notify-interval", "1s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        assert!(
            wait_for_port(self.client_port, Duration::from_secs(15)),
            "etcd did not listen: {}",
            std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
        );
        // Ready once it answers a read.
        let ok = crate::ops_common::wait_until(Duration::from_secs(10), || {
            self.try_ctl(&["get", "/x"]).is_ok()
        });
        assert!(ok, "etcd never answered");
    }

    /// Kills the member (its data stays for `resume`).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn try_ctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `etcdctl ARGS`, panicking on failure.
    pub fn ctl(&self, args: &[&str]) -> String {
        self.try_ctl(args)
            .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"))
    }

    /// The current revision of the store.
    pub fn revision(&self) -> u64 {
        let out = self.ctl(&["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("status JSON");
        v[0]["Status"]["header"]["revision"]
            .as_u64()
            .expect("revision")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A gateway config taking everything but listen and admin from `etcd`,
/// with its cache at `cache`.
pub fn config(ports: Ports, etcd: &Etcd, cache: &Path) -> String {
    format!(
        "{}config_source:\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /sg/\n    cache: {}\n",
        ports.head(),
        etcd.url(),
        cache.display()
    )
}

/// A `respond` route as its etcd JSON value.
pub fn route_json(path: &str, body: &str) -> String {
    format!(r#"{{"match":{{"path":"{path}"}},"respond":{{"status":200,"body":"{body}"}}}}"#)
}

/// Whether `path` on the gateway answers 200 with `body`.
pub fn serves(ports: Ports, path: &str, body: &str) -> bool {
    sluicegate_testkit::try_http_get(ports.addr(), path, &[])
        .is_ok_and(|r| r.status == 200 && r.body_str() == body)
}

/// The value of metric `name` (no labels) on the gateway.
pub fn gauge(ports: Ports, name: &str) -> Option<f64> {
    let resp = sluicegate_testkit::try_http_get(ports.admin_addr(), "/metrics", &[]).ok()?;
    resp.body_str()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
