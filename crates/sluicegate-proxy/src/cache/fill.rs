//! A cache fill: what a miss needs to store the answer it forwards. Made
//! before the request goes upstream (its key, the request's fields that
//! `Vary` may name), judged when the answer's head comes (by
//! [`super::rules`]: stored or not, for how long, the `Cache-Status`
//! value), fed the body as it is relayed (capped at `max_object`: past
//! that the copy is dropped and the body keeps streaming) and committed
//! to the [`Store`] when the body ended whole. Knows nothing of sessions
//! or buffers: the relay hands it fields and bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::flight::Head;
pub use super::key::Key;
use super::rules::{self, ResponseDirectives, ResponseFacts, Storable};
use super::store::{Object, Parts, Store, VaryValue};

/// A request's field: its name in lower case, its value trimmed.
pub type Field = (Box<[u8]>, Box<[u8]>);

/// Why the request went upstream (`Cache-Status`' `fwd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Nothing stored for it.
    Miss,
    /// What was stored is stale.
    Stale,
    /// The request asked for it (`no-cache`, `max-age=0`).
    Request,
}

impl Fwd {
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Miss => "miss",
            Fwd::Stale => "stale",
            Fwd::Request => "request",
        }
    }
}

/// A stored object revalidated in the foreground: the request goes
/// upstream with the object's validators in place of the client's, and a
/// `304` refreshes the object ([`Fill::refreshed`]). What the request's
/// head lent for it, to be given back if another service is asked
/// instead (a fallback's).
#[derive(Debug)]
pub struct Revalidation {
    pub object: Arc<Object>,
    /// The client's conditional fields set aside (their places in the
    /// request's head).
    pub set_aside: Vec<usize>,
    /// How many fields the filters had added before the validators.
    pub added_from: usize,
}

/// How the store is used by one route (its `cache`, by value).
#[derive(Debug, Clone)]
pub struct Policy {
    pub store: Arc<Store>,
    pub default_ttl: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    pub tags_header: Option<Box<[u8]>>,
    pub route: Arc<str>,
}

/// One miss's fill.
#[derive(Debug)]
pub struct Fill {
    policy: Policy,
    hash: u64,
    key: Key,
    /// The request's fields (names in lower case), for `Vary`.
    request_fields: Vec<Field>,
    authorization: bool,
    fwd: Fwd,
    /// The object to be, once its head was judged storable.
    pending: Option<Parts>,
    /// The body's copy, when no request waits for it (otherwise it is
    /// the lead's, for the waiters to read as well).
    body: Vec<u8>,
    /// How much of the body was copied.
    got: u64,
    /// The body's length, when its head gave it: the object is stored as
    /// soon as the last byte is copied, before it is written to the
    /// client (whose next request may then hit).
    expected: Option<u64>,
    /// The body arrived whole (set by the relay when no length told).
    pub whole: bool,
    /// It was stored.
    pub stored: bool,
    /// An unsafe method's: its answer, unless an error, removes the key's
    /// objects when its head comes; nothing is stored.
    invalidate: bool,
    /// The lead of the key's flight, when others wait for this fetch:
    /// let go once the answer is stored or judged not storable.
    pub lead: Option<super::flight::Lead>,
    /// The stored object it revalidates, when it does.
    pub revalidation: Option<Box<Revalidation>>,
    /// The object it stored.
    pub object: Option<Arc<Object>>,
}

impl Fill {
    pub fn new(
        policy: Policy,
        key: Key,
        request_fields: Vec<Field>,
        authorization: bool,
        fwd: Fwd,
    ) -> Fill {
        let hash = policy.store.hash(&key.parts());
        Fill {
            policy,
            hash,
            key,
            request_fields,
            authorization,
            fwd,
            pending: None,
            body: Vec::new(),
            got: 0,
            expected: None,
            whole: false,
            stored: false,
            invalidate: false,
            lead: None,
            revalidation: None,
            object: None,
        }
    }

    /// The fill of an unsafe method (`POST`, `PUT`, `DELETE`, `PATCH`):
    /// [`Fill::judge`] removes the key's objects on an answer below 400.
    pub fn invalidating(policy: Policy, key: Key) -> Fill {
        let mut f = Fill::new(policy, key, Vec::new(), false, Fwd::Miss);
        f.invalidate = true;
        f
    }

    /// Judges the answer's head: `fields` as (name, value, forwarded:
    /// whether the field goes on to clients), `length` its body's when
    /// known. Returns the answer's `Cache-Status` value (none for an
    /// unsafe method's answer).
    pub fn judge(
        &mut self,
        status: u16,
        fields: &[(&[u8], &[u8], bool)],
        length: Option<u64>,
    ) -> Option<String> {
        if self.invalidate {
            if (200..400).contains(&status) {
                let parts = self.key.parts();
                self.policy.store.remove(self.hash, &parts);
            }
            return None;
        }
        let status = self.judge_storable(status, fields, length);
        if self.pending.is_none() {
            // Not stored: the waiters go upstream on their own.
            self.lead = None;
        }
        Some(status)
    }

    fn judge_storable(
        &mut self,
        status: u16,
        fields: &[(&[u8], &[u8], bool)],
        length: Option<u64>,
    ) -> String {
        let mut facts = ResponseFacts {
            status,
            ..ResponseFacts::default()
        };
        let mut cc = ResponseDirectives::default();
        let (mut etag, mut last_modified) = (None, None);
        let mut vary_names: Vec<Box<[u8]>> = Vec::new();
        let mut tags: Vec<Box<[u8]>> = Vec::new();
        let mut lines = Vec::new();
        for &(name, value, forwarded) in fields {
            let lower = name.to_ascii_lowercase();
            match &lower[..] {
                b"cache-control" => cc.add(value),
                b"expires" => facts.expires = Some(value),
                b"date" => facts.date = Some(value),
                b"age" => facts.age = Some(value),
                b"set-cookie" => facts.set_cookie = true,
                b"content-range" => facts.content_range = true,
                b"etag" => etag = Some(value.trim_ascii().into()),
                b"last-modified" => last_modified = Some(value.trim_ascii().into()),
                b"vary" => {
                    for v in value.split(|&b| b == b',') {
                        let v = v.trim_ascii();
                        if v == b"*" {
                            facts.vary_star = true;
                        } else if !v.is_empty() {
                            vary_names.push(v.to_ascii_lowercase().into());
                        }
                    }
                }
                _ => {}
            }
            if self.policy.tags_header.as_deref() == Some(&lower[..]) {
                tags.extend(
                    value
                        .split(|&b| b == b',')
                        .map(|t| t.trim_ascii())
                        .filter(|t| !t.is_empty())
                        .map(Box::from),
                );
            }
            if forwarded && lower != b"age" {
                lines.extend_from_slice(name);
                lines.extend_from_slice(b": ");
                lines.extend_from_slice(value);
                lines.extend_from_slice(b"\r\n");
            }
        }
        facts.cc = cc;
        let fwd = match self.revalidation {
            None => std::borrow::Cow::Borrowed(self.fwd.as_str()),
            Some(_) => format!("{}; fwd-status={status}", self.fwd.as_str()).into(),
        };
        let fresh_for = match rules::storable(&facts, self.authorization, self.policy.default_ttl) {
            Storable::No(why) => return format!("sluicegate; fwd={fwd}; detail={why}"),
            Storable::Yes(d) => d,
        };
        if length.is_some_and(|n| n > self.policy.store.max_object) {
            return format!("sluicegate; fwd={fwd}; detail=too-large");
        }
        let vary: Box<[VaryValue]> = vary_names
            .into_iter()
            .map(|name| {
                let value = self
                    .request_fields
                    .iter()
                    .find(|(n, _)| **n == *name)
                    .map_or(Box::default(), |(_, v)| v.clone());
                (name, value)
            })
            .collect();
        let p = &self.policy;
        self.pending = Some(Parts {
            status,
            fields: lines.into_boxed_slice(),
            body: Bytes::new(),
            stored: Instant::now(),
            initial_age: rules::initial_age(&facts, rules::unix_now()),
            fresh_for,
            stale_while_revalidate: cc
                .stale_while_revalidate
                .map_or(p.stale_while_revalidate, Duration::from_secs),
            stale_if_error: cc
                .stale_if_error
                .map_or(p.stale_if_error, Duration::from_secs),
            must_revalidate: cc.must_revalidate || cc.proxy_revalidate || cc.no_cache,
            no_cache: cc.no_cache,
            etag,
            last_modified,
            vary,
            tags: tags.into_boxed_slice(),
            route: p.route.clone(),
        });
        self.expected = length;
        if let (Some(lead), Some(p)) = (&self.lead, &self.pending) {
            lead.head(Head {
                status,
                fields: p.fields.clone(),
                length,
                etag: p.etag.clone(),
                last_modified: p.last_modified.clone(),
                initial_age: p.initial_age,
                arrived: p.stored,
                vary: p.vary.clone(),
            });
        }
        if let Some(n) = length {
            match &self.lead {
                Some(lead) => lead.reserve(n as usize),
                None => self.body.reserve_exact(n as usize),
            }
            if n == 0 {
                self.whole = true;
                self.commit();
            }
        }
        format!("sluicegate; fwd={fwd}; stored")
    }

    /// Whether the answer is being kept (judged storable, not past the
    /// bound yet).
    pub fn keeping(&self) -> bool {
        self.pending.is_some()
    }

    /// Copies a piece of the body; past `max_object` the copy is dropped.
    pub fn push(&mut self, data: &[u8]) {
        if self.pending.is_none() {
            return;
        }
        if self.got + data.len() as u64 > self.policy.store.max_object {
            // Past the bound: not kept, and the waiters' answers are cut.
            self.pending = None;
            self.body = Vec::new();
            self.lead = None;
            return;
        }
        self.got += data.len() as u64;
        match &self.lead {
            Some(lead) => lead.push(data),
            None => self.body.extend_from_slice(data),
        }
        if self.expected == Some(self.got) {
            self.whole = true;
            self.commit();
        }
    }

    /// Stores the answer when it was judged storable and its body came
    /// whole (once); true when it is stored, by this call or before.
    pub fn commit(&mut self) -> bool {
        if !self.whole {
            return self.stored;
        }
        let Some(mut p) = self.pending.take() else {
            return self.stored;
        };
        p.body = match &self.lead {
            Some(lead) => lead.whole(),
            None => Bytes::from(std::mem::take(&mut self.body)),
        };
        let parts = self.key.parts();
        self.object = self.policy.store.insert(self.hash, &parts, p);
        self.stored = self.object.is_some();
        self.lead = None;
        self.stored
    }

    /// Why the request went upstream.
    pub fn fwd(&self) -> Fwd {
        self.fwd
    }

    /// Stores `stale` again as a `304` to its validators refreshed it:
    /// its body kept, its fields updated by the `304`'s `fresh` ones
    /// (each replacing the stored ones of its name, but for the framing
    /// and hop-by-hop fields; RFC 9111 section 4.3.4), its age counted
    /// anew. The stored object, or `None` when the update made it one
    /// not to store.
    pub fn refreshed(&mut self, stale: &Object, fresh: &[(&[u8], &[u8])]) -> Option<Arc<Object>> {
        let fields = updated(&stale.fields, fresh);
        let fields: Vec<(&[u8], &[u8], bool)> =
            fields.iter().map(|(n, v)| (&n[..], &v[..], true)).collect();
        let length = stale.body.len() as u64;
        self.judge(stale.status, &fields, Some(length));
        if length > 0 {
            self.push(&stale.body);
        }
        self.whole = true;
        self.commit();
        self.object.clone()
    }
}

/// Fields a `304` does not update (RFC 9111 section 3.2): the framing
/// and the connection's own.
const NOT_UPDATED: &[&[u8]] = &[
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"upgrade",
];

/// A stored object's fields (`stored`, as HTTP/1.1 lines) updated by a
/// `304`'s (`fresh`): each field the `304` carries replaces the stored
/// ones of its name (ASCII case-insensitive), but [`NOT_UPDATED`].
pub fn updated(stored: &[u8], fresh: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let fresh: Vec<(&[u8], &[u8])> = fresh
        .iter()
        .filter(|(n, _)| !NOT_UPDATED.iter().any(|x| n.eq_ignore_ascii_case(x)))
        .copied()
        .collect();
    let mut fields = Vec::new();
    for line in stored.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if !fresh.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            fields.push((name.to_vec(), value.to_vec()));
        }
    }
    for (name, value) in fresh {
        fields.push((name.to_vec(), value.trim_ascii().to_vec()));
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(store: &Arc<Store>, authorization: bool) -> Fill {
        let mut key = Key::default();
        key.push(b"example.com");
        key.push(b"/a");
        let policy = Policy {
            store: store.clone(),
            default_ttl: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            tags_header: Some(b"x-tags".as_slice().into()),
            route: Arc::from("r"),
        };
        let req = vec![(
            b"accept-language".as_slice().into(),
            b"fr".as_slice().into(),
        )];
        Fill::new(policy, key, req, authorization, Fwd::Miss)
    }

    #[test]
    fn a_fresh_answer_is_stored_whole_with_its_vary_values_and_tags() {
        let store = Arc::new(Store::new(1 << 20, 1024));
        let mut f = fill(&store, false);
        let fields: &[(&[u8], &[u8], bool)] = &[
            (b"Cache-Control", b"max-age=60", true),
            (b"Vary", b"Accept-Language", true),
            (b"X-Tags", b"a, b", true),
            (b"Age", b"3", true),
            (b"Connection", b"keep-alive", false),
        ];
        let status = f.judge(200, fields, Some(5));
        assert_eq!(status.as_deref(), Some("sluicegate; fwd=miss; stored"));
        f.push(b"hel");
        assert!(!f.stored);
        f.push(b"lo");
        assert!(f.stored, "stored with its last byte");
        assert!(f.commit());
        let key: &[&[u8]] = &[b"example.com", b"/a"];
        let h = store.hash(key);
        let fr = |n: &[u8]| (n == b"accept-language").then_some(b"fr".as_slice());
        let o = store.get(h, key, &fr).expect("stored");
        assert_eq!(&o.body[..], b"hello");
        assert_eq!(o.initial_age, Duration::from_secs(3));
        assert_eq!(o.tags.len(), 2);
        let text = String::from_utf8_lossy(&o.fields);
        assert!(text.contains("Vary: Accept-Language\r\n"), "{text}");
        assert!(
            !text.contains("Age") && !text.contains("Connection"),
            "{text}"
        );
        let de = |n: &[u8]| (n == b"accept-language").then_some(b"de".as_slice());
        assert!(store.get(h, key, &de).is_none());
    }

    #[test]
    fn a_304_s_fields_replace_the_stored_ones_of_their_name() {
        let stored = b"Cache-Control: max-age=1\r\nETag: \"a\"\r\nX-V: 1\r\nContent-Length: 5\r\n";
        let fresh: &[(&[u8], &[u8])] = &[
            (b"cache-control", b"max-age=60"),
            (b"x-v", b"2"),
            (b"content-length", b"0"),
        ];
        let got = updated(stored, fresh);
        let text: Vec<String> = got
            .iter()
            .map(|(n, v)| {
                let (n, v) = (String::from_utf8_lossy(n), String::from_utf8_lossy(v));
                format!("{n}={v}")
            })
            .collect();
        assert_eq!(
            text,
            [
                "ETag=\"a\"",
                "Content-Length=5",
                "cache-control=max-age=60",
                "x-v=2"
            ]
        );
    }

    #[test]
    fn not_stored_when_refused_cut_or_too_large() {
        let store = Arc::new(Store::new(1 << 20, 4));
        let mut f = fill(&store, true);
        let cc: &[(&[u8], &[u8], bool)] = &[(b"cache-control", b"max-age=60", true)];
        assert_eq!(
            f.judge(200, cc, None).as_deref(),
            Some("sluicegate; fwd=miss; detail=authorization")
        );
        let mut f = fill(&store, false);
        assert_eq!(
            f.judge(200, cc, Some(5)).as_deref(),
            Some("sluicegate; fwd=miss; detail=too-large")
        );
        let mut f = fill(&store, false);
        f.judge(200, cc, None);
        f.push(b"12345");
        f.whole = true;
        assert!(!f.keeping() && !f.commit());
        let mut f = fill(&store, false);
        f.judge(200, cc, None);
        f.push(b"12");
        assert!(!f.commit(), "a body cut short is not stored");
        let mut f = fill(&store, false);
        f.judge(200, cc, Some(3));
        f.push(b"12");
        f.whole = false;
        assert!(!f.commit(), "short of its length");
        assert_eq!(store.usage(), (0, 0));
    }
}
