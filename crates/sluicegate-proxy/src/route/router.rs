//! Route matching: picks the most specific route for a request.
//!
//! Exact paths come from a hash map, then path templates from a segment
//! trie ([`crate::route::template`]), then prefixes are looked up once per
//! `/` boundary of the path (longest first), regexes are tried in file
//! order, and routes without a path condition come last. Within one path key,
//! routes are tried in file order and the first whose host, method,
//! header, query and cookie conditions hold wins. Cost is O(path
//! segments), whatever the number of routes, except for regex routes.
//! Header regexes are compiled here, once per snapshot; the conditions
//! are checked in place, without allocating.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use regex::Regex;
use sluicegate_config::{HostMatch, Match, PathMatch, ValueMatch, ValueRegex};

use crate::route::template::{Params, Templates};
use crate::route::values;

/// What a header's value must be.
#[derive(Debug)]
enum Value {
    Exact(Box<[u8]>),
    /// The whole value must match; no lock, no allocation.
    Regex(ValueRegex),
}

impl Value {
    fn holds(&self, v: &[u8]) -> bool {
        match self {
            Value::Exact(e) => v == &**e,
            Value::Regex(re) => re.is_match(v),
        }
    }
}

/// A name and the value it must have.
type Pair = (Box<[u8]>, Box<[u8]>);

/// Conditions besides the path.
#[derive(Debug)]
struct Cond {
    host: Option<HostMatch>,
    methods: Vec<Box<[u8]>>,
    /// Header names in lower case.
    headers: Vec<(Box<[u8]>, Value)>,
    query: Vec<Pair>,
    cookies: Vec<Pair>,
}

impl Cond {
    fn holds(&self, req: &RouteRequest<'_>) -> bool {
        if let Some(h) = &self.host {
            let Some(host) = req.host else { return false };
            let ok = match h {
                HostMatch::Exact(e) => host.eq_ignore_ascii_case(e.as_bytes()),
                HostMatch::Suffix(s) => {
                    host.len() > s.len()
                        && host[host.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
                }
            };
            if !ok {
                return false;
            }
        }
        if !self.methods.is_empty() && !self.methods.iter().any(|m| **m == *req.method) {
            return false;
        }
        self.headers
            .iter()
            .all(|(name, value)| (req.header)(name).is_some_and(|v| value.holds(v)))
            && self
                .query
                .iter()
                .all(|(name, want)| values::query_param_is(req.query, name, want))
            && self.cookies.iter().all(|(name, want)| {
                // The first Cookie field that holds the cookie decides.
                let mut holds = false;
                (req.header_values)(b"cookie", &mut |field| {
                    values::cookie(field, name)
                        .map(|v| holds = v == &**want)
                        .is_some()
                });
                holds
            })
    }
}

/// What the router needs to know of a request.
pub struct RouteRequest<'a> {
    /// Host without port, as sent.
    pub host: Option<&'a [u8]>,
    pub method: &'a [u8],
    /// Path without query.
    pub path: &'a [u8],
    /// The query without its `?`, as received.
    pub query: &'a [u8],
    /// Looks up a request header by lower-case name.
    pub header: &'a dyn Fn(&[u8]) -> Option<&'a [u8]>,
    /// Calls the visitor with each field's value of a request header
    /// (lower-case name), in order, until it returns `true`.
    pub header_values: &'a dyn Fn(&[u8], Visit<'_>),
}

/// A visitor of header values: `true` stops the walk.
pub type Visit<'v> = &'v mut dyn FnMut(&[u8]) -> bool;

/// A matched route: its index in the snapshot's route list and, for a
/// prefix match, the prefix length (for `strip_prefix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteMatch {
    pub index: usize,
    pub prefix_len: usize,
}

/// A path key's bytes, inline when short (most paths are), so a lookup's
/// comparison reads the hash bucket only: with ten thousand routes hit at
/// random, every pointer followed is another cache miss.
#[derive(Debug)]
enum KeyBytes {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

const INLINE: usize = 22;

impl KeyBytes {
    fn new(b: &[u8]) -> KeyBytes {
        if b.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..b.len()].copy_from_slice(b);
            KeyBytes::Inline(b.len() as u8, a)
        } else {
            KeyBytes::Heap(b.into())
        }
    }

    fn get(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(n, a) => &a[..*n as usize],
            KeyBytes::Heap(b) => b,
        }
    }
}

/// Marks a route that has no condition besides its path.
const PLAIN: u32 = 1 << 31;
const NO_MORE: u32 = u32::MAX;

/// The routes of one path key, in file order: the first in the entry
/// itself (with [`PLAIN`] set when it has no other condition, so the
/// common case reads nothing else), the rest in a list of the router's.
#[derive(Debug)]
struct Entry {
    key: KeyBytes,
    first: u32,
    more: u32,
}

/// Path keys to routes. Keys come from the config, so a fast non-keyed
/// hash is safe here: a request can only probe the table, not fill it
/// with collisions.
#[derive(Debug, Default)]
struct PathTable {
    table: HashTable<Entry>,
}

impl PathTable {
    fn hash(key: &[u8]) -> u64 {
        FxBuildHasher.hash_one(key)
    }

    fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.table.find(Self::hash(key), |e| e.key.get() == key)
    }

    fn push(&mut self, key: &[u8], route: u32, more: &mut Vec<Vec<u32>>) {
        let h = Self::hash(key);
        match self.table.find_mut(h, |e| e.key.get() == key) {
            Some(e) => {
                if e.more == NO_MORE {
                    e.more = more.len() as u32;
                    more.push(Vec::new());
                }
                more[e.more as usize].push(route);
            }
            None => {
                let e = Entry {
                    key: KeyBytes::new(key),
                    first: route,
                    more: NO_MORE,
                };
                self.table.insert_unique(h, e, |e| Self::hash(e.key.get()));
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Router {
    exact: PathTable,
    prefix: PathTable,
    /// Routes after the first of a path key, by [`Entry::more`].
    more: Vec<Vec<u32>>,
    regex: Vec<(Regex, usize)>,
    templates: Templates,
    any: Vec<usize>,
    conds: Vec<Cond>,
    longest_prefix: usize,
}

impl Router {
    /// Builds the router from route matchers in file order. Regexes
    /// (paths and header values) were validated by the config loader; one
    /// that fails here is an error.
    pub fn new<'a>(matchers: impl IntoIterator<Item = &'a Match>) -> Result<Router, String> {
        let mut r = Router::default();
        for (i, m) in matchers.into_iter().enumerate() {
            let cond = Cond {
                host: m.host.clone(),
                methods: m.methods.iter().map(|s| s.as_bytes().into()).collect(),
                headers: m
                    .headers
                    .iter()
                    .map(|(n, v)| {
                        let v = match v {
                            ValueMatch::Exact(e) => Value::Exact(e.as_bytes().into()),
                            ValueMatch::Regex(re) => Value::Regex(ValueRegex::new(re)?),
                        };
                        Ok((n.as_bytes().into(), v))
                    })
                    .collect::<Result<_, String>>()?,
                query: pairs(&m.query),
                cookies: pairs(&m.cookies),
            };
            let plain = cond.host.is_none()
                && cond.methods.is_empty()
                && cond.headers.is_empty()
                && cond.query.is_empty()
                && cond.cookies.is_empty();
            r.conds.push(cond);
            let route = u32::try_from(i)
                .ok()
                .filter(|&i| i < PLAIN)
                .ok_or("too many routes")?;
            let tagged = if plain { route | PLAIN } else { route };
            match &m.path {
                PathMatch::Any => r.any.push(i),
                PathMatch::Exact(p) => r.exact.push(p.as_bytes(), tagged, &mut r.more),
                PathMatch::Prefix(p) => {
                    // "/" is stored as the empty prefix: every path has it.
                    let key: &[u8] = if p == "/" { b"" } else { p.as_bytes() };
                    r.longest_prefix = r.longest_prefix.max(key.len());
                    r.prefix.push(key, tagged, &mut r.more);
                }
                PathMatch::Regex(re) => {
                    let re = Regex::new(re).map_err(|e| e.to_string())?;
                    r.regex.push((re, i));
                }
                PathMatch::Template(t) => r.templates.add(t, route)?,
            }
        }
        Ok(r)
    }

    /// The first route of a path key whose other conditions hold.
    fn first(&self, entry: Option<&Entry>, req: &RouteRequest<'_>) -> Option<usize> {
        let e = entry?;
        let first = (e.first & !PLAIN) as usize;
        if e.first & PLAIN != 0 || self.conds[first].holds(req) {
            return Some(first);
        }
        self.more
            .get(e.more as usize)?
            .iter()
            .map(|&i| (i & !PLAIN) as usize)
            .find(|&i| self.conds[i].holds(req))
    }

    /// The route `req` takes. When it is a template route, its
    /// parameters are left in `params` (spans of `req.path`); other
    /// matches leave `params` alone.
    pub fn find(&self, req: &RouteRequest<'_>, params: &mut Params) -> Option<RouteMatch> {
        let path = req.path;
        if let Some(i) = self.first(self.exact.get(path), req) {
            return Some(RouteMatch {
                index: i,
                prefix_len: 0,
            });
        }
        if !self.templates.is_empty() {
            let mut ok = |i: u32| self.conds[i as usize].holds(req);
            if let Some(i) = self.templates.find(path, params, &mut ok) {
                return Some(RouteMatch {
                    index: i as usize,
                    prefix_len: 0,
                });
            }
        }
        if !self.prefix.is_empty() {
            // Candidate prefixes: the whole path, then the path cut at each
            // '/' from the right; a trailing '/' is cut off like any other.
            let mut end = path.len();
            loop {
                if end <= self.longest_prefix {
                    if let Some(i) = self.first(self.prefix.get(&path[..end]), req) {
                        return Some(RouteMatch {
                            index: i,
                            prefix_len: end,
                        });
                    }
                }
                if end == 0 {
                    break;
                }
                end = crate::proto::bytes::rfind_byte(b'/', &path[..end]).unwrap_or(0);
            }
        }
        if !self.regex.is_empty() {
            let text = std::str::from_utf8(path).ok();
            for (re, i) in &self.regex {
                if text.is_some_and(|t| re.is_match(t)) && self.conds[*i].holds(req) {
                    return Some(RouteMatch {
                        index: *i,
                        prefix_len: 0,
                    });
                }
            }
        }
        self.any
            .iter()
            .copied()
            .find(|&i| self.conds[i].holds(req))
            .map(|i| RouteMatch {
                index: i,
                prefix_len: 0,
            })
    }
}

fn pairs(p: &[(String, String)]) -> Vec<Pair> {
    p.iter()
        .map(|(n, v)| (n.as_bytes().into(), v.as_bytes().into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(path: PathMatch) -> Match {
        Match {
            host: None,
            path,
            methods: vec![],
            headers: vec![],
            query: vec![],
            cookies: vec![],
        }
    }

    fn find(r: &Router, path: &str) -> Option<(usize, usize)> {
        find_with(r, None, "GET", path, &[])
    }

    fn find_with(
        r: &Router,
        host: Option<&str>,
        method: &str,
        path: &str,
        hdrs: &[(&str, &str)],
    ) -> Option<(usize, usize)> {
        let lookup = |n: &[u8]| {
            hdrs.iter()
                .find(|(k, _)| k.as_bytes() == n)
                .map(|(_, v)| v.as_bytes())
        };
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let each = |n: &[u8], f: &mut dyn FnMut(&[u8]) -> bool| {
            let _ = hdrs
                .iter()
                .filter(|(k, _)| k.as_bytes() == n)
                .any(|(_, v)| f(v.as_bytes()));
        };
        r.find(
            &RouteRequest {
                host: host.map(str::as_bytes),
                method: method.as_bytes(),
                path: path.as_bytes(),
                query: query.as_bytes(),
                header: &lookup,
                header_values: &each,
            },
            &mut Params::default(),
        )
        .map(|x| (x.index, x.prefix_len))
    }

    #[test]
    fn specificity_order() {
        let routes = [
            m(PathMatch::Any),
            m(PathMatch::Regex("^/web/.*\\.png$".into())),
            m(PathMatch::Prefix("/web".into())),
            m(PathMatch::Prefix("/web/api".into())),
            m(PathMatch::Exact("/web/api/x".into())),
            m(PathMatch::Prefix("/".into())),
        ];
        let r = Router::new(&routes).unwrap();
        assert_eq!(find(&r, "/web/api/x"), Some((4, 0)));
        assert_eq!(find(&r, "/web/api/y"), Some((3, 8)));
        assert_eq!(find(&r, "/web/api"), Some((3, 8)));
        assert_eq!(find(&r, "/web/api/"), Some((3, 8)));
        assert_eq!(find(&r, "/web"), Some((2, 4)));
        assert_eq!(find(&r, "/web/a.png"), Some((2, 4)));
        assert_eq!(find(&r, "/webx"), Some((5, 0)));
        assert_eq!(find(&r, "/"), Some((5, 0)));
    }

    #[test]
    fn long_keys_and_several_routes_per_key() {
        let long = "/a-path-prefix-longer-than-the-inline-limit";
        let mut get_only = m(PathMatch::Prefix(long.into()));
        get_only.methods = vec!["GET".into()];
        let mut post_only = m(PathMatch::Prefix(long.into()));
        post_only.methods = vec!["POST".into()];
        let routes = [
            get_only,
            post_only,
            m(PathMatch::Prefix(long.into())),
            m(PathMatch::Exact(format!("{long}/x"))),
        ];
        let r = Router::new(&routes).unwrap();
        let p = format!("{long}/y");
        assert_eq!(find_with(&r, None, "GET", &p, &[]), Some((0, long.len())));
        assert_eq!(find_with(&r, None, "POST", &p, &[]), Some((1, long.len())));
        assert_eq!(find_with(&r, None, "PUT", &p, &[]), Some((2, long.len())));
        assert_eq!(find(&r, &format!("{long}/x")), Some((3, 0)));
        assert_eq!(find(&r, &long[..long.len() - 1]), None);
    }

    #[test]
    fn regex_then_any() {
        let routes = [
            m(PathMatch::Any),
            m(PathMatch::Regex("^/img/.*\\.png$".into())),
            m(PathMatch::Exact("/x".into())),
        ];
        let r = Router::new(&routes).unwrap();
        assert_eq!(find(&r, "/img/a.png"), Some((1, 0)));
        assert_eq!(find(&r, "/img/a.jpg"), Some((0, 0)));
        assert_eq!(find(&r, "/x"), Some((2, 0)));
    }

    #[test]
    fn conditions() {
        let mut a = m(PathMatch::Prefix("/api".into()));
        a.host = Some(HostMatch::Suffix(".example.com".into()));
        a.methods = vec!["GET".into(), "POST".into()];
        a.headers = vec![("x-env".into(), ValueMatch::Exact("canary".into()))];
        let b = m(PathMatch::Prefix("/api".into()));
        let r = Router::new(&[a, b]).unwrap();
        let canary = [("x-env", "canary")];
        assert_eq!(
            find_with(&r, Some("a.Example.com"), "GET", "/api/1", &canary),
            Some((0, 4))
        );
        assert_eq!(
            find_with(&r, Some("example.com"), "GET", "/api/1", &canary),
            Some((1, 4))
        );
        assert_eq!(
            find_with(&r, Some("a.example.com"), "PUT", "/api/1", &canary),
            Some((1, 4))
        );
        assert_eq!(
            find_with(&r, Some("a.example.com"), "GET", "/api/1", &[]),
            Some((1, 4))
        );
        assert_eq!(find_with(&r, None, "GET", "/other", &[]), None);
    }

    #[test]
    fn header_regex_query_and_cookies() {
        let mut re = m(PathMatch::Prefix("/".into()));
        re.headers = vec![("x-v".into(), ValueMatch::Regex("v[0-9]+".into()))];
        let mut q = m(PathMatch::Prefix("/".into()));
        q.query = vec![("ver".into(), "2 b".into()), ("x".into(), "1".into())];
        let mut c = m(PathMatch::Prefix("/".into()));
        c.cookies = vec![("beta".into(), "yes".into())];
        let rest = m(PathMatch::Prefix("/".into()));
        let r = Router::new(&[re, q, c, rest]).unwrap();
        let at =
            |path: &str, hdrs: &[(&str, &str)]| find_with(&r, None, "GET", path, hdrs).map(|x| x.0);
        // Anchored: the whole value must match.
        assert_eq!(at("/", &[("x-v", "v12")]), Some(0));
        assert_eq!(at("/", &[("x-v", "v12x")]), Some(3));
        assert_eq!(at("/", &[("x-v", "av1")]), Some(3));
        // Every parameter, decoded, first occurrence.
        assert_eq!(at("/a?x=1&ver=2+b", &[]), Some(1));
        assert_eq!(at("/a?x=%31&ver=2%20b", &[]), Some(1));
        assert_eq!(at("/a?ver=2+b", &[]), Some(3));
        assert_eq!(at("/a?x=1&ver=3&ver=2+b", &[]), Some(3));
        // Any Cookie field; the first holding the cookie decides.
        assert_eq!(at("/", &[("cookie", "a=1; beta=yes")]), Some(2));
        assert_eq!(
            at("/", &[("cookie", "a=1"), ("cookie", "beta=yes")]),
            Some(2)
        );
        assert_eq!(
            at("/", &[("cookie", "beta=no"), ("cookie", "beta=yes")]),
            Some(3)
        );
        assert_eq!(at("/", &[("cookie", "beta=yess")]), Some(3));
    }

    fn tm(text: &str) -> Match {
        let t = match sluicegate_config::parse(&format!(
            "listen: [{{addr: \"127.0.0.1:1\"}}]\nroutes: [{{name: r, match: {{path: \"{text}\"}}, respond: {{}}}}]\n"
        )) {
            Ok(c) => c.routes[0].matcher.clone(),
            Err(e) => panic!("{text}: {e:?}"),
        };
        assert!(matches!(t.path, PathMatch::Template(_)), "{text}");
        t
    }

    /// The route and its parameters' text.
    fn params(r: &Router, path: &str) -> Option<(usize, Vec<String>)> {
        let lookup = |_: &[u8]| None;
        let each = |_: &[u8], _: &mut dyn FnMut(&[u8]) -> bool| {};
        let mut p = Params::default();
        let req = RouteRequest {
            host: None,
            method: b"GET",
            path: path.as_bytes(),
            query: b"",
            header: &lookup,
            header_values: &each,
        };
        let found = r.find(&req, &mut p)?;
        let values = (0..p.len())
            .map(|i| String::from_utf8(p.get(path.as_bytes(), i).unwrap().to_vec()).unwrap())
            .collect();
        Some((found.index, values))
    }

    #[test]
    fn templates_between_exact_and_prefix() {
        let routes = [
            m(PathMatch::Any),
            m(PathMatch::Regex("^/users/.*$".into())),
            m(PathMatch::Prefix("/users".into())),
            tm("/users/{id:int}"),
            m(PathMatch::Exact("/users/42".into())),
            tm("/users/{name}"),
            m(PathMatch::Exact("/users/me".into())),
        ];
        let r = Router::new(&routes).unwrap();
        assert_eq!(params(&r, "/users/42"), Some((4, vec![])));
        assert_eq!(params(&r, "/users/7"), Some((3, vec!["7".into()])));
        // A path without a "{" is exact, whatever else matches.
        assert_eq!(params(&r, "/users/me"), Some((6, vec![])));
        assert_eq!(params(&r, "/users/bob"), Some((5, vec!["bob".into()])));
        assert_eq!(params(&r, "/users/bob/x"), Some((2, vec![])));
        assert_eq!(params(&r, "/users/bob/"), Some((2, vec![])));
        assert_eq!(params(&r, "/other"), Some((0, vec![])));
    }

    #[test]
    fn literal_typed_untyped_then_rest_with_backtracking() {
        let routes = [
            tm("/{any}/{x}/end"),
            tm("/{n:int}/{x}/tail"),
            tm("/a/{x}/lit"),
            tm("/a/{rest:*}"),
            tm("/files/{path:*}"),
            tm("/{who:alpha}/{id:uuid}"),
        ];
        let r = Router::new(&routes).unwrap();
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(params(&r, "/a/b/lit"), Some((2, v(&["b"]))));
        // Segment by segment: the literal "a" wins, and its catch-all
        // before going back to the root's parameter edges.
        assert_eq!(params(&r, "/a/b/end"), Some((3, v(&["b/end"]))));
        // The int edge leads nowhere for ".../end": back up, untyped.
        assert_eq!(params(&r, "/1/b/tail"), Some((1, v(&["1", "b"]))));
        assert_eq!(params(&r, "/1/b/end"), Some((0, v(&["1", "b"]))));
        assert_eq!(params(&r, "/a/b/c/d"), Some((3, v(&["b/c/d"]))));
        assert_eq!(params(&r, "/a"), Some((3, v(&[""]))));
        assert_eq!(params(&r, "/a/"), Some((3, v(&[""]))));
        assert_eq!(params(&r, "/files/x/y/"), Some((4, v(&["x/y/"]))));
        assert_eq!(params(&r, "/files"), Some((4, v(&[""]))));
        let uuid = "123e4567-e89b-12d3-a456-426614174000";
        assert_eq!(
            params(&r, &format!("/J%C3%BCrgen/{uuid}")),
            Some((5, v(&["J%C3%BCrgen", uuid])))
        );
        assert_eq!(params(&r, "/x1/123e4567"), None, "neither type holds");
        assert_eq!(params(&r, "/b/c"), None);
        assert_eq!(params(&r, "/1/2/other"), None);
    }

    #[test]
    fn other_conditions_in_file_order_and_fall_through() {
        let mut post = tm("/items/{id:int}");
        post.methods = vec!["POST".into()];
        let routes = [post, tm("/items/{id}"), m(PathMatch::Prefix("/".into()))];
        let r = Router::new(&routes).unwrap();
        assert_eq!(find_with(&r, None, "POST", "/items/3", &[]), Some((0, 0)));
        assert_eq!(find_with(&r, None, "GET", "/items/3", &[]), Some((1, 0)));
        assert_eq!(find_with(&r, None, "GET", "/items", &[]), Some((2, 0)));
    }

    #[test]
    fn twenty_parameters_and_many_routes() {
        let kinds = ["", ":int", ":alpha", ":hex", ":uint"];
        let text: String = (1..=20)
            .map(|i| format!("/{{p{i}{}}}", kinds[i % kinds.len()]))
            .collect();
        let mut routes: Vec<Match> = (0..500).map(|i| tm(&format!("/r{i}/{{id:int}}"))).collect();
        routes.push(tm(&text));
        let r = Router::new(&routes).unwrap();
        let path: String = (1..=20)
            .map(|i| match i % kinds.len() {
                1 => format!("/{i}"),
                2 => "/abc".to_string(),
                3 => "/beef".to_string(),
                _ => format!("/v{i}").replace("/v", if i % 5 == 4 { "/" } else { "/v" }),
            })
            .collect();
        let (i, values) = params(&r, &path).unwrap();
        assert_eq!(i, 500);
        assert_eq!(values.len(), 20);
        assert_eq!(format!("/{}", values.join("/")), path);
        assert_eq!(params(&r, "/r321/9"), Some((321, vec!["9".into()])));
        assert_eq!(params(&r, "/r321/x"), None);
    }
}
