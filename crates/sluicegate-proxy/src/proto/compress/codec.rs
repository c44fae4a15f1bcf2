//! The content codings themselves: one streaming encoder over gzip
//! (flate2 on zlib-rs), brotli and zstd, that appends its output to a
//! `Vec`, flushes on demand (each relayed read is passed on at once) and,
//! for gzip and zstd, is reset and reused instead of allocated again; and
//! [`encode_all`], a whole byte slice at once (what a cache that stores
//! one object and serves several encodings needs).

use std::io;

use brotli::enc::encode::{BrotliEncoderOperation, BrotliEncoderStateStruct};
use brotli::enc::StandardAlloc;

/// A content coding the gateway produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Zstd,
    Br,
    Gzip,
}

impl Encoding {
    /// Every coding, in the default order of preference.
    pub const ALL: [Encoding; 3] = [Encoding::Zstd, Encoding::Br, Encoding::Gzip];

    /// The coding's token in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Br => "br",
            Encoding::Gzip => "gzip",
        }
    }

    /// Its place in [`Encoding::ALL`] (metrics index by it).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What an [`Encoder::encode`] call does after taking its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Nothing more: the coder may keep what it took for later.
    None,
    /// Everything taken so far comes out, decodable, and the stream goes
    /// on (deflate's sync flush, brotli's and zstd's flush).
    Sync,
    /// The stream ends (gzip's trailer, zstd's frame end).
    Finish,
}

/// Output reserved ahead of each coder call.
const STEP: usize = 8 * 1024;

/// A streaming encoder of one coding at one level.
pub struct Encoder {
    coding: Encoding,
    level: i32,
    state: State,
}

enum State {
    Gzip(Box<flate2::Compress>),
    Br(Box<BrotliEncoderStateStruct<StandardAlloc>>),
    Zstd(zstd::stream::raw::Encoder<'static>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("coding", &self.coding)
            .field("level", &self.level)
            .finish()
    }
}

impl Encoder {
    /// A new encoder; `level` in the coding's own range (gzip 1 to 9,
    /// brotli 0 to 11, zstd 1 to 22; the config checks it).
    pub fn new(coding: Encoding, level: i32) -> io::Result<Encoder> {
        let state = match coding {
            Encoding::Gzip => {
                let level = flate2::Compression::new(level.clamp(0, 9) as u32);
                State::Gzip(Box::new(flate2::Compress::new_gzip(level, 15)))
            }
            Encoding::Br => State::Br(Box::new(brotli_state(level))),
            Encoding::Zstd => State::Zstd(zstd::stream::raw::Encoder::new(level)?),
        };
        Ok(Encoder {
            coding,
            level,
            state,
        })
    }

    pub fn coding(&self) -> Encoding {
        self.coding
    }

    pub fn level(&self) -> i32 {
        self.level
    }

    /// Readies the encoder for a new stream, keeping its memory (gzip's
    /// and zstd's state); brotli's state has no reset and is made anew.
    pub fn reset(&mut self) -> io::Result<()> {
        use zstd::stream::raw::Operation;
        match &mut self.state {
            State::Gzip(c) => c.reset(),
            State::Br(s) => **s = brotli_state(self.level),
            State::Zstd(z) => z.reinit()?,
        }
        Ok(())
    }

    /// Encodes `input`, appending what comes out to `out`, then flushes as
    /// `flush` says.
    pub fn encode(&mut self, input: &[u8], out: &mut Vec<u8>, flush: Flush) -> io::Result<()> {
        match &mut self.state {
            State::Gzip(c) => gzip(c, input, out, flush),
            State::Br(s) => brotli(s, input, out, flush),
            State::Zstd(z) => zstd_encode(z, input, out, flush),
        }
    }
}

/// `input` encoded whole, as one stream.
#[allow(dead_code)]
pub fn encode_all(coding: Encoding, level: i32, input: &[u8]) -> io::Result<Vec<u8>> {
    let mut e = Encoder::new(coding, level)?;
    let mut out = Vec::with_capacity(input.len() / 3 + 64);
    e.encode(input, &mut out, Flush::Finish)?;
    Ok(out)
}

fn brotli_state(level: i32) -> BrotliEncoderStateStruct<StandardAlloc> {
    use brotli::enc::encode::BrotliEncoderParameter as P;
    let mut s = BrotliEncoderStateStruct::new(StandardAlloc::default());
    s.set_parameter(P::BROTLI_PARAM_QUALITY, level.clamp(0, 11) as u32);
    // A 4 MiB window at most: what decoders are sure to take.
    s.set_parameter(P::BROTLI_PARAM_LGWIN, 22);
    s
}

fn gzip(c: &mut flate2::Compress, input: &[u8], out: &mut Vec<u8>, flush: Flush) -> io::Result<()> {
    use flate2::{FlushCompress, Status};
    let mode = match flush {
        Flush::None => FlushCompress::None,
        Flush::Sync => FlushCompress::Sync,
        Flush::Finish => FlushCompress::Finish,
    };
    let mut at = 0;
    loop {
        out.reserve(STEP.max((input.len() - at) / 2));
        let before = c.total_in();
        let status = c
            .compress_vec(&input[at..], out, mode)
            .map_err(io::Error::other)?;
        at += (c.total_in() - before) as usize;
        let room = out.len() < out.capacity();
        match status {
            Status::StreamEnd => return Ok(()),
            // Input all taken and room left over: nothing is pending (a
            // finish goes on to its stream end).
            Status::Ok | Status::BufError
                if at == input.len() && room && flush != Flush::Finish =>
            {
                return Ok(())
            }
            _ => {}
        }
    }
}

fn brotli(
    s: &mut BrotliEncoderStateStruct<StandardAlloc>,
    input: &[u8],
    out: &mut Vec<u8>,
    flush: Flush,
) -> io::Result<()> {
    let op = match flush {
        Flush::None => BrotliEncoderOperation::BROTLI_OPERATION_PROCESS,
        Flush::Sync => BrotliEncoderOperation::BROTLI_OPERATION_FLUSH,
        Flush::Finish => BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
    };
    let mut avail_in = input.len();
    let mut in_at = 0;
    loop {
        let start = out.len();
        let room = STEP.max(avail_in / 2);
        out.resize(start + room, 0);
        let (mut avail_out, mut out_at) = (room, start);
        let ok = s.compress_stream(
            op,
            &mut avail_in,
            input,
            &mut in_at,
            &mut avail_out,
            out,
            &mut out_at,
            &mut None,
            &mut |_, _, _, _| (),
        );
        out.truncate(out_at);
        if !ok {
            return Err(io::Error::other("brotli encoder failed"));
        }
        let done = match flush {
            Flush::None => avail_in == 0,
            Flush::Sync => avail_in == 0 && !s.has_more_output(),
            Flush::Finish => s.is_finished(),
        };
        if done {
            return Ok(());
        }
    }
}

fn zstd_encode(
    z: &mut zstd::stream::raw::Encoder<'static>,
    input: &[u8],
    out: &mut Vec<u8>,
    flush: Flush,
) -> io::Result<()> {
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
    let mut src = InBuffer::around(input);
    while src.pos() < input.len() {
        out.reserve(STEP.max((input.len() - src.pos()) / 2));
        let pos = out.len();
        let mut dst = OutBuffer::around_pos(out, pos);
        z.run(&mut src, &mut dst)?;
    }
    if flush == Flush::None {
        return Ok(());
    }
    loop {
        out.reserve(STEP);
        let pos = out.len();
        let mut dst = OutBuffer::around_pos(out, pos);
        let left = match flush {
            Flush::Finish => z.finish(&mut dst, true)?,
            _ => z.flush(&mut dst)?,
        };
        if left == 0 {
            return Ok(());
        }
    }
}
