//! Sluicegate's control plane: the admin listener (`/metrics`, `/healthz`)
//! and the config source that reloads the data plane when the file changes
//! or on SIGHUP.

pub mod http;
pub mod reload;

pub use reload::{Overrides, Reloader};
