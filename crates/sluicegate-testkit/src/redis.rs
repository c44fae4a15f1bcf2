//! [`RedisServer`]: Debian's `redis-server` on a free loopback port with
//! its own temporary directory, stopped on drop (and restartable on the
//! same port); [`RedisCluster`]: three such servers made a Redis Cluster of
//! three masters by `redis-cli --cluster create`; a TLS-only server with
//! [`RedisServer::start_tls`]. [`redis_cli`] runs one
//! command against a port.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::gateway::{free_port, wait_for_port};

/// `redis-server`, or `None` when it is not installed.
pub fn redis_server_bin() -> Option<PathBuf> {
    crate::gateway::system_binary("/usr/bin/redis-server", "redis-server")
}

pub struct RedisServer {
    pub port: u16,
    dir: TempDir,
    child: Option<Child>,
    cluster: bool,
    extra: Vec<String>,
    tls: Option<RedisTls>,
}

/// The files of a TLS-only server: its certificate and key, and the CA
/// that `redis-cli` trusts.
#[derive(Debug, Clone)]
pub struct RedisTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl RedisServer {
    /// A plain server (no persistence).
    pub fn start() -> RedisServer {
        RedisServer::start_with(false, &[])
    }

    /// A plain server with more command-line options (`--requirepass X`).
    pub fn start_args(extra: &[&str]) -> RedisServer {
        RedisServer::start_with(false, extra)
    }

    /// A server that speaks TLS only (no plain port), clients not asked
    /// for a certificate.
    pub fn start_tls(tls: RedisTls) -> RedisServer {
        let mut r = RedisServer::new(false, &[]);
        r.tls = Some(tls);
        r.restart();
        r
    }

    fn start_with(cluster: bool, extra: &[&str]) -> RedisServer {
        let mut r = RedisServer::new(cluster, extra);
        r.restart();
        r
    }

    fn new(cluster: bool, extra: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("sluicegate-redis-")
            .tempdir()
            .expect("temp dir for redis");
        RedisServer {
            port: port_for(cluster),
            dir,
            child: None,
            cluster,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
        }
    }

    /// Starts the server again on the same port (after [`RedisServer::stop`]).
    pub fn restart(&mut self) {
        let bin = redis_server_bin().expect("redis-server is installed (scripts/deps)");
        let mut cmd = Command::new(bin);
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some(t) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(&t.cert)
                .arg("--tls-key-file")
                .arg(&t.key)
                .arg("--tls-ca-cert-file")
                .arg(&t.ca)
                .args(["--tls-auth-clients", "no"]),
        };
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra);
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(self.dir.path().join("nodes.conf"));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        assert!(
            wait_for_port(self.port, Duration::from_secs(10)),
            "redis-server did not listen on {}",
            self.port
        );
        let exited = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        assert!(
            exited.is_none(),
            "redis-server on {} exited: {exited:?}",
            self.port
        );
    }

    /// Kills the server (its data is gone: nothing is saved).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `redis://127.0.0.1:PORT`, `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli -p PORT ARGS...` (over TLS for a TLS server) and
    /// returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        match &self.tls {
            None => redis_cli(self.port, args),
            Some(t) => {
                let out = Command::new("redis-cli")
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "--tls"])
                    .arg("--cacert")
                    .arg(&t.ca)
                    .args(args)
                    .output()
                    .expect("run redis-cli");
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
        }
    }
}

/// A free port; for a cluster node, one whose bus port (+10000) is free too.
fn port_for(cluster: bool) -> u16 {
    loop {
        let p = free_port();
        if !cluster
            || (p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok())
        {
            return p;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `redis-cli -p port args...` and returns its standard output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Three masters on loopback ports, one cluster.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(true, &[])).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster never became ok");
            thread::sleep(Duration::from_millis(100));
        }
        RedisCluster { nodes }
    }

    /// A node's URL (any node is a seed).
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }
}
