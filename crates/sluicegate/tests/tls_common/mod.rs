//! Helpers shared by the `tls_*` end-to-end tests: certificates made at
//! test time with the `openssl` CLI (a test CA and leaves signed by it),
//! external clients (`openssl s_client`, `curl`, Python's `ssl`) run with a
//! deadline, listener YAML, and raw socket exchanges.
//!
//! Needs `ops_common` declared next to it (`mod ops_common; mod tls_common;`).
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sluicegate_testkit::{free_port, Gateway};

use crate::ops_common::{bin, check, local, wait_until, Ports};

/// How long any external client may run before it is killed.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(15);

/// What a command printed, and whether it exited with success in time.
#[derive(Debug)]
pub struct Run {
    pub success: bool,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout and stderr together, for failure messages.
    pub fn all(&self) -> String {
        format!(
            "success={} timed_out={}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.success, self.timed_out, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with `stdin` written to it, killing it after `deadline`.
pub fn run_cmd(cmd: &mut Command, stdin: &[u8], deadline: Duration) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = thread::spawn(move || {
        let _ = input.write_all(&data);
        // Dropping `input` closes the pipe.
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if start.elapsed() > deadline {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Run {
        success: status.is_some_and(|s| s.success()),
        timed_out,
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------- certificates

/// The certificates of one test, in their own temp dir:
///
/// | name | key | names | serial |
/// | --- | --- | --- | --- |
/// | `ca` | P-256 | CN Sluicegate Test CA | 1 |
/// | `a` | P-256 | DNS:a.test | 0x1001 |
/// | `b` | P-256 | DNS:*.b.test | 0x1002 |
/// | `a_rsa` | RSA-2048 | DNS:a.test | 0x1003 |
/// | `expired` | P-256 | DNS:a.test, notAfter a day ago | 0x1004 |
/// | `a2` | P-256 | DNS:a.test (a second pair for reloads) | 0x1005 |
pub struct Certs {
    dir: tempfile::TempDir,
}

pub const CERT_NAMES: [&str; 5] = ["a", "b", "a_rsa", "expired", "a2"];

const MAKE_CERTS: &str = r#"
set -e
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ec ca.key
openssl req -x509 -new -key ca.key -subj "/CN=Sluicegate Test CA" -days 3 -set_serial 1 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -addext "subjectKeyIdentifier=hash" -out ca.pem
leaf() { # name keyfile cn san serial days
  openssl req -new -key "$2" -subj "/CN=$3" -out "$1.csr"
  printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "$5" -days "$6" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ec a.key;       leaf a a.key a.test DNS:a.test 0x1001 2
ec b.key;       leaf b b.key '*.b.test' 'DNS:*.b.test' 0x1002 2
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out a_rsa.key 2>/dev/null
                leaf a_rsa a_rsa.key a.test DNS:a.test 0x1003 2
ec expired.key; leaf expired expired.key a.test DNS:a.test 0x1004 -1
ec a2.key;      leaf a2 a2.key a.test DNS:a.test 0x1005 2
"#;

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::Builder::new()
            .prefix("sluicegate-tls-")
            .tempdir()
            .expect("create cert dir");
        let run = run_cmd(
            Command::new("sh")
                .arg("-c")
                .arg(MAKE_CERTS)
                .current_dir(dir.path()),
            b"",
            Duration::from_secs(60),
        );
        assert!(run.success, "making certificates failed:\n{}", run.all());
        Certs { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pem"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.key"))
    }

    /// The base64 body of `name`'s certificate, whitespace removed.
    pub fn b64(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.cert(name)).expect("read cert");
        pem_b64(&text).expect("a PEM certificate")
    }

    /// Which of [`CERT_NAMES`] has this base64 body ("?" if none).
    pub fn which(&self, b64: &str) -> String {
        CERT_NAMES
            .iter()
            .find(|n| self.b64(n) == b64)
            .map_or_else(|| "?".to_string(), |n| n.to_string())
    }

    /// The SHA-256 fingerprint of `name`'s certificate, lower-case hex.
    pub fn sha256(&self, name: &str) -> String {
        let run = run_cmd(
            Command::new("openssl")
                .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
                .arg(self.cert(name)),
            b"",
            CLIENT_DEADLINE,
        );
        assert!(run.success, "{}", run.all());
        let hex = run
            .stdout
            .trim()
            .rsplit('=')
            .next()
            .unwrap_or("")
            .to_string();
        hex.replace(':', "").to_ascii_lowercase()
    }

    /// `{ cert: "...", key: "..." }` for `name`.
    pub fn entry(&self, name: &str) -> String {
        format!(
            "{{ cert: \"{}\", key: \"{}\" }}",
            self.cert(name).display(),
            self.key(name).display()
        )
    }

    /// A `tls:` mapping with `names` (in order), `default` (a name, or none)
    /// and extra keys (e.g. `, min_version: \"1.3\"`).
    pub fn tls(&self, names: &[&str], default: Option<&str>, extra: &str) -> String {
        let list: Vec<String> = names.iter().map(|n| self.entry(n)).collect();
        let default = default
            .map(|d| format!(", default: \"{}\"", self.cert(d).display()))
            .unwrap_or_default();
        format!("{{ certificates: [{}]{default}{extra} }}", list.join(", "))
    }
}

impl Default for Certs {
    fn default() -> Self {
        Certs::new()
    }
}

/// The base64 text of the first PEM certificate in `text`, no whitespace.
pub fn pem_b64(text: &str) -> Option<String> {
    let begin = "-----BEGIN CERTIFICATE-----";
    let end = "-----END CERTIFICATE-----";
    let start = text.find(begin)? + begin.len();
    let stop = start + text[start..].find(end)?;
    Some(text[start..stop].split_whitespace().collect())
}

// ---------------------------------------------------------------- gateway

/// A gateway with a plain listener, one or more TLS (or other) listeners and
/// an admin listener.
pub struct TlsGw {
    pub gw: Gateway,
    /// `listen` is the plain listener.
    pub ports: Ports,
    /// The extra listeners' ports, in the order given.
    pub extra: Vec<u16>,
}

impl TlsGw {
    pub fn plain(&self) -> SocketAddr {
        self.ports.addr()
    }

    pub fn port(&self, i: usize) -> u16 {
        self.extra[i]
    }

    pub fn check(&self, ok: bool, what: &str) {
        check(&self.gw, ok, what)
    }
}

/// Free ports for a plain listener, an admin listener and `n` more.
pub fn ports(n: usize) -> (Ports, Vec<u16>) {
    let ports = Ports::new();
    let mut extra: Vec<u16> = Vec::new();
    while extra.len() < n {
        let p = free_port();
        if p != ports.listen && p != ports.admin && !extra.contains(&p) {
            extra.push(p);
        }
    }
    (ports, extra)
}

/// The top of a config: the plain listener, `listeners` (each a YAML flow
/// item, e.g. `{ addr: "127.0.0.1:N", tls: {...} }`), the admin listener,
/// two workers, no file watch, `timeouts.tls_handshake: 1s`.
pub fn head(ports: Ports, listeners: &[String]) -> String {
    let mut s = format!("listen:\n  - \"127.0.0.1:{}\"\n", ports.listen);
    for l in listeners {
        s.push_str(&format!("  - {l}\n"));
    }
    s.push_str(&format!(
        "admin: {{ listen: \"127.0.0.1:{}\" }}\nworkers: 2\nreload: {{ watch: false }}\n\
         timeouts: {{ tls_handshake: 1s }}\n",
        ports.admin
    ));
    s
}

/// Starts the gateway on `yaml` and waits for every port and `/healthz`.
pub fn start(ports: Ports, extra: Vec<u16>, yaml: &str) -> TlsGw {
    let mut all = vec![ports.listen, ports.admin];
    all.extend(&extra);
    let mut gw = Gateway::spawn(bin(), yaml);
    if let Err(why) = gw.wait_ready(&all, Duration::from_secs(10)) {
        panic!(
            "gateway not ready: {why}\nconfig:\n{yaml}\n--- stderr ---\n{}",
            gw.stderr()
        );
    }
    crate::ops_common::wait_serving(&gw, ports);
    TlsGw { gw, ports, extra }
}

// ---------------------------------------------------------------- clients

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

// ---------------------------------------------------------------- raw sockets

/// What a raw exchange got back.
#[derive(Debug)]
pub struct Exchange {
    pub data: Vec<u8>,
    /// The peer closed (EOF or reset) before the wait ran out.
    pub closed: bool,
    /// How long until the close (or the wait ran out).
    pub elapsed: Duration,
}

impl Exchange {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

/// Connects to 127.0.0.1:`port`, writes `bytes` and reads until the peer
/// closes or `wait` passes (overall).
pub fn exchange(port: u16, bytes: &[u8], wait: Duration) -> Exchange {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to gateway");
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let began = Instant::now();
    if !bytes.is_empty() {
        let _ = stream.write_all(bytes);
    }
    read_until_close(&mut stream, began, wait)
}

pub fn read_until_close(stream: &mut TcpStream, began: Instant, wait: Duration) -> Exchange {
    let deadline = began + wait;
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Exchange {
                data,
                closed: false,
                elapsed: began.elapsed(),
            };
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => {
                return Exchange {
                    data,
                    closed: true,
                    elapsed: began.elapsed(),
                }
            }
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                return Exchange {
                    data,
                    closed: true,
                    elapsed: began.elapsed(),
                }
            }
        }
    }
}

/// The value of a header in the TestUpstream `/echo` JSON document
/// (case-insensitive name), every copy joined by `, `.
pub fn echoed_header(body: &str, name: &str) -> Option<String> {
    let doc: serde_json::Value = serde_json::from_str(body.trim())
        .unwrap_or_else(|e| panic!("not an echo document ({e}): {body:?}"));
    let values: Vec<String> = doc["headers"]
        .as_array()?
        .iter()
        .filter(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .filter_map(|h| h[1].as_str().map(str::to_string))
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// Polls a metric sample until `cond` holds on it (absent counts as 0).
pub fn wait_metric(
    ports: Ports,
    series: &str,
    timeout: Duration,
    cond: impl Fn(f64) -> bool,
) -> bool {
    wait_until(timeout, || {
        let text = crate::ops_common::metrics(ports);
        cond(crate::ops_common::sample(&text, series).unwrap_or(0.0))
    })
}

/// The current value of a sample (0 if absent).
pub fn metric_or_zero(ports: Ports, series: &str) -> f64 {
    let text = crate::ops_common::metrics(ports);
    crate::ops_common::sample(&text, series).unwrap_or(0.0)
}

/// The listener label of 127.0.0.1:`port`.
pub fn listener(port: u16) -> String {
    local(port).to_string()
}

/// The soft and hard `Max open files` of this process (from /proc).
pub fn nofile_limits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line["Max open files".len()..].split_whitespace();
    let parse = |s: Option<&str>| match s? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    };
    Some((parse(nums.next())?, parse(nums.next())?))
}

/// Makes sure this process (and the gateways it starts afterwards) may open
/// `want` files, raising the soft limit with `prlimit` if needed.
pub fn ensure_nofile(want: u64) {
    let Some((soft, hard)) = nofile_limits() else {
        return;
    };
    if soft >= want {
        return;
    }
    assert!(hard >= want, "RLIMIT_NOFILE hard limit {hard} < {want}");
    let run = run_cmd(
        Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={want}:{hard}")),
        b"",
        CLIENT_DEADLINE,
    );
    let now = nofile_limits().map_or(0, |l| l.0);
    assert!(
        now >= want,
        "could not raise RLIMIT_NOFILE from {soft} to {want}: {}",
        run.all()
    );
}

// ---------------------------------------------------------------- more certificates

/// Makes `NAME.key` (P-256) and a self-signed CA certificate `NAME.pem`
/// with subject CN `cn` in `dir`.
pub fn make_ca(dir: &Path, name: &str, cn: &str) {
    let script = format!(
        "set -e\n\
         openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '{name}.key' 2>/dev/null\n\
         openssl req -x509 -new -key '{name}.key' -subj '/CN={cn}' -days 3 -set_serial {serial} \
           -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign' \
           -addext 'subjectKeyIdentifier=hash' -out '{name}.pem'\n",
        serial = next_serial()
    );
    let run = run_cmd(
        Command::new("sh").arg("-c").arg(&script).current_dir(dir),
        b"",
        Duration::from_secs(60),
    );
    assert!(run.success, "making CA {name} failed:\n{}", run.all());
}

/// Makes `NAME.key` (P-256) and `NAME.pem` in `dir`, signed by the CA
/// `CA.pem`/`CA.key` of the same dir: subject CN `cn`, subjectAltName `san`
/// (e.g. `DNS:up.test,IP:127.0.0.1`; none when `None`), extendedKeyUsage
/// `eku` (`serverAuth`, `clientAuth` or `serverAuth,clientAuth`), valid two
/// days, a serial of its own.
pub fn make_leaf(dir: &Path, ca: &str, name: &str, cn: &str, san: Option<&str>, eku: &str) {
    let mut ext = String::new();
    if let Some(san) = san {
        ext.push_str(&format!("subjectAltName={san}\n"));
    }
    ext.push_str(&format!(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage={eku}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    ));
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write extensions file");
    let script = format!(
        "set -e\n\
         openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '{name}.key' 2>/dev/null\n\
         openssl req -new -key '{name}.key' -subj '/CN={cn}' -out '{name}.csr'\n\
         openssl x509 -req -in '{name}.csr' -CA '{ca}.pem' -CAkey '{ca}.key' -set_serial {serial} \
           -days 2 -extfile '{name}.ext' -out '{name}.pem' 2>/dev/null\n\
         rm -f '{name}.csr' '{name}.ext'\n",
        serial = next_serial()
    );
    let run = run_cmd(
        Command::new("sh").arg("-c").arg(&script).current_dir(dir),
        b"",
        Duration::from_secs(60),
    );
    assert!(
        run.success,
        "making certificate {name} failed:\n{}",
        run.all()
    );
}

/// A certificate serial no other call in this process returned (hex,
/// `0x` prefixed; the high bits from the clock so processes differ too).
fn next_serial() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("0x{:012x}{:04x}", nanos & 0xffff_ffff_ffff, n & 0xffff)
}

/// The SHA-256 fingerprint of the certificate `path` as `openssl x509
/// -fingerprint -sha256` prints it: upper-case hex pairs joined by colons.
pub fn openssl_fingerprint(path: &Path) -> String {
    let run = run_cmd(
        Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(path),
        b"",
        CLIENT_DEADLINE,
    );
    assert!(run.success, "{}", run.all());
    run.stdout
        .trim()
        .rsplit('=')
        .next()
        .unwrap_or("")
        .to_string()
}
