//! Limit filters: an app's plan, and a route's own limit (per client IP,
//! per route, or per value of a path parameter); both answer 429 with `Retry-After` and `RateLimit-*`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Answer, Filter, InFlight, Refuse, ReqCx};
use crate::apps::limit::{ClientLimits, LimitState, ParamLimits, PlanRt};
use crate::proto::fields::Fields;
use crate::proto::response::ErrorKind;

/// The authenticated app's plan for the route's service: rate, quota and
/// concurrency. Over a limit: 429 with `Retry-After` and `RateLimit-*`;
/// under it, `RateLimit-*` go on the response.
#[derive(Debug)]
pub struct PlanLimit;

impl Filter for PlanLimit {
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
    /// A set per value of the path parameter `index` of the route's
    /// template (called `name`, by which a reload keeps the table).
    Param {
        table: Arc<ParamLimits>,
        index: usize,
        name: Arc<str>,
    },
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
            RouteCounters::Param { table, index, .. } => {
                let value = cx.params.get(cx.path, *index).unwrap_or_default();
                table.state_of(value, cx.now)
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
