//! TLS certificate files on the real binary: certificates reloaded under
//! load and after their files were overwritten, missing or mismatched
//! files refused on reload and at startup, expired certificates loaded with
//! a warning.

mod ops_common;
mod tls_common;

use std::thread;
use std::time::Duration;

use ops_common::{generation, metric, run_cli, wait_generation_above, wait_until, Ports};
use sluicegate_testkit::TestUpstream;
use tls_common::termination::routes;
use tls_common::*;

/// `a.test` served by `cert` (an `a.test` pair) alone, default `b`.
fn reload_config(ports: Ports, tls_port: u16, certs: &Certs, a_cert: &str, up: u16) -> String {
    let tls = certs.tls(&[a_cert, "b"], Some("b"), "");
    format!(
        "{}{}",
        head(
            ports,
            &[format!("{{ addr: \"127.0.0.1:{tls_port}\", tls: {tls} }}")]
        ),
        routes(up, "hello")
    )
}

#[test]
fn a_certificate_reload_under_load_fails_no_request() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let g = tls_common::start(
        ports,
        extra,
        &reload_config(ports, tls_port, &certs, "a", up.port()),
    );
    let (old_fp, new_fp) = (certs.sha256("a"), certs.sha256("a2"));
    let ca = certs.ca();

    let client = thread::spawn(move || {
        python(
            PY_LOOP,
            &[
                tls_port.to_string(),
                "a.test".into(),
                ca.display().to_string(),
                "/hello".into(),
                "2.2".into(),
            ],
            Duration::from_secs(20),
        )
    });
    thread::sleep(Duration::from_millis(800));
    let gen = generation(ports);
    g.gw.write_config(&reload_config(ports, tls_port, &certs, "a2", up.port()));
    g.gw.reload_signal();
    let applied = wait_generation_above(ports, gen, Duration::from_secs(3));
    let run = client.join().unwrap();
    g.check(applied, "the reload was not applied");
    assert!(run.success, "client loop: {}", run.all());

    let lines: Vec<&str> = run.stdout.lines().collect();
    let failed: Vec<&&str> = lines.iter().filter(|l| !l.starts_with("ok ")).collect();
    let fps: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("ok ")).collect();
    let old = fps.iter().filter(|f| **f == old_fp).count();
    let new = fps.iter().filter(|f| **f == new_fp).count();
    g.check(
        failed.is_empty(),
        &format!(
            "{} of {} requests failed: {:?}",
            failed.len(),
            lines.len(),
            &failed[..failed.len().min(5)]
        ),
    );
    assert!(
        lines.len() >= 20,
        "too little traffic: {} requests",
        lines.len()
    );
    assert_eq!(
        old + new,
        fps.len(),
        "an unknown certificate was served: {lines:?}"
    );
    assert!(
        old > 0 && new > 0,
        "old {old}, new {new}: the reload fell outside the traffic"
    );
    // Once the new certificate is served, the old one never comes back.
    let first_new = fps.iter().position(|f| *f == new_fp).unwrap();
    assert!(
        fps[first_new..].iter().all(|f| *f == new_fp),
        "the old certificate was served after the new one: {fps:?}"
    );
    // And a fresh client after the reload gets the new certificate.
    let one = python_get(tls_port, "a.test", &certs.ca(), "/hello", b"");
    assert!(
        one.stdout.lines().next().unwrap_or("").ends_with(&new_fp),
        "{}",
        one.all()
    );
}

#[test]
fn overwritten_certificate_files_are_served_after_sighup() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let g = tls_common::start(
        ports,
        extra,
        &reload_config(ports, tls_port, &certs, "a", up.port()),
    );
    let s = s_client(tls_port, &["-servername", "a.test"]);
    assert_eq!(s.served(&certs), "a");

    // The same config, new files under the same names (a renewal).
    let (a2_pem, a2_key) = (
        std::fs::read(certs.cert("a2")).unwrap(),
        std::fs::read(certs.key("a2")).unwrap(),
    );
    std::fs::write(certs.key("a"), a2_key).unwrap();
    std::fs::write(certs.cert("a"), &a2_pem).unwrap();
    let gen = generation(ports);
    g.gw.reload_signal();
    let reloaded = wait_generation_above(ports, gen, Duration::from_secs(3));
    let a2_b64 = pem_b64(&String::from_utf8_lossy(&a2_pem)).unwrap();
    let served = wait_until(Duration::from_secs(3), || {
        s_client(tls_port, &["-servername", "a.test"])
            .cert_b64()
            .as_deref()
            == Some(a2_b64.as_str())
    });
    g.check(
        served,
        &format!(
            "after rewriting a.pem/a.key and SIGHUP (generation advanced: {reloaded}) the old certificate is still served"
        ),
    );
}

#[test]
fn a_missing_certificate_or_a_mismatched_key_is_refused_on_reload() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls_port = extra[0];
    let good = reload_config(ports, tls_port, &certs, "a", up.port());
    let g = tls_common::start(ports, extra, &good);
    let failures = "sluicegate_config_reload_failures_total";

    // A missing certificate file.
    let missing = certs.dir().join("missing.pem");
    let bad = good.replace(
        &certs.cert("a").display().to_string(),
        &missing.display().to_string(),
    );
    assert_ne!(bad, good);
    g.gw.write_config(&bad);
    g.gw.reload_signal();
    g.check(
        wait_metric(ports, failures, Duration::from_secs(3), |v| v >= 1.0),
        "a config naming a missing certificate was not refused",
    );
    let named = wait_until(Duration::from_secs(2), || {
        g.gw.stderr().contains(&missing.display().to_string())
    });
    g.check(
        named,
        &format!("stderr does not name {}", missing.display()),
    );
    assert_eq!(generation(ports), 1);
    let s = s_client(tls_port, &["-servername", "a.test"]);
    assert_eq!(
        s.served(&certs),
        "a",
        "the old certificate keeps serving: {}",
        s.all()
    );

    // A key that is not the certificate's.
    let bad = good.replace(
        &certs.key("a").display().to_string(),
        &certs.key("a2").display().to_string(),
    );
    assert_ne!(bad, good);
    g.gw.write_config(&bad);
    g.gw.reload_signal();
    g.check(
        wait_metric(ports, failures, Duration::from_secs(3), |v| v >= 2.0),
        "a config with a key that does not match its certificate was not refused",
    );
    let a_pem = certs.cert("a").display().to_string();
    let a2_key = certs.key("a2").display().to_string();
    let named = wait_until(Duration::from_secs(2), || {
        let err = g.gw.stderr();
        err.lines()
            .any(|l| l.contains(&a_pem) || l.contains(&a2_key))
            && err.to_ascii_lowercase().contains("match")
    });
    g.check(
        named,
        &format!("stderr does not report that {a2_key} does not match {a_pem}"),
    );
    assert_eq!(generation(ports), 1);
    let (code, body, run) = curl_tls(tls_port, "a.test", "/hello", Some(&certs.ca()));
    assert!(code == 200 && body == "hello", "{}", run.all());
    assert_eq!(
        s_client(tls_port, &["-servername", "a.test"]).served(&certs),
        "a"
    );
    assert_eq!(metric(ports, "sluicegate_config_reloads_total"), 0.0);
}

#[test]
fn startup_with_a_missing_certificate_fails_naming_the_file() {
    let certs = Certs::new();
    let (ports, extra) = tls_common::ports(1);
    let missing = certs.dir().join("nope.pem");
    let yaml = format!(
        "{}routes:\n{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {{ certificates: [{{ cert: \"{}\", key: \"{}\" }}] }} }}",
                extra[0],
                missing.display(),
                certs.key("a").display()
            )]
        ),
        ops_common::respond_route("hello", "/hello", "x")
    );
    let mut gw = sluicegate_testkit::Gateway::spawn(ops_common::bin(), &yaml);
    let status = gw.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| !s.success()),
        "run with a missing certificate did not fail: {status:?}\n{}",
        gw.stderr()
    );
    assert!(
        gw.stderr().contains(&missing.display().to_string()),
        "stderr does not name {}:\n{}",
        missing.display(),
        gw.stderr()
    );

    // `validate` reads the YAML only (docs/config.md, "File paths"): it
    // must at least not crash; when it fails, it names the file.
    let file = certs.dir().join("gw.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let out = run_cli(&["validate", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "validate was killed: {out:?}");
    if !out.status.success() {
        assert!(
            stderr.contains(&missing.display().to_string()),
            "validate failed without naming {}: {stderr}",
            missing.display()
        );
    }
}

#[test]
fn an_expired_certificate_loads_with_a_warning() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    let tls = certs.tls(&["expired"], None, "");
    let yaml = format!(
        "{}{}",
        head(
            ports,
            &[format!(
                "{{ addr: \"127.0.0.1:{}\", tls: {tls} }}",
                extra[0]
            )]
        ),
        routes(up.port(), "hello")
    );
    let g = tls_common::start(ports, extra, &yaml);
    let (code, body, run) = curl_tls(g.port(0), "a.test", "/hello", None);
    assert!(code == 200 && body == "hello", "curl -k: {}", run.all());
    let s = s_client(g.port(0), &["-servername", "a.test"]);
    assert_eq!(s.served(&certs), "expired");
    // A verifying client refuses it.
    let (code, _, run) = curl_tls(g.port(0), "a.test", "/hello", Some(&certs.ca()));
    assert!(
        code != 200 && !run.success,
        "a verifying curl accepted an expired certificate"
    );
    let expired = certs.cert("expired").display().to_string();
    let warned = g.gw.stderr().lines().any(|l| {
        l.contains(&expired) && l.to_ascii_lowercase().contains("expired") && l.contains("WARN")
    });
    g.check(warned, &format!("no warning naming {expired} as expired"));
}
