//! gRPC through the gateway with grpcio (PyPI, in the test venv) on both
//! ends: a raw-bytes test service (`fixtures/grpc/server.py`) behind a
//! service with `protocol: h2c`, clients in the clear (h2c with prior
//! knowledge). Unary, server-, client- and bidirectional streaming (also
//! as a conversation, each message sent only after the last answer: full
//! duplex) pass as they do directly, with the upstream's statuses (from
//! trailers and trailers-only answers); the gateway's own answers are gRPC
//! statuses (UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED,
//! UNIMPLEMENTED, UNAVAILABLE, DEADLINE_EXCEEDED), and `grpc-timeout`
//! bounds the call.

mod grpc_common;
mod http_common;
mod venv_common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use grpc_common::{fixture, Server};
use http_common::{service, Gw};
use sluicegate_testkit::free_port;
use venv_common::python;

/// One call's result as the client printed it.
#[derive(Debug)]
struct Call {
    name: String,
    code: String,
    details: String,
    result: String,
}

/// Runs `client.py PORT args...` (bounded), one [`Call`] per line.
fn client(port: u16, args: &[&str]) -> Vec<Call> {
    let mut child = Command::new(python())
        .arg(fixture("client.py"))
        .arg(port.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the gRPC client");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gRPC client did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("client output");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "bad client line {l:?}: {e}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            Call {
                name: v["call"].as_str().unwrap_or("").to_string(),
                code: v["code"].as_str().unwrap_or("").to_string(),
                details: v["details"].as_str().unwrap_or("").to_string(),
                result: v["result"].to_string(),
            }
        })
        .collect()
}

fn code(port: u16, args: &[&str]) -> String {
    let calls = client(port, args);
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls[0].code.clone()
}

#[test]
fn every_kind_of_call_passes_as_it_does_directly() {
    let server = Server::start();
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: echo\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n",
        service("g", &[server.addr()], "    protocol: h2c\n")
    ));
    let direct = client(server.port, &["all"]);
    let through = client(gw.port, &["all"]);
    assert_eq!(direct.len(), 8, "{direct:?}");
    assert_eq!(through.len(), direct.len(), "{through:?}");
    for (d, t) in direct.iter().zip(&through) {
        assert_eq!(
            (&d.name, &d.code, &d.details, &d.result),
            (&t.name, &t.code, &t.details, &t.result),
            "{} directly and through the gateway",
            d.name
        );
    }
    let by = |n: &str| through.iter().find(|c| c.name == n).unwrap();
    assert_eq!(
        by("bidi_turns").result,
        r#"["re:0","re:1","re:2","re:3","re:4"]"#
    );
    assert_eq!(by("status").code, "NOT_FOUND");
    assert_eq!(by("server_stream").result.matches("\"m").count(), 50);
}

#[test]
fn the_gateways_own_answers_are_grpc_statuses() {
    let server = Server::start();
    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let gw = Gw::start(&format!(
        "services:\n{}{}routes:\n\
         \x20 - name: keyed\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n    auth: app_key\n\
         \x20 - name: gone\n    match: {{ path_prefix: /gone.Svc/ }}\n    service: down\n\
         plans:\n  tiny: {{ rate: 1/s, burst: 1 }}\n\
         apps:\n\
         \x20 - {{ id: ok, keys: [\"ok-key-0123456789\"] }}\n\
         \x20 - {{ id: limited, keys: [\"limited-key-0123456789\"], plan: tiny }}\n\
         \x20 - {{ id: elsewhere, keys: [\"elsewhere-key-0123456789\"], services: [down] }}\n",
        service("g", &[server.addr()], "    protocol: h2c\n"),
        service("down", &[down], "    protocol: h2c\n")
    ));
    let p = gw.port;
    // No key: UNAUTHENTICATED; a key for an app not allowed the service:
    // PERMISSION_DENIED; over the plan: RESOURCE_EXHAUSTED.
    assert_eq!(code(p, &["unary"]), "UNAUTHENTICATED");
    assert_eq!(
        code(p, &["unary", "x-app-key=elsewhere-key-0123456789"]),
        "PERMISSION_DENIED"
    );
    assert_eq!(code(p, &["unary", "x-app-key=ok-key-0123456789"]), "OK");
    assert_eq!(
        code(p, &["unary", "x-app-key=limited-key-0123456789"]),
        "OK"
    );
    assert_eq!(
        code(p, &["unary", "x-app-key=limited-key-0123456789"]),
        "RESOURCE_EXHAUSTED"
    );
    // The upstream's own statuses pass.
    assert_eq!(
        code(p, &["unary", "x-app-key=ok-key-0123456789", "x-status=9"]),
        "FAILED_PRECONDITION"
    );
    // `grpc-timeout` bounds the call at the gateway: curl (no deadline of
    // its own) asks with 300 ms while the server sleeps 3 s; the gateway
    // answers DEADLINE_EXCEEDED as a trailers-only response.
    let t0 = std::time::Instant::now();
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
        ])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .args(["-H", "grpc-timeout: 300m", "-H", "x-sleep-ms: 3000"])
        .args(["-H", "x-app-key: ok-key-0123456789"])
        .args(["--data-binary", "@-"])
        .arg(format!("http://127.0.0.1:{p}/test.Echo/Unary"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            // One gRPC message: uncompressed, 2 bytes, "hi".
            c.stdin.take().unwrap().write_all(b"\0\0\0\0\x02hi")?;
            c.wait_with_output()
        })
        .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("grpc-status: 4"), "{head}");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
    // A service whose endpoint is down: UNAVAILABLE; no route:
    // UNIMPLEMENTED.
    let gw2 = Gw::start(&format!(
        "services:\n{}routes:\n  - name: gone\n    match: {{ path_prefix: /test.Echo/Unary }}\n    service: down\n",
        service("down", &[down], "    protocol: h2c\n")
    ));
    assert_eq!(code(gw2.port, &["unary"]), "UNAVAILABLE");
    let calls = client(gw2.port, &["all"]);
    let by = |n: &str| calls.iter().find(|c| c.name == n).unwrap().code.clone();
    assert_eq!(by("server_stream"), "UNIMPLEMENTED", "{calls:?}");
}

fn metric(admin: u16, line_start: &str) -> u64 {
    let text = sluicegate_testkit::http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn unavailable_answers_are_retried_elsewhere_and_counted_by_status() {
    let good = Server::start();
    let bad = Server::start_with(&["unavailable"]);
    let eps = [bad.addr(), good.addr()];
    let start = |retries: &str| {
        let admin = free_port();
        let gw = Gw::start(&format!(
            "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}routes:\n  - name: echo\n    service: g\n",
            service("g", &eps, &format!("    protocol: h2c\n{retries}"))
        ));
        (gw, admin)
    };
    // Without retries on gRPC statuses, the calls that go to the bad
    // endpoint fail; with `grpc:unavailable` they go again to the good one.
    let (gw, admin) = start("");
    let codes: Vec<String> = (0..8).map(|_| code(gw.port, &["unary"])).collect();
    let failed = codes.iter().filter(|c| *c == "UNAVAILABLE").count();
    assert!(
        failed >= 2 && codes.iter().all(|c| c == "OK" || c == "UNAVAILABLE"),
        "{codes:?}"
    );
    let ok = metric(
        admin,
        "sluicegate_grpc_requests_total{route=\"echo\",grpc_status=\"ok\"}",
    );
    let unavailable = metric(
        admin,
        "sluicegate_grpc_requests_total{route=\"echo\",grpc_status=\"unavailable\"}",
    );
    assert_eq!((ok, unavailable), ((8 - failed) as u64, failed as u64));
    drop(gw);
    let (gw, admin) = start("    retries: { attempts: 2, on: [connect, grpc:unavailable] }\n");
    for _ in 0..8 {
        assert_eq!(code(gw.port, &["unary"]), "OK");
    }
    let ok = metric(
        admin,
        "sluicegate_grpc_requests_total{route=\"echo\",grpc_status=\"ok\"}",
    );
    assert_eq!(ok, 8);
    // A server stream's status comes in its trailers: counted too.
    let calls = client(gw.port, &["all"]);
    assert!(calls.iter().any(|c| c.name == "server_stream"), "{calls:?}");
    assert!(
        metric(
            admin,
            "sluicegate_grpc_requests_total{route=\"echo\",grpc_status=\"ok\"}"
        ) > 8
    );
}

// --- bidi calls sharing one client connection ----------------------------

/// How long any one wait of the h2 client below may take.
const WAIT: Duration = Duration::from_secs(5);

/// One bidi call on a shared client connection, driven by the h2 crate.
struct Bidi {
    send: h2::SendStream<bytes::Bytes>,
    recv: h2::RecvStream,
    got: Vec<u8>,
}

fn grpc_message(text: &str) -> bytes::Bytes {
    let mut m = vec![0u8];
    m.extend_from_slice(&(text.len() as u32).to_be_bytes());
    m.extend_from_slice(text.as_bytes());
    m.into()
}

/// Starts a `test.Echo/Bidi` call on `client` (its head only: the
/// server's answer head comes with its first message).
async fn bidi_start(
    client: &h2::client::SendRequest<bytes::Bytes>,
    port: u16,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let req = http::Request::post(format!("http://127.0.0.1:{port}/test.Echo/Bidi"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut c = tokio::time::timeout(WAIT, client.clone().ready())
        .await
        .expect("the connection takes a stream")
        .unwrap();
    c.send_request(req, false).unwrap()
}

/// The call's next message, or how its stream ended first.
async fn bidi_next(call: &mut Bidi) -> Result<String, String> {
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

/// Sends `msg` on `call` and reads its echo (bounded).
async fn bidi_echo(call: &mut Bidi, msg: &str) -> Result<String, String> {
    call.send
        .send_data(grpc_message(msg), false)
        .map_err(|e| format!("send: {e}"))?;
    tokio::time::timeout(WAIT, bidi_next(call))
        .await
        .map_err(|_| "no echo in time".to_string())?
}

/// Ends `call`'s request and reads its trailers: its `grpc-status`.
async fn bidi_close(mut call: Bidi) -> Result<String, String> {
    call.send
        .send_data(bytes::Bytes::new(), true)
        .map_err(|e| format!("end: {e}"))?;
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(d) = call.recv.data().await {
            let d = d.map_err(|e| format!("reset: {e}"))?;
            if !d.is_empty() {
                return Err(format!("unexpected data {d:?}"));
            }
        }
        call.recv
            .trailers()
            .await
            .map_err(|e| format!("trailers: {e}"))
    })
    .await
    .map_err(|_| "no trailers in time".to_string())??;
    let t = ended.ok_or("no trailers")?;
    Ok(t.get("grpc-status")
        .map(|v| v.to_str().unwrap_or("?").to_string())
        .unwrap_or_default())
}

/// Two bidi calls on one HTTP/2 connection to `port`, both open (each
/// with its first message sent) before either answer head is read, then
/// their messages interleaved, then both ended: how the first failure
/// went, if one did.
async fn two_bidi_calls(port: u16) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (client, conn) = tokio::time::timeout(WAIT, h2::client::handshake(tcp))
        .await
        .map_err(|_| "no handshake in time")?
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let names = ["a", "b"];
    let mut started = Vec::new();
    for name in names {
        let (res, mut send) = bidi_start(&client, port).await;
        send.send_data(grpc_message(&format!("{name}0")), false)
            .map_err(|e| format!("call {name}: send: {e}"))?;
        started.push((res, send));
    }
    let mut open = Vec::new();
    for ((res, send), name) in started.into_iter().zip(names) {
        let res = tokio::time::timeout(WAIT, res)
            .await
            .map_err(|_| format!("call {name}: no answer head"))?
            .map_err(|e| format!("call {name}: {e}"))?;
        if res.status() != 200 {
            return Err(format!("call {name}: status {}", res.status()));
        }
        let mut call = Bidi {
            send,
            recv: res.into_body(),
            got: Vec::new(),
        };
        let first = tokio::time::timeout(WAIT, bidi_next(&mut call))
            .await
            .map_err(|_| format!("call {name}: no first echo"))?;
        if first != Ok(format!("re:{name}0")) {
            return Err(format!("call {name}: first echo {first:?}"));
        }
        open.push(call);
    }
    for k in 1..5 {
        for (call, name) in open.iter_mut().zip(names) {
            let msg = format!("{name}{k}");
            let got = bidi_echo(call, &msg).await;
            if got != Ok(format!("re:{msg}")) {
                return Err(format!("call {name}, message {k}: {got:?}"));
            }
        }
    }
    for (call, name) in open.into_iter().zip(names) {
        let status = bidi_close(call).await;
        if status != Ok("0".to_string()) {
            return Err(format!("call {name}: end {status:?}"));
        }
    }
    Ok(())
}

#[test]
fn two_bidi_calls_stream_at_once_on_one_client_connection() {
    let server = Server::start();
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: echo\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n",
        service("g", &[server.addr()], "    protocol: h2c\n")
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // As they go directly, so through the gateway.
    assert_eq!(rt.block_on(two_bidi_calls(server.port)), Ok(()), "directly");
    assert_eq!(
        rt.block_on(two_bidi_calls(gw.port)),
        Ok(()),
        "through the gateway"
    );
}

/// A worker carries more than 64 open calls to one endpoint: 80 bidi
/// calls open at once on one client connection (so on one worker), to a
/// server with threads for 100 (the grpcio server holds a thread per open
/// bidi call, and a call past its threads gets no answer head until one
/// ends: that, not the gateway, was the limit of 64 seen with
/// `workers=64`).
#[test]
fn eighty_bidi_calls_stay_open_at_once_through_one_worker_to_one_endpoint() {
    let server = Server::start_with(&["workers=100"]);
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: echo\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n",
        service("g", &[server.addr()], "    protocol: h2c\n")
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .unwrap();
        let (client, conn) = tokio::time::timeout(WAIT, h2::client::handshake(tcp))
            .await
            .unwrap()
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut started = Vec::new();
        for i in 0..80 {
            let (res, mut send) = bidi_start(&client, gw.port).await;
            send.send_data(grpc_message(&format!("m{i}")), false)
                .unwrap();
            started.push((res, send));
        }
        // All open at once: each has its head and its first echo while
        // none has ended.
        let mut open = Vec::new();
        for (i, (res, send)) in started.into_iter().enumerate() {
            let res = tokio::time::timeout(WAIT, res)
                .await
                .unwrap_or_else(|_| panic!("call {i}: no answer head"))
                .unwrap();
            assert_eq!(res.status(), 200, "call {i}");
            let mut call = Bidi {
                send,
                recv: res.into_body(),
                got: Vec::new(),
            };
            let first = tokio::time::timeout(WAIT, bidi_next(&mut call)).await;
            assert_eq!(first.ok(), Some(Ok(format!("re:m{i}"))), "call {i}");
            open.push(call);
        }
        for (i, call) in open.iter_mut().enumerate() {
            let msg = format!("n{i}");
            assert_eq!(
                bidi_echo(call, &msg).await,
                Ok(format!("re:{msg}")),
                "call {i}"
            );
        }
        for (i, call) in open.into_iter().enumerate() {
            assert_eq!(bidi_close(call).await, Ok("0".to_string()), "call {i}");
        }
    });
}
