//! Layers checked, not promised: no crate of the workspace (each folder
//! under `crates/` with a `src/`) has an import loop between its files or
//! between its top-level folders, but for the loops listed in
//! [`KNOWN_LOOPS`]. See `graph.rs` for what counts as an edge.

mod graph;
mod selftest;
mod tree;

use std::collections::BTreeMap;
use std::path::Path;

use graph::{Graph, Kind, Loop};

/// A loop that exists today, as the exact set of files or folders of one
/// strongly connected component, paths under the crate's `src/`.
struct Known {
    krate: &'static str,
    kind: Kind,
    members: &'static [&'static str],
}

/// The loops known today: none. A new loop fails the test, and so would a
/// listed one that no longer exists exactly as listed.
const KNOWN_LOOPS: &[Known] = &[];

#[test]
fn no_import_loops_but_the_known_ones() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the testkit sits in crates/");
    let mut dirs: Vec<_> = std::fs::read_dir(crates)
        .expect("crates/ lists")
        .map(|e| e.expect("crates/ lists").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    // One thread a crate: parsing is most of the time.
    let graphs: Vec<_> = std::thread::scope(|s| {
        let reads: Vec<_> = dirs
            .iter()
            .map(|dir| s.spawn(|| Graph::of_crate(&dir.join("src"))))
            .collect();
        reads.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut found = BTreeMap::new();
    for (dir, graph) in dirs.iter().zip(graphs) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let graph = graph.unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}, folder -> folders it uses (file edges):");
        print!("{}", graph.folder_table());
        found.insert(name, graph.loops());
    }
    assert!(
        found.contains_key("sluicegate-testkit"),
        "the crates were not found beside the testkit: {found:?}",
        found = found.keys()
    );
    let problems = compare(&found, KNOWN_LOOPS);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// What differs between the loops `found` (by crate) and those `known`:
/// each loop not listed, and each listed one not found exactly.
fn compare(found: &BTreeMap<String, Vec<Loop>>, known: &[Known]) -> Vec<String> {
    let listed = |krate: &str, l: &Loop| {
        known
            .iter()
            .any(|k| k.krate == krate && k.kind == l.kind && l.members.iter().eq(k.members))
    };
    let mut problems = Vec::new();
    for (krate, loops) in found {
        for l in loops.iter().filter(|l| !listed(krate, l)) {
            problems.push(format!(
                "{krate}: a loop between {}: {:?}, closed by\n  {}\n\
                 Break it; KNOWN_LOOPS (crates/sluicegate-testkit/tests/layers/main.rs) may only shrink.",
                what(l.kind),
                l.members,
                l.chain.join("\n  ")
            ));
        }
    }
    for k in known {
        let members = |l: &&Loop| l.kind == k.kind && l.members.iter().eq(k.members);
        let loops = found.get(k.krate).map(Vec::as_slice).unwrap_or_default();
        if !loops.iter().any(|l| members(&l)) {
            let now: Vec<_> = loops
                .iter()
                .filter(|l| l.kind == k.kind)
                .map(|l| &l.members)
                .collect();
            problems.push(format!(
                "{}: the known loop between {} {:?} no longer exists as listed \
                 (loops between {} there now: {now:?}). Shrink its entry in KNOWN_LOOPS.",
                k.krate,
                what(k.kind),
                k.members,
                what(k.kind),
            ));
        }
    }
    problems
}

fn what(kind: Kind) -> &'static str {
    match kind {
        Kind::Files => "files",
        Kind::Folders => "folders",
    }
}
