//! The crate's error type.

use llmsim_core::{FieldError, NodeId};
use thiserror::Error;

/// Everything that can go wrong building or routing a topology.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TopoError {
    /// A topology parameter is invalid; the message names the field and the fix.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// A node id given where a host was expected is not a host.
    #[error("node {0} is not a host (hosts are 0..num_hosts)")]
    NotAHost(NodeId),
    /// Routing found no path between two nodes (for example, links are down).
    #[error("no route from {src} to {dst}: {reason}")]
    Unreachable {
        /// Node the failed lookup started from.
        src: NodeId,
        /// Destination node.
        dst: NodeId,
        /// Why no route exists.
        reason: String,
    },
    /// A topology file that does not parse.
    #[error("{file}:{line}: {message}")]
    Parse {
        /// The file, as the caller named it.
        file: String,
        /// 1-based line number; 0 when the file cannot be read.
        line: usize,
        /// What is wrong on that line.
        message: String,
    },
}

impl TopoError {
    /// A [`TopoError::Invalid`] naming `field` and saying what is wrong with it.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        TopoError::Invalid(FieldError::new(field, message))
    }
}
