//! The Autobahn TestSuite's WebSocket cases through the gateway, run by
//! `kosoku` (PyPI; the Autobahn case files driven by a native runner, in
//! the virtual environment `scripts/test-venv` makes) against the
//! `websockets` echo server, directly and through the gateway: every case
//! that passes directly passes through the gateway.
//!
//! The cases: framing (1), pings and pongs (2), reserved bits (3),
//! opcodes (4), fragmentation (5), UTF-8 (6), closing (7), limits and
//! performance (9: messages up to 16 MiB, in frames and chunks of every
//! size), autobahn's misc (10), and a sample of permessage-deflate (12.1.1
//! to 12.1.4, and the first case of each offer in 13.x: the extension
//! negotiated through the gateway). The rest of 12 and 13 (compression at
//! every size, about 20 minutes of cases) is left out for time.

mod http_common;
mod venv_common;
mod ws_common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use ws_common::{fixture, python, wait_bounded, Echo};

const CASES: &[&str] = &[
    "1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "12.1.1", "12.1.2", "12.1.3",
    "12.1.4", "13.1.1", "13.2.1", "13.3.1", "13.4.1", "13.5.1", "13.6.1", "13.7.1",
];

/// One case's outcome: passed, and its two verdicts (exchange, close).
type Verdict = (bool, String, String);

/// Runs the cases against `url`: every case's verdict, and the run's
/// seconds.
fn autobahn(url: &str) -> (BTreeMap<String, Verdict>, f64) {
    let child = Command::new(python())
        .arg(fixture("autobahn.py"))
        .arg(url)
        .args(CASES)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run kosoku");
    let out = wait_bounded(child, Duration::from_secs(110));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kosoku against {url} failed:\n{text}");
    let mut cases = BTreeMap::new();
    let mut secs = None;
    for line in text.lines() {
        if let Some(s) = line.strip_prefix("done ") {
            secs = s.parse().ok();
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "a line of kosoku's: {line:?}");
        cases.insert(f[0].to_string(), (f[1] == "1", f[2].into(), f[3].into()));
    }
    (cases, secs.expect("kosoku's run ended"))
}

#[test]
fn every_autobahn_case_that_passes_directly_passes_through_the_gateway() {
    let started = Instant::now();
    let echo = Echo::quiet();
    let (direct, direct_secs) = autobahn(&format!("ws://127.0.0.1:{}", echo.port));
    let up = std::net::SocketAddr::from(([127, 0, 0, 1], echo.port));
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: ws\n    service: s\n",
        service("s", &[up], "")
    ));
    let (through, through_secs) = autobahn(&format!("ws://{}", gw.addr()));
    // Every case ran both ways (a glob matching nothing would go unseen).
    assert!(direct.len() > 300, "{} cases ran", direct.len());
    assert_eq!(
        direct.keys().collect::<Vec<_>>(),
        through.keys().collect::<Vec<_>>()
    );
    let passed = |m: &BTreeMap<String, Verdict>| m.values().filter(|v| v.0).count();
    eprintln!(
        "autobahn: {} cases; {} passed directly in {direct_secs:.1} s, {} through the \
         gateway in {through_secs:.1} s; {:.1} s in all",
        direct.len(),
        passed(&direct),
        passed(&through),
        started.elapsed().as_secs_f64()
    );
    // Verdicts that differ without changing the outcome (a NON-STRICT
    // one way, OK the other), for the log.
    for (id, v) in &direct {
        if through[id] != *v {
            eprintln!("autobahn {id}: directly {v:?}, through {:?}", through[id]);
        }
    }
    let lost: Vec<String> = direct
        .iter()
        .filter(|(id, v)| v.0 && !through[*id].0)
        .map(|(id, v)| format!("{id}: directly {}/{}, through {:?}", v.1, v.2, through[id]))
        .collect();
    assert!(
        lost.is_empty(),
        "cases passing directly, not through the gateway:\n{}",
        lost.join("\n")
    );
}
