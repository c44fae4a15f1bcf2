//! The JWKS plane: a task per OpenID Connect issuer (on the control
//! runtime, never on a worker) that reads the issuer's key set at start
//! and again when its answer's `Cache-Control: max-age` or `Expires`
//! says (held within [`MIN_REFRESH`] and [`MAX_REFRESH`]; without either,
//! [`DEFAULT_REFRESH`]), and at once when a token names an unknown `kid`
//! (asked at most once per 10 s per issuer, see
//! [`IssuerState::ask_refetch`]). A failed fetch keeps the last good set
//! and is tried again after [`RETRY`]. With `discovery`, the `jwks_uri`
//! comes from `{issuer}/.well-known/openid-configuration`, read before
//! each key fetch. Requests read the set through an atomic pointer.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use sluicegate_config::JwksSource;

use crate::apps::jwks::{IssuerState, KeySet};
use crate::snapshot::Shared;

pub const MIN_REFRESH: Duration = Duration::from_secs(60);
pub const MAX_REFRESH: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(3600);
/// After a failed fetch (or before the first good one).
pub const RETRY: Duration = Duration::from_secs(5);
/// Fetches of one issuer are at least this far apart.
const SPACING: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 1 << 20;

/// Runs the plane for as long as the runtime runs: starts a task for each
/// issuer of the config in force, and lets retired ones end.
pub async fn run(shared: Arc<Shared>) {
    let mut tasks: HashMap<usize, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        tasks.retain(|_, t| !t.is_finished());
        for issuer in shared.jwt_issuers() {
            let id = Arc::as_ptr(&issuer) as usize;
            tasks
                .entry(id)
                .or_insert_with(|| tokio::spawn(follow(issuer)));
        }
    }
}

/// Keeps one issuer's key set fresh until the issuer is retired.
async fn follow(issuer: Arc<IssuerState>) {
    let tls = match crate::apps::introspect::client_tls(issuer.cfg.ca_pem.as_deref()) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            tracing::warn!(issuer = %issuer.cfg.name, "jwks: {e}");
            return;
        }
    };
    let mut last_fetch: Option<tokio::time::Instant> = None;
    while !issuer.retired.load(Ordering::Acquire) {
        // Asked refetches are spaced too (the ask itself is rate limited,
        // this holds across a fetch that was slow).
        if let Some(t) = last_fetch {
            tokio::time::sleep_until(t + SPACING).await;
        }
        last_fetch = Some(tokio::time::Instant::now());
        let wait = match tokio::time::timeout(TIMEOUT, fetch(&issuer, &tls)).await {
            Ok(Ok((set, max_age))) => {
                tracing::debug!(issuer = %issuer.cfg.name, keys = set.keys.len(), "jwks: fetched");
                issuer.keys.store(Arc::new(set));
                issuer.loaded.store(true, Ordering::Release);
                issuer.fetches_ok.fetch_add(1, Ordering::Relaxed);
                max_age
                    .unwrap_or(DEFAULT_REFRESH)
                    .clamp(MIN_REFRESH, MAX_REFRESH)
            }
            Ok(Err(e)) => {
                issuer.fetches_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(issuer = %issuer.cfg.name, "jwks: {e}; keeping the last good key set");
                RETRY
            }
            Err(_) => {
                issuer.fetches_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(issuer = %issuer.cfg.name, "jwks: no answer within {TIMEOUT:?}; keeping the last good key set");
                RETRY
            }
        };
        let _ = tokio::time::timeout(wait, issuer.wake.notified()).await;
    }
}

/// Reads the issuer's key set, and how long the answer may be kept.
async fn fetch(
    issuer: &IssuerState,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<(KeySet, Option<Duration>), String> {
    let uri = match &issuer.cfg.jwks {
        JwksSource::Uri(u) => u.clone(),
        JwksSource::Discovery => {
            let url = format!(
                "{}/.well-known/openid-configuration",
                issuer.cfg.issuer.trim_end_matches('/')
            );
            let (body, _) = get(&url, tls).await?;
            let doc: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))?;
            if let (Some(i), Some(e)) = (
                &issuer.introspect,
                doc.get("introspection_endpoint").and_then(|v| v.as_str()),
            ) {
                i.discovered.store(Some(Arc::new(e.to_string())));
            }
            doc.get("jwks_uri")
                .and_then(|v| v.as_str())
                .ok_or_else(|| format!("{url}: no jwks_uri"))?
                .to_string()
        }
    };
    let (body, max_age) = get(&uri, tls).await?;
    let set = KeySet::parse(&body).map_err(|e| format!("{uri}: {e}"))?;
    Ok((set, max_age))
}

/// One GET over HTTP/1.1 (TLS for `https`): the body of a 200 answer, and
/// how long it may be kept (`Cache-Control: max-age`, or `Expires`).
async fn get(
    url: &str,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<(Bytes, Option<Duration>), String> {
    let err = |e: &dyn std::fmt::Display| format!("{url}: {e}");
    let uri: http::Uri = url.parse().map_err(|e| err(&e))?;
    let https = uri.scheme_str() == Some("https");
    let host = uri.host().ok_or_else(|| err(&"no host"))?.to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| err(&e))?;
    let _ = tcp.set_nodelay(true);
    let req = http::Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(
            http::header::HOST,
            uri.authority().map_or(host.as_str(), |a| a.as_str()),
        )
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "sluicegate")
        .body(Empty::<Bytes>::new())
        .map_err(|e| err(&e))?;
    let resp = if https {
        let name =
            rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|e| err(&e))?;
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
    let max_age = max_age(resp.headers());
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| err(&e))?
        .to_bytes();
    Ok((body, max_age))
}

async fn send<T>(
    io: T,
    req: http::Request<Empty<Bytes>>,
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

/// `Cache-Control: max-age` (or `s-maxage`), else `Expires` minus now;
/// `no-store`/`no-cache` count as zero (held to the minimum later).
fn max_age(h: &http::HeaderMap) -> Option<Duration> {
    if let Some(cc) = h
        .get(http::header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
    {
        for d in cc.split(',').map(str::trim) {
            let d = d.to_ascii_lowercase();
            if d == "no-store" || d == "no-cache" {
                return Some(Duration::ZERO);
            }
            if let Some(v) = d
                .strip_prefix("max-age=")
                .or_else(|| d.strip_prefix("s-maxage="))
            {
                if let Ok(s) = v.trim_matches('"').parse::<u64>() {
                    return Some(Duration::from_secs(s));
                }
            }
        }
    }
    let expires = h.get(http::header::EXPIRES)?.as_bytes();
    let at = crate::cache::rules::http_date(expires).unwrap_or(0);
    Some(Duration::from_secs(
        at.saturating_sub(crate::cache::rules::unix_now()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_headers_set_the_refresh() {
        let h = |k: &str, v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
            max_age(&m)
        };
        assert_eq!(
            h("cache-control", "public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(h("cache-control", "no-store"), Some(Duration::ZERO));
        assert_eq!(h("cache-control", "private"), None);
        assert_eq!(
            h("expires", "Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(max_age(&http::HeaderMap::new()), None);
    }
}
