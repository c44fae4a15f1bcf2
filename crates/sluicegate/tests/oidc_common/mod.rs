//! The OpenID provider of the identity tests: npm `oidc-provider`
//! (tools/oidc-provider.mjs, installed once per test binary by
//! scripts/test-npm) on loopback, with its test-only endpoints.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use sluicegate_testkit::{http_get, http_request};

/// How long the provider may take to say it listens.
const STARTUP: std::time::Duration = std::time::Duration::from_secs(20);

/// The provider, killed when dropped.
pub struct Idp {
    child: Child,
    /// The plain HTTP port (every endpoint, test-only ones too).
    pub addr: SocketAddr,
    /// The tokens' `iss`: this address, or the HTTPS one.
    issuer: String,
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Idp {
    pub fn start() -> Idp {
        Idp::start_with(&[])
    }

    /// With a certificate and key: also over HTTPS, the issuer there.
    pub fn start_with(tls: &[&std::path::Path]) -> Idp {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        // Once per test binary: two tests running `npm ci` into the same
        // folder at once would trip over each other on a fresh checkout.
        static NPM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let installed = *NPM.get_or_init(|| {
            let out = Command::new(root.join("scripts/test-npm"))
                .output()
                .expect("run scripts/test-npm");
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            }
            out.status.success()
        });
        assert!(installed, "scripts/test-npm failed");
        // Node prints the line once ready, or exits (EOF). Bounded: node
        // has been seen to hang at start-up (every thread waiting, nothing
        // listening), so one silent for STARTUP is killed and started again.
        let (mut child, line) = (0..3)
            .find_map(|attempt| {
                let mut child = Command::new("node")
                    .arg(root.join("tools/oidc-provider.mjs"))
                    .arg(root.join("target/npm/node_modules"))
                    .args(tls)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start node");
                let out = child.stdout.take().unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut line = String::new();
                    let _ = BufReader::new(out).read_line(&mut line);
                    let _ = tx.send(line);
                });
                match rx.recv_timeout(STARTUP) {
                    Ok(line) => Some((child, line)),
                    Err(_) => {
                        eprintln!(
                            "provider silent for {STARTUP:?} (attempt {attempt}): started again"
                        );
                        let _ = child.kill();
                        let _ = child.wait();
                        None
                    }
                }
            })
            .expect("the provider started in none of three attempts");
        let ports: Vec<u16> = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("provider said {line:?}")
            })
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        let addr = SocketAddr::from(([127, 0, 0, 1], ports[0]));
        let issuer = match ports.get(1) {
            Some(p) => format!("https://127.0.0.1:{p}"),
            None => format!("http://{addr}"),
        };
        Idp {
            child,
            addr,
            issuer,
        }
    }

    pub fn issuer(&self) -> String {
        self.issuer.clone()
    }

    pub fn token(&self, client: &str, scope: &str) -> String {
        let body = format!(
            "grant_type=client_credentials&client_id={client}&client_secret={client}-secret&scope={scope}"
        );
        let ct = ("Content-Type", "application/x-www-form-urlencoded");
        let r = http_request(self.addr, "POST", "/token", &[ct], body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body_str());
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        v["access_token"].as_str().unwrap().to_string()
    }

    /// A token the provider signs with its newest RS256 key, with any claims.
    pub fn sign(&self, claims: Value, kid: Option<&str>) -> String {
        let body = json!({ "claims": claims, "kid": kid }).to_string();
        let r = http_request(self.addr, "POST", "/_test/sign", &[], body.as_bytes());
        assert_eq!(r.status, 200);
        r.body_str()
    }

    pub fn post(&self, path: &str) {
        assert_eq!(http_request(self.addr, "POST", path, &[], b"").status, 200);
    }

    pub fn jwks_fetches(&self) -> u64 {
        self.count("/_test/jwks_fetches")
    }

    pub fn introspections(&self) -> u64 {
        self.count("/_test/introspections")
    }

    pub fn count(&self, path: &str) -> u64 {
        http_get(self.addr, path, &[]).body_str().parse().unwrap()
    }

    /// Revokes a token of `client` at the provider.
    pub fn revoke(&self, client: &str, token: &str) {
        let body = format!("token={token}&client_id={client}&client_secret={client}-secret");
        let ct = ("Content-Type", "application/x-www-form-urlencoded");
        let r = http_request(
            self.addr,
            "POST",
            "/token/revocation",
            &[ct],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body_str());
    }
}
