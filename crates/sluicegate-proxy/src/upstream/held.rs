//! Responses held in memory: read whole through the internal client
//! ([`HeldResponse::read`]) or made in code (a cache's entry, say), and
//! replayed to a client as often as wanted ([`HeldResponse::replay`]). To
//! an HTTP/1.1 client it goes as HTTP/1.1 text: with a `Content-Length`
//! when it has no trailers, else chunked with its trailers (to an
//! HTTP/1.0 client, until the close, its trailers dropped), and
//! `Connection` as the gateway's other answers write it. To an HTTP/2
//! client's stream it goes as HEADERS (through the stream's
//! [`Exchange::answer`]), DATA, and its trailers or the stream's end. The
//! held fields go as they are, but for those that name the connection or
//! the framing, which the replay writes itself; a response without a body
//! (a 204, a 304, an answer to HEAD) goes as its head alone. Tested with
//! the client, over the in-memory transport (`client/tests.rs`).

use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH};
use http::HeaderMap;

use crate::clock::deadline::Deadlines;
use crate::proto::chunked::write_chunk_header;
use crate::proto::http2::exchange::{connection_specific, AnswerBody, Exchange};
use crate::proto::response;
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::body::write_last_chunk;
use crate::upstream::client::{Error, Event, Response};

/// Bytes gathered before a write when a body is replayed in pieces.
const FLUSH_AT: usize = 32 * 1024;

/// A whole response in memory: its head, its body's data, its trailers.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HeldResponse {
    pub(crate) status: u16,
    pub(crate) fields: HeaderMap,
    /// The body, in the pieces it came in.
    pub(crate) body: Vec<Bytes>,
    pub(crate) trailers: Option<HeaderMap>,
}

/// How a held response goes to a client.
#[derive(Clone, Copy)]
pub(crate) struct Replay<'d> {
    pub(crate) deadlines: &'d Deadlines,
    /// How long each write may wait for the client (`timeouts.client_write`).
    pub(crate) write_timeout: Duration,
    /// The request was HEAD: the head alone goes.
    pub(crate) is_head: bool,
    /// The HTTP/1.x client's minor version (0 for HTTP/1.0).
    pub(crate) client_minor: u8,
    /// The client's connection closes after this answer.
    pub(crate) close: bool,
}

/// What a replay wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Body bytes.
    pub(crate) bytes: u64,
    /// The client's connection must close after it (always when
    /// [`Replay::close`] said so; also when an HTTP/1.0 client's answer
    /// runs until the close). Never for an HTTP/2 stream.
    pub(crate) close: bool,
}

/// How a replayed body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Fields the replay writes itself, never as held.
fn framed_here(name: &HeaderName) -> bool {
    name == CONTENT_LENGTH || connection_specific(name.as_str().as_bytes())
}

impl HeldResponse {
    /// Reads `res` to its end. A body longer than `max` bytes is refused
    /// ([`Error::TooLarge`]) and its connection closed.
    pub(crate) async fn read(mut res: Response<'_, '_>, max: u64) -> Result<HeldResponse, Error> {
        let mut held = HeldResponse {
            status: res.status(),
            fields: res.fields().clone(),
            ..HeldResponse::default()
        };
        let mut len = 0u64;
        loop {
            match res.next().await? {
                Event::Data(data) => {
                    len += data.len() as u64;
                    if len > max {
                        return Err(Error::TooLarge);
                    }
                    held.body.push(data);
                }
                Event::Trailers(t) => held.trailers = Some(t),
                Event::End => return Ok(held),
            }
        }
    }

    /// The body's length.
    pub(crate) fn body_len(&self) -> u64 {
        self.body.iter().map(|d| d.len() as u64).sum()
    }

    fn bodiless(&self) -> bool {
        self.status < 200 || self.status == 204 || self.status == 304
    }

    /// Writes the response to `client` (an HTTP/1.x connection or an
    /// HTTP/2 stream), as [`Replay`] says; `out`: scratch space for the
    /// HTTP/1.1 text.
    pub(crate) async fn replay(
        &self,
        client: &Stream,
        how: Replay<'_>,
        out: &mut Vec<u8>,
    ) -> io::Result<Replayed> {
        if let Stream::H2(x) = client {
            return self.replay_h2(client, x, how).await;
        }
        let framing = if self.bodiless() {
            Framing::None
        } else if self.trailers.is_none() {
            Framing::Length(self.body_len())
        } else if how.client_minor >= 1 {
            Framing::Chunked
        } else {
            Framing::UntilClose
        };
        let close = how.close || framing == Framing::UntilClose;
        self.h1_head(out, framing, close, how.client_minor);
        let wait = || how.deadlines.after(how.write_timeout);
        if how.is_head || framing == Framing::None {
            write_all_by(client, out, wait()).await?;
            return Ok(Replayed { bytes: 0, close });
        }
        for data in self.body.iter().filter(|d| !d.is_empty()) {
            if framing == Framing::Chunked {
                write_chunk_header(out, data.len());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            } else if out.len() + data.len() <= FLUSH_AT {
                out.extend_from_slice(data);
            } else {
                // A large piece goes as it is, not copied first.
                write_all_by(client, out, wait()).await?;
                out.clear();
                write_all_by(client, data, wait()).await?;
                continue;
            }
            if out.len() >= FLUSH_AT {
                write_all_by(client, out, wait()).await?;
                out.clear();
            }
        }
        if framing == Framing::Chunked {
            write_last_chunk(out, self.trailers.as_ref());
        }
        write_all_by(client, out, wait()).await?;
        out.clear();
        Ok(Replayed {
            bytes: self.body_len(),
            close,
        })
    }

    /// The HTTP/1.1 head into `out` (cleared first).
    fn h1_head(&self, out: &mut Vec<u8>, framing: Framing, close: bool, client_minor: u8) {
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(response::reason(self.status).as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in self.fields.iter().filter(|(n, _)| !framed_here(n)) {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        match framing {
            Framing::Length(n) => response::content_length(out, n),
            Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            Framing::None | Framing::UntilClose => {}
        }
        if close {
            out.extend_from_slice(b"connection: close\r\n");
        } else if client_minor == 0 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// [`HeldResponse::replay`] to an HTTP/2 client's stream `x` (the
    /// `client` stream it is).
    async fn replay_h2(
        &self,
        client: &Stream,
        x: &Exchange,
        how: Replay<'_>,
    ) -> io::Result<Replayed> {
        let len = self.body_len();
        let mut fields = HeaderMap::with_capacity(self.fields.len() + 1);
        for (name, value) in self.fields.iter().filter(|(n, _)| !framed_here(n)) {
            fields.append(name.clone(), value.clone());
        }
        let body = if self.bodiless() || (len == 0 && self.trailers.is_none()) {
            AnswerBody::Empty
        } else if self.trailers.is_some() {
            AnswerBody::UntilEnd
        } else {
            fields.insert(CONTENT_LENGTH, HeaderValue::from(len));
            AnswerBody::Length(len)
        };
        x.answer(self.status, fields, body)?;
        let mut replayed = Replayed {
            bytes: 0,
            close: false,
        };
        if how.is_head || body == AnswerBody::Empty {
            return Ok(replayed);
        }
        for data in self.body.iter().filter(|d| !d.is_empty()) {
            write_all_by(client, data, how.deadlines.after(how.write_timeout)).await?;
        }
        replayed.bytes = len;
        if body == AnswerBody::UntilEnd {
            match &self.trailers {
                Some(t) if !t.is_empty() => x.send_trailers(t.clone())?,
                _ => x.finish(),
            }
        }
        Ok(replayed)
    }
}
