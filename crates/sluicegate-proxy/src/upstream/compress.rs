//! A response body relayed compressed: the upstream's body, whatever its
//! framing (a length, chunked, an HTTP/2 stream's data, until close), is
//! fed to the route's coder as it comes, and each read from the upstream
//! is passed on at once with a sync flush (server-sent events and other
//! streams arrive on time); the coded bytes go chunked to an HTTP/1.1
//! client, as data to an HTTP/2 one, the upstream's trailers after them.
//! The coder and its output buffer are the worker's, reused
//! ([`crate::worker::Worker::take_encoder`]). Only routes with `compress`
//! whose answer qualifies come here ([`crate::filters::compress`]);
//! every other answer takes [`super::body::relay_body`]. A caching
//! route's fill is given the upstream's body as it is taken, before
//! coding: the cache keeps one uncoded object (`session/cached.rs`
//! codes its hits).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::observe::metrics::CompressMetrics;
use crate::proto::chunked::{write_chunk_header, ChunkedDecoder};
use crate::proto::codec::BodyKind;
use crate::proto::compress::{Encoder, Encoding, Flush};
use crate::proto::http2::exchange::trailer_map;
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::body::{client_write_failed, write_last_chunk, Fault, STREAM_BUF};
use crate::worker::{Bufs, Downstream};

/// Streams the response body (framed as `body` by the upstream)
/// compressed to the client, after the head in `bufs.out` (an HTTP/1.1
/// client's; an HTTP/2 client's went already). Returns the coded bytes
/// written; on error, those written so far and what failed. Counts the
/// answer and its bytes in and out on the route's counters. `how`: the
/// coding, those counters, and the worker's coder for it with its output
/// buffer ([`crate::worker::Worker::take_encoder`]), given back at the end.
pub(crate) async fn relay_compressed(
    down: &Downstream<'_>,
    up: &Stream,
    bufs: &mut Bufs,
    body: BodyKind,
    how: (Encoding, &CompressMetrics, (Encoder, Vec<u8>)),
    idle: Duration,
    client_write: Duration,
) -> Result<u64, (u64, Fault)> {
    let worker = down.worker;
    let (coding, m, (mut enc, mut z)) = how;
    let mut r = Relay {
        down,
        up,
        h1: !matches!(down.client, Stream::H2(_)),
        idle,
        client_write,
        taken: 0,
        written: 0,
    };
    let result = r.run(bufs, body, &mut enc, &mut z).await;
    worker.put_encoder((enc, z));
    m.responses[coding.index()].fetch_add(1, Ordering::Relaxed);
    m.bytes_in.fetch_add(r.taken, Ordering::Relaxed);
    m.bytes_out.fetch_add(r.written, Ordering::Relaxed);
    result.map(|()| r.written).map_err(|f| (r.written, f))
}

struct Relay<'a, 'd> {
    down: &'a Downstream<'d>,
    up: &'a Stream,
    /// The client speaks HTTP/1.1: the coded body goes chunked.
    h1: bool,
    idle: Duration,
    client_write: Duration,
    /// Body bytes taken from the upstream.
    taken: u64,
    /// Coded bytes written to the client (without the chunk framing).
    written: u64,
}

impl Relay<'_, '_> {
    async fn run(
        &mut self,
        bufs: &mut Bufs,
        body: BodyKind,
        enc: &mut Encoder,
        z: &mut Vec<u8>,
    ) -> Result<(), Fault> {
        let dl = &self.down.worker.deadlines;
        let coded = |e: std::io::Error| {
            tracing::debug!(error = %e, "compressing a response failed");
            Fault::Upstream
        };
        match body {
            BodyKind::None => unreachable!("a body without content is never compressed"),
            BodyKind::Length(n) => loop {
                let take = (bufs.upb.len() as u64).min(n - self.taken) as usize;
                self.taken += take as u64;
                let last = self.taken == n;
                let flush = if last { Flush::Finish } else { Flush::Sync };
                let data = &bufs.upb.filled()[..take];
                tee(&mut bufs.fill, data);
                enc.encode(data, z, flush).map_err(coded)?;
                bufs.upb.consume(take);
                self.send(bufs, z, last, None).await?;
                if last {
                    return Ok(());
                }
                match bufs
                    .upb
                    .fill(self.up, STREAM_BUF, dl.after(self.idle))
                    .await
                {
                    Ok(0) | Err(_) => return Err(Fault::Upstream),
                    Ok(_) => {}
                }
            },
            BodyKind::Chunked => {
                let mut dec = ChunkedDecoder::new();
                let mut trailers = Vec::new();
                loop {
                    let step = match dec.step(bufs.upb.filled()) {
                        Ok(step) => step,
                        Err(_) if self.written == 0 && !bufs.out.is_empty() => {
                            return Err(Fault::Unsent)
                        }
                        Err(_) => return Err(Fault::Upstream),
                    };
                    if let Some(r) = step.data {
                        self.taken += r.len() as u64;
                        let data = &bufs.upb.filled()[r];
                        tee(&mut bufs.fill, data);
                        enc.encode(data, z, Flush::None).map_err(coded)?;
                    }
                    if let Some(r) = step.trailer {
                        trailers.extend_from_slice(&bufs.upb.filled()[r]);
                    }
                    bufs.upb.consume(step.consumed);
                    let done = dec.is_done();
                    if let (true, Some(f)) = (done, bufs.fill.as_deref_mut()) {
                        // Whole: stored before its end reaches the client.
                        f.whole = true;
                        f.commit();
                    }
                    if done || bufs.upb.is_empty() {
                        let flush = if done { Flush::Finish } else { Flush::Sync };
                        enc.encode(&[], z, flush).map_err(coded)?;
                        let t = done.then_some(&trailers[..]);
                        self.send(bufs, z, done, t.map(Tail::Lines)).await?;
                    }
                    if done {
                        return Ok(());
                    }
                    if bufs.upb.is_empty() {
                        match bufs
                            .upb
                            .fill(self.up, STREAM_BUF, dl.after(self.idle))
                            .await
                        {
                            Ok(0) | Err(_) => return Err(Fault::Upstream),
                            Ok(_) => {}
                        }
                    }
                }
            }
            BodyKind::Stream | BodyKind::UntilClose => loop {
                // Data as the upstream gives it, until its end.
                let data = bufs.upb.filled();
                self.taken += data.len() as u64;
                tee(&mut bufs.fill, data);
                enc.encode(data, z, Flush::Sync).map_err(coded)?;
                bufs.upb.clear();
                self.send(bufs, z, false, None).await?;
                let ended = match bufs
                    .upb
                    .fill(self.up, STREAM_BUF, dl.after(self.idle))
                    .await
                {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(_) => return Err(Fault::Upstream),
                };
                if ended {
                    enc.encode(&[], z, Flush::Finish).map_err(coded)?;
                    let trailers = match body {
                        BodyKind::Stream => self.up.take_trailers(),
                        _ => None,
                    };
                    return self.send(bufs, z, true, Some(Tail::Map(trailers))).await;
                }
            },
        }
    }

    /// Writes the coded bytes in `z` (after the head still in `bufs.out`,
    /// if it is there), framed for the client, then the body's end when
    /// `last` (with `tail`'s trailers).
    async fn send(
        &mut self,
        bufs: &mut Bufs,
        z: &mut Vec<u8>,
        last: bool,
        tail: Option<Tail<'_>>,
    ) -> Result<(), Fault> {
        let client = self.down.client;
        let wait = self.down.worker.deadlines.after(self.client_write);
        let failed = |e: std::io::Error| {
            client_write_failed(self.down.worker, &e);
            Fault::Client
        };
        self.written += z.len() as u64;
        if !self.h1 {
            if !z.is_empty() {
                write_all_by(client, z, wait).await.map_err(failed)?;
                z.clear();
            }
            let Stream::H2(x) = client else {
                return Ok(());
            };
            if last {
                let t = match tail {
                    Some(Tail::Lines(l)) if !l.is_empty() => Some(trailer_map(l)),
                    Some(Tail::Map(m)) => m,
                    _ => None,
                };
                match t.filter(|t| !t.is_empty()) {
                    Some(t) => x.send_trailers(t).map_err(failed)?,
                    None => x.finish(),
                }
            }
            return Ok(());
        }
        let out = &mut bufs.out;
        if !z.is_empty() {
            write_chunk_header(out, z.len());
            out.extend_from_slice(z);
            out.extend_from_slice(b"\r\n");
            z.clear();
        }
        if last {
            match tail {
                Some(Tail::Lines(l)) if !l.is_empty() => {
                    out.extend_from_slice(b"0\r\n");
                    out.extend_from_slice(l);
                    out.extend_from_slice(b"\r\n");
                }
                Some(Tail::Map(m)) => write_last_chunk(out, m.as_ref()),
                _ => write_last_chunk(out, None),
            }
        }
        if !out.is_empty() {
            write_all_by(client, out, wait).await.map_err(failed)?;
            out.clear();
        }
        Ok(())
    }
}

/// Copies a piece of the upstream's body to the request's cache fill,
/// when it has one.
#[inline]
fn tee(fill: &mut Option<Box<crate::cache::fill::Fill>>, data: &[u8]) {
    if let Some(f) = fill {
        f.push(data);
    }
}

/// What ends a body: trailer field lines (an HTTP/1.1 upstream's last
/// chunk's), or an HTTP/2 upstream's trailers.
enum Tail<'a> {
    Lines(&'a [u8]),
    Map(Option<http::HeaderMap>),
}
