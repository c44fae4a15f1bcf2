//! Sluicegate's control plane: the admin listener (`/metrics`, `/healthz`,
//! the admin REST API), the reloader and its config source (`source.rs`):
//! the file, reloaded when it changes, on SIGHUP or SIGUSR2, or on an API
//! write (`file.rs`), or the config kept in etcd and followed by a watch
//! (`etcd/`, with etcd discovery); the dashboard at `/ui/` (`ui/`) and the
//! live state it reads (`live/`).

mod api;
mod auth;
pub mod canary;
pub mod etcd;
mod file;
pub mod history;
pub mod http;
mod live;
mod persist;
mod publish;
mod purge;
pub mod reload;
pub mod rollout;
mod source;
mod state;
pub mod tls;
mod tokens;
mod ui;

pub use http::AdminSetup;
pub use reload::{Overrides, Reloader};
pub use tls::AdminTls;
pub use tokens::Tokens;
