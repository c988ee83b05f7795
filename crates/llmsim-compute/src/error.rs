//! The one error type of the compute model.

use thiserror::Error;

/// Everything that can go wrong in `llmsim-compute`. All of it comes from user input
/// (a GPU name, a CSV text, a file path, a parameter); nothing here panics on such input.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ComputeError {
    /// A GPU name that matches no catalog entry.
    #[error("unknown GPU `{name}`; valid: {valid}")]
    UnknownGpu {
        /// The name given.
        name: String,
        /// The catalog's names.
        valid: String,
    },

    /// A malformed CSV (efficiency table or op database). `line` is 1-based in the text given;
    /// `column` names the offending column where there is one.
    #[error("{what}, line {line}{}: {message}", column_suffix(column))]
    Csv {
        /// Which table: "efficiency table", "op database".
        what: String,
        /// 1-based line in the text.
        line: u64,
        /// The offending column, where there is one.
        column: Option<String>,
        /// What is wrong and what would be valid.
        message: String,
    },

    /// A file that could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        message: String,
    },

    /// A custom GPU declaration with a missing or invalid field (`field` is the key inside it).
    #[error("{field}: {message}")]
    CustomGpu {
        /// The key inside the custom GPU map.
        field: &'static str,
        /// What is wrong and what would be valid.
        message: String,
    },

    /// A model parameter out of its valid range, e.g. `overlap.compute_slowdown=0.5`.
    #[error("{field}={value}: {message}")]
    InvalidParameter {
        /// The parameter's name.
        field: &'static str,
        /// The value given.
        value: String,
        /// The valid range.
        message: String,
    },
}

fn column_suffix(column: &Option<String>) -> String {
    match column {
        Some(c) => format!(", column `{c}`"),
        None => String::new(),
    }
}
