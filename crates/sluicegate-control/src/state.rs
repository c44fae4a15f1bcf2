//! What the admin listener's handlers and layers share: their state, the
//! JSON error answer, and the `ETag` of a revision.

use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluicegate_proxy::Shared;

use crate::reload::Reloader;
use crate::tokens::Tokens;

/// What the admin handlers share.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub shared: Arc<Shared>,
    pub reloader: Arc<Mutex<Reloader>>,
    pub tokens: Arc<Tokens>,
    /// `admin.read_only`: writes answer 405.
    pub read_only: bool,
    /// The etcd source's metrics, in etcd mode.
    pub etcd: Option<Arc<crate::etcd::Status>>,
    /// The rollouts' state (`rollout/`).
    pub rollouts: Arc<crate::rollout::Board>,
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
