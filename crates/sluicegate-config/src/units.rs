//! Durations ("250ms", "1m30s") and byte sizes ("10MiB", "512KiB", "1GB") as written in configs.
//!
//! Both parsers return a short reason on failure; the caller adds the field
//! name and the position.

use std::time::Duration;

/// The units a duration may use, longest spelling first so that "ms" is not
/// read as "m" followed by garbage.
const DURATION_UNITS: &[(&str, Duration)] = &[
    ("ns", Duration::from_nanos(1)),
    ("us", Duration::from_micros(1)),
    ("µs", Duration::from_micros(1)),
    ("ms", Duration::from_millis(1)),
    ("s", Duration::from_secs(1)),
    ("m", Duration::from_secs(60)),
    ("h", Duration::from_secs(3600)),
];

/// Parses a duration made of one or more `NUMBER UNIT` parts with no spaces:
/// `250ms`, `1s`, `2m`, `1h`, `1500us`, `1m30s`. Units: ns, us (or µs), ms,
/// s, m, h. The result must be greater than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "expected a duration like 250ms, 1s, 2m, 1h or 1m30s";
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("{EXPECTED}, found an empty string"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{EXPECTED}, found {s} (add a unit, e.g. {s}s)"));
    }
    let too_large = || format!("duration {s:?} is too large");
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("{EXPECTED}, found {s:?}"));
        }
        let (number, after) = rest.split_at(digits);
        if after.starts_with('.') {
            return Err(format!(
                "{EXPECTED}, found {s:?} (fractions are not supported: use a smaller unit, e.g. 1500ms)"
            ));
        }
        let Some(&(unit, scale)) = DURATION_UNITS
            .iter()
            .filter(|(u, _)| after.starts_with(u))
            .max_by_key(|(u, _)| u.len())
        else {
            let hint = if after.is_empty() {
                format!(" (add a unit after {number})")
            } else {
                String::new()
            };
            return Err(format!(
                "{EXPECTED}, found {s:?}{hint}; units are ns, us, ms, s, m, h"
            ));
        };
        let n: u128 = number.parse().map_err(|_| too_large())?;
        total_nanos = n
            .checked_mul(scale.as_nanos())
            .and_then(|part| total_nanos.checked_add(part))
            .ok_or_else(too_large)?;
        rest = &after[unit.len()..];
    }
    let nanos = u64::try_from(total_nanos).map_err(|_| too_large())?;
    if nanos == 0 {
        return Err(format!("duration must be greater than zero, found {s:?}"));
    }
    Ok(Duration::from_nanos(nanos))
}

const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kb", 1000),
    ("kib", 1 << 10),
    ("mb", 1000 * 1000),
    ("mib", 1 << 20),
    ("gb", 1000 * 1000 * 1000),
    ("gib", 1 << 30),
    ("tb", 1000 * 1000 * 1000 * 1000),
    ("tib", 1 << 40),
];

/// Parses a byte count: a bare integer, or an integer followed by a unit
/// (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB; case-insensitive, optional space
/// before the unit). KB = 1000 bytes, KiB = 1024. Must be greater than zero.
pub fn parse_size(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected a size in bytes like 16384, 512KiB, 10MiB or 1GB";
    let s = text.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = s.split_at(digits);
    if number.is_empty() {
        return Err(format!("{EXPECTED}, found {s:?}"));
    }
    let unit = unit.trim_start();
    let scale = if unit.is_empty() {
        1
    } else {
        match SIZE_UNITS
            .iter()
            .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        {
            Some(&(_, scale)) => scale,
            None => {
                return Err(format!(
                    "{EXPECTED}, found {s:?}; units are B, KB, KiB, MB, MiB, GB, GiB, TB, TiB"
                ))
            }
        }
    };
    let too_large = || format!("size {s:?} is too large");
    let n: u64 = number.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(scale).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(format!("size must be greater than zero, found {s:?}"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("1s"), Duration::from_secs(1));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1500us"), Duration::from_micros(1500));
        assert_eq!(ok("1500µs"), Duration::from_micros(1500));
        assert_eq!(ok("10ns"), Duration::from_nanos(10));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h2m3s4ms"), Duration::from_millis(3_723_004));
        assert_eq!(ok("0s1ms"), Duration::from_millis(1));
    }

    #[test]
    fn duration_errors() {
        let err = |s: &str| parse_duration(s).unwrap_err();
        assert!(err("5").contains("add a unit, e.g. 5s"), "{}", err("5"));
        assert!(err("0").contains("add a unit"));
        assert!(err("0s").contains("greater than zero"));
        assert!(err("0ms0s").contains("greater than zero"));
        assert!(err("1.5s").contains("fractions"));
        assert!(err("5 s").contains("units are"));
        assert!(err("5x").contains("units are"));
        assert!(err("1m30").contains("add a unit after 30"));
        assert!(err("s").contains("expected a duration"));
        assert!(err("").contains("empty"));
        assert!(err("-1s").contains("expected a duration"));
        assert!(err("99999999999999999999s").contains("too large"));
        assert!(err("6000000h").contains("too large"));
        assert_eq!(parse_duration("5000000000ns"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn sizes() {
        let ok = |s: &str| parse_size(s).unwrap();
        assert_eq!(ok("16384"), 16384);
        assert_eq!(ok("1B"), 1);
        assert_eq!(ok("512KiB"), 512 * 1024);
        assert_eq!(ok("2KB"), 2000);
        assert_eq!(ok("10MiB"), 10 * 1024 * 1024);
        assert_eq!(ok("10 MiB"), 10 * 1024 * 1024);
        assert_eq!(ok("3MB"), 3_000_000);
        assert_eq!(ok("1GB"), 1_000_000_000);
        assert_eq!(ok("1GiB"), 1 << 30);
        assert_eq!(ok("1gib"), 1 << 30);
        assert_eq!(ok("2TiB"), 2 << 40);
    }

    #[test]
    fn size_errors() {
        let err = |s: &str| parse_size(s).unwrap_err();
        assert!(err("0").contains("greater than zero"));
        assert!(err("0KiB").contains("greater than zero"));
        assert!(err("lots").contains("expected a size"));
        assert!(err("10M").contains("units are"));
        assert!(err("1.5GiB").contains("units are"));
        assert!(err("-1").contains("expected a size"));
        assert!(err("20000000TiB").contains("too large"));
        assert!(err("99999999999999999999999").contains("too large"));
    }
}
