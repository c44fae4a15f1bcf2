//! The HTTP cache's admin routes: `GET /cache` (the store's use, the
//! hit ratio of the caching routes, the routes holding the most) and
//! `POST /cache/purge` (objects removed by key, key prefix, tag and/or
//! route; with the config in etcd, also published for the whole fleet,
//! `etcd/purge.rs`). Both reach the store through the running snapshot
//! ([`sluicegate_proxy::cache_admin`]), on a blocking thread (a purge
//! walks every object).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use sluicegate_proxy::cache_admin;
use utoipa::ToSchema;

use super::common::{problems, JsonBody};
pub(crate) use crate::purge::purge_of;
use crate::state::{error, AdminState};

/// Routes listed in `GET /cache`, the most bytes first.
const TOP_ROUTES: usize = 10;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/cache", get(get_cache))
        .route("/cache/purge", post(purge))
}

/// `GET /cache`'s body.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CacheView {
    /// `cache.memory`, bytes.
    pub memory: u64,
    /// `cache.max_object`, bytes.
    pub max_object: u64,
    /// Bytes held, counted as the bound counts them (with each object's
    /// overhead).
    pub bytes: u64,
    pub objects: u64,
    pub evictions: u64,
    /// Lookups answered from memory and not, by every caching route.
    pub hits: u64,
    pub misses: u64,
    /// `hits / (hits + misses)`; 0 before any lookup.
    pub hit_ratio: f64,
    /// The routes holding the most bytes, the most first (10 at most).
    pub routes: Vec<RouteUseView>,
}

/// One route's objects.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RouteUseView {
    pub route: String,
    pub bytes: u64,
    pub objects: u64,
}

/// `POST /cache/purge`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Purged {
    /// Objects removed from this gateway's store.
    pub purged: usize,
    /// Whether the purge was published to the fleet through etcd (the
    /// config source is etcd): every gateway then applies it.
    pub fleet: bool,
    /// Why publishing failed (with status `503`; this gateway's objects
    /// are purged all the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /cache`: `404` when no route caches.
async fn get_cache(State(state): State<AdminState>) -> Response {
    let shared = state.shared.clone();
    let report = tokio::task::spawn_blocking(move || {
        cache_admin::report(&shared.snapshot.load(), TOP_ROUTES)
    })
    .await;
    let r = match report {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                "no route caches (no cache configured)",
            )
        }
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    };
    let lookups = r.hits + r.misses;
    let view = CacheView {
        memory: r.memory,
        max_object: r.max_object,
        bytes: r.bytes,
        objects: r.objects,
        evictions: r.evictions,
        hits: r.hits,
        misses: r.misses,
        hit_ratio: if lookups == 0 {
            0.0
        } else {
            r.hits as f64 / lookups as f64
        },
        routes: r
            .routes
            .into_iter()
            .map(|u| RouteUseView {
                route: u.route,
                bytes: u.bytes,
                objects: u.objects,
            })
            .collect(),
    };
    Json(view).into_response()
}

/// `POST /cache/purge`: removes the objects meeting every condition
/// given; `{"purged": N, "fleet": F}`, F whether the purge was also
/// published through etcd for the whole fleet (`503` when that failed).
/// A write token's (not a config write: `admin.read_only` does not
/// refuse it); `404` when no route caches.
async fn purge(State(state): State<AdminState>, JsonBody(body): JsonBody) -> Response {
    let what = match purge_of(&body) {
        Ok(p) => p,
        Err(issues) => return problems(StatusCode::BAD_REQUEST, "invalid purge", issues),
    };
    let shared = state.shared.clone();
    let purged =
        tokio::task::spawn_blocking(move || cache_admin::purge(&shared.snapshot.load(), &what))
            .await;
    match purged {
        Ok(Some(n)) => {
            tracing::info!(purged = n, "cache: purged through the admin API");
            let Some(etcd) = &state.etcd else {
                return Json(Purged {
                    purged: n,
                    fleet: false,
                    error: None,
                })
                .into_response();
            };
            match etcd.fleet.publish(&body).await {
                Ok(()) => Json(Purged {
                    purged: n,
                    fleet: true,
                    error: None,
                })
                .into_response(),
                Err(e) => {
                    tracing::warn!(error = %e, "cache: a purge was not published to the fleet");
                    let answer = Purged {
                        purged: n,
                        fleet: false,
                        error: Some(e),
                    };
                    (StatusCode::SERVICE_UNAVAILABLE, Json(answer)).into_response()
                }
            }
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "no route caches (no cache configured)",
        ),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// What `POST /cache/purge` takes: at least one; the objects meeting
/// every one given are removed.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct PurgeBody {
    /// The key, its parts run together (the default key, host, path and
    /// query: `example.com/a?b=1`).
    key: Option<String>,
    /// A prefix of the key, its parts run together.
    prefix: Option<String>,
    /// One of the object's tags (its route's `tags_header` values).
    tag: Option<String>,
    /// The route that stored it.
    route: Option<String>,
}

/// The cache: its use, the hit ratio, the routes holding the most.
#[utoipa::path(
    get,
    path = "/cache",
    operation_id = "getCache",
    responses(
        (status = 200, description = "the cache", body = CacheView),
        (status = 401, description = "no token, or an unknown one"),
        (status = 404, description = "no route caches"),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn get_cache_doc() {}

/// Removes the objects meeting every condition given.
#[utoipa::path(
    post,
    path = "/cache/purge",
    operation_id = "purgeCache",
    request_body = PurgeBody,
    responses(
        (status = 200, description = "how many were removed here, and whether the purge was published to the fleet (config in etcd)", body = Purged),
        (status = 400, description = "no condition, or one that is not a non-empty string (problems name the field)"),
        (status = 401, description = "no token, or an unknown one"),
        (status = 403, description = "a read token on a write"),
        (status = 404, description = "no route caches"),
        (status = 503, description = "purged here, but etcd could not be reached to carry the purge to the fleet", body = Purged),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn purge_doc() {}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(get_cache_doc, purge_doc),
    components(schemas(CacheView, RouteUseView, Purged, PurgeBody))
)]
struct CacheDoc;

/// Adds the cache's paths and schemas to `doc`.
pub(crate) fn add(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::OpenApi;
    doc.merge(CacheDoc::openapi());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_purge_names_at_least_one_condition_each_a_string() {
        let p = purge_of(&json!({"tag": "t1", "route": "c"})).unwrap();
        assert_eq!(p.tag.as_deref(), Some(&b"t1"[..]));
        assert_eq!(p.route.as_deref(), Some("c"));
        let paths = |v: Value| -> Vec<String> {
            purge_of(&v)
                .unwrap_err()
                .into_iter()
                .map(|i| i.path)
                .collect()
        };
        assert_eq!(paths(json!({})), ["$"]);
        assert_eq!(paths(json!([])), ["$"]);
        assert_eq!(paths(json!({"prefix": 3})), ["$.prefix"]);
        assert_eq!(paths(json!({"key": ""})), ["$.key"]);
        assert_eq!(paths(json!({"tags": "a"})), ["$.tags"]);
    }
}
