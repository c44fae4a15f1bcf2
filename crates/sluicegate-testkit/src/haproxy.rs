//! [`Haproxy`]: Debian's HAProxy run in the foreground as a reference peer
//! proxy, with a config given by the test, on a free 127.0.0.1 port;
//! killed on drop.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::gateway::free_port;

/// Where HAProxy is: `/usr/sbin/haproxy`, else the first on PATH.
pub fn haproxy_binary() -> Option<PathBuf> {
    crate::gateway::system_binary("/usr/sbin/haproxy", "haproxy")
}

/// A running HAProxy; killed on drop.
pub struct Haproxy {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Haproxy {
    /// Starts HAProxy with `config`, where `@LISTEN@` stands for the
    /// address it binds (a free loopback port), and waits until it accepts.
    /// Panics if HAProxy is missing or does not come up (with its output).
    pub fn start(config: &str) -> Haproxy {
        let bin = haproxy_binary().expect("haproxy not installed: apt-get install haproxy");
        let mut last_error = String::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("sluicegate-haproxy-")
                .tempdir()
                .expect("create haproxy temp dir");
            let port = free_port();
            let cfg = dir.path().join("haproxy.cfg");
            fs::write(
                &cfg,
                config.replace("@LISTEN@", &format!("127.0.0.1:{port}")),
            )
            .expect("write haproxy.cfg");
            let child = Command::new(&bin)
                .arg("-db")
                .arg("-f")
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(File::create(dir.path().join("stdout.log")).expect("stdout log"))
                .stderr(File::create(dir.path().join("stderr.log")).expect("stderr log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut h = Haproxy { child, port, dir };
            match h.wait_ready() {
                Ok(()) => return h,
                Err(why) => last_error = format!("{why}\n{}", h.logs()),
            }
        }
        panic!("haproxy did not start: {last_error}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("haproxy exited with {status}"));
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("port {} not accepting after 5 s", self.port));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// HAProxy's stdout and stderr so far.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name));
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            read("stdout.log").unwrap_or_default(),
            read("stderr.log").unwrap_or_default()
        )
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
