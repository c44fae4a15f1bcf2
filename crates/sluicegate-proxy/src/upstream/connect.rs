//! Connections for one request: a new one (TCP, then TLS when the service
//! speaks it; [`super::dial`]) for HTTP/1.1, a stream on one of the worker's HTTP/2
//! connections ([`super::h2pool`]) otherwise.

use std::time::Duration;

use super::dial::connect_stream;
use crate::balance::endpoint::EndpointState;
use crate::snapshot::ServiceRt;
use crate::transport::stream::Stream;
use crate::worker::Worker;

/// A connection for one request to `ep`, within `timeout`: a new one to
/// a service speaking HTTP/1.1, a stream on one of the worker's HTTP/2
/// connections to it (opened if needed) otherwise. `true` when the
/// stream goes on a connection that served before.
pub(super) async fn connect(
    worker: &Worker,
    ep: &EndpointState,
    service: &ServiceRt,
    timeout: Duration,
) -> std::io::Result<(Stream, bool)> {
    if service.protocol.http2() {
        return super::h2pool::stream(worker, ep, service, timeout).await;
    }
    Ok((
        connect_stream(&worker.deadlines, ep, service, timeout).await?,
        false,
    ))
}
