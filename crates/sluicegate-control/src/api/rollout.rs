//! `GET /routes/{name}/rollout` (the rollout's weight, state, leadership
//! and last windows) and `PUT /routes/{name}/rollout` (set the weight,
//! pause, resume, or restart from a weight), behind the admin tokens like
//! every API route; a `PUT` is a write (`admin.read_only`: `405`).
//! `404`: no such route; `409`: the route has no rollout, or a state
//! change asked of a gateway that does not lead the fleet.

use std::sync::atomic::Ordering;

use axum::extract::{Path, State as Axum};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::common::{problems, writable, write_error, JsonBody};
use crate::canary::run::{write_share, NotWritten};
use crate::history::Issue;
use crate::rollout::board::{Entry, State, Window};
use crate::state::{error, AdminState};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new().route("/routes/{name}/rollout", get(get_rollout).put(put_rollout))
}

/// A rollout's rule, as configured.
#[derive(Serialize, ToSchema)]
pub(crate) struct Rule {
    step: u32,
    every_ms: u64,
    max_error_ratio: f64,
    max_p99_ratio: f64,
    min_requests: u64,
}

/// A route's rollout now.
#[derive(Serialize, ToSchema)]
pub(crate) struct RolloutView {
    route: String,
    /// The canary's (last split entry's) share, in percentage points.
    weight: u32,
    state: State,
    /// Whether this gateway judges the windows and writes the weights
    /// (elsewhere the state is what the config's weight says).
    leader: bool,
    /// The split's services, the canary last, and their weights.
    services: Vec<String>,
    weights: Vec<u64>,
    rule: Rule,
    /// Steps and rollbacks this gateway wrote.
    steps: u64,
    rollbacks: u64,
    /// The last windows judged (at most 10), oldest first.
    windows: Vec<Window>,
}

fn view(name: &str, e: &Entry, leader: bool) -> RolloutView {
    RolloutView {
        route: name.to_string(),
        weight: e.weight(),
        state: e.state,
        leader,
        services: e.services.clone(),
        weights: e.weights.clone(),
        rule: Rule {
            step: e.rule.step,
            every_ms: u64::try_from(e.rule.every.as_millis()).unwrap_or(u64::MAX),
            max_error_ratio: e.rule.max_error_ratio,
            max_p99_ratio: e.rule.max_p99_ratio,
            min_requests: e.rule.min_requests,
        },
        steps: e.steps,
        rollbacks: e.rollbacks,
        windows: e.windows.iter().cloned().collect(),
    }
}

/// The rollout of route `name`, or the `404` / `409` answer.
fn current(state: &AdminState, name: &str) -> Result<RolloutView, Box<Response>> {
    let board = &state.rollouts;
    if let Some(e) = board.lock().get(name) {
        return Ok(view(name, e, board.is_leader()));
    }
    let snap = state.shared.snapshot.load();
    if snap.routes.iter().any(|r| &*r.name == name) {
        let message = format!("route {name:?} has no rollout");
        return Err(Box::new(error(StatusCode::CONFLICT, &message)));
    }
    let message = format!("no routes named {name:?}");
    Err(Box::new(error(StatusCode::NOT_FOUND, &message)))
}

/// `GET /routes/{name}/rollout`.
async fn get_rollout(Axum(state): Axum<AdminState>, Path(name): Path<String>) -> Response {
    match current(&state, &name) {
        Ok(v) => Json(v).into_response(),
        Err(resp) => *resp,
    }
}

/// What a `PUT` asks for.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Change {
    /// The canary's new share, written to the config.
    pub weight: Option<u32>,
    /// `running` (resume, or restart after a rollback or a promotion) or
    /// `paused`.
    pub state: Option<State>,
}

/// Reads a `PUT` body: `{"weight": 0..100, "state": "running"|"paused"}`,
/// at least one of them; problems at their JSON paths.
pub(crate) fn change(body: &Value) -> Result<Change, Vec<Issue>> {
    let issue = |path: &str, message: &str| Issue {
        path: path.to_string(),
        message: message.to_string(),
    };
    let Value::Object(fields) = body else {
        return Err(vec![issue(
            "$",
            "expected an object with weight and/or state",
        )]);
    };
    let mut out = Change::default();
    let mut issues = Vec::new();
    for (k, v) in fields {
        match k.as_str() {
            "weight" => match v.as_u64().filter(|w| *w <= 100) {
                Some(w) => out.weight = Some(w as u32),
                None => issues.push(issue("$.weight", "expected a whole number from 0 to 100")),
            },
            "state" => match v.as_str() {
                Some("running") => out.state = Some(State::Running),
                Some("paused") => out.state = Some(State::Paused),
                _ => issues.push(issue(
                    "$.state",
                    "expected running or paused (promoted and rolled_back are reached, not set)",
                )),
            },
            other => issues.push(issue(
                &format!("$.{other}"),
                "unknown key (expected weight or state)",
            )),
        }
    }
    if issues.is_empty() && out == Change::default() {
        issues.push(issue("$", "give weight and/or state"));
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}

/// `PUT /routes/{name}/rollout`: a `weight` is written to the config
/// (split weights scaled as the controller scales them), then a `state`
/// is set; the window being measured restarts.
async fn put_rollout(
    Axum(state): Axum<AdminState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Response {
    if let Err(resp) = writable(&state) {
        return *resp;
    }
    if let Err(resp) = current(&state, &name) {
        return *resp;
    }
    let change = match change(&body) {
        Ok(c) => c,
        Err(issues) => return problems(StatusCode::BAD_REQUEST, "invalid request", issues),
    };
    let board = state.rollouts.clone();
    let fleet = board.fleet.load(Ordering::Acquire);
    if change.state.is_some() && fleet && !board.is_leader() {
        return error(
            StatusCode::CONFLICT,
            "this gateway does not lead the rollouts: send the state to the leader (sluicegate_rollout_leader 1)",
        );
    }
    if let Some(to) = change.weight {
        let (b, n) = (board.clone(), name.clone());
        let reloader = state.reloader.clone();
        let written =
            tokio::task::spawn_blocking(move || write_share(&b, &reloader, &n, None, to, false))
                .await;
        match written {
            Ok(Ok(revision)) => {
                tracing::info!(route = %name, to, revision, "rollout: weight set through the admin API");
            }
            Ok(Err(NotWritten::Write(e))) => return write_error(e),
            Ok(Err(e)) => return error(StatusCode::CONFLICT, &e.to_string()),
            Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
        }
    }
    if let Some(s) = change.state {
        let mut routes = board.lock();
        if let Some(e) = routes.get_mut(&name) {
            e.state = match s {
                State::Running if e.weight() >= 100 => State::Promoted,
                other => other,
            };
            e.open = None;
            tracing::info!(route = %name, state = e.state.as_str(), "rollout: state set through the admin API");
        }
    }
    match current(&state, &name) {
        Ok(v) => Json(v).into_response(),
        Err(resp) => *resp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_put_body_is_weight_and_or_state() {
        assert_eq!(
            change(&json!({"weight": 20})).unwrap(),
            Change {
                weight: Some(20),
                state: None
            }
        );
        assert_eq!(
            change(&json!({"weight": 0, "state": "running"})).unwrap(),
            Change {
                weight: Some(0),
                state: Some(State::Running)
            }
        );
        assert_eq!(
            change(&json!({"state": "paused"})).unwrap().state,
            Some(State::Paused)
        );
        let paths = |v: Value| -> Vec<String> {
            change(&v)
                .unwrap_err()
                .into_iter()
                .map(|i| i.path)
                .collect()
        };
        assert_eq!(paths(json!({"weight": 101})), ["$.weight"]);
        assert_eq!(paths(json!({"weight": -1})), ["$.weight"]);
        assert_eq!(paths(json!({"state": "promoted"})), ["$.state"]);
        assert_eq!(paths(json!({"wieght": 1})), ["$.wieght"]);
        assert_eq!(paths(json!({})), ["$"]);
        assert_eq!(paths(json!([1])), ["$"]);
    }
}
