//! The op DAG one execution unit runs, with Chakra execution-trace semantics.
//!
//! - A [`Node`] is a Chakra `COMP_NODE` ([`NodeKind::Comp`]), `COMM_COLL_NODE`
//!   ([`NodeKind::CommColl`]), `COMM_SEND_NODE` or `COMM_RECV_NODE`. Collectives carry Chakra's
//!   `comm_type` ([`CollectiveOp`]), `comm_size` (bytes, nccl-tests size) and process group
//!   ([`Group`]).
//! - Dependencies are explicit (Chakra's data/control deps) *plus* stream order: nodes of one
//!   [`Stream`] run one at a time in program order, as kernels on one CUDA stream do.
//! - The unit of execution is one tensor-parallel group (`tp` ranks run the same program in
//!   lockstep; their TP collectives synchronize them). Rank `r`'s own DAG is its unit's program
//!   with every group resolved to `r`'s member of it, so a per-rank Chakra export is a thin
//!   layer.
//! - Programs are the same for every unit of one pipeline stage: send/receive peers are
//!   relative ([`Peer`]), groups are named by kind, and the system simulator resolves both from
//!   the unit's coordinates.

use llmsim_ccl::CollectiveOp;
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
    /// The first and last pipeline stage, for the tied embedding's gradient all-reduce.
    Embedding,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Tp => "tp",
            Group::Cp => "cp",
            Group::Ep => "ep",
            Group::Dp => "dp",
            Group::ExpertDp => "edp",
            Group::Embedding => "embd",
        }
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
}

impl Stream {
    pub const COUNT: usize = 3;
    pub const ALL: [Stream; 3] = [Stream::Compute, Stream::PpSend, Stream::Dp];
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::PpSend => "pp-send",
            Stream::Dp => "dp-comm",
        }
    }
}

/// The peer stage of a pipeline send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// Stage + 1 (mod pp: the last stage's chunk c feeds stage 0's chunk c + 1).
    Next,
    /// Stage - 1 (mod pp).
    Prev,
}

/// Activations go forward, their gradients backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Forward,
    Backward,
}

/// Identifies one pipeline message: the receiver matches a send by (sender, direction,
/// micro-batch, receiver's model chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct P2pTag {
    pub dir: Direction,
    pub microbatch: u32,
    /// The receiver's virtual pipeline chunk.
    pub chunk: u32,
}

/// What a node does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeKind {
    /// A run of compute kernels executed back to back: [`Workload::segments`]`[segment]`.
    Comp { segment: u32 },
    /// A collective over `group`; `bytes` is the nccl-tests size per rank.
    CommColl { op: CollectiveOp, group: Group, bytes: u64 },
    /// Each tp rank sends `bytes` to its counterpart in the peer stage.
    CommSend { peer: Peer, bytes: u64, tag: P2pTag },
    /// Each tp rank receives `bytes` from its counterpart in the peer stage.
    CommRecv { peer: Peer, bytes: u64, tag: P2pTag },
}

/// What a node belongs to, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Backward,
    /// Gradient reduction / parameter gathering across data-parallel ranks.
    GradSync,
    Optimizer,
}

/// One vertex.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Node {
    pub kind: NodeKind,
    pub stream: Stream,
    pub phase: Phase,
    /// Micro-batch, or `u32::MAX` for per-iteration nodes (grad sync, optimizer).
    pub microbatch: u32,
    /// Virtual pipeline chunk.
    pub chunk: u32,
    /// Transformer layer (global index), or `u32::MAX`.
    pub layer: u32,
}

pub const NONE: u32 = u32::MAX;

/// The program of every unit of one pipeline stage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Program {
    pub nodes: Vec<Node>,
    /// CSR: explicit dependencies of node i are `deps[dep_start[i]..dep_start[i+1]]`, all < i.
    dep_start: Vec<u32>,
    deps: Vec<u32>,
}

impl Program {
    pub fn new() -> Self {
        Program {
            nodes: Vec::new(),
            dep_start: vec![0],
            deps: Vec::new(),
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

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node's dependents (reverse of the explicit dependencies).
    pub fn dependents(&self) -> llmsim_core::csr::Reversed {
        llmsim_core::csr::Reversed::of(&self.dep_start, &self.deps)
    }

    pub fn deps(&self, i: u32) -> &[u32] {
        &self.deps[self.dep_start[i as usize] as usize..self.dep_start[i as usize + 1] as usize]
    }
}

/// A run of compute ops executed back to back on the compute stream.
#[derive(Clone, Debug, Serialize)]
pub struct Segment {
    /// e.g. "layer.fwd.attn", "head.bwd".
    pub name: String,
    pub pass: Pass,
    pub ops: Vec<OpSpec>,
}

/// The generated workload: one program per pipeline stage and the compute segments they use.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    pub stages: Vec<Program>,
    pub segments: Vec<Segment>,
    /// Micro-batches per iteration per data-parallel rank.
    pub microbatches: u32,
    /// Virtual pipeline chunks per stage.
    pub vpp: u32,
}

impl Workload {
    pub fn node_count(&self) -> usize {
        self.stages.iter().map(Program::len).sum()
    }
}
