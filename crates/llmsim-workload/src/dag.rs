//! The op DAG one execution unit runs, with Chakra execution-trace semantics.
//!
//! - A [`Node`] is a Chakra `COMP_NODE` ([`DagNodeKind::Comp`]), `COMM_COLL_NODE`
//!   ([`DagNodeKind::CommColl`]), `COMM_SEND_NODE` or `COMM_RECV_NODE`. Collectives carry Chakra's
//!   `comm_type` ([`CollectiveOp`]), `comm_size` (bytes, nccl-tests size) and process group
//!   ([`Group`]).
//! - Dependencies are explicit (Chakra's data/control deps) *plus* stream order: nodes of one
//!   [`Stream`] run one at a time in program order, as kernels on one CUDA stream do (or, on a
//!   stream whose [`Program::stream_order`] is LIFO, the last issued ready node first).
//! - The unit of execution is one tensor-parallel group (`tp` ranks run the same program in
//!   lockstep; their TP collectives synchronize them). Rank `r`'s own DAG is its unit's program
//!   with every group resolved to `r`'s member of it, so a per-rank Chakra export is a thin
//!   layer.
//! - Programs are the same for every unit of one pipeline stage: send/receive peers are
//!   relative ([`Peer`]), groups are named by kind, and the system simulator resolves both from
//!   the unit's coordinates.

use llmsim_core::CollectiveOp;
use llmsim_core::SimTime;
use serde::Serialize;

use crate::ops::{OpSpec, Pass};

/// A process group, by kind. The simulator resolves it to concrete ranks from the unit's
/// (cp, dp, pp) coordinates and Megatron's rank order (tp-cp-ep-dp-pp).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Tensor parallel: the ranks of the unit itself.
    Tp,
    /// Context parallel: same (dp, pp), all cp ranks; one group per tp rank.
    Cp,
    /// Expert parallel: `ep` consecutive ranks of the (cp, dp) dimension, same pp.
    Ep,
    /// Data parallel with context parallel (Megatron's gradient group): same pp, all (cp, dp).
    Dp,
    /// Expert data parallel: the (cp, dp) ranks of one pp stage with the same ep index.
    ExpertDp,
    /// The ranks of one expert-parallel group with the same local GPU index, one per server of
    /// the group (a rail): the network phase of the `flex` dispatcher's all-to-all when the
    /// group spans servers ([`Layout::ep_server_units`]).
    EpInter,
    /// The ranks of one expert-parallel group inside one server: the NVLink phase of the `flex`
    /// dispatcher's all-to-all when the group spans servers.
    EpIntra,
    /// The first and last pipeline stage, for the tied embedding's gradient all-reduce.
    Embedding,
    /// An explicit process group: [`Explicit::groups`]`[i]` (imported traces).
    Pg(u32),
}

impl Group {
    /// Short name for reports and errors: "tp", "cp", "ep", "dp", "edp", "embd" or "pg".
    pub fn name(self) -> &'static str {
        match self {
            Group::Tp => "tp",
            Group::Cp => "cp",
            Group::Ep => "ep",
            Group::Dp => "dp",
            Group::ExpertDp => "edp",
            Group::EpInter => "ep_inter",
            Group::EpIntra => "ep_intra",
            Group::Embedding => "embd",
            Group::Pg(_) => "pg",
        }
    }

    /// Whether it is an expert-parallel group (the whole group or one of its phases).
    pub fn is_ep(self) -> bool {
        matches!(self, Group::Ep | Group::EpInter | Group::EpIntra)
    }
}

/// Streams of one unit. Nodes of one stream run in program order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Kernels, plus the blocking TP/CP/EP collectives and pipeline receives issued between them.
    Compute = 0,
    /// Pipeline sends (asynchronous: the compute stream goes on).
    PpSend = 1,
    /// Data-parallel gradient reduction and parameter gathering (overlapped with compute).
    Dp = 2,
    /// No stream order: the node starts as soon as its explicit dependencies finished (Chakra's
    /// own semantics, for communication nodes of imported traces).
    Free = 3,
    /// A copy engine moving activations to host memory and back (activation CPU offloading),
    /// beside the compute stream.
    Offload = 4,
}

impl Stream {
    /// Stream slots, [`Stream::Free`] included.
    pub const COUNT: usize = 5;
    /// The ordered streams.
    pub const ALL: [Stream; 4] = [Stream::Compute, Stream::PpSend, Stream::Dp, Stream::Offload];
    /// Short name for reports: "compute", "pp-send", "dp-comm", "async" or "offload".
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::PpSend => "pp-send",
            Stream::Dp => "dp-comm",
            Stream::Free => "async",
            Stream::Offload => "offload",
        }
    }
}

/// The order in which a stream runs its nodes: ASTRA-sim's system-layer `scheduling-policy`
/// (astra-sim/astra-sim, `astra-sim/system/Sys.cc`, `Sys::get_priority`: under LIFO a later
/// issued collective gets a higher priority).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SchedulingPolicy {
    /// Program order: a node waits for the stream's previous node even when it is ready first
    /// (a CUDA stream). The default.
    #[default]
    Fifo,
    /// Last issued first: when the stream is free it runs, among its nodes whose dependencies
    /// finished, the one latest in program order. A running node is never pre-empted.
    Lifo,
}

/// The peer stage of a pipeline send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// Stage + 1 (mod pp: the last stage's chunk c feeds stage 0's chunk c + 1).
    Next,
    /// Stage - 1 (mod pp).
    Prev,
    /// An explicit unit (imported traces).
    Unit(u32),
}

/// Activations go forward, their gradients backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Activations, sent to the next stage.
    Forward,
    /// Activation gradients, sent to the previous stage.
    Backward,
}

/// Identifies one pipeline message: the receiver matches a send by (sender, direction,
/// micro-batch, receiver's model chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct P2pTag {
    /// Activations or their gradients.
    pub dir: Direction,
    /// The micro-batch the message carries.
    pub microbatch: u32,
    /// The receiver's virtual pipeline chunk.
    pub chunk: u32,
    /// Occurrence of this (sender, receiver, tag) in program order; 0 for generated workloads
    /// (their tags are unique). Imported traces may repeat a tag.
    pub seq: u32,
}

/// What a node does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DagNodeKind {
    /// A run of compute kernels executed back to back: [`Workload::segments`]`[segment]`.
    Comp {
        /// Index into [`Workload::segments`].
        segment: u32,
    },
    /// A collective over `group`; `bytes` is the nccl-tests size per rank.
    CommColl {
        /// The collective (Chakra `comm_type`).
        op: CollectiveOp,
        /// The process group it runs over.
        group: Group,
        /// Size per rank, in bytes, as nccl-tests counts it (Chakra `comm_size`).
        bytes: u64,
    },
    /// Each tp rank sends `bytes` to its counterpart in the peer stage.
    CommSend {
        /// The receiving stage.
        peer: Peer,
        /// Message size per tp rank, in bytes.
        bytes: u64,
        /// Matches the send to its receive.
        tag: P2pTag,
    },
    /// Each tp rank receives `bytes` from its counterpart in the peer stage.
    CommRecv {
        /// The sending stage.
        peer: Peer,
        /// Message size per tp rank, in bytes.
        bytes: u64,
        /// Matches the receive to its send.
        tag: P2pTag,
    },
}

/// What a node belongs to, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward pass of a micro-batch.
    Forward,
    /// Backward pass of a micro-batch.
    Backward,
    /// Gradient reduction / parameter gathering across data-parallel ranks.
    GradSync,
    /// The optimizer step.
    Optimizer,
}

/// One vertex.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Node {
    /// What the node does.
    pub kind: DagNodeKind,
    /// The stream it runs on.
    pub stream: Stream,
    /// What it counts as in the report.
    pub phase: Phase,
    /// Micro-batch, or `u32::MAX` for per-iteration nodes (grad sync, optimizer).
    pub microbatch: u32,
    /// Virtual pipeline chunk.
    pub chunk: u32,
    /// Transformer layer (global index), or `u32::MAX`.
    pub layer: u32,
}

/// Marks "no micro-batch" in [`Node::microbatch`] and "no layer" in [`Node::layer`].
pub const NONE: u32 = u32::MAX;

impl Node {
    /// A node of an imported workload, which names no micro-batch or pipeline chunk.
    pub fn imported(kind: DagNodeKind, stream: Stream, phase: Phase, layer: u32) -> Node {
        Node {
            kind,
            stream,
            phase,
            microbatch: NONE,
            chunk: 0,
            layer,
        }
    }
}

/// The program of every unit of one pipeline stage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Program {
    /// Nodes in program order.
    pub nodes: Vec<Node>,
    /// CSR: explicit dependencies of node i are `deps[dep_start[i]..dep_start[i+1]]`, all < i.
    dep_start: Vec<u32>,
    deps: Vec<u32>,
    /// With `training.iterations > 1`: the first node of each iteration (the program holds the
    /// iterations back to back, each one's nodes contiguous). Empty for one iteration.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub iteration_starts: Vec<u32>,
    /// Each stream's [`SchedulingPolicy`], indexed by [`Stream`] (FIFO unless a generator says
    /// otherwise; [`Stream::Free`] has no order).
    #[serde(skip_serializing_if = "all_fifo")]
    pub stream_order: [SchedulingPolicy; Stream::COUNT],
}

fn all_fifo(o: &[SchedulingPolicy; Stream::COUNT]) -> bool {
    o.iter().all(|p| *p == SchedulingPolicy::Fifo)
}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Program {
            nodes: Vec::new(),
            dep_start: vec![0],
            deps: Vec::new(),
            iteration_starts: Vec::new(),
            stream_order: [SchedulingPolicy::Fifo; Stream::COUNT],
        }
    }

    /// Appends a node with explicit dependencies (earlier nodes); returns its index.
    pub fn push(&mut self, node: Node, deps: &[u32]) -> u32 {
        let id = self.nodes.len() as u32;
        debug_assert!(deps.iter().all(|d| *d < id), "dependencies point backwards");
        self.nodes.push(node);
        self.deps.extend_from_slice(deps);
        self.dep_start.push(self.deps.len() as u32);
        id
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the program has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node's dependents (reverse of the explicit dependencies).
    pub fn dependents(&self) -> llmsim_core::csr::Reversed {
        llmsim_core::csr::Reversed::of(&self.dep_start, &self.deps)
    }

    /// Whether its pipeline sends block: some send runs on the compute stream, which waits for
    /// it (`ParallelConfig::pp_sends_block`; an imported trace's marked sends).
    pub fn sends_block(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.stream == Stream::Compute && matches!(n.kind, DagNodeKind::CommSend { .. }))
    }

    /// Iterations the program holds (1 unless [`Program::iteration_starts`] says more).
    pub fn iterations(&self) -> usize {
        self.iteration_starts.len().max(1)
    }

    /// The iteration node `i` belongs to (0-based).
    pub fn iteration_of(&self, i: u32) -> usize {
        self.iteration_starts.partition_point(|&s| s <= i).saturating_sub(1)
    }

    /// Explicit dependencies of node `i` (indices of earlier nodes).
    pub fn deps(&self, i: u32) -> &[u32] {
        &self.deps[self.dep_start[i as usize] as usize..self.dep_start[i as usize + 1] as usize]
    }
}

/// A run of compute ops executed back to back on the compute stream.
#[derive(Clone, Debug, Serialize)]
pub struct Segment {
    /// e.g. "layer.fwd.attn", "head.bwd".
    pub name: String,
    /// The pass its ops belong to.
    pub pass: Pass,
    /// The ops, in execution order.
    pub ops: Vec<OpSpec>,
    /// A measured duration that replaces the compute model's (a Chakra `duration_micros`).
    pub duration: Option<SimTime>,
}

/// The generated workload: one program per pipeline stage and the compute segments they use.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    /// Programs: one per pipeline stage, or for imported workloads one per distinct unit program
    /// ([`Explicit::unit_program`]).
    pub stages: Vec<Program>,
    /// Compute segments, indexed by [`DagNodeKind::Comp`].
    pub segments: Vec<Segment>,
    /// Micro-batches per iteration per data-parallel rank.
    pub microbatches: u32,
    /// Virtual pipeline chunks per stage.
    pub vpp: u32,
    /// Imported workloads: one program per unit and explicit process groups. `None` for
    /// generated workloads (one program per pipeline stage, symbolic groups).
    pub explicit: Option<Explicit>,
}

/// Per-unit programs with explicit process groups (imported Chakra or SimAI workloads).
#[derive(Clone, Debug, Serialize)]
pub struct Explicit {
    /// Program (index into [`Workload::stages`]) of every unit.
    pub unit_program: Vec<u32>,
    /// Process groups: [`Group::Pg`]`(i)` is `groups[i]`.
    pub groups: Vec<ProcessGroup>,
}

/// An explicit process group over units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessGroup {
    /// The trace's name for it (Chakra `pg_name`).
    pub name: String,
    /// What its exposed time counts as in the report: Tp, Cp, Ep, Dp (or ExpertDp, Embedding).
    pub kind: Group,
    /// Member units, in ring order.
    pub units: Vec<u32>,
    /// `true`: one group over every lane of every member unit (unit-major rank order); a TP
    /// group is one unit's lanes. `false`: one sub-group per lane, run in parallel.
    pub spans_lanes: bool,
}

impl Workload {
    /// The program unit `u` runs.
    pub fn program_of(&self, layout: &Layout, u: u32) -> &Program {
        match &self.explicit {
            Some(x) => &self.stages[x.unit_program[u as usize] as usize],
            None => &self.stages[layout.stage(u) as usize],
        }
    }

    /// Nodes over all programs.
    pub fn node_count(&self) -> usize {
        self.stages.iter().map(Program::len).sum()
    }
}

/// The parallel layout of the ranks: units (tensor-parallel groups) in Megatron's order
/// tp-cp-ep-dp-pp. Unit `u = cp_i + cp * (dp_i + dp * pp_i)` holds ranks `u * tp .. (u + 1) * tp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Tensor-parallel size: ranks per unit.
    pub tp: u32,
    /// Context-parallel size.
    pub cp: u32,
    /// Data-parallel size.
    pub dp: u32,
    /// Pipeline-parallel size: stages.
    pub pp: u32,
    /// Expert-parallel size.
    pub ep: u32,
    /// Experts kept whole over a TP group (`parallel.etp: 1`, tp > 1): an EP group is `ep / tp`
    /// whole units, all their lanes ([`Layout::spans_lanes`]); an expert-DP group is one lane of
    /// every `ep / tp`-th unit.
    pub ep_spans_tp: bool,
    /// Units of one EP group in each server when the group spans servers and the `flex`
    /// dispatcher splits its all-to-alls, for [`Group::EpInter`] and [`Group::EpIntra`]
    /// ([`crate::ParallelConfig::ep_servers`]); 0 otherwise.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub ep_server_units: u32,
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

impl Layout {
    /// How a resolved Megatron plan's ranks are laid out.
    pub fn of(p: &crate::ParallelConfig) -> Layout {
        Layout {
            tp: p.tp as u32,
            cp: p.cp as u32,
            dp: p.dp as u32,
            pp: p.pp as u32,
            ep: p.ep as u32,
            ep_spans_tp: p.ep_spans_tp(),
            // Only the flex dispatcher splits its all-to-alls into the server phases.
            ep_server_units: match p.moe_token_dispatcher {
                crate::MoeDispatcher::Flex => p.ep_servers().map_or(0, |(u, _)| u as u32),
                crate::MoeDispatcher::AllToAll => 0,
            },
        }
    }

    /// Number of units: `cp * dp * pp`.
    pub fn units(&self) -> u32 {
        self.cp * self.dp * self.pp
    }
    /// The pipeline stage of unit `u`.
    pub fn stage(&self, u: u32) -> u32 {
        u / (self.cp * self.dp)
    }
    /// (cp_i, dp_i, pp_i) of a unit.
    pub fn coords(&self, u: u32) -> (u32, u32, u32) {
        (u % self.cp, (u / self.cp) % self.dp, u / (self.cp * self.dp))
    }
    /// The unit at (cp_i, dp_i, pp_i).
    pub fn unit(&self, cp_i: u32, dp_i: u32, pp_i: u32) -> u32 {
        cp_i + self.cp * (dp_i + self.dp * pp_i)
    }
    /// The global rank of lane `tp_i` of unit `u`.
    pub fn rank(&self, u: u32, tp_i: u32) -> u32 {
        u * self.tp + tp_i
    }

    /// The unit a pipeline send or receive of `unit` talks to.
    pub fn peer_unit(&self, unit: u32, peer: Peer) -> u32 {
        let (c, d, p) = self.coords(unit);
        let pp = self.pp;
        let q = match peer {
            Peer::Next => (p + 1) % pp,
            Peer::Prev => (p + pp - 1) % pp,
            Peer::Unit(v) => return v,
        };
        self.unit(c, d, q)
    }

    /// Whether a collective over a symbolic `group` runs over all lanes of its units at once
    /// (TP; EP with experts kept whole) rather than one sub-group per lane.
    pub fn spans_lanes(&self, group: Group) -> bool {
        group == Group::Tp || (matches!(group, Group::Ep | Group::EpIntra) && self.ep_spans_tp)
    }

    /// The global ranks of a group over `units`: one set over every lane of every unit when the
    /// group spans lanes ([`Layout::spans_lanes`]), else one set per lane (`tp` sets), each in
    /// the units' order.
    pub fn lane_rank_sets(&self, units: &[u32], spans_lanes: bool) -> Vec<Vec<u32>> {
        if spans_lanes {
            vec![units.iter().flat_map(|&u| (0..self.tp).map(move |i| self.rank(u, i))).collect()]
        } else {
            (0..self.tp).map(|i| units.iter().map(|&u| self.rank(u, i)).collect()).collect()
        }
    }

    /// The member units of `unit`'s instance of a symbolic `group`, in ring order, and a key that
    /// tells that instance apart from the other instances of the same kind. `None` for
    /// [`Group::Pg`] (explicit groups are listed in [`Explicit::groups`]).
    pub fn group_units(&self, unit: u32, group: Group) -> Option<(u32, Vec<u32>)> {
        let l = self;
        let (c, d, p) = l.coords(unit);
        let k = c + l.cp * d; // index in the (cp, dp) dimension
        Some(match group {
            Group::Tp => (unit, vec![unit]),
            Group::Cp => (d + l.dp * p, (0..l.cp).map(|j| l.unit(j, d, p)).collect()),
            Group::Dp => (p, (0..l.cp * l.dp).map(|j| l.unit(j % l.cp, j / l.cp, p)).collect()),
            Group::Ep if l.ep_spans_tp => {
                let g = (l.ep / l.tp).max(1);
                let blk = k / g;
                (
                    p * l.cp * l.dp + blk,
                    (blk * g..(blk + 1) * g).map(|j| l.unit(j % l.cp, j / l.cp, p)).collect(),
                )
            }
            Group::ExpertDp if l.ep_spans_tp => {
                let g = (l.ep / l.tp).max(1);
                let e = k % g;
                (
                    p * g + e,
                    (0..l.cp * l.dp)
                        .filter(|j| j % g == e)
                        .map(|j| l.unit(j % l.cp, j / l.cp, p))
                        .collect(),
                )
            }
            Group::Ep => {
                let blk = k / l.ep;
                (
                    p * l.cp * l.dp + blk,
                    (blk * l.ep..(blk + 1) * l.ep).map(|j| l.unit(j % l.cp, j / l.cp, p)).collect(),
                )
            }
            Group::ExpertDp => {
                let e = k % l.ep;
                (
                    p * l.ep + e,
                    (0..l.cp * l.dp)
                        .filter(|j| j % l.ep == e)
                        .map(|j| l.unit(j % l.cp, j / l.cp, p))
                        .collect(),
                )
            }
            Group::EpInter | Group::EpIntra => {
                // The EP group's units in rank order; a server holds `ep_server_units` in a row.
                let (key, units) = l.group_units(unit, Group::Ep)?;
                let n = units.len() as u32;
                let s = if l.ep_server_units == 0 { n } else { l.ep_server_units.min(n) };
                let pos = units.iter().position(|x| *x == unit)? as u32;
                if group == Group::EpIntra {
                    let srv = pos / s;
                    (
                        key * n.div_ceil(s) + srv,
                        units[(srv * s) as usize..((srv + 1) * s).min(n) as usize].to_vec(),
                    )
                } else {
                    let i = pos % s;
                    (key * s + i, units.iter().copied().skip(i as usize).step_by(s as usize).collect())
                }
            }
            Group::Embedding => (c + l.cp * d, vec![l.unit(c, d, 0), l.unit(c, d, l.pp - 1)]),
            Group::Pg(_) => return None,
        })
    }
}
