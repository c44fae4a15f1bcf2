//! Incremental decoder for the chunked transfer coding (RFC 9112 7.1).
//!
//! The decoder is fed whatever bytes have arrived and hands back the data
//! it finds as ranges of its input, so the caller can forward them without
//! copying. Framing is strict: hex sizes only, CRLF line endings only,
//! bounded extension and trailer sizes. The gateway re-encodes what it
//! forwards, so odd-but-valid framing never reaches an upstream verbatim.

use std::ops::Range;

/// Longest chunk-extension accepted on one chunk-size line.
const MAX_EXT: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; `digits` counts them.
    Size {
        digits: u8,
    },
    /// After the size: optional whitespace and `;ext` up to CR.
    Ext,
    /// Expecting LF after the size line's CR.
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    TrailerLine,
    TrailerLf,
    FinalLf,
    Done,
}

#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    ext: usize,
    trailers: usize,
    /// Body bytes decoded so far.
    pub total: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// What one `step` found.
#[derive(Debug, PartialEq, Eq)]
pub struct Step {
    /// Bytes of input consumed.
    pub consumed: usize,
    /// Body data within the consumed input, if any.
    pub data: Option<Range<usize>>,
    /// Trailer field bytes within the consumed input (whole lines with
    /// their CRLF, or the start of one the input cut), if any: a caller
    /// relaying the body passes them on after its last chunk.
    pub trailer: Option<Range<usize>>,
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            size: 0,
            ext: 0,
            trailers: 0,
            total: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes input until a data range is found, the input ends, or the
    /// body is complete.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let mut i = 0;
        // Where the trailer line under way began in this input.
        let mut line = matches!(self.state, State::TrailerLine | State::TrailerLf).then_some(0);
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size { digits } => {
                    if let Some(d) = hex(b) {
                        if digits >= 15 {
                            return Err(ChunkError("chunk size too large"));
                        }
                        self.size = self.size << 4 | u64::from(d);
                        self.state = State::Size { digits: digits + 1 };
                    } else if digits == 0 {
                        return Err(ChunkError("invalid chunk size"));
                    } else if b == b'\r' {
                        self.state = State::SizeLf;
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        self.ext = 1;
                        self.state = State::Ext;
                    } else {
                        return Err(ChunkError("invalid chunk size"));
                    }
                }
                State::Ext => {
                    if b == b'\r' {
                        self.state = State::SizeLf;
                    } else if b == b'\t' || (b' '..0x7f).contains(&b) || b >= 0x80 {
                        self.ext += 1;
                        if self.ext > MAX_EXT {
                            return Err(ChunkError("chunk extension too long"));
                        }
                    } else {
                        return Err(ChunkError("invalid byte in chunk extension"));
                    }
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunk size line not ended by CRLF"));
                    }
                    if self.size == 0 {
                        self.state = State::TrailerStart;
                    } else {
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    let avail = (input.len() - i) as u64;
                    let take = avail.min(self.size) as usize;
                    self.size -= take as u64;
                    self.total += take as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok(Step {
                        consumed: i + take,
                        data: Some(i..i + take),
                        trailer: None,
                    });
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError("chunk data not followed by CRLF"));
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunk data not followed by CRLF"));
                    }
                    self.state = State::Size { digits: 0 };
                    self.size = 0;
                }
                State::TrailerStart => {
                    if b == b'\r' {
                        self.state = State::FinalLf;
                    } else {
                        self.state = State::TrailerLine;
                        line = Some(i);
                        self.count_trailer()?;
                    }
                }
                State::TrailerLine => {
                    if b == b'\r' {
                        self.state = State::TrailerLf;
                    } else if b == b'\n' || b == 0 {
                        return Err(ChunkError("invalid byte in trailer"));
                    } else {
                        self.count_trailer()?;
                    }
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError("trailer line not ended by CRLF"));
                    }
                    self.state = State::TrailerStart;
                    return Ok(Step {
                        consumed: i + 1,
                        data: None,
                        trailer: line.map(|from| from..i + 1),
                    });
                }
                State::FinalLf => {
                    if b != b'\n' {
                        return Err(ChunkError("chunked body not ended by CRLF"));
                    }
                    self.state = State::Done;
                    return Ok(Step {
                        consumed: i + 1,
                        data: None,
                        trailer: None,
                    });
                }
                State::Done => {
                    return Ok(Step {
                        consumed: i,
                        data: None,
                        trailer: None,
                    })
                }
            }
            i += 1;
        }
        Ok(Step {
            consumed: i,
            data: None,
            trailer: line.map(|from| from..i),
        })
    }

    fn count_trailer(&mut self) -> Result<(), ChunkError> {
        self.trailers += 1;
        if self.trailers > MAX_TRAILERS {
            return Err(ChunkError("trailer section too large"));
        }
        Ok(())
    }
}

/// The value of one hex digit.
pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Appends a chunk header for `len` bytes of data to `out`.
pub fn write_chunk_header(out: &mut Vec<u8>, len: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; 16];
    let mut n = len;
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = DIGITS[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk and an empty trailer section.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `piece` bytes; returns the body.
    fn decode(input: &[u8], piece: usize) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut body = Vec::new();
        let mut pos = 0;
        while pos < input.len() && !d.is_done() {
            let end = (pos + piece).min(input.len());
            let mut local = pos;
            while local < end && !d.is_done() {
                let s = d.step(&input[local..end])?;
                if let Some(r) = s.data {
                    body.extend_from_slice(&input[local + r.start..local + r.end]);
                }
                local += s.consumed;
                if s.consumed == 0 {
                    break;
                }
            }
            pos = local;
        }
        if !d.is_done() {
            return Err(ChunkError("incomplete"));
        }
        Ok((body, pos))
    }

    #[test]
    fn decodes_in_any_split() {
        let input = b"5\r\nhello\r\n1;name=val\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for piece in 1..input.len() {
            let (body, used) = decode(input, piece).unwrap();
            assert_eq!(body, b"hello 0123456789");
            assert_eq!(&input[used..], b"NEXT");
        }
    }

    #[test]
    fn hands_back_the_trailer_lines_in_any_split() {
        let input = b"3\r\nabc\r\n0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\nNEXT";
        for piece in 1..input.len() {
            let mut d = ChunkedDecoder::new();
            let (mut trailers, mut pos) = (Vec::new(), 0);
            while !d.is_done() {
                let end = (pos + piece).min(input.len());
                let s = d.step(&input[pos..end]).unwrap();
                if let Some(r) = s.trailer {
                    trailers.extend_from_slice(&input[pos + r.start..pos + r.end]);
                }
                pos += s.consumed;
            }
            assert_eq!(
                trailers, b"grpc-status: 0\r\ngrpc-message: ok\r\n",
                "piece {piece}"
            );
            assert_eq!(&input[pos..], b"NEXT");
        }
    }

    #[test]
    fn refuses_bad_framing() {
        let bad: &[&[u8]] = &[
            b"x\r\n",
            b"-1\r\n",
            b"\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"1ffffffffffffffff\r\n",
            b"5;a=\x01\r\n",
            b"0\r\nX: 1\n\r\n",
            b"0\r\n\rX",
            b"0x5\r\n",
        ];
        for raw in bad {
            assert!(decode(raw, raw.len()).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn chunk_header_hex() {
        let mut out = Vec::new();
        write_chunk_header(&mut out, 0x1a2f);
        write_chunk_header(&mut out, 0);
        assert_eq!(out, b"1a2f\r\n0\r\n");
    }
}
