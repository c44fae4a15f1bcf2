//! One resource at a time: services, routes, apps and plans, each listed
//! (paged, filtered by name), read, created or replaced (`PUT`), patched
//! (JSON merge patch) and deleted by name; the global settings (every
//! top-level key but those four) read, replaced and patched as one object;
//! and the listeners' certificates listed.
//!
//! Each change edits the running document under the reloader's lock and is
//! written as a whole config (`write_edit`), so it is validated, saved and
//! applied like `PUT /config`: deleting a service a route still uses is a
//! `400` naming the route's field.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sluicegate_config::Document;

use super::common::{
    if_match, on_reloader, problems, writable, write_edit, write_error, written, JsonBody,
};
use super::patch::Edit;
use super::secrets;
use crate::history::Issue;
use crate::source::PageOf;
use crate::state::{error, etag_of, AdminState};

/// Items a list answers when `limit` is not given, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// The top-level keys that are resources of their own (not settings).
pub(crate) const SECTIONS: [&str; 4] = sluicegate_config::schema::SECTIONS;

/// A kind of named resource: its top-level key and where its name is.
#[derive(Clone, Copy)]
pub(crate) struct Kind {
    section: &'static str,
    /// The item's name key in a list (`name`, `id`); `None`: the section
    /// is a mapping from name to item (`plans`).
    key: Option<&'static str>,
}

const KINDS: [Kind; 4] = [
    Kind {
        section: "services",
        key: Some("name"),
    },
    Kind {
        section: "routes",
        key: Some("name"),
    },
    Kind {
        section: "apps",
        key: Some("id"),
    },
    Kind {
        section: "plans",
        key: None,
    },
];

pub(crate) fn routes() -> Router<AdminState> {
    let mut r = Router::new()
        .route(
            "/settings",
            get(get_settings)
                .put(|s, h, b| write_settings(Edit::Replace, s, h, b))
                .patch(|s, h, b| write_settings(Edit::Merge, s, h, b)),
        )
        .route("/certificates", get(certificates));
    for kind in KINDS {
        r = r
            .route(
                &format!("/{}", kind.section),
                get(move |s, q| list(kind, s, q)),
            )
            .route(
                &format!("/{}/{{name}}", kind.section),
                get(move |s, n| get_one(kind, s, n))
                    .put(move |s, n, h, b| write_one(kind, Edit::Replace, s, n, h, b))
                    .patch(move |s, n, h, b| write_one(kind, Edit::Merge, s, n, h, b))
                    .delete(move |s, n, h| delete_one(kind, s, n, h)),
            );
    }
    r
}

/// The items of `kind` in `doc`, each with its name (a plan gets `name`).
fn items(doc: &Document, kind: Kind) -> Vec<(String, Value)> {
    let section = doc.get(kind.section);
    match (kind.key, section) {
        (Some(key), Some(Value::Array(list))) => list
            .into_iter()
            .map(|item| {
                (
                    item.get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    item,
                )
            })
            .collect(),
        (None, Some(Value::Object(map))) => map
            .into_iter()
            .map(|(name, item)| {
                let mut shown = Map::new();
                shown.insert("name".to_string(), Value::String(name.clone()));
                if let Value::Object(fields) = item {
                    shown.extend(fields);
                }
                (name, Value::Object(shown))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An object kept in etcd as the API shows it: with its name (`name` or
/// `id` in a list kind; `name` first for a plan).
fn with_name(kind: Kind, name: String, object: Value) -> Value {
    let mut shown = Map::new();
    shown.insert(kind.key.unwrap_or("name").to_string(), Value::String(name));
    if let Value::Object(fields) = object {
        for (k, v) in fields {
            shown.entry(k).or_insert(v);
        }
    }
    Value::Object(shown)
}

/// Writes `items` back as `kind`'s section (removed when empty).
fn store(doc: &mut Document, kind: Kind, items: Vec<(String, Value)>) {
    if items.is_empty() {
        doc.set(kind.section, None);
        return;
    }
    let section = match kind.key {
        Some(_) => Value::Array(items.into_iter().map(|(_, v)| v).collect()),
        None => Value::Object(
            items
                .into_iter()
                .map(|(name, mut v)| {
                    if let Value::Object(m) = &mut v {
                        m.remove("name");
                    }
                    (name, v)
                })
                .collect(),
        ),
    };
    doc.set(kind.section, Some(&section));
}

/// `item` as a read shows it (secrets as fingerprints).
fn shown(kind: Kind, mut item: Value) -> Value {
    if kind.section == "apps" {
        secrets::redact_app(&mut item);
    }
    item
}

fn bad(path: &str, message: &str) -> Box<Response> {
    let issue = Issue {
        path: path.to_string(),
        message: message.to_string(),
    };
    Box::new(problems(
        StatusCode::BAD_REQUEST,
        "invalid request",
        vec![issue],
    ))
}

fn missing(kind: Kind, name: &str) -> Box<Response> {
    let message = format!("no {} named {name:?}", kind.section);
    Box::new(error(StatusCode::NOT_FOUND, &message))
}

#[derive(Deserialize)]
pub(crate) struct Page {
    limit: Option<usize>,
    offset: Option<usize>,
    /// Items whose name contains this text.
    name: Option<String>,
}

/// The running document and revision.
async fn running(state: &AdminState) -> Result<(Arc<Document>, u64), Box<Response>> {
    match on_reloader(state, |r| (r.document(), r.revision())).await? {
        (Ok(doc), rev) => Ok((doc, rev)),
        (Err(e), _) => Err(Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, &e))),
    }
}

fn with_etag(body: Value, revision: u64) -> Response {
    let mut resp = Json(body).into_response();
    resp.headers_mut()
        .insert(axum::http::header::ETAG, etag_of(revision));
    resp
}

/// `GET /{kind}?limit=&offset=&name=`.
async fn list(
    kind: Kind,
    State(state): State<AdminState>,
    page: Result<Query<Page>, QueryRejection>,
) -> Response {
    let page = match page {
        Ok(Query(page)) => page,
        Err(e) => {
            let message = format!("limit and offset are whole numbers: {}", e.body_text());
            return *bad("$", &message);
        }
    };
    let limit = page.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT);
    let offset = page.offset.unwrap_or(0);
    // In etcd mode a page is read from the objects: no document of a
    // million apps is made to show a hundred.
    let filter = page.name.clone();
    let from_etcd = on_reloader(&state, move |r| {
        let got = r.page(&PageOf {
            section: kind.section,
            filter: filter.as_deref(),
            offset,
            limit,
        });
        (got, r.revision())
    })
    .await;
    if let Ok((Some((total, got)), revision)) = from_etcd {
        let page_items: Vec<Value> = got
            .into_iter()
            .map(|(name, v)| shown(kind, with_name(kind, name, v)))
            .collect();
        return with_etag(
            json!({ "items": page_items, "total": total, "offset": offset, "limit": limit }),
            revision,
        );
    }
    let (doc, revision) = match running(&state).await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let all: Vec<(String, Value)> = items(&doc, kind)
        .into_iter()
        .filter(|(name, _)| page.name.as_deref().is_none_or(|n| name.contains(n)))
        .collect();
    let total = all.len();
    let page_items: Vec<Value> = all
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(_, v)| shown(kind, v))
        .collect();
    with_etag(
        json!({ "items": page_items, "total": total, "offset": offset, "limit": limit }),
        revision,
    )
}

/// `GET /{kind}/{name}`.
async fn get_one(
    kind: Kind,
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Response {
    let wanted = name.clone();
    let from_etcd = on_reloader(&state, move |r| {
        (r.item(kind.section, &wanted), r.revision())
    })
    .await;
    if let Ok((Some(got), revision)) = from_etcd {
        return match got {
            Some(v) => with_etag(shown(kind, with_name(kind, name, v)), revision),
            None => *missing(kind, &name),
        };
    }
    let (doc, revision) = match running(&state).await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    match items(&doc, kind).into_iter().find(|(n, _)| *n == name) {
        Some((_, item)) => with_etag(shown(kind, item), revision),
        None => *missing(kind, &name),
    }
}

/// Checks a `PUT` or `PATCH` result: an object named `name`.
fn named(kind: Kind, name: &str, mut item: Value) -> Result<Value, Box<Response>> {
    let key = kind.key.unwrap_or("name");
    let Value::Object(fields) = &mut item else {
        return Err(bad(
            "$",
            &format!("expected an object (one of {})", kind.section),
        ));
    };
    match fields.get(key) {
        None => {
            fields.insert(key.to_string(), Value::String(name.to_string()));
        }
        Some(Value::String(n)) if n == name => {}
        Some(_) => {
            let message =
                format!("must be {name:?}, the name in the path (renaming is a DELETE and a PUT)");
            return Err(bad(&format!("$.{key}"), &message));
        }
    }
    Ok(item)
}

/// The item a `PUT` or `PATCH` of `name` makes from the request's body
/// and the current item (`None`: there is none, a `404` for a `PATCH`):
/// checked to be an object named `name`, an app's secrets given as
/// fingerprints restored from `known`.
fn made(
    kind: Kind,
    edit: Edit,
    name: &str,
    current: Option<Value>,
    body: Value,
    known: &HashMap<String, String>,
) -> Result<Value, Box<Response>> {
    let current = match current {
        Some(item) => item,
        None if edit == Edit::Merge => return Err(missing(kind, name)),
        None => Value::Null,
    };
    let mut item = named(kind, name, edit.apply(current, body))?;
    if kind.section == "apps" {
        secrets::restore_app(&mut item, known);
    }
    Ok(item)
}

/// `PUT /{kind}/{name}` creates (`201`) or replaces (`200`) the item;
/// `PATCH` merges the body into it (JSON merge patch) and is otherwise
/// the same write.
async fn write_one(
    kind: Kind,
    edit: Edit,
    State(state): State<AdminState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    JsonBody(value): JsonBody,
) -> Response {
    if kind.section == "apps" {
        let op = AppOp::Write(edit, value.clone());
        if let Some(resp) = write_app(&state, &headers, &name, op).await {
            return resp;
        }
    }
    write_edit(&state, &headers, move |doc| {
        let mut all = items(doc, kind);
        // Only apps have secrets to restore.
        let known = match kind.section {
            "apps" => secrets::known(doc.get("apps").as_ref()),
            _ => HashMap::new(),
        };
        let at = all.iter().position(|(n, _)| *n == name);
        let current = at.map(|i| all[i].1.take());
        let item = made(kind, edit, &name, current, value, &known)?;
        let status = match at {
            Some(i) => {
                all[i].1 = item;
                StatusCode::OK
            }
            None => {
                all.push((name.clone(), item));
                StatusCode::CREATED
            }
        };
        store(doc, kind, all);
        Ok((status, json!({ "name": name })))
    })
    .await
}

/// `DELETE /{kind}/{name}`.
async fn delete_one(
    kind: Kind,
    State(state): State<AdminState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if kind.section == "apps" {
        if let Some(resp) = write_app(&state, &headers, &name, AppOp::Delete).await {
            return resp;
        }
    }
    write_edit(&state, &headers, move |doc| {
        let mut all = items(doc, kind);
        let before = all.len();
        all.retain(|(n, _)| *n != name);
        if all.len() == before {
            return Err(missing(kind, &name));
        }
        store(doc, kind, all);
        Ok((StatusCode::OK, json!({ "deleted": name })))
    })
    .await
}

/// A write of one app: a `PUT` or `PATCH` with its body, or a `DELETE`.
enum AppOp {
    Write(Edit, Value),
    Delete,
}

/// A write of one app in etcd mode, checked and written alone (as one
/// key, applied in place: no whole document is built, so it costs the
/// same with a million apps as with ten); problems are at the body's
/// paths. `None`: the write needs the whole document (file mode, the
/// file's apps in force, an app with `mtls`, or no such app to patch or
/// delete), and the caller takes the usual way.
async fn write_app(
    state: &AdminState,
    headers: &HeaderMap,
    name: &str,
    op: AppOp,
) -> Option<Response> {
    let kind = KINDS[2];
    if let Err(resp) = writable(state) {
        return Some(*resp);
    }
    let cond = if_match(headers);
    let name = name.to_string();
    let done = on_reloader(state, move |r| {
        let old = r.app(&name)?;
        let known = secrets::known(old.clone().map(|o| Value::Array(vec![o])).as_ref());
        let (status, new, body) = match op {
            AppOp::Delete => {
                old.as_ref()?;
                (StatusCode::OK, None, json!({ "deleted": name }))
            }
            AppOp::Write(edit, value) => {
                // An app not in etcd may still be the file's: patched the
                // usual way.
                if edit == Edit::Merge && old.is_none() {
                    return None;
                }
                let status = if old.is_some() {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                match made(kind, edit, &name, old, value, &known) {
                    Ok(item) => (status, Some(item), json!({ "name": name })),
                    Err(resp) => return Some(Err(resp)),
                }
            }
        };
        let written = r.write_app(&name, new, cond.as_ref())?;
        Some(
            written
                .map(|revision| (status, body, revision))
                .map_err(|e| Box::new(write_error(e))),
        )
    })
    .await;
    match done {
        Err(resp) | Ok(Some(Err(resp))) => Some(*resp),
        Ok(None) => None,
        Ok(Some(Ok((status, body, revision)))) => Some(written(status, body, revision)),
    }
}

/// The settings: every top-level key but the resource sections.
fn settings(doc: &Document) -> Value {
    Value::Object(
        doc.keys()
            .into_iter()
            .filter(|k| !SECTIONS.contains(&k.as_str()))
            .filter_map(|k| doc.get(&k).map(|v| (k, v)))
            .collect(),
    )
}

/// Replaces the settings of `doc` with `new` (an object).
fn set_settings(doc: &mut Document, new: &Value) -> Result<(), Box<Response>> {
    let Value::Object(fields) = new else {
        return Err(bad("$", "expected an object of top-level settings"));
    };
    if let Some(k) = fields.keys().find(|k| SECTIONS.contains(&k.as_str())) {
        return Err(bad(&format!("$.{k}"), &format!("not a setting: use /{k}")));
    }
    for k in doc.keys() {
        if !SECTIONS.contains(&k.as_str()) {
            doc.set(&k, None);
        }
    }
    for (k, v) in fields {
        doc.set(k, Some(v));
    }
    Ok(())
}

/// `GET /settings`.
async fn get_settings(State(state): State<AdminState>) -> Response {
    match running(&state).await {
        Ok((doc, revision)) => with_etag(settings(&doc), revision),
        Err(resp) => *resp,
    }
}

/// `PUT /settings` replaces every setting (those left out go back to
/// their defaults); `PATCH` merges the body into them (JSON merge patch).
async fn write_settings(
    edit: Edit,
    State(state): State<AdminState>,
    headers: HeaderMap,
    JsonBody(value): JsonBody,
) -> Response {
    write_edit(&state, &headers, move |doc| {
        let new = edit.apply(settings(doc), value);
        set_settings(doc, &new)?;
        Ok((StatusCode::OK, json!({})))
    })
    .await
}

/// `GET /certificates`: every listener's certificates (read only; they
/// are changed with the listener, in `/settings`).
async fn certificates(State(state): State<AdminState>) -> Response {
    let (doc, revision) = match running(&state).await {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    let mut out = Vec::new();
    if let Some(Value::Array(listeners)) = doc.get("listen") {
        for (i, l) in listeners.iter().enumerate() {
            let Some(tls) = l.get("tls") else { continue };
            let default = tls.get("default").and_then(Value::as_str);
            if let Some(Value::Array(certs)) = tls.get("certificates") {
                for (j, c) in certs.iter().enumerate() {
                    let cert = c.get("cert").and_then(Value::as_str);
                    out.push(json!({
                        "listener": l.get("addr"),
                        "path": format!("$.listen[{i}].tls.certificates[{j}]"),
                        "cert": cert,
                        "key": c.get("key"),
                        "default": default.map_or(j == 0, |d| Some(d) == cert),
                    }));
                }
            }
        }
    }
    with_etag(json!({ "items": out, "total": out.len() }), revision)
}
