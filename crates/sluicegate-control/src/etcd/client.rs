//! A client of an etcd cluster, for the config source's watch and for
//! discovery: endpoints, timeouts, keep-alive, TLS and credentials.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use sluicegate_config::EtcdConnection;

/// A client of the etcd cluster `source` names (timeouts and keep-alive
/// set, TLS and credentials read from their files now).
pub(crate) async fn connect(source: &EtcdConnection) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
    if let (Some(user), Some(file)) = (&source.username, &source.password_file) {
        let password =
            std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        options = options.with_user(user.clone(), password.trim().to_string());
    }
    if let Some(tls) = &source.tls {
        let mut t = etcd_client::TlsOptions::new();
        if let Some(ca) = &tls.ca {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            t = t.ca_certificate(etcd_client::Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            let c = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
            let k = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
            t = t.identity(etcd_client::Identity::from_pem(c, k));
        }
        options = options.with_tls(t);
    }
    tokio::time::timeout(
        Duration::from_secs(3),
        Client::connect(&source.endpoints, Some(options)),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| e.to_string())
}
