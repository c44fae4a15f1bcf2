//! Reloading: reads the config file again on SIGHUP (or SIGUSR2) or when it
//! changes on disk, validates and compiles it off the hot path, and
//! publishes it. An invalid file is logged with every problem and the
//! running config stays. Every attempt goes into the reload history.
//!
//! The [`Reloader`] is also what the admin API writes through (`apply.rs`):
//! one owner of the file, its stamps and the running document, so that an
//! API write and a reload never interleave.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use sluicegate_config::{Config, Document, LoadError};
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

pub struct Reloader {
    pub(crate) path: PathBuf,
    pub(crate) shared: Arc<Shared>,
    pub(crate) overrides: Overrides,
    /// The running config's keys that need a restart (the rest of it,
    /// apps included, is not kept: it lives on compiled in the snapshot).
    running: RestartOnly,
    pub(crate) last: Option<Stamp>,
    /// The files the config names (certificates, keys, CA bundles) and
    /// their stamps when the config was last read: a change to one reloads
    /// like a change to the config file.
    files: Vec<(PathBuf, Option<Stamp>)>,
    on_apply: Box<dyn Fn(&Config) + Send>,
    /// Called once a whole config from etcd is applied and what it was
    /// built from is dropped: the binary gives free memory back there.
    pub(crate) settled: Box<dyn Fn() + Send>,
    /// The running config's text, kept only when the admin API may ask for
    /// it (an admin listener is configured), and its tree once asked for.
    pub(crate) text: Option<String>,
    pub(crate) doc: Option<Arc<Document>>,
    pub(crate) keep_text: bool,
    pub(crate) history: History,
    /// Set in etcd mode (`config_source.etcd`, `etcd::start`).
    pub(crate) etcd: Option<Box<crate::etcd::Mode>>,
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
fn stamped(files: Vec<PathBuf>) -> Vec<(PathBuf, Option<Stamp>)> {
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

impl Reloader {
    /// `running` is the config the gateway started with and `last` the
    /// file's stamp taken before it was read.
    /// `text` is the file's text it was read from.
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
            path,
            shared,
            overrides,
            running: RestartOnly::of(&running),
            last,
            files: stamped(tls_files(&running)),
            on_apply,
            settled: Box::new(|| {}),
            text: keep_text.then_some(text),
            doc: None,
            keep_text,
            history: History::default(),
            etcd: None,
        }
    }

    /// The running config's revision (the snapshot's generation).
    /// Sets what runs once a whole config from etcd is applied and its
    /// parts dropped (the binary gives free memory back to the system).
    pub fn on_settled(&mut self, f: Box<dyn Fn() + Send>) {
        self.settled = f;
    }

    pub fn revision(&self) -> u64 {
        self.shared.snapshot.load().generation
    }

    /// Locks the reloader shared by the signal loop and the admin API,
    /// taking a poisoned lock's value as it is (each step leaves it whole).
    pub fn locked(m: &std::sync::Mutex<Reloader>) -> std::sync::MutexGuard<'_, Reloader> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reloads if the file, or a file it names (a certificate, a key, a
    /// CA bundle), changed since it was last read; says whether a reload
    /// was tried. Stamps follow symbolic links, so a link switched to a new
    /// target (how Kubernetes updates a mounted secret) is a change.
    pub fn check(&mut self) -> bool {
        let now = stamp(&self.path);
        if now.is_some() && now != self.last {
            self.reload(Source::File);
            return true;
        }
        let tls_changed = self
            .files
            .iter()
            .any(|(p, s)| stamp(p).is_some() && stamp(p) != *s);
        if tls_changed {
            self.reload(Source::File);
        }
        tls_changed
    }

    /// Reads, validates and publishes the file. Returns whether it was applied.
    pub fn reload(&mut self, source: Source) -> bool {
        if self.etcd.is_some() {
            return self.reload_etcd(source);
        }
        let why = source.as_str();
        // Stamp first: a write racing with this read triggers one more reload.
        self.last = stamp(&self.path);
        let loaded = std::fs::read_to_string(&self.path)
            .map_err(|error| LoadError::Io {
                path: self.path.clone(),
                error,
            })
            .and_then(|text| match sluicegate_config::parse(&text) {
                Ok(c) => Ok((c, text)),
                Err(errors) => Err(LoadError::Invalid {
                    path: self.path.clone(),
                    errors,
                }),
            });
        let (mut cfg, text) = match loaded {
            Ok(c) => c,
            Err(e) => {
                self.shared
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
                let revision = self.revision();
                self.history.push(source, false, revision, issues);
                return false;
            }
        };
        self.overrides.apply(&mut cfg);
        match self.publish(&cfg, source) {
            Ok(_) => {
                self.set_text(text, None);
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps `text` (and its tree, if known) as the running config's.
    pub(crate) fn set_text(&mut self, text: String, doc: Option<Document>) {
        if self.keep_text {
            self.text = Some(text);
            self.doc = doc.map(Arc::new);
        }
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
