//! Writes through the admin API: a new document is validated by the same
//! decoder as a file, saved back to the config file, and published as one
//! new snapshot by the same path a reload takes, so the state that
//! outlives snapshots (limits, breakers, health, pools) is kept.
//!
//! The order makes a write all or nothing: the document is decoded and the
//! files it names are read first; then the file is replaced (atomically);
//! then the snapshot is compiled and published, and should that still fail
//! the old file is put back. The reloader's stamp of the file is taken
//! after the write, so the file watcher does not apply it a second time.

use std::sync::Arc;

use sluicegate_config::{Config, Document};

use crate::history::{Issue, Source};
use crate::persist;
use crate::reload::{stamp, Reloader};

/// Why a write was not applied.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// `If-Match` named another revision than the running one.
    Stale,
    /// The document does not validate: every problem.
    Invalid(Vec<Issue>),
    /// The config file could not be written.
    Io(String),
}

/// What an `If-Match` header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IfMatch {
    /// `*`: any revision.
    Any,
    /// These revisions (entity tags that are not revisions never match).
    Revisions(Vec<u64>),
}

impl IfMatch {
    /// Parses `"7"`, `W/"7"`, a list of those, or `*`.
    pub fn parse(header: &str) -> IfMatch {
        if header.trim() == "*" {
            return IfMatch::Any;
        }
        IfMatch::Revisions(
            header
                .split(',')
                .filter_map(|tag| {
                    let tag = tag.trim();
                    let tag = tag.strip_prefix("W/").unwrap_or(tag);
                    tag.strip_prefix('"')?.strip_suffix('"')?.parse().ok()
                })
                .collect(),
        )
    }

    pub(crate) fn matches(&self, revision: u64) -> bool {
        match self {
            IfMatch::Any => true,
            IfMatch::Revisions(r) => r.contains(&revision),
        }
    }
}

impl Reloader {
    /// The running config as a document (its tree built on first use,
    /// then shared by every read until the config changes).
    pub(crate) fn document(&mut self) -> Result<Arc<Document>, String> {
        if let Some(doc) = &self.doc {
            return Ok(doc.clone());
        }
        if self.etcd.is_some() {
            let doc = Arc::new(self.etcd_document());
            self.doc = Some(doc.clone());
            return Ok(doc);
        }
        let text = match &self.text {
            Some(t) => t.clone(),
            None => std::fs::read_to_string(&self.path)
                .map_err(|e| format!("{}: cannot read: {e}", self.path.display()))?,
        };
        let doc = Arc::new(Document::from_yaml(&text).map_err(|p| p.to_string())?);
        self.doc = Some(doc.clone());
        Ok(doc)
    }

    /// Checks `doc` as a file would be (the decoder, then the files it
    /// names); returns the config to run, overrides applied.
    pub(crate) fn validate(&self, doc: &Document) -> Result<Config, Vec<Issue>> {
        let mut cfg = doc.decode().map_err(|problems| {
            problems
                .into_iter()
                .map(|p| Issue {
                    path: p.path,
                    message: p.message,
                })
                .collect::<Vec<_>>()
        })?;
        self.overrides.apply(&mut cfg);
        sluicegate_proxy::check_tls_files(&cfg).map_err(|message| {
            vec![Issue {
                path: "$".to_string(),
                message,
            }]
        })?;
        Ok(cfg)
    }

    /// Validates, saves and publishes `doc`; returns the new revision.
    pub(crate) fn write(
        &mut self,
        doc: Document,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError> {
        if self.etcd.is_some() {
            return self.write_etcd(doc, if_match);
        }
        let revision = self.revision();
        if if_match.is_some_and(|m| !m.matches(revision)) {
            return Err(WriteError::Stale);
        }
        let cfg = match self.validate(&doc) {
            Ok(c) => c,
            Err(issues) => {
                self.history
                    .push(Source::Api, false, revision, issues.clone());
                return Err(WriteError::Invalid(issues));
            }
        };
        let old = self.text.clone();
        let text = doc.to_yaml();
        if let Err(e) = persist::write_atomically(&self.path, &text) {
            let message = format!("{}: cannot write: {e}", self.path.display());
            tracing::error!("admin API write refused: {message}");
            let issue = Issue {
                path: "$".to_string(),
                message: message.clone(),
            };
            self.history.push(Source::Api, false, revision, vec![issue]);
            return Err(WriteError::Io(message));
        }
        match self.publish(&cfg, Source::Api) {
            Ok(generation) => {
                self.last = stamp(&self.path);
                self.set_text(text, Some(doc));
                Ok(generation)
            }
            Err(message) => {
                if let Some(old) = old {
                    if let Err(e) = persist::write_atomically(&self.path, &old) {
                        tracing::error!(error = %e, "could not put the config file back");
                    }
                }
                self.last = stamp(&self.path);
                Err(WriteError::Invalid(vec![Issue {
                    path: "$".to_string(),
                    message,
                }]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_takes_revisions_weak_tags_and_any() {
        assert_eq!(IfMatch::parse("*"), IfMatch::Any);
        assert_eq!(
            IfMatch::parse("\"3\", W/\"5\", \"x\", 7"),
            IfMatch::Revisions(vec![3, 5])
        );
        assert!(IfMatch::parse("\"3\"").matches(3));
        assert!(!IfMatch::parse("\"3\"").matches(4));
        assert!(!IfMatch::parse("garbage").matches(0));
    }
}
