//! A collective plan: a small DAG of point-to-point transfers and local (scale-up) steps.

use llmsim_core::{Bytes, NodeId, SimTime, TransferId};
use llmsim_net::{RouteSpec, Transfer};

/// One vertex of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Bytes carried by the network from `src` to `dst`.
    Transfer {
        /// Sending rank.
        src: NodeId,
        /// Receiving rank.
        dst: NodeId,
        /// Bytes carried (per leg for a `Chain` route).
        bytes: Bytes,
        /// How the bytes travel: direct, relayed (PXN) or a pipelined chain.
        route: RouteSpec,
        /// The hash ECMP routes the transfer by (leg 0 of a chain).
        flow_hash: u64,
    },
    /// Work local to a rank or a server that takes a fixed time: an intra-node collective on the
    /// scale-up alpha-beta model, or a pipeline fill latency.
    Local {
        /// The rank (or the server's first rank) the step runs on.
        rank: NodeId,
        /// How long the step takes.
        duration: SimTime,
        /// Bus bytes the rank moves on the scale-up fabric; zero for a pipeline fill.
        bytes: Bytes,
    },
}

/// What starting a plan step does ([`Step::start`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepStart {
    /// The network carries this transfer.
    Network(Transfer),
    /// The step ends at this time without the network: a local step, or an empty transfer.
    EndsAt(SimTime),
}

impl Step {
    /// Starts the step at `at`; a transfer put on the network gets the id `id`. Both plan
    /// executors (the collective runner and the system engine) start steps this way.
    pub fn start(&self, id: TransferId, at: SimTime) -> StepStart {
        match self {
            Step::Transfer {
                src,
                dst,
                bytes,
                route,
                flow_hash,
            } if bytes.0 > 0 => StepStart::Network(Transfer {
                id,
                src: *src,
                dst: *dst,
                bytes: *bytes,
                start: at,
                flow_hash: *flow_hash,
                route: route.clone(),
            }),
            Step::Transfer { .. } => StepStart::EndsAt(at),
            Step::Local { duration, .. } => StepStart::EndsAt(at + *duration),
        }
    }
}

/// A plan vertex with its bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanNode {
    /// What the node does.
    pub step: Step,
    /// NCCL channel (or channel group) the step belongs to.
    pub channel: u32,
    /// Algorithm step index (ring step, tree level, halving-doubling round, phase).
    pub phase: u32,
    /// NCCL's per-step latency: added after each *data* dependency finishes (the data has to
    /// be noticed and posted) and to the start of a node without dependencies. *Order*
    /// dependencies (the same rank's previous send on the channel) carry no latency, so
    /// back-to-back sends pipeline as NCCL's do.
    pub overhead: SimTime,
}

/// Which expansion produced a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expansion {
    /// The ring, one transfer per (loop, step, rank, channel group), as NCCL's ring algorithm.
    Ring,
    /// The ring as one pipelined flow per channel group (steady-state fluid model).
    RingPipelined,
    /// Two complementary binary trees, half the data on each (NCCL's Tree algorithm).
    DoubleBinaryTree,
    /// Recursive halving then doubling; how llmsim simulates NCCL's PAT.
    HalvingDoubling,
    /// Every rank sends its shard straight to every other rank (all-to-all).
    DirectAllToAll,
    /// Inside each server on the scale-up model, across servers on the network, then inside
    /// each server again.
    Hierarchical,
    /// The whole collective inside one scale-up domain, on the alpha-beta model.
    ScaleUp,
}

impl std::fmt::Display for Expansion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expansion::Ring => "ring",
            Expansion::RingPipelined => "ring (pipelined flows)",
            Expansion::DoubleBinaryTree => "double binary tree",
            Expansion::HalvingDoubling => "halving-doubling",
            Expansion::DirectAllToAll => "direct all-to-all",
            Expansion::Hierarchical => "hierarchical",
            Expansion::ScaleUp => "scale-up alpha-beta",
        })
    }
}

/// A DAG of steps. Nodes are stored in a topological order: every dependency of node `i` has an
/// index below `i` (enforced by [`CollectivePlan::push`]).
#[derive(Clone, Debug)]
pub struct CollectivePlan {
    /// The expansion that built the plan.
    pub expansion: Expansion,
    nodes: Vec<PlanNode>,
    dep_start: Vec<u32>,
    deps: Vec<u32>,
    /// Parallel to `deps`: true for a data dependency, false for an order dependency.
    dep_is_data: Vec<bool>,
}

impl CollectivePlan {
    /// An empty plan built by `expansion`.
    pub fn new(expansion: Expansion) -> Self {
        CollectivePlan {
            expansion,
            nodes: Vec::new(),
            dep_start: vec![0],
            deps: Vec::new(),
            dep_is_data: Vec::new(),
        }
    }

    /// Appends a node with data dependencies `deps` (indices of earlier nodes); returns its index.
    pub fn push(&mut self, node: PlanNode, deps: &[u32]) -> u32 {
        self.push_ordered(node, &[], deps)
    }

    /// Appends a node that waits for `order` dependencies (no latency) and `data` dependencies
    /// (plus the node's overhead).
    pub fn push_ordered(&mut self, node: PlanNode, order: &[u32], data: &[u32]) -> u32 {
        let id = self.nodes.len() as u32;
        debug_assert!(order.iter().chain(data).all(|d| *d < id), "plan dependencies must point backwards");
        self.nodes.push(node);
        self.deps.extend_from_slice(order);
        self.dep_is_data.extend(std::iter::repeat_n(false, order.len()));
        self.deps.extend_from_slice(data);
        self.dep_is_data.extend(std::iter::repeat_n(true, data.len()));
        self.dep_start.push(self.deps.len() as u32);
        id
    }

    /// Every node's dependents, and for each whether that edge is a data dependency.
    pub fn dependents(&self) -> (llmsim_core::csr::Reversed, Vec<bool>) {
        let r = llmsim_core::csr::Reversed::of(&self.dep_start, &self.deps);
        let is_data = r.edge.iter().map(|e| self.dep_is_data[*e as usize]).collect();
        (r, is_data)
    }

    /// Whether each of `deps(i)` is a data dependency.
    pub fn dep_is_data(&self, i: u32) -> &[bool] {
        &self.dep_is_data[self.dep_start[i as usize] as usize..self.dep_start[i as usize + 1] as usize]
    }

    /// Appends every node of `other`; a node of `other` without dependencies also waits for
    /// `root_deps(node)`. Returns the index offset of `other`'s nodes in `self`.
    pub fn append(&mut self, other: &CollectivePlan, root_deps: impl Fn(&PlanNode) -> Vec<u32>) -> u32 {
        let off = self.nodes.len() as u32;
        let (mut order, mut data) = (Vec::new(), Vec::new());
        for i in 0..other.len() as u32 {
            order.clear();
            data.clear();
            let own = other.deps(i);
            if own.is_empty() {
                data.extend(root_deps(other.node(i)));
            } else {
                for (d, is_data) in own.iter().zip(other.dep_is_data(i)) {
                    if *is_data { data.push(d + off) } else { order.push(d + off) }
                }
            }
            self.push_ordered(other.node(i).clone(), &order, &data);
        }
        off
    }

    /// Nodes nothing depends on.
    pub fn sinks(&self) -> Vec<u32> {
        let mut has_dependent = vec![false; self.nodes.len()];
        for d in &self.deps {
            has_dependent[*d as usize] = true;
        }
        (0..self.nodes.len() as u32).filter(|i| !has_dependent[*i as usize]).collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// Whether the plan has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    /// Every node, in topological order.
    pub fn nodes(&self) -> &[PlanNode] {
        &self.nodes
    }
    /// Node `i`.
    pub fn node(&self, i: u32) -> &PlanNode {
        &self.nodes[i as usize]
    }
    /// Indices of the nodes node `i` waits for, order dependencies first.
    pub fn deps(&self, i: u32) -> &[u32] {
        &self.deps[self.dep_start[i as usize] as usize..self.dep_start[i as usize + 1] as usize]
    }
    /// Number of [`Step::Transfer`] nodes.
    pub fn num_transfers(&self) -> usize {
        self.nodes.iter().filter(|n| matches!(n.step, Step::Transfer { .. })).count()
    }
    /// Bytes the network carries, summed over transfers. For a `Chain` transfer, the bytes count
    /// once per leg (that is what each leg carries).
    pub fn network_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| match &n.step {
                Step::Transfer {
                    bytes,
                    route: RouteSpec::Chain(h),
                    ..
                } => bytes.0 * (h.len() as u64 + 1),
                Step::Transfer { bytes, .. } => bytes.0,
                Step::Local { .. } => 0,
            })
            .sum()
    }
}

/// Splits `total` into `parts` integer pieces that differ by at most one and add up to `total`.
pub fn split_bytes(total: u64, parts: u64, i: u64) -> Bytes {
    debug_assert!(parts > 0 && i < parts);
    let base = total / parts;
    let rem = total % parts;
    Bytes(base + u64::from(i < rem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_conserves() {
        for (t, p) in [(10, 3), (1 << 30, 1024), (5, 8), (0, 4)] {
            let s: u64 = (0..p).map(|i| split_bytes(t, p, i).0).sum();
            assert_eq!(s, t);
        }
    }
}
