//! Path templates in `match.path` and what may name their parameters
//! (`${name}` in rewrite and request headers, `limit.per: param:NAME`):
//! the model they decode to, and each mistake named by its field, in a
//! file and through the admin API's document form.

use super::{errors, ok};
use crate::{Document, LimitKey, ParamType, PathMatch, TemplateSegment};

fn route(path: &str, rest: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080\nservices:\n  - name: web\n    endpoints: [\"127.0.0.1:9001\"]\nroutes:\n  - name: r\n    match: {{ path: \"{path}\" }}\n    service: web\n{rest}"
    )
}

#[test]
fn templates_decode() {
    let c = ok(&route(
        "/users/{id:int}/{rest:*}",
        "    limit: { rate: 5/s, per: \"param:id\" }\n    rewrite: { regex: \"^/users/([0-9]+)\", replacement: \"/v2/${id}/$1/${rest}\" }\n    request_headers: { set: { x-user: \"u-${id}\" }, add: { x-rest: \"${rest}\" } }\n",
    ));
    let PathMatch::Template(t) = &c.routes[0].matcher.path else {
        panic!("not a template");
    };
    assert_eq!(
        t.segments[1],
        TemplateSegment::Param {
            name: "id".into(),
            ty: ParamType::Int
        }
    );
    assert_eq!(c.routes[0].limit.as_ref().unwrap().per, LimitKey::Param(0));
    // Without a "{" a path stays exact, "}" and all.
    let c = ok(&route("/a}b", ""));
    assert_eq!(c.routes[0].matcher.path, PathMatch::Exact("/a}b".into()));
    // On a route without a template, "${...}" in a header value is text.
    let c = ok(&route(
        "/a",
        "    request_headers: { set: { x-a: \"${id}\" } }\n",
    ));
    assert_eq!(c.routes[0].request_headers.set[0].1, "${id}");
}

#[test]
fn mistakes_name_the_field() {
    let cases = [
        (route("/u/{id:float}", ""), "7:20: routes[0].match.path: bad path template \"/u/{id:float}\": unknown parameter type \"float\""),
        (route("/u/{id:regex(a(}", ""), "routes[0].match.path: bad path template"),
        (route("/{a}/{a}", ""), "duplicate parameter name \"a\""),
        (route("/{a:*}/b", ""), "{a:*} must be the last segment"),
        (route("/u{id}", ""), "a parameter must be a whole segment"),
        (route("/{}", ""), "a parameter needs a name"),
        (route("/{9x}", ""), "bad parameter name \"9x\""),
        (
            route("/u/{id}", "    limit: { rate: 5/s, per: \"param:uid\" }\n"),
            "9:30: routes[0].limit.per: \"param:uid\": \"uid\" is not a parameter of match.path \"/u/{id}\"",
        ),
        (
            route("/u/x", "    limit: { rate: 5/s, per: \"param:id\" }\n"),
            "routes[0].limit.per: \"param:id\": needs match.path to be a template with that parameter",
        ),
        (
            route("/u/{id}", "    rewrite: { regex: \"^/u/(?P<n>.*)\", replacement: \"/${n}/${id}/${uid}\" }\n"),
            "9:53: routes[0].rewrite.replacement: ${uid} is neither a capture group of rewrite.regex nor a parameter of match.path",
        ),
        (
            route("/u/x", "    rewrite: { regex: \"^/u/(.*)\", replacement: \"/${2}\" }\n"),
            "routes[0].rewrite.replacement: ${2} is neither a capture group of rewrite.regex",
        ),
        (
            route("/u/{id}", "    request_headers: { add: { x-u: \"${ id }\" } }\n"),
            "9:36: routes[0].request_headers.add.x-u: ${ id } is not a parameter of match.path \"/u/{id}\"",
        ),
    ];
    for (text, want) in cases {
        let all = errors(&text);
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(all[0].contains(want), "{} does not contain {want}", all[0]);
    }
    // A parameter's counters may be global too (given cluster.redis).
    let all = errors(&route(
        "/u/{id}",
        "    limit: { rate: 5/s, per: \"param:id\", scope: global }\n",
    ));
    assert!(all.iter().all(|e| e.contains("cluster.redis")), "{all:?}");
}

#[test]
fn json_documents_name_the_path() {
    let doc = Document::from_yaml(&route("/u/{id:uuid}", "")).unwrap();
    let mut json = doc.to_json();
    assert!(Document::from_json(&json).decode().is_ok());
    json["routes"][0]["match"]["path"] = serde_json::json!("/u/{id:uuid}/{id}");
    let problems = Document::from_json(&json).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].match.path");
    assert!(problems[0].message.contains("duplicate parameter name"));
}
