//! Helpers shared by this crate's integration tests.

use std::collections::BTreeSet;

use llmsim_workload::dag::{Group, Layout};

/// The ranks of `unit`'s instance of `group`: all lanes of its units when the group spans lanes,
/// else one set per lane.
pub fn rank_sets(l: &Layout, unit: u32, group: Group) -> Vec<BTreeSet<u32>> {
    let (_, units) = l.group_units(unit, group).unwrap();
    l.lane_rank_sets(&units, l.spans_lanes(group))
        .into_iter()
        .map(|ranks| ranks.into_iter().collect())
        .collect()
}
