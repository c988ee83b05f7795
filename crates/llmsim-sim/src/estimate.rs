//! What a run will cost, from counts alone, before the topology or the engine's state exists.
//!
//! - Counts are exact: program nodes of the simulated units, pipeline transfers (one per tp
//!   rank of a send), collectives issued.
//! - Memory is a model over those counts, calibrated against measured peak RSS (bench/scale.sh
//!   prints estimate and measurement side by side). Its largest terms are the engine's per-node
//!   state of every simulated unit and, for data-parallel groups of thousands of ranks, their
//!   collective plans (quadratic in the group size).
//! - Time is a rough rate per node and per transfer; contention on the flow backend can make a
//!   run slower, so it is only a hint for the user.

use llmsim_workload::dag::{DagNodeKind, Group, Layout, Stream, Workload};

use crate::scenario::Backend;

/// A run's size and its estimated cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// GPUs in the cluster.
    pub gpus: u64,
    /// Units (tensor-parallel groups) simulated: all, or replica 0's when folded.
    pub units: u64,
    /// Program nodes of the simulated units.
    pub program_nodes: u64,
    /// Pipeline transfers on the network (collective transfers come on top).
    pub p2p_transfers: u64,
    /// Collectives the simulated units issue.
    pub collectives: u64,
    /// Estimated peak resident memory.
    pub memory_bytes: u64,
    /// Rough wall time on one core of a 2020s machine.
    pub seconds: f64,
}

/// Fixed cost: the binary, the allocator, the scenario and the compute model.
const BASE_BYTES: u64 = 24 << 20;
/// Topology per GPU: nodes, links, addresses, routing state (3.9 MiB for 16,384 GPUs).
const TOPO_BYTES_PER_GPU: u64 = 256;
/// Flow backend state per GPU (per-link flow lists, capacities, scratch).
const FLOW_BYTES_PER_GPU: u64 = 512;
/// Packet backend state per GPU on top of the flow backend's (ports' queues, in-flight packets,
/// Wormhole's memo and per-flow state): GPT-3 175B with Wormhole peaked at 156 MiB on 1,024 GPUs
/// and 725 MiB on 4,096 (`bench/README.md`), 120 and 167 KiB per GPU above the rest of the
/// estimate. Small runs come out high (the 128-GPU example: 41 MiB for a 17 MiB peak), which only
/// matters where the estimate refuses a run: it must not under-count large ones.
const PACKET_BYTES_PER_GPU: u64 = 160 << 10;
/// Engine state per node with explicit dependencies of a simulated unit: its dependencies left
/// (u32; nodes ordered only by their stream hold none, since branch `flow29h`).
const ENGINE_BYTES_PER_DEP_NODE: u64 = 4;
/// Engine state per node on no stream ([`Stream::Free`]) of a simulated unit: its start time
/// (the other nodes' start times are per stream, since branch `flow29k`).
const ENGINE_BYTES_PER_FREE_NODE: u64 = 8;
/// Shared stage programs per node: the node, dependencies, dependents, stream tables.
const PROGRAM_BYTES_PER_NODE: u64 = 64;
/// Engine state per unit besides its nodes: stream cursors, accounts, group maps.
const ENGINE_BYTES_PER_UNIT: u64 = 1024;
/// Data-parallel collective plans (and, on flow, their flows in flight) per lane sub-group and
/// per squared group size: a ring over `n` ranks holds about `n` transfers whose routes cross
/// about `n` links. Fitted to the excess of measured peak RSS over the other terms on GPT-3 175B
/// (TP8 PP8) at 65,536 and 131,072 GPUs, analytical (2.3 and 2.1) and flow with replicas folded
/// (1.4 and 1.5): 2 B.
const PLAN_BYTES_PER_RANK_SQUARED: u64 = 2;
/// The wall time estimate's coefficients, on one core of this project's 2-core VM (2026-11-28,
/// main `56ac6c4`, quiet), fitted to eight measured runs (`bench/README.md`, scale section, "The
/// time estimate"): GPT-3 175B on 1,024, 4,096, 65,536 and 131,072 GPUs (flow, every replica),
/// Llama-3 405B on 16,384 GPUs, the k=60 fat-tree's 54,000 GPUs, Qwen3-235B on 256 H100s (EP32
/// over 4 servers) and GPT-3 175B on 1,024 GPUs at packet level. Each fitted run comes within
/// 0.7-1.2x of its estimate; runs unlike them can be further off.
///
/// Seconds per program node of a simulated unit.
const SECONDS_PER_NODE: f64 = 1.1e-7;
/// Seconds per pipeline transfer on the flow backend.
const FLOW_SECONDS_PER_TRANSFER: f64 = 5e-7;
/// Seconds per pipeline transfer on the analytical backend.
const ANALYTICAL_SECONDS_PER_TRANSFER: f64 = 1e-6;
/// Seconds per ring step of a data-parallel collective on the flow backend, per tp rank and
/// unit: a group of `n` ranks takes `n - 1` (the k=60 run: 486 M steps, most of its 19 s).
const FLOW_SECONDS_PER_DP_STEP: f64 = 3.4e-8;
/// Seconds per cross-server expert all-to-all transfer on the flow backend: Qwen3-235B on 256
/// H100s (TP2 PP8 VP4 EP32, 4 servers per EP group) at GBS 8,192 made ~191 M such transfers
/// and ran 211 s beside ~2 s of node and pipeline work. Small all-to-alls run faster (NeMo
/// Automodel's DeepSeek-V3 on 256 GPUs: 1.1 s for an estimate of 1.7 s).
const EP_SECONDS_PER_TRANSFER: f64 = 1.1e-6;
/// The same on the analytical backend, whose all-to-alls run in NCCL's rounds (one transfer
/// after another per rank): DeepSeek-V3 on 2,048 H800s (PP16 EP64 over 8 servers, all-to-all
/// dispatcher, `bench/scenarios/real-deepseek-v3-paper-2048.yaml`) made ~112 M transfers in 36 s.
const ANALYTICAL_EP_SECONDS_PER_TRANSFER: f64 = 3.2e-7;
/// Seconds per byte of data-parallel collective plans on the analytical backend, whose time is
/// mostly building them (GPT-3 175B, TP8 PP8: 1.9 s for 537 MB of plans at 131,072 GPUs).
const ANALYTICAL_SECONDS_PER_PLAN_BYTE: f64 = 3.5e-9;
/// The packet backend's cost against the flow backend's on the same run, with Wormhole on (its
/// default): GPT-3 175B on 1,024 GPUs 6.5 against 0.40 s, on 4,096 GPUs 48 against 2.1 s.
const PACKET_FACTOR: f64 = 16.0;

/// Simulated units (data-parallel index below `active_dp`) per stage program of `wl`.
fn units_per_program(wl: &Workload, layout: Layout, active_dp: u32) -> Vec<u64> {
    let mut per_prog = vec![0u64; wl.stages.len()];
    for u in 0..layout.units() {
        if layout.coords(u).1 >= active_dp {
            continue;
        }
        let p = match &wl.explicit {
            Some(x) => x.unit_program[u as usize],
            None => layout.stage(u),
        };
        if let Some(c) = per_prog.get_mut(p as usize) {
            *c += 1;
        }
    }
    per_prog
}

/// Counts `wl`'s work for the units with data-parallel index below `active_dp` and estimates
/// its memory and time. O(units + stage program nodes): it never walks every unit's program.
pub fn estimate(wl: &Workload, layout: Layout, active_dp: u32, gpus: u64, backend: Backend) -> Estimate {
    let per_prog = units_per_program(wl, layout, active_dp);
    let units = per_prog.iter().sum();
    let (mut nodes, mut sends, mut colls, mut stage_nodes, mut free_nodes, mut dep_nodes) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    // Data-parallel collectives (gradients, parameters; expert and dense) of the simulated units.
    let mut dp_colls = 0u64;
    for (prog, &n) in wl.stages.iter().zip(&per_prog) {
        let len = prog.nodes.len() as u64;
        stage_nodes += len;
        nodes += n * len;
        let (s, c, dc) = prog.nodes.iter().fold((0u64, 0u64, 0u64), |(s, c, dc), x| match x.kind {
            DagNodeKind::CommSend { .. } => (s + 1, c, dc),
            DagNodeKind::CommColl {
                group: Group::Dp | Group::ExpertDp,
                ..
            } => (s, c + 1, dc + 1),
            DagNodeKind::CommColl { .. } => (s, c + 1, dc),
            _ => (s, c, dc),
        });
        sends += n * s;
        colls += n * c;
        dp_colls += n * dc;
        free_nodes += n * prog.nodes.iter().filter(|x| x.stream == Stream::Free).count() as u64;
        dep_nodes += n * (0..len as u32).filter(|&i| !prog.deps(i).is_empty()).count() as u64;
    }
    let p2p_transfers = sends * u64::from(layout.tp);
    let net_bytes = match backend {
        Backend::Analytical => 0,
        Backend::Flow => FLOW_BYTES_PER_GPU * gpus,
        Backend::Packet => (FLOW_BYTES_PER_GPU + PACKET_BYTES_PER_GPU) * gpus,
    };
    // Data-parallel groups: `dp * cp` ranks, one sub-group per pipeline stage and tp lane.
    let dp_ranks = u64::from(layout.dp) * u64::from(layout.cp);
    let plan_bytes = PLAN_BYTES_PER_RANK_SQUARED * u64::from(layout.pp) * u64::from(layout.tp) * dp_ranks * dp_ranks;
    let memory_bytes = BASE_BYTES
        + TOPO_BYTES_PER_GPU * gpus
        + net_bytes
        + plan_bytes
        + ENGINE_BYTES_PER_DEP_NODE * dep_nodes
        + ENGINE_BYTES_PER_FREE_NODE * free_nodes
        + PROGRAM_BYTES_PER_NODE * stage_nodes
        + ENGINE_BYTES_PER_UNIT * u64::from(layout.units());
    let base = SECONDS_PER_NODE * nodes as f64;
    let seconds = match backend {
        Backend::Analytical => {
            base + ANALYTICAL_SECONDS_PER_TRANSFER * p2p_transfers as f64 + ANALYTICAL_SECONDS_PER_PLAN_BYTE * plan_bytes as f64
        }
        Backend::Flow | Backend::Packet => {
            // Ring steps: `dp * cp - 1` per data-parallel collective, tp rank and unit.
            let dp_steps = dp_colls * u64::from(layout.tp) * dp_ranks.saturating_sub(1);
            let flow = base + FLOW_SECONDS_PER_TRANSFER * p2p_transfers as f64 + FLOW_SECONDS_PER_DP_STEP * dp_steps as f64;
            flow * network_factor(backend)
        }
    };
    Estimate {
        gpus,
        units,
        program_nodes: nodes,
        p2p_transfers,
        collectives: colls,
        memory_bytes,
        seconds,
    }
}

/// The packet backend's cost relative to the flow backend's ([`PACKET_FACTOR`]); 1 otherwise.
fn network_factor(backend: Backend) -> f64 {
    if backend == Backend::Packet { PACKET_FACTOR } else { 1.0 }
}

/// One recorded transfer of flows.csv (`FlowRecord`) with its vector's slack.
const FLOW_RECORD_BYTES: u64 = 96;

impl Estimate {
    /// The same run with a folded replica's pipeline sends mirrored to all `dp` replicas
    /// ([`crate::fold`]): every replica's transfers cross the network.
    #[must_use]
    pub fn with_mirrored_p2p(mut self, dp: u32) -> Self {
        let extra = self.p2p_transfers * u64::from(dp.max(1) - 1);
        self.p2p_transfers += extra;
        self.seconds += FLOW_SECONDS_PER_TRANSFER * extra as f64;
        self
    }

    /// The same run with the network transfers of its expert-parallel all-to-alls that cross
    /// servers counted in its time: each rank sends one transfer to
    /// every peer of its group on another server (`ep - 1` peers for a group of `ep` ranks that
    /// spans servers; `servers - 1` for the flex dispatcher's inter-server step). A 256-GPU MoE
    /// run with EP32 over 4 servers made ~0.19 G such transfers and ran ~20x its estimate without
    /// them (`bench/README.md`, scale section). Memory is unchanged: a collective's transfers
    /// are not all in flight at once.
    #[must_use]
    pub fn with_ep_transfers(mut self, wl: &Workload, layout: Layout, active_dp: u32, gpus_per_node: u32, backend: Backend) -> Self {
        if layout.ep < 2 {
            return self;
        }
        let (ep, gpn) = (u64::from(layout.ep), u64::from(gpus_per_node.max(1)));
        if ep <= gpn {
            return self;
        }
        let per_rank = |g: Group| match g {
            Group::Ep => ep - 1,
            Group::EpInter => ep.div_ceil(gpn) - 1,
            _ => 0,
        };
        let transfers: u64 = wl
            .stages
            .iter()
            .zip(units_per_program(wl, layout, active_dp))
            .map(|(prog, units)| {
                let per_unit: u64 = prog
                    .nodes
                    .iter()
                    .map(|n| match n.kind {
                        DagNodeKind::CommColl { group, .. } => per_rank(group),
                        _ => 0,
                    })
                    .sum();
                units * per_unit * u64::from(layout.tp)
            })
            .sum();
        let per_transfer = match backend {
            Backend::Analytical => ANALYTICAL_EP_SECONDS_PER_TRANSFER,
            _ => EP_SECONDS_PER_TRANSFER * network_factor(backend),
        };
        self.seconds += per_transfer * transfers as f64;
        self
    }

    /// The same run recording every pipeline transfer for flows.csv (collective transfers are
    /// not counted: their plans are not known before the run).
    #[must_use]
    pub fn with_flow_records(mut self) -> Self {
        self.memory_bytes += FLOW_RECORD_BYTES * self.p2p_transfers;
        self
    }
}

/// `MemAvailable` of /proc/meminfo in bytes, or `None` where it cannot be read (not Linux).
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut it = line.split_whitespace().skip(1);
    let kib: u64 = it.next()?.parse().ok()?;
    Some(kib * 1024)
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} GPUs, {} simulated units, {} program nodes, {} pipeline transfers, {} collectives: about {} MiB and {:.0} s",
            self.gpus,
            self.units,
            self.program_nodes,
            self.p2p_transfers,
            self.collectives,
            self.memory_bytes.div_ceil(1 << 20),
            self.seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_parsed_in_kib() {
        let m = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(m), Some(2 << 20));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
