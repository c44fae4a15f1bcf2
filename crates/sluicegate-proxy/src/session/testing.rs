//! What the session's unit tests share: a worker thread's runtime, a
//! worker on a small config with its deadline sweeper, and a client's read
//! of what came. Kept apart from the tests that drive a connection, so
//! that the unit tests of the files a connection uses need nothing of it.

use std::rc::Rc;
use std::time::Duration;

use crate::snapshot::Shared;
use crate::transport::stream::Stream;
use crate::worker::Worker;

pub(super) const CONFIG: &str = r#"
listen: ["127.0.0.1:9"]
timeouts: { keepalive: 400ms }
routes:
  - name: hello
    match: { path: /hello }
    respond: { status: 200, body: "hi\n", headers: { content-type: text/plain } }
"#;

/// The worker thread's local runtime, as `runtime::server` builds it.
pub(super) fn runtime() -> tokio::runtime::LocalRuntime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(tokio::runtime::LocalOptions::default())
        .unwrap()
}

/// A worker on [`CONFIG`] with its deadline sweeper running (call inside
/// [`runtime`]).
pub(super) fn worker() -> Rc<Worker> {
    worker_on(CONFIG)
}

/// A worker on `config` with its deadline sweeper running.
pub(super) fn worker_on(config: &str) -> Rc<Worker> {
    let cfg = sluicegate_config::parse(config).unwrap();
    let worker = Worker::new(Shared::new(&cfg).unwrap()).into_rc();
    tokio::task::spawn_local({
        let w = worker.clone();
        async move { w.deadlines.run().await }
    });
    worker
}

/// Reads what `c` has within `within`, until it goes quiet or ends; `None`
/// once the stream has ended (after any bytes it still had).
pub(super) async fn read_some(c: &Stream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let ready = std::future::poll_fn(|cx| c.poll_read_ready(cx));
        if tokio::time::timeout(within, ready).await.is_err() {
            return Some(got);
        }
        match c.try_recv(&mut buf) {
            Ok(0) => return if got.is_empty() { None } else { Some(got) },
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}
