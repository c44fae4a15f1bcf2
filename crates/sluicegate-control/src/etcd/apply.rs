//! The etcd source's `ConfigSource` implementation. What the watch saw is
//! applied under the reloader's lock: the changes are laid over the
//! objects of the running config, the document they make is validated as
//! a file is and published as one new snapshot (state kept). A change
//! that does not validate is refused alone, reported in the reload
//! history and the rejected-objects metric, and the last good config
//! stays. Changes to apps alone go in place (`apps.rs`). Also: the cached
//! config at start, SIGHUP in etcd mode, and admin API writes sent to
//! etcd as one transaction comparing the revision.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use sluicegate_config::{Document, EtcdSource};

use super::cache;
use super::inbox::{Batch, Inbox};
use super::objects::{self, assemble, diff, split, Objects};
use super::status::Status;
use crate::history::{Issue, Source};
use crate::publish::{stamp, IfMatch, Publisher, WriteError};
use crate::source::{kept_or, ConfigSource, Page, PageOf};

/// The etcd config source: the file's document the objects are laid
/// over, the objects of the running config, and how to reach etcd.
pub(crate) struct Etcd {
    pub source: EtcdSource,
    /// The config file's document (listen, admin, config_source, defaults).
    pub base: Document,
    /// The objects the running config was made of (refused ones left out).
    pub good: Arc<Objects>,
    /// The running config's document, once asked for; made again from
    /// the objects after a change.
    pub doc: Option<Arc<Document>>,
    pub cache: PathBuf,
    /// To the thread that writes the cache (the newest revision wins).
    pub cache_tx: std::sync::mpsc::Sender<(u64, Arc<Objects>)>,
    pub status: Arc<Status>,
    pub inbox: Arc<Inbox>,
    /// The connected client, once the watch has one (for API writes).
    pub client: Arc<Mutex<Option<etcd_client::Client>>>,
    pub runtime: tokio::runtime::Handle,
}

impl Etcd {
    pub(crate) fn revision(&self) -> u64 {
        self.status.revision.load(Ordering::Relaxed)
    }
}

/// How long an API write waits for the watch to bring its change back.
const WRITE_SEEN: Duration = Duration::from_secs(10);

/// A key's new value: `Ok(None)` deleted, `Err` not JSON.
type Value = Result<Option<serde_json::Value>, String>;

impl Etcd {
    /// Applies the cached config, if any (at start, before the watch).
    fn load_cache(&mut self, p: &mut Publisher) {
        let Some((revision, objects)) = cache::load(&self.cache) else {
            return;
        };
        tracing::info!(
            revision,
            "etcd source: serving the cached config until etcd answers"
        );
        match self.try_objects(p, &objects) {
            Ok((doc, cfg)) => {
                if p.publish(&cfg, Source::Etcd).is_ok() {
                    self.good = Arc::new(objects);
                    self.status.revision.store(revision, Ordering::Relaxed);
                    self.forget_doc(doc);
                }
            }
            Err(issues) => {
                tracing::error!(
                    problems = issues.len(),
                    "etcd source: the cached config does not validate, ignored"
                );
            }
        }
    }

    /// The document `objects` make and the config it decodes to.
    fn try_objects(
        &self,
        p: &Publisher,
        objects: &Objects,
    ) -> Result<(Document, sluicegate_config::Config), Vec<Issue>> {
        let t0 = Instant::now();
        let (doc, mut issues) = assemble(&self.base, objects);
        let t1 = Instant::now();
        let decoded = p.validate(&doc);
        tracing::info!(
            objects = objects.len(),
            assemble_ms = (t1 - t0).as_secs_f64() * 1e3,
            decode_ms = t1.elapsed().as_secs_f64() * 1e3,
            "etcd source: config document built and decoded"
        );
        match decoded {
            Ok(cfg) if issues.is_empty() => Ok((doc, cfg)),
            Ok(_) => Err(issues),
            Err(more) => {
                issues.extend(more);
                Err(issues)
            }
        }
    }

    /// Drops the document of an applied config, and the one kept from
    /// before: at a million apps its tree is larger than the running
    /// snapshot. The admin API makes it again from the objects when it
    /// first reads it after a change.
    fn forget_doc(&mut self, doc: Document) {
        drop(doc);
        self.doc = None;
    }

    /// Applies every batch the watch queued. Returns whether one was.
    fn drain_inbox(&mut self, p: &mut Publisher) -> bool {
        let batches = self.inbox.take();
        if batches.is_empty() {
            return false;
        }
        let seen = self.revision();
        let mut top = seen;
        // The latest value of each changed key, with its revision.
        let mut changed: BTreeMap<String, (u64, Value)> = BTreeMap::new();
        let set = |changed: &mut BTreeMap<String, (u64, Value)>, k: String, rev: u64, v: Value| {
            if !matches!(changed.get(&k), Some((r, _)) if *r > rev) {
                changed.insert(k, (rev, v));
            }
        };
        for batch in batches {
            match batch {
                Batch::Changes(list) => {
                    for c in list.into_iter().filter(|c| c.revision > seen) {
                        top = top.max(c.revision);
                        set(&mut changed, c.key, c.revision, parse(c.value.as_deref()));
                    }
                }
                Batch::Listed { revision, kvs } => {
                    if revision <= seen {
                        continue;
                    }
                    top = top.max(revision);
                    // Whatever was not listed is gone.
                    let gone: Vec<String> =
                        self.good.keys().chain(changed.keys()).cloned().collect();
                    for k in gone {
                        set(&mut changed, k, revision, Ok(None));
                    }
                    for (k, v) in kvs {
                        set(&mut changed, k, revision, parse(Some(&v)));
                    }
                }
            }
        }
        let changed = changed.into_iter().map(|(k, (_, v))| (k, v)).collect();
        self.apply_changes(p, changed, top);
        true
    }

    fn apply_changes(&mut self, p: &mut Publisher, changed: Vec<(String, Value)>, top: u64) {
        let mut refused: Vec<Issue> = Vec::new();
        // Worked on in place (copied only while the cache writer still
        // holds it); each change keeps the value it replaced, to undo it.
        let mut good = std::mem::take(&mut self.good);
        let objects = Arc::make_mut(&mut good);
        let mut undo: Vec<(String, Option<serde_json::Value>)> = Vec::new();
        for (key, value) in changed {
            if key.starts_with(objects::META) {
                continue;
            }
            if !objects::is_object(&key) {
                refused.push(Issue {
                    path: format!("etcd:{key}"),
                    message: "not a config key (KIND/NAME with KIND services, routes, apps or plans, or settings)".to_string(),
                });
                continue;
            }
            match value {
                Err(message) => refused.push(Issue {
                    path: format!("etcd:{key}"),
                    message,
                }),
                Ok(v) => {
                    if objects.get(&key) != v.as_ref() {
                        let before = set(objects, &key, v);
                        undo.push((key, before));
                    }
                }
            }
        }
        let started = Instant::now();
        let changes = undo.len();
        let mut applied = None;
        if let Some((generation, decode_ms)) = self.apply_app_delta(p, objects, &undo) {
            tracing::info!(
                revision = top,
                changes,
                generation,
                decode_ms,
                apply_ms = started.elapsed().as_secs_f64() * 1e3,
                "etcd source: apps changed in place"
            );
            p.history.push(Source::Etcd, true, generation, Vec::new());
            // The document is made again from the objects when next read.
            self.doc = None;
            undo.clear();
        }
        if !undo.is_empty() {
            match self.try_objects(p, objects) {
                Ok(done) => applied = Some(done),
                Err(_) => {
                    // Back to the last good objects, then each change alone.
                    let mut tried = Vec::new();
                    for (key, before) in undo.drain(..).rev() {
                        let now = set(objects, &key, before);
                        tried.push((key, now));
                    }
                    for (key, now) in tried.into_iter().rev() {
                        let before = set(objects, &key, now);
                        match self.try_objects(p, objects) {
                            Ok(done) => {
                                applied = Some(done);
                                undo.push((key, before));
                            }
                            Err(issues) => {
                                set(objects, &key, before);
                                refused.push(Issue {
                                    path: format!("etcd:{key}"),
                                    message: "refused: the config it makes does not validate"
                                        .to_string(),
                                });
                                refused.extend(issues);
                            }
                        }
                    }
                }
            }
        }
        let status = self.status.clone();
        status.revision.store(top, Ordering::Relaxed);
        if !refused.is_empty() {
            let keys = refused
                .iter()
                .filter(|i| i.path.starts_with("etcd:"))
                .count();
            status.rejected.fetch_add(keys as u64, Ordering::Relaxed);
            for i in &refused {
                tracing::error!(path = %i.path, "etcd source: {}", i.message);
            }
            let revision = p.revision();
            p.history.push(Source::Etcd, false, revision, refused);
        }
        let whole = applied.is_some();
        if let Some((doc, cfg)) = applied {
            let validated = started.elapsed();
            let published = p.publish(&cfg, Source::Etcd).is_ok();
            tracing::info!(
                revision = top,
                changes,
                validate_ms = validated.as_secs_f64() * 1e3,
                publish_ms = (started.elapsed() - validated).as_secs_f64() * 1e3,
                "etcd source: changes applied"
            );
            if published {
                self.forget_doc(doc);
            } else {
                // Not running: the good objects are those of before.
                let objects = Arc::make_mut(&mut good);
                for (key, before) in undo.into_iter().rev() {
                    set(objects, &key, before);
                }
            }
        }
        self.good = good;
        // Written by the cache thread, off this lock; it keeps the newest.
        let _ = self.cache_tx.send((top, self.good.clone()));
        // A whole config was built (its document and decoded config are
        // dropped by now): give the memory back. Not after a change in
        // place, which frees next to nothing.
        if whole {
            (p.settled)();
        }
    }

    /// Writes `puts` and `deletes` to etcd in one transaction that holds
    /// only if nothing under the prefix changed since the revision this
    /// gateway runs (otherwise `Stale`); returns once the watch has
    /// brought the change back and it is applied here.
    pub(super) fn commit(
        &mut self,
        p: &mut Publisher,
        puts: Vec<(String, serde_json::Value)>,
        deletes: Vec<String>,
        fence: Option<&crate::rollout::Fence>,
    ) -> Result<u64, WriteError> {
        if puts.is_empty() && deletes.is_empty() {
            return Ok(p.revision());
        }
        let prefix = self.source.prefix.clone();
        let seen = self.revision();
        let client = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(mut client) = client else {
            return Err(WriteError::Io(
                "etcd is not reachable: the write was not made".to_string(),
            ));
        };
        let mut ops: Vec<TxnOp> = puts
            .iter()
            .map(|(k, v)| TxnOp::put(format!("{prefix}{k}"), v.to_string(), None::<PutOptions>))
            .collect();
        ops.extend(
            deletes
                .iter()
                .map(|k| TxnOp::delete(format!("{prefix}{k}"), None)),
        );
        // Every API write touches the marker, so that a write that only
        // deletes still fails the others' comparison.
        ops.push(TxnOp::put(
            format!("{prefix}{}write", objects::META),
            seen.to_string(),
            None,
        ));
        let unchanged =
            Compare::mod_revision(prefix.clone(), CompareOp::Less, seen as i64 + 1).with_prefix();
        let mut when = vec![unchanged];
        // A rollout's write also holds only while this gateway leads.
        if let Some(f) = fence {
            when.push(Compare::lease(f.key.clone(), CompareOp::Equal, f.lease));
        }
        let txn = Txn::new().when(when).and_then(ops);
        let sent = self.runtime.block_on(async move {
            tokio::time::timeout(Duration::from_secs(5), client.txn(txn)).await
        });
        let resp = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(WriteError::Io(format!("etcd: {e}"))),
            Err(_) => return Err(WriteError::Io("etcd did not answer in 5 s".to_string())),
        };
        if !resp.succeeded() {
            return Err(WriteError::Stale);
        }
        let written = resp.header().map_or(0, |h| h.revision() as u64);
        let inbox = self.inbox.clone();
        let until = Instant::now() + WRITE_SEEN;
        while self.revision() < written {
            if Instant::now() >= until {
                return Err(WriteError::Io(format!(
                    "written to etcd at revision {written}, not yet seen by the watch"
                )));
            }
            inbox.wait(Duration::from_millis(100));
            self.drain_inbox(p);
        }
        Ok(p.revision())
    }
}

impl ConfigSource for Etcd {
    fn start(&mut self, p: &mut Publisher) {
        self.load_cache(p);
    }

    /// SIGHUP, SIGUSR2 or a change of the file: reads the file again as
    /// the base the objects are laid over.
    fn reload(&mut self, p: &mut Publisher, source: Source) -> bool {
        p.last = stamp(&p.path);
        let base = std::fs::read_to_string(&p.path)
            .map_err(|e| e.to_string())
            .and_then(|t| Document::from_yaml(&t).map_err(|e| e.to_string()));
        let base = match base {
            Ok(b) => b,
            Err(message) => {
                let revision = p.revision();
                let issue = Issue {
                    path: p.path.display().to_string(),
                    message,
                };
                p.history.push(source, false, revision, vec![issue]);
                return false;
            }
        };
        let old = std::mem::replace(&mut self.base, base);
        let good = self.good.clone();
        match self.try_objects(p, &good) {
            Ok((doc, cfg)) if p.publish(&cfg, source).is_ok() => {
                self.forget_doc(doc);
                true
            }
            Ok(_) => {
                self.base = old;
                false
            }
            Err(issues) => {
                self.base = old;
                let revision = p.revision();
                p.history.push(source, false, revision, issues);
                false
            }
        }
    }

    /// The running config's document, made from the objects.
    fn document(&mut self, _p: &Publisher) -> Result<Arc<Document>, String> {
        let (base, good) = (&self.base, &self.good);
        kept_or(&mut self.doc, || Ok(assemble(base, good).0))
    }

    /// Validated as a file, then the objects that differ written in one
    /// transaction that holds only if nothing under the prefix changed
    /// since the revision this gateway runs (otherwise `Stale`, a `412`);
    /// returns once the watch has brought the change back and it is
    /// applied here.
    fn write(
        &mut self,
        p: &mut Publisher,
        doc: Document,
        if_match: Option<&IfMatch>,
    ) -> Result<u64, WriteError> {
        p.admit(&doc, if_match)?;
        let (puts, deletes) = diff(&self.good, &split(&self.base, &doc));
        self.commit(p, puts, deletes, None)
    }

    /// As [`Self::write`], fenced by the rollout leader's key.
    fn write_fenced(
        &mut self,
        p: &mut Publisher,
        doc: Document,
        fence: Option<&crate::rollout::Fence>,
    ) -> Result<u64, WriteError> {
        p.admit(&doc, None)?;
        let (puts, deletes) = diff(&self.good, &split(&self.base, &doc));
        self.commit(p, puts, deletes, fence)
    }

    fn drain(&mut self, p: &mut Publisher) -> bool {
        self.drain_inbox(p)
    }

    fn page(&self, want: &PageOf<'_>) -> Option<Page> {
        self.kind_page(want)
    }

    fn item(&self, section: &str, name: &str) -> Option<Option<serde_json::Value>> {
        self.kind_item(section, name)
    }

    fn app(&self, name: &str) -> Option<Option<serde_json::Value>> {
        Some(self.good.get(&format!("apps/{name}")).cloned())
    }

    fn write_app(
        &mut self,
        p: &mut Publisher,
        name: &str,
        new: Option<serde_json::Value>,
        if_match: Option<&IfMatch>,
    ) -> Option<Result<u64, WriteError>> {
        if !self.app_alone(name, new.as_ref()) {
            return None;
        }
        Some(self.write_one_app(p, name, new, if_match))
    }
}

/// Sets (or with `None` removes) `key`; returns the value it had.
fn set(
    objects: &mut Objects,
    key: &str,
    value: Option<serde_json::Value>,
) -> Option<serde_json::Value> {
    match value {
        Some(v) => objects.insert(key.to_string(), v),
        None => objects.remove(key),
    }
}

/// A key's value as JSON (`None`: deleted).
fn parse(value: Option<&[u8]>) -> Value {
    match value {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(bytes)
            .map(Some)
            .map_err(|e| format!("not JSON: {e}")),
    }
}
