//! Helpers shared by this crate's integration tests (each test file uses some of them).
#![allow(dead_code)]

use std::collections::BTreeSet;

use llmsim_workload::dag::{Group, Layout};
use llmsim_workload::{ModelConfig, ParallelConfig, TrainingConfig};

/// The parallel plan of `yaml` (a `parallel:` section) resolved for `gpus` GPUs; panics on an
/// invalid one.
pub fn plan(m: &ModelConfig, t: &TrainingConfig, gpus: u64, yaml: &str) -> ParallelConfig {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    p.resolve(gpus, m, t).unwrap()
}

/// The ranks of `unit`'s instance of `group`: all lanes of its units when the group spans lanes,
/// else one set per lane.
pub fn rank_sets(l: &Layout, unit: u32, group: Group) -> Vec<BTreeSet<u32>> {
    let (_, units) = l.group_units(unit, group).unwrap();
    l.lane_rank_sets(&units, l.spans_lanes(group))
        .into_iter()
        .map(|ranks| ranks.into_iter().collect())
        .collect()
}
