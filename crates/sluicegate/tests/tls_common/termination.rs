//! The gateway the TLS termination tests share (`tls_termination`,
//! `tls_certificates`, `tls_bad_input`): a plain listener, one TLS listener
//! with the test certificates, a respond route and a proxied route.

use sluicegate_testkit::TestUpstream;

use super::{head, Certs, TlsGw};
use crate::ops_common::{self, Ports};

/// Routes: `/hello` answers `body`, `/api` goes to the upstream.
pub fn routes(upstream: u16, body: &str) -> String {
    format!(
        "services:\n{}routes:\n{}{}",
        ops_common::service("api", &[upstream]),
        ops_common::proxy_route("api", "/api", "api"),
        ops_common::respond_route("hello", "/hello", body)
    )
}

/// A plain listener plus one TLS listener with `a`, `b` and `a_rsa`
/// (`b` the default), min version `min`, and the routes.
pub fn config(
    ports: Ports,
    tls_port: u16,
    certs: &Certs,
    min: &str,
    upstream: u16,
    body: &str,
) -> String {
    let tls = certs.tls(
        &["a", "b", "a_rsa"],
        Some("b"),
        &format!(", min_version: \"{min}\""),
    );
    format!(
        "{}{}",
        head(
            ports,
            &[format!("{{ addr: \"127.0.0.1:{tls_port}\", tls: {tls} }}")]
        ),
        routes(upstream, body)
    )
}

pub fn start_default(certs: &Certs, up: &TestUpstream) -> TlsGw {
    let (ports, extra) = super::ports(1);
    let yaml = config(ports, extra[0], certs, "1.2", up.port(), "hello");
    super::start(ports, extra, &yaml)
}
