//! [`ConfigError`], one problem found in a config: the type every decoder
//! reports through, kept out of the crate root so that the decoders do not
//! import the file that calls them.

use std::fmt;

/// One problem in a config, with the 1-based line and column of the offending node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ConfigError {}
