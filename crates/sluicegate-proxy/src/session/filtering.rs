//! A request's filters phase (phase 3 of [`super::lifecycle`]): the
//! route's filters in order over the request in the buffers, in one plain
//! call when none of them may wait, each waiting filter's wait awaited
//! before it decides otherwise; the first refusal is returned.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::apps::AppTable;
use crate::filters::{Filters, Refuse, ReqCx};
use crate::route::target::Target;
use crate::snapshot::{ActionRt, RouteRt};
use crate::transport::tls::identity::ClientIdentity;
use crate::worker::Bufs;

/// What the request filters are told besides the request in the buffers.
pub(super) struct Facts<'a> {
    /// The normal form of the path, when it differs from the received one.
    pub(super) norm: Option<&'a [u8]>,
    pub(super) target: &'a Target,
    pub(super) prefix_len: usize,
    pub(super) now: Instant,
    pub(super) client: IpAddr,
    pub(super) identity: Option<&'a ClientIdentity>,
    /// The apps of the request's snapshot.
    pub(super) apps: &'a Arc<AppTable>,
}

/// The filters' view of the request in `bufs`.
fn filter_cx<'a>(route: &RouteRt, bufs: &'a mut Bufs, f: &Facts<'a>) -> ReqCx<'a> {
    let service = match &route.action {
        ActionRt::Proxy { service, .. } => Some(*service),
        ActionRt::Respond { .. } => None,
    };
    let Bufs {
        inb,
        req,
        edits,
        params,
        ..
    } = bufs;
    let raw = inb.filled();
    ReqCx {
        raw,
        head: req,
        path: f.norm.unwrap_or(&raw[f.target.path.clone()]),
        query: f.target.query.clone(),
        prefix_len: f.prefix_len,
        params,
        service,
        edits,
        app: None,
        now: f.now,
        client: f.client,
        identity: f.identity,
        apps: f.apps,
    }
}

/// Runs the route's filters, none of which waits, on the request in
/// `bufs`; the first refusal is returned. Their edits are left in
/// `bufs.edits`.
pub(super) fn request_filters<'a>(
    route: &'a RouteRt,
    bufs: &'a mut Bufs,
    f: &Facts<'a>,
) -> Option<Refuse> {
    if route.filters.is_empty() {
        return None;
    }
    let mut cx = filter_cx(route, bufs, f);
    route
        .filters
        .iter()
        .find_map(|f| f.on_request(&mut cx).err())
}

/// [`request_filters`] for a route with a filter that may wait.
#[cold]
pub(super) async fn request_filters_waiting<'a>(
    route: &'a RouteRt,
    bufs: &'a mut Bufs,
    f: &Facts<'a>,
) -> Option<Refuse> {
    let mut cx = filter_cx(route, bufs, f);
    run_filters(&route.filters, &mut cx).await
}

/// The filters in order, each waiting filter's wait (if it has one now)
/// awaited before it decides; the first refusal is returned.
async fn run_filters<'a>(filters: &'a Filters, cx: &mut ReqCx<'a>) -> Option<Refuse> {
    for f in filters.iter() {
        if let Some(wait) = f.wait(cx) {
            wait.await;
        }
        if let Err(refuse) = f.on_request(cx) {
            return Some(refuse);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::filters::{Answer, Edits, Filter, Wait};
    use crate::proto::fields::Fields;
    use crate::proto::head::RequestHead;
    use crate::proto::response::ErrorKind;

    /// Records the order things happen in.
    #[derive(Debug, Default)]
    struct Trace(Mutex<Vec<&'static str>>);

    impl Trace {
        fn push(&self, what: &'static str) {
            self.0.lock().unwrap().push(what);
        }
    }

    /// Waits (one yield to the runtime, then a timer) before it decides,
    /// then admits and adds a field.
    #[derive(Debug)]
    struct Waiting(std::sync::Arc<Trace>);

    impl Filter for Waiting {
        fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
            self.0.push("waiting decides");
            cx.edits.request_headers.push(b"x-waited", b"yes");
            Ok(())
        }
        fn waits(&self) -> bool {
            true
        }
        fn wait<'a>(&'a self, _cx: &ReqCx<'a>) -> Option<Wait<'a>> {
            Some(Box::pin(async move {
                self.0.push("wait starts");
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                self.0.push("wait ends");
            }))
        }
    }

    /// Refuses every request.
    #[derive(Debug)]
    struct Refusing(std::sync::Arc<Trace>);

    impl Filter for Refusing {
        fn on_request<'a>(&'a self, _cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
            self.0.push("refusing decides");
            Err(Refuse {
                answer: Answer::Error(ErrorKind::Forbidden),
                headers: Fields::new(),
            })
        }
    }

    fn run(filters: &Filters) -> (Option<Refuse>, Edits) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut head = RequestHead::default();
        let mut edits = Edits::default();
        let apps = crate::apps::AppTable::empty();
        let refused = rt.block_on(async {
            let mut cx = ReqCx {
                raw: b"GET / HTTP/1.1\r\n\r\n",
                head: &mut head,
                path: b"/",
                query: 0..0,
                prefix_len: 0,
                params: &Default::default(),
                service: None,
                edits: &mut edits,
                app: None,
                now: Instant::now(),
                client: IpAddr::from([127, 0, 0, 1]),
                identity: None,
                apps: &apps,
            };
            run_filters(filters, &mut cx).await
        });
        (refused, edits)
    }

    #[test]
    fn a_filter_that_waits_decides_after_its_wait_and_before_the_next() {
        let trace = std::sync::Arc::new(Trace::default());
        let filters = Filters::new(vec![
            Box::new(Waiting(trace.clone())),
            Box::new(Refusing(trace.clone())),
        ]);
        assert!(filters.waits());
        let (refused, edits) = run(&filters);
        assert_eq!(
            refused.map(|r| r.answer),
            Some(Answer::Error(ErrorKind::Forbidden))
        );
        assert_eq!(edits.request_headers.get(b"x-waited"), Some(&b"yes"[..]));
        assert_eq!(
            *trace.0.lock().unwrap(),
            [
                "wait starts",
                "wait ends",
                "waiting decides",
                "refusing decides"
            ]
        );
    }

    #[test]
    fn filters_that_never_wait_run_in_one_pass() {
        let trace = std::sync::Arc::new(Trace::default());
        let filters = Filters::new(vec![Box::new(Refusing(trace.clone()))]);
        assert!(!filters.waits());
        let (refused, _) = run(&filters);
        assert!(refused.is_some());
        assert_eq!(*trace.0.lock().unwrap(), ["refusing decides"]);
    }
}
