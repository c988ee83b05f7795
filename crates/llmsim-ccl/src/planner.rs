//! One entry point from "this collective on this group" to a plan: NCCL's tuning decision
//! (algorithm, protocol, channels), the expansion llmsim simulates for it, and the plan.
//!
//! Used by `llmsim collective` for one collective and by the system simulator for every
//! collective of a training iteration.

use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime};
use llmsim_topo::Topology;

use crate::expand::{self, CrossServer, ExpandParams, Granularity};
use crate::plan::{CollectivePlan, Expansion};
use crate::scaleup::AlphaBeta;
use crate::tuning::{self, Algo, CollKind, GpuArch, Proto, TuningDecision};
use crate::{CclError, CollectiveOp, ScaleUpModel};

/// Which expansion to simulate, like NCCL_ALGO: `collectives.algo` of a scenario (for the
/// collectives that cross servers) and `--algo` of `llmsim collective`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum AlgoChoice {
    /// NCCL's own choice from its tuning model (NCCL_ALGO unset). Default.
    #[default]
    Auto,
    /// Restrict NCCL's choice to ring (NCCL_ALGO=Ring).
    Ring,
    /// Restrict NCCL's choice to tree (NCCL_ALGO=Tree).
    Tree,
    /// Force halving-doubling; NCCL's model still picks protocol and channels.
    HalvingDoubling,
    /// Force direct all-to-all (all-to-all only). Not a scenario value: it would apply to
    /// every collective of an iteration, and the all-reduces cannot run it.
    #[serde(skip)]
    Direct,
    /// Force the hierarchical expansion (intra-server, then inter-server, then intra-server).
    Hierarchical,
    /// The hierarchical expansion with a chunked double binary tree across servers: the
    /// ASTRA-sim + ns-3 DLRM study's "hierarchical optimal" all-reduce (local reduce-scatter,
    /// DBT per rail, local all-gather). All-reduce only.
    HierarchicalTree,
}

impl AlgoChoice {
    /// The expansion this choice forces, if it forces one.
    #[must_use]
    pub fn forced(self) -> Option<Expansion> {
        match self {
            AlgoChoice::Auto | AlgoChoice::Ring | AlgoChoice::Tree => None,
            AlgoChoice::HalvingDoubling => Some(Expansion::HalvingDoubling),
            AlgoChoice::Direct => Some(Expansion::DirectAllToAll),
            AlgoChoice::Hierarchical | AlgoChoice::HierarchicalTree => Some(Expansion::Hierarchical),
        }
    }
}

/// Everything besides the topology and group that decides a collective's plan.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// GPU generation; picks NCCL's per-compute-capability constants.
    pub arch: GpuArch,
    /// NVLink bandwidth per GPU per direction.
    pub nvlink_bw: Bandwidth,
    /// Bandwidth of one NIC.
    pub nic_bw: Bandwidth,
    /// Which expansion to simulate (NCCL_ALGO-like). Default: NCCL's choice.
    pub algo: AlgoChoice,
    /// NCCL_PROTO-style override.
    pub proto: Option<Proto>,
    /// NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS = this.
    pub channels: Option<u32>,
    /// How finely a ring is simulated.
    pub granularity: Granularity,
    /// Route inter-node traffic through the GPU on the destination's rail (NCCL PXN). Default
    /// true.
    pub pxn: bool,
    /// Pieces per collective ([`ExpandParams::chunks`]). Default: the expansion's own.
    pub chunks: Option<u32>,
    /// Pieces per all-to-all pair, where it should differ from `chunks` (a 1,024-chunk
    /// all-reduce beside an all-to-all whose pairs hold a few KB). Default: `chunks`.
    pub all_to_all_chunks: Option<u32>,
    /// Pieces in flight per edge ([`ExpandParams::chunks_in_flight`]). Default: the
    /// expansion's own.
    pub chunks_in_flight: Option<u32>,
    /// Injection latency per piece and cross-server step ([`ExpandParams::injection_latency`]).
    /// Default zero.
    pub injection_latency: SimTime,
    /// Run each all-to-all in NCCL's rounds ([`ExpandParams::all_to_all_rounds`]): for a
    /// network without contention. Default false.
    pub all_to_all_rounds: bool,
}

/// Most pieces a collective may be split into (`chunks`): beyond it a 128-rank all-to-all
/// would hold billions of plan nodes.
pub const MAX_CHUNKS: u32 = 65_536;

impl PlanOptions {
    /// H100 defaults: NVLink4 450 GB/s per direction, 400 Gbit/s NICs, NCCL's choice.
    pub fn h100() -> Self {
        PlanOptions {
            arch: GpuArch::Hopper,
            nvlink_bw: Bandwidth::from_gbytes_per_sec(450),
            nic_bw: Bandwidth::from_gbps(400),
            algo: AlgoChoice::Auto,
            proto: None,
            channels: None,
            granularity: Granularity::Auto,
            pxn: true,
            chunks: None,
            all_to_all_chunks: None,
            chunks_in_flight: None,
            injection_latency: SimTime::ZERO,
            all_to_all_rounds: false,
        }
    }

    /// Checks `chunks`, `all_to_all_chunks` and `chunks_in_flight` against 1..=[`MAX_CHUNKS`].
    ///
    /// # Errors
    /// `CclError::Invalid` naming the first option out of range.
    pub fn check_chunks(&self) -> Result<(), CclError> {
        for (field, v) in [
            ("chunks", self.chunks),
            ("all_to_all_chunks", self.all_to_all_chunks),
            ("chunks_in_flight", self.chunks_in_flight),
        ] {
            if let Some(v) = v.filter(|&v| v == 0 || v > MAX_CHUNKS) {
                return Err(CclError::Invalid {
                    field: field.into(),
                    message: format!("{v} is out of range: valid 1..={MAX_CHUNKS}"),
                });
            }
        }
        Ok(())
    }
}

/// A plan with the NCCL decision behind it.
#[derive(Clone, Debug)]
pub struct PlannedCollective {
    /// The DAG llmsim simulates.
    pub plan: CollectivePlan,
    /// None for all-to-all (point-to-point in NCCL, no tuning model) and scale-up-only groups.
    pub decision: Option<TuningDecision>,
    /// Set when the simulated expansion differs from NCCL's algorithm.
    pub note: Option<&'static str>,
}

/// Maps NCCL's algorithm to the expansion llmsim simulates, with a note when they differ.
pub fn expansion_for(algo: Algo, multi_node: bool) -> (Expansion, Option<&'static str>) {
    match algo {
        Algo::Ring => (Expansion::Ring, None),
        Algo::Tree => (Expansion::DoubleBinaryTree, None),
        Algo::Pat => (
            Expansion::HalvingDoubling,
            Some("PAT is simulated as halving-doubling (same log-step structure)"),
        ),
        Algo::Nvls | Algo::NvlsTree if multi_node => (
            Expansion::Hierarchical,
            Some(
                "NVLS/NVLSTree is simulated as hierarchical: NVSwitch-capped reduce-scatter and all-gather \
                 inside servers, a pipelined double binary tree across them",
            ),
        ),
        Algo::Nvls | Algo::NvlsTree => (Expansion::ScaleUp, None),
        Algo::CollNetDirect | Algo::CollNetChain => (
            Expansion::Ring,
            Some("CollNet (in-network reduction) is not modelled; simulated as ring"),
        ),
    }
}

/// NCCL 2.30.7 tuning.cc hardware latencies (ring row) per protocol: (NVLink, NET).
pub fn step_overheads(proto: Proto) -> (SimTime, SimTime) {
    match proto {
        Proto::LL => (SimTime::from_ns(600), SimTime::from_ns(2_700)),
        Proto::LL128 => (SimTime::from_ns(1_900), SimTime::from_ns(4_000)),
        Proto::Simple => (SimTime::from_ns(3_400), SimTime::from_us(14)),
    }
}

/// NCCL's tuning kind of an op; all-to-all has none (it is point-to-point in NCCL).
pub fn tuning_kind(op: CollectiveOp) -> Option<CollKind> {
    Some(match op {
        CollectiveOp::AllReduce => CollKind::AllReduce,
        CollectiveOp::AllGather => CollKind::AllGather,
        CollectiveOp::ReduceScatter => CollKind::ReduceScatter,
        CollectiveOp::Broadcast => CollKind::Broadcast,
        CollectiveOp::Reduce => CollKind::Reduce,
        CollectiveOp::AllToAll => return None,
    })
}

/// Plans `op` of `bytes` (nccl-tests size) over `group` (hosts of `topo`). NCCL's tuning model
/// sees the group as its communicator: nodes = distinct servers, ranks per node = group ranks
/// per server (one NIC each).
///
/// # Errors
/// An empty group, hosts out of range, `chunks` or `chunks_in_flight` out of 1..=[`MAX_CHUNKS`],
/// or an expansion that does not support the op.
pub fn plan_collective(
    topo: &Topology,
    op: CollectiveOp,
    bytes: Bytes,
    group: &[NodeId],
    opts: &PlanOptions,
    su: &ScaleUpModel,
) -> Result<PlannedCollective, CclError> {
    if group.is_empty() {
        return Err(CclError::Invalid {
            field: "group".into(),
            message: "a collective needs at least one rank".into(),
        });
    }
    let mut servers: Vec<u32> = group.iter().map(|h| topo.server_of(*h)).collect();
    servers.sort_unstable();
    servers.dedup();
    let nnodes = servers.len() as u32;
    let nranks = group.len() as u32;
    opts.check_chunks()?;
    let mut params = ExpandParams {
        pxn: opts.pxn,
        granularity: opts.granularity,
        chunks: match op {
            CollectiveOp::AllToAll => opts.all_to_all_chunks.or(opts.chunks),
            _ => opts.chunks,
        },
        chunks_in_flight: opts.chunks_in_flight,
        injection_latency: opts.injection_latency,
        all_to_all_rounds: opts.all_to_all_rounds,
        ..ExpandParams::default()
    };
    let mut decision = None;
    let mut note = None;
    let expansion = match tuning_kind(op) {
        None => Expansion::DirectAllToAll,
        Some(kind) => {
            let mut input = tuning::TuningInput::h100(kind, bytes, nranks);
            input.nnodes = nnodes;
            input.nics_per_node = (nranks / nnodes).max(1);
            input.arch = opts.arch;
            input.nvlink_bw = opts.nvlink_bw;
            input.nic_bw = opts.nic_bw;
            input.proto_override = opts.proto.map(|p| vec![p]);
            input.algo_override = match opts.algo {
                AlgoChoice::Ring => Some(vec![Algo::Ring]),
                AlgoChoice::Tree => Some(vec![Algo::Tree]),
                _ => None,
            };
            if let Some(c) = opts.channels {
                input.min_channels = Some(c);
                input.max_channels = Some(c);
            }
            let d = tuning::decide(&input)?;
            let (ov_intra, ov_inter) = step_overheads(d.proto);
            params.step_overhead_intra = ov_intra;
            params.step_overhead_inter = ov_inter;
            params.channels = d.nchannels;
            // NCCL's chunk belongs to its algorithm; a ring or tree expansion of another
            // choice keeps the Simple ring chunk (2 MiB).
            if matches!(d.algo, Algo::Ring | Algo::Tree) {
                params.chunk = d.chunk_bytes;
            }
            let (e, n) = expansion_for(d.algo, nnodes > 1);
            params.hierarchical_cross = if opts.algo == AlgoChoice::HierarchicalTree {
                CrossServer::Tree
            } else if d.algo == Algo::NvlsTree {
                CrossServer::PipelinedTree
            } else {
                CrossServer::Ring
            };
            if d.algo == Algo::NvlsTree {
                params.tree_chunk = d.chunk_bytes;
            }
            // NVLS all-reduce: the NVSwitch reduction bandwidth caps the intra-server steps.
            if matches!(d.algo, Algo::Nvls | Algo::NvlsTree)
                && op == CollectiveOp::AllReduce
                && let Some(bw) = tuning::nvls_reduction_busbw_gbps(opts.arch, &d.graph)
            {
                params.nvls = Some(AlphaBeta {
                    alpha: tuning::nvls_intra_latency(),
                    busbw: Bandwidth::from_bps_f64(bw * 8e9),
                });
            }
            note = n;
            decision = Some(d);
            opts.algo.forced().unwrap_or(e)
        }
    };
    if let Some(c) = opts.channels {
        params.channels = c.max(1);
    }
    let plan = expand::expand(topo, op, bytes, group, expansion, &params, su)?;
    Ok(PlannedCollective { plan, decision, note })
}
