//! Sluicegate configuration: the YAML schema users write, its validation
//! with errors that name the line and column, and the validated [`Config`].
//!
//! `parse` takes YAML text and returns every problem found, not just the
//! first; `load` reads a file and prefixes each problem with its path.

pub mod model;

pub use model::*;
