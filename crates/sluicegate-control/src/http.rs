//! The admin HTTP listener, served with axum (over hyper's HTTP/1.1, with
//! a header read timeout) on the process's own runtime (never a data-plane
//! worker's): `GET /metrics` (Prometheus text format),
//! `GET /healthz`, `GET /openapi.json` (open, like those two), and the
//! admin API (`api/`), behind the bearer tokens of `auth.rs`. Every response carries the config revision as its `ETag`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use sluicegate_proxy::Shared;
use tokio::net::TcpListener;

use crate::reload::Reloader;
use crate::state::{error, etag_of, AdminState};
use crate::tls::AdminTls;
use crate::tokens::Tokens;

/// How the admin listener runs.
pub struct AdminSetup {
    pub shared: Arc<Shared>,
    /// The reloader the signal loop uses too: writes go through it.
    pub reloader: Arc<Mutex<Reloader>>,
    pub tokens: Tokens,
    pub read_only: bool,
    pub etcd: Option<Arc<crate::etcd::Status>>,
    /// `admin.tls`: HTTPS instead of plain HTTP.
    pub tls: Option<AdminTls>,
}

/// Longest a client may take to send a request head (or to start the next
/// one on a kept-alive connection), as the admin listener always allowed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one connection lives: a client that trickles a body cannot hold
/// a connection (and a file descriptor) for longer.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Serves the admin listener until the runtime stops: HTTP/1.1 with
/// keep-alive, each connection bounded by [`HEADER_TIMEOUT`] and
/// [`CONNECTION_LIFETIME`].
pub async fn serve(listener: TcpListener, setup: AdminSetup) {
    let rollouts = Reloader::locked(&setup.reloader).rollouts();
    let state = AdminState {
        rollouts,
        shared: setup.shared,
        reloader: setup.reloader,
        tokens: Arc::new(setup.tokens),
        read_only: setup.read_only,
        etcd: setup.etcd,
    };
    let app = router(state);
    let mut tls = setup.tls;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        let acceptor = tls.as_mut().map(AdminTls::acceptor);
        tokio::spawn(async move {
            let Some(acceptor) = acceptor else {
                return serve_connection(stream, service).await;
            };
            // The handshake gets the time a request head gets.
            match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(stream, service).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "admin TLS handshake failed"),
                Err(_) => tracing::debug!("admin TLS handshake timed out"),
            }
        });
    }
}

/// Serves one connection's requests, bounded by [`HEADER_TIMEOUT`] and
/// [`CONNECTION_LIFETIME`].
async fn serve_connection<S>(stream: S, service: TowerToHyperService<Router>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
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
        match &state.etcd {
            Some(etcd) => state.shared.render_metrics() + &etcd.render(),
            None => state.shared.render_metrics(),
        } + &state.rollouts.render(),
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
