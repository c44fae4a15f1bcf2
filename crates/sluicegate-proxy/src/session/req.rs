//! What the phases of a request after routing know of it besides its
//! buffers ([`Req`]): taken by the lifecycle ([`super::lifecycle`]) and the
//! route action's steps beside it ([`super::action`], [`super::fallback`]).

use super::peer::Link;
use crate::snapshot::Snapshot;

/// What the phases after routing know of a request, besides its buffers.
pub(super) struct Req<'a> {
    pub(super) link: &'a Link<'a>,
    pub(super) snap: &'a Snapshot,
    /// The client as the log names it: the connection's address, or the
    /// one a trusted proxy names.
    pub(super) who: &'a str,
    /// The method's length in `bufs.log_line`.
    pub(super) method_len: usize,
}
