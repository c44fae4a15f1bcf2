//! The live-state API's part of the OpenAPI document: its paths and the
//! schemas of the bodies in `view.rs`, merged into the admin API's.

use utoipa::OpenApi;

use super::view::{
    AppLive, CacheLive, EndpointLive, Endpoints, Live, Point, RouteLive, ServiceLive, SplitShare,
};
use super::window::{Classes, Traffic};

/// The gateway, its routes, services, apps and endpoints now.
#[utoipa::path(
    get,
    path = "/live",
    operation_id = "live",
    params(("window" = Option<u64>, Query, description = "seconds the rates and percentiles cover, 1 to 60 (default 10)")),
    responses(
        (status = 200, description = "live state", body = Live),
        (status = 400, description = "a malformed query"),
        (status = 401, description = "no token, or an unknown one"),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn live() {}

/// Each endpoint's health, circuit and ejection now.
#[utoipa::path(
    get,
    path = "/live/endpoints",
    operation_id = "liveEndpoints",
    responses(
        (status = 200, description = "the endpoints", body = Endpoints),
        (status = 401, description = "no token, or an unknown one"),
    ),
    security(("bearer" = []))
)]
#[allow(dead_code)]
fn live_endpoints() {}

#[derive(OpenApi)]
#[openapi(
    paths(live, live_endpoints),
    components(schemas(
        Live,
        Endpoints,
        RouteLive,
        SplitShare,
        CacheLive,
        ServiceLive,
        AppLive,
        EndpointLive,
        Point,
        Traffic,
        Classes
    ))
)]
struct LiveDoc;

/// Adds the live-state paths and schemas to `doc`.
pub(crate) fn add(doc: &mut utoipa::openapi::OpenApi) {
    doc.merge(LiveDoc::openapi());
}
