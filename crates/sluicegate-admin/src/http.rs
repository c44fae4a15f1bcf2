//! The admin HTTP listener, served with axum on the process's own runtime
//! (never a data-plane worker's): `GET /metrics` (Prometheus text format),
//! `GET /healthz`, `GET /openapi.json` (open, like those two), and the
//! admin API (`api/`), behind the bearer tokens of `auth.rs`. Every response carries the config revision as its `ETag`.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sluicegate_proxy::Shared;
use tokio::net::TcpListener;

use crate::auth::Tokens;
use crate::reload::Reloader;

/// What the admin handlers share.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub shared: Arc<Shared>,
    pub reloader: Arc<Mutex<Reloader>>,
    pub tokens: Arc<Tokens>,
    /// `admin.read_only`: writes answer 405.
    pub read_only: bool,
}

/// How the admin listener runs.
pub struct AdminSetup {
    pub shared: Arc<Shared>,
    /// The reloader the signal loop uses too: writes go through it.
    pub reloader: Arc<Mutex<Reloader>>,
    pub tokens: Tokens,
    pub read_only: bool,
}

/// Serves the admin listener until the runtime stops.
pub async fn serve(listener: TcpListener, setup: AdminSetup) {
    let state = AdminState {
        shared: setup.shared,
        reloader: setup.reloader,
        tokens: Arc::new(setup.tokens),
        read_only: setup.read_only,
    };
    if let Err(e) = axum::serve(listener, router(state)).await {
        tracing::error!(error = %e, "admin listener stopped");
    }
}

fn router(state: AdminState) -> Router {
    let api = crate::api::routes().route_layer(middleware::from_fn_with_state(
        state.clone(),
        crate::auth::check,
    ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(crate::api::openapi_json))
        .merge(api)
        .merge(crate::live::routes(&state))
        .merge(crate::ui::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), etag))
        .layer(middleware::from_fn(too_large))
        .layer(axum::extract::DefaultBodyLimit::max(crate::api::MAX_BODY))
        .with_state(state)
}

/// A JSON error answer as the gateway writes them: `{"error","status"}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "{{\"error\":{},\"status\":{}}}\n",
        serde_json::Value::from(message),
        status.as_u16()
    );
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The `ETag` of revision `revision`.
pub(crate) fn etag_of(revision: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{revision}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

/// Answers `413` at once to a request whose `Content-Length` is over the
/// limit (a body without one is cut off at the limit as it is read).
async fn too_large(req: Request, next: Next) -> Response {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n > crate::api::MAX_BODY as u64) {
        let message = format!("the body is over {} bytes", crate::api::MAX_BODY);
        return error(StatusCode::PAYLOAD_TOO_LARGE, &message);
    }
    next.run(req).await
}

/// Gives a response without an `ETag` the running revision's.
async fn etag(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    if !resp.headers().contains_key(header::ETAG) {
        let revision = state.shared.snapshot.load().generation;
        resp.headers_mut().insert(header::ETAG, etag_of(revision));
    }
    resp
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.shared.render_metrics(),
    )
        .into_response()
}

async fn healthz(State(state): State<AdminState>) -> Response {
    let generation = state.shared.snapshot.load().generation;
    let body = format!("{{\"status\":\"ok\",\"config_generation\":{generation}}}\n");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

async fn method_not_allowed() -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}
