//! The relay's side of a cache fill ([`crate::cache::fill`]): the
//! response head judged as it is rewritten for the client, with its
//! `Cache-Status` added to the fields the client gets. The body is fed
//! to the fill by [`super::body::relay_body`].

use crate::proto::codec::BodyKind;
use crate::worker::Bufs;

/// Judges the upstream's response head in `bufs` for the request's fill
/// (there is one), and adds the answer's `Cache-Status`; an unsafe
/// method's fill removes its key's objects here, before the answer
/// reaches the client.
pub(super) fn judge(bufs: &mut Bufs) {
    let Some(fill) = bufs.fill.as_deref_mut() else {
        return;
    };
    let raw = bufs.upb.filled();
    let rid = bufs.ids.rid.name();
    let fields: Vec<(&[u8], &[u8], bool)> = bufs
        .res
        .headers
        .iter()
        .map(|h| {
            let name = &raw[h.name.clone()];
            let ours = name.eq_ignore_ascii_case(rid) || name.eq_ignore_ascii_case(b"cache-status");
            (name, &raw[h.value.clone()], !h.skip && !ours)
        })
        .collect();
    let length = match bufs.res_framing.body {
        BodyKind::None => Some(0),
        BodyKind::Length(n) => Some(n),
        _ => None,
    };
    if let Some(status) = fill.judge(bufs.res.status, &fields, length) {
        bufs.edits
            .response_headers
            .push(b"cache-status", status.as_bytes());
    }
}
