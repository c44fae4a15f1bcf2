//! Reloading: the [`Reloader`] holds the config source in force (the file,
//! or etcd once `etcd::start` puts it in place) and what every source
//! publishes through (`publish.rs`). It reloads on SIGHUP (or SIGUSR2) or
//! when the file or a file it names changes, validates and compiles off
//! the hot path, and publishes; an invalid config is refused and the
//! running one stays. Every attempt goes into the reload history.
//!
//! The reloader is also what the admin API reads and writes through: one
//! owner of the source and the running document, behind one lock, so that
//! an API write and a reload never interleave.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sluicegate_config::{Config, Document};
use sluicegate_proxy::Shared;

use crate::file::FileSource;
use crate::history::{History, Issue, Source};
pub use crate::publish::{stamp, Overrides, Stamp};
use crate::publish::{IfMatch, Publisher, WriteError};
use crate::source::{ConfigSource, Page, PageOf};

pub struct Reloader {
    publisher: Publisher,
    source: Box<dyn ConfigSource>,
}

impl Reloader {
    /// `running` is the config the gateway started with, `last` the file's
    /// stamp taken before it was read and `text` the file's text it was
    /// read from.
    pub fn new(
        path: PathBuf,
        shared: Arc<Shared>,
        overrides: Overrides,
        running: (Config, Option<Stamp>, String),
        on_apply: Box<dyn Fn(&Config) + Send>,
    ) -> Reloader {
        let (running, last, text) = running;
        let keep_text = running.admin.is_some();
        Reloader {
            publisher: Publisher::new(path, shared, overrides, &running, last, on_apply),
            source: Box::new(FileSource::new(text, keep_text)),
        }
    }

    /// Puts `source` in place of the one in force (started first).
    /// The gateway's shared state (the running snapshot).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.publisher.shared
    }

    pub(crate) fn set_source(&mut self, mut source: Box<dyn ConfigSource>) {
        source.start(&mut self.publisher);
        self.source = source;
    }

    /// Sets what runs once a whole config from etcd is applied and its
    /// parts dropped (the binary gives free memory back to the system).
    pub fn on_settled(&mut self, f: Box<dyn Fn() + Send>) {
        self.publisher.settled = f;
    }

    /// The running config's revision (the snapshot's generation).
    pub fn revision(&self) -> u64 {
        self.publisher.revision()
    }

    /// The config file.
    pub fn path(&self) -> &Path {
        &self.publisher.path
    }

    pub(crate) fn history(&self) -> &History {
        &self.publisher.history
    }

    /// Locks the reloader shared by the signal loop and the admin API,
    /// taking a poisoned lock's value as it is (each step leaves it whole).
    pub fn locked(m: &std::sync::Mutex<Reloader>) -> std::sync::MutexGuard<'_, Reloader> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reloads if the file, or a file it names (a certificate, a key, a
    /// CA bundle), changed since it was last read; says whether a reload
    /// was tried.
    pub fn check(&mut self) -> bool {
        let changed = self.publisher.changed();
        if changed {
            self.reload(Source::File);
        }
        changed
    }

    /// Reads the source again and publishes it. Returns whether it was applied.
    pub fn reload(&mut self, source: Source) -> bool {
        self.source.reload(&mut self.publisher, source)
    }

    /// Applies what the source has queued (the etcd watch's changes).
    /// Returns whether anything was.
    pub(crate) fn drain(&mut self) -> bool {
        self.source.drain(&mut self.publisher)
    }

    /// The running config as a document.
    pub(crate) fn document(&mut self) -> Result<Arc<Document>, String> {
        self.source.document(&self.publisher)
    }

    /// Checks `doc` as a file would be; returns the config to run.
    pub(crate) fn validate(&self, doc: &Document) -> Result<Config, Vec<Issue>> {
        self.publisher.validate(doc)
    }

    /// Validates, stores and publishes `doc`; returns the new revision.
    pub(crate) fn write(
        &mut self,
        doc: Document,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError> {
        self.source.write(&mut self.publisher, doc, if_match)
    }

    /// A rollout's write: see [`ConfigSource::write_fenced`].
    pub(crate) fn write_fenced(
        &mut self,
        doc: Document,
        fence: Option<&crate::rollout::Fence>,
    ) -> Result<u64, WriteError> {
        self.source.write_fenced(&mut self.publisher, doc, fence)
    }

    /// The rollouts' state (`rollout/`), which every applied config updates.
    pub fn rollouts(&self) -> Arc<crate::rollout::Board> {
        self.publisher.rollouts.clone()
    }

    /// See [`ConfigSource::page`].
    pub(crate) fn page(&self, want: &PageOf<'_>) -> Option<Page> {
        self.source.page(want)
    }

    /// See [`ConfigSource::item`].
    pub(crate) fn item(&self, section: &str, name: &str) -> Option<Option<Value>> {
        self.source.item(section, name)
    }

    /// See [`ConfigSource::app`].
    pub(crate) fn app(&self, name: &str) -> Option<Option<Value>> {
        self.source.app(name)
    }

    /// See [`ConfigSource::write_app`].
    pub(crate) fn write_app(
        &mut self,
        name: &str,
        new: Option<Value>,
        if_match: Option<&IfMatch>,
    ) -> Option<Result<u64, WriteError>> {
        self.source
            .write_app(&mut self.publisher, name, new, if_match)
    }
}
