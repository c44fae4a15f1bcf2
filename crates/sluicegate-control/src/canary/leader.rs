//! Which gateway of a fleet sharing etcd runs the rollouts: the one whose
//! lease holds the key `PREFIX meta/rollout-leader`. The key is created in
//! a transaction that holds only if it does not exist, with a lease of
//! `config_source.etcd.leader_ttl` kept alive every third of it; a leader
//! that cannot renew its lease for two thirds of the TTL steps down by
//! itself, before etcd lets the lease go, and so does one that finds the
//! key gone or carrying another lease (deleted by hand). The others look
//! for the key every third of the TTL and campaign once it is gone (its
//! leader's lease expired; a gateway that stops, even cleanly, leaves its
//! lease to expire).
//!
//! Every write of a leader is fenced by its key: the transaction also
//! compares that the key still carries this gateway's lease.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use sluicegate_config::EtcdSource;

use crate::etcd::connect;
use crate::rollout::{Board, Fence};

/// The leader key's name under the prefix (among the keys the config
/// watch leaves alone).
pub(crate) const KEY: &str = "meta/rollout-leader";

/// Who this gateway is, as the leader key says it.
fn me() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

/// Campaigns and leads, forever (the task is dropped with the runtime).
pub(crate) async fn run(board: Arc<Board>, source: EtcdSource) {
    let key = format!("{}{KEY}", source.prefix);
    let ttl = source.leader_ttl;
    let third = ttl / 3;
    let me = me();
    loop {
        let mut client = match connect(&source.connection).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "rollout leader: etcd unreachable");
                tokio::time::sleep(third).await;
                continue;
            }
        };
        loop {
            match campaign(&mut client, &key, &me, ttl).await {
                Ok(Some(lease)) => {
                    tracing::info!(key = %key, lease, "rollout leader: this gateway leads the rollouts");
                    *board.fence.lock().unwrap_or_else(|e| e.into_inner()) = Some(Fence {
                        key: key.clone(),
                        lease,
                    });
                    board.leader.store(true, Ordering::Release);
                    let why = hold(&mut client, &key, lease, ttl).await;
                    board.leader.store(false, Ordering::Release);
                    *board.fence.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    tracing::warn!(reason = %why, "rollout leader: this gateway no longer leads");
                    let _ = tokio::time::timeout(third, client.lease_revoke(lease)).await;
                }
                Ok(None) => tokio::time::sleep(third).await,
                Err(e) => {
                    tracing::debug!(error = %e, "rollout leader: campaign failed");
                    break;
                }
            }
        }
        tokio::time::sleep(third).await;
    }
}

/// Tries once to take the key: `Some(lease)` when this gateway now leads.
async fn campaign(
    client: &mut etcd_client::Client,
    key: &str,
    me: &str,
    ttl: Duration,
) -> Result<Option<i64>, String> {
    let limit = ttl / 3;
    let held = tokio::time::timeout(limit, client.get(key, None))
        .await
        .map_err(|_| "etcd did not answer".to_string())?
        .map_err(|e| e.to_string())?;
    if !held.kvs().is_empty() {
        return Ok(None);
    }
    let secs = i64::try_from(ttl.as_secs()).unwrap_or(10);
    let lease = tokio::time::timeout(limit, client.lease_grant(secs, None))
        .await
        .map_err(|_| "etcd did not answer".to_string())?
        .map_err(|e| e.to_string())?
        .id();
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            me,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    let won = tokio::time::timeout(limit, client.txn(txn))
        .await
        .map_err(|_| "etcd did not answer".to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map(|r| r.succeeded());
    match won {
        Ok(true) => Ok(Some(lease)),
        other => {
            let _ = tokio::time::timeout(limit, client.lease_revoke(lease)).await;
            other.map(|_| None)
        }
    }
}

/// Keeps the lease alive, and checks the key still carries it, until
/// either fails: returns why.
async fn hold(client: &mut etcd_client::Client, key: &str, lease: i64, ttl: Duration) -> String {
    let third = ttl / 3;
    let (mut keeper, mut stream) =
        match tokio::time::timeout(third, client.lease_keep_alive(lease)).await {
            Ok(Ok(k)) => k,
            Ok(Err(e)) => return e.to_string(),
            Err(_) => return "etcd did not answer".to_string(),
        };
    let mut renewed = Instant::now();
    let mut tick = tokio::time::interval(third);
    loop {
        tick.tick().await;
        // Step down before etcd can give the key to another.
        if renewed.elapsed() >= third * 2 {
            return "the lease was not renewed in time".to_string();
        }
        if let Err(e) = keeper.keep_alive().await {
            return e.to_string();
        }
        match tokio::time::timeout(third, stream.message()).await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => renewed = Instant::now(),
            Ok(Ok(Some(_))) => return "the lease expired".to_string(),
            Ok(Ok(None)) => return "the keep-alive stream ended".to_string(),
            Ok(Err(e)) => return e.to_string(),
            Err(_) => {}
        }
        let mut kv = client.kv_client();
        if let Ok(Ok(r)) = tokio::time::timeout(third, kv.get(key, None)).await {
            if r.kvs().first().is_none_or(|kv| kv.lease() != lease) {
                return "the leader key is gone or another's".to_string();
            }
        }
    }
}
