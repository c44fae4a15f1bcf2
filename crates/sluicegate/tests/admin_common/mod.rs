//! Helpers for the `admin_*` end-to-end tests: requests to the admin API
//! over loopback with the testkit's plain HTTP client, and their JSON.
#![allow(dead_code)]

use sluicegate_testkit::{http_request, Response};

use crate::ops_common::Ports;

/// One admin API request; `headers` are added to a JSON content type.
pub fn call(
    ports: Ports,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    http_request(ports.admin_addr(), method, path, &all, body.as_bytes())
}

/// The body of `resp` as JSON, panicking with the text if it is not.
pub fn json(resp: &Response) -> serde_json::Value {
    serde_json::from_slice(&resp.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", resp.body_str()))
}

/// The revision in `resp`'s `ETag`.
pub fn etag(resp: &Response) -> String {
    resp.header("etag")
        .unwrap_or_else(|| panic!("no ETag in {resp:?}"))
        .to_string()
}

/// `GET /config` as JSON, with its ETag.
pub fn config(ports: Ports) -> (serde_json::Value, String) {
    let resp = call(ports, "GET", "/config", &[], "");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    (json(&resp), etag(&resp))
}
