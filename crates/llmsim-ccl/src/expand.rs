//! Expansion of a collective into a [`CollectivePlan`] on a topology.
//!
//! Conventions:
//! - `bytes` is the nccl-tests "size": the all-reduce buffer, the all-gather *output* buffer, the
//!   reduce-scatter *input* buffer, and for all-to-all the per-rank send buffer. busbw is computed
//!   from it with nccl-tests' factors.
//! - Ranks are hosts of the topology. A group's ranks are ordered by (server, local rank).

use std::collections::BTreeMap;
use std::sync::Arc;

use llmsim_core::{Bytes, NodeId, SimTime, mix64};
use llmsim_net::RouteSpec;
use llmsim_topo::Topology;
use serde::Serialize;

use crate::plan::{CollectivePlan, Expansion, PlanNode, Step, split_bytes};
use crate::scaleup::{AlphaBeta, ScaleUpModel};
use crate::{CclError, CollectiveOp};

/// Step-level ring DAGs larger than this switch to pipelined flows under `Granularity::Auto`.
pub const AUTO_MAX_STEP_TRANSFERS: usize = 400_000;

/// How finely a ring is simulated: `collectives.granularity` of a scenario (default
/// `pipelined`: an iteration has thousands of collectives) and `--granularity` of `llmsim
/// collective` (default `auto`, this type's default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// Per-step transfer DAG up to 400k transfers per collective (`AUTO_MAX_STEP_TRANSFERS`),
    /// pipelined flows above.
    #[default]
    Auto,
    /// Every ring step a transfer: every (loop, step, rank, channel group) with its dependencies
    /// (slow on big groups; for studying one collective closely).
    Step,
    /// A ring as one pipelined flow per channel group over all ring edges, plus the
    /// pipeline-fill latency (steady-state fluid model, within 5% of the step DAG in
    /// llmsim-ccl's tests).
    Pipelined,
}

/// Knobs of an expansion. Defaults follow NCCL's Simple protocol on Hopper.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExpandParams {
    /// NCCL channels (rings or trees) the collective is split over.
    pub channels: u32,
    /// Bytes one channel moves per step in one loop (NCCL Simple ring: 4 MiB buffer / 8 steps x 4
    /// chunk steps = 2 MiB).
    pub chunk: Bytes,
    /// Upper bound on the pipeline loops (ring) or chunks (tree) simulated; beyond it chunks are
    /// made larger. Keeps plan size bounded for huge messages.
    pub max_loops: u32,
    /// NCCL per-step overhead on an NVLink hop (tuning.cc hardware latency, NVLink row).
    pub step_overhead_intra: SimTime,
    /// NCCL per-step overhead on a network hop (tuning.cc hardware latency, NET row).
    pub step_overhead_inter: SimTime,
    /// Route inter-node traffic through the GPU on the destination's rail (NCCL PXN).
    pub pxn: bool,
    /// How finely a ring is simulated. Default: auto.
    pub granularity: Granularity,
    /// How a hierarchical all-reduce crosses servers. Default: a ring.
    pub hierarchical_cross: CrossServer,
    /// NVLink SHARP inside a server (NCCL chose NVLS or NVLSTree for an all-reduce): the
    /// NVSwitch reduction's latency and busbw cap, used instead of the NVLink scale-up model.
    /// The switch is one resource per server, so in a hierarchical all-reduce its
    /// reduce-scatter and all-gather steps run one after another. Default: none.
    pub nvls: Option<AlphaBeta>,
    /// Piece size of a pipelined tree across servers (NCCL's NVLSTree chunk); sets the
    /// pipeline fill. Default 128 KiB (nvls.cc NCCL_NVLS_CHUNKSIZE).
    pub tree_chunk: Bytes,
    /// Pieces the collective is split into, as ASTRA-sim's "number of chunks" (the ASTRA-sim +
    /// ns-3 DLRM study, Table IV): the chunks of a double binary tree (over both trees: tree 0
    /// takes the odd one), of a hierarchical all-reduce and the loops of a ring step DAG; each
    /// all-to-all pair's bytes in that many transfers. Overrides the count derived from `chunk`
    /// and `max_loops`. A pipelined ring (a fluid model) and halving-doubling ignore it.
    /// Default: none (the derived count; one piece per all-to-all pair).
    pub chunks: Option<u32>,
    /// How many pieces a rank may work on at once (ASTRA-sim's "chunk parallelism", P): on a
    /// double binary tree a piece holds one of the rank's P slots of its tree from its reduce
    /// send until its result arrives there (the reduce of piece `c` waits for piece `c - P`'s broadcast); on an
    /// all-to-all the rank's sends of piece `c` wait for all its sends of piece `c - P`.
    /// Default: none (a tree sends its pieces one after another on each edge, as NCCL
    /// pipelines them; an all-to-all sends every piece at once).
    pub chunks_in_flight: Option<u32>,
    /// Time a piece takes from the NIC to the GPU's memory and back (the study's "injection
    /// latency", a proxy for memory copies): added to the overhead of every transfer that
    /// crosses servers, so it is paid once per piece per data dependency and before the first
    /// send. Default zero.
    pub injection_latency: SimTime,
    /// An all-to-all's sends leave each rank one at a time per link class (peers in its own
    /// server over NVLink, the others over the network), in NCCL's round order, instead of all
    /// at once ([`direct_all_to_all`]). For a network without contention (the analytical
    /// backend), where sending to every peer at once would give each transfer a whole NIC.
    /// Default false.
    pub all_to_all_rounds: bool,
}

/// The cross-server step of a hierarchical all-reduce (one per rail, `bytes / m` each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrossServer {
    /// A ring over the rail ([`ring`]): NCCL's plain hierarchical all-reduce.
    #[default]
    Ring,
    /// A double binary tree run as pipelined flows ([`tree_pipelined`]): NCCL's NVLSTree.
    PipelinedTree,
    /// A double binary tree of chunks ([`double_binary_tree`], honouring `chunks` and
    /// `chunks_in_flight`): the ASTRA-sim + ns-3 DLRM study's "hierarchical optimal"
    /// all-reduce (local reduce-scatter, DBT in the scale-out dimension, local all-gather).
    Tree,
}

impl Default for ExpandParams {
    fn default() -> Self {
        ExpandParams {
            channels: 16,
            chunk: Bytes::mib(2),
            max_loops: 8,
            // NCCL 2.30.7 tuning.cc hwLat, Simple protocol: NVLink ring 3.4 us, NET ring 14 us.
            step_overhead_intra: SimTime::from_ns(3_400),
            step_overhead_inter: SimTime::from_us(14),
            pxn: true,
            granularity: Granularity::Auto,
            hierarchical_cross: CrossServer::Ring,
            nvls: None,
            tree_chunk: Bytes::kib(128),
            chunks: None,
            chunks_in_flight: None,
            injection_latency: SimTime::ZERO,
            all_to_all_rounds: false,
        }
    }
}

/// Orders a group by (server, local rank) and checks it.
fn sorted_group(topo: &Topology, group: &[NodeId]) -> Result<Vec<NodeId>, CclError> {
    if group.len() < 2 {
        return Err(CclError::Invalid {
            field: "group".into(),
            message: format!("a collective needs at least 2 ranks, got {}", group.len()),
        });
    }
    let mut g = group.to_vec();
    g.sort_unstable();
    if g.windows(2).any(|w| w[0] == w[1]) {
        return Err(CclError::Invalid {
            field: "group".into(),
            message: "a rank appears twice".into(),
        });
    }
    if let Some(h) = g.iter().find(|h| h.0 >= topo.num_hosts()) {
        return Err(CclError::Invalid {
            field: "group".into(),
            message: format!("rank {h} is not a GPU of this topology (it has {})", topo.num_hosts()),
        });
    }
    Ok(g)
}

/// The group's ranks per server, in server order.
fn by_server(topo: &Topology, g: &[NodeId]) -> Vec<Vec<NodeId>> {
    let mut m: BTreeMap<u32, Vec<NodeId>> = BTreeMap::new();
    for h in g {
        m.entry(topo.server_of(*h)).or_default().push(*h);
    }
    m.into_values().collect()
}

fn hash_of(channel: u32, src: NodeId, dst: NodeId, salt: u64) -> u64 {
    mix64(((channel as u64) << 48) ^ ((src.0 as u64) << 24) ^ dst.0 as u64 ^ salt.rotate_left(17))
}

/// Route for `src -> dst`: relayed through the GPU on the destination's rail when PXN applies.
fn route_for(topo: &Topology, src: NodeId, dst: NodeId, pxn: bool) -> RouteSpec {
    if pxn && topo.gpus_per_server() > 1 && topo.server_of(src) != topo.server_of(dst) && topo.local_rank(src) != topo.local_rank(dst) {
        RouteSpec::Via(topo.host(topo.server_of(src), topo.local_rank(dst)))
    } else {
        RouteSpec::Direct
    }
}

fn overhead(topo: &Topology, p: &ExpandParams, src: NodeId, dst: NodeId) -> SimTime {
    if topo.server_of(src) == topo.server_of(dst) {
        p.step_overhead_intra
    } else {
        p.step_overhead_inter + p.injection_latency
    }
}

/// The piece that piece `c` on an edge waits for (order, no latency), with `in_flight` pieces
/// allowed on the edge at once.
fn in_flight_gate(c: u64, in_flight: u64) -> Option<u64> {
    c.checked_sub(in_flight.max(1))
}

/// NCCL-style rings: one ring per rotation of the ranks inside each server, so successive channels
/// enter each server on a different GPU (and rail). Returns `(ring, channels using it)`.
///
/// # Errors
/// [`CclError::Invalid`] for a group of fewer than 2 ranks, a rank given twice or a rank that
/// is not a GPU of `topo`.
pub fn rings(topo: &Topology, group: &[NodeId], channels: u32) -> Result<Vec<(Vec<NodeId>, u32)>, CclError> {
    let g = sorted_group(topo, group)?;
    let servers = by_server(topo, &g);
    let m = servers[0].len();
    let uniform = servers.iter().all(|s| s.len() == m);
    // On one server every rotation uses the same NVSwitch links: one ring is enough.
    let rotations = if uniform && servers.len() > 1 {
        m.min(channels as usize).max(1)
    } else {
        1
    };
    // A family that lays rings along its structure (torus) orders the servers per ring, with a
    // ring per order up to the channel count (its orders use different links).
    let keyed = servers.len() > 1 && topo.ring_order_key(servers[0][0], 0).is_some();
    let rotations = if keyed {
        rotations.max((channels as usize).min(8))
    } else {
        rotations
    };
    let mut order: Vec<usize> = (0..servers.len()).collect();
    let mut out = Vec::with_capacity(rotations);
    for r in 0..rotations {
        if keyed {
            order.sort_by_key(|&i| (topo.ring_order_key(servers[i][0], r as u32), i));
        }
        let mut ring = Vec::with_capacity(g.len());
        for s in order.iter().map(|&i| &servers[i]) {
            let k = r % s.len();
            ring.extend_from_slice(&s[k..]);
            ring.extend_from_slice(&s[..k]);
        }
        let weight = (channels as usize / rotations + usize::from(r < channels as usize % rotations)) as u32;
        if weight > 0 {
            out.push((ring, weight));
        }
    }
    Ok(out)
}

fn ring_steps(op: CollectiveOp, n: u64) -> Result<u64, CclError> {
    match op {
        CollectiveOp::AllReduce => Ok(2 * (n - 1)),
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter => Ok(n - 1),
        other => Err(CclError::Unsupported {
            what: format!("{other} on a ring"),
            valid: "all-reduce, all-gather, reduce-scatter".into(),
        }),
    }
}

/// Ring expansion (step DAG or pipelined flows, per `p.granularity`).
///
/// # Errors
/// A bad group, or an operation rings do not implement.
pub fn ring(topo: &Topology, op: CollectiveOp, bytes: Bytes, group: &[NodeId], p: &ExpandParams) -> Result<CollectivePlan, CclError> {
    let rs = rings(topo, group, p.channels.max(1))?;
    let n = group.len() as u64;
    let nsteps = ring_steps(op, n)?;
    let nch = p.channels.max(1) as u64;
    let per_channel = bytes.0 / nch;
    let loops = match p.chunks {
        Some(c) => u64::from(c.max(1)),
        None => per_channel.div_ceil((n * p.chunk.0).max(1)).clamp(1, p.max_loops.max(1) as u64),
    };
    let step_transfers = (loops * nsteps * n) as usize * rs.len();
    let pipelined = match p.granularity {
        Granularity::Pipelined => true,
        Granularity::Step => false,
        Granularity::Auto => step_transfers > AUTO_MAX_STEP_TRANSFERS,
    };
    if pipelined {
        return Ok(ring_pipelined(topo, &rs, bytes, nch, n, nsteps, p));
    }
    let mut plan = CollectivePlan::new(Expansion::Ring);
    let mut ch_offset = 0u64;
    // prev_send[i]: last transfer sent by ring position i (for in-order sends on a channel).
    let mut prev_send: Vec<Option<u32>> = vec![None; n as usize];
    let mut cur_send: Vec<u32> = vec![0; n as usize];
    for (gi, (ring, w)) in rs.iter().enumerate() {
        // Bytes of this channel group, split evenly over its channels' share.
        let group_bytes: u64 = (0..*w as u64).map(|c| split_bytes(bytes.0, nch, ch_offset + c).0).sum();
        ch_offset += *w as u64;
        prev_send.iter_mut().for_each(|x| *x = None);
        let pieces = loops * n;
        for l in 0..loops {
            for k in 0..nsteps {
                for i in 0..n as usize {
                    let src = ring[i];
                    let dst = ring[(i + 1) % n as usize];
                    // Each step moves the chunk of one rank's slice; byte pieces are conserved.
                    let piece = split_bytes(group_bytes, pieces, l * n + (i as u64 + n - k % n) % n);
                    // Order: this rank's previous send on the channel. Data: what the previous
                    // rank sent us in the previous step.
                    let order = prev_send[i];
                    let data = if k > 0 {
                        prev_send[(i + n as usize - 1) % n as usize]
                    } else {
                        None
                    };
                    let id = plan.push_ordered(
                        PlanNode {
                            step: Step::Transfer {
                                src,
                                dst,
                                bytes: piece,
                                route: route_for(topo, src, dst, p.pxn),
                                flow_hash: hash_of(gi as u32, src, dst, 0),
                            },
                            channel: gi as u32,
                            phase: (l * nsteps + k) as u32,
                            overhead: overhead(topo, p, src, dst),
                        },
                        order.as_slice(),
                        data.as_slice(),
                    );
                    cur_send[i] = id;
                }
                for i in 0..n as usize {
                    prev_send[i] = Some(cur_send[i]);
                }
            }
        }
    }
    Ok(plan)
}

fn ring_pipelined(
    topo: &Topology,
    rs: &[(Vec<NodeId>, u32)],
    bytes: Bytes,
    nch: u64,
    n: u64,
    nsteps: u64,
    p: &ExpandParams,
) -> CollectivePlan {
    let mut plan = CollectivePlan::new(Expansion::RingPipelined);
    let mut ch_offset = 0u64;
    let mut path = Vec::new();
    for (gi, (ring, w)) in rs.iter().enumerate() {
        let group_bytes: u64 = (0..*w as u64).map(|c| split_bytes(bytes.0, nch, ch_offset + c).0).sum();
        ch_offset += *w as u64;
        // Every edge carries nsteps slices of group_bytes / n.
        let edge_bytes = Bytes((group_bytes as u128 * nsteps as u128 / n as u128) as u64);
        let mut hops: Vec<NodeId> = Vec::with_capacity(ring.len() + 8);
        // Per ring edge: latency + NCCL step overhead, for the fill along the chunk's path.
        let mut edge_cost: Vec<SimTime> = Vec::with_capacity(ring.len());
        let mut max_leg_lat = SimTime::ZERO;
        let mut bottleneck = llmsim_core::Bandwidth::from_bps(u64::MAX);
        for i in 0..ring.len() {
            let (src, dst) = (ring[i], ring[(i + 1) % ring.len()]);
            let mut legs = vec![src];
            if let RouteSpec::Via(v) = route_for(topo, src, dst, p.pxn) {
                legs.push(v);
            }
            legs.push(dst);
            let mut lat = SimTime::ZERO;
            for w2 in legs.windows(2) {
                path.clear();
                if topo.route(w2[0], w2[1], hash_of(gi as u32, src, dst, 0), &mut path).is_ok() {
                    let (l, bw) = topo.path_latency_and_bottleneck(&path);
                    lat += l;
                    bottleneck = bottleneck.min(bw);
                }
            }
            max_leg_lat = max_leg_lat.max(lat);
            edge_cost.push(lat + overhead(topo, p, src, dst));
            hops.extend_from_slice(&legs[1..]);
        }
        // hops ends with ring[0]: the chain returns to its start.
        hops.pop();
        let src = ring[0];
        let id = plan.push(
            PlanNode {
                step: Step::Transfer {
                    src,
                    dst: src,
                    bytes: edge_bytes,
                    route: RouteSpec::Chain(Arc::from(hops)),
                    flow_hash: hash_of(gi as u32, src, src, 1),
                },
                channel: gi as u32,
                phase: 0,
                overhead: SimTime::ZERO,
            },
            &[],
        );
        // Pipeline fill. A chunk's path crosses nsteps ring edges, each costing its latency and
        // step overhead (NCCL's latency model sums them: `path`). In a pipelined ring that
        // latency hides behind the bottleneck edge's back-to-back sends unless it exceeds the
        // bandwidth time, as the step DAG shows; what stays exposed is one edge at the start
        // and the excess of latency over bandwidth time. The flow itself pays one leg.
        let cycle: u64 = edge_cost.iter().map(|c| c.0).sum();
        let partial: u64 = edge_cost.iter().take((nsteps % n) as usize).map(|c| c.0).sum();
        let path = (nsteps / n) * cycle + partial;
        let t_bw = bottleneck.time_to_send(edge_bytes).0;
        let max_edge = edge_cost.iter().map(|c| c.0).max().unwrap_or(0);
        let fill = SimTime(max_edge.max(path.saturating_sub(t_bw)).saturating_sub(max_leg_lat.0));
        plan.push(
            PlanNode {
                step: Step::Local {
                    rank: src,
                    duration: fill,
                    bytes: Bytes::ZERO,
                },
                channel: gi as u32,
                phase: 1,
                overhead: SimTime::ZERO,
            },
            &[id],
        );
    }
    plan
}

/// NCCL's binary tree over `n` ranks (in-order numbering, rooted at 0 with one child):
/// returns `parent[r]` (None for the root).
pub fn btree_parents(n: usize) -> Vec<Option<usize>> {
    let mut parent = vec![None; n];
    for (r, slot) in parent.iter_mut().enumerate().skip(1) {
        let bit = 1usize << r.trailing_zeros();
        let up = (r ^ bit) | (bit << 1);
        *slot = Some(if up >= n { r ^ bit } else { up });
    }
    parent
}

/// NCCL's second tree: the mirror of the first when `n` is even, the first shifted by one when odd.
pub fn dtree_parents(n: usize) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let t0 = btree_parents(n);
    let t1: Vec<Option<usize>> = if n.is_multiple_of(2) {
        let m = |r: usize| n - 1 - r;
        (0..n).map(|r| t0[m(r)].map(m)).collect()
    } else {
        let s = |r: usize| (r + n - 1) % n;
        let inv = |r: usize| (r + 1) % n;
        (0..n).map(|r| t0[inv(r)].map(s)).collect()
    };
    (t0, t1)
}

/// Double binary tree all-reduce (NCCL Tree): a chain inside each server and two complementary
/// binary trees over servers, each carrying half the data; pipelined reduce-up then broadcast-down
/// per chunk.
///
/// # Errors
/// A bad group, or an operation other than all-reduce.
pub fn double_binary_tree(
    topo: &Topology,
    op: CollectiveOp,
    bytes: Bytes,
    group: &[NodeId],
    p: &ExpandParams,
) -> Result<CollectivePlan, CclError> {
    if op != CollectiveOp::AllReduce {
        return Err(CclError::Unsupported {
            what: format!("{op} on a tree"),
            valid: "all-reduce".into(),
        });
    }
    let g = sorted_group(topo, group)?;
    let servers = by_server(topo, &g);
    let ns = servers.len();
    let (t0, t1) = dtree_parents(ns);
    let mut plan = CollectivePlan::new(Expansion::DoubleBinaryTree);
    for (ti, tp) in [t0, t1].iter().enumerate() {
        // Rank-level parent map: the head GPU of each server joins the inter-server tree; the
        // others form a chain toward the head. Tree 1 uses a different head (another rail).
        let mut parent: BTreeMap<NodeId, NodeId> = BTreeMap::new();
        let mut root = None;
        for (si, s) in servers.iter().enumerate() {
            let head = (ti * s.len() / 2) % s.len();
            for j in 1..s.len() {
                parent.insert(s[(head + j) % s.len()], s[(head + j - 1) % s.len()]);
            }
            match tp[si] {
                Some(ps) => {
                    let phead = servers[ps][(ti * servers[ps].len() / 2) % servers[ps].len()];
                    parent.insert(s[head], phead);
                }
                None => root = Some(s[head]),
            }
        }
        let root = root.expect("a tree has a root");
        // Depth for ordering.
        let depth = |mut v: NodeId| {
            let mut d = 0u32;
            while let Some(u) = parent.get(&v) {
                v = *u;
                d += 1;
            }
            d
        };
        let mut order: Vec<(u32, NodeId)> = g.iter().map(|v| (depth(*v), *v)).collect();
        order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let tree_bytes = split_bytes(bytes.0, 2, ti as u64).0;
        let half_channels = (p.channels / 2).max(1) as u64;
        let chunks = match p.chunks {
            Some(c) => split_bytes(u64::from(c), 2, ti as u64).0.max(1),
            None => (tree_bytes / half_channels)
                .div_ceil(p.chunk.0.max(1))
                .clamp(1, p.max_loops.max(1) as u64),
        };
        let mut up: BTreeMap<(NodeId, u64), u32> = BTreeMap::new(); // (sender, chunk) -> reduce transfer
        let mut down: BTreeMap<(NodeId, u64), u32> = BTreeMap::new(); // (receiver, chunk) -> bcast transfer
        let children = |v: NodeId| parent.iter().filter(move |(_, u)| **u == v).map(|(c, _)| *c);
        // (reduce?, chunk) in push order. NCCL's pipeline: every chunk's reduce, then every
        // chunk's broadcast, each piece after the previous one on its edge. With
        // `chunks_in_flight` = P (ASTRA-sim's chunk parallelism): a chunk holds one of a rank's P
        // slots from its reduce send until its result arrives there, so a rank's reduce of chunk
        // c waits for chunk c - P's broadcast to reach it; chunk by chunk.
        let schedule: Vec<(bool, u64)> = match p.chunks_in_flight {
            None => (0..chunks).map(|c| (true, c)).chain((0..chunks).map(|c| (false, c))).collect(),
            Some(_) => (0..chunks).flat_map(|c| [(true, c), (false, c)]).collect(),
        };
        let slots = p.chunks_in_flight.map(u64::from);
        for (reduce, c) in schedule {
            let piece = split_bytes(tree_bytes, chunks, c);
            if reduce {
                for (_, v) in order.iter().filter(|(_, v)| *v != root) {
                    let u = parent[v];
                    let data: Vec<u32> = children(*v).map(|ch| up[&(ch, c)]).collect();
                    let gate = match slots {
                        None => in_flight_gate(c, 1).map(|e| up[&(*v, e)]),
                        Some(k) => in_flight_gate(c, k).map(|e| down[&(*v, e)]),
                    };
                    let id = plan.push_ordered(
                        PlanNode {
                            step: Step::Transfer {
                                src: *v,
                                dst: u,
                                bytes: piece,
                                route: route_for(topo, *v, u, p.pxn),
                                flow_hash: hash_of(ti as u32, *v, u, c),
                            },
                            channel: ti as u32,
                            phase: 2 * c as u32,
                            overhead: overhead(topo, p, *v, u),
                        },
                        gate.as_slice(),
                        &data,
                    );
                    up.insert((*v, c), id);
                }
            } else {
                for (_, v) in order.iter().rev().filter(|(_, v)| *v != root) {
                    let u = parent[v];
                    let data: Vec<u32> = if u == root {
                        children(root).map(|ch| up[&(ch, c)]).collect()
                    } else {
                        vec![down[&(u, c)]]
                    };
                    let gate = match slots {
                        None => in_flight_gate(c, 1).map(|e| down[&(*v, e)]),
                        Some(_) => None,
                    };
                    let id = plan.push_ordered(
                        PlanNode {
                            step: Step::Transfer {
                                src: u,
                                dst: *v,
                                bytes: piece,
                                route: route_for(topo, u, *v, p.pxn),
                                flow_hash: hash_of(ti as u32, u, *v, c ^ 0xB),
                            },
                            channel: ti as u32,
                            phase: 2 * c as u32 + 1,
                            overhead: overhead(topo, p, u, *v),
                        },
                        gate.as_slice(),
                        &data,
                    );
                    down.insert((*v, c), id);
                }
            }
        }
    }
    Ok(plan)
}

/// Recursive halving (reduce-scatter) and recursive doubling (all-gather); all-reduce is both.
/// For all-reduce, ranks beyond the largest power of two fold into a partner first and get the
/// result after. Reduce-scatter and all-gather over a group that is not a power of two take
/// Bruck's `ceil(log2 n)` steps instead (`bruck`), as NCCL's PAT does for any rank count.
///
/// # Errors
/// A bad group or an unsupported operation.
pub fn halving_doubling(
    topo: &Topology,
    op: CollectiveOp,
    bytes: Bytes,
    group: &[NodeId],
    p: &ExpandParams,
) -> Result<CollectivePlan, CclError> {
    let g = sorted_group(topo, group)?;
    let n = g.len();
    let pw = 1usize << (usize::BITS - 1 - n.leading_zeros());
    if pw != n && matches!(op, CollectiveOp::AllGather | CollectiveOp::ReduceScatter) {
        return Ok(bruck(topo, op, bytes, &g, p));
    }
    let (rs, ag) = match op {
        CollectiveOp::AllReduce => (true, true),
        CollectiveOp::ReduceScatter => (true, false),
        CollectiveOp::AllGather => (false, true),
        other => {
            return Err(CclError::Unsupported {
                what: format!("{other} by halving-doubling"),
                valid: "all-reduce, all-gather, reduce-scatter".into(),
            });
        }
    };
    let rounds = pw.trailing_zeros() as usize;
    let mut plan = CollectivePlan::new(Expansion::HalvingDoubling);
    let mut last: Vec<Vec<u32>> = vec![Vec::new(); n]; // dependencies each rank carries into its next round
    let send = |plan: &mut CollectivePlan, a: usize, b: usize, by: u64, phase: u32, deps: &[u32]| -> u32 {
        plan.push(
            PlanNode {
                step: Step::Transfer {
                    src: g[a],
                    dst: g[b],
                    bytes: Bytes(by),
                    route: route_for(topo, g[a], g[b], p.pxn),
                    flow_hash: hash_of(phase, g[a], g[b], 2),
                },
                channel: 0,
                phase,
                overhead: overhead(topo, p, g[a], g[b]),
            },
            deps,
        )
    };
    // One round: every rank i < pw exchanges `seg` bytes with i ^ dist; afterwards each rank
    // carries its own send and what it received into the next round.
    let exchange = |plan: &mut CollectivePlan, last: &mut Vec<Vec<u32>>, dist: usize, seg: u64, phase: u32| {
        let ids: Vec<(usize, u32)> = (0..pw)
            .map(|i| {
                let j = i ^ dist;
                let deps: Vec<u32> = last[i].iter().chain(last[j].iter()).copied().collect();
                (j, send(plan, i, j, seg, phase, &deps))
            })
            .collect();
        for (j, id) in &ids {
            last[*j] = vec![*id];
        }
        for (i, (_, id)) in ids.iter().enumerate() {
            last[i].push(*id);
        }
    };
    let mut phase = 0u32;
    for e in pw..n {
        let id = send(&mut plan, e, e - pw, bytes.0, phase, &[]);
        last[e - pw].push(id);
    }
    phase += 1;
    let mut seg = bytes.0;
    if rs {
        for r in 0..rounds {
            let dist = pw >> (r + 1);
            seg /= 2;
            exchange(&mut plan, &mut last, dist, seg, phase);
            phase += 1;
        }
    } else {
        seg = bytes.0 / pw as u64;
    }
    if ag {
        for r in (0..rounds).rev() {
            let dist = pw >> (r + 1);
            exchange(&mut plan, &mut last, dist, seg, phase);
            seg *= 2;
            phase += 1;
        }
    }
    for e in pw..n {
        let deps = last[e - pw].clone();
        send(&mut plan, e - pw, e, bytes.0, phase, &deps);
    }
    Ok(plan)
}

/// Bruck's all-gather over any `n` (Bruck et al. 1997; NCCL's PAT is a variant of it): in step
/// `k` (distance `d = 2^k`) rank `r` sends to `r - d` the `min(d, n - d)` blocks it holds, so
/// `ceil(log2 n)` steps move `(n - 1)` blocks per rank. Reduce-scatter is its transpose: the
/// same steps in reverse order, each rank sending partial sums to `r + d`. Each send waits for
/// the rank's previous send and what it received in the previous step. `g` is sorted and
/// checked.
fn bruck(topo: &Topology, op: CollectiveOp, bytes: Bytes, g: &[NodeId], p: &ExpandParams) -> CollectivePlan {
    let n = g.len();
    let mut dists = Vec::new();
    let mut d = 1usize;
    while d < n {
        dists.push(d);
        d *= 2;
    }
    let gather = op == CollectiveOp::AllGather;
    if !gather {
        dists.reverse();
    }
    let mut plan = CollectivePlan::new(Expansion::HalvingDoubling);
    // Per rank: its last send and the last transfer it received.
    let mut sent: Vec<Option<u32>> = vec![None; n];
    let mut got: Vec<Option<u32>> = vec![None; n];
    let mut ids: Vec<(usize, u32)> = Vec::with_capacity(n);
    for (phase, &d) in dists.iter().enumerate() {
        let blocks = d.min(n - d) as u64;
        ids.clear();
        for r in 0..n {
            let to = if gather { (r + n - d) % n } else { (r + d) % n };
            let deps: Vec<u32> = sent[r].iter().chain(got[r].iter()).copied().collect();
            // Block i of the buffer is `split_bytes(bytes, n, i)`; a step's blocks are whole.
            let by = bytes.0 / n as u64 * blocks + (bytes.0 % n as u64).min(blocks);
            let id = plan.push(
                PlanNode {
                    step: Step::Transfer {
                        src: g[r],
                        dst: g[to],
                        bytes: Bytes(by),
                        route: route_for(topo, g[r], g[to], p.pxn),
                        flow_hash: hash_of(phase as u32, g[r], g[to], 4),
                    },
                    channel: 0,
                    phase: phase as u32,
                    overhead: overhead(topo, p, g[r], g[to]),
                },
                &deps,
            );
            ids.push((to, id));
        }
        for (r, &(to, id)) in ids.iter().enumerate() {
            sent[r] = Some(id);
            got[to] = Some(id);
        }
    }
    plan
}

/// Direct all-to-all: every rank sends `bytes / n` to every other rank at once, in
/// `p.chunks` pieces per pair (default 1). With `p.chunks_in_flight` = P below the piece count,
/// a rank works on at most P pieces at once, as ASTRA-sim's per-node chunk parallelism: its
/// sends of piece `c` wait until all its sends of piece `c - P` are done (a zero-time local
/// step per rank and piece joins them).
///
/// # Errors
/// A bad group.
pub fn direct_all_to_all(topo: &Topology, bytes: Bytes, group: &[NodeId], p: &ExpandParams) -> Result<CollectivePlan, CclError> {
    let g = sorted_group(topo, group)?;
    let n = g.len() as u64;
    let chunks = u64::from(p.chunks.unwrap_or(1).max(1));
    if p.all_to_all_rounds {
        return Ok(all_to_all_in_rounds(topo, bytes, &g, p, chunks));
    }
    let in_flight = p.chunks_in_flight.map_or(chunks, u64::from).max(1);
    let gated = in_flight < chunks;
    let mut plan = CollectivePlan::new(Expansion::DirectAllToAll);
    // done[c % in_flight][rank]: the step that joins the rank's sends of piece c.
    let window = if gated { in_flight as usize } else { 0 };
    let mut done: Vec<Vec<u32>> = vec![vec![0; g.len()]; window];
    let mut sent = Vec::with_capacity(g.len());
    for c in 0..chunks {
        for (i, src) in g.iter().enumerate() {
            let gate: Vec<u32> = if gated {
                in_flight_gate(c, in_flight)
                    .map(|_| done[(c % in_flight) as usize][i])
                    .into_iter()
                    .collect()
            } else {
                Vec::new()
            };
            sent.clear();
            for (j, dst) in g.iter().enumerate() {
                if i == j {
                    continue;
                }
                sent.push(plan.push_ordered(all_to_all_piece(topo, p, bytes, n, j, chunks, c, *src, *dst), &gate, &[]));
            }
            if gated {
                done[(c % in_flight) as usize][i] = plan.push_ordered(
                    PlanNode {
                        step: Step::Local {
                            rank: *src,
                            duration: SimTime::ZERO,
                            bytes: Bytes::ZERO,
                        },
                        channel: 0,
                        phase: c as u32,
                        overhead: SimTime::ZERO,
                    },
                    &sent,
                    &[],
                );
            }
        }
    }
    Ok(plan)
}

/// Piece `c` of `chunks` of what `src` sends `dst`, rank `j` of the `n` of an all-to-all of
/// `bytes` per rank (its block of the buffer, then its piece), with NCCL's step overhead.
#[allow(clippy::too_many_arguments)]
fn all_to_all_piece(
    topo: &Topology,
    p: &ExpandParams,
    bytes: Bytes,
    n: u64,
    j: usize,
    chunks: u64,
    c: u64,
    src: NodeId,
    dst: NodeId,
) -> PlanNode {
    let pair = split_bytes(bytes.0, n, j as u64).0;
    PlanNode {
        step: Step::Transfer {
            src,
            dst,
            bytes: split_bytes(pair, chunks, c),
            route: route_for(topo, src, dst, p.pxn),
            flow_hash: hash_of(0, src, dst, 3),
        },
        channel: 0,
        phase: c as u32,
        overhead: overhead(topo, p, src, dst),
    }
}

/// [`direct_all_to_all`] with [`ExpandParams::all_to_all_rounds`]: NCCL runs an all-to-all's
/// point-to-point operations in rounds in which each rank has one send and one receive (its
/// `p2pSchedule`, `src/init.cc`: round `d` sends to the rank `d` after it), so a rank's sends
/// share its links rather than each getting them whole. Here each rank's sends of one link
/// class (the peers in its own server, over NVLink; the others, over the network) run one after
/// another in that order, piece by piece, while the two classes run side by side; only the
/// first send of each class pays the step overhead (NCCL keeps several rounds in flight over
/// its channels). On a network without contention this times a rank's share of the all-to-all
/// as its bytes over its own links, the time fair sharing gives.
fn all_to_all_in_rounds(topo: &Topology, bytes: Bytes, g: &[NodeId], p: &ExpandParams, chunks: u64) -> CollectivePlan {
    let n = g.len();
    let mut plan = CollectivePlan::new(Expansion::DirectAllToAll);
    // The last send of each rank in each link class: [same server, other servers].
    let mut last: Vec<[Option<u32>; 2]> = vec![[None, None]; n];
    for c in 0..chunks {
        for d in 1..n {
            for (i, src) in g.iter().enumerate() {
                let j = (i + d) % n;
                let dst = g[j];
                let class = usize::from(topo.server_of(*src) != topo.server_of(dst));
                let order: Vec<u32> = last[i][class].into_iter().collect();
                let mut piece = all_to_all_piece(topo, p, bytes, n as u64, j, chunks, c, *src, dst);
                if !order.is_empty() {
                    piece.overhead = SimTime::ZERO;
                }
                last[i][class] = Some(plan.push_ordered(piece, &order, &[]));
            }
        }
    }
    plan
}

/// The whole collective inside one server, on the scale-up alpha-beta model: one local step per
/// rank.
///
/// # Errors
/// A bad group.
pub fn scale_up(topo: &Topology, op: CollectiveOp, bytes: Bytes, group: &[NodeId], su: &ScaleUpModel) -> Result<CollectivePlan, CclError> {
    let g = sorted_group(topo, group)?;
    let t = su.time(op, bytes, g.len() as u32);
    let mut plan = CollectivePlan::new(Expansion::ScaleUp);
    let per_rank = Bytes((bytes.0 as f64 * op.busbw_factor(g.len() as u32)) as u64);
    for r in g {
        plan.push(
            PlanNode {
                step: Step::Local {
                    rank: r,
                    duration: t,
                    bytes: per_rank,
                },
                channel: 0,
                phase: 0,
                overhead: SimTime::ZERO,
            },
            &[],
        );
    }
    Ok(plan)
}

/// A double binary tree across one rank per server, run as pipelined flows (steady-state
/// fluid model, like [`Granularity::Pipelined`] for rings): every tree edge carries its tree's
/// half of `bytes` up (reduce) and down (broadcast) at once, then a local step adds the pipeline
/// fill: one `p.tree_chunk` piece climbing to the root and coming back down, each hop costing
/// its link latency, NCCL's network step overhead and the piece's transmission time.
///
/// # Errors
/// A bad group.
pub fn tree_pipelined(topo: &Topology, bytes: Bytes, group: &[NodeId], p: &ExpandParams) -> Result<CollectivePlan, CclError> {
    let g = sorted_group(topo, group)?;
    let n = g.len();
    let (t0, t1) = dtree_parents(n);
    let mut plan = CollectivePlan::new(Expansion::DoubleBinaryTree);
    let mut path = Vec::new();
    let mut flows = Vec::new();
    let mut fill = SimTime::ZERO;
    for (ti, parent) in [t0, t1].iter().enumerate() {
        let tree_bytes = split_bytes(bytes.0, 2, ti as u64);
        let mut hop_cost = SimTime::ZERO;
        let mut max_leg_lat = SimTime::ZERO;
        for (v, u) in parent.iter().enumerate().filter_map(|(v, u)| u.map(|u| (v, u))) {
            for (c, (src, dst)) in [(g[v], g[u]), (g[u], g[v])].into_iter().enumerate() {
                let hash = hash_of(ti as u32, src, dst, c as u64);
                let route = route_for(topo, src, dst, p.pxn);
                let mut legs = vec![src];
                if let RouteSpec::Via(x) = route {
                    legs.push(x);
                }
                legs.push(dst);
                let (mut lat, mut cost) = (SimTime::ZERO, overhead(topo, p, src, dst));
                for w in legs.windows(2) {
                    path.clear();
                    if topo.route(w[0], w[1], hash, &mut path).is_ok() {
                        let (l, bw) = topo.path_latency_and_bottleneck(&path);
                        lat += l;
                        cost += l + bw.time_to_send(Bytes(p.tree_chunk.0.min(tree_bytes.0)));
                    }
                }
                hop_cost = hop_cost.max(cost);
                max_leg_lat = max_leg_lat.max(lat);
                flows.push(plan.push(
                    PlanNode {
                        step: Step::Transfer {
                            src,
                            dst,
                            bytes: tree_bytes,
                            route,
                            flow_hash: hash,
                        },
                        channel: ti as u32,
                        phase: c as u32,
                        overhead: SimTime::ZERO,
                    },
                    &[],
                ));
            }
        }
        let depth = (0..n)
            .map(|mut v| {
                let mut d = 0u64;
                while let Some(u) = parent[v] {
                    v = u;
                    d += 1;
                }
                d
            })
            .max()
            .unwrap_or(0);
        // Up and down the deepest path; the flows themselves paid one leg's latency.
        fill = fill.max(SimTime((2 * depth * hop_cost.0).saturating_sub(max_leg_lat.0)));
    }
    plan.push(
        PlanNode {
            step: Step::Local {
                rank: g[0],
                duration: fill,
                bytes: Bytes::ZERO,
            },
            channel: 0,
            phase: 2,
            overhead: SimTime::ZERO,
        },
        &flows,
    );
    Ok(plan)
}

/// Hierarchical all-reduce: intra-server reduce-scatter (scale-up model), an all-reduce of
/// `bytes / m` across servers per local index (one rail each, ring), then an intra-server
/// all-gather (scale-up model). `p.hierarchical_cross` picks the cross-server step: a ring, a
/// double binary tree run as pipelined flows as in NCCL's NVLSTree ([`tree_pipelined`]), or a
/// chunked double binary tree ([`double_binary_tree`]) as in the ASTRA-sim + ns-3 DLRM study. The three
/// phases are pipelined over `p.max_loops` chunks, as NCCL's NVLSTree pipelines them: chunk c's
/// inter-server step starts when chunk c's reduce-scatter is done, while chunk c+1 is being
/// reduced.
///
/// With `p.nvls` (NVLink SHARP) the intra-server steps run on the NVSwitch's reduction
/// bandwidth, and the switch is one resource per server: it runs every chunk's reduce-scatter,
/// then every chunk's all-gather as its cross-server result arrives. That order never idles
/// the switch while it has work it could do, so it ends when a processor-shared switch would.
/// The switch's latency is paid once (first reduce-scatter, last all-gather). Without it, the scale-up model runs the reduce-scatter and all-gather of
/// different chunks concurrently, so NVLink contention between them is not modelled
/// (optimistic when NVLink is the bottleneck).
///
/// # Errors
/// A bad group, an operation other than all-reduce, or servers holding different rank counts.
pub fn hierarchical(
    topo: &Topology,
    op: CollectiveOp,
    bytes: Bytes,
    group: &[NodeId],
    p: &ExpandParams,
    su: &ScaleUpModel,
) -> Result<CollectivePlan, CclError> {
    if op != CollectiveOp::AllReduce {
        return Err(CclError::Unsupported {
            what: format!("hierarchical {op}"),
            valid: "all-reduce".into(),
        });
    }
    let g = sorted_group(topo, group)?;
    let servers = by_server(topo, &g);
    let m = servers[0].len();
    if servers.iter().any(|s| s.len() != m) {
        return Err(CclError::Invalid {
            field: "group".into(),
            message: "hierarchical all-reduce needs the same number of ranks on every server".into(),
        });
    }
    let su_nvls;
    let su = match p.nvls {
        Some(ab) => {
            // NCCL rates NVLS per bus byte of the whole collective (tuning.cc scales the NVLS
            // and NVLSTree bandwidth by nRanks/nSteps, as for rings), and nccl-tests agree:
            // NVLSTree on 2 nodes reaches a lower busbw than NVLS on one. So the switch moves
            // a server's 2(m-1)/m share at the rate that gives the group's 2(n-1)/n busbw.
            let (mf, nf) = (m as f64, g.len() as f64);
            let scale = ((mf - 1.0) / mf) / ((nf - 1.0) / nf);
            su_nvls = su.with_nvls(AlphaBeta {
                alpha: ab.alpha,
                busbw: ab.busbw.scale(scale),
            });
            &su_nvls
        }
        None => su,
    };
    if servers.len() == 1 {
        return scale_up(topo, op, bytes, &g, su);
    }
    let serial = p.nvls.is_some();
    let chunks = match p.chunks {
        Some(c) => u64::from(c.max(1)),
        None => (bytes.0 / (m as u64 * p.chunk.0.max(1))).clamp(1, p.max_loops.max(1) as u64),
    };
    let mut plan = CollectivePlan::new(Expansion::Hierarchical);
    let local = |plan: &mut CollectivePlan,
                 op: CollectiveOp,
                 chunk: Bytes,
                 r: NodeId,
                 phase: u32,
                 with_alpha: bool,
                 order: &[u32],
                 data: &[u32]| {
        let mut t = su.time(op, chunk, m as u32);
        if !with_alpha {
            t = t.saturating_sub(su.params(op).alpha);
        }
        let b = Bytes((chunk.0 as f64 * op.busbw_factor(m as u32)) as u64);
        plan.push_ordered(
            PlanNode {
                step: Step::Local {
                    rank: r,
                    duration: t,
                    bytes: b,
                },
                channel: 0,
                phase,
                overhead: SimTime::ZERO,
            },
            order,
            data,
        )
    };
    let inter = ExpandParams {
        channels: (p.channels / m as u32).max(1),
        max_loops: 1,
        chunks: None,
        chunks_in_flight: None,
        ..p.clone()
    };
    let server_index = |h: NodeId| servers.iter().position(|s| s.contains(&h)).expect("rank of the group");
    let mut prev_rs: Vec<Vec<u32>> = vec![Vec::new(); servers.len()];
    let mut prev_ag: Vec<Vec<u32>> = vec![Vec::new(); servers.len()];
    // With NVLS: the all-gathers, which the switch runs after the last reduce-scatter.
    let mut pending: Vec<(u64, Bytes, Vec<Vec<u32>>)> = Vec::new();
    let all_gather =
        |plan: &mut CollectivePlan, prev_ag: &mut Vec<Vec<u32>>, order_before: &[Vec<u32>], c: u64, cb: Bytes, sinks: &[Vec<u32>]| {
            for (si, s) in servers.iter().enumerate() {
                let order: Vec<u32> = prev_ag[si].iter().chain(&order_before[si]).copied().collect();
                let ag: Vec<u32> = s
                    .iter()
                    .map(|r| {
                        let with_alpha = !serial || c + 1 == chunks;
                        local(
                            plan,
                            CollectiveOp::AllGather,
                            cb,
                            *r,
                            3 * c as u32 + 2,
                            with_alpha,
                            &order,
                            &sinks[si],
                        )
                    })
                    .collect();
                prev_ag[si] = ag;
            }
        };
    for c in 0..chunks {
        let cb = split_bytes(bytes.0, chunks, c);
        // Intra-server reduce-scatter of this chunk, after the previous chunk's.
        let rs: Vec<Vec<u32>> = servers
            .iter()
            .enumerate()
            .map(|(si, s)| {
                s.iter()
                    .map(|r| {
                        local(
                            &mut plan,
                            CollectiveOp::ReduceScatter,
                            cb,
                            *r,
                            3 * c as u32,
                            !serial || c == 0,
                            &prev_rs[si],
                            &[],
                        )
                    })
                    .collect()
            })
            .collect();
        let mut sinks_into: Vec<Vec<u32>> = vec![Vec::new(); servers.len()];
        for j in 0..m {
            let rail: Vec<NodeId> = servers.iter().map(|s| s[j]).collect();
            let rail_bytes = Bytes(split_bytes(cb.0, m as u64, j as u64).0);
            // NVLSTree crosses servers on a pipelined tree; plain hierarchical on a ring.
            let sub = match p.hierarchical_cross {
                CrossServer::Ring => ring(topo, op, rail_bytes, &rail, &inter)?,
                CrossServer::PipelinedTree => tree_pipelined(topo, rail_bytes, &rail, &inter)?,
                CrossServer::Tree => double_binary_tree(topo, op, rail_bytes, &rail, &inter)?,
            };
            let off = plan.append(&sub, |node| match &node.step {
                Step::Transfer { src, .. } => rs[server_index(*src)].clone(),
                Step::Local { rank, .. } => rs[server_index(*rank)].clone(),
            });
            for k in sub.sinks() {
                match &sub.node(k).step {
                    // A pipelined ring's or tree's fill step stands for all of it: every server
                    // waits on it.
                    Step::Local { .. } => sinks_into.iter_mut().for_each(|v| v.push(k + off)),
                    Step::Transfer { dst, .. } => sinks_into[server_index(*dst)].push(k + off),
                }
            }
        }
        if serial {
            pending.push((c, cb, sinks_into));
        } else {
            let none = vec![Vec::new(); servers.len()];
            all_gather(&mut plan, &mut prev_ag, &none, c, cb, &sinks_into);
        }
        prev_rs = rs;
    }
    for (pc, pcb, sinks) in pending {
        all_gather(&mut plan, &mut prev_ag, &prev_rs, pc, pcb, &sinks);
    }
    Ok(plan)
}

/// Expands `op` with the given algorithm. Groups inside one server use the scale-up model
/// whatever the algorithm, as NCCL's NVLink paths are modelled there.
///
/// # Errors
/// See the individual expansions.
pub fn expand(
    topo: &Topology,
    op: CollectiveOp,
    bytes: Bytes,
    group: &[NodeId],
    algo: Expansion,
    p: &ExpandParams,
    su: &ScaleUpModel,
) -> Result<CollectivePlan, CclError> {
    let g = sorted_group(topo, group)?;
    let one_server = g.iter().all(|h| topo.server_of(*h) == topo.server_of(g[0]));
    if one_server && topo.gpus_per_server() > 1 {
        return match p.nvls {
            Some(ab) => scale_up(topo, op, bytes, &g, &su.with_nvls(ab)),
            None => scale_up(topo, op, bytes, &g, su),
        };
    }
    match (algo, op) {
        (_, CollectiveOp::AllToAll) | (Expansion::DirectAllToAll, _) => {
            if op != CollectiveOp::AllToAll {
                return Err(CclError::Unsupported {
                    what: format!("direct {op}"),
                    valid: "all-to-all".into(),
                });
            }
            direct_all_to_all(topo, bytes, &g, p)
        }
        (Expansion::Ring, _) => ring(topo, op, bytes, &g, p),
        (Expansion::RingPipelined, _) => ring(
            topo,
            op,
            bytes,
            &g,
            &ExpandParams {
                granularity: Granularity::Pipelined,
                ..p.clone()
            },
        ),
        (Expansion::DoubleBinaryTree, _) => double_binary_tree(topo, op, bytes, &g, p),
        (Expansion::HalvingDoubling, _) => halving_doubling(topo, op, bytes, &g, p),
        (Expansion::Hierarchical, _) => hierarchical(topo, op, bytes, &g, p, su),
        (Expansion::ScaleUp, _) => scale_up(topo, op, bytes, &g, su),
    }
}
