//! Objects and the config document: the objects under the prefix laid
//! over the file's document (`assemble`), and a document split back into
//! objects (`split`) so that an API write becomes the few puts and deletes
//! that differ (`diff`).

use serde_json::{Map, Value};
use sluicegate_config::Document;

use crate::history::Issue;

/// One object's key under the prefix (`routes/web`) and its JSON value.
/// A persistent map: a copy is shared until changed and a change copies
/// a path of nodes, so the cache writer can hold the objects of a
/// million apps while the next change is made.
pub(crate) type Objects = imbl::OrdMap<String, serde_json::Value>;

/// The kinds of object: key segment, top-level key, and where the name
/// goes (`None`: the section is a mapping from name to object).
const KINDS: [(&str, Option<&str>); 4] = [
    ("services", Some("name")),
    ("routes", Some("name")),
    ("apps", Some("id")),
    ("plans", None),
];

/// The one key that holds the global settings.
pub(crate) const SETTINGS: &str = "settings";

/// Keys under the prefix that are the gateway's own, not config.
pub(crate) const META: &str = "meta/";

/// Top-level keys that stay in the file: they say how this gateway starts.
const LOCAL: [&str; 4] = ["listen", "admin", "workers", "config_source"];

/// Whether `key` (under the prefix) names an object: `KIND/NAME` or `settings`.
pub(crate) fn is_object(key: &str) -> bool {
    key == SETTINGS
        || KINDS.iter().any(|(kind, _)| {
            key.strip_prefix(kind)
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|name| !name.is_empty() && !name.contains('/'))
        })
}

/// The document `objects` make laid over `base`, and the problems of
/// objects that cannot take part (a non-object, a setting that is local).
pub(crate) fn assemble(base: &Document, objects: &Objects) -> (Document, Vec<Issue>) {
    let mut doc = base.clone();
    let mut issues = Vec::new();
    let issue = |key: &str, message: String| Issue {
        path: format!("etcd:{key}"),
        message,
    };
    for (kind, name_key) in KINDS {
        let start = format!("{kind}/");
        let items = objects
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start));
        let mut list = Vec::new();
        let mut map = Map::new();
        let mut any = false;
        for (key, value) in items {
            let name = &key[start.len()..];
            let Value::Object(fields) = value else {
                issues.push(issue(key, "expected a JSON object".to_string()));
                continue;
            };
            any = true;
            let mut fields = fields.clone();
            match name_key {
                Some(k) => {
                    fields.insert(k.to_string(), Value::String(name.to_string()));
                    list.push(Value::Object(fields));
                }
                None => {
                    map.insert(name.to_string(), Value::Object(fields));
                }
            }
        }
        if any {
            let section = match name_key {
                Some(_) => Value::Array(list),
                None => Value::Object(map),
            };
            doc.set(kind, Some(&section));
        }
    }
    match objects.get(SETTINGS) {
        None => {}
        Some(Value::Object(settings)) => {
            for (k, v) in settings {
                if LOCAL.contains(&k.as_str()) || KINDS.iter().any(|(kind, _)| kind == k) {
                    issues.push(issue(
                        SETTINGS,
                        format!("{k:?} is not a setting kept in etcd"),
                    ));
                } else {
                    doc.set(k, Some(v));
                }
            }
        }
        Some(_) => issues.push(issue(SETTINGS, "expected a JSON object".to_string())),
    }
    (doc, issues)
}

/// The objects of `doc`: its services, routes, apps and plans one by one,
/// and the settings that differ from `base`'s.
pub(crate) fn split(base: &Document, doc: &Document) -> Objects {
    let mut out = Objects::new();
    for (kind, name_key) in KINDS {
        match (name_key, doc.get(kind)) {
            (Some(k), Some(Value::Array(items))) => {
                for mut item in items {
                    let name = item
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    if let Value::Object(m) = &mut item {
                        m.remove(k);
                    }
                    out.insert(format!("{kind}/{name}"), item);
                }
            }
            (None, Some(Value::Object(map))) => {
                for (name, item) in map {
                    out.insert(format!("{kind}/{name}"), item);
                }
            }
            _ => {}
        }
    }
    let mut settings = Map::new();
    for k in doc.keys() {
        if LOCAL.contains(&k.as_str()) || KINDS.iter().any(|(kind, _)| *kind == k) {
            continue;
        }
        let v = doc.get(&k);
        if v != base.get(&k) {
            settings.insert(k, v.unwrap_or(Value::Null));
        }
    }
    if !settings.is_empty() {
        out.insert(SETTINGS.to_string(), Value::Object(settings));
    }
    out
}

/// What turns `old` into `new`: keys to put (with their value) and keys to delete.
pub(crate) fn diff(old: &Objects, new: &Objects) -> (Vec<(String, Value)>, Vec<String>) {
    let puts = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let deletes = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .cloned()
        .collect();
    (puts, deletes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Document {
        Document::from_yaml("listen: 127.0.0.1:8080\nlimits: { max_connections: 10 }\n").unwrap()
    }

    #[test]
    fn objects_make_the_document_and_split_back() {
        let mut objects = Objects::new();
        objects.insert(
            "services/api".into(),
            json!({"endpoints": ["127.0.0.1:9000"]}),
        );
        objects.insert("routes/b".into(), json!({"service": "api"}));
        objects.insert(
            "routes/a".into(),
            json!({"match": {"path": "/a"}, "service": "api"}),
        );
        objects.insert("plans/gold".into(), json!({"rate": "10/s"}));
        objects.insert(
            "settings".into(),
            json!({"limits": {"max_connections": 20}}),
        );
        let (doc, issues) = assemble(&base(), &objects);
        assert!(issues.is_empty(), "{issues:?}");
        let routes = doc.get("routes").unwrap();
        assert_eq!(routes[0]["name"], "a");
        assert_eq!(routes[1]["name"], "b");
        assert_eq!(doc.get("plans").unwrap()["gold"]["rate"], "10/s");
        assert_eq!(doc.get("limits").unwrap()["max_connections"], 20);
        assert_eq!(split(&base(), &doc), objects);
    }

    #[test]
    fn local_keys_and_non_objects_are_reported() {
        let mut objects = Objects::new();
        objects.insert("routes/x".into(), json!(7));
        objects.insert("settings".into(), json!({"listen": "0.0.0.0:1"}));
        let (doc, issues) = assemble(&base(), &objects);
        assert_eq!(issues.len(), 2);
        assert_eq!(issues[0].path, "etcd:routes/x");
        assert_eq!(doc.get("listen").unwrap(), "127.0.0.1:8080");
    }

    #[test]
    fn diff_puts_changed_and_deletes_gone() {
        let old: Objects = [("a".to_string(), json!(1)), ("b".to_string(), json!(2))]
            .into_iter()
            .collect();
        let new: Objects = [("a".to_string(), json!(1)), ("c".to_string(), json!(3))]
            .into_iter()
            .collect();
        let (puts, deletes) = diff(&old, &new);
        assert_eq!(puts, [("c".to_string(), json!(3))]);
        assert_eq!(deletes, ["b"]);
    }

    #[test]
    fn object_keys() {
        assert!(is_object("routes/web") && is_object("settings"));
        assert!(!is_object("routes/") && !is_object("routes/a/b") && !is_object("meta/write"));
        assert!(!is_object("other/x"));
        assert!(!is_object("meta/cache-purge/0a1b-0"));
        assert!(super::super::purge::KEYS.starts_with(META));
    }
}
