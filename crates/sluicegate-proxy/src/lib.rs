//! Sluicegate's data plane: worker threads with their own listeners,
//! the protocol-neutral message model with its HTTP/1.1 codec and HTTP/2
//! mapping, routing, load balancing, upstream connection pools and the
//! internal client, metrics and access logging. Folders by concern, in
//! the dependency order they keep (a folder uses only those after it):
//! `runtime` (worker threads, listeners, the server), `session`
//! (per-connection drivers), `upstream` (forwarding, the internal client,
//! upstream connections, health checks), `worker` (a worker's state and
//! the per-request context: buffers, pools, the park set), `discovery`
//! (endpoints re-resolved from DNS in the background), `snapshot` (the
//! runtime tables and their swap, the live counters), `filters`,
//! `cluster` (global limits leased from Redis), `balance` (endpoints,
//! balancers, breakers, ejection, retry budgets), `observe` (metrics,
//! access log, traces), `apps` (the apps table), `route`, `transport`
//! (streams and socket I/O), `proto` (the message heads, the HTTP/1.1
//! codec, the HTTP/2 mapping, the one renderer of gateway answers) and
//! `clock` (deadlines, the monotonic origin, calendar dates). The layers
//! test (sluicegate-testkit's `tests/layers/`) fails on any import loop
//! between folders or between files. See `docs/architecture.md` for the
//! request lifecycle.

pub(crate) mod apps;
pub(crate) mod balance;
pub mod cache;
pub(crate) mod clock;
pub mod cluster;
pub mod discovery;
pub(crate) mod filters;
pub(crate) mod observe;
pub(crate) mod proto;
pub(crate) mod route;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod snapshot;
pub(crate) mod transport;
pub(crate) mod upstream;
pub(crate) mod worker;

pub mod fuzzing;

pub use apps::{AppChange, DeltaError};
pub use proto::response::reason;
pub use runtime::accept::AcceptSwitch;
pub use runtime::server::Gateway;
pub use snapshot::cache_admin;
pub use snapshot::carry::{
    Exported as StateExported, Imported as StateImported, MAX_BYTES as STATE_MAX_BYTES,
};
pub use snapshot::live;
pub use snapshot::{Shared, Snapshot};
pub use upstream::health::run as run_health_checks;

/// Exports the spans of sampled requests to `cfg`'s collector until the
/// process ends (see `observe::otlp`); returns at once when `shared` was
/// made without `tracing`.
pub async fn run_trace_export(
    shared: std::sync::Arc<Shared>,
    cfg: sluicegate_config::TracingConfig,
) {
    if let Some(t) = shared.tracer.clone() {
        observe::otlp::run(t, cfg).await;
    }
}

/// Reads and checks every file the config names for TLS (listeners'
/// certificates, keys and client CAs; services' CAs and client
/// certificates), as a start or reload would, without starting anything.
/// The error names the listener or service and the file.
pub fn check_tls_files(config: &sluicegate_config::Config) -> Result<(), String> {
    let mut state = transport::listener::ListenerState::default();
    transport::listener::compile(config, &mut state)?;
    for (i, s) in config.services.iter().enumerate() {
        if let Some(t) = &s.tls {
            transport::tls::client::UpstreamTlsRt::new(t, s.protocol)
                .map_err(|e| format!("services[{i}].{e}"))?;
        }
    }
    if let Some(t) = config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
        admin_tls_config(t)?;
    }
    Ok(())
}

/// The rustls config of the admin listener's `tls` (HTTP/1.1 only), built
/// from its files as a data-plane listener's is. The error names the file.
pub fn admin_tls_config(
    tls: &sluicegate_config::ListenerTls,
) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
    use transport::tls::{config, resolver::CertResolver};
    let specs: Vec<transport::tls::certs::CertSpec> = tls
        .certificates
        .iter()
        .map(|c| transport::tls::certs::CertSpec {
            cert: c.cert.clone(),
            key: c.key.clone(),
        })
        .collect();
    let provider = config::default_provider();
    let (resolver, warnings) = CertResolver::load(&specs, tls.default, &provider)
        .map_err(|e| format!("admin.tls: {e}"))?;
    for w in warnings {
        tracing::warn!("admin.tls: {w}");
    }
    let sessions = config::SessionState::new()?;
    config::server_config_with_sessions(
        std::sync::Arc::new(resolver),
        tls.client_ca.as_deref(),
        tls.client_ca.is_some() && tls.client_auth == sluicegate_config::ClientAuth::Require,
        tls.min_version == sluicegate_config::TlsVersion::V1_3,
        &[b"http/1.1"],
        provider,
        &sessions,
    )
    .map_err(|e| format!("admin.tls: {e}"))
}
