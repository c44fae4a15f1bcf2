//! The plane's connection to Redis (one server or a Cluster) and its one
//! way to call a script, bounded.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{FromRedisValue, IntoConnectionInfo, ScriptInvocation};
use sluicegate_config::RedisConfig;

use super::STATE;

/// Longest wait for one call to Redis before it counts as lost.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// A connection to one server or to a Redis Cluster.
pub(super) enum Conn {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    pub(super) async fn call<T: FromRedisValue>(
        &mut self,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T, String> {
        STATE.calls.fetch_add(1, Ordering::Relaxed);
        let fut = async {
            match self {
                Conn::One(c) => inv.invoke_async(c).await,
                Conn::Cluster(c) => inv.invoke_async(c).await,
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer in {CALL_TIMEOUT:?}")),
        }
    }
}

pub(super) async fn connect(cfg: &RedisConfig) -> Result<Conn, String> {
    let url = match cfg.url.strip_prefix("redis://") {
        Some(rest) if cfg.tls => format!("rediss://{rest}"),
        _ => cfg.url.clone(),
    };
    let password = match &cfg.password_file {
        None => None,
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("password_file {}: {e}", p.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
    };
    // A private CA instead of the system's roots.
    let certs = match &cfg.ca_file {
        None => None,
        Some(p) => Some(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(p).map_err(|e| format!("ca_file {}: {e}", p.display()))?),
        }),
    };
    let fut = async {
        if cfg.cluster {
            let mut b = redis::cluster::ClusterClient::builder(vec![url.as_str()]);
            if let Some(p) = &password {
                b = b.password(p.clone());
            }
            if let Some(c) = certs {
                b = b.certs(c);
            }
            let client = b.build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let mut info = url.as_str().into_connection_info()?;
            if let Some(p) = &password {
                let settings = info.redis_settings().clone().set_password(p);
                info = info.set_redis_settings(settings);
            }
            let client = match certs {
                Some(c) => redis::Client::build_with_tls(info, c)?,
                None => redis::Client::open(info)?,
            };
            Ok(Conn::One(client.get_multiplexed_async_connection().await?))
        }
    };
    match tokio::time::timeout(Duration::from_secs(2), fut).await {
        Ok(r) => r.map_err(|e: redis::RedisError| e.to_string()),
        Err(_) => Err("no answer in 2s".to_string()),
    }
}
