//! The route action's steps before forwarding, apart from the lifecycle
//! that runs them ([`super::lifecycle`]): which entry of a route's `split`
//! takes the request, and the draw (and wait) of its `fault`.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::req::Req;
use crate::filters::fault::{FaultRt, Injected};
use crate::snapshot::split::{KeySource, SplitRt};
use crate::snapshot::{RouteRt, ServiceRt};
use crate::worker::Bufs;

/// The entry of the route's `split` that takes this request: by the app
/// the filters identified, the request's key, or the worker's generator.
pub(super) fn pick(rq: &Req<'_>, split: &SplitRt, bufs: &Bufs, client: IpAddr) -> usize {
    let src = KeySource {
        raw: bufs.inb.filled(),
        headers: &bufs.req.headers,
        client,
        app: bufs.edits.app.map(|a| rq.snap.apps.app_id(a)),
    };
    split.pick(&src, &rq.link.worker.rng)
}

/// Draws the route's fault for this request (its worker's generator) and
/// counts it; a delay is waited here, on the worker's deadlines, and never
/// past the request's deadline for its response head (the service's
/// `timeouts.request`, or a gRPC call's own), which forwarding keeps. True
/// beside it when the delay reached that deadline: the request is out of
/// time before it is sent.
#[cold]
pub(super) async fn inject(
    rq: &Req<'_>,
    fault: &FaultRt,
    route: &RouteRt,
    service: &ServiceRt,
    bufs: &Bufs,
    started: Instant,
) -> (Injected, bool) {
    let injected = fault.draw(&rq.link.worker.rng);
    let mut timed_out = false;
    match injected {
        Injected::None => {}
        Injected::Abort(_) => {
            route.metrics.fault_aborts.fetch_add(1, Ordering::Relaxed);
        }
        Injected::Delay(d) => {
            route.metrics.fault_delays.fetch_add(1, Ordering::Relaxed);
            let limit = match bufs.grpc_timeout {
                Some(t) => t.min(service.timeouts.request),
                None => service.timeouts.request,
            };
            let (wanted, deadline) = (Instant::now() + d, started + limit);
            timed_out = deadline <= wanted;
            let wait = rq.link.worker.deadlines.at(wanted.min(deadline));
            // Ends then (or at shutdown): nothing else to wait for.
            let _ = wait.or_shutdown().bound(std::future::pending::<()>()).await;
        }
    }
    (injected, timed_out)
}
