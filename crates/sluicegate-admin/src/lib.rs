//! Sluicegate's control plane: the admin listener (`/metrics`, `/healthz`,
//! the admin REST API) and the config source that reloads the data plane
//! when the file changes, on SIGHUP or SIGUSR2, or on an API write.

mod api;
mod apply;
mod auth;
pub mod history;
pub mod http;
mod live;
mod persist;
pub mod reload;
mod ui;

pub use auth::Tokens;
pub use http::AdminSetup;
pub use reload::{Overrides, Reloader};
