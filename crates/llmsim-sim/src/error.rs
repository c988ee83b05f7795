//! [`SimError`]: everything that can go wrong in a run, each naming the field or the cause.

use llmsim_workload::WorkloadError;
use thiserror::Error;

use crate::estimate;

/// Everything that can go wrong, each naming the field or the cause.
#[derive(Debug, Error)]
pub enum SimError {
    /// A scenario field is invalid.
    #[error("{field}: {message}")]
    Scenario {
        /// The field, as in `parallel.tp`.
        field: String,
        /// What is wrong, and what would be valid.
        message: String,
    },
    /// The workload could not be generated.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The GPU's compute model could not be built.
    #[error("cluster.gpu: {0}")]
    Compute(#[from] llmsim_compute::ComputeError),
    /// A calibration file the scenario names (`compute.efficiency`, `compute.database`).
    /// (The error is printed in the message, not chained as a source, so it appears once.)
    #[error("{field}: {file}{error}")]
    ComputeFile {
        /// The field that names the file.
        field: &'static str,
        /// `path: ` where the error does not name its file itself, else empty.
        file: String,
        /// Why the file could not be used.
        error: llmsim_compute::ComputeError,
    },
    /// The topology could not be built.
    #[error("cluster.topology: {0}")]
    Topo(#[from] llmsim_topo::TopoError),
    /// The network model failed.
    #[error("network: {0}")]
    Net(#[from] llmsim_net::NetError),
    /// A collective could not be planned.
    #[error("collectives: {0}")]
    Ccl(#[from] llmsim_ccl::CclError),
    /// The run stopped with program nodes left that can never start.
    #[error("simulation stalled after {executed} of {total} nodes: {stuck}")]
    Deadlock {
        /// Program nodes run before the stall.
        executed: u64,
        /// Program nodes in the run.
        total: u64,
        /// The first node that waits forever, and why.
        stuck: String,
    },
    /// A bug in the simulator.
    #[error("internal error: {0}")]
    Internal(String),
    /// The run would not fit in memory: refused before it starts.
    #[error(
        "this run needs about {:.1} GiB but {:.1} GiB of memory is available ({estimate}); use network.backend: analytical (it folds data-parallel replicas) or network.fold: approximate (flow), fewer micro-batches (training.global_batch_size), fewer layers or GPUs, or pass --ignore-memory-estimate to run anyway",
        estimate.memory_bytes as f64 / (1u64 << 30) as f64,
        *available as f64 / (1u64 << 30) as f64
    )]
    TooLarge {
        /// The run's estimated size and cost.
        estimate: estimate::Estimate,
        /// Memory available, in bytes.
        available: u64,
    },
    /// An imported workload could not be read.
    #[error(transparent)]
    Import(#[from] llmsim_workload::ImportError),
}
