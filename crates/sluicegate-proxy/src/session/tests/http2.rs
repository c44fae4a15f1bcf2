//! HTTP/2 streams served over the in-memory transport and read by an
//! HTTP/2 client: the gateway's own answers (a `respond` route, errors, a
//! gRPC status, a CORS preflight, the redirect to HTTPS), an upstream's
//! informational head and an extended CONNECT's tunnel arrive as HEADERS,
//! DATA and trailers. None is HTTP/1.1 text: a stream written bytes before
//! its head is reset, and its client reads an error.

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{accepted, runtime, scripted_upstream, worker_on};
use crate::session::active::Active;
use crate::transport::listener::ListenerRt;
use crate::transport::stream::Stream;
use crate::worker::Worker;

const ROUTES: &str = r#"
  - name: hello
    match: { path: /hello }
    respond: { status: 200, body: "hi\n", headers: { content-type: text/plain, x-fixed: "yes" } }
  - name: api
    match: { path: /api }
    cors: { origins: ["https://a.example"] }
    respond: { status: 200, body: "api\n" }
"#;

/// The client's end of the pipe as the HTTP/2 framing layer's I/O.
struct Pipe(Stream);

impl AsyncRead for Pipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match self.0.try_recv(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(self.0.poll_read_ready(cx))?
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.0.try_send(b))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.shutdown_write();
        Poll::Ready(Ok(()))
    }
}

/// An HTTP/2 connection to `worker` over the pipe (its listener redirects
/// to HTTPS when `redirect_https`): the client's handle, once the
/// gateway's SETTINGS came.
async fn connect(worker: &Rc<Worker>, redirect_https: bool) -> SendRequest<Bytes> {
    let (client, prepared) = accepted(worker, true);
    let listener = Arc::new(ListenerRt {
        addr: prepared.client,
        tls: None,
        proxy_protocol: false,
        redirect_https,
        http2: Some(Default::default()),
        counters: Arc::default(),
    });
    let active = Active::new(worker.clone());
    let session = crate::session::h2::serve(prepared, Vec::new(), listener, active);
    tokio::task::spawn_local(session);
    let io = Pipe(client);
    let (send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    send.ready().await.unwrap()
}

fn request(method: &str, path: &str, fields: &[(&str, &str)]) -> http::Request<()> {
    let mut r = http::Request::builder()
        .method(method)
        .uri(format!("http://gw.test{path}"));
    for (n, v) in fields {
        r = r.header(*n, *v);
    }
    r.body(()).unwrap()
}

/// An answer as the client read it.
struct Got {
    head: http::response::Parts,
    /// Its HEADERS ended the stream.
    ended_with_head: bool,
    data: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

impl Got {
    fn field(&self, name: &str) -> &str {
        self.head
            .headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap())
    }
}

/// Sends `req` with `body` (none: its HEADERS end the stream) and reads
/// the whole answer.
async fn fetch(send: &mut SendRequest<Bytes>, req: http::Request<()>, body: &[u8]) -> Got {
    let (res, mut out) = send.send_request(req, body.is_empty()).unwrap();
    if !body.is_empty() {
        out.send_data(Bytes::copy_from_slice(body), true).unwrap();
    }
    let res = tokio::time::timeout(Duration::from_secs(2), res)
        .await
        .expect("an answer")
        .expect("an answer, not a reset");
    let (head, mut recv) = res.into_parts();
    let ended_with_head = recv.is_end_stream();
    let mut data = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.unwrap();
    assert!(
        !data.windows(8).any(|w| w == b"HTTP/1.1"),
        "HTTP/1.1 text as data: {data:?}"
    );
    Got {
        head,
        ended_with_head,
        data,
        trailers,
    }
}

#[test]
fn the_gateways_own_answers_go_as_fields_and_data() {
    runtime().block_on(async {
        let worker = worker_on(&format!("listen: [\"127.0.0.1:9\"]\nroutes:{ROUTES}"));
        let mut c = connect(&worker, false).await;

        // A `respond` route: its fields, the length, the id; its body.
        let got = fetch(&mut c, request("GET", "/hello", &[]), b"").await;
        assert_eq!(got.head.status, 200);
        assert_eq!(got.field("content-type"), "text/plain");
        assert_eq!(got.field("x-fixed"), "yes");
        assert_eq!(got.field("content-length"), "3");
        assert_eq!(got.field("x-request-id").len(), 32);
        assert_eq!((got.data.as_slice(), got.trailers), (&b"hi\n"[..], None));
        // HEAD: the same head, no DATA.
        let got = fetch(&mut c, request("HEAD", "/hello", &[]), b"").await;
        assert_eq!(
            (got.head.status.as_u16(), got.field("content-length")),
            (200, "3")
        );
        assert!(got.ended_with_head && got.data.is_empty());

        // An error: its JSON body as DATA, with the id the head carries.
        let got = fetch(&mut c, request("GET", "/nope", &[]), b"").await;
        assert_eq!(got.head.status, 404);
        assert_eq!(got.field("content-type"), "application/json");
        let rid = got.field("x-request-id");
        let json = format!("{{\"error\":\"no route\",\"status\":404,\"request_id\":\"{rid}\"}}\n");
        assert_eq!(String::from_utf8_lossy(&got.data), json);
        assert_eq!(got.field("content-length"), json.len().to_string());
        assert!(got.field("connection").is_empty());

        // A gRPC call: trailers-only, one HEADERS that ends the stream.
        let grpc = [("content-type", "application/grpc"), ("te", "trailers")];
        let body = [0u8, 0, 0, 0, 0];
        let got = fetch(&mut c, request("POST", "/pkg.Svc/Call", &grpc), &body).await;
        assert_eq!(got.head.status, 200);
        assert!(got.ended_with_head, "a trailers-only answer");
        assert_eq!(got.field("content-type"), "application/grpc");
        assert_eq!(got.field("grpc-status"), "12");
        assert_eq!(got.field("grpc-message"), "no route");

        // A CORS preflight: the filter's 204 and its fields.
        let preflight = [
            ("origin", "https://a.example"),
            ("access-control-request-method", "GET"),
        ];
        let got = fetch(&mut c, request("OPTIONS", "/api", &preflight), b"").await;
        assert_eq!(got.head.status, 204);
        assert!(got.ended_with_head);
        assert_eq!(
            got.field("access-control-allow-origin"),
            "https://a.example"
        );

        // The redirect to HTTPS, on a listener that asks for it.
        let mut c = connect(&worker, true).await;
        let got = fetch(&mut c, request("GET", "/hello?a=1", &[]), b"").await;
        assert_eq!(got.head.status, 301);
        assert_eq!(got.field("location"), "https://gw.test/hello?a=1");
        assert_eq!(got.field("content-length"), "0");
        assert!(got.ended_with_head);
    });
}

#[test]
fn an_upstreams_informational_head_and_a_tunnel_go_as_fields() {
    runtime().block_on(async {
        let early = scripted_upstream(
            b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        )
        .await;
        let ws = scripted_upstream(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
              Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\nx-up: 1\r\n\r\n",
        )
        .await;
        let worker = worker_on(&format!(
            "listen: [\"127.0.0.1:9\"]\nservices:\n  - name: early\n    endpoints: [\"{early}\"]\n\
             \x20 - name: ws\n    endpoints: [\"{ws}\"]\nroutes:{ROUTES}\
             \x20 - name: early\n    match: {{ path: /early }}\n    service: early\n\
             \x20 - name: chat\n    match: {{ path: /chat }}\n    service: ws\n"
        ));
        let mut c = connect(&worker, false).await;

        // The 103 as an informational HEADERS, then the answer.
        let (mut res, _) = c.send_request(request("GET", "/early", &[]), true).unwrap();
        let info = std::future::poll_fn(|cx| res.poll_informational(cx));
        let info = tokio::time::timeout(Duration::from_secs(2), info)
            .await
            .expect("an informational head")
            .expect("one")
            .unwrap();
        assert_eq!(info.status(), 103);
        assert_eq!(info.headers()["link"], "</s.css>; rel=preload");
        let res = res.await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-length"], "2");

        // WebSocket over HTTP/2 (RFC 8441): the upstream's 101 is the
        // stream's 200, and the tunnel's bytes its DATA.
        assert!(c.is_extended_connect_protocol_enabled());
        let mut connect = request("CONNECT", "/chat", &[("sec-websocket-version", "13")]);
        connect
            .extensions_mut()
            .insert(h2::ext::Protocol::from("websocket"));
        let (res, mut up) = c.send_request(connect, false).unwrap();
        let res = tokio::time::timeout(Duration::from_secs(2), res)
            .await
            .expect("an answer")
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["x-up"], "1");
        assert!(!res.headers().contains_key("sec-websocket-accept"));
        up.send_data(Bytes::from_static(b"ping"), false).unwrap();
        let mut down = res.into_body();
        let echo = tokio::time::timeout(Duration::from_secs(2), down.data())
            .await
            .expect("the echo")
            .unwrap()
            .unwrap();
        assert_eq!(&echo[..], b"ping");
    });
}

/// An HTTP/2 upstream in the clear on loopback that answers each stream
/// `200` once its body ended, and tells what ended it: its trailers
/// (none: an empty map) and its data.
async fn h2c_recording_upstream() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(Vec<u8>, http::HeaderMap)>,
) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::task::spawn_local(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::task::spawn_local(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let mut body = req.into_body();
                    let mut data = Vec::new();
                    while let Some(Ok(d)) = body.data().await {
                        let _ = body.flow_control().release_capacity(d.len());
                        data.extend_from_slice(&d);
                    }
                    let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
                    let _ = tx.send((data, trailers));
                    let head = http::Response::builder().status(200).body(()).unwrap();
                    let _ = respond.send_response(head, true);
                }
            });
        }
    });
    (addr, rx)
}

#[test]
fn a_clients_request_trailers_go_to_an_http2_upstream_unless_its_body_has_a_length() {
    runtime().block_on(async {
        let (up, mut seen) = h2c_recording_upstream().await;
        let worker = worker_on(&format!(
            "listen: [\"127.0.0.1:9\"]\nservices:\n  - name: up\n    endpoints: [\"{up}\"]\n\
             \x20   protocol: h2c\nroutes:\n  - name: up\n    match: {{ path_prefix: / }}\n    service: up\n"
        ));
        let mut c = connect(&worker, false).await;
        let dropped = || {
            worker
                .shared
                .global
                .request_trailers_dropped
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        for length in [None, Some("3")] {
            let fields: &[(&str, &str)] = match length {
                Some(n) => &[("content-length", n)],
                None => &[],
            };
            let (res, mut body) = c.send_request(request("POST", "/up", fields), false).unwrap();
            body.send_data(Bytes::from_static(b"abc"), false).unwrap();
            let mut t = http::HeaderMap::new();
            t.insert("x-sum", "3".parse().unwrap());
            t.insert("authorization", "Bearer not-forwarded".parse().unwrap());
            body.send_trailers(t).unwrap();
            let res = tokio::time::timeout(Duration::from_secs(2), res)
                .await
                .expect("an answer")
                .unwrap();
            assert_eq!(res.status(), 200);
            let (data, trailers) = seen.recv().await.unwrap();
            assert_eq!(data, b"abc");
            match length {
                None => {
                    assert_eq!(trailers.len(), 1, "{trailers:?}");
                    assert_eq!(trailers["x-sum"], "3");
                    assert_eq!(dropped(), 0);
                }
                Some(_) => {
                    assert!(trailers.is_empty(), "{trailers:?}");
                    // Counted once the stream's request is over.
                    let until = std::time::Instant::now() + Duration::from_secs(2);
                    while dropped() == 0 && std::time::Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    assert_eq!(dropped(), 1);
                }
            }
        }
    });
}
