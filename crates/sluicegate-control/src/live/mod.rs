//! The live-state API: `GET /live` (the traffic of the gateway and of each
//! route, service and app over a recent window, the endpoints, the config
//! revision and a minute of per-second history) and `GET /live/endpoints`.
//!
//! A task samples the data plane's cumulative counters once a second and
//! keeps the last minute; a request compares a fresh sample with the one a
//! window ago. The task samples only while `/live` has been asked for in
//! the last [`IDLE`], and reads the counters on a blocking thread (a table
//! of a million apps takes a while to walk). Nothing here runs on the
//! request path.

pub(crate) mod openapi;
mod view;
mod window;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::Query;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use sluicegate_proxy::live::Counts;
use sluicegate_proxy::Shared;

use axum::http::StatusCode;

use crate::state::{error, AdminState};

/// Samples kept: one a second for a minute, and the one before.
const KEEP: usize = 61;
/// The window when a request names none.
const DEFAULT_WINDOW: u64 = 10;
/// Sampling stops this long after the last `/live`.
const IDLE: Duration = Duration::from_secs(120);

/// The counters at one moment.
pub(crate) struct Sample {
    at: Instant,
    /// Milliseconds since the Unix epoch.
    unix_ms: u64,
    counts: Counts,
}

impl Sample {
    fn take(shared: &Shared) -> Sample {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        Sample {
            at: Instant::now(),
            unix_ms,
            counts: shared.live(),
        }
    }
}

/// The samples of the last minute, oldest first.
#[derive(Default)]
pub(crate) struct Samples {
    ring: Mutex<VecDeque<Arc<Sample>>>,
    /// When `/live` was last asked for.
    asked: Mutex<Option<Instant>>,
}

impl Samples {
    fn push(&self, s: Sample) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == KEEP {
            ring.pop_front();
        }
        ring.push_back(Arc::new(s));
    }

    fn asked(&self) {
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn wanted(&self) -> bool {
        let asked = *self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.is_some_and(|t| t.elapsed() < IDLE)
    }

    fn all(&self) -> Vec<Arc<Sample>> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }
}

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
                keep.ring.lock().unwrap_or_else(|p| p.into_inner()).clear();
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
