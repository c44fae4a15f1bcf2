//! [`Nginx`]: Debian's nginx run in the foreground as a reference upstream,
//! with a rendered config, pid, logs, temp paths and content in its own temp
//! dir, one worker, on a free 127.0.0.1 port; killed on drop.
//!
//! Locations served:
//!
//! | location | reply |
//! | --- | --- |
//! | `/test.html` | the 75-byte [`TEST_HTML`] |
//! | `/hello` | `ok` |
//! | `/headers` | `xff=.. host=.. uri=.. xfp=.. xfh=..\n` from the request |
//! | `/big` | a 1 MiB static file, [`big_body`] |
//! | `/upload` | POST bodies up to 20 MiB, answered `len=$content_length\n` |

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::gateway::free_port;
use crate::upstream::pattern;

/// Body of `/test.html`: exactly 75 bytes (the size used in the benchmarks).
pub const TEST_HTML: &str =
    "<!doctype html><title>sluicegate</title><p>The 75-byte nginx test page</p>\n";
/// Size of `/big`.
pub const BIG_LEN: usize = 1 << 20;
/// How long [`Nginx::start`] waits for the port to accept.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// The content of `/big`: [`BIG_LEN`] bytes of `abc..xyzabc..`.
pub fn big_body() -> Vec<u8> {
    pattern(BIG_LEN)
}

/// Where nginx is: `/usr/sbin/nginx`, else the first `nginx` on PATH.
pub fn nginx_binary() -> Option<PathBuf> {
    crate::gateway::system_binary("/usr/sbin/nginx", "nginx")
}

/// A running nginx; killed on drop.
pub struct Nginx {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Nginx {
    /// Starts nginx and waits until its port accepts (at most [`START_TIMEOUT`]).
    /// Panics if nginx is missing or does not come up (with its error log).
    pub fn start() -> Nginx {
        Nginx::start_with(|dir, port| {
            prepare(dir, port);
            render(dir, port, runs_as_root(dir))
        })
    }

    /// Starts nginx with the config `conf(dir, port)` renders for its prefix
    /// dir (with `conf/`, `logs/`, `html/` and `tmp/` made) and a free port;
    /// waits for the port as [`Nginx::start`] does. [`user_line`] gives the
    /// `user root;` a config needs when the tests run as root.
    pub fn start_with(conf: impl Fn(&Path, u16) -> String) -> Nginx {
        let bin = nginx_binary().expect("nginx not installed: apt-get install nginx-light");
        let mut last_error = String::new();
        // A free port can be taken between probing and nginx's bind: retry.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("sluicegate-nginx-")
                .tempdir()
                .expect("create nginx temp dir");
            let port = free_port();
            for sub in ["conf", "logs", "html", "tmp"] {
                fs::create_dir_all(dir.path().join(sub)).expect("create nginx dir");
            }
            let text = conf(dir.path(), port);
            let conf = dir.path().join("conf/nginx.conf");
            fs::write(&conf, text).expect("write nginx.conf");
            let child = Command::new(&bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(dir.path().join("logs/error.log"))
                .arg("-c")
                .arg(&conf)
                .arg("-g")
                .arg("daemon off;")
                // Its own process group, so that `kill_hard` reaches the
                // worker as well as the master.
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(File::create(dir.path().join("logs/stdout.log")).expect("stdout log"))
                .stderr(File::create(dir.path().join("logs/stderr.log")).expect("stderr log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut nginx = Nginx { child, port, dir };
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(why) => last_error = format!("{why}\n{}", nginx.logs()),
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("nginx exited with {status}"));
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

    /// The prefix dir (config in `conf/`, logs in `logs/`, content in `html/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills nginx at once, master and worker (SIGKILL to its process
    /// group): its connections are reset and its port refuses, as when a
    /// machine or container dies.
    pub fn kill_hard(&mut self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }

    /// nginx's error log and stderr so far.
    pub fn logs(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join("logs").join(name));
        format!(
            "--- error.log ---\n{}\n--- stderr ---\n{}",
            read("error.log").unwrap_or_default(),
            read("stderr.log").unwrap_or_default()
        )
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM is nginx's fast shutdown: the master stops its worker and
        // exits. SIGKILL on the master alone would orphan the worker.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
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

/// Writes the content of the default config's locations.
fn prepare(dir: &Path, _port: u16) {
    fs::write(dir.join("html/test.html"), TEST_HTML).expect("write test.html");
    fs::write(dir.join("html/big"), big_body()).expect("write big");
}

/// Whether files made in `dir` belong to root (the tests run as root).
fn runs_as_root(dir: &Path) -> bool {
    fs::metadata(dir).is_ok_and(|m| m.uid() == 0)
}

/// `user root;\n` when the tests run as root, else nothing: a master
/// started as root runs its worker as `nobody`, which cannot enter a 0700
/// temp dir, so the worker stays root then.
pub fn user_line(dir: &Path) -> &'static str {
    if runs_as_root(dir) {
        "user root;\n"
    } else {
        ""
    }
}

fn render(dir: &Path, port: u16, as_root: bool) -> String {
    let d = dir.display();
    let user = if as_root { "user root;\n" } else { "" };
    format!(
        r#"{user}worker_processes 1;
pid {d}/logs/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {d}/tmp/client_body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        root {d}/html;
        client_max_body_size 20m;
        location = /test.html {{ default_type text/html; }}
        location = /hello {{ default_type text/plain; return 200 "ok"; }}
        location = /headers {{
            default_type text/plain;
            return 200 "xff=$http_x_forwarded_for host=$host uri=$request_uri xfp=$http_x_forwarded_proto xfh=$http_x_forwarded_host\n";
        }}
        location = /big {{ }}
        location = /upload {{
            client_body_buffer_size 1m;
            default_type text/plain;
            return 200 "len=$content_length\n";
        }}
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_page_is_75_bytes() {
        assert_eq!(TEST_HTML.len(), 75);
    }
}
