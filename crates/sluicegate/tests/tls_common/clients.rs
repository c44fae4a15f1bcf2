//! External TLS clients: `openssl s_client`, `curl` and Python's `ssl`,
//! each run with a deadline.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::certs::{pem_b64, Certs};
use super::run::{run_cmd, Run, CLIENT_DEADLINE};

/// A finished `openssl s_client` run.
#[derive(Debug)]
pub struct SClient {
    pub run: Run,
}

impl SClient {
    /// The negotiated version (`TLSv1.2`, `TLSv1.3`) if the handshake worked.
    pub fn version(&self) -> Option<String> {
        self.run.stdout.lines().find_map(|l| {
            let rest = l
                .strip_prefix("New, ")
                .or_else(|| l.strip_prefix("Reused, "))?;
            let v = rest.split(',').next()?.trim();
            v.starts_with("TLSv").then(|| v.to_string())
        })
    }

    pub fn handshake_ok(&self) -> bool {
        self.version().is_some()
    }

    /// True when the session was resumed.
    pub fn reused(&self) -> bool {
        self.run
            .stdout
            .lines()
            .any(|l| l.starts_with("Reused, TLSv"))
    }

    /// The negotiated ALPN protocol, if any.
    pub fn alpn(&self) -> Option<String> {
        self.run.stdout.lines().find_map(|l| {
            l.strip_prefix("ALPN protocol: ")
                .map(|s| s.trim().to_string())
        })
    }

    /// The served leaf certificate's base64 body.
    pub fn cert_b64(&self) -> Option<String> {
        pem_b64(&self.run.stdout)
    }

    /// Which test certificate was served.
    pub fn served(&self, certs: &Certs) -> String {
        match self.cert_b64() {
            Some(b) => certs.which(&b),
            None => "none".to_string(),
        }
    }

    pub fn all(&self) -> String {
        self.run.all()
    }
}

/// `openssl s_client -connect 127.0.0.1:PORT ARGS`, sending `GET /path`
/// with `Connection: close` and waiting for the server to close (so TLS 1.3
/// tickets sent after the handshake are received).
pub fn s_client(port: u16, args: &[&str]) -> SClient {
    s_client_path(port, args, "/")
}

pub fn s_client_path(port: u16, args: &[&str], path: &str) -> SClient {
    let req = format!("GET {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    let run = run_cmd(
        Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .arg("-ign_eof")
            .args(args),
        req.as_bytes(),
        CLIENT_DEADLINE,
    );
    assert!(!run.timed_out, "s_client did not finish:\n{}", run.all());
    SClient { run }
}

/// `curl` over TLS to `https://HOST:PORT/path`, verifying with `ca`
/// (or with `-k` when `ca` is None). Returns (status, body, run).
pub fn curl_tls(port: u16, host: &str, path: &str, ca: Option<&Path>) -> (u16, String, Run) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "5", "--resolve"])
        .arg(format!("{host}:{port}:127.0.0.1"));
    match ca {
        Some(ca) => {
            cmd.arg("--cacert").arg(ca);
        }
        None => {
            cmd.arg("-k");
        }
    }
    cmd.args(["-w", "\n%{http_code}"])
        .arg(format!("https://{host}:{port}{path}"));
    let run = run_cmd(&mut cmd, b"", CLIENT_DEADLINE);
    let (body, code) = run.stdout.rsplit_once('\n').unwrap_or(("", &run.stdout));
    let code = code.trim().parse().unwrap_or(0);
    (code, body.to_string(), run)
}

/// Python: one verified TLS connection to 127.0.0.1:PORT named `host`,
/// after sending `prefix` in the clear (a PROXY header, or nothing), then
/// `GET path`; prints `VERSION STATUS-LINE SHA256` or raises.
pub const PY_ONE: &str = r#"
import hashlib, socket, ssl, sys
port, host, ca, path, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], bytes.fromhex(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
raw = socket.create_connection(("127.0.0.1", port), timeout=5)
raw.sendall(prefix)
with ctx.wrap_socket(raw, server_hostname=host) as s:
    fp = hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()
    version = s.version()
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    print(version, data.split(b"\r\n")[0].decode(), fp)
    sys.stdout.write(data.decode(errors="replace"))
"#;

/// Python: new verified TLS connections to `host` in a loop for `secs`
/// seconds, one `GET path` each; one line per request: `ok SHA256` or
/// `fail ERROR`.
pub const PY_LOOP: &str = r#"
import hashlib, socket, ssl, sys, time
port, host, ca, path, secs = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
end = time.monotonic() + secs
while time.monotonic() < end:
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=3)
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            fp = hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            status = data.split(b"\r\n")[0]
            if not status.startswith(b"HTTP/1.1 200"):
                print("fail status %r" % status, flush=True)
            else:
                print("ok", fp, flush=True)
    except Exception as e:
        print("fail %r" % e, flush=True)
"#;

pub fn python(script: &str, args: &[String], deadline: Duration) -> Run {
    run_cmd(
        Command::new("python3").arg("-c").arg(script).args(args),
        b"",
        deadline,
    )
}

/// Runs [`PY_ONE`]: (first output line, full output).
pub fn python_get(port: u16, host: &str, ca: &Path, path: &str, prefix: &[u8]) -> Run {
    let hex: String = prefix.iter().map(|b| format!("{b:02x}")).collect();
    python(
        PY_ONE,
        &[
            port.to_string(),
            host.to_string(),
            ca.display().to_string(),
            path.to_string(),
            hex,
        ],
        CLIENT_DEADLINE,
    )
}
