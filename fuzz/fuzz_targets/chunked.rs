//! Fuzzes the chunked decoder: the same input fed whole and byte by byte
//! must give the same body and the same verdict.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::ChunkedDecoder;

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
        assert!(s.consumed <= end - pos);
        if s.consumed == 0 && !d.is_done() {
            break;
        }
        pos += s.consumed;
    }
    assert_eq!(d.total, body.len() as u64);
    Ok((body, d.is_done()))
}

fuzz_target!(|data: &[u8]| {
    let whole = decode(data, data.len().max(1));
    let bytewise = decode(data, 1);
    assert_eq!(whole, bytewise);
});
