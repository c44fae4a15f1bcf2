//! The admin REST API's routes: the whole config (`config.rs`), one
//! resource at a time (`resources.rs`), the reload history and the OpenAPI
//! document (`openapi.rs`), the HTTP cache's report and purges
//! (`cache.rs`); the helpers the handlers share are in `common.rs`.

mod cache;
mod common;
mod config;
mod openapi;
mod patch;
mod resources;
mod rollout;
mod rollout_openapi;
mod secrets;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::state::AdminState;

/// Largest request body the API reads; over it: `413`.
pub(crate) const MAX_BODY: usize = 32 * 1024 * 1024;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/config", get(config::get_config).put(config::put_config))
        .route("/config/validate", post(config::validate))
        .route("/reloads", get(reloads))
        .merge(resources::routes())
        .merge(rollout::routes())
        .merge(cache::routes())
}

/// `GET /openapi.json`: the API's OpenAPI 3.1 document.
pub(crate) async fn openapi_json() -> Response {
    Json(openapi::document()).into_response()
}

/// `GET /reloads`: the reload history, newest first.
async fn reloads(State(state): State<AdminState>) -> Response {
    match common::on_reloader(&state, |r| r.history().newest_first()).await {
        Ok(entries) => Json(json!({ "reloads": entries })).into_response(),
        Err(resp) => *resp,
    }
}
