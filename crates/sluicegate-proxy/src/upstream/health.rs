//! Active health checks, once per process (on the control runtime, not in
//! the workers): each endpoint of a service with `health` is probed every
//! `interval` (an HTTP `GET path`, a TCP connect or a gRPC health `Check`
//! ([`grpc`]), bounded by `timeout`); `unhealthy_after` failures in a row
//! take it out of its balancer and `healthy_after` successes bring it
//! back. The flag lives on the endpoint's state, which a reload keeps, so
//! a reload does not forget that an endpoint is down.

mod grpc;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_config::HealthCheck;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::balance::endpoint::EndpointState;
use crate::snapshot::Shared;
use crate::transport::tls::client::UpstreamTlsRt;

/// How often the checker looks for checks that are due.
const TICK: Duration = Duration::from_millis(20);

/// Probes `addr` once: true when it answers as `check` expects.
pub async fn probe(addr: SocketAddr, host: &str, check: &HealthCheck) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let Some(path) = &check.path else {
            return Some(true); // TCP mode: the connect is the check
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sluicegate-health\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        // The status line is all that matters.
        let mut buf = [0u8; 64];
        let mut got = 0;
        while got < 12 {
            let n = s.read(&mut buf[got..]).await.ok()?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Some(status_ok(&buf[..got], check))
    };
    matches!(
        tokio::time::timeout(check.timeout, attempt).await,
        Ok(Some(true))
    )
}

/// [`probe`] over TLS with the service's settings: the same check, made
/// with blocking I/O on a blocking-pool thread (a few probes a second, off
/// every worker), bounded by the check's timeout on every read and write.
async fn probe_tls(ep: Arc<EndpointState>, tls: Arc<UpstreamTlsRt>, check: HealthCheck) -> bool {
    let deadline = check.timeout * 3;
    let work = move || -> Option<bool> {
        use std::io::{Read, Write};
        let name = tls.server_name(&ep.name).ok()?;
        let tcp = std::net::TcpStream::connect_timeout(&ep.addr, check.timeout).ok()?;
        tcp.set_read_timeout(Some(check.timeout)).ok()?;
        tcp.set_write_timeout(Some(check.timeout)).ok()?;
        let conn = rustls::ClientConnection::new(tls.config.clone(), name).ok()?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let Some(path) = &check.path else {
            // TCP mode: a completed handshake is the check.
            while s.conn.is_handshaking() {
                s.conn.complete_io(&mut s.sock).ok()?;
            }
            return Some(true);
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluicegate-health\r\nConnection: close\r\n\r\n",
            ep.name
        );
        s.write_all(req.as_bytes()).ok()?;
        let mut buf = [0u8; 64];
        let mut got = 0;
        while got < 12 {
            let n = s.read(&mut buf[got..]).ok()?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Some(status_ok(&buf[..got], &check))
    };
    matches!(
        tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await,
        Ok(Ok(Some(true)))
    )
}

/// Whether a response's first bytes carry a status `check` expects.
fn status_ok(line: &[u8], check: &HealthCheck) -> bool {
    if line.len() < 12 || !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
        return false;
    }
    let status: Option<u16> = std::str::from_utf8(&line[9..12])
        .ok()
        .and_then(|s| s.parse().ok());
    status.is_some_and(|status| {
        check
            .expect_status
            .iter()
            .any(|&(a, b)| (a..=b).contains(&status))
    })
}

/// When an endpoint's next check is due, and whether one is running.
#[derive(Default)]
struct Schedule {
    next_due: Option<Instant>,
    running: bool,
}

/// Runs the checks for as long as the runtime runs. Picks up services and
/// endpoints added or removed by reloads on its next tick.
pub async fn run(shared: Arc<Shared>) {
    let mut schedule: HashMap<usize, Schedule> = HashMap::new();
    let mut running: JoinSet<usize> = JoinSet::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let snap = shared.snapshot.load_full();
                let now = Instant::now();
                let mut live = std::collections::HashSet::new();
                for svc in snap.services.iter() {
                    let Some(check) = &svc.health else {
                        // Checks removed by a reload: back to healthy.
                        for ep in &svc.endpoints {
                            ep.healthy.store(true, Ordering::Relaxed);
                        }
                        continue;
                    };
                    for ep in &svc.endpoints {
                        live.insert(ep.id);
                        let st = schedule.entry(ep.id).or_default();
                        if st.running || st.next_due.is_some_and(|d| d > now) {
                            continue;
                        }
                        st.running = true;
                        st.next_due = Some(now + check.interval);
                        let (ep, check) = (ep.clone(), check.clone());
                        let (tls, protocol) = (svc.tls.clone(), svc.protocol);
                        running.spawn(async move {
                            let ok = if check.grpc_service.is_some() {
                                grpc::probe(ep.clone(), tls, protocol, check.clone()).await
                            } else {
                                match &tls {
                                    None => probe(ep.addr, &ep.name, &check).await,
                                    Some(t) => probe_tls(ep.clone(), t.clone(), check.clone()).await,
                                }
                            };
                            record(&ep, ok, &check);
                            ep.id
                        });
                    }
                }
                schedule.retain(|id, s| live.contains(id) || s.running);
            }
            Some(done) = running.join_next() => {
                if let Ok(id) = done {
                    schedule.entry(id).or_default().running = false;
                }
            }
        }
    }
}

/// Applies one result to the endpoint's flag; the counts of consecutive
/// results live on the endpoint, so a reload keeps them too.
fn record(ep: &Arc<EndpointState>, ok: bool, check: &HealthCheck) {
    let (streak, flip_at, now_healthy) = if ok {
        ep.health_fails.store(0, Ordering::Relaxed);
        (
            ep.health_oks.fetch_add(1, Ordering::Relaxed) + 1,
            check.healthy_after,
            true,
        )
    } else {
        ep.health_oks.store(0, Ordering::Relaxed);
        (
            ep.health_fails.fetch_add(1, Ordering::Relaxed) + 1,
            check.unhealthy_after,
            false,
        )
    };
    if streak >= flip_at && ep.is_healthy() != now_healthy {
        ep.healthy.store(now_healthy, Ordering::Relaxed);
        if now_healthy {
            tracing::warn!(service = %ep.service, endpoint = %ep.name, "endpoint healthy again, back in rotation");
        } else {
            tracing::warn!(service = %ep.service, endpoint = %ep.name, failures = streak, "endpoint unhealthy, out of rotation");
        }
    }
}
