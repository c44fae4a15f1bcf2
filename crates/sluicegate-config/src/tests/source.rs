//! `config_source`: a file or etcd, what an etcd source decodes to with
//! its defaults, and each mistake named where it is.

use super::{errors, ok};
use crate::ConfigSource;

const BASE: &str = "listen: 127.0.0.1:8080\n";

#[test]
fn etcd_source_with_defaults() {
    let c = ok(&format!(
        "{BASE}config_source:\n  etcd:\n    endpoints: [http://127.0.0.1:2379]\n"
    ));
    let Some(ConfigSource::Etcd(e)) = c.config_source else {
        panic!("no etcd source");
    };
    assert_eq!(e.connection.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(e.prefix, "/sluicegate/");
    assert!(e.connection.tls.is_none() && e.connection.username.is_none() && e.cache.is_none());
}

#[test]
fn bad_etcd_sources_are_explained() {
    let cases = [
        ("{ etcd: { } }", "missing required key \"endpoints\""),
        ("{ etcd: { endpoints: [] } }", "at least one etcd endpoint"),
        (
            "{ etcd: { endpoints: [127.0.0.1:2379] } }",
            "config_source.etcd.endpoints[0]: expected http://HOST:PORT or https://HOST:PORT",
        ),
        (
            "{ etcd: { endpoints: [http://a:1], prefix: sluicegate } }",
            "config_source.etcd.prefix: expected a key prefix that starts and ends with /",
        ),
        (
            "{ etcd: { endpoints: [http://a:1], username: u } }",
            "username and password_file go together",
        ),
        (
            "{ etcd: { endpoints: [https://a:1] } }",
            "an https:// endpoint needs tls",
        ),
        (
            "{ etcd: { endpoints: [http://a:1], tls: { cert: c.pem } } }",
            "cert and key go together",
        ),
        ("{ consul: {} }", "unknown key \"consul\""),
    ];
    for (source, want) in cases {
        let errs = errors(&format!("{BASE}config_source: {source}\n"));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{source}: {errs:?} lacks {want:?}"
        );
    }
}
