//! Imported workloads (Chakra traces, SimAI files) run on a scenario's cluster.

use std::sync::Arc;
use std::time::Instant;

use llmsim_workload::TrainingConfig;

use crate::run::{Prepared, RunContext, run_workload};
use crate::{Outcome, RunOptions, Scenario, Shared, SimError, report};

/// An imported workload (Chakra traces, a SimAI file) to run on a scenario's cluster: what a
/// [`llmsim_workload::formats`] reader returns.
pub use llmsim_workload::formats::ImportedWorkload as ImportedRun;

/// Runs an imported workload on the scenario's cluster (its `model`, `training` and `parallel`
/// sections must be absent). The cluster's GPU count defaults to the workload's ranks.
///
/// # Errors
/// A cluster whose GPU count differs from the workload's ranks, or any [`crate::simulate`] error.
pub fn simulate_imported(
    s: &Scenario,
    imp: ImportedRun,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Outcome, SimError> {
    let wall = Instant::now();
    if s.model.is_some() || s.dlrm.is_some() {
        return Err(SimError::Scenario {
            field: "model".into(),
            message: "an imported workload brings its own model; remove `model`/`dlrm` (a cluster file needs `cluster:` only)".into(),
        });
    }
    let ranks = imp.layout.units() * imp.layout.tp;
    let mut s = s.clone();
    if s.cluster.gpus.is_none() && s.cluster.nodes.is_none() {
        s.cluster.gpus = Some(ranks);
    }
    let gpus = s.gpus()?;
    if gpus != ranks {
        return Err(SimError::Scenario {
            field: "cluster.gpus".into(),
            message: format!("the cluster has {gpus} GPUs but the workload has {ranks} ranks; set cluster.gpus: {ranks} (or drop it)"),
        });
    }
    let gpu = s.cluster.gpu.resolve()?;
    let info = report::RunInfo {
        model: imp.label,
        params: imp.params,
        gpu,
        gpus,
        dtype: llmsim_compute::DType::Bf16,
        parallel: imp.parallel,
        global_batch: imp.global_batch,
        seq_length: imp.seq_length,
        sample_unit: "tokens",
        memory: imp.memory,
        layers_per_stage: imp.layers_per_stage,
        moe: None,
    };
    let training = TrainingConfig::default();
    run_workload(
        Prepared {
            s: &s,
            wl: Arc::new(imp.workload),
            layout: imp.layout,
            training: &training,
            info,
            ub: None,
            // Host dispatch charges llmsim's own op lists; an imported trace's segments have none
            // (a Chakra node or SimAI line is its recorded duration).
            host_free: true,
        },
        RunContext {
            opts,
            progress,
            wall,
            shared: &Shared::default(),
        },
    )
}
