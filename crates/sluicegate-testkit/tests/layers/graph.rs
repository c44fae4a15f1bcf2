//! The import graphs of one crate and their loops. A file edge A -> B
//! means A names an item B defines: through a `use` of its own, or a path
//! written in code or in a macro's arguments (`crate::a::b::C::new()`),
//! with `use` re-exports followed to the file that defines the item. A
//! `mod x;` line is no edge, nor a `pub use` alone: both only give a name.
//! A folder edge joins the top-level modules of A and B when they differ.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::Path;

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::Visit;

use crate::tree::{ident, Tree};

/// What a path names: a module (no edge by itself), or an item.
#[derive(Clone, Copy)]
enum Target {
    Module(usize),
    Item(usize),
}

/// The two graphs of a crate, nodes named by their paths under `src/`
/// (files: `worker/pool.rs`; folders: `worker`, and `lib.rs` for the
/// root file itself).
pub struct Graph {
    /// Each file edge with the first name seen behind it.
    pub files: BTreeMap<(String, String), String>,
    /// Each folder edge with the file edges behind it.
    pub folders: BTreeMap<(String, String), Vec<(String, String)>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Files,
    Folders,
}

/// One strongly connected component of a graph, and one chain of edges
/// that closes it, an edge a line.
pub struct Loop {
    pub kind: Kind,
    pub members: BTreeSet<String>,
    pub chain: Vec<String>,
}

impl Graph {
    /// Reads the crate whose sources are in `src` and builds its graphs.
    pub fn of_crate(src: &Path) -> Result<Graph, String> {
        let tree = Tree::read(src)?;
        let resolver = Resolver { tree: &tree };
        let mut files = BTreeMap::new();
        let mut add = |from: usize, item: usize, text: String| {
            let to = tree.modules[tree.items[item].module].file;
            if to != from {
                let key = (tree.files[from].rel.clone(), tree.files[to].rel.clone());
                files.entry(key).or_insert(text);
            }
        };
        for (m, module) in tree.modules.iter().enumerate() {
            for import in module.imports.iter().filter(|i| !i.public) {
                if let Some(Target::Item(i)) = resolver.path(m, &import.path, &mut Vec::new()) {
                    add(module.file, i, import.path.join("::"));
                }
            }
            if module.whole_file {
                let ast = &tree.files[module.file].ast;
                let mut locals = Locals(HashSet::new());
                locals.visit_file(ast);
                let mut names = Names {
                    resolver: &resolver,
                    module: m,
                    locals: locals.0,
                    found: Vec::new(),
                };
                names.visit_file(ast);
                for (item, text) in names.found {
                    add(module.file, item, text);
                }
            }
        }
        let mut folders: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for (a, b) in files.keys() {
            let (fa, fb) = (top(a), top(b));
            if fa != fb {
                folders
                    .entry((fa, fb))
                    .or_default()
                    .push((a.clone(), b.clone()));
            }
        }
        Ok(Graph { files, folders })
    }

    /// Every loop of both graphs, files first.
    pub fn loops(&self) -> Vec<Loop> {
        let mut out = Vec::new();
        let files: BTreeSet<_> = self.files.keys().cloned().collect();
        for members in components(&files) {
            let chain = cycle(&files, &members)
                .windows(2)
                .map(|w| {
                    let text = &self.files[&(w[0].clone(), w[1].clone())];
                    format!("{} -> {} (names {text})", w[0], w[1])
                })
                .collect();
            out.push(Loop {
                kind: Kind::Files,
                members,
                chain,
            });
        }
        let folders: BTreeSet<_> = self.folders.keys().cloned().collect();
        for members in components(&folders) {
            let chain = cycle(&folders, &members)
                .windows(2)
                .map(|w| {
                    let (a, b) = &self.folders[&(w[0].clone(), w[1].clone())][0];
                    let text = &self.files[&(a.clone(), b.clone())];
                    format!("{} -> {} ({a} names {text} of {b})", w[0], w[1])
                })
                .collect();
            out.push(Loop {
                kind: Kind::Folders,
                members,
                chain,
            });
        }
        out
    }

    /// The folder graph as text: each folder, then the folders it uses
    /// with the count of file edges behind each.
    pub fn folder_table(&self) -> String {
        let mut by_from: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((a, b), behind) in &self.folders {
            by_from
                .entry(a)
                .or_default()
                .push(format!("{b} ({})", behind.len()));
        }
        by_from
            .iter()
            .map(|(a, uses)| format!("  {a} -> {}\n", uses.join(", ")))
            .collect()
    }
}

/// The top-level module of a file: its first folder, or its name without
/// `.rs`; a crate root (`lib.rs`, `main.rs`) stands for itself.
fn top(rel: &str) -> String {
    match rel.split_once('/') {
        Some((first, _)) => first.to_string(),
        None if rel == "lib.rs" || rel == "main.rs" => rel.to_string(),
        None => rel.trim_end_matches(".rs").to_string(),
    }
}

/// Name resolution over a [`Tree`], as rustc does it in the cases that
/// matter here: items and child modules first, then a module's `use`
/// names, then its glob imports.
struct Resolver<'t> {
    tree: &'t Tree,
}

impl Resolver<'_> {
    /// What `segs`, written in module `m`, names. `seen` breaks loops of
    /// imports (`use a::*` in b and `use b::*` in a).
    fn path(&self, m: usize, segs: &[String], seen: &mut Vec<(usize, String)>) -> Option<Target> {
        let mut cur = m;
        for (i, seg) in segs.iter().enumerate() {
            match seg.as_str() {
                "crate" if i == 0 => cur = self.tree.modules[m].root,
                "self" if i == 0 => {}
                "super" => cur = self.tree.modules[cur].parent?,
                "Self" | "crate" | "self" => return None,
                name => match self.member(cur, name, i + 1 < segs.len(), seen)? {
                    Target::Module(c) => cur = c,
                    item => return Some(item),
                },
            }
        }
        (!segs.is_empty()).then_some(Target::Module(cur))
    }

    /// What `name` is in module `m`; `ty` when more segments follow, so a
    /// module (or type) is looked for before a function of the same name.
    fn member(
        &self,
        m: usize,
        name: &str,
        ty: bool,
        seen: &mut Vec<(usize, String)>,
    ) -> Option<Target> {
        let module = &self.tree.modules[m];
        let child = module.children.get(name).map(|&c| Target::Module(c));
        let item = module.items.get(name).map(|&i| Target::Item(i));
        let here = if ty { child.or(item) } else { item.or(child) };
        if here.is_some() {
            return here;
        }
        if seen.iter().any(|(sm, sn)| *sm == m && sn == name) {
            return None;
        }
        seen.push((m, name.to_string()));
        let imported = module
            .imports
            .iter()
            .filter(|i| i.alias.as_deref() == Some(name))
            .find_map(|i| self.path(m, &i.path, seen));
        let found = imported.or_else(|| {
            module
                .imports
                .iter()
                .filter(|i| i.alias.is_none())
                .find_map(|g| match self.path(m, &g.path, seen)? {
                    Target::Module(g) => self.member(g, name, ty, seen),
                    Target::Item(e) => {
                        let variants = &self.tree.items[e].variants;
                        variants
                            .iter()
                            .any(|v| v == name)
                            .then_some(Target::Item(e))
                    }
                })
        });
        seen.pop();
        found
    }
}

/// The lower-case names a file binds in patterns (`let`, arguments,
/// closures, `match` arms): a one-segment path with one of them is taken
/// as that local, not as a name a glob import might bring in.
struct Locals(HashSet<String>);

impl<'ast> Visit<'ast> for Locals {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        let name = ident(&p.ident);
        if name.starts_with(|c: char| c.is_lowercase() || c == '_') {
            self.0.insert(name);
        }
        syn::visit::visit_pat_ident(self, p);
    }
}

/// Collects the items a file's code names, module by module (an inline
/// module has names of its own). `use` declarations are counted apart.
struct Names<'r> {
    resolver: &'r Resolver<'r>,
    module: usize,
    locals: HashSet<String>,
    found: Vec<(usize, String)>,
}

impl Names<'_> {
    fn name(&mut self, segs: Vec<String>) {
        if segs.len() == 1 && self.locals.contains(&segs[0]) {
            return;
        }
        if let Some(Target::Item(i)) = self.resolver.path(self.module, &segs, &mut Vec::new()) {
            self.found.push((i, segs.join("::")));
        }
    }

    /// The paths in a macro's tokens: `a::b::c` runs not after a `.` (a
    /// field or method), `$` (`$crate`) or `::` (a path from the root).
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let punct = |i: usize, c: char| matches!(tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
        let joint = |i: usize| matches!(tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint);
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(first) => {
                    let after = i > 0
                        && (punct(i - 1, '.') || punct(i - 1, '$') || (i > 1 && joint(i - 2)));
                    let mut segs = vec![ident(first)];
                    while joint(i + 1) && punct(i + 2, ':') {
                        let Some(TokenTree::Ident(next)) = tokens.get(i + 3) else {
                            break;
                        };
                        segs.push(ident(next));
                        i += 3;
                    }
                    if !after {
                        self.name(segs);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            let outer = self.module;
            self.module = self.resolver.tree.modules[outer].children[&ident(&m.ident)];
            for item in items {
                self.visit_item(item);
            }
            self.module = outer;
        }
    }

    fn visit_item_use(&mut self, _: &'ast syn::ItemUse) {}

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            self.name(p.segments.iter().map(|s| ident(&s.ident)).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

/// The strongly connected components of more than one node (Tarjan's).
fn components(edges: &BTreeSet<(String, String)>) -> Vec<BTreeSet<String>> {
    struct Walk<'e> {
        next: BTreeMap<&'e str, Vec<&'e str>>,
        index: BTreeMap<&'e str, (usize, usize)>,
        stack: Vec<&'e str>,
        on_stack: BTreeSet<&'e str>,
        out: Vec<BTreeSet<String>>,
    }
    impl<'e> Walk<'e> {
        fn visit(&mut self, v: &'e str) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut scc = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.out.push(scc);
                }
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for (a, b) in edges {
        walk.next.entry(a).or_default().push(b);
    }
    let nodes: Vec<&str> = walk.next.keys().copied().collect();
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out.sort();
    walk.out
}

/// A shortest cycle through the first of `members` inside them, as the
/// nodes in order, the first again at the end.
fn cycle(edges: &BTreeSet<(String, String)>, members: &BTreeSet<String>) -> Vec<String> {
    let start = members.first().expect("a component has members");
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(v) = queue.pop_front() {
        let next = edges
            .range((v.to_string(), String::new())..)
            .take_while(|(a, _)| a == v)
            .map(|(_, b)| b.as_str())
            .filter(|b| members.contains(*b));
        for w in next {
            if w == start {
                let mut path = vec![start.clone(), v.to_string()];
                let mut at = v;
                while at != start {
                    at = came_from[at];
                    path.push(at.to_string());
                }
                path.reverse();
                return path;
            }
            if !came_from.contains_key(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("every member of a component lies on a cycle through the others")
}
