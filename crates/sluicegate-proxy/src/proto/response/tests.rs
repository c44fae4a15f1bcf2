//! The one renderer of gateway answers, tested: the HTTP/1.1 text and the
//! HTTP/2 fields of each kind of answer.

use super::*;
use crate::proto::fields;

/// An answer to a request with id `rid` (closing, or kept open for an
/// HTTP/1.0 client when `http10`).
fn answer<'a>(what: What<'a>, rid: &'a RequestId, close: bool, http10: bool) -> Answer<'a> {
    Answer {
        what,
        rid,
        close,
        head_only: false,
        http10,
    }
}

fn error(kind: ErrorKind, grpc: bool) -> What<'static> {
    What::Error {
        kind,
        grpc,
        extra: &[],
    }
}

fn text(a: &Answer<'_>) -> String {
    let mut out = b"left from before".to_vec();
    render(a, None, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The answer as an HTTP/2 head: its status, its fields as `name:
/// value` lines, how its body comes, and the body.
fn fielded(a: &Answer<'_>) -> (u16, String, AnswerBody, String) {
    let mut out = Vec::new();
    let mut sink = Fielded::new(&mut out);
    a.describe(&mut sink);
    let (status, body) = (sink.status, sink.body);
    let lines: String = sink
        .fields
        .iter()
        .map(|(n, v)| format!("{n}: {}\n", v.to_str().unwrap()))
        .collect();
    (status, lines, body, String::from_utf8(out).unwrap())
}

#[test]
fn error_body_is_small_json() {
    let rid = RequestId::default();
    let s = text(&answer(
        error(ErrorKind::UpstreamFailed, false),
        &rid,
        true,
        false,
    ));
    assert!(s.starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
    assert!(s.contains("connection: close\r\n"));
    assert!(s.ends_with("\r\n\r\n{\"error\":\"bad gateway\",\"status\":502}\n"));
    let body_len = "{\"error\":\"bad gateway\",\"status\":502}\n".len();
    assert!(s.contains(&format!("content-length: {body_len}\r\n")));
}

#[test]
fn an_injected_abort_is_an_error_with_its_status() {
    let rid = RequestId::default();
    let s = text(&answer(
        error(ErrorKind::Fault(503), false),
        &rid,
        false,
        false,
    ));
    assert!(s.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{s}");
    assert!(
        s.ends_with("\r\n\r\n{\"error\":\"fault injected\",\"status\":503}\n"),
        "{s}"
    );
    // An unusual status: a status line all the same.
    let s = text(&answer(
        error(ErrorKind::Fault(599), false),
        &rid,
        false,
        false,
    ));
    assert!(s.starts_with("HTTP/1.1 599 \r\n"), "{s}");
    // 204 and 304 have no body and say no length.
    let s = text(&answer(
        error(ErrorKind::Fault(204), false),
        &rid,
        false,
        false,
    ));
    assert!(s.starts_with("HTTP/1.1 204 No Content\r\n"), "{s}");
    assert!(
        !s.contains("content-length") && s.ends_with("\r\n\r\n"),
        "{s}"
    );
    // Over HTTP/2, the same status and body.
    let (status, _, body, text) = fielded(&answer(
        error(ErrorKind::Fault(429), false),
        &rid,
        false,
        false,
    ));
    assert_eq!(status, 429);
    assert_eq!(text, "{\"error\":\"fault injected\",\"status\":429}\n");
    assert_eq!(body, AnswerBody::Length(text.len() as u64));
    // To gRPC: the status of the gateway's own error of that status.
    for (status, grpc) in [
        (503, 14),
        (502, 14),
        (504, 4),
        (429, 8),
        (401, 16),
        (403, 7),
        (404, 12),
        (400, 13),
        (500, 2),
        (200, 2),
    ] {
        assert_eq!(ErrorKind::Fault(status).grpc_status(), grpc, "{status}");
        // An authorization service's denial maps the same way.
        assert_eq!(ErrorKind::Denied(status).grpc_status(), grpc, "{status}");
        let (st, lines, _, _) = fielded(&answer(
            error(ErrorKind::Fault(status), true),
            &rid,
            false,
            false,
        ));
        assert_eq!(st, 200);
        assert!(lines.contains(&format!("grpc-status: {grpc}\n")), "{lines}");
    }
    assert!(!ErrorKind::Fault(503).closes());
}

#[test]
fn the_request_id_is_in_the_head_and_the_body() {
    let mut rid = RequestId::default();
    rid.set_name(b"x-request-id");
    assert!(rid.keep(b"abc-1"));
    let s = text(&answer(
        error(ErrorKind::NoRoute, false),
        &rid,
        false,
        false,
    ));
    assert!(s.contains("\r\nx-request-id: abc-1\r\n"), "{s}");
    assert!(
        s.ends_with("\r\n\r\n{\"error\":\"no route\",\"status\":404,\"request_id\":\"abc-1\"}\n"),
        "{s}"
    );
    let s = text(&answer(error(ErrorKind::NoRoute, true), &rid, false, false));
    assert!(s.contains("x-request-id: abc-1\r\n"), "{s}");
}

#[test]
fn a_grpc_request_gets_a_trailers_only_status() {
    let rid = RequestId::default();
    let a = answer(error(ErrorKind::TooManyRequests, true), &rid, false, false);
    assert_eq!(
        text(&a),
        "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ngrpc-status: 8\r\n\
         grpc-message: too many requests\r\ncontent-length: 0\r\n\r\n"
    );
    assert_eq!(
        fielded(&a),
        (
            200,
            "content-type: application/grpc\ngrpc-status: 8\n\
             grpc-message: too many requests\ncontent-length: 0\n"
                .into(),
            AnswerBody::Empty,
            String::new()
        )
    );
}

#[test]
fn a_fixed_answer_is_its_head_the_edits_the_id_and_its_body() {
    let mut own = Fields::default();
    own.push(b"content-type", b"text/plain");
    let head = FixedHead::new(200, own);
    let mut edits = Fields::default();
    edits.push(b"ratelimit-limit", b"10");
    let mut ops = Fields::default();
    ops.push(b"x-op", b"1");
    let mut rid = RequestId::default();
    rid.set_name(b"x-request-id");
    assert!(rid.keep(b"r1"));
    let what = || What::Fixed {
        head: Head::Fixed(&head),
        edits: &edits,
        ops: &ops,
        body: b"hi\n",
    };
    assert_eq!(
        text(&answer(what(), &rid, false, true)),
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nratelimit-limit: 10\r\n\
         x-request-id: r1\r\nx-op: 1\r\ncontent-length: 3\r\n\
         connection: keep-alive\r\n\r\nhi\n"
    );
    let mut head_only = answer(what(), &rid, true, false);
    head_only.head_only = true;
    assert!(text(&head_only).ends_with("content-length: 3\r\nconnection: close\r\n\r\n"));
    assert_eq!(
        fielded(&answer(what(), &rid, true, true)),
        (
            200,
            "content-type: text/plain\nratelimit-limit: 10\nx-request-id: r1\n\
             x-op: 1\ncontent-length: 3\n"
                .into(),
            AnswerBody::Length(3),
            "hi\n".into()
        )
    );
}

#[test]
fn a_204_says_no_length_and_has_no_body() {
    let mut own = Fields::default();
    own.push(b"access-control-allow-origin", b"*");
    own.push(b"Connection", b"x");
    let rid = RequestId::default();
    let what = What::Fixed {
        head: Head::Fields(204, &own),
        edits: &fields::NONE,
        ops: &fields::NONE,
        body: b"",
    };
    let a = answer(what, &rid, false, false);
    assert_eq!(
        text(&a),
        "HTTP/1.1 204 No Content\r\naccess-control-allow-origin: *\r\nConnection: x\r\n\r\n"
    );
    // The connection's own field does not go on an HTTP/2 stream.
    assert_eq!(
        fielded(&a),
        (
            204,
            "access-control-allow-origin: *\n".into(),
            AnswerBody::Empty,
            String::new()
        )
    );
}

#[test]
fn an_error_as_fields_keeps_its_body_for_data() {
    let mut rid = RequestId::default();
    rid.set_name(b"x-request-id");
    assert!(rid.keep(b"r2"));
    let (status, lines, body, data) = fielded(&answer(
        error(ErrorKind::NoHealthyEndpoint, false),
        &rid,
        true,
        false,
    ));
    let json = "{\"error\":\"no healthy upstream\",\"status\":503,\"request_id\":\"r2\"}\n";
    assert_eq!(status, 503);
    assert_eq!(
        lines,
        format!(
            "content-type: application/json\ncontent-length: {}\nretry-after: 1\n\
             x-request-id: r2\n",
            json.len()
        )
    );
    assert_eq!(
        (body, data.as_str()),
        (AnswerBody::Length(json.len() as u64), json)
    );
}
