//! The last applied config on local disk: `{"revision": R, "objects": {...}}`
//! written to a temporary file, synced and renamed over the cache by its own
//! thread after applied changes, and read at start so that a gateway started while etcd
//! is down serves what it last applied (then catches up from `R + 1`).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::objects::Objects;
use crate::persist;

/// The longest wait between two writes of the cache.
const PACE_MAX: Duration = Duration::from_secs(30);

/// Starts the thread that writes the cache at `path`: it takes the newest
/// of what was sent since its last write, so a burst of changes costs one
/// write, and the reloader's lock is never held while the file is written.
/// Writes are paced (see inside): the cache may lag the running config by
/// up to five times a write's duration, at most [`PACE_MAX`].
pub(crate) fn writer(path: PathBuf) -> Sender<(u64, Arc<Objects>)> {
    let (tx, rx) = channel::<(u64, Arc<Objects>)>();
    let spawned = std::thread::Builder::new()
        .name("etcd-cache".to_string())
        .spawn(move || {
            let mut pending: Option<(u64, Arc<Objects>)> = None;
            loop {
                let mut newest = match pending.take() {
                    Some(p) => p,
                    None => match rx.recv() {
                        Ok(m) => m,
                        Err(_) => return,
                    },
                };
                while let Ok(more) = rx.try_recv() {
                    newest = more;
                }
                let t = Instant::now();
                save(&path, newest.0, &newest.1);
                let took = t.elapsed();
                tracing::info!(
                    revision = newest.0,
                    cache_ms = took.as_secs_f64() * 1e3,
                    "etcd source: cache written"
                );
                // Paced: at a million objects a write takes a second of
                // CPU, and changes may come every few milliseconds. The
                // next write waits four times as long as this one took
                // (this thread then uses at most a fifth of a core), and
                // writes the newest of what came meanwhile.
                let until = t + (took * 5).min(PACE_MAX);
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    match rx.recv_timeout(left) {
                        Ok(more) => pending = Some(more),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            if let Some((revision, objects)) = pending.take() {
                                save(&path, revision, &objects);
                            }
                            return;
                        }
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "etcd source: cannot start the cache writer");
    }
    tx
}

/// Writes the cache; a failure is logged, the config stays applied.
pub(crate) fn save(path: &Path, revision: u64, objects: &Objects) {
    let text = json!({ "revision": revision, "objects": objects }).to_string();
    if let Err(e) = persist::write_atomically(path, &text) {
        tracing::warn!(path = %path.display(), error = %e, "etcd source: cannot write the cache");
    }
}

/// The cached revision and objects; `None` when there is no usable cache.
pub(crate) fn load(path: &Path) -> Option<(u64, Objects)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "etcd source: cannot read the cache");
            return None;
        }
    };
    let parsed: Result<Value, _> = serde_json::from_str(&text);
    let read = parsed.ok().and_then(|v| {
        let revision = v.get("revision")?.as_u64()?;
        let Value::Object(objects) = v.get("objects")?.clone() else {
            return None;
        };
        Some((revision, objects.into_iter().collect()))
    });
    if read.is_none() {
        tracing::warn!(path = %path.display(), "etcd source: the cache is not valid, ignored");
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_cache_loads_back() {
        let dir = std::env::temp_dir().join(format!("sg-etcd-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.json");
        let _ = std::fs::remove_file(&path);
        assert!(load(&path).is_none());
        let objects: Objects = [("routes/a".to_string(), json!({"service": "x"}))]
            .into_iter()
            .collect();
        save(&path, 42, &objects);
        assert_eq!(load(&path), Some((42, objects)));
        std::fs::write(&path, "{").unwrap();
        assert!(load(&path).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
