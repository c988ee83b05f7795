//! The one error type of the compute model.

use thiserror::Error;

/// Everything that can go wrong in `llmsim-compute`. All of it comes from user input
/// (a GPU name, a CSV text, a file path, a parameter); nothing here panics on such input.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ComputeError {
    /// A GPU name that matches no catalog entry.
    #[error("unknown GPU `{name}`; valid: {valid}")]
    UnknownGpu { name: String, valid: String },

    /// A malformed CSV (efficiency table or op database). `line` is 1-based in the text given;
    /// `column` names the offending column where there is one.
    #[error("{what}, line {line}{}: {message}", column_suffix(column))]
    Csv {
        what: String,
        line: u64,
        column: Option<String>,
        message: String,
    },

    /// A file that could not be read.
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },

    /// A custom GPU declaration with a missing or invalid field (`field` is the key inside it).
    #[error("{field}: {message}")]
    CustomGpu { field: &'static str, message: String },

    /// A model parameter out of its valid range, e.g. `overlap.compute_slowdown=0.5`.
    #[error("{field}={value}: {message}")]
    InvalidParameter {
        field: &'static str,
        value: String,
        message: String,
    },
}

fn column_suffix(column: &Option<String>) -> String {
    match column {
        Some(c) => format!(", column `{c}`"),
        None => String::new(),
    }
}
