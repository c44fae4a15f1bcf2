//! Replays the committed `proxy_protocol` fuzz seeds
//! (`fuzz/seeds/proxy_protocol/`) through the PROXY protocol parser, like
//! `fuzz_seeds.rs` does for the other targets (kept apart so as not to
//! edit that file; it can be folded in).

use std::path::PathBuf;

use sluicegate_proxy::fuzzing::proxy_protocol;

#[test]
fn proxy_protocol_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/proxy_protocol");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    let (mut complete, mut refused) = (0, 0);
    for path in &seeds {
        let data = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        match proxy_protocol(&data) {
            Ok(Some((len, ..))) => {
                complete += 1;
                assert!(len <= data.len(), "{name}");
                assert_eq!(proxy_protocol(&data[..len - 1]), Ok(None), "{name}");
            }
            Ok(None) => panic!("{name}: a seed is a whole input"),
            Err(e) => {
                refused += 1;
                assert!(!e.is_empty(), "{name}");
            }
        }
        // The seed names say what they are.
        let valid = name.starts_with("v1_tcp")
            || name.starts_with("v1_unknown")
            || name.starts_with("v2_ipv")
            || name.starts_with("v2_local");
        assert_eq!(
            valid,
            matches!(proxy_protocol(&data), Ok(Some(_))),
            "{name}"
        );
    }
    assert!(complete > 0 && refused > 0);
}
