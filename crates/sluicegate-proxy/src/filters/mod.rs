//! Route filters: the one trait every policy implements (auth, ACL, plan
//! limits, ...) and the per-request context they read and edit (with
//! what it holds: concurrency slots taken, header edits to apply). The
//! filters are in `auth` (app keys, JWT), `limits` (plans, route limits)
//! and `policy` (IP rules, CORS, header policies, rewrite); `fault` holds
//! a route's injected aborts and delays, applied after them. A route holds
//! its filters in order; the first to refuse answers the request.
//! `mirror` holds a route's mirror settings (which requests get copied,
//! and where), applied as the request is forwarded. `grant` holds what a
//! request authenticated with, checked again for long-lived streams when
//! the config changes.

mod auth;
pub(crate) mod compress;
pub(crate) mod fault;
pub(crate) mod grant;
mod limits;
pub(crate) mod mirror;
mod policy;

pub use auth::{AppKeyAuth, JwtAuth, JwtShared, MtlsAuth, MtlsIndex};
pub use limits::{KeySource, PlanLimit, RouteCounters, RouteLimiter};
pub use policy::{CorsPolicy, HeaderPolicy, IpFilter, PathRewrite, Templated};

use std::fmt::Debug;
use std::future::Future;
use std::net::IpAddr;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::apps::limit::LimitState;
use crate::apps::{AppRef, AppTable};
use crate::proto::fields::Fields;
use crate::proto::head::RequestHead;
use crate::proto::response::ErrorKind;
use crate::route::template::Params;
use crate::transport::tls::identity::ClientIdentity;

/// What filters change about the request and its response, reused across
/// requests (cleared before each).
#[derive(Debug, Default)]
pub struct Edits {
    /// The path to forward instead of the received one: before any
    /// `strip_prefix` (which still applies), unless `path_final`.
    pub path: Option<Vec<u8>>,
    /// `path` is final: `strip_prefix` was applied already (by `rewrite`).
    pub path_final: bool,
    /// The query to forward instead of the received one, with its `?`
    /// (empty for none).
    pub query: Option<Vec<u8>>,
    /// Header fields added to the request upstream.
    pub request_headers: Fields,
    /// Header fields added to the response to the client.
    pub response_headers: Fields,
    /// The authenticated app (its index in the snapshot's apps table), and
    /// the fingerprint of the key it used.
    pub app: Option<u32>,
    pub key_fp: Option<u32>,
    /// What the app authenticated with (kept by a stream that stays open).
    pub cred: grant::Credential,
    /// Held until the request ends (concurrency slots).
    pub guards: Vec<InFlight>,
    /// Headers to drop from the upstream's response and lines to add.
    pub response_ops: Option<Arc<HeaderOpsRt>>,
    /// The route's CORS policy answers for this request: the upstream's
    /// own `Access-Control-*` headers are dropped.
    pub cors: bool,
    /// The verified JWT of an `auth: jwt` route: later filters read its
    /// claims by name (`token.claim("sub")`), with no parsing.
    pub token: Option<Arc<crate::apps::jwks::Verified>>,
}

impl Edits {
    pub fn clear(&mut self) {
        self.path = None;
        self.path_final = false;
        self.query = None;
        self.request_headers.clear();
        self.response_headers.clear();
        self.app = None;
        self.key_fp = None;
        self.cred = grant::Credential::None;
        self.guards.clear();
        self.response_ops = None;
        self.cors = false;
        self.token = None;
    }
}

/// A concurrency slot a filter took, released when the request ends (the
/// guard is dropped).
#[derive(Debug)]
pub enum InFlight {
    /// A route's or a client's counters.
    State(Arc<LimitState>),
    /// An app's slot in the table the request was served by.
    App(Arc<AppTable>, u32),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        match self {
            InFlight::State(s) => s.release(),
            InFlight::App(t, slot) => t.slot(*slot).limit.release(),
        }
    }
}

/// `set`/`add`/`remove` compiled: names to drop (removed and set ones,
/// lower-cased) and the fields to add (set ones, then added ones).
#[derive(Debug, Default)]
pub struct HeaderOpsRt {
    drop: Vec<Box<[u8]>>,
    pub fields: Fields,
}

impl HeaderOpsRt {
    pub fn new(ops: &sluicegate_config::HeaderOps) -> Option<HeaderOpsRt> {
        if ops.set.is_empty() && ops.add.is_empty() && ops.remove.is_empty() {
            return None;
        }
        let mut rt = HeaderOpsRt::default();
        for name in &ops.remove {
            rt.drop.push(name.as_bytes().into());
        }
        for (name, value) in ops.set.iter().chain(&ops.add) {
            rt.fields.push(name.as_bytes(), value.as_bytes());
        }
        for (name, _) in &ops.set {
            rt.drop.push(name.to_ascii_lowercase().into_bytes().into());
        }
        Some(rt)
    }

    /// Whether a received header named `name` is dropped.
    pub fn drops(&self, name: &[u8]) -> bool {
        self.drop.iter().any(|d| name.eq_ignore_ascii_case(d))
    }
}

/// A filter's own answer, ending the request: usually a refusal, or a
/// bodiless 204 (a CORS preflight); with header fields to add to it.
#[derive(Debug)]
pub struct Refuse {
    pub answer: Answer,
    pub headers: Fields,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Error(ErrorKind),
    NoContent,
}

/// What a filter sees of a request.
pub struct ReqCx<'a> {
    pub raw: &'a [u8],
    pub head: &'a mut RequestHead,
    /// The path in normal form (see [`crate::route::path`]), what routing saw.
    pub path: &'a [u8],
    /// The received query (with its `?`) as a range of `raw`.
    pub query: Range<usize>,
    /// Length of the route's matched path prefix (0 for other matches).
    pub prefix_len: usize,
    /// The parameters of a template route, spans of `path` (meaningless
    /// for other routes).
    pub params: &'a Params,
    /// Index of the route's service; `None` for `respond` routes.
    pub service: Option<u32>,
    pub edits: &'a mut Edits,
    /// The app authenticated by an earlier filter.
    pub app: Option<AppRef<'a>>,
    pub now: Instant,
    pub client: IpAddr,
    /// Who the connection's client certificate names, if it sent one.
    pub(crate) identity: Option<&'a ClientIdentity>,
    /// The apps table of the request's snapshot (what auth filters look
    /// keys and ids up in: a snapshot can change its apps alone).
    pub apps: &'a Arc<AppTable>,
}

/// What a filter waits for before it decides: it owns or borrows from the
/// filter what it needs, never the request.
pub type Wait<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// One policy on a route.
pub trait Filter: Send + Sync + Debug {
    /// Runs before the request is forwarded; an error answers it.
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse>;

    /// Whether this filter may have to wait before it decides (for a
    /// shared store, say). Asked once, when the route is compiled: a route
    /// with no such filter runs its filters without an await.
    fn waits(&self) -> bool {
        false
    }

    /// For a filter that [`Filter::waits`]: what to wait for before
    /// [`Filter::on_request`] runs, if anything now.
    fn wait<'a>(&'a self, _cx: &ReqCx<'a>) -> Option<Wait<'a>> {
        None
    }

    /// For an auth filter: whether the credential a stream was admitted
    /// with still admits its app under a new snapshot's apps (the app's
    /// index), or why not. `None`: not an auth filter.
    fn readmit(&self, _r: &grant::Readmit<'_>) -> Option<Result<u32, grant::Revoked>> {
        None
    }
}

/// A route's filters in order. The first two are held in the route itself
/// (an app-key route has two: the key, then the plan), so a request does
/// not first load a list from elsewhere: with ten thousand routes hit at
/// random, that list is one more cache miss per request. A route with a
/// filter that [`Filter::waits`] keeps them all in the list instead (and
/// that is how it is known to wait, at no cost to a route's size).
#[derive(Debug, Default)]
pub struct Filters {
    head: [Option<Box<dyn Filter>>; 2],
    rest: Box<[Box<dyn Filter>]>,
}

impl Filters {
    pub fn new(list: Vec<Box<dyn Filter>>) -> Filters {
        if list.iter().any(|f| f.waits()) {
            return Filters {
                head: [None, None],
                rest: list.into(),
            };
        }
        let mut list = list.into_iter();
        let head = [list.next(), list.next()];
        Filters {
            head,
            rest: list.collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.head[0].is_none() && self.rest.is_empty()
    }

    /// Whether some filter may wait before it decides.
    pub fn waits(&self) -> bool {
        self.head[0].is_none() && !self.rest.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn Filter> {
        self.head
            .iter()
            .flatten()
            .chain(self.rest.iter())
            .map(|f| &**f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter that only carries its place in the list (read through
    /// its `Debug` form, which the dead-code lint does not count).
    #[derive(Debug)]
    struct Nth(#[allow(dead_code)] u16);

    impl Filter for Nth {
        fn on_request<'a>(&'a self, _: &mut ReqCx<'a>) -> Result<(), Refuse> {
            Ok(())
        }
    }

    fn order(f: &Filters) -> Vec<u16> {
        f.iter()
            .map(|f| format!("{f:?}"))
            .map(|s| s[4..s.len() - 1].parse().unwrap())
            .collect()
    }

    #[test]
    fn filters_keep_their_order_inline_or_not() {
        for n in 0..6u16 {
            let list: Vec<Box<dyn Filter>> = (0..n)
                .map(|i| Box::new(Nth(i)) as Box<dyn Filter>)
                .collect();
            let f = Filters::new(list);
            assert_eq!(order(&f), (0..n).collect::<Vec<_>>());
            assert_eq!(f.is_empty(), n == 0);
        }
    }
}
