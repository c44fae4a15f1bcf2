//! JSON-lines access log: each worker formats into its own buffer and
//! flushes whole lines to the shared sink (stdout or a file) when the
//! buffer fills or on the worker's periodic tick, so logging costs no lock
//! and no syscall per request.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use sluicegate_config::AccessLog;

use crate::clock::calendar::civil_from_days;

/// Flush a worker's buffer once it holds this many bytes.
pub const FLUSH_AT: usize = 64 * 1024;

#[derive(Debug)]
pub enum Sink {
    Stdout,
    File(Mutex<File>),
}

impl Sink {
    pub fn open(cfg: &AccessLog) -> io::Result<Option<Sink>> {
        Ok(match cfg {
            AccessLog::Off => None,
            AccessLog::Stdout => Some(Sink::Stdout),
            AccessLog::File(p) => Some(Sink::File(Mutex::new(open_append(p)?))),
        })
    }

    /// Writes whole lines in one call so lines from workers never interleave.
    pub fn write(&self, bytes: &[u8]) {
        let r = match self {
            Sink::Stdout => io::stdout().lock().write_all(bytes),
            Sink::File(f) => match f.lock() {
                Ok(mut f) => f.write_all(bytes),
                Err(_) => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "access log write failed");
        }
    }
}

fn open_append(p: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(p)
}

/// One access log record. Only `target` can hold any byte and is escaped;
/// the other text fields are written as they are (see [`name`]).
pub struct Entry<'a> {
    /// The client's address, already formatted.
    pub client: &'a str,
    /// An HTTP token: httparse refuses any other method.
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub status: u16,
    pub route: &'a str,
    pub service: &'a str,
    pub endpoint: &'a str,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub total_us: u64,
    /// Time from sending the request upstream to the response head.
    pub upstream_us: Option<u64>,
    /// The authenticated app, and a fingerprint of its key (never the key).
    pub app: Option<&'a str>,
    pub key_fp: Option<u32>,
    /// TLS version and cipher suite, on TLS connections.
    pub tls: Option<(&'a str, &'a str)>,
    /// The request came on an HTTP/2 stream (`"proto":"HTTP/2"`; absent
    /// for HTTP/1.x).
    pub http2: bool,
    /// The request's id (`request_id.header`: kept from a trusted proxy,
    /// else made), and its trace id when the request was sampled.
    pub request_id: &'a [u8],
    pub trace_id: Option<&'a [u8; 16]>,
    /// The route's fault injection acted on the request: `abort` or
    /// `delay` (absent otherwise).
    pub fault: Option<&'static str>,
    /// The route's fallback answered (why its service could not), or
    /// `unsent` (its fallback service could not take the request).
    pub fallback: Option<&'static str>,
}

/// The request id (a kept one is visible ASCII without `"` or `\\`, but
/// escaped all the same) and the trace id.
fn request_ids(out: &mut Vec<u8>, e: &Entry<'_>) {
    out.extend_from_slice(b",\"request_id\":\"");
    escape(out, e.request_id);
    out.push(b'"');
    if let Some(t) = e.trace_id {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.extend_from_slice(b",\"trace_id\":\"");
        for b in t {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
        out.push(b'"');
    }
}

/// Appends `e` as one JSON line to `out`.
pub fn format(out: &mut Vec<u8>, e: &Entry<'_>) {
    let mut ib = itoa::Buffer::new();
    out.extend_from_slice(b"{\"ts\":\"");
    timestamp(out, SystemTime::now());
    out.extend_from_slice(b"\",\"client\":\"");
    name(out, e.client.as_bytes());
    out.extend_from_slice(b"\",\"method\":\"");
    name(out, e.method);
    out.extend_from_slice(b"\",\"path\":\"");
    escape(out, e.target);
    out.extend_from_slice(b"\",\"status\":");
    out.extend_from_slice(ib.format(e.status).as_bytes());
    out.extend_from_slice(b",\"route\":\"");
    name(out, e.route.as_bytes());
    out.extend_from_slice(b"\",\"service\":\"");
    name(out, e.service.as_bytes());
    out.extend_from_slice(b"\",\"endpoint\":\"");
    name(out, e.endpoint.as_bytes());
    out.extend_from_slice(b"\",\"bytes_in\":");
    out.extend_from_slice(ib.format(e.bytes_in).as_bytes());
    out.extend_from_slice(b",\"bytes_out\":");
    out.extend_from_slice(ib.format(e.bytes_out).as_bytes());
    out.extend_from_slice(b",\"duration_ms\":");
    millis(out, e.total_us);
    out.extend_from_slice(b",\"upstream_ms\":");
    match e.upstream_us {
        Some(us) => millis(out, us),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"app\":");
    match e.app {
        Some(v) => {
            out.push(b'"');
            name(out, v.as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"key\":");
    match e.key_fp {
        Some(fp) => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push(b'"');
            out.extend((0..8).rev().map(|i| HEX[(fp >> (i * 4)) as usize & 15]));
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    if let Some((version, cipher)) = e.tls {
        out.extend_from_slice(b",\"tls\":\"");
        name(out, version.as_bytes());
        out.extend_from_slice(b"\",\"cipher\":\"");
        name(out, cipher.as_bytes());
        out.push(b'"');
    }
    if e.http2 {
        out.extend_from_slice(b",\"proto\":\"HTTP/2\"");
    }
    if let Some(f) = e.fault {
        out.extend_from_slice(b",\"fault\":\"");
        name(out, f.as_bytes());
        out.push(b'"');
    }
    if let Some(f) = e.fallback {
        out.extend_from_slice(b",\"fallback\":\"");
        name(out, f.as_bytes());
        out.push(b'"');
    }
    request_ids(out, e);
    out.extend_from_slice(b"}\n");
}

/// The longest target a refused request's line holds, in bytes: a bad
/// target may be as long as the head limit, and its escaped form up to six
/// times that.
pub const REFUSED_TARGET_MAX: usize = 1024;

/// Appends the line of a request refused before routing: `e` (its method
/// and path empty when the head could not be parsed, no route, no time)
/// and the listener it came on.
pub fn format_refused(out: &mut Vec<u8>, e: &Entry<'_>, listener: std::net::SocketAddr) {
    use std::io::Write as _;
    format(out, e);
    // Reopen the object: the line ends with `}\n`.
    out.truncate(out.len() - 2);
    let _ = writeln!(out, ",\"listener\":\"{listener}\"}}");
}

/// Text the config or the parser has already checked: route, service and
/// app names (`[A-Za-z0-9_.-]`), endpoints (`host:port`, the host a checked
/// name or an IP literal), the client's IP and the method (an HTTP token).
/// None of it needs JSON escaping, so it is copied as it is; debug builds
/// check that.
fn name(out: &mut Vec<u8>, s: &[u8]) {
    debug_assert!(
        s.iter().all(|&b| plain(b)),
        "{:?}",
        String::from_utf8_lossy(s)
    );
    out.extend_from_slice(s);
}

/// `us` as milliseconds with three decimals, built right to left in one
/// buffer and copied once.
fn millis(out: &mut Vec<u8>, us: u64) {
    let mut b = [0u8; 24];
    let frac = us % 1000;
    b[20] = b'.';
    b[21] = b'0' + (frac / 100) as u8;
    b[22] = b'0' + (frac / 10 % 10) as u8;
    b[23] = b'0' + (frac % 10) as u8;
    let mut whole = us / 1000;
    let mut i = 20;
    loop {
        i -= 1;
        b[i] = b'0' + (whole % 10) as u8;
        whole /= 10;
        if whole == 0 {
            break;
        }
    }
    out.extend_from_slice(&b[i..]);
}

/// Whether `b` goes into a JSON string as it is (printable ASCII other than
/// the quote and the backslash).
fn plain(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'
}

/// JSON string escaping: quotes, backslashes and control characters are
/// escaped; bytes that are not UTF-8 become U+FFFD. A field of printable
/// ASCII, the usual case, is checked in one pass and copied in one go.
pub fn escape(out: &mut Vec<u8>, s: &[u8]) {
    // No early exit: the fold compiles to a vector loop over the bytes.
    if s.iter().fold(true, |ok, &b| ok & plain(b)) {
        out.extend_from_slice(s);
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let text = String::from_utf8_lossy(s);
    let bytes = text.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if plain(b) || b >= 0x80 {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
}

thread_local! {
    /// The formatted date and time of the last second seen by this thread,
    /// so a busy worker formats the calendar part once a second.
    static SECOND: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// RFC 3339 UTC timestamp with milliseconds.
pub fn timestamp(out: &mut Vec<u8>, t: SystemTime) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let (y, m, day) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            let text = format!(
                "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.",
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            );
            *cached = (secs, text.into_bytes());
        }
        out.extend_from_slice(&cached.1);
    });
    let ms = d.subsec_millis();
    out.extend_from_slice(&[
        b'0' + (ms / 100) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
        b'Z',
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_514), (2026, 3, 2));
        let mut out = Vec::new();
        timestamp(
            &mut out,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        );
        assert_eq!(out, b"2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn timestamp_cache_follows_the_second() {
        // Same second twice (cache hit), then the next second and a
        // different day (cache refreshed), then back again.
        let at = |ms: u64| {
            let mut out = Vec::new();
            timestamp(&mut out, UNIX_EPOCH + Duration::from_millis(ms));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(at(1_700_000_000_005), "2023-11-14T22:13:20.005Z");
        assert_eq!(at(1_700_000_000_999), "2023-11-14T22:13:20.999Z");
        assert_eq!(at(1_700_000_001_000), "2023-11-14T22:13:21.000Z");
        assert_eq!(at(1_700_086_400_042), "2023-11-15T22:13:20.042Z");
        assert_eq!(at(1_700_000_000_050), "2023-11-14T22:13:20.050Z");
    }

    #[test]
    fn escaped_text_reads_back_as_the_lossy_text() {
        // Every kind of byte, alone and in runs: a JSON parser must read
        // back exactly the input with invalid UTF-8 replaced.
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"/plain/path?x=1".to_vec(),
            b"\"\\\x00\x1f\x7f".to_vec(),
            "caf\u{e9} \u{1f600}".as_bytes().to_vec(),
            b"a\xffb\xc3".to_vec(),
        ];
        cases.extend((0..=255u8).map(|b| vec![b'x', b, b'y']));
        let mut rng = fastrand::Rng::with_seed(7);
        cases.extend((0..500).map(|_| (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect()));
        for case in cases {
            let mut out = vec![b'"'];
            escape(&mut out, &case);
            out.push(b'"');
            let back: String = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{case:?} -> {:?}: {e}", String::from_utf8_lossy(&out)));
            assert_eq!(back, String::from_utf8_lossy(&case), "{case:?}");
            assert!(out[1..out.len() - 1]
                .iter()
                .all(|&b| b >= 0x20 && b != 0x7f));
        }
    }

    #[test]
    fn millis_has_three_decimals() {
        for (us, text) in [
            (0, "0.000"),
            (7, "0.007"),
            (999, "0.999"),
            (1_000, "1.000"),
            (1_234_567, "1234.567"),
            (u64::MAX, "18446744073709551.615"),
        ] {
            let mut out = Vec::new();
            millis(&mut out, us);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic]
    fn names_needing_escapes_are_caught_in_debug_builds() {
        name(&mut Vec::new(), b"a\"b");
    }

    #[test]
    fn refused_line_is_json_with_the_listener() {
        let mut out = Vec::new();
        let e = Entry {
            client: "127.0.0.1",
            method: b"",
            target: b"",
            status: 431,
            route: "",
            service: "",
            endpoint: "",
            bytes_in: 20_000,
            bytes_out: 120,
            total_us: 0,
            upstream_us: None,
            app: None,
            key_fp: None,
            request_id: b"req-1",
            trace_id: None,
            fault: None,
            fallback: None,
            tls: None,
            http2: false,
        };
        format_refused(&mut out, &e, "127.0.0.1:8080".parse().unwrap());
        format_refused(&mut out, &e, "[::1]:443".parse().unwrap());
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["status"], 431);
        assert_eq!(lines[0]["listener"], "127.0.0.1:8080");
        assert_eq!(lines[1]["listener"], "[::1]:443");
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn line_is_json() {
        let mut out = Vec::new();
        format(
            &mut out,
            &Entry {
                client: "127.0.0.1",
                method: b"GET",
                target: b"/a\"b\x01\xff",
                status: 200,
                route: "r",
                service: "s",
                endpoint: "127.0.0.1:1",
                bytes_in: 0,
                bytes_out: 12,
                total_us: 1234,
                upstream_us: None,
                app: Some("shop"),
                key_fp: Some(0x00ab_cdef),
                tls: None,
                http2: false,
                request_id: b"req-7",
                trace_id: Some(&[0xab; 16]),
                fault: Some("delay"),
                fallback: Some("timeout"),
            },
        );
        let s = String::from_utf8(out).unwrap();
        assert!(s.ends_with("}\n"));
        assert!(s.contains(",\"fault\":\"delay\","), "{s}");
        assert!(s.contains(",\"fallback\":\"timeout\","), "{s}");
        assert!(
            s.ends_with(
                ",\"request_id\":\"req-7\",\"trace_id\":\"abababababababababababababababab\"}\n"
            ),
            "{s}"
        );
        assert!(s.contains("\"path\":\"/a\\\"b\\u0001\u{fffd}\""), "{s}");
        assert!(
            s.contains(
                "\"duration_ms\":1.234,\"upstream_ms\":null,\"app\":\"shop\",\"key\":\"00abcdef\","
            ),
            "{s}"
        );
    }
}
