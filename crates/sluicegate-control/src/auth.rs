//! The admin API's gate: a request needs a known bearer token
//! (`tokens.rs`) when tokens are configured; a `read` token may only GET
//! (and HEAD), a `write` token may do everything.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluicegate_config::AdminRole;

use crate::state::{error, AdminState};

/// Lets a request through if it carries a token allowed to do what it asks.
pub(crate) async fn check(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    if state.tokens.is_empty() {
        return next.run(req).await;
    }
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    let Some(role) = token.and_then(|t| state.tokens.role(t.as_bytes())) else {
        let mut resp = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"sluicegate-admin\""),
        );
        return resp;
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if role == AdminRole::Read && !reads {
        return error(StatusCode::FORBIDDEN, "this token may only read").into_response();
    }
    next.run(req).await
}
