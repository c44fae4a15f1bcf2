//! A route's `compress`: what it decodes to, and each mistake named where it is.

use super::{errors, ok};
use crate::*;

fn route(compress: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: r
    service: s
    compress: {compress}
"
    )
}

#[test]
fn true_takes_every_default_and_false_is_off() {
    let c = ok(&route("true"));
    assert_eq!(c.routes[0].compress, Some(Compress::default()));
    let d = Compress::default();
    assert_eq!(
        d.algorithms,
        [
            CompressAlgorithm::Zstd,
            CompressAlgorithm::Br,
            CompressAlgorithm::Gzip
        ]
    );
    assert_eq!(d.min_size, 1024);
    assert_eq!(d.level, CompressLevel::Fast);
    assert_eq!(ok(&route("false")).routes[0].compress, None);
    assert_eq!(ok(&route("{}")).routes[0].compress, Some(d));
}

#[test]
fn settings_decode() {
    let c = ok(&route(
        "{ algorithms: [gzip, br], min_size: 2KiB, types: [Text/HTML, application/*+json], level: best }",
    ));
    assert_eq!(
        c.routes[0].compress,
        Some(Compress {
            algorithms: vec![CompressAlgorithm::Gzip, CompressAlgorithm::Br],
            min_size: 2048,
            types: vec!["text/html".into(), "application/*+json".into()],
            level: CompressLevel::Best,
        })
    );
    let c = ok(&route("{ algorithms: [gzip, zstd], level: 5 }"));
    assert_eq!(
        c.routes[0].compress.as_ref().unwrap().level,
        CompressLevel::Level(5)
    );
    assert_eq!(CompressAlgorithm::Gzip.level(CompressLevel::Fast), 1);
    assert_eq!(CompressAlgorithm::Br.level(CompressLevel::Default), 4);
    assert_eq!(CompressAlgorithm::Zstd.level(CompressLevel::Best), 19);
}

#[test]
fn mistakes_are_named() {
    assert_eq!(
        errors(&route("{ algorithms: [gzip, deflate] }")),
        ["8:36: routes[0].compress.algorithms[1]: unknown algorithm \"deflate\": expected zstd, br or gzip"]
    );
    assert_eq!(
        errors(&route("{ algorithms: [gzip, gzip] }")),
        ["8:36: routes[0].compress.algorithms[1]: \"gzip\" is listed twice"]
    );
    assert_eq!(
        errors(&route("{ algorithms: [] }")),
        ["8:29: routes[0].compress.algorithms: must name at least one algorithm"]
    );
    assert_eq!(
        errors(&route("{ types: [json] }")),
        ["8:25: routes[0].compress.types[0]: \"json\" is not a media type like text/html, text/* or application/*+json"]
    );
    for bad in ["\"*/*\"", "\"text/*json\"", "\"a/b/c\""] {
        let e = errors(&route(&format!("{{ types: [{bad}] }}")));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(e[0].contains("is not a media type"), "{bad}: {e:?}");
    }
    let e = errors(&route("{ level: 10 }"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("8:22: routes[0].compress.level: level 10 is out of zstd's range 1 to 19")
            || e[0].contains("out of gzip's range 1 to 9"),
        "{e:?}"
    );
    assert_eq!(
        errors(&route("{ level: quick }")),
        ["8:24: routes[0].compress.level: expected fast, default, best, or an integer level, found \"quick\""]
    );
    let c = ok(&route("{ algorithms: [br], level: 0 }"));
    assert_eq!(
        c.routes[0].compress.as_ref().unwrap().level,
        CompressLevel::Level(0)
    );
    assert_eq!(errors(&route("{ min_size: lots }")).len(), 1);
    assert_eq!(
        errors(&route("{ level: fast, gzip: 1 }")),
        ["8:30: unknown key \"gzip\" in compress (expected one of: algorithms, min_size, types, level)"]
    );
    assert_eq!(
        errors(&route("yes")),
        ["8:15: routes[0].compress: expected true or false, found \"yes\""]
    );
    let respond = "listen: 127.0.0.1:8080
routes:
  - name: r
    respond: { status: 200 }
    compress: true
";
    assert_eq!(
        errors(respond),
        ["5:15: routes[0].compress: only applies to routes with a service"]
    );
}
