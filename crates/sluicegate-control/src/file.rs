//! The config file as a config source: read again on SIGHUP, SIGUSR2 or
//! when it (or a file it names) changes, and written back by the admin API.
//! An invalid file is logged with every problem and the running config
//! stays.
//!
//! An API write is all or nothing: the document is decoded and the files
//! it names are read first; then the file is replaced (atomically); then
//! the snapshot is compiled and published, and should that still fail the
//! old file is put back. The file's stamp is taken after the write, so the
//! file watcher does not apply it a second time.

use std::sync::Arc;

use sluicegate_config::{Document, LoadError};

use crate::history::{Issue, Source};
use crate::persist;
use crate::publish::{stamp, IfMatch, Publisher, WriteError};
use crate::source::{kept_or, ConfigSource};

pub(crate) struct FileSource {
    /// The running config's text, kept only when the admin API may ask for
    /// it (an admin listener is configured), and its tree once asked for.
    text: Option<String>,
    doc: Option<Arc<Document>>,
    keep_text: bool,
}

impl FileSource {
    /// The source of a config read from `text`; the text is kept when
    /// `keep_text` (the admin API may read it).
    pub(crate) fn new(text: String, keep_text: bool) -> FileSource {
        FileSource {
            text: keep_text.then_some(text),
            doc: None,
            keep_text,
        }
    }

    /// Keeps `text` (and its tree, if known) as the running config's.
    fn set_text(&mut self, text: String, doc: Option<Document>) {
        if self.keep_text {
            self.text = Some(text);
            self.doc = doc.map(Arc::new);
        }
    }
}

impl ConfigSource for FileSource {
    fn reload(&mut self, p: &mut Publisher, source: Source) -> bool {
        let why = source.as_str();
        // Stamp first: a write racing with this read triggers one more reload.
        p.last = stamp(&p.path);
        let loaded = std::fs::read_to_string(&p.path)
            .map_err(|error| LoadError::Io {
                path: p.path.clone(),
                error,
            })
            .and_then(|text| match sluicegate_config::parse(&text) {
                Ok(c) => Ok((c, text)),
                Err(errors) => Err(LoadError::Invalid {
                    path: p.path.clone(),
                    errors,
                }),
            });
        let (mut cfg, text) = match loaded {
            Ok(c) => c,
            Err(e) => {
                p.shared
                    .global
                    .reloads_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match &e {
                    LoadError::Invalid { errors, .. } => {
                        tracing::error!(
                            reason = why,
                            problems = errors.len(),
                            "config reload refused, keeping the running config"
                        );
                    }
                    LoadError::Io { .. } => {
                        tracing::error!(
                            reason = why,
                            "config reload failed, keeping the running config"
                        );
                    }
                }
                let issues = file_issues(&e);
                for line in e.to_string().lines() {
                    tracing::error!("{line}");
                }
                let revision = p.revision();
                p.history.push(source, false, revision, issues);
                return false;
            }
        };
        p.overrides.apply(&mut cfg);
        match p.publish(&cfg, source) {
            Ok(_) => {
                self.set_text(text, None);
                true
            }
            Err(_) => false,
        }
    }

    fn document(&mut self, p: &Publisher) -> Result<Arc<Document>, String> {
        let text = &self.text;
        kept_or(&mut self.doc, || {
            let read;
            let text = match text {
                Some(t) => t,
                None => {
                    read = std::fs::read_to_string(&p.path)
                        .map_err(|e| format!("{}: cannot read: {e}", p.path.display()))?;
                    &read
                }
            };
            Document::from_yaml(text).map_err(|e| e.to_string())
        })
    }

    fn write(
        &mut self,
        p: &mut Publisher,
        doc: Document,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError> {
        let cfg = p.admit(&doc, if_match)?;
        let revision = p.revision();
        let old = self.text.clone();
        let text = doc.to_yaml();
        if let Err(e) = persist::write_atomically(&p.path, &text) {
            let message = format!("{}: cannot write: {e}", p.path.display());
            tracing::error!("admin API write refused: {message}");
            let issue = Issue {
                path: "$".to_string(),
                message: message.clone(),
            };
            p.history.push(Source::Api, false, revision, vec![issue]);
            return Err(WriteError::Io(message));
        }
        match p.publish(&cfg, Source::Api) {
            Ok(generation) => {
                p.last = stamp(&p.path);
                self.set_text(text, Some(doc));
                Ok(generation)
            }
            Err(message) => {
                if let Some(old) = old {
                    if let Err(e) = persist::write_atomically(&p.path, &old) {
                        tracing::error!(error = %e, "could not put the config file back");
                    }
                }
                p.last = stamp(&p.path);
                Err(WriteError::Invalid(vec![Issue {
                    path: "$".to_string(),
                    message,
                }]))
            }
        }
    }
}

/// A file's problems as history entries: `FILE:LINE:COL` stands as the path.
fn file_issues(e: &LoadError) -> Vec<Issue> {
    match e {
        LoadError::Io { path, error } => vec![Issue {
            path: path.display().to_string(),
            message: format!("cannot read: {error}"),
        }],
        LoadError::Invalid { path, errors } => errors
            .iter()
            .map(|c| Issue {
                path: format!("{}:{}:{}", path.display(), c.line, c.col),
                message: c.message.clone(),
            })
            .collect(),
    }
}
