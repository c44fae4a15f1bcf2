//! [`Gateway`]: the sluicegate binary run as a child process from a YAML
//! string, with its output captured to files, readiness measured by its
//! listen ports accepting, signals sent with `kill`, and a kill on drop.
//! Also [`free_port`] and [`wait_for_port`] for filling and awaiting configs.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long [`Gateway::start`] waits for the listen ports.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The lowest port [`free_port`] hands out.
const FIRST_TEST_PORT: u16 = 20_000;

/// A port on 127.0.0.1 that was free a moment ago (bound, then released),
/// for a test to give a server it starts.
///
/// It comes from below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), never from it: a port taken there by
/// binding to `:0` is free again at once, and any outgoing connection made
/// meanwhile (the tests' own clients and proxied requests) may get it as
/// its local port before the server binds it. Below the range only an
/// explicit bind can take it; within this process each call gets a port no
/// earlier call got, and processes start at different places.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let end = ephemeral_start().max(FIRST_TEST_PORT + 1_000);
    let span = u32::from(end - FIRST_TEST_PORT);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        let spread = std::process::id().wrapping_mul(7_919) % span;
        let _ = NEXT.compare_exchange(u32::MAX, spread, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FIRST_TEST_PORT + n as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {FIRST_TEST_PORT}..{end}");
}

/// The first port of the kernel's ephemeral range (32768 if unreadable).
fn ephemeral_start() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Waits until 127.0.0.1:`port` accepts a connection; false after `timeout`.
pub fn wait_for_port(port: u16, timeout: Duration) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A running `sluicegate run --config FILE`; killed on drop.
pub struct Gateway {
    child: Child,
    exit: Option<ExitStatus>,
    config: PathBuf,
    dir: TempDir,
}

impl Gateway {
    /// Writes `yaml`, starts `bin run --config FILE` and waits up to
    /// [`READY_TIMEOUT`] until every port in `ports` (on 127.0.0.1) accepts.
    /// Panics with the captured output if the process exits or never gets ready.
    pub fn start(bin: &Path, yaml: &str, ports: &[u16]) -> Gateway {
        Gateway::spawn(bin, yaml).ready(bin, ports)
    }

    /// Waits up to [`READY_TIMEOUT`] for `ports`; panics with the output
    /// when they do not accept.
    fn ready(mut self, bin: &Path, ports: &[u16]) -> Gateway {
        if let Err(why) = self.wait_ready(ports, READY_TIMEOUT) {
            panic!(
                "gateway {} not ready: {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                bin.display(),
                self.stdout(),
                self.stderr()
            );
        }
        self
    }

    /// Like [`Gateway::start`], the process working in a folder of its
    /// temp dir (`work/`, removed with it) instead of the test's working
    /// directory (the package's folder), so that a relative path it is
    /// given later (a config an admin API write put in place, an access
    /// log named by a generated string) names a file in there.
    pub fn start_in_own_dir(bin: &Path, yaml: &str, ports: &[u16]) -> Gateway {
        Gateway::spawn_from(bin, yaml, &[], true).ready(bin, ports)
    }

    /// Writes `yaml` and starts `bin run --config FILE` without waiting.
    pub fn spawn(bin: &Path, yaml: &str) -> Gateway {
        Gateway::spawn_args(bin, yaml, &[])
    }

    /// Like [`Gateway::spawn`], appending `extra` after `run --config FILE`.
    pub fn spawn_args(bin: &Path, yaml: &str, extra: &[&str]) -> Gateway {
        Gateway::spawn_from(bin, yaml, extra, false)
    }

    /// [`Gateway::spawn_args`], working in `work/` of its temp dir when
    /// `own_dir` (see [`Gateway::start_in_own_dir`]).
    fn spawn_from(bin: &Path, yaml: &str, extra: &[&str], own_dir: bool) -> Gateway {
        let dir = tempfile::Builder::new()
            .prefix("sluicegate-gw-")
            .tempdir()
            .expect("create gateway temp dir");
        let config = dir.path().join("sluicegate.yaml");
        fs::write(&config, yaml).expect("write gateway config");
        let out = File::create(dir.path().join("stdout.log")).expect("create stdout.log");
        let err = File::create(dir.path().join("stderr.log")).expect("create stderr.log");
        // The handover socket goes in the temp dir (removed with it), not
        // in the shared temporary directory, unless the test names one.
        let handover = dir.path().join("handover.sock");
        let mut cmd = Command::new(bin);
        cmd.arg("run").arg("--config").arg(&config).args(extra);
        if !extra.contains(&"--handover-socket") {
            cmd.arg("--handover-socket").arg(&handover);
        }
        if own_dir {
            let work = dir.path().join("work");
            fs::create_dir(&work).expect("create the gateway's working dir");
            cmd.current_dir(work);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Gateway {
            child,
            exit: None,
            config,
            dir,
        }
    }

    /// Waits until every port accepts on 127.0.0.1; an error if the process
    /// exits first or `timeout` passes.
    pub fn wait_ready(&mut self, ports: &[u16], timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        for &port in ports {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            loop {
                if let Some(status) = self.try_exit() {
                    return Err(format!("exited with {status} before listening on {addr}"));
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!("{addr} did not accept within {timeout:?}"));
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The temp dir holding the config and the output logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the config file atomically (write a sibling, rename over).
    pub fn write_config(&self, yaml: &str) {
        let tmp = self.dir.path().join(".sluicegate.yaml.new");
        fs::write(&tmp, yaml).expect("write new gateway config");
        fs::rename(&tmp, &self.config).expect("rename new gateway config");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stdout so far.
    pub fn stdout(&self) -> String {
        fs::read_to_string(self.dir.path().join("stdout.log")).unwrap_or_default()
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Sends SIGHUP (reload).
    pub fn reload_signal(&self) {
        self.signal("HUP");
    }

    /// Sends SIGTERM (graceful stop).
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends `SIG<name>` with the `kill` command (e.g. "HUP", "TERM", "INT").
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where a system program is: `default` when it is a file there, else the
/// first `name` on `PATH`.
pub fn system_binary(default: &str, name: &str) -> Option<std::path::PathBuf> {
    let default = std::path::PathBuf::from(default);
    if default.is_file() {
        return Some(default);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}
