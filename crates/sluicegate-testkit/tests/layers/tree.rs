//! A crate's module tree as its sources declare it: the file each module
//! lives in, the names each module defines and the names its `use`
//! declarations bring in, kept as written and resolved later (`graph.rs`).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One parsed source file; `rel` is its path under `src/`, with `/`.
pub struct SourceFile {
    pub rel: String,
    pub ast: syn::File,
}

/// A name a module defines other than a module: a function, type, trait,
/// constant, static or macro. An enum keeps its variants' names, for
/// `use Enum::*`.
pub struct Item {
    pub module: usize,
    pub variants: Vec<String>,
}

/// A `use` leaf: `alias` is the name it binds (`None` for a glob), `path`
/// its segments as written. `public` is any `pub` form: a re-export names
/// nothing for the file it is written in.
pub struct Import {
    pub alias: Option<String>,
    pub path: Vec<String>,
    pub public: bool,
}

/// A module: a file's, or one written inline (`mod tests { .. }`) in the
/// file of its parent.
pub struct Module {
    pub file: usize,
    pub parent: Option<usize>,
    pub root: usize,
    /// Where its `mod x;` declarations look for `x.rs` and `x/mod.rs`.
    dir: PathBuf,
    /// Whether it is the module of a whole file (not an inline one).
    pub whole_file: bool,
    pub children: HashMap<String, usize>,
    pub items: HashMap<String, usize>,
    pub imports: Vec<Import>,
}

/// Every module reachable from a crate's roots (`lib.rs`, `main.rs`,
/// `bin/*.rs`, `bin/*/main.rs`), each root a tree of its own.
pub struct Tree {
    pub files: Vec<SourceFile>,
    pub modules: Vec<Module>,
    pub items: Vec<Item>,
    src: PathBuf,
    by_path: HashMap<PathBuf, usize>,
}

impl Tree {
    /// Reads every module of the crate whose sources are in `src`.
    pub fn read(src: &Path) -> Result<Tree, String> {
        let mut tree = Tree {
            files: Vec::new(),
            modules: Vec::new(),
            items: Vec::new(),
            src: src.to_path_buf(),
            by_path: HashMap::new(),
        };
        for root in roots(src) {
            let file = tree.load(&root)?;
            let m = tree.modules.len();
            tree.add_module(
                file,
                None,
                m,
                root.parent().unwrap_or(src).to_path_buf(),
                true,
            );
            tree.fill_file(m)?;
        }
        Ok(tree)
    }

    fn load(&mut self, path: &Path) -> Result<usize, String> {
        if let Some(&f) = self.by_path.get(path) {
            return Ok(f);
        }
        let text =
            fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let ast = syn::parse_file(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
        let rel = path
            .strip_prefix(&self.src)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        self.files.push(SourceFile { rel, ast });
        self.by_path
            .insert(path.to_path_buf(), self.files.len() - 1);
        Ok(self.files.len() - 1)
    }

    fn add_module(
        &mut self,
        file: usize,
        parent: Option<usize>,
        root: usize,
        dir: PathBuf,
        whole_file: bool,
    ) -> usize {
        self.modules.push(Module {
            file,
            parent,
            root,
            dir,
            whole_file,
            children: HashMap::new(),
            items: HashMap::new(),
            imports: Vec::new(),
        });
        self.modules.len() - 1
    }

    /// Fills the module of a whole file from that file's items.
    fn fill_file(&mut self, m: usize) -> Result<(), String> {
        let file = self.modules[m].file;
        let empty = syn::File {
            shebang: None,
            attrs: Vec::new(),
            items: Vec::new(),
        };
        let ast = std::mem::replace(&mut self.files[file].ast, empty);
        let filled = self.fill(m, &ast.items);
        self.files[file].ast = ast;
        filled
    }

    /// Records what module `m` defines and imports, and reads its child
    /// modules, inline or from their files.
    fn fill(&mut self, m: usize, items: &[syn::Item]) -> Result<(), String> {
        for item in items {
            if let syn::Item::Mod(decl) = item {
                let name = ident(&decl.ident);
                let child = match &decl.content {
                    Some((_, inner)) => {
                        let dir = self.modules[m].dir.join(&name);
                        let (file, root) = (self.modules[m].file, self.modules[m].root);
                        let child = self.add_module(file, Some(m), root, dir, false);
                        self.fill(child, inner)?;
                        child
                    }
                    None => self.declared(m, &name, decl)?,
                };
                self.modules[m].children.insert(name, child);
                continue;
            }
            if let Some((name, variants)) = defined(item) {
                self.items.push(Item {
                    module: m,
                    variants,
                });
                self.modules[m].items.insert(name, self.items.len() - 1);
            }
            let mut uses = Uses(Vec::new());
            uses.visit_item(item);
            self.modules[m].imports.extend(uses.0);
        }
        Ok(())
    }

    /// Reads the file of `mod name;` declared in `m`.
    fn declared(&mut self, m: usize, name: &str, decl: &syn::ItemMod) -> Result<usize, String> {
        let parent = &self.modules[m];
        let path = match path_attr(decl) {
            Some(p) if parent.whole_file => {
                let here = self.src.join(&self.files[parent.file].rel);
                here.parent().unwrap_or(&self.src).join(p)
            }
            Some(p) => parent.dir.join(p),
            None => {
                let flat = parent.dir.join(format!("{name}.rs"));
                if flat.is_file() {
                    flat
                } else {
                    parent.dir.join(name).join("mod.rs")
                }
            }
        };
        if !path.is_file() {
            let from = &self.files[parent.file].rel;
            return Err(format!(
                "{from}: no file for `mod {name};` at {}",
                path.display()
            ));
        }
        // A file named by #[path] or a mod.rs keeps its children beside it.
        let dir = if path_attr(decl).is_some() || path.ends_with("mod.rs") {
            path.parent().unwrap_or(&self.src).to_path_buf()
        } else {
            path.with_extension("")
        };
        let root = parent.root;
        let file = self.load(&path)?;
        let child = self.add_module(file, Some(m), root, dir, true);
        self.fill_file(child)?;
        Ok(child)
    }
}

/// The crate roots under `src`, in a fixed order.
fn roots(src: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|n| src.join(n))
        .filter(|p| p.is_file())
        .collect();
    let mut bins: Vec<PathBuf> = fs::read_dir(src.join("bin"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            if p.extension().is_some_and(|e| e == "rs") {
                Some(p)
            } else {
                Some(p.join("main.rs")).filter(|m| m.is_file())
            }
        })
        .collect();
    bins.sort();
    out.extend(bins);
    out
}

fn path_attr(decl: &syn::ItemMod) -> Option<String> {
    decl.attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The name an item defines (not a module's: those are children), and an
/// enum's variants.
fn defined(item: &syn::Item) -> Option<(String, Vec<String>)> {
    let name = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => {
            let variants = i.variants.iter().map(|v| ident(&v.ident)).collect();
            return Some((ident(&i.ident), variants));
        }
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some((ident(name), Vec::new()))
}

/// An identifier as a name, without the `r#` of a raw one.
pub fn ident(i: &syn::Ident) -> String {
    let s = i.to_string();
    match s.strip_prefix("r#") {
        Some(raw) => raw.to_string(),
        None => s,
    }
}

/// Collects the `use` declarations of one item of a module, at any depth
/// (a `use` in a function body binds for that body; taking it as the
/// module's is close enough to see what the file names), but not those of
/// an inline module inside it, which has a scope of its own.
struct Uses(Vec<Import>);

impl<'ast> Visit<'ast> for Uses {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            let public = !matches!(u.vis, syn::Visibility::Inherited);
            flatten(&u.tree, &mut Vec::new(), public, &mut self.0);
        }
    }
}

fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, public: bool, out: &mut Vec<Import>) {
    let mut leaf = |alias: Option<String>, name: Option<String>, prefix: &[String]| {
        let mut path = prefix.to_vec();
        path.extend(name);
        out.push(Import {
            alias,
            path,
            public,
        });
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(ident(&p.ident));
            flatten(&p.tree, prefix, public, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => {
            leaf(prefix.last().cloned(), None, prefix);
        }
        syn::UseTree::Name(n) => leaf(Some(ident(&n.ident)), Some(ident(&n.ident)), prefix),
        syn::UseTree::Rename(r) if r.ident == "self" => leaf(Some(ident(&r.rename)), None, prefix),
        syn::UseTree::Rename(r) => leaf(Some(ident(&r.rename)), Some(ident(&r.ident)), prefix),
        syn::UseTree::Glob(_) => leaf(None, None, prefix),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, public, out);
            }
        }
    }
}
