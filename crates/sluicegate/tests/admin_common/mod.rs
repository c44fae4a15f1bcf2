//! Helpers for the `admin_*` end-to-end tests: requests to the admin API
//! over loopback with the testkit's plain HTTP client, and their JSON.
#![allow(dead_code)]

use std::time::Duration;

use sluicegate_testkit::{KeepAliveClient, Response};

use crate::ops_common::Ports;

/// One admin API request; JSON unless `headers` name a content type.
pub fn call(
    ports: Ports,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut all = headers.to_vec();
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        all.push(("Content-Type", "application/json"));
    }
    all.push(("Connection", "close"));
    let addr = ports.admin_addr();
    let once = || -> std::io::Result<Response> {
        let mut c = KeepAliveClient::connect(addr)?;
        // A write compiles a snapshot: generous on a machine shared with builds.
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        c.send(method, path, &all, body.as_bytes())?;
        c.read_response_for(method)
    };
    once().unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
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
