//! Revocation that reaches open connections, end to end on loopback: 100
//! WebSocket sessions (to the `websockets` echo server) and 100 gRPC bidi
//! streams (to the grpcio test server, over one HTTP/2 connection) of each
//! of two apps; removing one app through the admin API closes all of its
//! 200 within a second (WebSocket close 1008, RST_STREAM CANCEL) and none
//! of the other's; removing one of an app's two keys closes only the
//! streams of that key, and taking a service out of its `services` only
//! the streams of that service; the same app removal on three gateways sharing
//! etcd, written to etcd once; a WebSocket admitted with a JWT closes when
//! the token expires, and stays with `jwt.close_on_expiry: false`; one
//! admitted with an OpenID Connect issuer's token (npm `oidc-provider`)
//! closes when that issuer is removed, and a per-app key's stays.
//!
//! Each gRPC call has an HTTP/2 connection of its own. (That was once
//! needed: a stream kept the send window it reserved, so two bidi calls
//! on one client connection starved each other; see
//! `grpc_proxy::two_bidi_calls_stream_at_once_on_one_client_connection`.)

mod admin_common;
mod etcd_common;
mod grpc_common;
mod oidc_common;
mod ops_common;
mod venv_common;
mod ws_common;

use std::time::Duration;

use bytes::Bytes;
use ops_common::{check, metrics, sample, start, wait_until, Ports};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long every wait of these tests may take at most.
const DEADLINE: Duration = Duration::from_secs(5);
/// How soon a revoked stream must be closed.
const WITHIN: Duration = Duration::from_secs(1);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The routes of these tests, both `auth: app_key`: WebSocket on `/ws`,
/// gRPC on `/test.Echo/` (to the grpcio server).
fn routes(ws: u16, grpc: &[u16]) -> String {
    format!(
        "services:\n{}{}    protocol: h2c\nroutes:\n\
         \x20 - name: ws\n    match: {{ path_prefix: /ws }}\n    service: ws\n    auth: app_key\n\
         \x20 - name: grpc\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n    auth: app_key\n",
        ops_common::service("ws", &[ws]),
        ops_common::service("g", grpc),
    )
}

/// Four grpcio test servers, each with threads for 64 open bidi calls:
/// the grpcio server holds a thread per open bidi call (a call past its
/// threads gets no answer head until one ends), so the calls of a test
/// are spread over four.
fn grpc_servers() -> (Vec<grpc_common::Server>, Vec<u16>) {
    let servers: Vec<_> = (0..4)
        .map(|_| grpc_common::Server::start_with(&["workers=64"]))
        .collect();
    let ports = servers.iter().map(|s| s.port).collect();
    (servers, ports)
}

// --- WebSocket sessions over plain TCP ----------------------------------

/// Opens a WebSocket session through the gateway with `headers` (an app
/// key, a bearer token).
async fn ws_open(port: u16, headers: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let req = format!(
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(DEADLINE, s.read(&mut b)).await;
        assert!(matches!(n, Ok(Ok(1))), "no handshake answer: {head:?}");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s
}

/// One frame from a server (unmasked, short): its opcode and payload;
/// `None` at the end of the stream.
async fn ws_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await.ok()?;
    let len = (h[1] & 0x7f) as usize;
    assert!(len < 126, "a short frame");
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.ok()?;
    Some((h[0] & 0x0f, payload))
}

/// Sends `msg` (a masked text frame) and reads its echo.
async fn ws_echoes(s: &mut TcpStream, msg: &str) -> bool {
    let mask = [1u8, 2, 3, 4];
    let mut f = vec![0x81, 0x80 | msg.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(msg.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    if s.write_all(&f).await.is_err() {
        return false;
    }
    let echo = tokio::time::timeout(DEADLINE, ws_frame(s)).await;
    matches!(echo, Ok(Some((1, p))) if p == msg.as_bytes())
}

/// Waits (until `by`) for the session to be closed: the close frame's
/// code (0 for a close without a frame); `None` if still open at `by`.
async fn ws_closed(s: &mut TcpStream, by: tokio::time::Instant) -> Option<u16> {
    match tokio::time::timeout_at(by, ws_frame(s)).await {
        Err(_) => None,
        Ok(None) => Some(0),
        Ok(Some((8, p))) if p.len() >= 2 => Some(u16::from_be_bytes([p[0], p[1]])),
        Ok(Some(other)) => panic!("unexpected frame {other:?}"),
    }
}

// --- gRPC bidi streams over the h2 crate's client ------------------------

struct Call {
    /// Keeps the call's connection.
    _client: h2::client::SendRequest<Bytes>,
    send: h2::SendStream<Bytes>,
    recv: h2::RecvStream,
    got: Vec<u8>,
}

fn grpc_message(text: &str) -> Bytes {
    let mut m = vec![0u8];
    m.extend_from_slice(&(text.len() as u32).to_be_bytes());
    m.extend_from_slice(text.as_bytes());
    m.into()
}

/// An h2c connection to `port`, its task spawned.
async fn h2_connect(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let hs = tokio::time::timeout(DEADLINE, h2::client::handshake(tcp)).await;
    let (client, conn) = hs.unwrap().unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Starts a `test.Echo/Bidi` call with `key`, on a connection of its own
/// (see the module's note), and checks its first echo.
async fn grpc_open(port: u16, key: &str) -> Call {
    let client = h2_connect(port).await;
    let req = http::Request::post(format!("http://127.0.0.1:{port}/test.Echo/Bidi"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-app-key", key)
        .body(())
        .unwrap();
    let mut c = client.clone().ready().await.unwrap();
    let (res, mut send) = c.send_request(req, false).unwrap();
    send.send_data(grpc_message("hi"), false).unwrap();
    let res = tokio::time::timeout(DEADLINE, res).await;
    let res = res.expect("no answer head").expect("the answer head");
    assert_eq!(res.status(), 200);
    let head = format!("{:?}", res.headers());
    let mut call = Call {
        _client: client,
        send,
        recv: res.into_body(),
        got: Vec::new(),
    };
    let first = tokio::time::timeout(DEADLINE, grpc_next(&mut call)).await;
    assert_eq!(first.ok(), Some(Ok("re:hi".to_string())), "{head}");
    call
}

/// The call's next message; `Err`: the stream ended (reset, or ended
/// with its trailers) first, how.
async fn grpc_next(call: &mut Call) -> Result<String, String> {
    loop {
        if call.got.len() >= 5 {
            let len = u32::from_be_bytes(call.got[1..5].try_into().unwrap()) as usize;
            if call.got.len() >= 5 + len {
                let m = String::from_utf8_lossy(&call.got[5..5 + len]).into_owned();
                call.got.drain(..5 + len);
                return Ok(m);
            }
        }
        match call.recv.data().await {
            Some(Ok(d)) => {
                let _ = call.recv.flow_control().release_capacity(d.len());
                call.got.extend_from_slice(&d);
            }
            Some(Err(e)) => return Err(format!("reset: {:?} ({e})", e.reason())),
            None => {
                let t = call.recv.trailers().await;
                return Err(format!("ended: {t:?}"));
            }
        }
    }
}

/// Sends `msg` on the call and reads its echo.
async fn grpc_echoes(call: &mut Call, msg: &str) -> bool {
    if call.send.send_data(grpc_message(msg), false).is_err() {
        return false;
    }
    let want = format!("re:{msg}");
    matches!(tokio::time::timeout(DEADLINE, grpc_next(call)).await, Ok(Ok(m)) if m == want)
}

/// Waits (until `by`) for the call to end: how, or `None` if still open.
async fn grpc_ended(call: &mut Call, by: tokio::time::Instant) -> Option<String> {
    match tokio::time::timeout_at(by, grpc_next(call)).await {
        Err(_) => None,
        Ok(Err(how)) => Some(how),
        Ok(Ok(m)) => panic!("unexpected message {m:?}"),
    }
}

// --- the tests ------------------------------------------------------------

/// The sessions and calls of one app on one gateway.
struct Streams {
    ws: Vec<TcpStream>,
    calls: Vec<Call>,
}

/// Opens `n` WebSocket sessions and `n` gRPC bidi calls with each of
/// `keys` in turn.
async fn open(port: u16, keys: &[&str], n: usize) -> Streams {
    let mut ws = Vec::new();
    let mut calls = Vec::new();
    for i in 0..n {
        let key = keys[i % keys.len()];
        ws.push(ws_open(port, &format!("X-App-Key: {key}\r\n")).await);
        let call = tokio::time::timeout(DEADLINE * 2, grpc_open(port, key)).await;
        calls.push(call.unwrap_or_else(|_| panic!("gRPC call {i} did not open")));
    }
    Streams { ws, calls }
}

/// Checks that every one of `s`'s streams at indices `which` is closed by
/// `by` (WebSocket sessions with a 1008 close frame), and returns how many.
async fn all_closed(s: &mut Streams, which: impl Fn(usize) -> bool, by: tokio::time::Instant) {
    for (i, w) in s.ws.iter_mut().enumerate().filter(|(i, _)| which(*i)) {
        let code = ws_closed(w, by).await;
        assert_eq!(
            code,
            Some(1008),
            "WebSocket session {i} not closed in time with 1008"
        );
    }
    for (i, c) in s.calls.iter_mut().enumerate().filter(|(i, _)| which(*i)) {
        let how = grpc_ended(c, by).await;
        let how = how.unwrap_or_else(|| panic!("gRPC call {i} still open"));
        assert!(how.contains("Some(CANCEL)"), "call {i}: {how}");
    }
}

/// Checks that every one of `s`'s streams at indices `which` still echoes.
async fn all_open(s: &mut Streams, which: impl Fn(usize) -> bool) {
    for (i, w) in s.ws.iter_mut().enumerate().filter(|(i, _)| which(*i)) {
        assert!(ws_echoes(w, "still").await, "WebSocket session {i} was cut");
    }
    for (i, c) in s.calls.iter_mut().enumerate().filter(|(i, _)| which(*i)) {
        assert!(grpc_echoes(c, "still").await, "gRPC call {i} was cut");
    }
}

fn revoked(text: &str, route: &str, reason: &str) -> f64 {
    let series =
        format!("sluicegate_revoked_streams_total{{route=\"{route}\",reason=\"{reason}\"}}");
    sample(text, &series).unwrap_or(0.0)
}

fn apps_yaml() -> &'static str {
    "apps:\n\
     \x20 - { id: a, keys: [key-a-one-0001, key-a-two-0002] }\n\
     \x20 - { id: b, keys: [key-b-one-0001] }\n"
}

#[test]
fn removing_an_app_closes_its_200_streams_within_a_second_and_no_others() {
    let echo = ws_common::Echo::quiet();
    let (_servers, grpc) = grpc_servers();
    let ports = Ports::new();
    let yaml = format!(
        "{}log: {{ access: off }}\nreload: {{ watch: false }}\n{}{}",
        ports.head(),
        routes(echo.port, &grpc),
        apps_yaml()
    );
    let gw = start(ports, &yaml);
    let port = ports.listen;
    runtime().block_on(async {
        let mut a = open(port, &["key-a-one-0001", "key-a-two-0002"], 100).await;
        let mut b = open(port, &["key-b-one-0001"], 100).await;
        let resp = admin_common::call(ports, "DELETE", "/apps/a", &[], "");
        assert_eq!(resp.status, 200, "{}", resp.body_str());
        let by = tokio::time::Instant::now() + WITHIN;
        all_closed(&mut a, |_| true, by).await;
        all_open(&mut b, |_| true).await;
    });
    let text = metrics(ports);
    assert_eq!(revoked(&text, "ws", "app_removed"), 100.0, "{text}");
    assert_eq!(revoked(&text, "grpc", "app_removed"), 100.0, "{text}");
    check(
        &gw,
        gw.stderr().contains("app_removed"),
        "no log line for the closes",
    );
}

#[test]
fn removing_one_key_or_a_service_closes_only_the_streams_it_admitted() {
    let echo = ws_common::Echo::quiet();
    let (_servers, grpc) = grpc_servers();
    let ports = Ports::new();
    let yaml = format!(
        "{}log: {{ access: off }}\nreload: {{ watch: false }}\n{}{}",
        ports.head(),
        routes(echo.port, &grpc),
        apps_yaml()
    );
    let _gw = start(ports, &yaml);
    let port = ports.listen;
    runtime().block_on(async {
        // Even indices: the first key; odd ones: the second.
        let mut a = open(port, &["key-a-one-0001", "key-a-two-0002"], 20).await;
        let resp = admin_common::call(
            ports,
            "PATCH",
            "/apps/a",
            &[],
            r#"{"keys":["key-a-two-0002"]}"#,
        );
        assert_eq!(resp.status, 200, "{}", resp.body_str());
        let by = tokio::time::Instant::now() + WITHIN;
        all_closed(&mut a, |i| i % 2 == 0, by).await;
        all_open(&mut a, |i| i % 2 == 1).await;
        // The app may no longer call the gRPC service: its calls close,
        // its WebSocket sessions stay.
        let resp = admin_common::call(ports, "PATCH", "/apps/a", &[], r#"{"services":["ws"]}"#);
        assert_eq!(resp.status, 200, "{}", resp.body_str());
        let by = tokio::time::Instant::now() + WITHIN;
        for (i, c) in a.calls.iter_mut().enumerate().filter(|(i, _)| i % 2 == 1) {
            let how = grpc_ended(c, by)
                .await
                .unwrap_or_else(|| panic!("call {i} open"));
            assert!(how.contains("Some(CANCEL)"), "call {i}: {how}");
        }
        for (i, w) in a.ws.iter_mut().enumerate().filter(|(i, _)| i % 2 == 1) {
            assert!(ws_echoes(w, "still").await, "WebSocket session {i} was cut");
        }
    });
    let text = metrics(ports);
    assert_eq!(revoked(&text, "ws", "key_removed"), 10.0, "{text}");
    assert_eq!(revoked(&text, "grpc", "key_removed"), 10.0, "{text}");
    assert_eq!(revoked(&text, "grpc", "denied"), 10.0, "{text}");
    assert_eq!(revoked(&text, "ws", "denied"), 0.0, "{text}");
}

#[test]
fn an_app_removed_in_etcd_closes_its_streams_on_three_gateways() {
    let Some(etcd) = etcd_common::Etcd::start() else {
        eprintln!("skipped: no etcd binary (Debian etcd-server)");
        return;
    };
    let echo = ws_common::Echo::quiet();
    let (_servers, grpc) = grpc_servers();
    let svc = |ports: &[u16], extra: &str| {
        let eps: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        format!(r#"{{"endpoints":[{}]{extra}}}"#, eps.join(","))
    };
    etcd.ctl(&["put", "/sg/services/ws", &svc(&[echo.port], "")]);
    let h2c = r#","protocol":"h2c""#;
    etcd.ctl(&["put", "/sg/services/g", &svc(&grpc, h2c)]);
    etcd.ctl(&[
        "put",
        "/sg/routes/ws",
        r#"{"match":{"path_prefix":"/ws"},"service":"ws","auth":"app_key"}"#,
    ]);
    etcd.ctl(&[
        "put",
        "/sg/routes/grpc",
        r#"{"match":{"path_prefix":"/test.Echo/"},"service":"g","auth":"app_key"}"#,
    ]);
    etcd.ctl(&["put", "/sg/apps/a", r#"{"keys":["key-a-one-0001"]}"#]);
    etcd.ctl(&["put", "/sg/apps/b", r#"{"keys":["key-b-one-0001"]}"#]);
    let dir = tempfile::tempdir().unwrap();
    let gws: Vec<(Ports, sluicegate_testkit::Gateway)> = (0..3)
        .map(|_| {
            let ports = Ports::new();
            let cache = dir.path().join(format!("cache-{}.json", ports.listen));
            let gw = start(ports, &etcd_common::config(ports, &etcd, &cache));
            (ports, gw)
        })
        .collect();
    for (ports, gw) in &gws {
        let up = wait_until(DEADLINE, || {
            sluicegate_testkit::try_http_get(
                ports.addr(),
                "/ws",
                &[("X-App-Key", "key-b-one-0001")],
            )
            .is_ok_and(|r| r.status != 404 && r.status != 401)
        });
        check(gw, up, "the routes and apps from etcd never served");
    }
    // About 100 of each kind for each app, across the three gateways.
    let per = 34;
    runtime().block_on(async {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (ports, _) in &gws {
            a.push(open(ports.listen, &["key-a-one-0001"], per).await);
            b.push(open(ports.listen, &["key-b-one-0001"], per).await);
        }
        etcd.ctl(&["del", "/sg/apps/a"]);
        let by = tokio::time::Instant::now() + WITHIN;
        for s in &mut a {
            all_closed(s, |_| true, by).await;
        }
        for s in &mut b {
            all_open(s, |_| true).await;
        }
    });
    for (ports, _) in &gws {
        let text = metrics(*ports);
        assert_eq!(revoked(&text, "ws", "app_removed"), per as f64, "{text}");
        assert_eq!(revoked(&text, "grpc", "app_removed"), per as f64, "{text}");
    }
}

/// A gateway whose `/ws` route takes JWTs, with `close_on_expiry` as given.
fn jwt_gateway(echo: u16, close_on_expiry: bool) -> (Ports, sluicegate_testkit::Gateway) {
    let ports = Ports::new();
    let yaml = format!(
        "{}log: {{ access: off }}\nreload: {{ watch: false }}\nservices:\n{}routes:\n\
         \x20 - name: ws\n    match: {{ path_prefix: /ws }}\n    service: ws\n    auth: jwt\n\
         jwt: {{ leeway: 1s, close_on_expiry: {close_on_expiry} }}\n\
         apps:\n  - {{ id: a, jwt: {{ alg: HS256, secret: \"{SECRET}\" }} }}\n",
        ports.head(),
        ops_common::service("ws", &[echo]),
    );
    let gw = start(ports, &yaml);
    (ports, gw)
}

const SECRET: &str = "revoke-test-secret-0123456789abcdef";

#[test]
fn a_websocket_admitted_with_a_jwt_closes_when_the_token_expires_unless_told_not_to() {
    let echo = ws_common::Echo::quiet();
    let (closing, _gw1) = jwt_gateway(echo.port, true);
    let (staying, _gw2) = jwt_gateway(echo.port, false);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = now + 1;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({ "sub": "a", "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let auth = format!("Authorization: Bearer {token}\r\n");
    runtime().block_on(async {
        let mut s1 = ws_open(closing.listen, &auth).await;
        let mut s2 = ws_open(staying.listen, &auth).await;
        assert!(ws_echoes(&mut s1, "before").await);
        assert!(ws_echoes(&mut s2, "before").await);
        // The token expires at exp plus the one second of leeway.
        let expires = std::time::UNIX_EPOCH + Duration::from_secs(exp + 1);
        let by = tokio::time::Instant::now() + DEADLINE;
        assert_eq!(ws_closed(&mut s1, by).await, Some(1008));
        let closed_at = std::time::SystemTime::now();
        assert!(closed_at >= expires, "closed before the token expired");
        let late = closed_at.duration_since(expires).unwrap();
        assert!(late < Duration::from_secs(2), "closed {late:?} after exp");
        // The other gateway keeps the session past the token's expiry.
        assert!(
            ws_echoes(&mut s2, "after").await,
            "cut despite close_on_expiry: false"
        );
    });
}

#[test]
fn a_websocket_admitted_with_an_issuer_s_token_closes_when_the_issuer_is_removed() {
    let idp = oidc_common::Idp::start();
    let echo = ws_common::Echo::quiet();
    let ports = Ports::new();
    let yaml = format!(
        "{}log: {{ access: off }}\nreload: {{ watch: false }}\nservices:\n{}routes:\n\
         \x20 - name: ws\n    match: {{ path_prefix: /ws }}\n    service: ws\n    auth: jwt\n\
         jwt:\n  issuers:\n    - {{ name: corp, issuer: \"{}\", discovery: true, audiences: [orders-api] }}\n\
         apps:\n  - {{ id: rs-app }}\n  - {{ id: a, jwt: {{ alg: HS256, secret: \"{SECRET}\" }} }}\n",
        ports.head(),
        ops_common::service("ws", &[echo.port]),
        idp.issuer(),
    );
    let _gw = start(ports, &yaml);
    let issued = idp.token("rs-app", "orders:read");
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let own = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({ "sub": "a", "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    // The issuer's keys come from discovery: wait for the first fetch.
    let bearer = format!("Bearer {issued}");
    assert!(wait_until(DEADLINE * 2, || {
        let r = sluicegate_testkit::http_get(ports.addr(), "/ws", &[("Authorization", &bearer)]);
        r.status != 401
    }));
    let by_issuer = format!("Authorization: Bearer {issued}\r\n");
    let by_key = format!("Authorization: Bearer {own}\r\n");
    runtime().block_on(async {
        let mut s1 = ws_open(ports.listen, &by_issuer).await;
        let mut s2 = ws_open(ports.listen, &by_key).await;
        assert!(ws_echoes(&mut s1, "before").await);
        assert!(ws_echoes(&mut s2, "before").await);
        // The issuer goes (a merge patch of the settings): the stream its
        // token admitted closes within a second, the per-app key's stays.
        let patch = admin_common::call(
            ports,
            "PATCH",
            "/settings",
            &[],
            "{\"jwt\":{\"issuers\":null}}",
        );
        assert_eq!(patch.status, 200, "{}", patch.body_str());
        let by = tokio::time::Instant::now() + WITHIN;
        assert_eq!(ws_closed(&mut s1, by).await, Some(1008));
        assert!(
            ws_echoes(&mut s2, "after").await,
            "the per-app key's stream was cut"
        );
    });
    let text = metrics(ports);
    assert_eq!(revoked(&text, "ws", "key_removed"), 1.0, "{text}");
}
