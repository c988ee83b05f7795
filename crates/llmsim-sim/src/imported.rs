//! Imported workloads (Chakra traces, SimAI files) run on a scenario's cluster.

use std::sync::Arc;
use std::time::Instant;

use llmsim_workload::dag::Workload;
use llmsim_workload::{MemoryFootprint, TrainingConfig};

use crate::run::{Prepared, RunContext, run_workload};
use crate::{Layout, Outcome, RunOptions, Scenario, Shared, SimError, report};

/// An imported workload (Chakra traces, a SimAI file) to run on a scenario's cluster.
pub struct ImportedRun {
    pub workload: Workload,
    pub layout: Layout,
    /// What the report calls the workload, e.g. `chakra:et/gpt`.
    pub label: String,
    /// How the ranks were grouped, for the report's `parallel` line.
    pub parallel: String,
    /// Samples per iteration and tokens per sample, when the source says (else 0).
    pub global_batch: u64,
    pub seq_length: u64,
    /// Model parameters and the memory footprint per GPU, when the source says (else 0).
    pub params: u64,
    pub memory: MemoryFootprint,
    pub layers_per_stage: u64,
}

impl ImportedRun {
    /// A workload whose source records nothing beyond its ranks: no batch, sequence, model size,
    /// memory footprint or layer count (the report shows them as unknown).
    pub fn bare(workload: Workload, layout: Layout, label: String, parallel: String) -> Self {
        ImportedRun {
            workload,
            layout,
            label,
            parallel,
            global_batch: 0,
            seq_length: 0,
            params: 0,
            memory: MemoryFootprint::default(),
            layers_per_stage: 0,
        }
    }

    /// An imported Chakra workload, with what llmsim's own export recorded when present.
    pub fn from_chakra(imp: llmsim_workload::chakra::Imported, label: &str) -> Self {
        let l = imp.layout;
        match imp.info {
            Some(i) => ImportedRun {
                workload: imp.workload,
                layout: l,
                label: i.model,
                parallel: i.parallel,
                global_batch: i.global_batch,
                seq_length: i.seq_length,
                params: i.params,
                memory: i.memory,
                layers_per_stage: i.layers_per_stage,
            },
            None => {
                let parallel = format!("{} ranks: {} units of {} lockstep ranks", imp.ranks, l.units(), l.tp);
                ImportedRun::bare(imp.workload, l, label.to_string(), parallel)
            }
        }
    }
}

/// Runs an imported workload on the scenario's cluster (its `model`, `training` and `parallel`
/// sections must be absent). The cluster's GPU count defaults to the workload's ranks.
///
/// # Errors
/// A cluster whose GPU count differs from the workload's ranks, or any [`simulate`] error.
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
        },
        RunContext {
            opts,
            progress,
            wall,
            shared: &Shared::default(),
        },
    )
}
