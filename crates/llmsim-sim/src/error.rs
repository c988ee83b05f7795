//! [`SimError`]: everything that can go wrong in a run, each naming the field or the cause.

use llmsim_workload::WorkloadError;
use thiserror::Error;

use crate::estimate;

/// Everything that can go wrong, each naming the field or the cause.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("{field}: {message}")]
    Scenario { field: String, message: String },
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("cluster.gpu: {0}")]
    Compute(#[from] llmsim_compute::ComputeError),
    /// A calibration file the scenario names (`compute.efficiency`, `compute.database`).
    /// (The error is printed in the message, not chained as a source, so it appears once.)
    #[error("{field}: {file}{error}")]
    ComputeFile {
        field: &'static str,
        /// `path: ` where the error does not name its file itself, else empty.
        file: String,
        error: llmsim_compute::ComputeError,
    },
    #[error("cluster.topology: {0}")]
    Topo(#[from] llmsim_topo::TopoError),
    #[error("network: {0}")]
    Net(#[from] llmsim_net::NetError),
    #[error("collectives: {0}")]
    Ccl(#[from] llmsim_ccl::CclError),
    #[error("simulation stalled after {executed} of {total} nodes: {stuck}")]
    Deadlock { executed: u64, total: u64, stuck: String },
    #[error("internal error: {0}")]
    Internal(String),
    /// The run would not fit in memory: refused before it starts.
    #[error(
        "this run needs about {:.1} GiB but {:.1} GiB of memory is available ({estimate}); use network.backend: analytical (it folds data-parallel replicas) or network.fold: approximate (flow), fewer micro-batches (training.global_batch_size), fewer layers or GPUs, or pass --ignore-memory-estimate to run anyway",
        estimate.memory_bytes as f64 / (1u64 << 30) as f64,
        *available as f64 / (1u64 << 30) as f64
    )]
    TooLarge { estimate: estimate::Estimate, available: u64 },
    #[error(transparent)]
    Import(#[from] llmsim_workload::ImportError),
}
