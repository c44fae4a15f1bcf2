//! The rollout API's part of the OpenAPI document: `GET` and `PUT
//! /routes/{name}/rollout` and the schemas of their bodies, merged into
//! the admin API's.

use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::rollout::{RolloutView, Rule};
use crate::rollout::board::{State, Window};
use crate::rollout::judge::{Side, Verdict};

/// What `PUT /routes/{name}/rollout` takes: at least one of the two.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct RolloutChange {
    /// The canary's new share, 0 to 100 percentage points, written to the
    /// config (the other entries get the rest in their ratios).
    #[schema(minimum = 0, maximum = 100)]
    weight: Option<u32>,
    /// `running` (resume, or restart after a rollback or a promotion) or
    /// `paused`; only on the gateway that leads the rollouts.
    #[schema(pattern = "^(running|paused)$")]
    state: Option<String>,
}

/// A route's rollout: its weight, state, whether this gateway leads, and
/// the last windows' figures.
#[utoipa::path(
    get,
    path = "/routes/{name}/rollout",
    operation_id = "getRollout",
    params(("name" = String, Path, description = "the route's name")),
    responses(
        (status = 200, description = "the rollout", body = RolloutView),
        (status = 401, description = "no token, or an unknown one"),
        (status = 403, description = "a read token on a write"),
        (status = 404, description = "no such route"),
        (status = 409, description = "the route has no rollout"),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn get_rollout() {}

/// Set a rollout's weight and/or state: pause, resume, restart from a weight.
#[utoipa::path(
    put,
    path = "/routes/{name}/rollout",
    operation_id = "putRollout",
    params(("name" = String, Path, description = "the route's name")),
    request_body(content = RolloutChange, content_type = "application/json"),
    responses(
        (status = 200, description = "applied: the rollout now", body = RolloutView),
        (status = 400, description = "invalid: every problem with its JSON path"),
        (status = 401, description = "no token, or an unknown one"),
        (status = 403, description = "a read token on a write"),
        (status = 404, description = "no such route"),
        (status = 405, description = "the API is read-only (admin.read_only)"),
        (status = 409, description = "the route has no rollout, its split changed, or a state asked of a gateway that does not lead"),
        (status = 412, description = "someone else wrote the config first (etcd)"),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn put_rollout() {}

#[derive(OpenApi)]
#[openapi(
    paths(get_rollout, put_rollout),
    components(schemas(RolloutView, RolloutChange, Rule, State, Window, Side, Verdict))
)]
struct RolloutDoc;

/// Adds the rollout paths and schemas to `doc`.
pub(crate) fn add(doc: &mut utoipa::openapi::OpenApi) {
    doc.merge(RolloutDoc::openapi());
}
