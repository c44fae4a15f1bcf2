//! HTTPS on the admin listener: `admin.tls`, the same keys as a listener's
//! `tls`, built into a rustls config by the data plane's code. As for a
//! listener, the certificate, key and client CA files are read again when
//! they change on disk: the admin listener looks at their stamps on each
//! accept and builds a new config (kept only if the files load; otherwise
//! the running one stays and a warning is logged).

use std::path::PathBuf;
use std::sync::Arc;

use sluicegate_config::ListenerTls;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::publish::{stamped, Stamp};

/// The admin listener's TLS: its keys, the files' stamps, the acceptor.
pub struct AdminTls {
    spec: ListenerTls,
    files: Vec<(PathBuf, Option<Stamp>)>,
    acceptor: TlsAcceptor,
}

impl AdminTls {
    /// Reads the files of `spec`; the error names the file at fault.
    pub fn new(spec: ListenerTls) -> Result<AdminTls, String> {
        let files = stamps(&spec);
        let config = sluicegate_proxy::admin_tls_config(&spec)?;
        Ok(AdminTls {
            spec,
            files,
            acceptor: acceptor(config),
        })
    }

    /// The acceptor for a new connection, after reading the files again if
    /// one changed since they were last read.
    pub(crate) fn acceptor(&mut self) -> TlsAcceptor {
        let now = stamps(&self.spec);
        if now != self.files {
            match sluicegate_proxy::admin_tls_config(&self.spec) {
                Ok(config) => {
                    tracing::info!("admin.tls: certificate files changed, reloaded");
                    self.acceptor = acceptor(config);
                    self.files = now;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin.tls: files changed but do not load; the running ones stay");
                    self.files = now;
                }
            }
        }
        self.acceptor.clone()
    }
}

fn acceptor(config: Arc<ServerConfig>) -> TlsAcceptor {
    TlsAcceptor::from(config)
}

fn stamps(spec: &ListenerTls) -> Vec<(PathBuf, Option<Stamp>)> {
    let mut files: Vec<PathBuf> = spec
        .certificates
        .iter()
        .flat_map(|c| [c.cert.clone(), c.key.clone()])
        .chain(spec.client_ca.clone())
        .collect();
    files.sort();
    files.dedup();
    stamped(files)
}
