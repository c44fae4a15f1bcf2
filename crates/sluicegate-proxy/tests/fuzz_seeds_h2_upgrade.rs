//! Replays the committed `h2_session` and `upgrade` fuzz seeds
//! (`fuzz/seeds/h2_session/`, `fuzz/seeds/upgrade/`) through the drivers
//! the fuzz targets run, with their checks, like `fuzz_seeds.rs` does for
//! the parsers; and checks that the seeds do what their names say (a
//! stream answered, a flood stopped), so the harness is known to reach
//! the code it is for.

use std::path::PathBuf;

use sluicegate_proxy::fuzzing::{h2_session, upgrade, Upgrade, H2_MAX_ROUNDS};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

/// The frames in what the gateway wrote: (type, flags, stream).
fn frames(out: &[u8]) -> Vec<(u8, u8, u32)> {
    let mut v = Vec::new();
    let mut at = 0;
    while at + 9 <= out.len() {
        let h = &out[at..at + 9];
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        v.push((h[3], h[4], u32::from_be_bytes([h[5], h[6], h[7], h[8]])));
        at += 9 + len;
    }
    v
}

#[test]
fn h2_session_seeds() {
    for (name, data) in seeds("h2_session") {
        let s = h2_session(&data);
        assert!(s.rounds < H2_MAX_ROUNDS, "{name}: never idle");
        s.check().unwrap_or_else(|e| panic!("{name}: {e}"));
        let frames = frames(&s.output);
        // Streams the gateway ended: END_STREAM on HEADERS or DATA.
        let answered: Vec<u32> = frames
            .iter()
            .filter(|&&(kind, flags, _)| kind <= 1 && flags & 1 == 1)
            .map(|f| f.2)
            .collect();
        let headers = frames.iter().filter(|f| f.0 == 1).count();
        match name.as_str() {
            "ping_flood" => assert!(s.flood, "{name}"),
            "connection_field" => assert!(s.accepted.is_empty(), "{name}"),
            "rapid_reset" => assert_eq!(headers, 0, "{name}: {frames:?}"),
            "informational_after_reset" => assert!(
                !frames.iter().any(|f| f.0 == 1 && f.2 == 5),
                "{name}: HEADERS after the stream's reset: {frames:?}"
            ),
            "rst_for_an_even_stream_with_a_bad_block" => {
                assert!(frames.iter().any(|f| f.0 == 3), "{name}")
            }
            "connect" => assert_eq!(s.accepted, [1], "{name}"),
            _ => {
                assert!(!s.accepted.is_empty(), "{name}");
                for id in &s.accepted {
                    assert!(answered.contains(id), "{name}: stream {id}: {frames:?}");
                }
            }
        }
    }
}

#[test]
fn upgrade_seeds() {
    let outcome = |parsed, asked, upgrading, switching, tunnel| Upgrade {
        parsed,
        asked,
        upgrading,
        switching,
        tunnel,
    };
    for (name, data) in seeds("upgrade") {
        let got = upgrade(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match name.as_str() {
            "websocket_101" | "two_upgrade_fields" => outcome(true, true, true, true, true),
            // A 101 that does not say what it switches to opens nothing.
            "websocket_101_without_upgrade" => outcome(true, true, true, true, false),
            "with_body" | "chunked_body" | "websocket_and_h2c" | "empty_token" => {
                outcome(true, true, false, false, false)
            }
            "h2c" | "empty_list" => outcome(true, true, false, true, false),
            "not_listed" => outcome(true, true, false, false, false),
            "no_connection_upgrade" => outcome(true, false, false, true, false),
            "http10" => outcome(true, false, false, false, false),
            _ => panic!("{name}: a seed without an expected outcome"),
        };
        assert_eq!(got, want, "{name}");
    }
}
