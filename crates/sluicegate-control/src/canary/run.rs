//! The rollout controller: a task on the control runtime that, on the
//! leader, opens a window for each running rollout (reading its split
//! entries' cumulative counters), closes it once `every` has passed
//! (reading them again), judges the difference, and writes the weights a
//! verdict asks for as a config change through the reloader: the route's
//! split in the running document, validated, stored and applied as an
//! admin API write of it would be (etcd: a transaction fenced by the
//! leader key and the revision the gateway runs).
//!
//! A window whose weights changed while it was measured (anyone's write,
//! a reload) is dropped; so is one whose counters went back. A write that
//! finds the route's weights other than those it judged, or that etcd
//! refuses as stale, is dropped too: the next window is judged afresh on
//! what then runs. Nothing here runs on the request path.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluicegate_config::{Document, EtcdSource};
use sluicegate_proxy::live::SplitEntryCounts;
use sluicegate_proxy::Shared;

use crate::publish::WriteError;
use crate::reload::Reloader;
use crate::rollout::board::{now_ms, Board, Open, State, Window};
use crate::rollout::judge::{judge, Side, Tally, Verdict};
use crate::rollout::weights::{scaled, share};

/// How often the controller looks for windows that are due (the shortest
/// `every` is 100 ms).
const TICK: Duration = Duration::from_millis(25);

/// Starts the rollouts: with `etcd`, the campaign for the fleet's
/// leadership (only the leader judges and writes); without, this gateway
/// leads. Returns the rollouts' state, for the admin API.
pub fn start(
    reloader: &Arc<Mutex<Reloader>>,
    shared: Arc<Shared>,
    etcd: Option<EtcdSource>,
    runtime: &tokio::runtime::Handle,
) -> Arc<Board> {
    let board = Reloader::locked(reloader).rollouts();
    match etcd {
        Some(source) => {
            board.fleet.store(true, Ordering::Release);
            runtime.spawn(super::leader::run(board.clone(), source));
        }
        None => board.leader.store(true, Ordering::Release),
    }
    runtime.spawn(control(board.clone(), reloader.clone(), shared));
    board
}

/// A verdict to write.
struct Decision {
    route: String,
    /// The weights judged.
    from: Vec<u64>,
    /// The canary's new share.
    to: u32,
    verdict: Verdict,
    window: Window,
}

async fn control(board: Arc<Board>, reloader: Arc<Mutex<Reloader>>, shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        for d in due(&board, &shared) {
            let (b, r) = (board.clone(), reloader.clone());
            let _ = tokio::task::spawn_blocking(move || apply(&b, &r, d)).await;
        }
    }
}

/// The split's counters now: the weights, the canary's and the
/// baseline's (every other entry's) tallies.
struct Reading {
    weights: Vec<u64>,
    canary: Tally,
    baseline: Tally,
}

fn tally(e: &SplitEntryCounts) -> Tally {
    Tally {
        requests: e.requests(),
        errors: e.server_errors(),
        buckets: e.buckets,
    }
}

/// Reads route `name`'s split in the running snapshot, if its services
/// are `services`.
fn read(shared: &Shared, name: &str, services: &[String]) -> Option<Reading> {
    let entries = shared.split_counts(name)?;
    if !entries.iter().map(|e| &e.service).eq(services.iter()) {
        return None;
    }
    let (last, rest) = entries.split_last()?;
    let mut baseline = Tally::default();
    for e in rest {
        baseline.add(&tally(e));
    }
    Some(Reading {
        weights: entries.iter().map(|e| u64::from(e.weight)).collect(),
        canary: tally(last),
        baseline,
    })
}

fn open(r: Reading) -> Open {
    Open {
        at: Instant::now(),
        at_ms: now_ms(),
        weights: r.weights,
        canary: r.canary,
        baseline: r.baseline,
    }
}

/// Opens the windows to open and judges those due; returns the verdicts
/// to write. Only the leader measures: elsewhere no window stays open, so
/// a gateway that becomes leader measures a whole window of its own
/// before it may step.
fn due(board: &Board, shared: &Shared) -> Vec<Decision> {
    let leader = board.is_leader();
    let mut routes = board.lock();
    let mut out = Vec::new();
    for (name, e) in routes.iter_mut() {
        if !leader || e.state != State::Running {
            e.open = None;
            continue;
        }
        let now = Instant::now();
        if e.open
            .as_ref()
            .is_some_and(|o| now.duration_since(o.at) < e.rule.every)
        {
            continue;
        }
        // The snapshot runs what the board was told of (or a reload is
        // on its way): only then is a window measured.
        let Some(reading) = read(shared, name, &e.services).filter(|r| r.weights == e.weights)
        else {
            e.open = None;
            continue;
        };
        let Some(was) = e.open.take() else {
            e.open = Some(open(reading));
            continue;
        };
        let diff = (
            reading.canary.since(&was.canary),
            reading.baseline.since(&was.baseline),
        );
        let (Some(canary), Some(baseline)) = diff else {
            e.open = Some(open(reading));
            continue;
        };
        if was.weights != reading.weights {
            e.open = Some(open(reading));
            continue;
        }
        let verdict = judge(&e.rule, &canary, &baseline);
        let weight = e.weight();
        let window = Window {
            start_ms: was.at_ms,
            end_ms: now_ms(),
            weight,
            canary: Side::of(&canary),
            baseline: Side::of(&baseline),
            verdict,
        };
        e.record(window.clone());
        let to = match verdict {
            Verdict::Skipped => {
                tracing::debug!(route = %name, weight, canary = canary.requests, baseline = baseline.requests, "rollout: window skipped (too few requests)");
                e.open = Some(open(reading));
                continue;
            }
            Verdict::Step => (weight + e.rule.step).min(100),
            Verdict::Rollback => 0,
        };
        out.push(Decision {
            route: name.clone(),
            from: reading.weights,
            to,
            verdict,
            window,
        });
    }
    out
}

/// Writes a verdict's weights and, once they are applied, counts it.
fn apply(board: &Board, reloader: &Mutex<Reloader>, d: Decision) {
    let written = write_share(board, reloader, &d.route, Some(&d.from), d.to, true);
    let w = &d.window;
    let from = share(&d.from);
    match written {
        Ok(revision) => {
            let mut routes = board.lock();
            if let Some(e) = routes.get_mut(&d.route) {
                match d.verdict {
                    Verdict::Rollback => {
                        e.rollbacks += 1;
                        e.state = State::RolledBack;
                    }
                    _ => {
                        e.steps += 1;
                        if d.to >= 100 {
                            e.state = State::Promoted;
                        }
                    }
                }
            }
            drop(routes);
            let figures = (
                w.canary.requests,
                w.canary.errors,
                w.canary.p99_ms,
                w.baseline.requests,
                w.baseline.errors,
                w.baseline.p99_ms,
            );
            if d.verdict == Verdict::Rollback {
                tracing::warn!(route = %d.route, from, to = d.to, revision, canary_requests = figures.0, canary_errors = figures.1, canary_p99_ms = figures.2, baseline_requests = figures.3, baseline_errors = figures.4, baseline_p99_ms = figures.5, "rollout: rolled back");
            } else {
                tracing::info!(route = %d.route, from, to = d.to, revision, canary_requests = figures.0, canary_errors = figures.1, canary_p99_ms = figures.2, baseline_requests = figures.3, baseline_errors = figures.4, baseline_p99_ms = figures.5, "rollout: step");
            }
        }
        Err(why) => {
            tracing::info!(route = %d.route, from, to = d.to, reason = %why, "rollout: weights not written; the next window is judged afresh");
        }
    }
}

/// Why weights were not written.
#[derive(Debug)]
pub(crate) enum NotWritten {
    /// No route of that name in the running config.
    NoRoute,
    /// The route has no split (or one of fewer than 2 entries).
    NoSplit,
    /// Its weights are no longer those judged.
    Changed,
    /// This gateway does not lead the fleet.
    NotLeader,
    Write(WriteError),
    Other(String),
}

impl std::fmt::Display for NotWritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotWritten::NoRoute => f.write_str("no such route"),
            NotWritten::NoSplit => f.write_str("the route has no split of 2 entries"),
            NotWritten::Changed => f.write_str("its weights changed since they were judged"),
            NotWritten::NotLeader => f.write_str("this gateway no longer leads"),
            NotWritten::Write(WriteError::Stale) => {
                f.write_str("someone else wrote first (stale revision)")
            }
            NotWritten::Write(WriteError::Invalid(issues)) => {
                write!(f, "refused: {}", issues.first().map_or("", |i| &i.message))
            }
            NotWritten::Write(WriteError::Io(m)) | NotWritten::Other(m) => f.write_str(m),
        }
    }
}

/// Gives route `name`'s canary `to` percentage points in the running
/// config (the other entries the rest, in their ratios), if its weights
/// are `expect` (when given): a config write through the reloader's
/// source. `fenced`: the controller's write, made only by the leader and
/// fenced by its key.
pub(crate) fn write_share(
    board: &Board,
    reloader: &Mutex<Reloader>,
    name: &str,
    expect: Option<&[u64]>,
    to: u32,
    fenced: bool,
) -> Result<u64, NotWritten> {
    let fence = board
        .fence
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let fleet = board.fleet.load(Ordering::Acquire);
    if fenced && fleet && fence.is_none() {
        return Err(NotWritten::NotLeader);
    }
    let mut r = Reloader::locked(reloader);
    let mut doc = r
        .document()
        .map(|d| Document::clone(&d))
        .map_err(NotWritten::Other)?;
    set_share(&mut doc, name, expect, to)?;
    let fence = if fenced { fence } else { None };
    r.write_fenced(doc, fence.as_ref())
        .map_err(NotWritten::Write)
}

/// A split entry's weight as the document holds it (a number, or text).
fn weight_of(entry: &Value) -> Option<u64> {
    match entry.get("weight")? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Sets route `name`'s split weights in `doc` so the canary has `to`
/// points, if they are `expect` (when given).
pub(crate) fn set_share(
    doc: &mut Document,
    name: &str,
    expect: Option<&[u64]>,
    to: u32,
) -> Result<(), NotWritten> {
    let Some(Value::Array(mut routes)) = doc.get("routes") else {
        return Err(NotWritten::NoRoute);
    };
    let route = routes
        .iter_mut()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
        .ok_or(NotWritten::NoRoute)?;
    let Some(Value::Array(entries)) = route.get_mut("split") else {
        return Err(NotWritten::NoSplit);
    };
    let now: Vec<u64> = entries
        .iter()
        .map(weight_of)
        .collect::<Option<_>>()
        .ok_or(NotWritten::NoSplit)?;
    if now.len() < 2 {
        return Err(NotWritten::NoSplit);
    }
    if expect.is_some_and(|w| w != now.as_slice()) {
        return Err(NotWritten::Changed);
    }
    for (entry, w) in entries.iter_mut().zip(scaled(&now, to)) {
        if let Value::Object(fields) = entry {
            fields.insert("weight".to_string(), Value::from(w));
        }
    }
    doc.set("routes", Some(&Value::Array(routes)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        let routes = "  - name: plain
    service: v1
  - name: orders
    split: [{ service: v1, weight: 95 }, { service: v2, weight: 5 }]
    rollout: { step: 10, every: 1s }
";
        Document::from_yaml(&crate::rollout::test_config(&["v1", "v2"], routes)).unwrap()
    }

    fn weights(d: &Document) -> Vec<u64> {
        let routes = d.get("routes").unwrap();
        routes[1]["split"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| weight_of(e).unwrap())
            .collect()
    }

    #[test]
    fn a_share_is_written_into_the_routes_split() {
        let mut d = doc();
        set_share(&mut d, "orders", Some(&[95, 5]), 15).unwrap();
        assert_eq!(weights(&d), [85, 15]);
        // The result still decodes, rollout and all.
        let cfg = d.decode().unwrap();
        assert!(cfg.routes[1].rollout.is_some());
        // Judged on other weights: not written.
        assert!(matches!(
            set_share(&mut d, "orders", Some(&[95, 5]), 25),
            Err(NotWritten::Changed)
        ));
        assert_eq!(weights(&d), [85, 15]);
        set_share(&mut d, "orders", None, 0).unwrap();
        assert_eq!(weights(&d), [100, 0]);
        assert!(matches!(
            set_share(&mut d, "nope", None, 0),
            Err(NotWritten::NoRoute)
        ));
        assert!(matches!(
            set_share(&mut d, "plain", None, 0),
            Err(NotWritten::NoSplit)
        ));
    }
}
