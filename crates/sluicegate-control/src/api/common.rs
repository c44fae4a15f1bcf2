//! What the API's handlers share: reading a body as JSON or as a config
//! document, running work on the reloader off the runtime thread, the
//! `405` of a read-only API, and writing an edited document with its
//! answers (the new revision, or `400` / `412` / `500`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sluicegate_config::Document;

use crate::history::Issue;
use crate::publish::{IfMatch, WriteError};
use crate::reload::Reloader;
use crate::state::{error, etag_of, AdminState};

/// Runs `f` on the reloader in a blocking thread: a write compiles a whole
/// snapshot, which must not hold up the runtime's other tasks.
pub(crate) async fn on_reloader<T: Send + 'static>(
    state: &AdminState,
    f: impl FnOnce(&mut Reloader) -> T + Send + 'static,
) -> Result<T, Box<Response>> {
    let reloader = state.reloader.clone();
    tokio::task::spawn_blocking(move || f(&mut Reloader::locked(&reloader)))
        .await
        .map_err(|_| Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")))
}

/// Whether `headers` say the body is YAML.
pub(crate) fn is_yaml(headers: &HeaderMap, name: header::HeaderName) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("yaml"))
}

/// The request body as JSON; malformed: `400`, too large: `413`.
pub(crate) fn json_body(
    body: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Value, Box<Response>> {
    let bytes = body.map_err(|r| Box::new(error(r.status(), &r.body_text())))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Box::new(problems(
            StatusCode::BAD_REQUEST,
            "malformed JSON",
            vec![Issue {
                path: "$".to_string(),
                message: e.to_string(),
            }],
        ))
    })
}

/// A request body read as JSON, as [`json_body`] reads it: a handler's
/// last argument, answering `400` or `413` in its place.
pub(crate) struct JsonBody(pub serde_json::Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let body = Bytes::from_request(req, state).await;
        json_body(body).map(JsonBody).map_err(|resp| *resp)
    }
}

/// The request body as a document: YAML when its `Content-Type` says so,
/// JSON otherwise.
pub(crate) fn document_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Document, Box<Response>> {
    if !is_yaml(headers, header::CONTENT_TYPE) {
        return json_body(body).map(|v| Document::from_json(&v));
    }
    let bytes = body.map_err(|r| Box::new(error(r.status(), &r.body_text())))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        let issue = Issue {
            path: "$".to_string(),
            message: "the YAML body is not UTF-8".to_string(),
        };
        Box::new(problems(
            StatusCode::BAD_REQUEST,
            "malformed YAML",
            vec![issue],
        ))
    })?;
    Document::from_yaml(text).map_err(|p| {
        Box::new(problems(
            StatusCode::BAD_REQUEST,
            "malformed YAML",
            vec![Issue {
                path: p.path,
                message: p.message,
            }],
        ))
    })
}

/// `{"error","status","problems":[{path,message}]}`.
pub(crate) fn problems(status: StatusCode, what: &str, issues: Vec<Issue>) -> Response {
    let body = json!({ "error": what, "status": status.as_u16(), "problems": issues });
    (status, Json(body)).into_response()
}

/// The `If-Match` of a request, if any.
pub(crate) fn if_match(headers: &HeaderMap) -> Option<IfMatch> {
    headers
        .get(header::IF_MATCH)
        .map(|v| IfMatch::parse(v.to_str().unwrap_or("")))
}

/// `405` when the API is read-only.
pub(crate) fn writable(state: &AdminState) -> Result<(), Box<Response>> {
    if state.read_only {
        let mut resp = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "the admin API is read-only (admin.read_only)",
        );
        resp.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return Err(Box::new(resp));
    }
    Ok(())
}

/// What an edit of the running document answers: its status and body.
type Edited = Result<(StatusCode, serde_json::Value), Box<Response>>;

/// Edits the running document with `edit`, then validates, saves and
/// applies the result (if `If-Match` allows), all under the reloader's
/// lock; answers the edit's status and body with the new revision, or the
/// error. A stale `If-Match` is `412` before the edit is tried.
pub(crate) async fn write_edit(
    state: &AdminState,
    headers: &HeaderMap,
    edit: impl FnOnce(&mut Document) -> Edited + Send + 'static,
) -> Response {
    if let Err(resp) = writable(state) {
        return *resp;
    }
    let cond = if_match(headers);
    let done = on_reloader(state, move |r| {
        if cond.as_ref().is_some_and(|m| !m.matches(r.revision())) {
            return Err(Box::new(write_error(WriteError::Stale)));
        }
        let mut doc = r
            .document()
            .map(|d| (*d).clone())
            .map_err(|e| Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, &e)))?;
        let (status, body) = edit(&mut doc)?;
        let revision = r
            .write(doc, cond.as_ref())
            .map_err(|e| Box::new(write_error(e)))?;
        Ok((status, body, revision))
    })
    .await;
    match done {
        Err(resp) | Ok(Err(resp)) => *resp,
        Ok(Ok((status, body, revision))) => written(status, body, revision),
    }
}

/// The answer to an applied write: its status and body, with the new
/// revision in the body and as the `ETag`.
pub(crate) fn written(status: StatusCode, mut body: serde_json::Value, revision: u64) -> Response {
    if let Some(obj) = body.as_object_mut() {
        obj.insert("revision".to_string(), revision.into());
    }
    let mut resp = (status, Json(body)).into_response();
    resp.headers_mut().insert(header::ETAG, etag_of(revision));
    resp
}

pub(crate) fn write_error(e: WriteError) -> Response {
    match e {
        WriteError::Stale => error(
            StatusCode::PRECONDITION_FAILED,
            "If-Match does not name the running config revision (see ETag)",
        ),
        WriteError::Invalid(issues) => problems(StatusCode::BAD_REQUEST, "invalid config", issues),
        WriteError::Io(message) => error(StatusCode::INTERNAL_SERVER_ERROR, &message),
    }
}
