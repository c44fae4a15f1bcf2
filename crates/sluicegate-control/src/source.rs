//! Where the running config comes from: the [`ConfigSource`] trait, which
//! the config file (`file.rs`) and etcd (`etcd/`) implement. The reloader
//! holds one source and calls it for reloads, reads and writes; a source
//! publishes through the [`Publisher`] it is given.

use std::sync::Arc;

use serde_json::Value;
use sluicegate_config::Document;

use crate::history::Source;
use crate::publish::{IfMatch, Publisher, WriteError};

/// A page of one kind's objects: how many match, and those on the page,
/// each with its name.
pub(crate) type Page = (usize, Vec<(String, Value)>);

/// Which of one kind's objects a list shows: those of kind `section`
/// whose name contains `filter`, `limit` of them from `offset`.
pub(crate) struct PageOf<'a> {
    pub section: &'a str,
    pub filter: Option<&'a str>,
    pub offset: usize,
    pub limit: usize,
}

/// The document kept in `kept`, or else the one `make` makes, kept there
/// for the reads that follow until the source forgets it.
pub(crate) fn kept_or(
    kept: &mut Option<Arc<Document>>,
    make: impl FnOnce() -> Result<Document, String>,
) -> Result<Arc<Document>, String> {
    if let Some(doc) = kept {
        return Ok(doc.clone());
    }
    let doc = Arc::new(make()?);
    *kept = Some(doc.clone());
    Ok(doc)
}

/// A config source. Every method runs under the reloader's lock, so a
/// reload, a write and the application of what a watch saw never
/// interleave. The methods with a default are for a source that keeps
/// each object apart (etcd); the default says "not this source", and the
/// caller takes the way of the whole document.
pub(crate) trait ConfigSource: Send {
    /// Called once when the source takes over, before any other call
    /// (etcd: the config cached on disk is applied).
    fn start(&mut self, _p: &mut Publisher) {}

    /// SIGHUP, SIGUSR2 or a change of the config file or a file it names:
    /// reads the source again and publishes the config it makes. Returns
    /// whether it was applied.
    fn reload(&mut self, p: &mut Publisher, why: Source) -> bool;

    /// The running config as a document (its tree made on first use, then
    /// shared by every read until the config changes).
    fn document(&mut self, p: &Publisher) -> Result<Arc<Document>, String>;

    /// An admin API write of a whole document: validated as a file is,
    /// stored and published, all or nothing, if `if_match` allows.
    /// Returns the new revision.
    fn write(
        &mut self,
        p: &mut Publisher,
        doc: Document,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError>;

    /// A rollout's write of a whole document (`rollout/`): as [`Self::write`]
    /// without `If-Match`; a source shared by a fleet (etcd) also makes it
    /// hold only while `fence` (the leader's key) is this gateway's.
    fn write_fenced(
        &mut self,
        p: &mut Publisher,
        doc: Document,
        _fence: Option<&crate::rollout::Fence>,
    ) -> Result<u64, WriteError> {
        self.write(p, doc, None)
    }

    /// Applies what the source has queued (the etcd watch's changes).
    /// Returns whether anything was.
    fn drain(&mut self, _p: &mut Publisher) -> bool {
        false
    }

    /// The objects `want` asks for, in name order, read without a
    /// document of the whole config; `None`: not kept apart here (or the
    /// file's are in force).
    fn page(&self, _want: &PageOf<'_>) -> Option<Page> {
        None
    }

    /// The object `name` of kind `section` (`Some(None)`: there is none),
    /// read as [`Self::page`] reads.
    fn item(&self, _section: &str, _name: &str) -> Option<Option<Value>> {
        None
    }

    /// The stored object of app `name` (`Some(None)`: there is none), when
    /// this source can write an app alone.
    fn app(&self, _name: &str) -> Option<Option<Value>> {
        None
    }

    /// Writes app `name` alone (`new`: `None` removes it), checked by the
    /// file's rules and applied in place of a whole reload. `None`: this
    /// change needs the whole document.
    fn write_app(
        &mut self,
        _p: &mut Publisher,
        _name: &str,
        _new: Option<Value>,
        _if_match: Option<&IfMatch>,
    ) -> Option<Result<u64, WriteError>> {
        None
    }
}
