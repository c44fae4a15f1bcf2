//! Certificates made at test time with the `openssl` CLI: the test CA and
//! its leaves ([`Certs`]), more CAs and leaves on demand, fingerprints.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::run::{run_cmd, CLIENT_DEADLINE};

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
