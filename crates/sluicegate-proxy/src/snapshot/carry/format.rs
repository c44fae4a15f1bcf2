//! The state document's text: its version and size limit, its entries,
//! the percent-encoding of names, and the parser that checks a whole
//! document (the format is described in the parent module's doc).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::apps::limit::{QUOTA_COUNT_MAX, QUOTA_TAG_MAX};
use crate::balance::breaker::Carried;
use crate::balance::endpoint::EndpointState;

/// The format's version, on the first line.
pub const VERSION: u32 = 1;
/// Largest document written or read (an app with a quota or rate in use
/// takes 20 to 40 bytes plus its id).
pub const MAX_BYTES: usize = 256 << 20;

/// One entry of the document.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry<'a> {
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
pub(super) struct EpKey<'a> {
    pub(super) service: Cow<'a, str>,
    pub(super) name: Cow<'a, str>,
    pub(super) addr: SocketAddr,
    pub(super) weight: u32,
    pub(super) max: usize,
}

impl EpKey<'_> {
    pub(super) fn matches(&self, e: &EndpointState) -> bool {
        e.addr == self.addr && e.weight == self.weight && e.max == self.max
    }
}

/// Appends ` NAME`, percent-encoding `%`, spaces and control characters.
pub(super) fn name(out: &mut String, s: &str) {
    out.push(' ');
    for c in s.chars() {
        if c == '%' || c == ' ' || c.is_ascii_control() {
            let _ = write!(out, "%{:02X}", c as u32);
        } else {
            out.push(c);
        }
    }
}

pub(super) fn unescape(s: &str) -> Result<Cow<'_, str>, String> {
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
pub(super) fn parse<'a>(doc: &'a [u8], mut each: impl FnMut(Entry<'a>)) -> Result<u64, String> {
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
