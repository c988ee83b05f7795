//! NCCL-faithful collectives: the cost model that picks algorithm/protocol/channels
//! ([`tuning`]), the expansion of a collective into a DAG of point-to-point transfers
//! ([`expand`]), the scale-up alpha-beta model ([`scaleup`]), and the runner that executes a plan
//! on any [`llmsim_net::Network`] ([`runner`]).

use thiserror::Error;

pub mod expand;
pub mod plan;
pub mod planner;
pub mod runner;
pub mod scaleup;
pub mod tuning;

pub use expand::{CrossServer, ExpandParams, Granularity};
pub use plan::{CollectivePlan, Expansion, PlanNode, Step};
pub use planner::{AlgoChoice, PlanOptions, PlannedCollective, plan_collective};
pub use runner::{PlanCursor, PlanEdges, PlanRun, execute};
pub use scaleup::ScaleUpModel;

/// Moved to `llmsim_core` (the layers that only name it need not depend on this crate).
pub use llmsim_core::CollectiveOp;

/// Errors of the collective layer.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CclError {
    /// An input out of range or inconsistent.
    #[error("{field}: {message}")]
    Invalid {
        /// Name of the offending input.
        field: String,
        /// What is wrong and what would be valid.
        message: String,
    },
    /// A collective, expansion or group shape this crate does not implement.
    #[error("{what} is not supported; supported: {valid}")]
    Unsupported {
        /// What was asked for.
        what: String,
        /// What is supported instead.
        valid: String,
    },
    /// The network backend failed a transfer (no route, a start in the past, a backend error).
    #[error(transparent)]
    Net(#[from] llmsim_net::NetError),
    /// The NCCL tuning model rejected its input.
    #[error(transparent)]
    Tuning(#[from] tuning::TuningError),
}
