//! The checker itself, on small crates written to a temp dir: loops found
//! and named, re-exports followed to the defining file, no edge from a
//! parent that only declares its child, and the known list held both ways.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use crate::graph::{Graph, Kind, Loop};
use crate::{compare, Known};

/// A crate's `src/` with `files` (path, text) in it, read as a graph.
fn graph(files: &[(&str, &str)]) -> Graph {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = dir.path().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    Graph::of_crate(dir.path()).unwrap()
}

fn edges(g: &Graph) -> Vec<(&str, &str)> {
    g.files
        .keys()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect()
}

fn members(l: &Loop) -> Vec<&str> {
    l.members.iter().map(String::as_str).collect()
}

#[test]
fn a_file_loop_through_inline_and_macro_paths_is_found() {
    let g = graph(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        (
            "x.rs",
            "pub struct X;\npub fn show() -> String { fields!(at: crate::y::NAME, pi: ::std::f32::consts::PI) }\n",
        ),
        (
            "y.rs",
            "pub const NAME: &str = \"y\";\npub fn make() -> super::x::X { super::x::X }\n",
        ),
    ]);
    assert_eq!(edges(&g), [("x.rs", "y.rs"), ("y.rs", "x.rs")]);
    let loops = g.loops();
    assert_eq!(loops.len(), 2, "one between files, one between folders");
    assert_eq!(
        (loops[0].kind, members(&loops[0])),
        (Kind::Files, vec!["x.rs", "y.rs"])
    );
    assert_eq!(
        loops[0].chain,
        [
            "x.rs -> y.rs (names crate::y::NAME)",
            "y.rs -> x.rs (names super::x::X)"
        ]
    );
    assert_eq!(
        (loops[1].kind, members(&loops[1])),
        (Kind::Folders, vec!["x", "y"])
    );
}

#[test]
fn a_folder_loop_without_a_file_loop_is_found() {
    let g = graph(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a/mod.rs", "mod inner;\npub struct A;\n"),
        (
            "a/inner.rs",
            "pub fn make() -> crate::b::B {\n    crate::b::B\n}\n",
        ),
        (
            "b.rs",
            "use crate::a::A;\npub struct B;\npub fn take(_: A) {}\n",
        ),
    ]);
    assert_eq!(edges(&g), [("a/inner.rs", "b.rs"), ("b.rs", "a/mod.rs")]);
    let loops = g.loops();
    assert_eq!(loops.len(), 1);
    assert_eq!(
        (loops[0].kind, members(&loops[0])),
        (Kind::Folders, vec!["a", "b"])
    );
    assert_eq!(
        loops[0].chain,
        [
            "a -> b (a/inner.rs names crate::b::B of b.rs)",
            "b -> a (b.rs names crate::a::A of a/mod.rs)"
        ]
    );
    assert_eq!(g.folder_table(), "  a -> b (1)\n  b -> a (1)\n");
}

#[test]
fn re_exports_lead_to_the_file_that_defines_the_item() {
    let g = graph(&[
        ("lib.rs", "mod up;\nmod user;\npub use up::Outcome as Ended;\n"),
        (
            "up/mod.rs",
            "mod kinds;\nmod outcome;\npub use kinds::*;\npub use outcome::Outcome;\npub fn helper() {}\n",
        ),
        ("up/kinds.rs", "pub struct Kind;\n"),
        (
            "up/outcome.rs",
            "pub enum Outcome { Done }\npub fn undo() { crate::user::first(); }\n",
        ),
        (
            "user.rs",
            "use crate::up::Outcome;\n\
             pub fn first() -> Outcome { crate::up::helper(); Outcome::Done }\n\
             pub fn second() -> crate::Ended { let _ = crate::up::Kind; crate::Ended::Done }\n",
        ),
    ]);
    assert_eq!(
        edges(&g),
        [
            ("up/outcome.rs", "user.rs"),
            ("user.rs", "up/kinds.rs"),
            ("user.rs", "up/mod.rs"),
            ("user.rs", "up/outcome.rs"),
        ],
        "no edge from a re-export alone (lib.rs, up/mod.rs)"
    );
    let loops = g.loops();
    assert_eq!(members(&loops[0]), ["up/outcome.rs", "user.rs"]);
    assert_eq!(members(&loops[1]), ["up", "user"]);
}

#[test]
fn a_parent_that_only_declares_its_child_is_no_loop() {
    let g = graph(&[
        ("lib.rs", "mod p;\n"),
        (
            "p/mod.rs",
            "mod child;\n#[cfg(test)]\nmod tests;\npub use child::C;\npub struct P;\n\
             pub fn count() -> usize { 1 }\n",
        ),
        (
            "p/child.rs",
            "use super::P;\npub struct C(pub P);\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn t() { let _ = C(super::super::P); }\n}\n",
        ),
        (
            "p/tests.rs",
            "use super::*;\n#[test]\nfn t() { let _ = C(P); }\n\
             #[test]\nfn local() { let count = 2; assert_eq!(count, 2); }\n",
        ),
    ]);
    assert_eq!(
        edges(&g),
        [
            ("p/child.rs", "p/mod.rs"),
            ("p/tests.rs", "p/child.rs"),
            ("p/tests.rs", "p/mod.rs"),
        ]
    );
    assert!(g.loops().is_empty());
}

#[test]
fn glob_imports_both_ways_are_a_loop_and_do_not_hang() {
    let g = graph(&[
        ("lib.rs", "mod schema;\n"),
        ("schema/mod.rs", "mod top;\nuse top::*;\npub struct Doc;\npub fn all() -> Top { Top }\n"),
        ("schema/top.rs", "use super::*;\npub struct Top;\npub fn doc() -> Doc { Doc }\npub fn none() -> Missing { todo!() }\n"),
    ]);
    assert_eq!(
        edges(&g),
        [
            ("schema/mod.rs", "schema/top.rs"),
            ("schema/top.rs", "schema/mod.rs")
        ]
    );
    assert_eq!(members(&g.loops()[0]), ["schema/mod.rs", "schema/top.rs"]);
}

#[test]
fn the_known_list_must_match_what_is_found() {
    let found = |files: &[&str]| {
        let l = Loop {
            kind: Kind::Files,
            members: files.iter().map(|f| f.to_string()).collect::<BTreeSet<_>>(),
            chain: Vec::new(),
        };
        BTreeMap::from([("c".to_string(), vec![l])])
    };
    let known = |krate, members| Known {
        krate,
        kind: Kind::Files,
        members,
    };
    let ab = found(&["a.rs", "b.rs"]);
    assert!(compare(&ab, &[known("c", &["a.rs", "b.rs"])]).is_empty());
    let new = compare(&ab, &[]);
    assert_eq!(new.len(), 1);
    assert!(
        new[0].starts_with("c: a loop between files: {\"a.rs\", \"b.rs\"}"),
        "{new:?}"
    );
    let other_crate = compare(&ab, &[known("d", &["a.rs", "b.rs"])]);
    assert_eq!(other_crate.len(), 2, "{other_crate:?}");
    let shrunk = compare(&ab, &[known("c", &["a.rs", "b.rs", "x.rs"])]);
    assert_eq!(shrunk.len(), 2, "a new loop, a listed one gone: {shrunk:?}");
    assert!(
        shrunk[1].contains("no longer exists as listed"),
        "{shrunk:?}"
    );
    let folders = Known {
        kind: Kind::Folders,
        ..known("c", &["a.rs", "b.rs"])
    };
    assert_eq!(compare(&ab, &[folders]).len(), 2, "kinds kept apart");
}
