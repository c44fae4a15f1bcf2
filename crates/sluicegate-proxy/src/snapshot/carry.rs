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

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Shared;
use crate::apps::limit::{mono_ns, QUOTA_COUNT_MAX, QUOTA_TAG_MAX};
use crate::filters::RouteCounters;
use crate::upstream::breaker::Carried;
use crate::upstream::endpoint::EndpointState;

/// The format's version, on the first line.
pub const VERSION: u32 = 1;
/// Largest document written or read (an app with a quota or rate in use
/// takes 20 to 40 bytes plus its id).
pub const MAX_BYTES: usize = 256 << 20;
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

/// One entry of the document.
#[derive(Debug, PartialEq, Eq)]
enum Entry<'a> {
    Health {
        ep: EpKey<'a>,
        healthy: bool,
        oks: u32,
        fails: u32,
    },
    Eject {
        ep: EpKey<'a>,
        left: u64,
        streak: u32,
    },
    Breaker {
        ep: EpKey<'a>,
        circuit: Carried,
    },
    Route {
        route: Cow<'a, str>,
        ahead: u64,
    },
    Client {
        route: Cow<'a, str>,
        ip: IpAddr,
        ahead: u64,
    },
    App {
        app: Cow<'a, str>,
        service: Option<Cow<'a, str>>,
        ahead: u64,
        window: u64,
        count: u64,
    },
}

/// An endpoint as the registry keys it: a reload keeps its state only
/// when all of these stay the same.
#[derive(Debug, PartialEq, Eq)]
struct EpKey<'a> {
    service: Cow<'a, str>,
    name: Cow<'a, str>,
    addr: SocketAddr,
    weight: u32,
    max: usize,
}

impl EpKey<'_> {
    fn matches(&self, e: &EndpointState) -> bool {
        e.addr == self.addr && e.weight == self.weight && e.max == self.max
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
        for svc in &snap.services {
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
        for svc in &snap.services {
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

/// Appends ` NAME`, percent-encoding `%`, spaces and control characters.
fn name(out: &mut String, s: &str) {
    out.push(' ');
    for c in s.chars() {
        if c == '%' || c == ' ' || c.is_ascii_control() {
            let _ = write!(out, "%{:02X}", c as u32);
        } else {
            out.push(c);
        }
    }
}

fn unescape(s: &str) -> Result<Cow<'_, str>, String> {
    if !s.contains('%') {
        return Ok(Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape in name {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| format!("name {s:?} is not UTF-8"))
}

/// Checks `doc` and hands each entry to `each`; returns the export's
/// wall-clock time (nanoseconds since the Unix epoch).
fn parse<'a>(doc: &'a [u8], mut each: impl FnMut(Entry<'a>)) -> Result<u64, String> {
    if doc.len() > MAX_BYTES {
        return Err(format!(
            "state document of {} bytes, over the {MAX_BYTES} allowed",
            doc.len()
        ));
    }
    let text = std::str::from_utf8(doc)
        .map_err(|e| format!("state document is not UTF-8 (at byte {})", e.valid_up_to()))?;
    let err = |n: usize, what: &str| format!("state document line {n}: {what}");
    if !text.starts_with("sluicegate-state ") {
        return Err(err(1, "not a sluicegate state document"));
    }
    let body = text
        .strip_suffix('\n')
        .ok_or("state document does not end with a newline (cut short?)")?;
    let mut lines = body.split('\n').enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, l)) if l == format!("sluicegate-state {VERSION}") => {}
        Some((n, l)) if l.starts_with("sluicegate-state ") => {
            return Err(err(
                n,
                &format!(
                    "version {:?} not supported (this binary reads {VERSION})",
                    &l[17..]
                ),
            ))
        }
        _ => return Err(err(1, "not a sluicegate state document")),
    }
    let at = match lines.next() {
        Some((n, l)) => {
            let v = l
                .strip_prefix("at ")
                .ok_or_else(|| err(n, "expected `at`"))?;
            v.parse::<u64>().map_err(|_| err(n, "bad time"))?
        }
        None => return Err(err(2, "expected `at`")),
    };
    for (n, line) in lines {
        // Entries start on line 3.
        let entries = n - 3;
        let mut f = line.split(' ');
        let kind = f.next().unwrap_or("");
        if kind == "end" {
            let count: usize = f
                .next()
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| err(n, "bad `end`"))?;
            if f.next().is_some() || count != entries {
                return Err(err(
                    n,
                    &format!("`end` says {count} entries, {entries} read"),
                ));
            }
            if n != body.split('\n').count() {
                return Err(err(n + 1, "text after `end`"));
            }
            return Ok(at);
        }
        let fields: Vec<&str> = f.collect();
        let entry = entry(kind, &fields).map_err(|e| err(n, &e))?;
        each(entry);
    }
    Err("state document has no `end` line (cut short?)".to_string())
}

fn entry<'a>(kind: &str, f: &[&'a str]) -> Result<Entry<'a>, String> {
    let want = |n: usize| -> Result<(), String> {
        if f.len() == n {
            Ok(())
        } else {
            Err(format!("`{kind}` takes {n} fields, found {}", f.len()))
        }
    };
    fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
        if s.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(v) = s.parse() {
                return Ok(v);
            }
        }
        Err(format!("bad {what} {s:?}"))
    }
    let ep = |f: &[&'a str]| -> Result<EpKey<'a>, String> {
        Ok(EpKey {
            service: unescape(f[0])?,
            name: unescape(f[1])?,
            addr: f[2]
                .parse()
                .map_err(|_| format!("bad address {:?}", f[2]))?,
            weight: num(f[3], "weight")?,
            max: num(f[4], "max")?,
        })
    };
    let quota = |w: &str, c: &str| -> Result<(u64, u64), String> {
        let (w, c): (u64, u64) = (num(w, "quota window")?, num(c, "quota count")?);
        if w > QUOTA_TAG_MAX || c > QUOTA_COUNT_MAX {
            return Err("quota out of range".into());
        }
        Ok((w, c))
    };
    Ok(match kind {
        "health" => {
            want(8)?;
            Entry::Health {
                ep: ep(f)?,
                healthy: match f[5] {
                    "0" => false,
                    "1" => true,
                    h => return Err(format!("bad health flag {h:?}")),
                },
                oks: num(f[6], "count")?,
                fails: num(f[7], "count")?,
            }
        }
        "eject" => {
            want(7)?;
            Entry::Eject {
                ep: ep(f)?,
                left: num(f[5], "time left")?,
                streak: num(f[6], "count")?,
            }
        }
        "breaker" => {
            want(8)?;
            Entry::Breaker {
                ep: ep(f)?,
                circuit: Carried {
                    open_for: match f[5] {
                        "closed" => None,
                        left => Some(num(left, "time left")?),
                    },
                    fails: num(f[6], "count")?,
                    window_age: num(f[7], "window age")?,
                },
            }
        }
        "route" => {
            want(2)?;
            Entry::Route {
                route: unescape(f[0])?,
                ahead: num(f[1], "time")?,
            }
        }
        "client" => {
            want(3)?;
            Entry::Client {
                route: unescape(f[0])?,
                ip: f[1]
                    .parse()
                    .map_err(|_| format!("bad address {:?}", f[1]))?,
                ahead: num(f[2], "time")?,
            }
        }
        "app" => {
            want(4)?;
            let (window, count) = quota(f[2], f[3])?;
            Entry::App {
                app: unescape(f[0])?,
                service: None,
                ahead: num(f[1], "time")?,
                window,
                count,
            }
        }
        "app-service" => {
            want(5)?;
            let (window, count) = quota(f[3], f[4])?;
            Entry::App {
                app: unescape(f[0])?,
                service: Some(unescape(f[1])?),
                ahead: num(f[2], "time")?,
                window,
                count,
            }
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            return Err(format!("unknown entry {shown:?}"));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::limit::PlanRt;
    use crate::upstream::breaker::Admit;
    use sluicegate_config::{Plan, Rate};
    use std::sync::atomic::Ordering::Relaxed;

    /// Services s1 (health, breaker) and s2; plans q (quota 3/day) and r
    /// (rate 1/h, burst 2); apps a (q), b (r, and q on s2); routes with a
    /// per-route and a per-client limit. `extra` goes at the end of `apps`.
    fn config(s1_eps: &str, apps_extra: &str) -> sluicegate_config::Config {
        sluicegate_config::parse(&format!(
            r#"listen: ["127.0.0.1:9"]
services:
  - name: s1
    endpoints: [{s1_eps}]
    health: {{ path: /h, interval: 1s, unhealthy_after: 2, healthy_after: 2 }}
    breaker: {{ errors: 2, window: 10s, open_for: 60s }}
  - {{ name: s2, endpoints: ["127.0.0.1:12"] }}
plans:
  q: {{ quota: 3/day }}
  r: {{ rate: 1/h, burst: 2 }}
apps:
  - {{ id: a, keys: [key-of-a-0001], plan: q }}
  - {{ id: b.c, keys: [key-of-b-0001], plan: r, plans_by_service: {{ s2: q }} }}
{apps_extra}routes:
  - name: whole
    match: {{ path_prefix: /w }}
    service: s2
    limit: {{ rate: 1/h, burst: 1, per: route }}
  - name: each
    match: {{ path_prefix: /e }}
    service: s2
    limit: {{ rate: 1/h, burst: 1 }}
  - name: api
    match: {{ path_prefix: / }}
    service: s1
    auth: app_key
"#
        ))
        .unwrap()
    }

    const EPS: &str = r#""127.0.0.1:10", "127.0.0.1:11""#;

    /// Whether one request of `app` to service index `svc` is admitted.
    fn charge(shared: &Shared, app: &str, svc: u32) -> bool {
        let t = shared.snapshot.load().apps.clone();
        let a = t.by_id(app).unwrap();
        let c = a.charge_for(svc).unwrap();
        t.slot(c.slot)
            .limit
            .try_admit(c.plan, Instant::now(), SystemTime::now)
            .is_ok()
    }

    fn route_plan() -> PlanRt {
        PlanRt::new(&Plan {
            name: "x".into(),
            rate: Some(Rate {
                count: 1,
                per: Duration::from_secs(3600),
            }),
            burst: Some(1),
            quota: None,
            concurrency: None,
        })
    }

    /// Whether one request on route `name` (from `ip`) is admitted.
    fn charge_route(shared: &Shared, name: &str, ip: &str) -> bool {
        let reg = shared.registry.lock().unwrap();
        let now = Instant::now();
        let state = match reg.route_limits.get(name).unwrap() {
            RouteCounters::Route(s) => s.clone(),
            RouteCounters::ClientIp(t) => t.state(ip.parse().unwrap(), now),
        };
        state.try_admit(&route_plan(), now, SystemTime::now).is_ok()
    }

    fn endpoint(shared: &Shared, name: &str) -> Arc<EndpointState> {
        let snap = shared.snapshot.load();
        let found = snap.services[0].endpoints.iter().find(|e| e.name == name);
        found.unwrap().clone()
    }

    #[test]
    fn state_goes_over_to_a_new_gateway_and_what_no_longer_matches_is_dropped() {
        let old = Shared::new(&config(EPS, "")).unwrap();
        assert!((0..3).all(|_| charge(&old, "a", 0)));
        assert!(!charge(&old, "a", 0), "a's quota is used up");
        assert!(charge(&old, "b.c", 0) && charge(&old, "b.c", 0));
        assert!(!charge(&old, "b.c", 0), "b's bucket is empty");
        assert!(charge(&old, "b.c", 1), "b's s2 quota has room");
        assert!(charge_route(&old, "whole", "10.0.0.1"));
        assert!(charge_route(&old, "each", "10.0.0.1"));
        let e10 = endpoint(&old, "127.0.0.1:10");
        e10.eject
            .connect_failed(mono_ns(Instant::now()).saturating_sub(2_000_000_000)); // over
        e10.eject.connect_failed(mono_ns(Instant::now())); // 2 s from now
        e10.healthy.store(false, Relaxed);
        e10.health_fails.store(5, Relaxed);
        let e11 = endpoint(&old, "127.0.0.1:11");
        let now = mono_ns(Instant::now());
        e11.breaker.record(Admit::Closed, false, now);
        assert!(e11.breaker.record(Admit::Closed, false, now), "opened");

        let (doc, exported) = old.export_state();
        let text = String::from_utf8(doc.clone()).unwrap();
        assert!(text.starts_with("sluicegate-state 1\nat "), "{text}");
        assert!(text.contains("\napp b.c "), "{text}");
        assert_eq!(exported.left_out, 0);
        assert_eq!(exported.bytes, doc.len());

        // The same config: everything matches.
        let new = Shared::new(&config(EPS, "")).unwrap();
        let got = new.import_state(&doc).unwrap();
        assert_eq!(got.dropped, 0, "{got:?}\n{text}");
        assert_eq!(got.entries(), exported.entries);
        assert!(!charge(&new, "a", 0), "the quota stays used up");
        assert!(!charge(&new, "b.c", 0), "the bucket stays empty");
        assert!((0..2).all(|_| charge(&new, "b.c", 1)));
        assert!(!charge(&new, "b.c", 1), "b's s2 quota: 1 + 2 of 3");
        assert!(!charge_route(&new, "whole", "10.0.0.1"));
        assert!(!charge_route(&new, "each", "10.0.0.1"));
        assert!(charge_route(&new, "each", "10.0.0.2"), "another client");
        let n10 = endpoint(&new, "127.0.0.1:10");
        assert!(!n10.is_healthy());
        assert_eq!(n10.health_fails.load(Relaxed), 5);
        let now = mono_ns(Instant::now());
        assert!(n10.eject.is_ejected(now) && !n10.eject.is_ejected(now + 2_000_000_000));
        assert_eq!(n10.eject.carried(now).map(|c| c.1), Some(2), "the streak");
        let n11 = endpoint(&new, "127.0.0.1:11");
        let now = mono_ns(Instant::now());
        assert!(n11.breaker.is_open(now) && !n11.in_rotation());
        assert!(
            !n11.breaker.is_open(now + 61_000_000_000),
            "open for 60 s at most"
        );

        // A config that changed: the endpoint :10 is gone (:13 is new), app
        // a is gone, c is new. What matches comes over, the rest is dropped.
        let changed = Shared::new(&config(
            r#""127.0.0.1:13", "127.0.0.1:11""#,
            "  - { id: c, keys: [key-of-c-0001], plan: q }\n  - { id: a2, keys: [key-of-a-0002], plan: q }\n",
        ))
        .unwrap();
        let doc2 = text.replace("\napp a ", "\napp gone ");
        let got = changed.import_state(doc2.as_bytes()).unwrap();
        assert_eq!(got.dropped, 3, "{got:?}"); // :10's health and ejection, app "gone"
        assert!(endpoint(&changed, "127.0.0.1:13").is_healthy());
        assert!(!endpoint(&changed, "127.0.0.1:11").in_rotation());
        assert!(charge(&changed, "c", 0) && charge(&changed, "a2", 0));
        assert!(!charge(&changed, "b.c", 0));
    }

    #[test]
    fn garbage_is_refused_whole_with_the_line_that_failed() {
        let old = Shared::new(&config(EPS, "")).unwrap();
        assert!((0..3).all(|_| charge(&old, "a", 0)));
        let (doc, _) = old.export_state();
        let text = String::from_utf8(doc).unwrap();
        let head = "sluicegate-state 1\nat 1\n";
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "line 1: not a sluicegate state document"),
            (
                "GET / HTTP/1.1\r\n\r\n".into(),
                "line 1: not a sluicegate state document",
            ),
            (
                "sluicegate-state 2\nat 1\nend 0\n".into(),
                "line 1: version \"2\" not supported",
            ),
            (text[..text.len() - 1].into(), "does not end with a newline"),
            (text.replace("\nend ", "\nand "), "unknown entry \"and\""),
            (
                format!("{head}app a 1 2\nend 1\n"),
                "line 3: `app` takes 4 fields, found 3",
            ),
            (
                format!("{head}app a -1 0 0\nend 1\n"),
                "line 3: bad time \"-1\"",
            ),
            (
                format!("{head}app a 1 0 99999999999999999999\nend 1\n"),
                "bad quota count",
            ),
            (
                format!("{head}app a 1 16777216 1\nend 1\n"),
                "quota out of range",
            ),
            (format!("{head}app a%zz 1 0 1\nend 1\n"), "bad escape"),
            (format!("{head}app a%FF 1 0 1\nend 1\n"), "not UTF-8"),
            (
                format!("{head}client each nowhere 1\nend 1\n"),
                "bad address",
            ),
            (
                format!("{head}app a 1 0 1\nend 2\n"),
                "line 4: `end` says 2 entries, 1 read",
            ),
            (format!("{head}app a 1 0 1\n"), "no `end` line"),
            (format!("{head}end 0\nend 0\n"), "line 4: text after `end`"),
            (format!("{head}\u{0}\nend 0\n"), "line 3: unknown entry"),
        ];
        for (doc, want) in cases {
            let new = Shared::new(&config(EPS, "")).unwrap();
            let e = new.import_state(doc.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{doc:?}: {e}");
            assert!(
                (0..3).all(|_| charge(&new, "a", 0)),
                "nothing applied: {doc:?}"
            );
        }
        let e = Shared::new(&config(EPS, ""))
            .unwrap()
            .import_state(&[0xff, b'\n'])
            .unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
        let big = vec![b'x'; MAX_BYTES + 1];
        let e = Shared::new(&config(EPS, ""))
            .unwrap()
            .import_state(&big)
            .unwrap_err();
        assert!(e.contains("over the"), "{e}");
    }

    #[test]
    fn names_round_trip_through_escapes() {
        for s in ["plain", "b c%", "tab\there", "100%", "é ü", ""] {
            let mut out = String::new();
            name(&mut out, s);
            let enc = out.strip_prefix(' ').unwrap();
            assert!(!enc.contains(' ') && !enc.contains('\n'), "{enc:?}");
            assert_eq!(unescape(enc).unwrap(), s);
        }
    }
}
