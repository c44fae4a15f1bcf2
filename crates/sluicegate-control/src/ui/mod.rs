//! The web dashboard at `/ui/`: static files embedded in the binary
//! (`crates/sluicegate-control/ui/`, plain HTML, CSS and JavaScript with no
//! build step). They hold no data and are served without a token; the
//! page asks for one, keeps it in `sessionStorage` and sends it as a bearer
//! header on its API calls, which the admin API's auth checks as any
//! other's. See docs/dashboard.md.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::state::{error, AdminState};

/// Each file: its name under `/ui/`, content type and bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/app.js"),
    ),
    (
        "chart.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/chart.js"),
    ),
    (
        "pages.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/pages.js"),
    ),
    (
        "config.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/config.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../ui/favicon.svg"),
    ),
];

/// Scripts, styles and calls from the page's own origin only, and never
/// in a frame.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'none'; \
base-uri 'none'; frame-ancestors 'none'";

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { file("index.html") }))
        .route(
            "/ui/{file}",
            get(|Path(f): Path<String>| async move { file(&f) }),
        )
}

fn file(name: &str) -> Response {
    let Some((_, ty, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return error(StatusCode::NOT_FOUND, "not found");
    };
    let mut resp = (*body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_names_is_served() {
        let index = FILES[0].2;
        for (name, _, body) in FILES {
            assert!(!body.is_empty(), "{name} is empty");
            if name.ends_with(".js") || name.ends_with(".css") {
                assert!(
                    index.contains(&format!("\"{name}\"")),
                    "index.html misses {name}"
                );
            }
        }
        assert!(!index.contains("http://") && !index.contains("https://"));
    }
}
