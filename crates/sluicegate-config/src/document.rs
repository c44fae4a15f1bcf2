//! The config as a document: the YAML tree the admin API reads and edits,
//! converted to and from JSON, written back as YAML, and decoded by the
//! same code as a file, with each problem given the JSON path of its field.
//!
//! Every write through the API builds a new [`Document`] and decodes it with
//! [`Document::decode`], which runs the file decoder over the tree. Before
//! decoding, every node is renumbered: its position's line is 0 and its
//! column an index into a table of (parent, key or index), so that each
//! error's position, and each position quoted inside a message ("first at
//! ..."), turns back into a path such as `$.routes[2].service`.

mod emit;
mod json;

use compact_str::CompactString;

use crate::yaml::{self, Node, Pos, Value, MARK_CLOSE, MARK_OPEN};
use crate::{apps, decode, reader, Config, ConfigError};

/// One problem with a document: the JSON path of the field it concerns
/// (`$` for the whole document) and the same message a file would get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A config document: the tree of one YAML document (or of a JSON value).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    root: Node,
}

impl Document {
    /// Parses YAML text into a document without checking it against the
    /// schema; a syntax error is one problem at `$` naming its line.
    pub fn from_yaml(text: &str) -> Result<Document, Problem> {
        match yaml::parse_streaming(text, "", &mut |_| {}) {
            Ok(Some(root)) => Ok(Document { root }),
            Ok(None) => Ok(Document {
                root: json::scalar("null", true),
            }),
            Err(e) => Err(Problem {
                path: "$".to_string(),
                message: e.to_string(),
            }),
        }
    }

    /// The document holding `value` (strings become quoted scalars, so
    /// `"true"` stays a string; numbers, booleans and null plain ones).
    pub fn from_json(value: &serde_json::Value) -> Document {
        Document {
            root: json::to_node(value),
        }
    }

    /// The document as JSON: plain scalars that are null, a boolean or a
    /// whole number become those; every other scalar a string.
    pub fn to_json(&self) -> serde_json::Value {
        json::from_node(&self.root)
    }

    /// The document as YAML text, in block style (comments are not kept).
    pub fn to_yaml(&self) -> String {
        emit::yaml(&self.root)
    }

    /// The value of a top-level key, as JSON; `None` when absent.
    pub fn get(&self, key: &str) -> Option<serde_json::Value> {
        self.entry(key).map(json::from_node)
    }

    /// Sets a top-level key to `value`, or removes it when `None`. A
    /// document that is not a mapping becomes one.
    pub fn set(&mut self, key: &str, value: Option<&serde_json::Value>) {
        if !matches!(self.root.value, Value::Map(_)) {
            self.root = Node {
                pos: self.root.pos,
                value: Value::Map(Vec::new()),
            };
        }
        let Value::Map(entries) = &mut self.root.value else {
            return;
        };
        let at = entries.iter().position(|e| e.key.as_scalar() == Some(key));
        match (at, value) {
            (Some(i), Some(v)) => entries[i].value = json::to_node(v),
            (Some(i), None) => {
                entries.remove(i);
            }
            (None, Some(v)) => entries.push(yaml::Entry {
                key: json::scalar(key, true),
                value: json::to_node(v),
            }),
            (None, None) => {}
        }
    }

    /// The top-level keys, in order.
    pub fn keys(&self) -> Vec<String> {
        match &self.root.value {
            Value::Map(entries) => entries
                .iter()
                .filter_map(|e| e.key.as_scalar().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn entry(&self, key: &str) -> Option<&Node> {
        match &self.root.value {
            Value::Map(entries) => entries
                .iter()
                .find(|e| e.key.as_scalar() == Some(key))
                .map(|e| &e.value),
            _ => None,
        }
    }

    /// Decodes the document as the file decoder does (the same rules and
    /// messages), with every problem at the JSON path of its field.
    pub fn decode(&self) -> Result<Config, Vec<Problem>> {
        let mut root = self.root.clone();
        let mut table = Paths::default();
        table.number(&mut root, 0, Seg::Root);
        let mut cx = reader::Cx::default();
        let config = decode::config(&mut cx, Some(&root), apps::AppsDecoder::new());
        if cx.errors.is_empty() {
            return Ok(config);
        }
        let mut errors = cx.errors;
        errors.sort_by_key(|e| (e.line, e.col));
        Err(errors.iter().map(|e| table.problem(e)).collect())
    }
}

/// Decodes `apps`, a JSON list of app objects, alone: as a config whose
/// services and plans have these names decodes its `apps` list (the same
/// rules and messages), each problem at its JSON path (`$.apps[0].plan`).
/// Ids and keys are checked against each other only: whoever applies the
/// apps checks them against the apps already running.
pub fn decode_apps(
    apps: &serde_json::Value,
    services: &[&str],
    plans: &[&str],
) -> Result<Vec<crate::App>, Vec<Problem>> {
    let mut root = Node {
        pos: Pos { line: 0, col: 0 },
        value: Value::Map(vec![yaml::Entry {
            key: json::scalar("apps", true),
            value: json::to_node(apps),
        }]),
    };
    let mut table = Paths::default();
    table.number(&mut root, 0, Seg::Root);
    let mut cx = reader::Cx::default();
    let Value::Map(entries) = &root.value else {
        unreachable!("made a map above")
    };
    let root_path = reader::Path::Root;
    let path = root_path.key("apps");
    let mut decoder = apps::AppsDecoder::new();
    decoder.list(&mut cx, &entries[0].value, path);
    let nowhere = Pos { line: 0, col: 0 };
    let services: std::collections::HashMap<&str, Pos> =
        services.iter().map(|s| (*s, nowhere)).collect();
    let out = decoder.finish(&mut cx, path, &services, plans);
    if cx.errors.is_empty() {
        return Ok(out);
    }
    let mut errors = cx.errors;
    errors.sort_by_key(|e| (e.line, e.col));
    Err(errors.iter().map(|e| table.problem(e)).collect())
}

/// How a node hangs from its parent.
enum Seg {
    Root,
    Key(CompactString),
    Index(usize),
}

/// Each renumbered node's parent and place in it, by its number (from 1).
#[derive(Default)]
struct Paths {
    nodes: Vec<(usize, Seg)>,
}

impl Paths {
    /// Gives `node` and everything under it a number; `parent` is the
    /// parent's number (0 for none).
    fn number(&mut self, node: &mut Node, parent: usize, seg: Seg) {
        self.nodes.push((parent, seg));
        let id = self.nodes.len();
        node.pos = Pos::synthetic(id);
        match &mut node.value {
            Value::Scalar { .. } => {}
            Value::List(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.number(item, id, Seg::Index(i));
                }
            }
            Value::Map(entries) => {
                for e in entries {
                    let key: CompactString = e.key.as_scalar().unwrap_or_default().into();
                    // A key's errors (unknown, duplicate) name the key's path.
                    self.number(&mut e.key, id, Seg::Key(key.clone()));
                    self.number(&mut e.value, id, Seg::Key(key));
                }
            }
        }
    }

    /// The JSON path of node number `id`.
    fn path(&self, id: usize) -> String {
        let mut segs = Vec::new();
        let mut at = id;
        while let Some((parent, seg)) = at.checked_sub(1).and_then(|i| self.nodes.get(i)) {
            segs.push(seg);
            at = *parent;
        }
        let mut out = String::from("$");
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
                Seg::Key(k) if is_identifier(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Seg::Key(k) => {
                    out.push('[');
                    out.push_str(&serde_json::Value::from(k.as_str()).to_string());
                    out.push(']');
                }
            }
        }
        out
    }

    fn problem(&self, e: &ConfigError) -> Problem {
        let path = if e.line == 0 {
            self.path(e.col)
        } else {
            "$".to_string()
        };
        Problem {
            path,
            message: self.unmark(&e.message),
        }
    }

    /// `message` with each marked position replaced by its path.
    fn unmark(&self, message: &str) -> String {
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(start) = rest.find(MARK_OPEN) {
            out.push_str(&rest[..start]);
            let after = &rest[start + MARK_OPEN.len_utf8()..];
            let Some(end) = after.find(MARK_CLOSE) else {
                rest = after;
                continue;
            };
            match after[..end].parse::<usize>() {
                Ok(id) => out.push_str(&self.path(id)),
                Err(_) => out.push_str(&after[..end]),
            }
            rest = &after[end + MARK_CLOSE.len_utf8()..];
        }
        out.push_str(rest);
        out
    }
}

/// Keys written `.key` in a path; others are written `["key"]`.
fn is_identifier(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(doc: serde_json::Value) -> Vec<Problem> {
        Document::from_json(&doc).decode().unwrap_err()
    }

    fn base() -> serde_json::Value {
        json!({
            "listen": ["127.0.0.1:8080"],
            "services": [{ "name": "web", "endpoints": ["127.0.0.1:9000"] }],
            "routes": [{ "name": "r", "match": { "path_prefix": "/" }, "service": "web" }]
        })
    }

    #[test]
    fn apps_decode_alone_as_in_a_whole_config() {
        let apps = json!([
            { "id": "a", "keys": ["key-of-a-0001"], "plan": "gold", "services": ["web"] },
            { "id": "b", "keys": ["key-of-b-0001"], "plans_by_service": { "web": "gold" } }
        ]);
        let alone = decode_apps(&apps, &["web"], &["gold"]).unwrap();
        let mut whole = base();
        whole["plans"] = json!({ "gold": { "rate": "1/s" } });
        whole["apps"] = apps;
        let cfg = Document::from_json(&whole).decode().unwrap();
        assert_eq!(alone, cfg.apps);
        // The same problems, at the same paths, as in a whole config.
        let bad = json!([
            { "id": "a", "keys": ["short"], "plan": "silver", "services": ["nope"] },
            { "id": "b", "keys": ["key-of-b-0001", "key-of-b-0001"], "colour": 1 }
        ]);
        let alone = decode_apps(&bad, &["web"], &["gold"]).unwrap_err();
        whole["apps"] = bad;
        let in_whole = problems(whole);
        assert_eq!(alone, in_whole);
        let paths: Vec<&str> = alone.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.apps[0].keys[0]",
                "$.apps[0].plan",
                "$.apps[0].services[0]",
                "$.apps[1].keys[1]",
                "$.apps[1].colour"
            ],
            "{alone:?}"
        );
    }

    #[test]
    fn a_valid_json_document_decodes_like_its_yaml() {
        let doc = Document::from_json(&base());
        let from_json = doc.decode().unwrap();
        let from_yaml = crate::parse(&doc.to_yaml()).unwrap();
        assert_eq!(from_json, from_yaml);
    }

    #[test]
    fn problems_name_their_json_path() {
        let mut doc = base();
        doc["routes"][0]["service"] = json!("webb");
        doc["services"][0]["colour"] = json!("blue");
        doc["limits"] = json!({ "max_connections": "lots" });
        let got = problems(doc);
        let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.services[0].colour",
                "$.routes[0].service",
                "$.limits.max_connections"
            ],
            "in document order: {got:?}"
        );
        assert!(got[0]
            .message
            .starts_with("unknown key \"colour\" in service"));
        assert_eq!(
            got[1].message,
            "routes[0].service: unknown service \"webb\""
        );
        assert!(got[2]
            .message
            .starts_with("limits.max_connections: expected a positive integer"));
    }

    #[test]
    fn positions_inside_messages_become_paths() {
        let mut doc = base();
        doc["services"] = json!([
            { "name": "web", "endpoints": ["127.0.0.1:9000"] },
            { "name": "web", "endpoints": ["127.0.0.1:9001"] }
        ]);
        let got = problems(doc);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].path, "$.services[1].name");
        assert!(
            got[0].message.contains("(first at $.services[0].name)"),
            "{}",
            got[0].message
        );
    }

    #[test]
    fn odd_keys_are_bracketed() {
        let mut doc = base();
        doc["routes"][0]["request_headers"] = json!({ "set": { "X-A": "a\nb" } });
        let got = problems(doc);
        assert_eq!(got[0].path, "$.routes[0].request_headers.set[\"X-A\"]");
    }

    #[test]
    fn match_regex_and_cookie_errors_name_their_json_path() {
        let mut doc = base();
        doc["routes"][0]["match"] = json!({
            "headers": { "x-v": "~(" },
            "cookies": { "beta": "a b" },
            "query": { "v": 1 }
        });
        let got = problems(doc);
        let paths: Vec<&str> = got.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.routes[0].match.headers[\"x-v\"]",
                "$.routes[0].match.cookies.beta"
            ],
            "{got:?}"
        );
        assert!(got[0].message.contains("invalid regex \"(\""), "{got:?}");
    }

    #[test]
    fn strings_stay_strings_and_set_edits_the_top_level() {
        let mut doc =
            Document::from_yaml("listen: 127.0.0.1:1\nreload: { watch: \"true\" }\n").unwrap();
        // A quoted "true" is a string, which `watch` refuses, from YAML or JSON.
        assert!(doc.decode().is_err());
        let as_json = doc.to_json();
        assert_eq!(as_json["reload"]["watch"], json!("true"));
        assert!(Document::from_json(&as_json).decode().is_err());
        doc.set("reload", Some(&json!({ "watch": true })));
        assert!(doc.decode().is_ok());
        doc.set("reload", None);
        assert_eq!(doc.keys(), ["listen"]);
        assert_eq!(doc.get("listen"), Some(json!("127.0.0.1:1")));
    }

    /// Every example config, and the complete example of docs/config.md:
    /// through JSON and back, and written as YAML and read again, it is
    /// the same config as the file.
    #[test]
    fn example_configs_survive_json_and_yaml_round_trips() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut texts = Vec::new();
        for entry in std::fs::read_dir(root.join("examples")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                texts.push((
                    path.display().to_string(),
                    std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
        let md = std::fs::read_to_string(root.join("docs/config.md")).unwrap();
        let example = md.split("## A complete example").nth(1).unwrap();
        let yaml = example
            .split("```yaml\n")
            .nth(1)
            .unwrap()
            .split("```")
            .next()
            .unwrap();
        texts.push(("config.md".to_string(), yaml.to_string()));
        assert!(texts.len() >= 3);
        for (name, text) in texts {
            let from_file = crate::parse(&text).map_err(|e| e.len());
            let doc = Document::from_yaml(&text).unwrap();
            let via_json = Document::from_json(&doc.to_json());
            assert_eq!(via_json.decode().map_err(|e| e.len()), from_file, "{name}");
            let written = via_json.to_yaml();
            assert_eq!(
                crate::parse(&written).map_err(|e| e.len()),
                from_file,
                "{name}: {written}"
            );
        }
    }

    #[test]
    fn yaml_syntax_errors_are_one_problem() {
        let e = Document::from_yaml("a: b: c\n").unwrap_err();
        assert_eq!(e.path, "$");
        assert!(e.message.starts_with("1:5: invalid YAML"), "{}", e.message);
    }
}
