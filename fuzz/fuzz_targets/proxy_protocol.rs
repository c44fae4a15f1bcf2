//! Fuzzes the PROXY protocol header parser: it never panics, a whole header
//! lies inside the input, bytes after it change nothing, every shorter
//! prefix of it is "need more", and once a prefix is refused every longer
//! one is too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::proxy_protocol;

fuzz_target!(|data: &[u8]| {
    let whole = proxy_protocol(data);
    if let Ok(Some((len, source, destination))) = &whole {
        assert!(*len <= data.len() && *len >= 15);
        assert_eq!(source.is_some(), destination.is_some());
        assert_eq!(proxy_protocol(&data[..*len]), whole);
        assert_eq!(proxy_protocol(&data[..*len - 1]), Ok(None));
    }
    // Prefix consistency, over the first 256 bytes (v2 headers can be
    // 4096 bytes; checking every prefix of those would be quadratic).
    let mut refused = false;
    for k in 0..=data.len().min(256) {
        match proxy_protocol(&data[..k]) {
            Err(e) => {
                assert!(!e.is_empty());
                refused = true;
            }
            Ok(r) => {
                assert!(!refused, "refused, then accepted at {k}");
                if let Some((len, ..)) = r {
                    assert_eq!(len, k, "complete before its end");
                    assert_eq!(Ok(r), whole);
                    break;
                }
            }
        }
    }
});
