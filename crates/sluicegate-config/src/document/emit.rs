//! Document nodes to YAML text, in block style, for writing the config
//! back to its file.
//!
//! A scalar is written plain when its text is made of characters that
//! cannot change its reading and, for one that was quoted, when plain it
//! would still read as a string (not a boolean, null or number); otherwise
//! in double quotes with JSON escapes, which YAML reads the same. Only
//! booleans and null depend on being plain, and they are always safe to
//! write plain. Reading the text back gives the same tree, positions
//! aside.

use crate::yaml::{Entry, Node, Value};

/// `root` as a YAML document.
pub(crate) fn yaml(root: &Node) -> String {
    let mut out = String::new();
    match &root.value {
        Value::Map(entries) if !entries.is_empty() => map(&mut out, entries, 0, false),
        Value::List(items) if !items.is_empty() => list(&mut out, items, 0),
        _ => {
            out.push_str(&inline(root));
            out.push('\n');
        }
    }
    out
}

/// Whether `node` is written on its key's (or dash's) line.
fn is_inline(node: &Node) -> bool {
    match &node.value {
        Value::Scalar { .. } => true,
        Value::List(items) => items.is_empty(),
        Value::Map(entries) => entries.is_empty(),
    }
}

/// A scalar, `[]` or `{}`.
fn inline(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, plain } => scalar(text, *plain && !node.is_null(), node.is_null()),
        Value::List(_) => "[]".to_string(),
        Value::Map(_) => "{}".to_string(),
    }
}

fn scalar(text: &str, plain: bool, null: bool) -> String {
    if null {
        return "null".to_string();
    }
    // A quoted scalar is written plain too when plain it reads as the same
    // string (not a boolean, null or number): `name: web`, not `"name": "web"`.
    if is_safe_plain(text) && (plain || super::json::reads_as_string(text)) {
        return text.to_string();
    }
    serde_json::Value::from(text).to_string()
}

/// Text that reads back as the same plain scalar in a block mapping or
/// list: no indicator first, no `: `, ` #`, quotes or flow characters.
fn is_safe_plain(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'.'))
        && text.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'_' | b'-' | b'.' | b'/' | b':' | b'@' | b'+' | b'~' | b'='
                )
        })
        && !text.ends_with(':')
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Entries at `at` spaces; `dashed`: the first goes on a `- ` already written.
fn map(out: &mut String, entries: &[Entry], at: usize, dashed: bool) {
    for (i, e) in entries.iter().enumerate() {
        if !(dashed && i == 0) {
            indent(out, at);
        }
        out.push_str(&inline(&e.key));
        out.push(':');
        if is_inline(&e.value) {
            out.push(' ');
            out.push_str(&inline(&e.value));
            out.push('\n');
            continue;
        }
        out.push('\n');
        match &e.value.value {
            Value::Map(inner) => map(out, inner, at + 2, false),
            Value::List(items) => list(out, items, at + 2),
            Value::Scalar { .. } => {}
        }
    }
}

fn list(out: &mut String, items: &[Node], at: usize) {
    for item in items {
        indent(out, at);
        out.push('-');
        if is_inline(item) {
            out.push(' ');
            out.push_str(&inline(item));
            out.push('\n');
            continue;
        }
        match &item.value {
            Value::Map(entries) => {
                out.push(' ');
                map(out, entries, at + 2, true);
            }
            Value::List(inner) => {
                out.push('\n');
                list(out, inner, at + 2);
            }
            Value::Scalar { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree of `text` with every position the same, to compare shapes.
    fn shape(text: &str) -> Node {
        fn flat(n: &mut Node) {
            n.pos = crate::yaml::Pos { line: 1, col: 1 };
            match &mut n.value {
                Value::Scalar { .. } => {}
                Value::List(items) => items.iter_mut().for_each(flat),
                Value::Map(entries) => entries.iter_mut().for_each(|e| {
                    flat(&mut e.key);
                    flat(&mut e.value);
                }),
            }
        }
        let mut root = crate::yaml::parse(text).unwrap().unwrap();
        flat(&mut root);
        root
    }

    #[test]
    fn written_yaml_reads_back_as_the_same_tree() {
        let text = "listen: [\"127.0.0.1:8080\", { addr: 127.0.0.1:8443, tls: { certificates: [{ cert: a.pem, key: a.key }] } }]\n\
            services:\n  - name: web\n    endpoints: [127.0.0.1:1]\n    hash_key: \"header:x-user-id\"\n\
            routes:\n  - name: r # comment\n    match: { path: /a b, headers: { x-env: \"a: #b\" } }\n    respond: { body: \"line\\nnext\", status: 200 }\n\
            empty: { a: [], b: {}, c: ~, d: '' }\nnested: [[1, [2]], [], -x, '-y', 'true', true, '*a', \"é\"]\n";
        let tree = shape(text);
        let written = yaml(&tree);
        // Plain scalars that are not safe plain come back quoted: the same
        // value (only booleans and null depend on plainness).
        let json = super::super::json::from_node;
        assert_eq!(json(&shape(&written)), json(&tree), "{written}");
        assert_eq!(yaml(&shape(&written)), written);
    }

    #[test]
    fn quoted_booleans_stay_quoted() {
        let tree = shape("a: 'true'\nb: true\nc: 'null'\nd: null\n");
        assert_eq!(yaml(&tree), "a: \"true\"\nb: true\nc: \"null\"\nd: null\n");
        let tree = shape("'a': 'web'\nb: '8080'\nc: 'x y'\n");
        assert_eq!(yaml(&tree), "a: web\nb: \"8080\"\nc: \"x y\"\n");
    }
}
