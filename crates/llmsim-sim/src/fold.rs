//! Folding identical data-parallel replicas in a single flow-level run (issue 29).
//!
//! The engine simulates replica 0's programs only; every collective over the data-parallel
//! group still puts every replica's transfers on the network (its host sets span all replicas).
//!
//! - **Without pipeline parallelism** (pp = 1) nothing tells replicas apart (the batch engine's
//!   argument, [`crate::batch_engine`]): the fold is exact and needs no check.
//! - **With pipeline parallelism** each replica's pipeline sends take its own paths. The engine
//!   then mirrors them: a send of replica 0 puts every replica's copy on the network, each with
//!   the ranks and flow hash that replica's own send has in the plain run, so the links carry
//!   the plain run's flows and contention is real. The message arrives when the last copy did.
//!   By induction over events, as long as every replica's copy of every message arrives at the
//!   same time, all replicas have replica 0's timeline and submit their transfers at replica 0's
//!   times, so the network holds the plain run's flows and the fold gives the plain run's
//!   result. The engine checks that condition message by message ([`FoldStats`]).
//!   - `network.fold: auto` stops at the first message whose copies arrived apart (ECMP
//!     collisions on the spine make this common on rail-optimized fabrics) and runs again with
//!     every replica simulated.
//!   - `network.fold: approximate` carries on: each message arrives with replica 0's own copy
//!     (every replica is taken to move with replica 0; the other copies stay on the network
//!     until they arrive, so they still load the links). The report gives how many messages
//!     diverged and by how much; `tests/fold.rs` checks the iteration time against the plain
//!     run's on random small clusters. (Taking each message at its latest copy instead was
//!     tried: it overestimates, up to 4.3% on the same plans, against 1.3% either way here.)
//! - Not folded: context-, expert- or embedding-parallel groups inside a replica (their traffic
//!   is not mirrored), TP across servers, imported workloads, DLRM, per-rank traces of every
//!   replica.

use llmsim_workload::dag::{DagNodeKind, Group, Layout, Workload};

use crate::engine::FoldStats;
use crate::scenario::TraceRanks;
use crate::{Backend, FoldMode, RunOptions, Scenario};

/// How a flow-level run folds its replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlowFold {
    /// pp = 1: exact without a check.
    Plain,
    /// pp > 1: pipeline sends mirrored to every replica; stop at the first divergence (auto).
    Mirrored { stop_on_divergence: bool },
}

/// How a flow-level run of `wl` folds, or why it does not (`Err`: the field and the reason).
pub(crate) fn flow_fold(s: &Scenario, wl: &Workload, layout: Layout, opts: &RunOptions) -> Result<FlowFold, String> {
    if s.network.backend != Backend::Flow {
        return Err("network.backend: only the flow backend folds this way".into());
    }
    if opts.no_fold || s.network.fold == FoldMode::Off {
        return Err("network.fold: off".into());
    }
    if layout.dp < 2 {
        return Err("parallel: one data-parallel replica".into());
    }
    if wl.explicit.is_some() || s.dlrm.is_some() || s.model.is_none() {
        return Err("workload: only generated transformer workloads fold".into());
    }
    if s.output.trace && s.output.trace_ranks == TraceRanks::All {
        return Err("output.trace_ranks: all ranks are traced".into());
    }
    if layout.cp > 1 || layout.ep > 1 {
        return Err("parallel: context- or expert-parallel groups inside a replica".into());
    }
    let gpn = s.cluster.gpus_per_node.max(1);
    if layout.tp > gpn || !gpn.is_multiple_of(layout.tp.max(1)) {
        return Err("parallel.tp: TP collectives cross the network".into());
    }
    for prog in &wl.stages {
        for n in &prog.nodes {
            if let DagNodeKind::CommColl { group, .. } = n.kind
                && !matches!(group, Group::Tp | Group::Dp | Group::ExpertDp)
            {
                return Err(format!("{} collectives stay inside a replica", group.name()));
            }
        }
    }
    Ok(if layout.pp == 1 {
        FlowFold::Plain
    } else {
        FlowFold::Mirrored {
            stop_on_divergence: s.network.fold == FoldMode::Auto,
        }
    })
}

/// The report's account of a fold.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FoldReport {
    /// exact (no pipeline traffic, or every message's copies arrived together) | approximate |
    /// fell back (auto saw a divergence and simulated every replica).
    pub outcome: &'static str,
    /// Data-parallel replicas folded into replica 0 (none when it fell back).
    pub replicas: u32,
    /// Pipeline messages sent with every replica's copy on the network.
    pub mirrored_messages: u64,
    /// Messages whose replicas' copies arrived at different times.
    pub diverged_messages: u64,
    /// Largest and mean (over diverged messages) spread between a message's first and last copy.
    pub max_spread_s: f64,
    /// Mean spread over diverged messages, in seconds.
    pub mean_spread_s: f64,
    /// Simulated time at which the first diverged message arrived.
    pub first_divergence_s: Option<f64>,
}

impl FoldReport {
    pub(crate) fn new(outcome: &'static str, replicas: u32, f: &FoldStats) -> Self {
        FoldReport {
            outcome,
            replicas,
            mirrored_messages: f.mirrored_messages,
            diverged_messages: f.diverged_messages,
            max_spread_s: f.max_spread.as_secs_f64(),
            mean_spread_s: f.total_spread.as_secs_f64() / f.diverged_messages.max(1) as f64,
            first_divergence_s: f.first_divergence.map(|t| t.as_secs_f64()),
        }
    }

    /// The report's symmetry line.
    pub(crate) fn line(&self, dp: u32) -> String {
        match self.outcome {
            "exact" if self.mirrored_messages == 0 => format!(
                "data-parallel replicas folded: replica 0 of {dp} simulated (exact: no pipeline traffic tells replicas apart; collectives still span every replica's hosts); flow fast path: max-min filling over shared links; arrivals at the current time kept off the event heap"
            ),
            "exact" => format!(
                "data-parallel replicas folded: replica 0 of {dp} simulated, every replica's pipeline sends on the network ({} messages; exact: every replica's copy arrived with replica 0's); flow fast path: max-min filling over shared links; arrivals at the current time kept off the event heap",
                self.mirrored_messages
            ),
            "approximate" => format!(
                "data-parallel replicas folded (network.fold: approximate): replica 0 of {dp} simulated, every replica's pipeline sends on the network; {} of {} messages arrived apart across replicas (max spread {:.3} us, mean {:.3} us), each taken at replica 0's copy; flow fast path: max-min filling over shared links; arrivals at the current time kept off the event heap",
                self.diverged_messages,
                self.mirrored_messages,
                self.max_spread_s * 1e6,
                self.mean_spread_s * 1e6
            ),
            _ => format!(
                "fold tried and dropped: a pipeline message's copies arrived apart across replicas at {:.6} s (network.fold: approximate would keep it); every data-parallel replica simulated; flow fast path: max-min filling over shared links and each flow's tightest own link; arrivals at the current time kept off the event heap (exact: bit-identical rates)",
                self.first_divergence_s.unwrap_or(0.0)
            ),
        }
    }
}
