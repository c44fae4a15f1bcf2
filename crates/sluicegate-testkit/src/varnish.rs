//! [`Varnish`]: Debian's `varnishd` run in the foreground as a reference
//! cache, with a VCL the test writes, its own work dir (`-n`) in a temp dir,
//! `-s malloc,64m`, on a free 127.0.0.1 port; stopped on drop.
//!
//! It runs with `-j none`: no jail, so every process stays the user that
//! started it. Root (CI) would otherwise switch to the `varnish` and
//! `vcache` users, which cannot enter the 0700 temp dir; a normal user
//! could not switch at all. There is no management port (`-T none`).

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::gateway::free_port;

/// How long [`Varnish::start`] waits for the port to accept (it compiles
/// the VCL with the C compiler first).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Where varnishd is: `/usr/sbin/varnishd`, else the first on PATH.
pub fn varnishd_binary() -> Option<PathBuf> {
    crate::gateway::system_binary("/usr/sbin/varnishd", "varnishd")
}

/// A running varnishd; stopped on drop.
pub struct Varnish {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Varnish {
    /// Starts varnishd with `vcl` and the run-time parameters `params`
    /// (`name=value`, each given with `-p`), and waits until its port
    /// accepts (at most [`START_TIMEOUT`]). Panics if varnishd is missing
    /// or does not come up (with its output).
    pub fn start(vcl: &str, params: &[&str]) -> Varnish {
        let bin = varnishd_binary().expect("varnishd not installed: apt-get install varnish");
        let mut last_error = String::new();
        // A free port can be taken between probing and varnishd's bind.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("sluicegate-varnish-")
                .tempdir()
                .expect("create varnish temp dir");
            let port = free_port();
            let vcl_path = dir.path().join("test.vcl");
            fs::write(&vcl_path, vcl).expect("write test.vcl");
            let mut cmd = Command::new(&bin);
            cmd.arg("-F")
                .args(["-j", "none", "-T", "none", "-s", "malloc,64m"])
                .arg("-n")
                .arg(dir.path().join("work"))
                .arg("-a")
                .arg(format!("127.0.0.1:{port}"))
                .arg("-f")
                .arg(&vcl_path);
            for p in params {
                cmd.args(["-p", p]);
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(File::create(dir.path().join("stdout.log")).expect("stdout log"))
                .stderr(File::create(dir.path().join("stderr.log")).expect("stderr log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut varnish = Varnish { child, port, dir };
            match varnish.wait_ready() {
                Ok(()) => return varnish,
                Err(why) => last_error = format!("{why}\n{}", varnish.logs()),
            }
        }
        panic!("varnishd did not start: {last_error}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("varnishd exited with {status}"));
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "port {} not accepting after {START_TIMEOUT:?}",
                    self.port
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp dir (VCL, work dir `work/`, output logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// varnishd's output so far.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name));
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            read("stdout.log").unwrap_or_default(),
            read("stderr.log").unwrap_or_default()
        )
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        // SIGTERM: the manager stops its child and exits.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
