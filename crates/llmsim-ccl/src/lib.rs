//! NCCL-faithful collectives: the cost model that picks algorithm/protocol/channels
//! ([`tuning`]), the expansion of a collective into a DAG of point-to-point transfers
//! ([`expand`]), the scale-up alpha-beta model ([`scaleup`]), and the runner that executes a plan
//! on any [`llmsim_net::Network`] ([`runner`]).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
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
pub use runner::{PlanRun, execute};
pub use scaleup::ScaleUpModel;

/// A collective operation (nccl-tests naming).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
}

impl CollectiveOp {
    pub const ALL: [CollectiveOp; 6] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllToAll,
        CollectiveOp::Broadcast,
        CollectiveOp::Reduce,
    ];

    /// nccl-tests' busbw / algbw factor: all-reduce 2(n-1)/n, all-gather, reduce-scatter and
    /// all-to-all (n-1)/n, broadcast and reduce 1.
    pub fn busbw_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (n - 1.0) / n,
            CollectiveOp::Broadcast | CollectiveOp::Reduce => 1.0,
        }
    }
}

impl fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::Reduce => "reduce",
        })
    }
}

impl FromStr for CollectiveOp {
    type Err = CclError;
    fn from_str(s: &str) -> Result<Self, CclError> {
        let k: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        CollectiveOp::ALL
            .into_iter()
            .find(|op| op.to_string().replace('-', "") == k)
            .ok_or_else(|| CclError::Invalid {
                field: "op".into(),
                message: format!("unknown collective {s:?}; valid: all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce"),
            })
    }
}

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
