//! What every config source publishes through: the command-line overrides,
//! the checks a new config passes (the decoder, then the files it names),
//! the compile and publish of its snapshot, the keys that need a restart,
//! the stamps of the config file and the files it names, the reload
//! history, and what an admin API write must pass (`If-Match`) or may
//! answer ([`WriteError`]). The [`Publisher`] is the part of the reloader
//! that does not depend on where the config comes from (`source.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sluicegate_config::{Config, Document};
use sluicegate_proxy::Shared;

use crate::history::{History, Issue, Source};

/// Command-line values that win over the file, on start and on every reload.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub workers: Option<usize>,
    pub max_connections: Option<usize>,
    pub log_level: Option<String>,
}

impl Overrides {
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(w) = self.workers {
            cfg.workers = Some(w);
        }
        if let Some(m) = self.max_connections {
            cfg.limits.max_connections = m;
        }
        if let Some(l) = &self.log_level {
            cfg.log.level = l.clone();
        }
    }
}

/// What identifies one version of the file on disk. Take it before reading
/// the file, so a change made while it is read is seen as a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    /// Inode, so an editor's rename-over is seen even within one mtime tick.
    ino: u64,
}

/// The file's current stamp, or None when it cannot be read.
pub fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        ino: m.ino(),
    })
}

/// Why a write was not applied.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// `If-Match` named another revision than the running one.
    Stale,
    /// The document does not validate: every problem.
    Invalid(Vec<Issue>),
    /// The config could not be stored (the file not written, etcd not
    /// reached or not answering).
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

pub(crate) struct Publisher {
    /// The config file (in etcd mode, the base the objects are laid over).
    pub path: PathBuf,
    pub shared: Arc<Shared>,
    pub overrides: Overrides,
    /// The running config's keys that need a restart (the rest of it,
    /// apps included, is not kept: it lives on compiled in the snapshot).
    running: RestartOnly,
    /// The config file's stamp when it was last read.
    pub last: Option<Stamp>,
    /// The files the config names (certificates, keys, CA bundles) and
    /// their stamps when the config was last read: a change to one reloads
    /// like a change to the config file.
    files: Vec<(PathBuf, Option<Stamp>)>,
    on_apply: Box<dyn Fn(&Config) + Send>,
    /// Called once a whole config from etcd is applied and what it was
    /// built from is dropped: the binary gives free memory back there.
    pub settled: Box<dyn Fn() + Send>,
    pub history: History,
    /// The rollouts' state: told of every config applied.
    pub rollouts: Arc<crate::rollout::Board>,
}

/// The TLS files `c` names: listeners' certificates, keys and client CAs,
/// services' CAs and client certificates.
fn tls_files(c: &Config) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for l in &c.listen {
        if let Some(t) = &l.tls {
            for pair in &t.certificates {
                out.push(pair.cert.clone());
                out.push(pair.key.clone());
            }
            out.extend(t.client_ca.clone());
        }
    }
    for s in &c.services {
        if let Some(t) = &s.tls {
            out.extend(t.ca.clone());
            out.extend(t.client_cert.clone());
            out.extend(t.client_key.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Each of `files` with its stamp now.
pub(crate) fn stamped(files: Vec<PathBuf>) -> Vec<(PathBuf, Option<Stamp>)> {
    files
        .into_iter()
        .map(|p| {
            let s = stamp(&p);
            (p, s)
        })
        .collect()
}

/// The keys a reload cannot apply.
#[derive(PartialEq)]
struct RestartOnly {
    listen: Vec<std::net::SocketAddr>,
    workers: Option<usize>,
    admin: Option<sluicegate_config::AdminConfig>,
    /// The span exporter's settings (all of `tracing` but its sampling).
    tracing: Option<(sluicegate_config::OtlpConfig, String, usize)>,
}

impl RestartOnly {
    fn of(c: &Config) -> RestartOnly {
        RestartOnly {
            listen: c.listen.iter().map(|l| l.addr).collect(),
            workers: c.workers,
            admin: c.admin.clone(),
            tracing: c
                .tracing
                .as_ref()
                .map(|t| (t.otlp.clone(), t.service_name.clone(), t.queue)),
        }
    }
}

impl Publisher {
    /// `running` is the config the gateway started with and `last` the
    /// file's stamp taken before it was read.
    pub(crate) fn new(
        path: PathBuf,
        shared: Arc<Shared>,
        overrides: Overrides,
        running: &Config,
        last: Option<Stamp>,
        on_apply: Box<dyn Fn(&Config) + Send>,
    ) -> Publisher {
        let rollouts = Arc::new(crate::rollout::Board::default());
        rollouts.observe(running);
        Publisher {
            rollouts,
            path,
            shared,
            overrides,
            running: RestartOnly::of(running),
            last,
            files: stamped(tls_files(running)),
            on_apply,
            settled: Box::new(|| {}),
            history: History::default(),
        }
    }

    /// The running config's revision (the snapshot's generation).
    pub(crate) fn revision(&self) -> u64 {
        self.shared.snapshot.load().generation
    }

    /// Whether the file, or a file it names (a certificate, a key, a CA
    /// bundle), changed since it was last read. Stamps follow symbolic
    /// links, so a link switched to a new target (how Kubernetes updates
    /// a mounted secret) is a change.
    pub(crate) fn changed(&self) -> bool {
        let now = stamp(&self.path);
        if now.is_some() && now != self.last {
            return true;
        }
        self.files
            .iter()
            .any(|(p, s)| stamp(p).is_some() && stamp(p) != *s)
    }

    /// The running revision, when `if_match` names it (or is absent):
    /// otherwise `Stale`, a write's `412`.
    pub(crate) fn matching(&self, if_match: Option<&IfMatch>) -> Result<u64, WriteError> {
        let revision = self.revision();
        if if_match.is_some_and(|m| !m.matches(revision)) {
            return Err(WriteError::Stale);
        }
        Ok(revision)
    }

    /// What an admin API write of `doc` runs, if `if_match` allows it and
    /// it validates; a document that does not is recorded in the history.
    pub(crate) fn admit(
        &mut self,
        doc: &Document,
        if_match: Option<&IfMatch>,
    ) -> Result<Config, WriteError> {
        let revision = self.matching(if_match)?;
        self.validate(doc).map_err(|issues| {
            self.history
                .push(Source::Api, false, revision, issues.clone());
            WriteError::Invalid(issues)
        })
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

    /// Compiles and publishes `cfg` (overrides applied), recording the
    /// outcome; returns the new revision or the compile error.
    pub(crate) fn publish(&mut self, cfg: &Config, source: Source) -> Result<u64, String> {
        let why = source.as_str();
        // Stamped before they are read, as the config file is: a change
        // racing with this reload triggers one more.
        self.files = stamped(tls_files(cfg));
        if RestartOnly::of(cfg) != self.running {
            tracing::warn!(
                "listen, workers, admin and tracing (but tracing.sampling) changes take effect on restart only"
            );
        }
        match self.shared.reload(cfg) {
            Ok(generation) => {
                tracing::info!(reason = why, generation, "config reloaded");
                (self.on_apply)(cfg);
                self.rollouts.observe(cfg);
                self.history.push(source, true, generation, Vec::new());
                Ok(generation)
            }
            Err(e) => {
                tracing::error!(reason = why, error = %e, "config reload refused, keeping the running config");
                let issue = Issue {
                    path: "$".to_string(),
                    message: e.clone(),
                };
                let revision = self.revision();
                self.history.push(source, false, revision, vec![issue]);
                Err(e)
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
