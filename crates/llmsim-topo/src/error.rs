use llmsim_core::{FieldError, NodeId};
use thiserror::Error;

/// Everything that can go wrong building or routing a topology.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TopoError {
    /// A topology parameter is invalid; the message names the field and the fix.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("node {0} is not a host (hosts are 0..num_hosts)")]
    NotAHost(NodeId),
    #[error("no route from {src} to {dst}: {reason}")]
    Unreachable { src: NodeId, dst: NodeId, reason: String },
    /// A topology file that does not parse.
    #[error("{file}:{line}: {message}")]
    Parse { file: String, line: usize, message: String },
}

impl TopoError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        TopoError::Invalid(FieldError::new(field, message))
    }
}
