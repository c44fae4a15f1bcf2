//! A route's `split` and `split_by`: what they decode to, and each mistake
//! named where it is.

use super::{errors, ok};
use crate::*;

/// A config with services a, b, c, one app `beta-co` (key auth) and one
/// route whose remaining keys are `rest` (one key per line, indented).
fn route(rest: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - {{ name: a, endpoints: [\"127.0.0.1:9001\"] }}
  - {{ name: b, endpoints: [\"127.0.0.1:9002\"] }}
  - {{ name: c, endpoints: [\"127.0.0.1:9003\"] }}
apps:
  - {{ id: beta-co, keys: [\"k-beta-0123456789abcdef\"] }}
routes:
  - name: r
{rest}"
    )
}

fn split_of(c: &Config) -> (&str, &Split) {
    match &c.routes[0].action {
        Action::Proxy {
            service,
            split: Some(s),
            ..
        } => (service, s),
        other => panic!("{other:?}"),
    }
}

#[test]
fn entries_and_every_kind_decode() {
    let c = ok(&route(
        "    auth: app_key
    split:
      - { service: a, weight: 95 }
      - { service: b, weight: 5, apps: [beta-co] }
    split_by: app
",
    ));
    let (service, s) = split_of(&c);
    assert_eq!(service, "a", "the first entry's service");
    assert_eq!(
        s.entries,
        vec![
            SplitEntry {
                service: "a".into(),
                weight: 95,
                apps: vec![]
            },
            SplitEntry {
                service: "b".into(),
                weight: 5,
                apps: vec!["beta-co".into()]
            },
        ]
    );
    assert_eq!(s.by, SplitBy::App);
    for (text, by) in [
        ("random", SplitBy::Random),
        ("client_ip", SplitBy::ClientIp),
        ("header:X-User", SplitBy::Header("x-user".into())),
        ("cookie:session_id", SplitBy::Cookie("session_id".into())),
    ] {
        let c = ok(&route(&format!(
            "    split: [{{ service: a, weight: 1 }}, {{ service: b, weight: 0 }}]\n    split_by: \"{text}\"\n"
        )));
        assert_eq!(split_of(&c).1.by, by, "{text}");
    }
    let c = ok(&route(
        "    match: { path: \"/o/{shop}/{id:int}\" }\n    split: [{ service: a, weight: 1 }]\n    split_by: param:id\n",
    ));
    assert_eq!(split_of(&c).1.by, SplitBy::Param(1));
    let c = ok(&route("    split: [{ service: c, weight: 1 }]\n"));
    assert_eq!(split_of(&c), ("c", &split_of(&c).1.clone()));
    assert_eq!(split_of(&c).1.by, SplitBy::Random);
}

#[test]
fn each_mistake_is_named() {
    let cases: &[(&str, &str)] = &[
        (
            "    split: []\n",
            "10:12: routes[0].split: needs at least one entry",
        ),
        (
            "    split: [{ service: a, weight: 1 }, { service: nope, weight: 1 }]\n",
            "10:51: routes[0].split[1].service: unknown service \"nope\"",
        ),
        (
            "    split: [{ service: a, weight: 1 }, { service: a, weight: 2 }]\n",
            "10:51: routes[0].split[1].service: service \"a\" is in the split twice (first at 10:24)",
        ),
        (
            "    split: [{ service: a, weight: 0 }, { service: b, weight: 0 }]\n",
            "10:12: routes[0].split: every weight is 0",
        ),
        (
            "    split: [{ service: a, weight: 1000001 }]\n",
            "10:35: routes[0].split[0].weight: expected an integer from 0 to 1000000",
        ),
        (
            "    split: [{ service: a, weight: -1 }]\n",
            "10:35: routes[0].split[0].weight: expected an integer from 0 to 1000000",
        ),
        (
            "    split: [{ service: a }]\n",
            "10:13: routes[0].split[0]: missing required key \"weight\"",
        ),
        (
            "    split: [{ service: a, weight: 1, share: 2 }]\n",
            "10:38: unknown key \"share\" in split entry",
        ),
        (
            "    service: a\n    split: [{ service: a, weight: 1 }]\n",
            "11:12: routes[0]: give one of service, split or respond, not more",
        ),
        (
            "    respond: { status: 200 }\n    split: [{ service: a, weight: 1 }]\n",
            "11:12: routes[0]: give one of service, split or respond, not more",
        ),
        (
            "    service: a\n    split_by: app\n",
            "11:15: routes[0].split_by: only applies to routes with a split",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: param:id\n",
            "11:15: routes[0].split_by: \"param:id\": needs match.path to be a template with that parameter",
        ),
        (
            "    match: { path: \"/o/{oid}\" }\n    split: [{ service: a, weight: 1 }]\n    split_by: param:id\n",
            "12:15: routes[0].split_by: \"param:id\": \"id\" is not a parameter of match.path \"/o/{oid}\"",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: bogus\n",
            "11:15: routes[0].split_by: unknown kind \"bogus\" (expected random, client_ip, app, header:NAME, cookie:NAME or param:NAME)",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: header\n",
            "11:15: routes[0].split_by: unknown kind \"header\"",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: \"header:\"\n",
            "11:15: routes[0].split_by: header: needs a header name",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: \"cookie:a b\"\n",
            "11:15: routes[0].split_by: cookie: needs a cookie name",
        ),
        (
            "    split: [{ service: a, weight: 1 }]\n    split_by: app\n",
            "11:15: routes[0].split_by: app needs the route's auth",
        ),
        (
            "    split: [{ service: a, weight: 1, apps: [beta-co] }]\n",
            "10:12: routes[0].split[0].apps: pinning apps needs the route's auth",
        ),
        (
            "    auth: app_key\n    split: [{ service: a, weight: 1, apps: [beta-co] }, { service: b, weight: 1, apps: [beta-co] }]\n",
            "routes[0].split[1].apps[0]: app \"beta-co\" is pinned twice",
        ),
        (
            "    auth: app_key\n    split: [{ service: a, weight: 1, apps: [gamma] }]\n",
            "routes[0].split[0].apps[0]: unknown app \"gamma\"",
        ),
    ];
    let mut wrong = Vec::new();
    for (rest, want) in cases {
        let e = errors(&route(rest));
        if e.len() != 1 || !(e[0].starts_with(want) || e[0].contains(want)) {
            wrong.push(format!("{rest}: {e:?}, wanted {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn pinned_apps_are_not_checked_without_apps_in_the_config() {
    // Apps may come alone (etcd): a pin then names one to come.
    let text = route("    auth: app_key\n    split: [{ service: a, weight: 1, apps: [later] }]\n")
        .replace(
            "apps:\n  - { id: beta-co, keys: [\"k-beta-0123456789abcdef\"] }\n",
            "",
        );
    let c = ok(&text);
    assert_eq!(split_of(&c).1.entries[0].apps, vec!["later".to_string()]);
}
