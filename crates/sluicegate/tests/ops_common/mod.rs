//! Helpers shared by the `ops_*` end-to-end tests: the binary's path, config
//! snippets, waiting with a deadline, and reading `/metrics` and `/healthz`
//! from the admin listener.
//!
//! Every test starts its own gateway on its own free ports of 127.0.0.1 and
//! bounds every wait, so the tests of one file can run in parallel.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use sluicegate_testkit::{free_port, http_get, Gateway};

/// The gateway binary built by cargo for these tests.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluicegate"))
}

/// The repository root (for `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// 127.0.0.1:`port`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Runs `sluicegate ARGS...` to completion (for `validate` and `version`).
pub fn run_cli(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {} {args:?}: {e}", bin().display()))
}

/// Polls `cond` every 20 ms until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A gateway's listen port and admin port.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub listen: u16,
    pub admin: u16,
}

impl Ports {
    pub fn new() -> Ports {
        let listen = free_port();
        let mut admin = free_port();
        while admin == listen {
            admin = free_port();
        }
        Ports { listen, admin }
    }

    pub fn both(&self) -> [u16; 2] {
        [self.listen, self.admin]
    }

    pub fn addr(&self) -> SocketAddr {
        local(self.listen)
    }

    pub fn admin_addr(&self) -> SocketAddr {
        local(self.admin)
    }

    /// The top of a config: listen, admin and one worker thread.
    pub fn head(&self) -> String {
        format!(
            "listen: [\"127.0.0.1:{}\"]\nadmin: {{ listen: \"127.0.0.1:{}\" }}\nworkers: 1\n",
            self.listen, self.admin
        )
    }
}

impl Default for Ports {
    fn default() -> Self {
        Ports::new()
    }
}

/// Starts the gateway on `yaml`, waiting for both ports and for the admin
/// listener to answer. The admin listener is served only once the signal
/// handlers and the file watcher are set up, so a test may signal the
/// gateway or change its file at once (its ports accept earlier than that).
pub fn start(ports: Ports, yaml: &str) -> Gateway {
    let gw = Gateway::start(bin(), yaml, &ports.both());
    wait_serving(&gw, ports);
    gw
}

/// A gateway that `run --upgrade` can take over: started on `yaml` with its
/// handover socket at `sock`, waited for as [`start`] does.
pub fn start_upgradable(ports: Ports, yaml: &str, sock: &Path) -> Gateway {
    let sock = sock.to_str().expect("utf-8 socket path");
    let mut gw = Gateway::spawn_args(bin(), yaml, &["--handover-socket", sock]);
    if let Err(why) = gw.wait_ready(&ports.both(), Duration::from_secs(10)) {
        panic!("gateway not ready: {why}\n{}", gw.stderr());
    }
    wait_serving(&gw, ports);
    gw
}

/// `sluicegate run --upgrade` on `yaml`: a new process taking over from the
/// one serving the handover socket `sock` (not waited for).
pub fn spawn_upgrade(yaml: &str, sock: &Path) -> Gateway {
    let sock = sock.to_str().expect("utf-8 socket path");
    Gateway::spawn_args(bin(), yaml, &["--handover-socket", sock, "--upgrade"])
}

/// Waits until the admin listener answers `/healthz`.
pub fn wait_serving(gw: &Gateway, ports: Ports) {
    let serving = wait_until(Duration::from_secs(10), || {
        sluicegate_testkit::try_http_get(ports.admin_addr(), "/healthz", &[])
            .is_ok_and(|r| r.status == 200)
    });
    check(gw, serving, "the admin listener never answered /healthz");
}

/// A `respond` route item (for a `routes:` list) answering `body` on `path`.
pub fn respond_route(name: &str, path: &str, body: &str) -> String {
    format!(
        "  - name: {name}\n    match: {{ path: {path} }}\n    respond: {{ status: 200, body: \"{body}\", headers: {{ content-type: text/plain }} }}\n"
    )
}

/// A `proxy` route item taking `prefix` to `service`.
pub fn proxy_route(name: &str, prefix: &str, service: &str) -> String {
    format!("  - name: {name}\n    match: {{ path_prefix: {prefix} }}\n    service: {service}\n")
}

/// A service item with the given endpoint ports on 127.0.0.1.
pub fn service(name: &str, ports: &[u16]) -> String {
    let eps: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!("  - name: {name}\n    endpoints: [{}]\n", eps.join(", "))
}

/// The admin `/metrics` text.
pub fn metrics(ports: Ports) -> String {
    let resp = http_get(ports.admin_addr(), "/metrics", &[]);
    assert_eq!(resp.status, 200, "GET /metrics: {}", resp.body_str());
    resp.body_str()
}

/// The value of one sample, named exactly as rendered, e.g.
/// `sluicegate_requests_total{route="a",class="2xx"}`. None if absent.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(series)?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Like [`sample`] on a fresh `/metrics`, panicking with the text if absent.
pub fn metric(ports: Ports, series: &str) -> f64 {
    let text = metrics(ports);
    sample(&text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

/// The admin `/healthz` document.
pub fn healthz(ports: Ports) -> serde_json::Value {
    let resp = http_get(ports.admin_addr(), "/healthz", &[]);
    assert_eq!(resp.status, 200, "GET /healthz: {}", resp.body_str());
    serde_json::from_slice(&resp.body)
        .unwrap_or_else(|e| panic!("/healthz is not JSON ({e}): {}", resp.body_str()))
}

/// `config_generation` from `/healthz`.
pub fn generation(ports: Ports) -> u64 {
    let doc = healthz(ports);
    doc["config_generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("no config_generation in {doc}"))
}

/// Waits up to `timeout` for the config generation to pass `than`.
pub fn wait_generation_above(ports: Ports, than: u64, timeout: Duration) -> bool {
    wait_until(timeout, || generation(ports) > than)
}

/// A unique, empty directory under the system temp dir; removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> ScratchDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "sluicegate-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create scratch dir");
        ScratchDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` inside the dir and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write scratch file");
        p
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Panics with the gateway's output when `ok` is false.
pub fn check(gw: &Gateway, ok: bool, what: &str) {
    if !ok {
        panic!(
            "{what}\n--- gateway stdout ---\n{}\n--- gateway stderr ---\n{}",
            gw.stdout(),
            gw.stderr()
        );
    }
}
