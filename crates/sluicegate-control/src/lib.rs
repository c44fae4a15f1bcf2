//! Sluicegate's control plane: the admin listener (`/metrics`, `/healthz`,
//! the admin REST API) and the config source that reloads the data plane
//! when the file changes, on SIGHUP or SIGUSR2, or on an API write, or
//! follows the config kept in etcd (`etcd/`); the dashboard at `/ui/`
//! (`ui/`) and the live state it reads (`live/`).

mod api;
mod apply;
mod auth;
pub mod etcd;
pub mod history;
pub mod http;
mod live;
mod persist;
pub mod reload;
mod state;
pub mod tls;
mod tokens;
mod ui;

pub use http::AdminSetup;
pub use reload::{Overrides, Reloader};
pub use tls::AdminTls;
pub use tokens::Tokens;
