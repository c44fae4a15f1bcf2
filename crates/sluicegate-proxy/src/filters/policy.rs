//! Policy filters: client IP rules, CORS, header policies and the path
//! rewrite.

use std::sync::Arc;

use super::{Answer, Filter, HeaderOpsRt, Refuse, ReqCx};
use crate::proto::fields::Fields;
use crate::proto::response::ErrorKind;
use crate::route::template::Expand;

/// Header fields whose values name path parameters: names and values.
pub type Templated = Box<[(Box<[u8]>, Expand)]>;

/// `request_headers` and `response_headers` of a route.
#[derive(Debug)]
pub struct HeaderPolicy {
    pub request: Option<HeaderOpsRt>,
    pub response: Option<Arc<HeaderOpsRt>>,
    /// On a template route, request fields whose values name its path
    /// parameters (`${name}`): written per request, after the others
    /// (their names are in `request`'s drops when they are `set`).
    pub templated: Templated,
}

impl Filter for HeaderPolicy {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        if let Some(ops) = &self.request {
            for h in cx.head.headers.iter_mut() {
                if !h.skip && ops.drops(&cx.raw[h.name.clone()]) {
                    h.skip = true;
                }
            }
            cx.edits.request_headers.extend(&ops.fields);
        }
        for (name, value) in self.templated.iter() {
            // The parameter as routed: escapes kept, so no decoded byte
            // can end the field.
            cx.edits.request_headers.push_with(name, |out| {
                value.write(cx.params, cx.path, out, |t, o| o.extend_from_slice(t))
            });
        }
        cx.edits.response_ops.clone_from(&self.response);
        Ok(())
    }
}

/// A route's `cors`: preflights (OPTIONS with
/// `Access-Control-Request-Method`) are answered here, before auth, with
/// 204 or 403; other requests from an allowed origin get the
/// `Access-Control-Allow-*` headers on their response, from the gateway
/// only.
#[derive(Debug)]
pub struct CorsPolicy {
    origins: Vec<sluicegate_config::OriginMatch>,
    methods: Vec<String>,
    headers: Vec<String>,
    /// Prebuilt `access-control-allow-methods` / `-headers` / `-max-age`
    /// fields for preflights, and `-expose-headers` for the others.
    preflight: Fields,
    expose: Fields,
    credentials: bool,
}

impl CorsPolicy {
    pub fn new(c: &sluicegate_config::Cors) -> CorsPolicy {
        let mut preflight = Fields::default();
        preflight.push(
            b"access-control-allow-methods",
            c.methods.join(", ").as_bytes(),
        );
        if !c.headers.is_empty() {
            preflight.push(
                b"access-control-allow-headers",
                c.headers.join(", ").as_bytes(),
            );
        }
        if let Some(age) = c.max_age {
            preflight.push(
                b"access-control-max-age",
                itoa::Buffer::new().format(age.as_secs()).as_bytes(),
            );
        }
        let mut expose = Fields::default();
        if !c.expose_headers.is_empty() {
            expose.push(
                b"access-control-expose-headers",
                c.expose_headers.join(", ").as_bytes(),
            );
        }
        CorsPolicy {
            origins: c.origins.clone(),
            methods: c.methods.clone(),
            headers: c.headers.clone(),
            preflight,
            expose,
            credentials: c.credentials,
        }
    }

    fn allows(&self, origin: &[u8]) -> bool {
        use sluicegate_config::OriginMatch;
        self.origins.iter().any(|o| match o {
            OriginMatch::Any => true,
            OriginMatch::Exact(e) => origin.eq_ignore_ascii_case(e.as_bytes()),
            OriginMatch::Suffix { scheme, suffix } => {
                origin.len() > scheme.len() + suffix.len()
                    && origin[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
                    && host_ends_with(&origin[scheme.len()..], suffix.as_bytes())
            }
        })
    }

    /// `Access-Control-Allow-Origin` (and credentials, Vary) for `origin`.
    fn origin_fields(&self, out: &mut Fields, origin: &[u8]) {
        let any = self.origins.contains(&sluicegate_config::OriginMatch::Any);
        if any && !self.credentials {
            out.push(b"access-control-allow-origin", b"*");
        } else {
            out.push(b"access-control-allow-origin", origin);
            out.push(b"vary", b"Origin");
        }
        if self.credentials {
            out.push(b"access-control-allow-credentials", b"true");
        }
    }
}

/// `host[:port]` ends with `suffix` (".example.com"), port aside.
fn host_ends_with(host_port: &[u8], suffix: &[u8]) -> bool {
    let host = match crate::proto::bytes::rfind_byte(b':', host_port) {
        Some(i) if !host_port.ends_with(b"]") => &host_port[..i],
        _ => host_port,
    };
    host.len() > suffix.len() && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

impl Filter for CorsPolicy {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let raw = cx.raw;
        let header = |name: &[u8]| {
            cx.head
                .headers
                .iter()
                .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
                .map(|h| crate::proto::bytes::trim(&raw[h.value.clone()]))
        };
        let Some(origin) = header(b"origin") else {
            return Ok(()); // not a cross-origin request
        };
        let allowed = self.allows(origin);
        let preflight_method = header(b"access-control-request-method");
        if &raw[cx.head.method.clone()] == b"OPTIONS" {
            if let Some(method) = preflight_method {
                let forbidden = || Refuse {
                    answer: Answer::Error(ErrorKind::Forbidden),
                    headers: Fields::default(),
                };
                if !allowed || !self.methods.iter().any(|m| m.as_bytes() == method) {
                    return Err(forbidden());
                }
                if let Some(asked) = header(b"access-control-request-headers") {
                    let all_allowed = asked
                        .split(|&b| b == b',')
                        .map(crate::proto::bytes::trim)
                        .filter(|h| !h.is_empty())
                        .all(|h| {
                            self.headers
                                .iter()
                                .any(|a| h.eq_ignore_ascii_case(a.as_bytes()))
                        });
                    if !all_allowed {
                        return Err(forbidden());
                    }
                }
                let mut headers = Fields::default();
                self.origin_fields(&mut headers, origin);
                headers.extend(&self.preflight);
                return Err(Refuse {
                    answer: Answer::NoContent,
                    headers,
                });
            }
        }
        if allowed {
            cx.edits.cors = true;
            self.origin_fields(&mut cx.edits.response_headers, origin);
            cx.edits.response_headers.extend(&self.expose);
        }
        Ok(())
    }
}

/// A route's `rewrite`: after `strip_prefix`, the first match of the
/// regex in the path is replaced; the result is what goes upstream.
#[derive(Debug)]
pub struct PathRewrite {
    pub regex: regex::bytes::Regex,
    pub replacement: Vec<u8>,
    /// The route strips its matched prefix first.
    pub strip: bool,
    /// The replacement cut at its `${name}` references to the route's
    /// path parameters (names that are no capture group of the regex).
    pub params: Option<Expand>,
}

impl Filter for PathRewrite {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let base = cx.edits.path.as_deref().unwrap_or(cx.path);
        let base = if self.strip && cx.prefix_len > 0 && cx.prefix_len <= base.len() {
            match &base[cx.prefix_len..] {
                b"" => &b"/"[..],
                rest => rest,
            }
        } else {
            base
        };
        let mut out = match &self.params {
            None => self.regex.replace(base, &self.replacement[..]).into_owned(),
            Some(expand) => match self.regex.captures(base) {
                None => base.to_vec(),
                Some(caps) => {
                    // The parameters as routed: a decoded "%2F" never
                    // makes a new segment.
                    let whole = caps.get(0).map_or(0..0, |m| m.range());
                    let mut out = base[..whole.start].to_vec();
                    expand.write(cx.params, cx.path, &mut out, |t, o| caps.expand(t, o));
                    out.extend_from_slice(&base[whole.end..]);
                    out
                }
            },
        };
        if out.first() != Some(&b'/') {
            out.insert(0, b'/');
        }
        cx.edits.path = Some(out);
        cx.edits.path_final = true;
        Ok(())
    }
}

/// A route's `ip` rules: 403 for a client address they do not admit.
#[derive(Debug)]
pub struct IpFilter(pub sluicegate_config::IpRules);

impl Filter for IpFilter {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        if self.0.admits(cx.client) {
            Ok(())
        } else {
            Err(Refuse {
                answer: Answer::Error(ErrorKind::Forbidden),
                headers: Fields::default(),
            })
        }
    }
}
