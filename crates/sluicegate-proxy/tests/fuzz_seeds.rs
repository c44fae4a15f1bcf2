//! Replays the committed fuzz seeds (`fuzz/seeds/`) through the parsers, so
//! every input that once mattered keeps being checked without a fuzzer.

use std::path::PathBuf;

use sluicegate_proxy::fuzzing::ChunkedDecoder;
use sluicegate_proxy::fuzzing::Target;
use sluicegate_proxy::fuzzing::{parse_request, parse_response, Parsed, RequestHead, ResponseHead};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

#[test]
fn request_head_seeds() {
    let mut complete = 0;
    for (name, data) in seeds("request_head") {
        let mut head = RequestHead::default();
        if let Ok(Parsed::Complete(framing)) = parse_request(&data, 16384, &mut head) {
            complete += 1;
            assert!(framing.len <= data.len(), "{name}");
            let _ = Target::parse(&data, &head);
        }
        let mut res = ResponseHead::default();
        let _ = parse_response(&data, 16384, false, &mut res);
    }
    assert!(complete > 0);
}

/// Decodes `data` fed in pieces of `piece` bytes: (body, complete) or an error.
fn decode(data: &[u8], piece: usize) -> Result<(Vec<u8>, bool), ()> {
    let mut d = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut pos = 0;
    while pos < data.len() && !d.is_done() {
        let end = (pos + piece).min(data.len());
        let s = d.step(&data[pos..end]).map_err(|_| ())?;
        if let Some(r) = s.data {
            body.extend_from_slice(&data[pos + r.start..pos + r.end]);
        }
        if s.consumed == 0 {
            break;
        }
        pos += s.consumed;
    }
    Ok((body, d.is_done()))
}

#[test]
fn chunked_seeds() {
    for (name, data) in seeds("chunked") {
        let whole = decode(&data, data.len().max(1));
        assert_eq!(whole, decode(&data, 1), "{name}");
        assert_eq!(whole, decode(&data, 3), "{name}");
    }
}

#[test]
fn config_seeds() {
    for (name, data) in seeds("config") {
        let text = String::from_utf8_lossy(&data);
        if let Err(errors) = sluicegate_config::parse(&text) {
            assert!(errors.iter().all(|e| e.line >= 1 && e.col >= 1), "{name}");
        }
    }
}

#[test]
fn path_seeds() {
    for (name, data) in seeds("path") {
        if let Ok(Some(p)) = sluicegate_proxy::fuzzing::normalize(&data) {
            assert_eq!(sluicegate_proxy::fuzzing::normalize(&p), Ok(None), "{name}");
        }
    }
}
