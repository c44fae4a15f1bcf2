//! Sluicegate configuration: the YAML schema users write, its validation
//! with errors that name the line and column, and the validated [`Config`].
//!
//! `parse` takes YAML text and returns every problem found, not just the
//! first; `load` reads a file and prefixes each problem with its path.
//! The schema is documented key by key in `docs/config.md`.

mod apps;
mod cache;
mod cluster;
mod decode;
mod discovery;
pub mod document;
mod error;
mod health;
mod http2;
mod jwt;
mod listen;
pub mod model;
mod policy;
mod reader;
mod resilience;
mod route;
pub mod schema;
mod service;
mod source;
mod tls;
mod trace;
mod units;
mod yaml;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use apps::valid_key;
pub use document::{decode_apps, Document, Problem};
pub use error::ConfigError;
pub use model::*;
pub use route::aggregate::{reference as aggregate_reference, Reference as AggregateReference};
pub use route::template::references as template_references;
pub use route::value_regex::ValueRegex;
pub use service::MAX_WEIGHT;
pub use source::{ConfigSource, EtcdConnection, EtcdSource, EtcdTls};
pub use trace::MAX_REQUEST_ID_HEADER;
pub use units::{parse_duration, parse_size};

/// Parses and validates a config. On failure returns every problem found,
/// sorted by position (a YAML syntax error stops parsing and comes alone).
pub fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    // Never asks a resolver: host names of endpoints are checked for form
    // here and resolved by the discovery plane while serving.
    let mut cx = reader::Cx::default();
    // Apps are decoded as the parser completes each one: their tree is
    // never built whole (a million apps would take most of a gigabyte).
    let mut apps = apps::AppsDecoder::new();
    let root_path = reader::Path::Root;
    let apps_path = root_path.key("apps");
    let root = yaml::parse_streaming(text, "apps", &mut |item| {
        apps.item(&mut cx, &item, apps_path)
    })
    .map_err(|e| vec![e])?;
    let config = decode::config(&mut cx, root.as_ref(), apps);
    if cx.errors.is_empty() {
        Ok(config)
    } else {
        let mut errors = cx.errors;
        errors.sort_by_key(|e| (e.line, e.col));
        Err(errors)
    }
}

/// Why a config file could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file was read but is not a valid config.
    Invalid {
        path: PathBuf,
        errors: Vec<ConfigError>,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, error } => {
                write!(f, "{}: cannot read: {error}", path.display())
            }
            LoadError::Invalid { path, errors } => {
                for (i, e) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{}:{e}", path.display())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Io { error, .. } => Some(error),
            LoadError::Invalid { .. } => None,
        }
    }
}

/// Reads and parses the config file at `path`.
pub fn load(path: &Path) -> Result<Config, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    parse(&text).map_err(|errors| LoadError::Invalid {
        path: path.to_path_buf(),
        errors,
    })
}
