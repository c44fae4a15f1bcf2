//! JSON values to document nodes and back.
//!
//! A JSON string becomes a quoted scalar (so `"true"` and `"8080"` stay
//! strings to the decoder); numbers, booleans and null become plain
//! scalars, which the decoder reads as YAML would read them unquoted.
//! Back to JSON, a plain scalar is null, a boolean or a number when YAML
//! would read it so (whole numbers in their canonical spelling only), and
//! a string otherwise.

use compact_str::CompactString;

use crate::yaml::{Entry, Node, Pos, Value};

/// A scalar node with no position.
pub(crate) fn scalar(text: &str, plain: bool) -> Node {
    Node {
        pos: Pos { line: 1, col: 1 },
        value: Value::Scalar {
            text: CompactString::from(text),
            plain,
        },
    }
}

/// The node for `value`.
pub(crate) fn to_node(value: &serde_json::Value) -> Node {
    use serde_json::Value as J;
    match value {
        J::Null => scalar("null", true),
        J::Bool(b) => scalar(if *b { "true" } else { "false" }, true),
        J::Number(n) => scalar(&n.to_string(), true),
        J::String(s) => scalar(s, false),
        J::Array(items) => Node {
            pos: Pos { line: 1, col: 1 },
            value: Value::List(items.iter().map(to_node).collect()),
        },
        J::Object(map) => Node {
            pos: Pos { line: 1, col: 1 },
            value: Value::Map(
                map.iter()
                    .map(|(k, v)| Entry {
                        key: scalar(k, false),
                        value: to_node(v),
                    })
                    .collect(),
            ),
        },
    }
}

/// The JSON value of `node`.
pub(crate) fn from_node(node: &Node) -> serde_json::Value {
    use serde_json::Value as J;
    match &node.value {
        Value::Scalar { .. } if node.is_null() => J::Null,
        Value::Scalar { text, plain: true } => plain_value(text),
        Value::Scalar { text, .. } => J::String(text.to_string()),
        Value::List(items) => J::Array(items.iter().map(from_node).collect()),
        Value::Map(entries) => J::Object(
            entries
                .iter()
                .map(|e| {
                    let key = e.key.as_scalar().unwrap_or_default().to_string();
                    (key, from_node(&e.value))
                })
                .collect(),
        ),
    }
}

/// Whether `text`, written as a plain scalar, reads as a string.
pub(crate) fn reads_as_string(text: &str) -> bool {
    !matches!(text, "" | "~" | "null" | "Null" | "NULL") && plain_value(text).is_string()
}

/// A plain scalar's JSON value.
fn plain_value(text: &str) -> serde_json::Value {
    use serde_json::Value as J;
    match text {
        "true" | "True" | "TRUE" => return J::Bool(true),
        "false" | "False" | "FALSE" => return J::Bool(false),
        _ => {}
    }
    // Canonical whole numbers only: `010` or `+1` stay strings, so that
    // writing them back gives the decoder the same text.
    if let Ok(n) = text.parse::<i64>() {
        if n.to_string() == text {
            return J::from(n);
        }
    }
    if let Ok(n) = text.parse::<u64>() {
        if n.to_string() == text {
            return J::from(n);
        }
    }
    J::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn yaml_to_json(text: &str) -> serde_json::Value {
        let node = crate::yaml::parse(text).unwrap().unwrap();
        from_node(&node)
    }

    #[test]
    fn yaml_scalars_become_the_json_yaml_would_read() {
        let got = yaml_to_json(
            "a: 8080\nb: \"8080\"\nc: true\nd: 'false'\ne: ~\nf:\ng: 010\nh: 250ms\ni: -3\nj: 1.5\n",
        );
        assert_eq!(
            got,
            json!({
                "a": 8080, "b": "8080", "c": true, "d": "false", "e": null,
                "f": null, "g": "010", "h": "250ms", "i": -3, "j": "1.5"
            })
        );
    }

    #[test]
    fn json_round_trips_through_nodes() {
        let value = json!({
            "s": "true", "n": 42, "b": false, "z": null,
            "l": [1, "two", [3], { "k": "v" }], "m": {}, "e": []
        });
        assert_eq!(from_node(&to_node(&value)), value);
        // Strings are quoted scalars; the rest plain.
        let node = to_node(&json!(["x", 1, true]));
        let Value::List(items) = &node.value else {
            panic!("not a list")
        };
        let plain: Vec<bool> = items.iter().map(Node::is_plain).collect();
        assert_eq!(plain, [false, true, true]);
    }
}
