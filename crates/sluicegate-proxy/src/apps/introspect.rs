//! RFC 7662 token introspection for an issuer's opaque tokens (bearer
//! tokens that are not JWTs): one POST per uncached token to the issuer's
//! introspection endpoint (HTTP Basic client credentials), made by a task
//! of its own so that the requests waiting for it (concurrent requests
//! with the same token wait for one call) may go away without ending it.
//! Answers, active or not, are cached for at most the issuer's `cache`
//! and never past the token's own `exp`, keyed by a hash of the token and
//! compared whole on a hit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};
use sluicegate_config::JwtIssuer;

use super::verified::Verified;

/// How long an introspection call (connect, TLS, answer) may take; the
/// requests waiting for it are answered 503 after that.
pub const TIMEOUT: Duration = Duration::from_secs(5);
const MAX_BODY: usize = 64 * 1024;
const SHARDS: usize = 16;
const PER_SHARD: usize = 4096;

/// What the issuer said of a token, and until when (ms since the epoch)
/// it is believed.
#[derive(Clone)]
enum Answer {
    Active(Arc<Verified>),
    Inactive,
}

type Shard = Mutex<hashbrown::HashMap<u64, (Box<[u8]>, Answer, u64)>>;

/// What a cached answer says.
pub enum Known {
    Active(Arc<Verified>),
    Inactive,
}

/// An issuer's introspection: settings, the endpoint found by discovery,
/// the answers cache and the calls under way.
pub struct Introspector {
    /// `Basic base64(id:secret)`, both form-encoded (RFC 6749 2.3.1).
    basic: String,
    /// The configured endpoint, else the one discovery found.
    endpoint: Option<String>,
    pub discovered: ArcSwapOption<String>,
    cache_ms: u64,
    issuer: String,
    audiences: Vec<String>,
    app_claim: Option<String>,
    claims_to_headers: Vec<(String, String)>,
    ca_pem: Option<Vec<u8>>,
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
    shards: Box<[Shard]>,
    seed: u64,
    /// Calls under way, by token: the requests with that token wait for
    /// the sender to say it is done.
    inflight: Mutex<HashMap<Box<[u8]>, tokio::sync::watch::Receiver<bool>>>,
    /// Introspection calls made (tests, logs).
    pub calls: AtomicU64,
    /// Calls answered active, inactive, and failed (no answer, or one
    /// that could not be read); requests whose answer was cached.
    pub active: AtomicU64,
    pub inactive: AtomicU64,
    pub errors: AtomicU64,
    pub cache_hits: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Introspector {
    pub fn new(cfg: &JwtIssuer) -> Option<Introspector> {
        use base64::Engine;
        let i = cfg.introspection.as_ref()?;
        let creds = format!(
            "{}:{}",
            form_encode(&i.client_id),
            form_encode(&i.client_secret)
        );
        Some(Introspector {
            basic: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(creds)
            ),
            endpoint: i.endpoint.clone(),
            discovered: ArcSwapOption::empty(),
            cache_ms: i.cache.as_millis() as u64,
            issuer: cfg.issuer.clone(),
            audiences: cfg.audiences.clone(),
            app_claim: cfg.app_claim.clone(),
            claims_to_headers: cfg.claims_to_headers.clone(),
            ca_pem: cfg.ca_pem.clone(),
            tls: OnceLock::new(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            seed: fastrand::u64(..),
            inflight: Mutex::default(),
            calls: AtomicU64::new(0),
            active: AtomicU64::new(0),
            inactive: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
        })
    }

    fn shard(&self, token: &[u8]) -> (u64, &Shard) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(token, self.seed);
        (h, &self.shards[(h >> 60) as usize % SHARDS])
    }

    /// The cached answer for `token`, unless absent or expired.
    pub fn cached(&self, token: &[u8]) -> Option<Known> {
        let (h, shard) = self.shard(token);
        let map = shard.lock().unwrap_or_else(|e| e.into_inner());
        let (t, a, until) = map.get(&h)?;
        if **t != *token || *until <= now_ms() {
            return None;
        }
        Some(match a {
            Answer::Active(v) => Known::Active(v.clone()),
            Answer::Inactive => Known::Inactive,
        })
    }

    fn insert(&self, token: &[u8], a: Answer, until: u64) {
        let (h, shard) = self.shard(token);
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= PER_SHARD && !map.contains_key(&h) {
            let now = now_ms();
            map.retain(|_, (_, _, u)| *u > now);
            if map.len() >= PER_SHARD {
                if let Some(k) = map.keys().next().copied() {
                    map.remove(&k);
                }
            }
        }
        map.insert(h, (token.into(), a, until));
    }

    /// Waits until the issuer has answered for `token` (or the call
    /// failed): joins the call under way for it, or starts one. The
    /// answer is then in the cache; a failure leaves none.
    pub async fn settle(self: Arc<Self>, token: Box<[u8]>) {
        let mut rx = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            match inflight.get(&token) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(false);
                    inflight.insert(token.clone(), rx.clone());
                    let me = self.clone();
                    tokio::spawn(async move {
                        me.call(&token).await;
                        me.inflight
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&token);
                        let _ = tx.send(true);
                    });
                    rx
                }
            }
        };
        // The sender ends within TIMEOUT; dropped (a panic) ends it too.
        let _ = tokio::time::timeout(TIMEOUT + Duration::from_secs(1), rx.wait_for(|d| *d)).await;
    }

    /// The counters' values for `/metrics`: active, inactive, errors,
    /// cache hits.
    pub fn counts(&self) -> [u64; 4] {
        [&self.active, &self.inactive, &self.errors, &self.cache_hits]
            .map(|c| c.load(Ordering::Relaxed))
    }

    /// One introspection call, its answer cached and counted.
    async fn call(&self, token: &[u8]) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let counter = match self.ask(token).await {
            Some(true) => &self.active,
            Some(false) => &self.inactive,
            None => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Asks the endpoint about `token` and caches the answer: whether it
    /// was active, `None` when there was no answer.
    async fn ask(&self, token: &[u8]) -> Option<bool> {
        let endpoint = match (&self.endpoint, self.discovered.load_full()) {
            (Some(e), _) => e.clone(),
            (None, Some(e)) => (*e).clone(),
            (None, None) => {
                tracing::warn!(issuer = %self.issuer, "introspection: no endpoint known yet (discovery has not answered)");
                return None;
            }
        };
        let tls = match self
            .tls
            .get_or_init(|| client_tls(self.ca_pem.as_deref()).map(Arc::new))
        {
            Ok(t) => t.clone(),
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, "introspection: {e}");
                return None;
            }
        };
        let mut body = b"token=".to_vec();
        body.extend_from_slice(form_encode(&String::from_utf8_lossy(token)).as_bytes());
        body.extend_from_slice(b"&token_type_hint=access_token");
        let answer = match tokio::time::timeout(
            TIMEOUT,
            post_form(&endpoint, &self.basic, body, &tls),
        )
        .await
        {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                tracing::warn!(issuer = %self.issuer, "introspection: {e}");
                return None;
            }
            Err(_) => {
                tracing::warn!(issuer = %self.issuer, "introspection: {endpoint}: no answer within {TIMEOUT:?}");
                return None;
            }
        };
        let now = now_ms();
        let mut until = now + self.cache_ms;
        let verdict = match self.judge(answer, now / 1000) {
            Some(v) => {
                until = until.min(v.exp.saturating_mul(1000));
                Answer::Active(Arc::new(v))
            }
            None => Answer::Inactive,
        };
        let active = matches!(verdict, Answer::Active(_));
        if until > now {
            self.insert(token, verdict, until);
        }
        Some(active)
    }

    /// An active answer for this issuer's audiences, read as a verified
    /// token; `None` for anything else (inactive, another issuer or
    /// audience, expired, naming no app).
    fn judge(&self, a: Map<String, Value>, now_s: u64) -> Option<Verified> {
        if a.get("active") != Some(&Value::Bool(true)) {
            return None;
        }
        if let Some(iss) = a.get("iss") {
            if iss.as_str() != Some(self.issuer.as_str()) {
                return None;
            }
        }
        if let Some(aud) = a.get("aud") {
            let ok = match aud {
                Value::String(s) => self.audiences.contains(s),
                Value::Array(l) => l
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|s| self.audiences.iter().any(|a| a == s)),
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        let mut v = Verified::new(a, self.app_claim.as_deref(), None, &self.claims_to_headers)?;
        if v.exp == 0 {
            // No exp: held for `cache` alone.
            v.exp = u64::MAX / 1000;
        }
        (v.exp > now_s).then_some(v)
    }
}

/// A client TLS config trusting the system's roots and `ca` (PEM).
pub fn client_tls(ca: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    if let Some(pem) = ca {
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| format!("ca_file: {e}"))?;
            roots.add(c).map_err(|e| format!("ca_file: {e}"))?;
        }
    }
    let provider = crate::transport::tls::config::default_provider();
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// One form POST over HTTP/1.1 (TLS for `https`); the JSON object of a
/// 200 answer.
async fn post_form(
    url: &str,
    basic: &str,
    body: Vec<u8>,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Map<String, Value>, String> {
    let err = |e: &dyn std::fmt::Display| format!("{url}: {e}");
    let uri: http::Uri = url.parse().map_err(|e| err(&e))?;
    let https = uri.scheme_str() == Some("https");
    let host = uri.host().ok_or_else(|| err(&"no host"))?.to_string();
    let bare = host.trim_matches(['[', ']']).to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((bare.as_str(), port))
        .await
        .map_err(|e| err(&e))?;
    let _ = tcp.set_nodelay(true);
    let req = http::Request::post(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(
            http::header::HOST,
            uri.authority().map_or(host.as_str(), |a| a.as_str()),
        )
        .header(http::header::AUTHORIZATION, basic)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "sluicegate")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| err(&e))?;
    let resp = if https {
        let name = rustls::pki_types::ServerName::try_from(bare).map_err(|e| err(&e))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| err(&e))?;
        send(TokioIo::new(stream), req).await
    } else {
        send(TokioIo::new(tcp), req).await
    }
    .map_err(|e| err(&e))?;
    if resp.status() != http::StatusCode::OK {
        return Err(err(&format_args!("status {}", resp.status())));
    }
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| err(&e))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| err(&format_args!("not a JSON object: {e}")))
}

async fn send<T>(
    io: T,
    req: http::Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, hyper::Error>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intro(cache: Duration) -> Introspector {
        let cfg = sluicegate_config::parse(&format!(
            "listen: [\"127.0.0.1:9\"]\njwt:\n  issuers:\n    - {{ name: i, issuer: \"https://idp\", jwks_uri: \"https://idp/k\", audiences: [api], \
             introspection: {{ client_id: \"gw id\", client_secret_file: {}, cache: {}ms, endpoint: \"https://idp/i\" }} }}\n",
            secret_file(),
            cache.as_millis()
        ))
        .unwrap();
        Introspector::new(&cfg.jwt.issuers[0]).unwrap()
    }

    /// A file of its own per call: tests run at once, and one writing the
    /// file while another reads it would hand the reader an empty file.
    fn secret_file() -> String {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("sg-introspect-secret-{}-{n}", std::process::id()));
        std::fs::write(&p, "s3cr:t\n").unwrap();
        p.to_string_lossy().into_owned()
    }

    fn answer(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn credentials_are_form_encoded_then_basic() {
        use base64::Engine;
        let i = intro(Duration::from_secs(60));
        let raw = i.basic.strip_prefix("Basic ").unwrap();
        let creds = base64::engine::general_purpose::STANDARD
            .decode(raw)
            .unwrap();
        assert_eq!(creds, b"gw+id:s3cr%3At");
    }

    #[test]
    fn only_active_answers_for_this_issuer_and_audience_pass() {
        let i = intro(Duration::from_secs(60));
        let now = now_ms() / 1000;
        let exp = now + 100;
        let ok = format!(
            r#"{{"active":true,"client_id":"a1","iss":"https://idp","aud":"api","exp":{exp},"scope":"x y"}}"#
        );
        let v = i.judge(answer(&ok), now).unwrap();
        assert_eq!(&*v.app, "a1");
        assert_eq!(v.exp, exp);
        assert!(v.has_scopes(&["y".into()]));
        for bad in [
            format!(r#"{{"active":false,"client_id":"a1","exp":{exp}}}"#),
            format!(r#"{{"active":true,"client_id":"a1","iss":"https://other","exp":{exp}}}"#),
            format!(r#"{{"active":true,"client_id":"a1","aud":["x"],"exp":{exp}}}"#),
            format!(r#"{{"active":true,"client_id":"a1","exp":{}}}"#, now - 1),
            format!(r#"{{"active":true,"exp":{exp}}}"#),
            r#"{"active":"true","client_id":"a1"}"#.to_string(),
        ] {
            assert!(i.judge(answer(&bad), now).is_none(), "{bad}");
        }
        // No exp and no aud: the answer alone vouches.
        assert!(i
            .judge(answer(r#"{"active":true,"client_id":"a1"}"#), now)
            .is_some());
    }

    #[test]
    fn cached_answers_compare_the_whole_token_and_expire() {
        let i = intro(Duration::from_secs(60));
        let now = now_ms();
        i.insert(b"tok-a", Answer::Inactive, now + 60_000);
        assert!(matches!(i.cached(b"tok-a"), Some(Known::Inactive)));
        assert!(i.cached(b"tok-b").is_none());
        i.insert(b"tok-c", Answer::Inactive, now.saturating_sub(1));
        assert!(i.cached(b"tok-c").is_none());
    }
}
