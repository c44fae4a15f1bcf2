//! The live-state API: `GET /live` (the traffic of the gateway and of each
//! route, service and app over a recent window, the endpoints, the config
//! revision and a minute of per-second history) and `GET /live/endpoints`.
//!
//! A task samples the data plane's cumulative counters once a second and
//! keeps the last minute; a request compares a fresh sample with the one a
//! window ago. The task samples only while `/live` has been asked for in
//! the last [`sample::IDLE`], and reads the counters on a blocking thread (a table
//! of a million apps takes a while to walk). Nothing here runs on the
//! request path.

pub(crate) mod openapi;
mod sample;
mod view;
mod window;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Query;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use sluicegate_proxy::Shared;

use axum::http::StatusCode;

use crate::state::{error, AdminState};
use sample::{Sample, Samples, KEEP};

/// The window when a request names none.
const DEFAULT_WINDOW: u64 = 10;

/// The live routes, behind the admin tokens; starts the sampler.
pub(crate) fn routes(state: &AdminState) -> Router<AdminState> {
    let samples = Arc::new(Samples::default());
    let shared = state.shared.clone();
    let keep = samples.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            if !keep.wanted() {
                keep.clear();
                continue;
            }
            if let Ok(s) = take(&shared).await {
                keep.push(s);
            }
        }
    });
    let all = samples.clone();
    Router::new()
        .route("/live", get(move |s, q| live(s, q, all.clone())))
        .route(
            "/live/endpoints",
            get(
                |axum::extract::State(s): axum::extract::State<AdminState>| async move {
                    match take(&s.shared).await {
                        Ok(now) => Json(view::endpoints(&now.counts)).into_response(),
                        Err(resp) => resp,
                    }
                },
            ),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::auth::check,
        ))
}

/// A sample taken on a blocking thread.
async fn take(shared: &Arc<Shared>) -> Result<Sample, Response> {
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || Sample::take(&shared))
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))
}

#[derive(Deserialize)]
struct WindowQuery {
    /// Seconds, 1 to 60.
    window: Option<u64>,
}

async fn live(
    axum::extract::State(state): axum::extract::State<AdminState>,
    Query(q): Query<WindowQuery>,
    samples: Arc<Samples>,
) -> Response {
    let secs = q.window.unwrap_or(DEFAULT_WINDOW).clamp(1, KEEP as u64 - 1);
    samples.asked();
    let now = match take(&state.shared).await {
        Ok(now) => now,
        Err(resp) => return resp,
    };
    let history = samples.all();
    // The newest sample at least the window old, else the oldest there is.
    let old = history
        .iter()
        .rev()
        .find(|s| now.at.duration_since(s.at) >= Duration::from_secs(secs))
        .or(history.first());
    let body = view::live(&now, old.map(|s| &**s), &history);
    Json(body).into_response()
}
