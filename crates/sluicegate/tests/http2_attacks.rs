//! Known attacks on HTTP/2 servers, made frame by frame (PyPI `h2`'s
//! hyperframe and hpack, in the test venv, or the raw client of
//! `h2_common` over cleartext and TLS): each ends with the offending
//! connection closed by a GOAWAY with the right code, or with the one
//! stream ended, while a client on another connection is served all along.
//! A connection ended for its client's abuse ends in order: the GOAWAY,
//! then (over TLS) a close_notify, then a FIN, never a reset.
//!
//! - Rapid Reset (CVE-2023-44487): streams opened and cancelled at once.
//! - PING and SETTINGS floods: frames the server must acknowledge.
//! - CONTINUATION flood: a header block that never ends.
//! - MadeYouReset (CVE-2025-8671): requests the server has to reset.
//! - A zero window increment on a stream: a protocol error.
//! - A body announced and never sent; a window held at zero.

mod h2_common;
mod http_common;
mod ops_common;
mod tls_common;
mod venv_common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use http_common::{service, Gw};
use sluicegate_testkit::TestUpstream;
use tls_common::run_cmd;
use venv_common::python;

/// GOAWAY and RST_STREAM codes (RFC 9113 7).
const PROTOCOL_ERROR: u32 = 1;
const CANCEL: u32 = 8;
const ENHANCE_YOUR_CALM: u32 = 11;

/// Runs the attack `mode` (with `n` repetitions) against the gateway;
/// returns its outcome line (`goaway CODE`, `reset CODE`, ...).
fn attack(port: u16, mode: &str, n: usize) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h2/attack.py");
    let run = run_cmd(
        Command::new(python())
            .arg(script)
            .arg(port.to_string())
            .arg(mode)
            .arg(n.to_string())
            .arg("8"),
        b"",
        Duration::from_secs(40),
    );
    assert!(run.success, "attack {mode} failed to run: {}", run.all());
    run.stdout.lines().next().unwrap_or("").to_string()
}

/// A gateway with a fixed answer at `/fixed` and the test upstream under
/// `/up`, short client body and write timeouts.
fn gateway(up: &TestUpstream) -> Gw {
    Gw::start(&format!(
        "timeouts: {{ client_body: 1s, client_write: 1s }}\nservices:\n{}routes:\n\
         \x20 - name: fixed\n    match: {{ path: /fixed }}\n    respond: {{ status: 200, body: \"fixed\\n\" }}\n\
         \x20 - name: up\n    match: {{ path_prefix: /up }}\n    service: up\n    strip_prefix: true\n",
        service("up", &[up.addr()], "")
    ))
}

/// Another client, on connections of its own, asking all along (curl,
/// HTTP/2 with prior knowledge, one connection per request): every answer
/// must be a 200.
struct Bystander {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Bystander {
    fn start(port: u16) -> Bystander {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let (s, o, f) = (stop.clone(), ok.clone(), failed.clone());
        let thread = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let out = Command::new("curl")
                    .args([
                        "-s",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "--max-time",
                        "5",
                    ])
                    .arg("--http2-prior-knowledge")
                    .arg(format!("http://127.0.0.1:{port}/fixed"))
                    .output();
                match out {
                    Ok(o2) if o2.stdout == b"200" => o.fetch_add(1, Ordering::Relaxed),
                    _ => f.fetch_add(1, Ordering::Relaxed),
                };
                thread::sleep(Duration::from_millis(20));
            }
        });
        Bystander {
            stop,
            ok,
            failed,
            thread: Some(thread),
        }
    }

    /// Stops; (answered, failed).
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

#[test]
fn floods_end_with_goaway_and_others_are_served() {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    assert_eq!(attack(gw.port, "normal", 1), "response 200");
    let cases: [(&str, usize, u32); 6] = [
        ("rapid_reset", 20_000, ENHANCE_YOUR_CALM),
        ("ping_flood", 20_000, ENHANCE_YOUR_CALM),
        ("settings_flood", 20_000, ENHANCE_YOUR_CALM),
        ("continuation_flood", 200_000, ENHANCE_YOUR_CALM),
        ("made_you_reset", 5_000, ENHANCE_YOUR_CALM),
        ("zero_increment", 1, PROTOCOL_ERROR),
    ];
    for (mode, n, code) in cases {
        let by = Bystander::start(gw.port);
        let outcome = attack(gw.port, mode, n);
        thread::sleep(Duration::from_millis(200));
        let (ok, failed) = by.finish();
        assert_eq!(outcome, format!("goaway {code}"), "{mode}");
        assert!(
            ok > 0 && failed == 0,
            "{mode}: bystander {ok} ok, {failed} failed"
        );
    }
    // A fast but fair client is not a flood: 150 streams one after another.
    let run = run_cmd(
        Command::new("h2load").args([
            "-n",
            "150",
            "-c",
            "1",
            "-m",
            "1",
            &format!("http://127.0.0.1:{}/fixed", gw.port),
        ]),
        b"",
        Duration::from_secs(30),
    );
    assert!(
        run.stdout.contains("150 succeeded, 0 failed"),
        "{}",
        run.all()
    );
}

#[test]
fn streams_that_stall_end_alone() {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    let by = Bystander::start(gw.port);
    // A body announced and never sent: the client body timeout (1 s)
    // ends the stream, before the request went anywhere useful.
    let outcome = attack(gw.port, "slow_body", 1);
    assert_eq!(outcome, format!("reset {CANCEL}"), "slow body");
    // A 1 MB answer to a client whose window stays at zero: the write
    // timeout (1 s) ends the stream; the gateway holds no more than a
    // buffer's worth for it meanwhile.
    let outcome = attack(gw.port, "zero_window", 1);
    assert_eq!(outcome, format!("reset {CANCEL}"), "zero window");
    let (ok, failed) = by.finish();
    assert!(ok > 0 && failed == 0, "bystander {ok} ok, {failed} failed");
}

/// Rapid Reset, 1,000 streams written 100 at a time as fast as the
/// client can, over TLS and cleartext: the client reads why its
/// connection ends (GOAWAY `ENHANCE_YOUR_CALM`), then the TLS
/// close_notify, then the FIN, within a few seconds, every time. Each
/// stream carries a 500-byte cookie, so that the flood (550 kB) is more
/// than the client's send buffer (16 KiB) and the gateway's receive buffer
/// hold: the client still has most of it to write when the gateway gives
/// up, and every write must still be taken. (A connection reset there is
/// a client that never reads the GOAWAY: a TLS stack ends the session on a
/// failed write.)
#[test]
fn rapid_reset_reads_goaway_then_close_notify_then_fin() {
    let certs = tls_common::Certs::new();
    let (ports, extra) = tls_common::ports(1);
    let yaml = format!(
        "{}routes:\n  - name: fixed\n    match: {{ path: /fixed }}\n    \
         respond: {{ status: 200, body: \"fixed\\n\" }}\n",
        tls_common::head_with_tls_a(ports, extra[0], &certs)
    );
    let gw = tls_common::start(ports, extra, &yaml);
    let ca = certs.b64("ca");
    let cookie = "c".repeat(500);
    for round in 0..3 {
        for tls in [true, false] {
            let mut c = if tls {
                h2_common::Client::tls(gw.port(0), &ca, Some(16 * 1024))
            } else {
                h2_common::Client::plain(gw.ports.listen, Some(16 * 1024))
            };
            let flood = h2_common::rapid_reset(1, 1000, tls, &cookie);
            let taken = flood.chunks(100).all(|s| c.send(&s.concat()));
            let end = c.ending(Duration::from_secs(5));
            let what = format!("round {round}, tls {tls}: {end:?}");
            assert!(taken, "a write was refused; then {what}");
            assert_eq!(end.goaway, Some(ENHANCE_YOUR_CALM), "{what}");
            assert_eq!(end.after_goaway, 0, "{what}");
            assert_eq!(end.close_notify, tls, "{what}");
            assert!(end.fin && end.error.is_none(), "{what}");
            assert!(end.elapsed < Duration::from_secs(4), "{what}");
        }
    }
}
