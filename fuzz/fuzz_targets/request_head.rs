//! Fuzzes the request head parser and target splitting: any input must
//! give a head, "need more", or an error, never a panic, and a parsed head
//! must be self-consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::{parse_request, parse_response, Parsed, RequestHead, ResponseHead};
use sluicegate_proxy::fuzzing::{strip_port, Target};

fuzz_target!(|data: &[u8]| {
    let mut head = RequestHead::default();
    if let Ok(Parsed::Complete(framing)) = parse_request(data, 16384, &mut head) {
        assert!(framing.len <= data.len());
        for h in &head.headers {
            assert!(h.name.end <= framing.len && h.value.end <= framing.len);
        }
        if let Ok(t) = Target::parse(data, &head) {
            let _ = t.path(data);
            if let Some(h) = t.host(data) {
                let _ = strip_port(h);
            }
        }
    }
    let mut res = ResponseHead::default();
    let _ = parse_response(data, 16384, data.first() == Some(&b'H'), &mut res);
});
