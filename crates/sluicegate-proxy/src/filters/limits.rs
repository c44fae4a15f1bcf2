//! Limit filters: an app's plan, and a route's own limit (per client IP,
//! per route, or per value of a key: a path parameter, a header, the
//! app); both answer 429 with `Retry-After` and `RateLimit-*`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Answer, Filter, InFlight, Refuse, ReqCx, Wait};
use crate::apps::limit::{ClientLimits, LimitState, ParamLimits, PlanRt};
use crate::proto::fields::Fields;
use crate::proto::response::ErrorKind;

/// The authenticated app's plan for the route's service: rate, quota and
/// concurrency. Over a limit: 429 with `Retry-After` and `RateLimit-*`;
/// under it, `RateLimit-*` go on the response.
#[derive(Debug)]
pub struct PlanLimit {
    /// Some plan has a global quota: a request near its end may wait for
    /// Redis (see `crate::cluster::quota_wait`).
    pub waits: bool,
}

impl Filter for PlanLimit {
    fn waits(&self) -> bool {
        self.waits
    }

    fn wait<'a>(&'a self, cx: &ReqCx<'a>) -> Option<Wait<'a>> {
        let app = cx.app?;
        let charge = app.charge_for(cx.service.unwrap_or(u32::MAX))?;
        let state = &app.table.slot(charge.slot).limit;
        crate::cluster::quota_wait(state, charge.plan)
    }

    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let Some(app) = cx.app else { return Ok(()) };
        let Some(charge) = app.charge_for(cx.service.unwrap_or(u32::MAX)) else {
            return Ok(());
        };
        let table = app.table;
        let state = &table.slot(charge.slot).limit;
        charge_or_refuse(
            state,
            || InFlight::App(table.clone(), charge.slot),
            charge.plan,
            cx,
            || {
                app.slot().limited.fetch_add(1, Ordering::Relaxed);
            },
        )
    }
}

/// Charges one request to `state` under `plan`: the concurrency guard and
/// the `RateLimit-*` response headers go into the edits, or the refusal
/// (429, `Retry-After`, `RateLimit-*`) is returned after `on_refuse` ran.
pub(super) fn charge_or_refuse(
    state: &LimitState,
    guard: impl FnOnce() -> InFlight,
    plan: &PlanRt,
    cx: &mut ReqCx<'_>,
    on_refuse: impl FnOnce(),
) -> Result<(), Refuse> {
    let admitted = match plan.global {
        None => state.try_admit(plan, cx.now, SystemTime::now),
        Some(on_failure) => crate::cluster::admit(state, plan, on_failure, cx.now, SystemTime::now),
    };
    match admitted {
        Ok((slot, c)) => {
            if slot {
                cx.edits.guards.push(guard());
            }
            if c.limit > 0 {
                ratelimit_headers(
                    &mut cx.edits.response_headers,
                    c.limit,
                    c.remaining,
                    c.reset,
                );
            }
            Ok(())
        }
        Err(r) => {
            on_refuse();
            let mut headers = Fields::default();
            let secs = r.retry_after.as_secs() + u64::from(r.retry_after.subsec_nanos() > 0);
            headers.push(
                b"retry-after",
                itoa::Buffer::new().format(secs.max(1)).as_bytes(),
            );
            ratelimit_headers(&mut headers, r.limit, 0, r.reset);
            Err(Refuse {
                answer: Answer::Error(ErrorKind::TooManyRequests),
                headers,
            })
        }
    }
}

/// Whose counters a route limit charges.
#[derive(Debug, Clone)]
pub enum RouteCounters {
    /// One set for the whole route.
    Route(Arc<LimitState>),
    /// A set per client IP address.
    ClientIp(Arc<ClientLimits>),
    /// A set per value of `source` (`name` is its spelling in `per`, by
    /// which a reload keeps the table).
    Keyed {
        table: Arc<ParamLimits>,
        source: KeySource,
        name: Arc<str>,
    },
}

/// Where a keyed route limit reads its key from: the one place a new
/// source (a token claim, say) is added.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// The path parameter at this index of the route's template.
    Param(usize),
    /// The first field of this name (lower-case), its value trimmed.
    Header(Box<[u8]>),
    /// The authenticated app's id (the filter runs after `auth`).
    App,
    /// The client's address (its octets): a `per: client_ip` limit with
    /// `scope: global` (a local one has its own table by address).
    ClientIp,
    /// The verified token's claim of this name (the filter runs after
    /// `auth: jwt`): a string as it is, an integer or a boolean as its
    /// JSON text; other values (objects, arrays, null) count as absent.
    Claim(Box<str>),
}

impl KeySource {
    /// The request's key in `table`.
    #[inline]
    pub fn key(&self, table: &ParamLimits, cx: &ReqCx<'_>) -> u128 {
        match (self, cx.client) {
            (KeySource::ClientIp, std::net::IpAddr::V4(a)) => table.key_of(Some(&a.octets())),
            (KeySource::ClientIp, std::net::IpAddr::V6(a)) => table.key_of(Some(&a.octets())),
            (KeySource::Claim(name), _) => {
                use serde_json::Value;
                let claim = cx.edits.token.as_ref().and_then(|t| t.claim(name));
                match claim {
                    Some(Value::String(s)) => table.key_of(Some(s.as_bytes())),
                    Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
                        (Some(i), _) => {
                            table.key_of(Some(itoa::Buffer::new().format(i).as_bytes()))
                        }
                        (None, Some(u)) => {
                            table.key_of(Some(itoa::Buffer::new().format(u).as_bytes()))
                        }
                        _ => table.key_of(Some(n.to_string().as_bytes())),
                    },
                    Some(Value::Bool(b)) => table.key_of(Some(if *b { b"true" } else { b"false" })),
                    _ => table.key_of(None),
                }
            }
            _ => table.key_of(self.value(cx)),
        }
    }

    /// The request's value, or `None` (counted under the shared "absent"
    /// key).
    #[inline]
    pub fn value<'c>(&self, cx: &'c ReqCx<'_>) -> Option<&'c [u8]> {
        match self {
            KeySource::ClientIp => None,
            KeySource::Param(index) => cx.params.get(cx.path, *index),
            KeySource::Header(name) => {
                let raw = cx.raw;
                cx.head
                    .headers
                    .iter()
                    .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
                    .map(|h| crate::proto::bytes::trim(&raw[h.value.clone()]))
            }
            KeySource::App => cx.app.map(|a| a.id().as_bytes()),
            KeySource::Claim(name) => cx
                .edits
                .token
                .as_ref()
                .and_then(|t| t.claim(name))
                .and_then(|v| v.as_str())
                .map(str::as_bytes),
        }
    }
}

/// A route's own `limit`, for every caller: 429 like a plan.
#[derive(Debug)]
pub struct RouteLimiter {
    pub plan: PlanRt,
    pub counters: RouteCounters,
}

impl Filter for RouteLimiter {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let state = match &self.counters {
            RouteCounters::Route(s) => s.clone(),
            RouteCounters::ClientIp(t) => t.state(cx.client, cx.now),
            RouteCounters::Keyed { table, source, .. } => {
                table.state(source.key(table, cx), cx.now)
            }
        };
        charge_or_refuse(
            &state,
            || InFlight::State(state.clone()),
            &self.plan,
            cx,
            || {},
        )
    }
}

fn ratelimit_headers(out: &mut Fields, limit: u64, remaining: u64, reset: u64) {
    let mut b = itoa::Buffer::new();
    out.push(b"ratelimit-limit", b.format(limit).as_bytes());
    out.push(b"ratelimit-remaining", b.format(remaining).as_bytes());
    out.push(b"ratelimit-reset", b.format(reset).as_bytes());
}
