//! The state an upgrade carries from the old process to the new one: the
//! same state a reload keeps in the [`Registry`](super::Registry), written
//! out as a small versioned text document by the old process and read back
//! by the new one before it serves. Plans' rate buckets and quotas (per app,
//! and per service for `plans_by_service`), routes' `limit` buckets, and
//! each endpoint's active-health state, ejection after failed connects and
//! circuit breaker, keyed by config names, so the new config takes what
//! still matches, as a reload would.
//!
//! Times are carried relative to the moment of export (a rate bucket's
//! debt, an ejection's or open circuit's time left, a failure window's
//! age), since each
//! process has its own monotonic clock origin; the wall-clock time of the
//! export lets the importer take off the time the document spent in
//! transit. Quota windows come from the wall clock and are carried as they
//! are. Requests in flight (concurrency counts, half-open probes) and
//! metrics counters are not carried.
//!
//! Format, one entry a line, fields separated by one space, names
//! percent-encoded (`%XX` for `%`, spaces and control characters):
//!
//! ```text
//! sluicegate-state 1
//! at UNIX_NS
//! health SERVICE ENDPOINT ADDR WEIGHT MAX HEALTHY(0|1) OKS FAILS
//! eject SERVICE ENDPOINT ADDR WEIGHT MAX LEFT_NS STREAK
//! breaker SERVICE ENDPOINT ADDR WEIGHT MAX (closed|OPEN_LEFT_NS) FAILS WINDOW_AGE_NS
//! route ROUTE AHEAD_NS
//! client ROUTE IP AHEAD_NS
//! app APP AHEAD_NS QUOTA_WINDOW QUOTA_COUNT
//! app-service APP SERVICE AHEAD_NS QUOTA_WINDOW QUOTA_COUNT
//! end ENTRIES
//! ```
//!
//! The document is at most [`MAX_BYTES`]; a document that does not parse
//! in full is refused as a whole, with the line that failed.
//!
//! The document's entries, escaping and parser are in `format`.

mod format;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Shared;
use crate::balance::breaker::Carried;
use crate::balance::endpoint::EndpointState;
use crate::clock::mono_ns;
use crate::filters::RouteCounters;
use format::{name, parse, Entry};
pub use format::{MAX_BYTES, VERSION};

/// Longest time in transit taken off carried durations: more means the
/// wall clock moved, and nothing is taken off.
const MAX_TRANSIT: Duration = Duration::from_secs(60);

/// What an export wrote, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Exported {
    pub entries: usize,
    pub bytes: usize,
    /// Entries left out to stay within [`MAX_BYTES`].
    pub left_out: usize,
}

/// What an import took over, and what matched nothing in the new config.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    pub endpoints: usize,
    pub routes: usize,
    pub clients: usize,
    pub apps: usize,
    pub dropped: usize,
}

impl Imported {
    /// Entries taken over.
    pub fn entries(&self) -> usize {
        self.endpoints + self.routes + self.clients + self.apps
    }
}

impl Shared {
    /// Writes the state an upgrade carries (see the module's doc). Runs at
    /// upgrade time only, under the registry's lock.
    pub fn export_state(&self) -> (Vec<u8>, Exported) {
        let now = Instant::now();
        let now_ns = mono_ns(now);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let snap = self.snapshot.load_full();
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut w = Writer {
            out: format!("sluicegate-state {VERSION}\nat {wall}\n"),
            line: String::new(),
            done: Exported::default(),
        };
        for svc in snap.services.iter() {
            for e in &svc.endpoints {
                let key = |l: &mut String, what: &str| {
                    l.push_str(what);
                    name(l, &svc.name);
                    name(l, &e.name);
                    let _ = write!(l, " {} {} {}", e.addr, e.weight, e.max);
                };
                if svc.health.is_some() {
                    let l = w.start();
                    key(l, "health");
                    let _ = write!(
                        l,
                        " {} {} {}",
                        u8::from(e.is_healthy()),
                        e.health_oks.load(std::sync::atomic::Ordering::Relaxed),
                        e.health_fails.load(std::sync::atomic::Ordering::Relaxed)
                    );
                    w.finish();
                }
                if let Some((left, streak)) = e.eject.carried(now_ns) {
                    let l = w.start();
                    key(l, "eject");
                    let _ = write!(l, " {left} {streak}");
                    w.finish();
                }
                if let Some(c) = e.breaker.carried(now_ns) {
                    let l = w.start();
                    key(l, "breaker");
                    match c.open_for {
                        None => l.push_str(" closed"),
                        Some(left) => {
                            let _ = write!(l, " {left}");
                        }
                    }
                    let _ = write!(l, " {} {}", c.fails, c.window_age);
                    w.finish();
                }
            }
        }
        let mut routes: Vec<_> = reg.route_limits.iter().collect();
        routes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (route, counters) in &routes {
            if let RouteCounters::Route(s) = counters {
                let (ahead, _, _) = s.carried(now_ns);
                if ahead > 0 {
                    let l = w.start();
                    l.push_str("route");
                    name(l, route);
                    let _ = write!(l, " {ahead}");
                    w.finish();
                }
            }
        }
        for (id, service, s) in snap.apps.limit_states() {
            let (ahead, window, count) = s.carried(now_ns);
            if ahead == 0 && count == 0 {
                continue;
            }
            let l = w.start();
            l.push_str(if service.is_some() {
                "app-service"
            } else {
                "app"
            });
            name(l, id);
            if let Some(svc) = service {
                name(l, svc);
            }
            let _ = write!(l, " {ahead} {window} {count}");
            w.finish();
        }
        // Clients last: there may be many, and they are the first to go
        // when the document is full.
        for (route, counters) in &routes {
            if let RouteCounters::ClientIp(t) = counters {
                for (ip, ahead) in t.carried(now_ns) {
                    let l = w.start();
                    l.push_str("client");
                    name(l, route);
                    let _ = write!(l, " {ip} {ahead}");
                    w.finish();
                }
            }
        }
        let _ = writeln!(w.out, "end {}", w.done.entries);
        w.done.bytes = w.out.len();
        (w.out.into_bytes(), w.done)
    }

    /// Takes over the state in `doc` (from [`Shared::export_state`] in
    /// another process) for the entries that match the config in force;
    /// the rest is dropped, as a reload drops it. A document that does not
    /// parse in full changes nothing. Runs before the process serves.
    pub fn import_state(&self, doc: &[u8]) -> Result<Imported, String> {
        // Checked in full before anything is applied.
        let at = parse(doc, |_| ())?;
        let now = Instant::now();
        let transit = SystemTime::now()
            .duration_since(UNIX_EPOCH + Duration::from_nanos(at))
            .ok()
            .filter(|d| *d <= MAX_TRANSIT)
            .unwrap_or_default()
            .as_nanos() as u64;
        let now_ns = mono_ns(now);
        let snap = self.snapshot.load_full();
        let reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut endpoints: HashMap<(&str, &str), (&Arc<EndpointState>, bool)> = HashMap::new();
        for svc in snap.services.iter() {
            for e in &svc.endpoints {
                endpoints.insert((&svc.name, &e.name), (e, svc.health.is_some()));
            }
        }
        let mut done = Imported::default();
        parse(doc, |entry| {
            let took = match entry {
                Entry::Health {
                    ep,
                    healthy,
                    oks,
                    fails,
                } => match endpoints.get(&(&*ep.service, &*ep.name)) {
                    Some((e, true)) if ep.matches(e) => {
                        use std::sync::atomic::Ordering::Relaxed;
                        e.healthy.store(healthy, Relaxed);
                        e.health_oks.store(oks, Relaxed);
                        e.health_fails.store(fails, Relaxed);
                        done.endpoints += 1;
                        true
                    }
                    _ => false,
                },
                Entry::Eject { ep, left, streak } => {
                    match endpoints.get(&(&*ep.service, &*ep.name)) {
                        Some((e, _)) if ep.matches(e) => {
                            let left = left.saturating_sub(transit);
                            let applied = e.eject.restore(left, streak, now_ns);
                            done.endpoints += usize::from(applied);
                            applied
                        }
                        _ => false,
                    }
                }
                Entry::Breaker { ep, circuit } => match endpoints.get(&(&*ep.service, &*ep.name)) {
                    Some((e, _)) if ep.matches(e) => {
                        let circuit = Carried {
                            open_for: circuit.open_for.map(|l| l.saturating_sub(transit)),
                            window_age: circuit.window_age.saturating_add(transit),
                            ..circuit
                        };
                        let applied = e.breaker.restore(&circuit, now_ns);
                        done.endpoints += usize::from(applied);
                        applied
                    }
                    _ => false,
                },
                Entry::Route { route, ahead } => match reg.route_limits.get(&*route) {
                    Some(RouteCounters::Route(s)) => {
                        s.restore(now_ns, ahead.saturating_sub(transit), 0, 0);
                        done.routes += 1;
                        true
                    }
                    _ => false,
                },
                Entry::Client { route, ip, ahead } => match reg.route_limits.get(&*route) {
                    Some(RouteCounters::ClientIp(t)) => {
                        let ahead = ahead.saturating_sub(transit);
                        if ahead > 0 {
                            t.restore(ip, now, ahead);
                        }
                        done.clients += 1;
                        true
                    }
                    _ => false,
                },
                Entry::App {
                    app,
                    service,
                    ahead,
                    window,
                    count,
                } => match snap.apps.limit_state(&app, service.as_deref()) {
                    Some(s) => {
                        s.restore(now_ns, ahead.saturating_sub(transit), window, count);
                        done.apps += 1;
                        true
                    }
                    None => false,
                },
            };
            if !took {
                done.dropped += 1;
            }
        })?;
        Ok(done)
    }
}

/// The document being written, one entry at a time, within [`MAX_BYTES`].
struct Writer {
    out: String,
    line: String,
    done: Exported,
}

impl Writer {
    fn start(&mut self) -> &mut String {
        self.line.clear();
        &mut self.line
    }

    /// Adds the entry begun with [`Writer::start`], if it fits (with room
    /// left for the last line).
    fn finish(&mut self) {
        if self.out.len() + self.line.len() + 1 + 32 > MAX_BYTES {
            self.done.left_out += 1;
            return;
        }
        self.out.push_str(&self.line);
        self.out.push('\n');
        self.done.entries += 1;
    }
}

#[cfg(test)]
mod tests;
