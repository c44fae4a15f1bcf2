//! What an upgrade carries over (`sluicegate run --upgrade`): a plan's
//! quota used up and its rate bucket emptied stay so in the new process, as
//! do a route's own limit, an endpoint's open circuit (for what was left of
//! `open_for`) and an endpoint that active health checks took out of
//! rotation. And the handover still works with a running gateway that does
//! not hand over its state (an older version): sockets come over, state
//! starts empty, a warning says so; the same for a state document that
//! does not parse; an older new process still takes over; and a new
//! process that goes away after the state was captured leaves the old one
//! accepting again, the connections queued meanwhile included.

mod ops_common;

use std::io::{BufRead, BufReader, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use ops_common::*;
use sluicegate_testkit::{http_get, Gateway, RawUpstream, Response, TestUpstream};

/// Starts the gateway on `yaml` with its handover socket at `sock`.
fn start_old(ports: Ports, yaml: &str, sock: &Path) -> Gateway {
    let mut g = Gateway::spawn_args(bin(), yaml, &["--handover-socket", sock.to_str().unwrap()]);
    g.wait_ready(&ports.both(), Duration::from_secs(10))
        .unwrap();
    wait_serving(&g, ports);
    g
}

/// Upgrades the gateway serving `sock` to a new process on `yaml`, and
/// waits until the old one has exited (0).
fn upgrade(old: &mut Gateway, yaml: &str, sock: &Path) -> Gateway {
    let new = Gateway::spawn_args(
        bin(),
        yaml,
        &["--handover-socket", sock.to_str().unwrap(), "--upgrade"],
    );
    let exited = old.wait_exit(Duration::from_secs(15));
    assert!(
        exited.is_some_and(|s| s.success()),
        "the old process drains and exits 0: {exited:?}\n--- old ---\n{}\n--- new ---\n{}",
        old.stderr(),
        new.stderr()
    );
    new
}

fn get(ports: Ports, path: &str, key: &str) -> Response {
    http_get(ports.addr(), path, &[("x-app-key", key)])
}

const QUOTA_KEY: &str = "quota-key-0001";
const QUOTA_KEY_2: &str = "quota-key-0002";
const RATE_KEY: &str = "rate-key-00001";

#[test]
fn quotas_and_rate_limits_stay_used_up_across_an_upgrade() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-state");
    let sock = scratch.path().join("handover.sock");
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}plans:\n  q: {{ quota: 3/day }}\n  r: {{ rate: 2/h, burst: 2 }}\napps:\n  - {{ id: qa, keys: [{QUOTA_KEY}], plan: q }}\n  - {{ id: qb, keys: [{QUOTA_KEY_2}], plan: q }}\n  - {{ id: ra, keys: [{RATE_KEY}], plan: r }}\nroutes:\n  - name: lim\n    match: {{ path_prefix: /lim }}\n    service: api\n    limit: {{ rate: 1/h, burst: 2, per: route }}\n  - name: ip\n    match: {{ path_prefix: /ip }}\n    service: api\n    limit: {{ rate: 1/h, burst: 1 }}\n  - name: api\n    match: {{ path_prefix: /api }}\n    service: api\n    auth: app_key\n",
        ports.head(),
        service("api", &[up.port()]),
    );
    let mut old = start_old(ports, &yaml, &sock);
    for i in 1..=3 {
        assert_eq!(get(ports, "/api/q", QUOTA_KEY).status, 200, "request {i}");
    }
    assert_eq!(get(ports, "/api/q", QUOTA_KEY).status, 429);
    assert_eq!(get(ports, "/api/q", QUOTA_KEY_2).status, 200);
    for _ in 0..2 {
        assert_eq!(get(ports, "/api/r", RATE_KEY).status, 200);
    }
    assert_eq!(get(ports, "/api/r", RATE_KEY).status, 429);
    for _ in 0..2 {
        assert_eq!(get(ports, "/lim", "").status, 200);
    }
    assert_eq!(get(ports, "/lim", "").status, 429);
    assert_eq!(get(ports, "/ip", "").status, 200);
    assert_eq!(get(ports, "/ip", "").status, 429);

    let new = upgrade(&mut old, &yaml, &sock);
    // The 4th and 5th requests of the day are still over the quota, and
    // the other app on the plan has the 2 left that it had.
    for i in 4..=5 {
        let r = get(ports, "/api/q", QUOTA_KEY);
        assert_eq!(r.status, 429, "quota request {i}: {}", new.stderr());
        assert_eq!(r.header("ratelimit-limit"), Some("3"));
    }
    assert_eq!(get(ports, "/api/q", QUOTA_KEY_2).status, 200);
    assert_eq!(get(ports, "/api/q", QUOTA_KEY_2).status, 200);
    assert_eq!(get(ports, "/api/q", QUOTA_KEY_2).status, 429);
    // The rate bucket is still empty: the next token is half an hour off.
    let r = get(ports, "/api/r", RATE_KEY);
    assert_eq!(r.status, 429);
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1700..=1800).contains(&wait), "retry-after {wait}");
    // The route's own limits too.
    assert_eq!(get(ports, "/lim", "").status, 429);
    assert_eq!(get(ports, "/ip", "").status, 429);
    assert!(
        new.stderr().contains("state taken over"),
        "{}",
        new.stderr()
    );
}

/// An upstream answering `/healthz` with 200 or 503, `/boom...` with 500
/// and anything else with 200; every answer carries `x-upstream-id: ID`.
fn mini_upstream(id: &'static str, healthy: bool) -> RawUpstream {
    RawUpstream::start(move |mut s| {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let end = loop {
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break p + 4;
                }
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end);
            let path = head.split(' ').nth(1).unwrap_or("");
            let status = match path {
                "/healthz" if !healthy => 503,
                p if p.starts_with("/boom") => 500,
                _ => 200,
            };
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nx-upstream-id: {id}\r\n\r\n{id}",
                id.len()
            );
            if s.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    })
}

/// Which upstream answered each of `n` requests for `/x`.
fn answered_by(ports: Ports, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let r = http_get(ports.addr(), "/x", &[]);
            assert_eq!(r.status, 200, "{}", r.body_str());
            r.header("x-upstream-id").unwrap_or("?").to_string()
        })
        .collect()
}

fn two_endpoint_service(a: u16, b: u16, extra: &str) -> String {
    format!(
        "{}{extra}    retries: {{ attempts: 1 }}\n",
        service("s", &[a, b])
    )
}

#[test]
fn an_open_circuit_stays_open_across_an_upgrade_for_what_it_had_left() {
    let a = TestUpstream::start_with_id("a");
    let b = mini_upstream("b", true);
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-breaker");
    let sock = scratch.path().join("handover.sock");
    let open_for = Duration::from_secs(5);
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}",
        ports.head(),
        two_endpoint_service(
            a.port(),
            b.port(),
            "    breaker: { errors: 2, window: 10s, open_for: 5s, on_5xx: true }\n"
        ),
        proxy_route("all", "/", "s"),
    );
    let mut old = start_old(ports, &yaml, &sock);
    let open_b = format!(
        "sluicegate_upstream_circuit_open{{service=\"s\",endpoint=\"127.0.0.1:{}\"}}",
        b.port()
    );
    // b answers /boom with 500: its circuit opens after two of them.
    let opened = wait_until(Duration::from_secs(5), || {
        http_get(ports.addr(), "/boom", &[]);
        metric(ports, &open_b) == 1.0
    });
    let t_open = Instant::now();
    check(&old, opened, "b's circuit never opened");
    assert!(answered_by(ports, 6).iter().all(|i| i == "a"));

    let new = upgrade(&mut old, &yaml, &sock);
    let upgraded_in = t_open.elapsed();
    assert!(
        upgraded_in < open_for - Duration::from_millis(1500),
        "the upgrade took {upgraded_in:?}: too slow for this test"
    );
    assert_eq!(metric(ports, &open_b), 1.0, "{}", new.stderr());
    let seen = answered_by(ports, 10);
    assert!(seen.iter().all(|i| i == "a"), "{seen:?}");
    // Half-open once what was left of open_for has passed, not later: a
    // probe reaches b and closes the circuit.
    check(
        &new,
        wait_until(Duration::from_secs(10), || answered_by(ports, 1)[0] == "b"),
        "b never came back",
    );
    let back = t_open.elapsed();
    assert!(
        back >= open_for - Duration::from_millis(200) && back < open_for + Duration::from_secs(2),
        "b back {back:?} after its circuit opened (open_for {open_for:?})"
    );
}

#[test]
fn an_unhealthy_endpoint_stays_out_of_rotation_across_an_upgrade() {
    let a = TestUpstream::start_with_id("a");
    let b = mini_upstream("b", false);
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-health");
    let sock = scratch.path().join("handover.sock");
    let yaml = |interval: &str| {
        format!(
            "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}",
            ports.head(),
            two_endpoint_service(
                a.port(),
                b.port(),
                &format!("    health: {{ path: /healthz, interval: {interval}, timeout: 1s, unhealthy_after: 2, healthy_after: 2 }}\n"),
            ),
            proxy_route("all", "/", "s"),
        )
    };
    let mut old = start_old(ports, &yaml("100ms"), &sock);
    let healthy_b = format!(
        "sluicegate_upstream_healthy{{service=\"s\",endpoint=\"127.0.0.1:{}\"}}",
        b.port()
    );
    let down = wait_until(Duration::from_secs(5), || metric(ports, &healthy_b) == 0.0);
    check(&old, down, "b never marked unhealthy");
    assert!(answered_by(ports, 6).iter().all(|i| i == "a"));

    // The new process checks every minute: on its own it would need two
    // minutes to find b unhealthy (its first check fails at once, one of
    // the two needed).
    let new = upgrade(&mut old, &yaml("1m"), &sock);
    assert_eq!(metric(ports, &healthy_b), 0.0, "{}", new.stderr());
    let seen = answered_by(ports, 10);
    assert!(seen.iter().all(|i| i == "a"), "{seen:?}");
}

// ---- a running gateway that does not hand over its state ----

/// Sends `listener` over `conn` as a running gateway does (`0`: no admin
/// listener among the sockets).
fn send_listener(conn: &UnixStream, listener: &TcpListener) {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [listener.as_fd()];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    sendmsg(
        conn,
        &[IoSlice::new(b"0")],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
}

fn read_line(conn: &UnixStream) -> String {
    let mut line = String::new();
    let _ = BufReader::new(conn).read_line(&mut line);
    line
}

/// A stand-in for a running gateway on the handover socket `sock` that
/// hands over `listener`: as an older version (`state: None`, which closes
/// the connection on a request it does not know), or as one that answers
/// the state request with `state`. Returns the lines it was sent.
fn fake_running_gateway(
    sock: &Path,
    listener: TcpListener,
    state: Option<&'static [u8]>,
) -> thread::JoinHandle<Vec<String>> {
    let server = UnixListener::bind(sock).unwrap();
    thread::spawn(move || {
        let mut lines = Vec::new();
        for conn in server.incoming() {
            let conn = conn.unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let first = read_line(&conn);
            lines.push(first.clone());
            match (first.as_str(), state) {
                ("listeners\n", _) | ("listeners state\n", Some(_)) => {}
                _ => continue, // an older version: closes, serves on
            }
            send_listener(&conn, &listener);
            let mut next = read_line(&conn);
            lines.push(next.clone());
            if let (Some(doc), "state\n") = (state, next.as_str()) {
                let mut w = &conn;
                w.write_all(format!("state {}\n", doc.len()).as_bytes())
                    .unwrap();
                w.write_all(doc).unwrap();
                next = read_line(&conn);
                lines.push(next);
            }
            return lines;
        }
        lines
    })
}

fn take_over_from_a_fake(state: Option<&'static [u8]>, warning: &str) -> Vec<String> {
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-compat");
    let sock = scratch.path().join("handover.sock");
    let listener = TcpListener::bind(ports.addr()).unwrap();
    // As a gateway's listening sockets are.
    listener.set_nonblocking(true).unwrap();
    let fake = fake_running_gateway(&sock, listener, state);
    let new = Gateway::spawn_args(
        bin(),
        &hello_yaml(ports),
        &["--handover-socket", sock.to_str().unwrap(), "--upgrade"],
    );
    let lines = fake.join().unwrap();
    wait_serving(&new, ports);
    assert_eq!(http_get(ports.addr(), "/hello", &[]).body_str(), "hello");
    assert!(new.stderr().contains(warning), "{}", new.stderr());
    lines
}

#[test]
fn a_new_binary_takes_over_from_one_that_does_not_hand_over_state() {
    let lines = take_over_from_a_fake(None, "does not hand over its state");
    assert_eq!(
        lines,
        ["listeners state\n", "listeners\n", "ready\n"],
        "asked for the state, then again as an older version expects"
    );
}

#[test]
fn a_state_document_that_does_not_parse_is_refused_and_state_starts_empty() {
    let lines = take_over_from_a_fake(
        Some(b"sluicegate-state 1\nat 0\nhello world\nend 1\n"),
        "state document line 3: unknown entry \"hello\"",
    );
    assert_eq!(lines, ["listeners state\n", "state\n", "ready\n"]);
}

/// Receives the running gateway's listening sockets as a new process does
/// (after asking for them): the kind byte and the sockets.
fn recv_listeners(conn: &UnixStream) -> (u8, Vec<OwnedFd>) {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(
        conn,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .unwrap();
    assert_eq!(got.bytes, 1);
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    (byte[0], fds)
}

fn hello_yaml(ports: Ports) -> String {
    format!(
        "{}reload: {{ watch: false }}\nservices: []\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hello")
    )
}

#[test]
fn an_older_binary_still_takes_over_from_this_one() {
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-compat-old");
    let sock = scratch.path().join("handover.sock");
    let mut running = start_old(ports, &hello_yaml(ports), &sock);
    // An older new process: `listeners`, the sockets, `ready`.
    let mut conn = UnixStream::connect(&sock).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"listeners\n").unwrap();
    let (kind, mut fds) = recv_listeners(&conn);
    assert_eq!(kind, b'1', "admin listener included");
    assert_eq!(fds.len(), 2, "the worker's socket and the admin listener");
    let data = TcpListener::from(fds.remove(0));
    assert_eq!(data.local_addr().unwrap(), ports.addr());
    conn.write_all(b"ready\n").unwrap();
    let exited = running.wait_exit(Duration::from_secs(15));
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}\n{}",
        running.stderr()
    );
    // The socket is ours now: a connection to the port comes to us.
    let _client = std::net::TcpStream::connect(ports.addr()).unwrap();
    data.set_nonblocking(false).unwrap();
    let (_accepted, _) = data.accept().unwrap();
}

#[test]
fn a_new_process_that_goes_away_after_the_capture_leaves_the_old_one_serving() {
    let ports = Ports::new();
    let scratch = ScratchDir::new("upgrade-gone");
    let sock = scratch.path().join("handover.sock");
    let mut running = start_old(ports, &hello_yaml(ports), &sock);
    let mut conn = UnixStream::connect(&sock).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"listeners state\n").unwrap();
    let (_, fds) = recv_listeners(&conn);
    drop(fds);
    conn.write_all(b"state\n").unwrap();
    let mut reader = BufReader::new(&conn);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let len: usize = line
        .strip_prefix("state ")
        .and_then(|l| l.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let mut doc = vec![0; len];
    reader.read_exact(&mut doc).unwrap();
    assert!(doc.starts_with(b"sluicegate-state 1\nat "));
    // The running gateway holds: a new connection waits in the queue.
    let mut client = std::net::TcpStream::connect(ports.addr()).unwrap();
    client
        .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut answer = String::new();
    assert!(client.read_to_string(&mut answer).is_err(), "{answer}");
    // The new process goes away without `ready`: the old one accepts
    // again, that connection included.
    drop(reader);
    drop(conn);
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    assert!(running.is_running());
    // Its log line says so (stderr is read from a file: give it a moment).
    let said = wait_until(Duration::from_secs(3), || {
        running.stderr().contains("accepting again")
    });
    assert!(said, "{}", running.stderr());
    // And a later upgrade still works.
    let _new = upgrade(&mut running, &hello_yaml(ports), &sock);
    assert_eq!(http_get(ports.addr(), "/hello", &[]).body_str(), "hello");
}
