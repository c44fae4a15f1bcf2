//! A route's `compress` as requests use it: the codings offered with
//! their levels, the smallest body compressed and the media types; and
//! the two choices made for each request, the coding from the request's
//! head ([`CompressRt::choose`]) and whether its answer is compressed
//! from the response's head ([`CompressRt::applies`]). The relay itself
//! is [`crate::upstream::compress`]'s.

use sluicegate_config::{Compress, CompressAlgorithm};

use crate::observe::metrics::CompressMetrics;
use crate::proto::bytes::eq_lower;
use crate::proto::codec::BodyKind;
use crate::proto::compress::{is_grpc, negotiate, no_transform, Encoding, TypeRule};
use crate::proto::head::{HeaderRef, RequestHead};

/// A route's compression settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressRt {
    /// The codings in the route's order of preference.
    codings: Box<[Encoding]>,
    /// Each coding's level, by [`Encoding::index`].
    levels: [i32; 3],
    min_size: u64,
    types: Box<[TypeRule]>,
}

/// What a request's answer may become: compressed in `coding` if the
/// answer allows, or (`coding` none: the client takes no coding the route
/// offers) sent as it is with `Vary: Accept-Encoding`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Compressing<'a> {
    pub(crate) rt: &'a CompressRt,
    pub(crate) coding: Option<Encoding>,
    pub(crate) metrics: &'a CompressMetrics,
}

fn coding(a: CompressAlgorithm) -> Encoding {
    match a {
        CompressAlgorithm::Zstd => Encoding::Zstd,
        CompressAlgorithm::Br => Encoding::Br,
        CompressAlgorithm::Gzip => Encoding::Gzip,
    }
}

impl CompressRt {
    pub(crate) fn new(cfg: &Compress) -> CompressRt {
        let mut levels = [0; 3];
        for a in CompressAlgorithm::ALL {
            levels[coding(a).index()] = a.level(cfg.level);
        }
        CompressRt {
            codings: cfg.algorithms.iter().map(|a| coding(*a)).collect(),
            levels,
            min_size: cfg.min_size,
            types: cfg.types.iter().filter_map(|t| TypeRule::new(t)).collect(),
        }
    }

    /// The coding a coder of `coding` works at.
    pub(crate) fn level(&self, coding: Encoding) -> i32 {
        self.levels[coding.index()]
    }

    /// The coding for a request (its head over `raw`), from its
    /// `Accept-Encoding` (`Some(None)`: none it takes); `None` when the
    /// answer is left alone whatever it is: HEAD, a range request, gRPC,
    /// or an HTTP/1.0 client (no chunked coding to carry a body of
    /// unknown length on a connection kept alive).
    pub(crate) fn choose(
        &self,
        raw: &[u8],
        req: &RequestHead,
        is_head: bool,
        grpc: bool,
    ) -> Option<Option<Encoding>> {
        if is_head || grpc || req.minor == 0 {
            return None;
        }
        let named = |h: &&HeaderRef, name: &[u8]| eq_lower(&raw[h.name.clone()], name);
        if req.headers.iter().any(|h| named(&h, b"range")) {
            return None;
        }
        let values = req
            .headers
            .iter()
            .filter(|h| named(h, b"accept-encoding"))
            .map(|h| &raw[h.value.clone()]);
        Some(negotiate(values, &self.codings))
    }

    /// Whether an answer (its status, body framing, and head's fields
    /// over `raw`) is compressed: a body of at least `min_size` (or of
    /// unknown length), of a type in `types` and not gRPC, without a
    /// `Content-Encoding` or `Cache-Control: no-transform`; never a 204,
    /// 206 or 304 (nor a 1xx or 101, which never get here).
    pub(crate) fn applies(
        &self,
        status: u16,
        body: BodyKind,
        raw: &[u8],
        headers: &[HeaderRef],
    ) -> bool {
        let fields = headers
            .iter()
            .map(|h| (&raw[h.name.clone()], &raw[h.value.clone()]));
        self.applies_to(status, body, fields)
    }

    /// [`CompressRt::applies`] for an answer whose fields are given as
    /// (name, value) pairs: a stored one, of the cache.
    pub(crate) fn applies_to<'a>(
        &self,
        status: u16,
        body: BodyKind,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> bool {
        match body {
            BodyKind::None => return false,
            BodyKind::Length(n) if n < self.min_size || n == 0 => return false,
            _ => {}
        }
        if matches!(status, 204 | 206 | 304) || status < 200 {
            return false;
        }
        let mut typed = false;
        for (name, value) in fields {
            if eq_lower(name, b"content-encoding") && !value.trim_ascii().is_empty() {
                return false;
            }
            if eq_lower(name, b"cache-control") && no_transform(value) {
                return false;
            }
            if eq_lower(name, b"content-range") {
                return false;
            }
            if eq_lower(name, b"content-type") {
                if is_grpc(value) {
                    return false;
                }
                typed = self.types.iter().any(|t| t.matches(value));
            }
        }
        typed
    }
}
