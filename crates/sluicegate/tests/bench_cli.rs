//! `sluicegate bench` as a user runs it: several processes started together
//! with --start-at, their JSON parts merged exactly by `bench merge`, and the
//! reports and progress line.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sluicegate_testkit::TestUpstream;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluicegate"))
}

fn bench(args: &[&str]) -> Output {
    let out = Command::new(bin())
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluicegate bench");
    assert!(
        out.status.success(),
        "sluicegate bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn parts_started_together_merge_exactly() {
    let up = TestUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/part", up.port());
    let start = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_millis(1500);
    let start_at = format!("{:.3}", start.as_secs_f64());
    let parts: Vec<String> = (0..3)
        .map(|i| {
            dir.path()
                .join(format!("part{i}.json"))
                .display()
                .to_string()
        })
        .collect();
    let children: Vec<_> = parts
        .iter()
        .map(|p| {
            Command::new(bin())
                .args([
                    "bench",
                    "-k",
                    "-c",
                    "4",
                    "-n",
                    "500",
                    "--start-at",
                    &start_at,
                    "--out",
                    p,
                    "--format",
                    "json",
                ])
                .arg(&url)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(up.requests_seen(), 1500);

    let docs: Vec<Value> = parts.iter().map(|p| json(Path::new(p))).collect();
    let starts: Vec<u64> = docs
        .iter()
        .map(|d| d["start_unix_micros"].as_u64().unwrap())
        .collect();
    let want = (start.as_micros()) as u64;
    for s in &starts {
        assert!(
            s.abs_diff(want) < 300_000,
            "a part started {} us off the agreed time",
            s.abs_diff(want)
        );
    }

    let merged_path = dir.path().join("merged.json");
    let html = dir.path().join("report.html");
    let mut args: Vec<&str> = vec![
        "merge",
        "--format",
        "ab",
        "--out",
        merged_path.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ];
    args.extend(parts.iter().map(String::as_str));
    let ab = String::from_utf8(bench(&args).stdout).unwrap();
    assert!(ab.contains("Complete requests:      1500"), "{ab}");
    assert!(ab.contains("Concurrency Level:      12"), "{ab}");
    assert!(
        ab.contains("Percentage of the requests served within a certain time (ms)"),
        "{ab}"
    );

    let m = json(&merged_path);
    assert_eq!(m["parts"], 3);
    assert_eq!(m["completed"], 1500);
    assert_eq!(m["sent"], 1500);
    assert_eq!(m["statuses"]["200"], 1500);
    let lat = |d: &Value, k: &str| d["latency_micros"][k].as_u64().unwrap();
    // Exact merge: the extremes are the parts' extremes, and the median lies
    // within the parts' medians.
    assert_eq!(
        lat(&m, "max"),
        docs.iter().map(|d| lat(d, "max")).max().unwrap()
    );
    assert_eq!(
        lat(&m, "min"),
        docs.iter().map(|d| lat(d, "min")).min().unwrap()
    );
    let p50s: Vec<u64> = docs.iter().map(|d| lat(d, "p50")).collect();
    assert!(
        lat(&m, "p50") >= *p50s.iter().min().unwrap()
            && lat(&m, "p50") <= *p50s.iter().max().unwrap()
    );
    let per_second: u64 = m["seconds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["completed"].as_u64().unwrap())
        .sum();
    assert_eq!(per_second, 1500);

    // Merging the merge with nothing else changes nothing.
    let again = dir.path().join("again.json");
    bench(&[
        "merge",
        "--format",
        "json",
        "--out",
        again.to_str().unwrap(),
        merged_path.to_str().unwrap(),
    ]);
    let a = json(&again);
    assert_eq!(a["histograms"], m["histograms"]);
    assert_eq!(a["completed"], 1500);

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<svg")
            && page.contains("Latency by percentile")
            && !page.contains("<script")
    );
}

#[test]
fn progress_line_only_when_asked_or_on_a_terminal() {
    let up = TestUpstream::start();
    let url = format!("http://127.0.0.1:{}/p", up.port());
    // Standard error is a pipe here: quiet.
    let quiet = bench(&["-k", "-c", "2", "-d", "1500ms", &url]);
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let wrk = String::from_utf8(quiet.stdout).unwrap();
    assert!(
        wrk.contains("Requests/sec:") && wrk.contains("Latency Distribution"),
        "{wrk}"
    );
    let loud = bench(&[
        "-k",
        "-c",
        "2",
        "-d",
        "1500ms",
        "--progress",
        "always",
        &url,
    ]);
    let err = String::from_utf8(loud.stderr).unwrap();
    assert!(
        err.contains("responses") && err.contains("p99 so far"),
        "{err}"
    );
}

#[test]
fn bad_options_are_refused_with_the_reason() {
    for (args, want) in [
        (
            vec!["-c", "0", "http://127.0.0.1:1/"],
            "-c must be at least 1",
        ),
        (
            vec!["--pipeline", "4", "http://127.0.0.1:1/"],
            "--pipeline needs -k",
        ),
        (vec!["https://127.0.0.1:1/"], "https is not supported"),
        (
            vec!["--source", "127.0.0.9-127.0.0.2", "http://127.0.0.1:1/"],
            "--source",
        ),
        (
            vec!["--start-at", "soon", "http://127.0.0.1:1/"],
            "--start-at",
        ),
        (vec!["-H", "Bad Header", "http://127.0.0.1:1/"], "header"),
    ] {
        let out = Command::new(bin())
            .arg("bench")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"not\": \"a part\"}").unwrap();
    let out = Command::new(bin())
        .args(["bench", "merge"])
        .arg(&junk)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a bench JSON document"));
}

/// `--hold`: every connection opened from the given source address, checked
/// by one request, held, then sending at random times; the JSON counts
/// them, and the status file ends in `done`.
#[test]
fn hold_mode_keeps_every_connection_and_paces_its_requests() {
    let up = TestUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("part.status");
    let url = format!("http://127.0.0.1:{}/held", up.port());
    let out = bench(&[
        "--hold",
        "-k",
        "-c",
        "300",
        "--connect-rate",
        "3000",
        "--period",
        "300ms",
        "-d",
        "1500ms",
        "--source",
        "127.0.0.3",
        "--status",
        status.to_str().unwrap(),
        &url,
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["mode"], "hold");
    assert_eq!(doc["asked"], 300);
    assert_eq!(doc["held"], 300, "{doc}");
    assert_eq!(doc["held_at_end"], 300);
    assert_eq!(doc["errors_total"], 0, "{}", doc["errors"]);
    assert!(doc["first_failure"].is_null());
    assert_eq!(doc["ramp_latency"]["count"], 300);
    // 300 connections, a request each 300 ms on average, for 1.5 s: ~1,500.
    let held = doc["held_latency"]["count"].as_u64().unwrap();
    assert!((600..3000).contains(&held), "{held} requests while held");
    let pairs: u64 = doc["held_latency"]["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .sum();
    assert_eq!(pairs, held);
    assert!(doc["connects_per_sec"].as_f64().unwrap() > 500.0);
    assert_eq!(
        up.connections_accepted(),
        300,
        "one connection each, kept open"
    );
    let st: Value = serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(st["phase"], "done");
    assert_eq!(st["held"], 300);
}

/// A hold that cannot connect says which call failed and with what errno.
#[test]
fn hold_mode_names_the_failing_call_and_errno() {
    let port = sluicegate_testkit::free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let out = bench(&[
        "--hold",
        "-k",
        "-c",
        "20",
        "--connect-rate",
        "1000",
        "-d",
        "100ms",
        &url,
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["held"], 0);
    assert_eq!(
        doc["errors"]["connect:ECONNREFUSED"], 20,
        "{}",
        doc["errors"]
    );
    assert_eq!(doc["first_failure"]["call"], "connect");
    assert_eq!(doc["first_failure"]["errno"], "ECONNREFUSED");
}
