//! A route's `aggregate` list: the parts (calls to services) whose JSON
//! answers make the route's one answer, and the references between them
//! (`${param}`, `${part.field}`), checked for cycles.

use std::collections::HashMap;

use crate::model::{AggregatePart, PathTemplate};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const PART_KEYS: &[&str] = &["name", "service", "path", "optional", "timeout"];

/// What a `${...}` in a part's path names: a parameter of the route's
/// template, or a value in another part's answer (its name, then the
/// JSON path's steps).
#[derive(Debug, PartialEq, Eq)]
pub enum Reference<'t> {
    Param(&'t str),
    Field(&'t str, Vec<&'t str>),
}

/// The reference written inside `${...}`: a dotted text is a part's name
/// and a JSON path into its answer, else a template parameter. `None`
/// when a step is empty.
pub fn reference(inner: &str) -> Option<Reference<'_>> {
    let mut steps = inner.split('.');
    let first = steps.next()?;
    let rest: Vec<&str> = steps.collect();
    if first.is_empty() || rest.iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(if rest.is_empty() {
        Reference::Param(first)
    } else {
        Reference::Field(first, rest)
    })
}

/// Whether `name` fits `[A-Za-z_][A-Za-z0-9_]*`.
fn is_part_name(name: &str) -> bool {
    let mut b = name.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Decodes `aggregate: [{ name, service, path, optional, timeout }]`: at
/// least one part, names unique, services defined, paths that start with
/// `/` whose references name a parameter of `template` or another part,
/// and no part that waits for itself through others.
pub(crate) fn aggregate(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    template: Option<&PathTemplate>,
) -> Option<Vec<AggregatePart>> {
    const EXPECTED: &str = "a list of { name, service, path, optional, timeout }";
    let items = reader::list(cx, node, path, EXPECTED)?;
    if items.is_empty() {
        cx.at(node.pos, path, "needs at least one part");
        return None;
    }
    let mut ok = true;
    let mut names: HashMap<&str, Pos> = HashMap::with_capacity(items.len());
    // Each part's name first: a path may name a later part.
    let mut parsed = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(f) = fields(cx, item, p, "aggregate part", PART_KEYS) else {
            ok = false;
            continue;
        };
        let name = f.require(cx, p, "name").and_then(|n| {
            let np = p.key("name");
            let name = reader::string(cx, n, np)?;
            if !is_part_name(name) {
                cx.at(
                    n.pos,
                    np,
                    format_args!(
                        "bad part name {} (letters, digits and _, not first a digit)",
                        quote(name)
                    ),
                );
                return None;
            }
            let twice = |first| format!("part {} is named twice (first at {first})", quote(name));
            reader::unique(cx, &mut names, name, n.pos, (n.pos, np), twice).then_some(name)
        });
        let service = f.require(cx, p, "service").and_then(|n| {
            let sp = p.key("service");
            let name = reader::string(cx, n, sp)?;
            if !services.contains_key(name) {
                cx.at(n.pos, sp, format_args!("unknown service {}", quote(name)));
                return None;
            }
            Some(name)
        });
        let optional = match f.get("optional") {
            None => Some(false),
            Some(n) => reader::boolean(cx, n, p.key("optional")),
        };
        let timeout = match f.get("timeout") {
            None => Some(None),
            Some(n) => match reader::duration(cx, n, p.key("timeout")) {
                Some(d) if d.is_zero() => {
                    cx.at(n.pos, p.key("timeout"), "must be above 0");
                    None
                }
                d => d.map(Some),
            },
        };
        let text = f.require(cx, p, "path");
        match (name, service, optional, timeout, text) {
            (Some(name), Some(service), Some(optional), Some(timeout), Some(text)) => {
                parsed.push((i, name, service, optional, timeout, text))
            }
            _ => ok = false,
        }
    }
    if !ok {
        return None;
    }
    // The paths, with every reference checked; each part's dependencies.
    let mut out = Vec::with_capacity(parsed.len());
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(parsed.len());
    for &(i, name, service, optional, timeout, n) in &parsed {
        let p = path.index(i);
        let pp = p.key("path");
        let Some(text) = part_path(cx, n, pp, name, &parsed, template, &mut deps) else {
            ok = false;
            continue;
        };
        out.push(AggregatePart {
            name: name.to_string(),
            service: service.to_string(),
            path: text.to_string(),
            optional,
            timeout,
        });
    }
    if !ok {
        return None;
    }
    if let Some(cycle) = find_cycle(&deps) {
        let (i, _, _, _, _, n) = parsed[cycle[0]];
        let names: Vec<&str> = cycle.iter().map(|&c| parsed[c].1).collect();
        let p = path.index(i);
        cx.at(
            n.pos,
            p.key("path"),
            format_args!(
                "parts wait for each other in a cycle: {} -> {}",
                names.join(" -> "),
                names[0]
            ),
        );
        return None;
    }
    Some(out)
}

type Parsed<'n> = (
    usize,
    &'n str,
    &'n str,
    bool,
    Option<std::time::Duration>,
    &'n Node,
);

/// A part's `path`: `/` first, no spaces, controls or `#`, each
/// reference a parameter of `template` or another part's field; the
/// parts it refers to pushed onto `deps`.
fn part_path<'n>(
    cx: &mut Cx,
    n: &'n Node,
    pp: Path<'_>,
    own: &str,
    parts: &[Parsed<'_>],
    template: Option<&PathTemplate>,
    deps: &mut Vec<Vec<usize>>,
) -> Option<&'n str> {
    let text = reader::string(cx, n, pp)?;
    if !text.starts_with('/') {
        cx.at(n.pos, pp, "must start with /");
        return None;
    }
    if text.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#') {
        cx.at(
            n.pos,
            pp,
            "a part's path cannot contain spaces, control characters or #",
        );
        return None;
    }
    let mut mine = Vec::new();
    for (_, inner) in super::template::references(text) {
        match reference(inner) {
            None => {
                cx.at(
                    n.pos,
                    pp,
                    format_args!("${{{inner}}}: a reference is NAME or PART.FIELD[.FIELD...]"),
                );
                return None;
            }
            Some(Reference::Param(param)) => {
                if template.is_none_or(|t| t.param_index(param).is_none()) {
                    let why = match template {
                        Some(t) => format!("a parameter of match.path {}", quote(&t.text)),
                        None => "a parameter of match.path (which is no template)".to_string(),
                    };
                    cx.at(
                        n.pos,
                        pp,
                        format_args!(
                            "${{{param}}} is not {why}; another part's value is ${{PART.FIELD}}"
                        ),
                    );
                    return None;
                }
            }
            Some(Reference::Field(part, _)) => match parts.iter().position(|p| p.1 == part) {
                Some(_) if part == own => {
                    cx.at(
                        n.pos,
                        pp,
                        format_args!("${{{inner}}}: a part cannot wait for its own answer"),
                    );
                    return None;
                }
                Some(j) => {
                    if !mine.contains(&j) {
                        mine.push(j);
                    }
                }
                None => {
                    cx.at(
                        n.pos,
                        pp,
                        format_args!("${{{inner}}}: no part is named {}", quote(part)),
                    );
                    return None;
                }
            },
        }
    }
    deps.push(mine);
    Some(text)
}

/// A cycle in the graph of dependencies (`deps[i]`: the parts part `i`
/// waits for), as the parts in it in order; `None` when there is none.
fn find_cycle(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    // 0: not seen, 1: on the current path, 2: done.
    fn visit(i: usize, deps: &[Vec<usize>], state: &mut [u8], stack: &mut Vec<usize>) -> bool {
        state[i] = 1;
        stack.push(i);
        for &j in &deps[i] {
            let seen = state[j];
            match seen {
                1 => {
                    let from = stack.iter().position(|&s| s == j).unwrap_or(0);
                    stack.drain(..from);
                    return true;
                }
                0 if visit(j, deps, state, stack) => return true,
                _ => {}
            }
        }
        stack.pop();
        state[i] = 2;
        false
    }
    let mut state = vec![0u8; deps.len()];
    for i in 0..deps.len() {
        let mut stack = Vec::new();
        if state[i] == 0 && visit(i, deps, &mut state, &mut stack) {
            return Some(stack);
        }
    }
    None
}
