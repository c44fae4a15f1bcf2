//! A route's `fallback`: the answer to a request its service could not
//! answer, apart from the lifecycle that calls it ([`super::lifecycle`]).

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::answer::{answer_consumed, answer_locally, Local};
use super::req::Req;
use crate::proto::fields;
use crate::proto::response::Head;
use crate::route::target::Target;
use crate::snapshot::fallback::{FallbackAnswerRt, FallbackRt};
use crate::snapshot::{RouteRt, ServiceRt};
use crate::transport::io::Mark;
use crate::upstream::forward::{self, Ended, Outcome};
use crate::upstream::handback::{HandBack, Unanswered};
use crate::worker::Bufs;

/// What sending a request to a route's fallback service needs besides
/// the route: the client, the target and the prefix to strip, and where
/// the request was in `bufs.inb` before it was forwarded.
pub(super) struct Again<'a> {
    pub(super) client: IpAddr,
    pub(super) target: &'a Target,
    pub(super) strip: usize,
    pub(super) mark: Mark,
}

/// Answers a request its route's service could not (`un`: why, and what
/// is left of the request) by the route's fallback, with the
/// `Sluicegate-Fallback: 1` field: its fixed answer (after a body that
/// went upstream too, then closing), or the request sent once to the
/// fallback service, when it is still whole (from a fresh start: the
/// service's own `timeouts.request`), whose answer is relayed and whose
/// failure is answered as errors are. A request whose body went upstream
/// cannot go again: it gets the first service's error, without the field.
/// Counted per route; the outcome, the access log's mark, and the
/// fallback service when one was called.
#[cold]
pub(super) async fn fall_back<'s>(
    rq: &Req<'s>,
    bufs: &mut Bufs,
    route: &RouteRt,
    fb: &'s FallbackRt,
    un: Unanswered<'s>,
    again: Again<'_>,
) -> (Outcome<'s>, &'static str, Option<&'s ServiceRt>) {
    let (link, snap, is_head) = (*rq.link, rq.snap, bufs.is_head);
    if un.at_hand {
        bufs.inb.rewind(again.mark);
    }
    if let (FallbackAnswerRt::Service(_), false) = (&fb.answer, un.at_hand) {
        route
            .metrics
            .fallbacks_unsent
            .fetch_add(1, Ordering::Relaxed);
        let error = Local::Error(un.kind, &fields::NONE);
        let o = answer_consumed(link, snap, bufs, error, is_head, un.close).await;
        return (with_upstream(o, &un), "unsent", None);
    }
    route.metrics.fallbacks[un.cause.index()].fetch_add(1, Ordering::Relaxed);
    bufs.edits
        .response_headers
        .push(b"sluicegate-fallback", b"1");
    let why = un.cause.name();
    let (local, left, service) = match &fb.answer {
        FallbackAnswerRt::Fixed { head, body } => (Local::Fixed(Head::Fixed(head), body), un, None),
        FallbackAnswerRt::Service(i) => {
            let service: &'s ServiceRt = snap.service(*i);
            let down = link.downstream();
            let cx = forward::Request {
                worker: down.worker,
                down: Some(&down),
                client: again.client,
                origin: None,
                snap,
                service,
                target: again.target,
                strip: again.strip,
                started: Instant::now(),
                upgrade: &[],
                feed: None,
                hand_back: HandBack {
                    failures: true,
                    ..HandBack::NONE
                },
            };
            match forward::forward(cx, bufs).await {
                Ended::Unanswered(un) => {
                    if un.at_hand {
                        bufs.inb.rewind(again.mark);
                    }
                    (Local::Error(un.kind, &fields::NONE), un, Some(service))
                }
                ended => return (ended.outcome(), why, Some(service)),
            }
        }
    };
    let o = if left.at_hand {
        answer_locally(link, snap, bufs, local, is_head).await
    } else {
        answer_consumed(link, snap, bufs, local, is_head, left.close).await
    };
    (with_upstream(o, &left), why, service)
}

/// A local answer's outcome with what forwarding did before it: the
/// body bytes sent, the endpoint tried, the upstream's time.
fn with_upstream<'s>(mut o: Outcome<'static>, un: &Unanswered<'s>) -> Outcome<'s> {
    o.bytes_in = un.bytes_in;
    o.upstream_us = un.upstream_us;
    let mut o: Outcome<'s> = o;
    o.endpoint = un.endpoint;
    o
}
