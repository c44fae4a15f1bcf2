//! What a request's head says of gRPC: whether it is a gRPC call, and its
//! `grpc-timeout`.

use crate::proto::head::RequestHead;

/// Whether the POST in `bufs` is gRPC (`content-type: application/grpc`,
/// `+proto` or other suffixes, not gRPC-Web), and its `grpc-timeout`.
pub(super) fn grpc_facts(raw: &[u8], req: &RequestHead) -> (bool, Option<std::time::Duration>) {
    let mut grpc = false;
    let mut timeout = None;
    for h in &req.headers {
        let name = &raw[h.name.clone()];
        let value = &raw[h.value.clone()];
        if name.eq_ignore_ascii_case(b"content-type") {
            grpc = value.len() >= 16
                && value[..16].eq_ignore_ascii_case(b"application/grpc")
                && !matches!(value.get(16), Some(b'-'));
        } else if name.eq_ignore_ascii_case(b"grpc-timeout") {
            timeout = grpc_timeout(value);
        }
    }
    (grpc, if grpc { timeout } else { None })
}

/// A `grpc-timeout` value: up to 8 digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`).
fn grpc_timeout(v: &[u8]) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_bad_ones_are_ignored() {
        use std::time::Duration;
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(grpc_timeout(b"10S"), Some(Duration::from_secs(10)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            grpc_timeout(b"99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(grpc_timeout(b"5n"), Some(Duration::from_nanos(5)));
        for bad in [&b""[..], b"S", b"123456789S", b"10s", b"-1S", b"1.5S"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
