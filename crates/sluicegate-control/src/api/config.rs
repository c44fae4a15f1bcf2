//! `/config`: the whole config at once. `GET` answers it as JSON, or YAML
//! when `Accept` asks for it; `PUT` replaces it atomically (the declarative
//! mode, e.g. from CI); `POST /config/validate` checks a config without
//! applying it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use sluicegate_config::Document;

use super::common::{document_body, is_yaml, on_reloader, problems, writable, write_edit};
use super::secrets;
use crate::state::{error, etag_of, AdminState};

/// `GET /config`.
pub(crate) async fn get_config(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    let got = on_reloader(&state, |r| (r.document(), r.revision())).await;
    let (doc, revision) = match got {
        Ok((Ok(doc), revision)) => (doc, revision),
        Ok((Err(e), _)) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        Err(resp) => return *resp,
    };
    let mut shown = doc.to_json();
    secrets::redact_config(&mut shown);
    let mut resp = if is_yaml(&headers, header::ACCEPT) {
        let text = Document::from_json(&shown).to_yaml();
        ([(header::CONTENT_TYPE, "application/yaml")], text).into_response()
    } else {
        Json(shown).into_response()
    };
    resp.headers_mut().insert(header::ETAG, etag_of(revision));
    resp
}

/// `PUT /config`: the body (JSON, or YAML by `Content-Type`) replaces the
/// whole config. App secrets given as their fingerprints keep their value.
pub(crate) async fn put_config(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(resp) = writable(&state) {
        return *resp;
    }
    let doc = match document_body(&headers, body) {
        Ok(d) => d,
        Err(resp) => return *resp,
    };
    write_edit(&state, &headers, move |running| {
        *running = with_secrets(doc, running);
        Ok((StatusCode::OK, json!({ "applied": true })))
    })
    .await
}

/// `doc` with the fingerprints of `running`'s app secrets replaced by the
/// secrets. Left as given (a YAML key given twice still refused) when it
/// holds none.
fn with_secrets(doc: Document, running: &Document) -> Document {
    let known = secrets::known(running.get("apps").as_ref());
    let mut new = doc.to_json();
    if secrets::restore_config(&mut new, &known) {
        Document::from_json(&new)
    } else {
        doc
    }
}

/// `POST /config/validate`: `200 {"valid":true}` or `400` with every
/// problem; fingerprints stand for their secrets as in `PUT`.
pub(crate) async fn validate(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let doc = match document_body(&headers, body) {
        Ok(d) => d,
        Err(resp) => return *resp,
    };
    let check = move |r: &mut crate::reload::Reloader| {
        let doc = match r.document() {
            Ok(running) => with_secrets(doc, &running),
            Err(_) => doc,
        };
        r.validate(&doc).map(|_| ())
    };
    match on_reloader(&state, check).await {
        Ok(Ok(())) => Json(json!({ "valid": true })).into_response(),
        Ok(Err(issues)) => problems(StatusCode::BAD_REQUEST, "invalid config", issues),
        Err(resp) => *resp,
    }
}
