//! NCCL-faithful collectives: the cost model that picks algorithm/protocol/channels
//! ([`tuning`]), the expansion of a collective into a DAG of point-to-point transfers
//! ([`expand`]), the scale-up alpha-beta model ([`scaleup`]), and the runner that executes a plan
//! on any [`llmsim_net::Network`] ([`runner`]).

// Issue 31: `missing_docs` is on for the workspace; this crate had 104 undocumented public items
// when it was turned on. Remove this allow once they have doc comments.
#![allow(missing_docs)]

use thiserror::Error;

pub mod expand;
pub mod plan;
pub mod planner;
pub mod runner;
pub mod scaleup;
pub mod tuning;

pub use expand::{ExpandParams, Granularity};
pub use plan::{CollectivePlan, Expansion, PlanNode, Step};
pub use planner::{AlgoChoice, PlanOptions, PlannedCollective, plan_collective};
pub use runner::{PlanCursor, PlanEdges, PlanRun, execute};
pub use scaleup::ScaleUpModel;

/// Moved to `llmsim_core` (the layers that only name it need not depend on this crate).
pub use llmsim_core::CollectiveOp;

/// Errors of the collective layer.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CclError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{what} is not supported; supported: {valid}")]
    Unsupported { what: String, valid: String },
    #[error(transparent)]
    Net(#[from] llmsim_net::NetError),
    #[error(transparent)]
    Tuning(#[from] tuning::TuningError),
}
