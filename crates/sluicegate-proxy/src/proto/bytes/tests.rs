//! The byte helpers' unit tests: searches, the case-folding compare, Host values.

use super::*;

#[test]
fn byte_search_agrees_with_memchr_on_both_sides_of_the_vector_width() {
    // Every length up to well past 32, the needle absent, once, twice.
    for len in 0..80 {
        for places in [vec![], vec![0], vec![len / 2], vec![1, len - len.min(1)]] {
            let mut hay = vec![b'a'; len];
            for &i in places.iter().filter(|&&i| i < len) {
                hay[i] = b':';
            }
            assert_eq!(find_byte(b':', &hay), memchr::memchr(b':', &hay), "{hay:?}");
            assert_eq!(
                rfind_byte(b':', &hay),
                memchr::memrchr(b':', &hay),
                "{hay:?}"
            );
        }
    }
}

#[test]
fn eq_lower_agrees_with_eq_ignore_ascii_case() {
    // Every byte value at every position of each literal, and one byte
    // shorter and longer: the same answer as the standard comparison.
    for lit in [
        &b"content-length"[..],
        b"te",
        b"keep-alive",
        b"x-forwarded-for",
    ] {
        for at in 0..lit.len() {
            for b in 0..=255u8 {
                let mut v = lit.to_vec();
                v[at] = b;
                assert_eq!(eq_lower(&v, lit), v.eq_ignore_ascii_case(lit), "{v:?}");
            }
        }
        let upper = lit.to_ascii_uppercase();
        assert!(eq_lower(&upper, lit));
        assert!(!eq_lower(&upper[1..], lit));
        assert!(!eq_lower(&[&upper[..], b"x"].concat(), lit));
    }
    // CR where the literal has '-' (its byte with the case bit set).
    assert!(!eq_lower(b"keep\ralive", b"keep-alive"));
}

#[test]
fn host_values() {
    for ok in [
        "",
        "a",
        "api.example:8080",
        "127.0.0.1",
        "[::1]",
        "[::1]:80",
        "a:",
        "x_y-z.~%41",
    ] {
        assert!(valid_host(ok.as_bytes()), "{ok:?} refused");
    }
    for bad in [
        "a b", "t/orders", "user@a", "a:port", "[zz]", "[::1", "a:1:2", "a:123456", "a?b", "a#b",
        "[::1]x",
    ] {
        assert!(!valid_host(bad.as_bytes()), "{bad:?} accepted");
    }
}
