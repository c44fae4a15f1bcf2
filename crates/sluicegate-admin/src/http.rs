//! The admin HTTP listener, served with axum: `GET /metrics` (Prometheus
//! text format) and `GET /healthz`, on the process's own runtime (never a
//! data-plane worker's).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sluicegate_proxy::Shared;
use tokio::net::TcpListener;

/// Serves the admin listener until the runtime stops.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    if let Err(e) = axum::serve(listener, router(shared)).await {
        tracing::error!(error = %e, "admin listener stopped");
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared)
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

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.render_metrics(),
    )
        .into_response()
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    let generation = shared.snapshot.load().generation;
    let body = format!("{{\"status\":\"ok\",\"config_generation\":{generation}}}\n");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

async fn method_not_allowed() -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}
