//! The system simulator: runs every unit's program on one shared network.
//!
//! - A unit is one tensor-parallel group (see [`llmsim_workload::dag`]); units are numbered in
//!   Megatron's order tp-cp-ep-dp-pp: unit `u = cp_i + cp * (dp_i + dp * pp_i)` holds ranks
//!   `u * tp .. (u + 1) * tp`, and rank `r` is host `r` of the topology (servers filled in order).
//! - Nodes of one stream run one at a time in program order; a node starts when its stream
//!   reaches it and its explicit dependencies finished. A LIFO stream
//!   ([`Program::stream_order`]) instead runs, when free, its ready node latest in program order;
//!   collectives still match by the order each member issues them, so the members of a group
//!   must pick alike (they do when they run one program in lockstep, as DLRM's units); a
//!   mismatch is an error, not a silent wrong pairing.
//! - A collective starts when every member unit reached it. Inside one server it takes the
//!   scale-up alpha-beta time; otherwise its NCCL plan (one per tp rank's sub-group) is run
//!   transfer by transfer on the shared network, so DP, PP, EP and CP traffic contend.
//! - A pipeline send puts `tp` transfers (one per tp rank) on the network; the receive
//!   completes when all arrived.
//! - Imported workloads ([`Workload::explicit`]) give every unit its own program and name their
//!   process groups explicitly ([`Group::Pg`]); their collectives match by order in each
//!   member's program. Nodes on [`Stream::Free`] start as soon as their dependencies finished
//!   (Chakra semantics); kernel time spent waiting on them is charged to the kind of the
//!   communication that finished last (a receive: bubble until the peer sent, then PP).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use llmsim_ccl::plan::StepStart;
use llmsim_ccl::{CollectiveOp, CollectivePlan, PlanCursor, PlanEdges, PlanOptions, ScaleUpModel, plan_collective};
use llmsim_core::csr::Reversed;
use llmsim_core::{Bytes, NodeId, RadixQueue, SimTime, TransferId};
use llmsim_net::{Completion, NetStats, Network, RouteSpec, Transfer};
use llmsim_topo::Topology;
use llmsim_workload::dag::{DagNodeKind, Group, P2pTag, Program, SchedulingPolicy, Stream, Workload};
use serde::Serialize;
use smallvec::SmallVec;

use crate::SimError;

pub use llmsim_workload::dag::Layout;

/// What the engine is asked to do besides running.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// How collectives are planned on the network.
    pub plan: PlanOptions,
    /// The alpha-beta model of collectives inside one server.
    pub scale_up: ScaleUpModel,
    /// Every communication takes zero time (isolates compute and the pipeline bubble).
    pub ideal_comm: bool,
    /// Compute kernels run this factor slower while this unit's DP communication, or an
    /// expert-parallel all-to-all overlapped with computation, is in flight (Multiverse §4.1
    /// overlap slowdown; `slows_compute`); 1.0 = none.
    pub overlap_slowdown: f64,
    /// Units whose nodes are recorded as trace spans.
    pub trace_units: Vec<u32>,
    /// Record every network transfer for flows.csv.
    pub record_flows: bool,
    /// Data-parallel replicas simulated (the rest are identical copies): `dp`, or 1 when the
    /// backend has no contention and folding is exact.
    pub active_dp: u32,
    /// With `active_dp == 1`: every replica's copy of a simulated pipeline send goes on the
    /// network too (so the folded replicas' traffic contends as in the plain run); the message
    /// arrives with replica 0's copy, and the copies' spread is measured ([`FoldStats`]).
    pub mirror_p2p: bool,
    /// With `mirror_p2p`: stop at the first message whose copies arrived at different times
    /// (the fold is then no longer exact; [`FoldStats::aborted`]).
    pub stop_on_divergence: bool,
    /// Per unit, how many times longer its compute kernels take from when on (stragglers,
    /// `faults:`): `(from, factor)` entries, the largest factor in force applies; empty: none.
    pub compute_slowdown: Vec<Vec<(SimTime, f64)>>,
    /// The host thread that issues each rank's kernels (`compute.host`); `None`: kernels are
    /// issued the moment the stream reaches them.
    pub host: Option<std::sync::Arc<HostDispatch>>,
    /// Rank -> topology host (`jobs:` placement, [`crate::jobs`]); `None`: rank `r` is host `r`.
    pub hosts: Option<Arc<[u32]>>,
    /// `network.traffic_classes`: each transfer goes in its kind's class; `None`: one class.
    pub traffic_classes: Option<crate::scenario::TrafficClasses>,
    /// Where the run stands, for a progress line on another thread ([`LiveStatus`]); `None`:
    /// not recorded.
    pub live: Option<Arc<LiveStatus>>,
    /// Bytes a blocking pipeline send moves before its receiver posts (`collectives.p2p_eager`,
    /// [`P2P_EAGER_BYTES`] by default).
    pub p2p_eager_bytes: u64,
}

/// How far a running simulation has got, readable from another thread while it runs (the
/// CLI's progress line, which would otherwise sit still through a long packet-level
/// collective): the simulated time reached, the transfers the network completed and its packet
/// events. The engine writes it every [`LIVE_EVERY`] steps with relaxed stores; nothing reads
/// it back into the simulation, so results do not depend on it.
#[derive(Debug, Default)]
pub struct LiveStatus {
    sim_time_ps: std::sync::atomic::AtomicU64,
    transfers_done: std::sync::atomic::AtomicU64,
    packet_events: std::sync::atomic::AtomicU64,
    rate_fills_full: std::sync::atomic::AtomicU64,
    rate_fills_resumed: std::sync::atomic::AtomicU64,
    flows_rerated: std::sync::atomic::AtomicU64,
    flows_rerated_full: std::sync::atomic::AtomicU64,
    rates_unchanged: std::sync::atomic::AtomicU64,
    rate_fills_local: std::sync::atomic::AtomicU64,
}

/// Engine steps (local event batches or network completions) between two [`LiveStatus`]
/// writes.
pub const LIVE_EVERY: u64 = 256;

impl LiveStatus {
    /// The simulated time the run has reached (it starts again from zero when a folded run
    /// falls back to every replica).
    pub fn sim_time(&self) -> SimTime {
        SimTime(self.sim_time_ps.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Network transfers completed so far.
    pub fn transfers_done(&self) -> u64 {
        self.transfers_done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Packet events so far (0 below the packet backend).
    pub fn packet_events(&self) -> u64 {
        self.packet_events.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Flow backend: max-min fillings so far, of whole components, resumed and local
    /// ([`NetStats::rate_fills_full`], [`NetStats::rate_fills_resumed`],
    /// [`NetStats::rate_fills_local`]), the flows rerated, of those the ones whole-component
    /// fillings rerated, and the ones whose rate stayed.
    pub fn rate_fills(&self) -> [u64; 6] {
        use std::sync::atomic::Ordering::Relaxed;
        [
            self.rate_fills_full.load(Relaxed),
            self.rate_fills_resumed.load(Relaxed),
            self.rate_fills_local.load(Relaxed),
            self.flows_rerated.load(Relaxed),
            self.flows_rerated_full.load(Relaxed),
            self.rates_unchanged.load(Relaxed),
        ]
    }

    /// Records `now` and the network's counters.
    pub fn record(&self, now: SimTime, net: &NetStats) {
        use std::sync::atomic::Ordering::Relaxed;
        self.sim_time_ps.store(now.0, Relaxed);
        self.transfers_done.store(net.completed, Relaxed);
        self.packet_events.store(net.packet_events, Relaxed);
        self.rate_fills_full.store(net.rate_fills_full, Relaxed);
        self.rate_fills_resumed.store(net.rate_fills_resumed, Relaxed);
        self.flows_rerated.store(net.flows_rerated, Relaxed);
        self.flows_rerated_full.store(net.flows_rerated_full, Relaxed);
        self.rates_unchanged.store(net.rates_unchanged, Relaxed);
        self.rate_fills_local.store(net.rate_fills_local, Relaxed);
    }
}

/// Host (CPU) dispatch, as a PyTorch training process does it: one thread per rank walks the
/// program in order and issues each kernel and communication call, which takes host time; the
/// GPU cannot start a kernel before it was issued. The host runs ahead of the GPU (the CUDA
/// launch queue is deep) except at a synchronization, where it waits until the GPU reached that
/// point: Megatron-Core's all-to-all token dispatcher copies the per-expert token counts to
/// the host before each forward dispatch (the all-to-all's split sizes are host lists).
#[derive(Clone, Debug, Default)]
pub struct HostDispatch {
    /// Per compute segment: its issue costs.
    pub seg: Vec<HostSeg>,
    /// Host time to issue one communication call on the compute stream (a TP/CP/EP collective,
    /// a pipeline receive).
    pub call: SimTime,
    /// Per stage program, per node: the host waits for the GPU before issuing it.
    pub sync: Vec<Vec<bool>>,
}

/// Host issue costs of one compute segment.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostSeg {
    /// Until its first kernel is issued.
    pub first: SimTime,
    /// Until all its kernels are issued.
    pub total: SimTime,
    /// GPU time of its last kernel: the segment cannot end earlier than that after the host
    /// issued it.
    pub last_gpu: SimTime,
}

/// What folding data-parallel replicas with mirrored pipeline traffic saw: whether every
/// replica's copy of each message arrived when replica 0's did (then the fold is exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FoldStats {
    /// Pipeline messages sent with every replica's copy on the network.
    pub mirrored_messages: u64,
    /// Messages whose replicas' copies did not all arrive at one time.
    pub diverged_messages: u64,
    /// The largest spread between a message's first and last replica arrival.
    pub max_spread: SimTime,
    /// Sum of the spreads (for the mean).
    pub total_spread: SimTime,
    /// When the first diverged message arrived.
    pub first_divergence: Option<SimTime>,
    /// The run stopped at the first divergence (`stop_on_divergence`): its results are partial.
    pub aborted: bool,
}

/// One span of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    /// The unit (tensor-parallel group) that ran the node.
    pub unit: u32,
    /// The stream the node ran on.
    pub stream: Stream,
    /// The node's index in the unit's program.
    pub node: u32,
    /// When the node started.
    pub start: SimTime,
    /// When the node finished.
    pub end: SimTime,
}

/// One network transfer, for flows.csv.
#[derive(Clone, Debug, Serialize)]
pub struct FlowRecord {
    /// Submission order: unique in the run.
    pub id: u64,
    /// The traffic kind: the collective's group kind (tp, dp, ...), or pp for a pipeline send.
    pub kind: &'static str,
    /// The sending host's node id in the topology.
    pub src: u32,
    /// The receiving host's node id in the topology.
    pub dst: u32,
    /// Bytes sent.
    pub bytes: u64,
    /// When the transfer was submitted.
    pub start: SimTime,
    /// When its last byte arrived.
    pub finish: SimTime,
    /// What TCP or UET did to recover its losses (packet backend; zero elsewhere).
    pub recovered: llmsim_net::TransportCounters,
}

/// Where one unit's compute stream spent the iteration.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnitAccount {
    /// Compute-stream time running kernels.
    pub compute: SimTime,
    /// Compute-stream time blocked in collectives, per group name (tp, cp, ep, dp, embd).
    pub exposed_tp: SimTime,
    /// Compute-stream time blocked in context-parallel collectives.
    pub exposed_cp: SimTime,
    /// Compute-stream time blocked in expert-parallel collectives.
    pub exposed_ep: SimTime,
    /// Compute-stream time spent waiting on data-parallel work: the optimizer on gradient
    /// reduction, forwards on prefetched parameter all-gathers, DP collectives on the compute
    /// stream.
    pub exposed_dp: SimTime,
    /// Receive waits while the sender's data was on the wire.
    pub exposed_pp: SimTime,
    /// Receive waits before the peer stage even sent: the pipeline bubble.
    pub bubble: SimTime,
    /// Compute-stream time waiting on activation copies to or from host memory (activation
    /// CPU offloading): a layer's forward on its predecessor's copy out, a backward on its
    /// reload.
    pub exposed_offload: SimTime,
    /// Compute-stream time waiting on the host to issue kernels (`compute.host`): before a
    /// node's first kernel, and at a segment's end when its last kernel was issued late.
    pub exposed_host: SimTime,
    /// When the unit's last node of the iteration finished.
    pub finish: SimTime,
}

impl UnitAccount {
    fn add(&mut self, o: &UnitAccount) {
        self.compute += o.compute;
        self.exposed_tp += o.exposed_tp;
        self.exposed_cp += o.exposed_cp;
        self.exposed_ep += o.exposed_ep;
        self.exposed_dp += o.exposed_dp;
        self.exposed_pp += o.exposed_pp;
        self.bubble += o.bubble;
        self.exposed_offload += o.exposed_offload;
        self.exposed_host += o.exposed_host;
    }

    fn div(&mut self, n: u64) {
        for x in [
            &mut self.compute,
            &mut self.exposed_tp,
            &mut self.exposed_cp,
            &mut self.exposed_ep,
            &mut self.exposed_dp,
            &mut self.exposed_pp,
            &mut self.bubble,
            &mut self.exposed_offload,
            &mut self.exposed_host,
        ] {
            *x = SimTime::from_ps(x.as_ps() / n);
        }
    }

    /// The exposed-time counter of a collective's group kind.
    fn exposed_mut(&mut self, kind: Group) -> &mut SimTime {
        match kind {
            Group::Tp => &mut self.exposed_tp,
            Group::Cp => &mut self.exposed_cp,
            Group::Ep | Group::EpInter | Group::EpIntra => &mut self.exposed_ep,
            _ => &mut self.exposed_dp,
        }
    }
}

/// What a kernel of an imported trace last waited on.
#[derive(Clone, Copy, Debug)]
enum WaitOn {
    Coll(Group),
    Recv {
        sent: SimTime,
    },
    /// A host copy of activation offloading, finished when the kernel started.
    Offload,
}

/// The engine's result.
#[derive(Clone, Debug)]
pub struct EngineRun {
    /// The iteration time: with several iterations simulated, the steady-state figure, the mean
    /// of iterations 2..N (`(ends[N-1] - ends[0]) / (N - 1)`).
    pub iteration_time: SimTime,
    /// With several iterations: when each one ended (its last node on any unit). Empty for one.
    pub iteration_ends: Vec<SimTime>,
    /// (unit, account) of every simulated unit; with several iterations, the mean account of
    /// iterations 2..N.
    pub units: Vec<(u32, UnitAccount)>,
    /// With several iterations: (unit, account) of the first iteration. Empty for one.
    pub first_units: Vec<(u32, UnitAccount)>,
    /// Timeline spans of the traced units ([`EngineOptions::trace_units`]).
    pub spans: Vec<Span>,
    /// Every network transfer, when [`EngineOptions::record_flows`] is set.
    pub flows: Vec<FlowRecord>,
    /// The network backend's counters.
    pub net: NetStats,
    /// Per-port queues and PFC frames (packet backend only).
    pub packet: Option<llmsim_net::PacketDetails>,
    /// Collectives run.
    pub collectives: u64,
    /// Collectives whose plan ran on the network (not inside one server).
    pub collectives_on_network: u64,
    /// Per process-group kind (`tp`, `ep`, `dp`, ...): collectives run, and how many of them
    /// crossed the network (the rest stayed inside a server's scale-up domain), in first-seen order.
    pub collectives_by_group: Vec<GroupCount>,
    /// Distinct collective plans built (the rest were reused).
    pub plans_built: usize,
    /// Program nodes run, over every simulated unit.
    pub nodes_executed: u64,
    /// Mirrored pipeline traffic of a fold (all zero without `mirror_p2p`).
    pub fold: FoldStats,
}

/// Collectives of one process-group kind.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GroupCount {
    /// The process-group kind: tp, cp, ep, ep_inter, ep_intra, dp, edp, embd or pg.
    pub group: &'static str,
    /// Collectives run.
    pub collectives: u64,
    /// Collectives that crossed the network.
    pub on_network: u64,
}

/// Whether collective node `n` runs beside its unit's compute, taking SMs from it (the overlap
/// slowdown, `EngineOptions::overlap_slowdown`): DP communication on its own stream, and every
/// collective issued asynchronously on a stream of its own ([`Stream::Free`]): the
/// expert-parallel all-to-alls that `parallel.moe_a2a_overlap` runs beside the other
/// micro-batch's computation and the `torch_ring` CP exchanges (their NCCL, DeepEP or HybridEP
/// kernels occupy SMs as the DP stream's NCCL kernels do). A collective on the compute stream
/// runs alone; one that rides on a GEMM (`tp_comm_overlap`, `tp_backward_overlap`) is timed
/// with it (`crate::ops::time_segments`).
fn slows_compute(n: &llmsim_workload::dag::Node) -> bool {
    match n.kind {
        DagNodeKind::CommColl { .. } => n.stream == Stream::Dp || n.stream == Stream::Free,
        _ => false,
    }
}

/// A running compute node under the overlap slowdown (`EngineOptions::overlap_slowdown`): it
/// runs `overlap_slowdown` times slower while its unit has DP communication (or an overlapped
/// expert-parallel all-to-all, [`slows_compute`]) in flight, at full speed otherwise, so only the
/// overlapped part of a node (a whole layer's segment, say) pays.
#[derive(Clone, Copy, Debug)]
struct Slowed {
    node: u32,
    /// Work left, in picoseconds at full speed, as of `since`.
    left_ps: f64,
    since: SimTime,
    /// The node ends no earlier than this (the host issuing its last kernel).
    floor: SimTime,
    epoch: u32,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A compute node or a scale-up collective of one unit finished. `epoch` 0: final; otherwise
    /// the [`Slowed`] record's epoch it was scheduled for (a later record makes it stale).
    NodeDone { unit: u32, node: u32, epoch: u32 },
    /// A collective finished on every member.
    CollDone { coll: u32 },
    /// A local (fixed-time) step of a running plan finished.
    PlanLocal { inst: u32, node: u32 },
    /// The host issued the first kernel of a node the unit's compute stream waits to start.
    HostIssued { unit: u32, node: u32 },
}

/// The engine's lookup tables (groups, pending collectives, mail, plans): keyed by small
/// integers and tags, looked up per event, never iterated, so the hash only has to spread keys,
/// not resist attack; SipHash (the std default) took 7% of a 16k-GPU flow run. FxHash
/// (`rustc-hash`) is one multiply per word.
type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// A plan with its reverse edges, shared by every run of it.
struct Prepared {
    plan: CollectivePlan,
    edges: PlanEdges,
}

impl Prepared {
    fn new(plan: CollectivePlan) -> Self {
        let edges = PlanEdges::of(&plan);
        Prepared { plan, edges }
    }
}

/// One running plan.
struct PlanInst {
    prep: Arc<Prepared>,
    cursor: PlanCursor,
    coll: u32,
    kind: &'static str,
}

/// One collective in flight (all member units arrived).
struct CollInst {
    plans_left: u32,
    members: Vec<(u32, u32)>,
}

/// A collective waiting for its members.
struct Pending {
    arrived: u32,
    members: Vec<(u32, u32)>,
}

/// A unit's group whose collectives take the closed form ([`SystemEngine::arrive`]): the
/// unit alone inside one server. Cached per unit so that the 2.6 M TP collectives of a
/// 16k-GPU run read a few KiB instead of a hash map, a group and its host list each.
#[derive(Clone, Copy)]
struct ClosedGroup {
    group: Group,
    ranks: u32,
    kind: &'static str,
}

/// One process group instance.
struct GroupInst {
    /// The group it is an instance of.
    group: Group,
    /// Name for flows.csv: the group's kind (tp, dp, ...).
    kind: &'static str,
    units: Vec<u32>,
    /// One host list per parallel sub-group (per tp rank), or one list for Tp.
    host_sets: Vec<Vec<NodeId>>,
    /// Collectives issued so far by each member (parallel to `units`).
    issued: Vec<u32>,
    pending: FastMap<u32, Pending>,
    /// Every host set inside one server.
    intra_server: bool,
}

#[derive(Clone, Copy)]
struct P2pInst {
    left: u32,
    /// Delivered already (a fold that takes each message at replica 0's copy).
    delivered: bool,
    unit: u32,
    node: u32,
    dst_unit: u32,
    tag: P2pTag,
    /// Bytes of each lane held back until the receiver posts its receive (a blocking send's
    /// rendezvous, [`P2P_EAGER_BYTES`]); 0 once they left or when nothing waits.
    rest: u64,
    /// When the last part of the message went on the wire (the sender's wait for its receiver
    /// ends there).
    wire: SimTime,
}

const P2P_BIT: u64 = 1 << 63;
/// A transfer id's bit for the second part of a pipeline message, sent once its receiver posted
/// (the top bit of the message's slot; bits 56.. are a multi-job run's job).
const P2P_REST_BIT: u64 = 1 << 31;

/// The default bytes of a pipeline message that a blocking send can move before its receiver's
/// kernel runs (`collectives.p2p_eager`): NCCL stages point-to-point data through the peer's
/// FIFO of `NCCL_STEPS` (8) chunks of `NCCL_P2P_NET_CHUNKSIZE` (128 KiB) on each of
/// `NCCL_NCHANNELS_PER_NET_PEER` (2) channels (`src/init.cc` `computeBuffSizes`,
/// `src/graph/paths.cc` `ncclTopoGetNchannels`, NCCL 2.18; the receiving proxy posts its FIFO
/// slots once the receive is issued); beyond that the sender waits for the receiving kernel to
/// drain them.
pub const P2P_EAGER_BYTES: u64 = 2 * 8 * 128 * 1024;

/// [`SystemEngine::dep_slot`] of a node without explicit dependencies.
const NO_DEPS: u32 = u32::MAX;

/// [`SystemEngine::free_slot`] of a node on an ordered stream.
const NO_SLOT: u32 = u32::MAX;

/// A slot table over a stage program's nodes: the nodes for which `has` holds get slots 0, 1, ...
/// in program order, the others `none`.
fn slots(has: impl Iterator<Item = bool>, none: u32) -> Vec<u32> {
    let mut next = 0u32;
    has.map(|h| {
        if h {
            next += 1;
            next - 1
        } else {
            none
        }
    })
    .collect()
}

/// Receives: arrival time of a message not yet posted for, or a posted receive waiting.
enum Mail {
    Arrived { sent: SimTime, at: SimTime },
    Waiting { node: u32, posted: SimTime },
}

/// A unit's state that its every event touches, in one record: kept as one vector per field,
/// the 11 fields of a unit sat on as many cache lines, each missed between the unit's events
/// (thousands of units run in turn), on the 65k-GPU GPT-3 flow run's 212 M nodes.
#[derive(Clone, Default)]
#[repr(align(64))]
struct UnitState {
    /// Per stream: the position of its next node in the stream.
    stream_pos: [u32; Stream::COUNT],
    /// A node of the stream is running.
    stream_busy: [bool; Stream::COUNT],
    /// DP communication (or overlapped expert-parallel all-to-alls, [`slows_compute`]) in
    /// flight.
    dp_in_flight: u32,
    /// Start time of each stream's running node (one at a time).
    stream_start: [SimTime; Stream::COUNT],
    /// When the compute stream's last node finished.
    last_compute_end: SimTime,
    /// When its host thread has issued everything up to the compute stream's current node
    /// (`compute.host`).
    host_at: SimTime,
    /// How long the running compute-stream node waited on the host before it started, and how
    /// much later than its GPU time it ended because its last kernel was issued late.
    host_delay: SimTime,
    host_tail: SimTime,
    /// The communication that finished last, for time a kernel waits on free (stream-less)
    /// communication: (report category, the sender's start for a receive).
    last_comm: Option<WaitOn>,
    /// What the running kernel waited on before it started.
    waited_on: Option<WaitOn>,
    /// When the last host copy (activation offloading) finished.
    last_offload: Option<SimTime>,
    /// The last closed-form group, if any.
    closed_group: Option<ClosedGroup>,
    /// Running compute nodes whose speed follows `dp_in_flight` (the overlap slowdown applies
    /// while DP communication is in flight, not for the whole node): one at a time, unless free
    /// nodes compute.
    slowed: SmallVec<[Slowed; 1]>,
    /// The dependencies left of each node that has any, at its `dep_slot`.
    deps_left: Vec<u32>,
    /// Compute-stream positions before this one have had their receives posted for the
    /// rendezvous of blocking sends (a run of adjacent sends and receives is one batch).
    posted_until: u32,
}

/// The system simulator of one run: every unit's program on one shared network.
pub struct SystemEngine<'a> {
    topo: Arc<Topology>,
    net: Box<dyn Network>,
    wl: &'a Workload,
    layout: Layout,
    seg_time: &'a [SimTime],
    opts: EngineOptions,
    // Per stage program tables.
    stream_nodes: Vec<[Vec<u32>; Stream::COUNT]>,
    pos_in_stream: Vec<Vec<u32>>,
    dependents: Vec<Reversed>,
    prog_of: Vec<u32>,
    coll_seq: Vec<Vec<u32>>,
    // Per unit state.
    /// What each event of a unit reads and writes, one record per unit ([`UnitState`]).
    us: Vec<UnitState>,
    /// Imported workloads: which nodes finished (for naming a stall); empty otherwise.
    finished: Vec<Vec<bool>>,
    /// Per stage program, per node: its index in its units' `deps_left`, [`NO_DEPS`] for a node
    /// without explicit dependencies. [`Self::try_start`] need not read a unit's own array for
    /// those, and the arrays hold only the nodes that wait: on the 16k-GPU flow run the load of
    /// `deps_left` (then one entry for each of a unit's 3,314 nodes, cold between the unit's
    /// events) was 10% of the time.
    dep_slot: Vec<Vec<u32>>,
    /// LIFO streams ([`SchedulingPolicy::Lifo`]): the nodes whose dependencies finished and that
    /// wait for the stream, per unit and stream.
    stream_ready: Vec<[Vec<u32>; Stream::COUNT]>,
    /// Start time of each running node of the free stream (several run at once), per unit at
    /// the node's `free_slot`. Only the free nodes have a slot: one entry for every node of every
    /// unit (filled with zeros, so every page touched) was 1.7 GB of the 65k-GPU GPT-3 run's
    /// 1.9 GB, and its page faults 3% of the time, for a program without free nodes.
    node_start: Vec<Vec<SimTime>>,
    /// Per stage program, per node: its index in its units' `node_start` (free nodes only;
    /// [`NO_SLOT`] for the others).
    free_slot: Vec<Vec<u32>>,
    /// The last epoch handed to a [`Slowed`] record.
    slowed_epoch: u32,
    /// Accounts per (iteration, unit): index `iteration * units + unit`.
    acct: Vec<UnitAccount>,
    /// Iterations the programs hold.
    iterations: usize,
    // Groups and collectives.
    groups: Vec<GroupInst>,
    group_index: FastMap<(Group, u32), u32>,
    unit_groups: Vec<FastMap<Group, u32>>,
    colls: Vec<Option<CollInst>>,
    free_colls: Vec<u32>,
    plans: Vec<Option<PlanInst>>,
    free_plans: Vec<u32>,
    /// Scratch: the plan nodes a finished node released.
    released: Vec<u32>,
    plan_cache: FastMap<(u32, u32, CollectiveOp, u64), Arc<Prepared>>,
    p2p: Vec<Option<P2pInst>>,
    free_p2p: Vec<u32>,
    /// Replicas whose copies a pipeline send puts on the network: `dp` when mirroring, else 1.
    mirrors: u32,
    /// Per p2p slot and mirrored replica: its copy's lanes still in flight (slot-major).
    p2p_lanes: Vec<u32>,
    /// Per p2p slot: when the first replica's copy fully arrived.
    p2p_first: Vec<Option<SimTime>>,
    mail: FastMap<(u32, u32, P2pTag), Mail>,
    /// Blocking pipeline sends wait for their receiver (NCCL's rendezvous, see
    /// [`P2P_EAGER_BYTES`]): some program sends on the compute stream and communication is not
    /// free.
    rendezvous: bool,
    /// Receives posted before their blocking send was issued: when.
    rv_posted: FastMap<(u32, u32, P2pTag), SimTime>,
    /// Blocking sends issued before their receiver posted: the p2p slot of one that waits with
    /// the rest of its message, `None` for one that needed no wait (its receive's post then
    /// only clears the entry).
    rv_parked: FastMap<(u32, u32, P2pTag), Option<u32>>,
    /// Local events: a radix heap, as no event is scheduled before the last one popped.
    queue: RadixQueue<Ev>,
    done: Vec<Completion>,
    /// Per live transfer id (ids are reused once a collective ends): its start, kind and
    /// serial number (submission order, unique in the run: flows.csv's id).
    flow_start: FastMap<u64, (SimTime, &'static str, u64)>,
    flow_serial: u64,
    /// The last few closed-form collective times ([`Self::arrive_closed`]), by operation,
    /// size and ranks: a run issues millions of TP collectives of a handful of sizes, and the
    /// alpha-beta formula (a division and a rounding each) was 4% of the 16k-GPU GPT-3 run.
    scale_up_memo: [Option<(CollectiveOp, u64, u32, SimTime)>; SCALE_UP_MEMO],
    /// The memo entry the next miss overwrites (round robin).
    scale_up_next: usize,
    run: EngineRun,
}

/// Closed-form collective times remembered ([`SystemEngine::scale_up_memo`]).
const SCALE_UP_MEMO: usize = 8;

impl<'a> SystemEngine<'a> {
    /// An engine for `wl` on `topo` and `net`, with `seg_time` the time of each compute segment.
    pub fn new(
        topo: Arc<Topology>,
        net: Box<dyn Network>,
        wl: &'a Workload,
        layout: Layout,
        seg_time: &'a [SimTime],
        opts: EngineOptions,
    ) -> Self {
        let mut stream_nodes = Vec::new();
        let mut pos_in_stream = Vec::new();
        let mut dependents = Vec::new();
        for prog in &wl.stages {
            let mut sn: [Vec<u32>; Stream::COUNT] = Default::default();
            let mut pos = vec![0u32; prog.len()];
            for (i, n) in prog.nodes.iter().enumerate() {
                let s = n.stream as usize;
                pos[i] = sn[s].len() as u32;
                sn[s].push(i as u32);
            }
            stream_nodes.push(sn);
            pos_in_stream.push(pos);
            dependents.push(prog.dependents());
        }
        let units = layout.units() as usize;
        let prog_of: Vec<u32> = match &wl.explicit {
            Some(x) => x.unit_program.clone(),
            None => (0..units as u32).map(|u| layout.stage(u)).collect(),
        };
        // Explicit groups match collectives by their order in each member's program (imported
        // nodes without a stream may be issued out of order), and so does a generated workload
        // with collectives on no stream (`parallel.moe_a2a_overlap`: two passes' all-to-alls in
        // flight at once, issued in the order their dependencies finish).
        let free_colls = wl.stages.iter().any(|prog| {
            prog.nodes
                .iter()
                .any(|n| n.stream == Stream::Free && matches!(n.kind, DagNodeKind::CommColl { .. }))
        });
        let coll_seq: Vec<Vec<u32>> = if wl.explicit.is_some() || free_colls {
            wl.stages
                .iter()
                .map(|prog| {
                    let mut count: HashMap<Group, u32> = HashMap::new();
                    prog.nodes
                        .iter()
                        .map(|n| match n.kind {
                            DagNodeKind::CommColl { group, .. } => {
                                let c = count.entry(group).or_insert(0);
                                *c += 1;
                                *c - 1
                            }
                            _ => 0,
                        })
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        let finished: Vec<Vec<bool>> = if wl.explicit.is_some() {
            (0..units).map(|u| vec![false; wl.stages[prog_of[u] as usize].len()]).collect()
        } else {
            Vec::new()
        };
        // A pipeline group inside one server (one NVLink domain) runs a single-node
        // communicator: NCCL stages its point-to-point data in NVLink chunks (512 KiB,
        // `NCCL_P2P_NVL_CHUNKSIZE`) over two channels per NVLink (`ncclTopoGetNchannels`), tens
        // of MiB per peer, above any activation message: its sends do not wait for the receiver.
        let pp_in_server = wl.explicit.is_none() && layout.pp > 1 && {
            let server = |p: u32| topo.server_of(host_of(&opts.hosts, layout.rank(layout.unit(0, 0, p), 0)));
            (1..layout.pp).all(|p| server(p) == server(0))
        };
        // Imported traces too: a send and its receive are matched by tag there as well, and a
        // trace whose order could not complete under the rendezvous stops with the stall named.
        let rendezvous = !opts.ideal_comm && !pp_in_server && wl.stages.iter().any(Program::sends_block);
        let iterations = wl.stages.iter().map(Program::iterations).max().unwrap_or(1);
        let mirrors = if opts.mirror_p2p && opts.active_dp == 1 && layout.dp > 1 {
            layout.dp
        } else {
            1
        };
        let active = |u: u32| layout.coords(u).1 < opts.active_dp;
        // Per stage program: each node with dependencies gets a slot in its units' `deps_left`
        // (which starts as the stage's template of dependency counts), each free node one in
        // their `node_start`.
        let dep_slot: Vec<Vec<u32>> = wl
            .stages
            .iter()
            .map(|prog| slots((0..prog.len() as u32).map(|i| !prog.deps(i).is_empty()), NO_DEPS))
            .collect();
        let deps_template: Vec<Vec<u32>> = wl
            .stages
            .iter()
            .map(|prog| {
                (0..prog.len() as u32)
                    .map(|i| prog.deps(i).len() as u32)
                    .filter(|n| *n > 0)
                    .collect()
            })
            .collect();
        let free_slot: Vec<Vec<u32>> = wl
            .stages
            .iter()
            .map(|prog| slots(prog.nodes.iter().map(|n| n.stream == Stream::Free), NO_SLOT))
            .collect();
        let free_count: Vec<usize> = free_slot.iter().map(|f| f.iter().filter(|&&x| x != NO_SLOT).count()).collect();
        let deps_left: Vec<Vec<u32>> = (0..units as u32)
            .map(|u| {
                if active(u) {
                    deps_template[prog_of[u as usize] as usize].clone()
                } else {
                    Vec::new()
                }
            })
            .collect();
        let node_start = (0..units as u32)
            .map(|u| {
                if active(u) {
                    vec![SimTime::ZERO; free_count[prog_of[u as usize] as usize]]
                } else {
                    Vec::new()
                }
            })
            .collect();
        // No report reads the network's per-link byte counters, and the engine gives the
        // network to no one after the run.
        let mut net = net;
        net.set_link_bytes(false);
        SystemEngine {
            topo,
            net,
            wl,
            layout,
            seg_time,
            opts,
            stream_nodes,
            pos_in_stream,
            dependents,
            prog_of,
            coll_seq,
            us: deps_left
                .into_iter()
                .map(|deps_left| UnitState {
                    deps_left,
                    ..UnitState::default()
                })
                .collect(),
            finished,
            dep_slot,
            stream_ready: (0..units).map(|_| Default::default()).collect(),
            node_start,
            free_slot,
            slowed_epoch: 0,
            acct: vec![UnitAccount::default(); units * iterations],
            iterations,
            groups: Vec::new(),
            group_index: FastMap::default(),
            unit_groups: vec![FastMap::default(); units],
            colls: Vec::new(),
            free_colls: Vec::new(),
            plans: Vec::new(),
            free_plans: Vec::new(),
            released: Vec::new(),
            plan_cache: FastMap::default(),
            p2p: Vec::new(),
            free_p2p: Vec::new(),
            mirrors,
            p2p_lanes: Vec::new(),
            p2p_first: Vec::new(),
            mail: FastMap::default(),
            rendezvous,
            rv_posted: FastMap::default(),
            rv_parked: FastMap::default(),
            queue: RadixQueue::new(),
            done: Vec::new(),
            flow_start: FastMap::default(),
            flow_serial: 0,
            scale_up_memo: [None; SCALE_UP_MEMO],
            scale_up_next: 0,
            run: EngineRun {
                iteration_time: SimTime::ZERO,
                iteration_ends: Vec::new(),
                units: Vec::new(),
                first_units: Vec::new(),
                spans: Vec::new(),
                flows: Vec::new(),
                net: NetStats::default(),
                packet: None,
                collectives: 0,
                collectives_on_network: 0,
                collectives_by_group: Vec::new(),
                plans_built: 0,
                nodes_executed: 0,
                fold: FoldStats::default(),
            },
        }
    }

    /// Whether unit `u` is simulated (not folded into replica 0).
    pub fn active(&self, u: u32) -> bool {
        self.layout.coords(u).1 < self.opts.active_dp
    }

    fn prog(&self, u: u32) -> &'a Program {
        &self.wl.stages[self.prog_of[u as usize] as usize]
    }

    /// The account of `unit`'s iteration that `node` belongs to.
    fn acct_index(&self, unit: u32, node: u32) -> usize {
        if self.iterations == 1 {
            unit as usize
        } else {
            self.prog(unit).iteration_of(node) * self.layout.units() as usize + unit as usize
        }
    }

    /// When running `node` of `unit` started.
    #[inline]
    fn started(&self, unit: u32, node: u32) -> SimTime {
        match self.prog(unit).nodes[node as usize].stream {
            Stream::Free => {
                let slot = self.free_slot[self.prog_of[unit as usize] as usize][node as usize];
                self.node_start[unit as usize][slot as usize]
            }
            s => self.us[unit as usize].stream_start[s as usize],
        }
    }

    /// Runs to the end. `progress(done_nodes, total_nodes)` is called now and then.
    ///
    /// # Errors
    /// A transfer the topology cannot route, or a deadlock (a receive or collective that never
    /// completes — a generator bug, reported rather than hidden).
    pub fn run(mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<EngineRun, SimError> {
        let total = self.begin()?;
        let mut finished: Vec<(SimTime, Ev)> = Vec::new();
        let mut last_report = 0u64;
        // Every 0.5% of the nodes (at most every 65,536): a packet-level run of a few thousand
        // nodes otherwise reported nothing until its end.
        let report_every = (total / 200).clamp(1, 65_536);
        progress(0, total);
        let live = self.opts.live.clone();
        let (mut steps, mut now) = (0u64, SimTime::ZERO);
        loop {
            let tl = self.queue.peek_time();
            let tn = self.net.next_event_time();
            steps += 1;
            if let Some(l) = live.as_deref().filter(|_| steps.is_multiple_of(LIVE_EVERY)) {
                l.record(now.max(self.net.now()), &self.net.stats());
            }
            match (tl, tn) {
                (None, None) => break,
                (Some(l), _) if tn.is_none_or(|n| l <= n) => {
                    now = l;
                    self.run_local(l, &mut finished)?
                }
                (_, Some(_)) => {
                    let mut done = std::mem::take(&mut self.done);
                    done.clear();
                    // Up to the first completion, strictly before the next local event (local
                    // events go first at equal times).
                    self.net.advance_until_completion(before(tl), &mut done);
                    for c in &done {
                        self.on_transfer(c)?;
                    }
                    self.done = done;
                }
                (Some(_), None) => unreachable!("covered by the guard above"),
            }
            if self.run.fold.aborted {
                return Ok(self.run);
            }
            if self.run.nodes_executed - last_report >= report_every {
                last_report = self.run.nodes_executed;
                progress(last_report, total);
            }
        }
        if let Some(l) = live.as_deref() {
            l.record(now.max(self.net.now()), &self.net.stats());
        }
        progress(self.run.nodes_executed, total);
        self.end(total)
    }

    /// Runs the local events due at `l` (the earliest in the queue), `finished` a scratch buffer.
    fn run_local(&mut self, l: SimTime, finished: &mut Vec<(SimTime, Ev)>) -> Result<(), SimError> {
        finished.clear();
        while let Some((t, e)) = self.queue.pop_until(l) {
            finished.push((t, e));
        }
        for &(t, e) in finished.iter() {
            self.on_event(t, e)?;
        }
        Ok(())
    }

    /// Starts every simulated unit's first nodes; returns the nodes the run will execute.
    fn begin(&mut self) -> Result<u64, SimError> {
        let total: u64 = (0..self.layout.units())
            .filter(|u| self.active(*u))
            .map(|u| self.prog(u).len() as u64)
            .sum();
        for u in 0..self.layout.units() {
            if !self.active(u) {
                continue;
            }
            let p = self.prog_of[u as usize] as usize;
            for s in Stream::ALL {
                if self.prog(u).stream_order[s as usize] == SchedulingPolicy::Lifo {
                    // Every node without dependencies is ready at once.
                    for k in 0..self.stream_nodes[p][s as usize].len() {
                        let node = self.stream_nodes[p][s as usize][k];
                        self.try_start(u, node, SimTime::ZERO)?;
                    }
                } else if let Some(&first) = self.stream_nodes[p][s as usize].first() {
                    self.try_start(u, first, SimTime::ZERO)?;
                }
            }
            for k in 0..self.stream_nodes[p][Stream::Free as usize].len() {
                let node = self.stream_nodes[p][Stream::Free as usize][k];
                self.try_start(u, node, SimTime::ZERO)?;
            }
        }
        Ok(total)
    }

    /// What the run found once its queue and the network are empty: the accounts, or a deadlock.
    fn end(mut self, total: u64) -> Result<EngineRun, SimError> {
        // A link change that left a transfer without a route: say so rather than "stalled".
        if let Some(e) = self.net.fault_error() {
            return Err(SimError::Scenario {
                field: "faults".into(),
                message: e.to_string(),
            });
        }
        if self.run.nodes_executed != total {
            // Blocking sends still waiting for their receivers: name the rendezvous and its knob.
            let parked = self.rv_parked.values().filter(|k| k.is_some()).count();
            let rendezvous = if parked > 0 {
                format!(
                    "; {parked} blocking pipeline send(s) wait for their receivers to post (NCCL's rendezvous beyond collectives.p2p_eager = {} bytes): sends that come before their receives on both sides need to be in one batch (adjacent), or set a larger collectives.p2p_eager",
                    self.opts.p2p_eager_bytes
                )
            } else {
                String::new()
            };
            if !self.finished.is_empty() {
                // Imported traces: the first unfinished node whose own dependencies all finished
                // waits on another rank (a receive without its send, a collective a member
                // never joins).
                let l = self.layout;
                let stuck = (0..l.units())
                    .find_map(|u| {
                        let prog = self.prog(u);
                        (0..prog.len() as u32)
                            .find(|&i| !self.finished[u as usize][i as usize] && prog.deps(i).iter().all(|d| self.finished[u as usize][*d as usize]))
                            .map(|i| (u, i))
                    })
                    .map(|(u, i)| {
                        format!(
                            "ranks {}-{} (unit {u}) wait forever at program node {i}: {:?}; the trace's sends and receives or collectives do not match",
                            l.rank(u, 0),
                            l.rank(u, l.tp - 1),
                            self.prog(u).nodes[i as usize].kind
                        )
                    })
                    .unwrap_or_default()
                    + &rendezvous;
                return Err(SimError::Deadlock {
                    executed: self.run.nodes_executed,
                    total,
                    stuck,
                });
            }
            let stuck = (0..self.layout.units())
                .filter(|u| self.active(*u))
                .find_map(|u| {
                    let st = self.prog_of[u as usize] as usize;
                    (0..Stream::COUNT).find_map(|s| {
                        let pos = self.us[u as usize].stream_pos[s] as usize;
                        self.stream_nodes[st][s].get(pos).map(|n| (u, *n))
                    })
                })
                .map(|(u, n)| {
                    format!(
                        "unit {u} node {n}: {:?} (a generator bug; please report)",
                        self.prog(u).nodes[n as usize]
                    )
                })
                .unwrap_or_default()
                + &rendezvous;
            return Err(SimError::Deadlock {
                executed: self.run.nodes_executed,
                total,
                stuck,
            });
        }
        let units = self.layout.units() as usize;
        if self.iterations == 1 {
            for (a, end) in self.acct.iter_mut().zip(self.us.iter().map(|x| x.last_compute_end)) {
                // Data-parallel work after the last kernel (parameter all-gathers after the
                // optimizer when they are not prefetched) is exposed DP time too.
                if a.finish > end {
                    a.exposed_dp += a.finish - end;
                }
            }
            self.run.iteration_time = self.acct.iter().map(|a| a.finish).max().unwrap_or(SimTime::ZERO);
        } else {
            // Steady state: iterations 2..N. Each iteration's wait for the previous one's
            // parameter all-gathers is charged to its first kernel, so the last iteration's
            // trailing gathers are not charged again.
            let n = self.iterations;
            let ends: Vec<SimTime> = (0..n)
                .map(|k| {
                    self.acct[k * units..(k + 1) * units]
                        .iter()
                        .map(|a| a.finish)
                        .max()
                        .unwrap_or(SimTime::ZERO)
                })
                .collect();
            self.run.iteration_time = SimTime::from_ps((ends[n - 1] - ends[0]).as_ps() / (n as u64 - 1));
            self.run.iteration_ends = ends;
            self.run.first_units = (0..units as u32)
                .filter(|u| self.active(*u))
                .map(|u| (u, self.acct[u as usize].clone()))
                .collect();
            for u in 0..units {
                let mut mean = UnitAccount::default();
                for k in 1..n {
                    mean.add(&self.acct[k * units + u]);
                }
                mean.div(n as u64 - 1);
                mean.finish = self.acct[(n - 1) * units + u].finish;
                self.acct[u] = mean;
            }
            self.acct.truncate(units);
        }
        self.run.units = std::mem::take(&mut self.acct)
            .into_iter()
            .enumerate()
            .filter(|(u, _)| self.active(*u as u32))
            .map(|(u, a)| (u as u32, a))
            .collect();
        self.net.finish()?;
        self.run.net = self.net.stats();
        self.run.packet = self.net.packet_details();
        self.run.plans_built = self.plan_cache.len();
        Ok(self.run)
    }

    fn on_event(&mut self, t: SimTime, e: Ev) -> Result<(), SimError> {
        match e {
            Ev::NodeDone { unit, node, epoch } => {
                if epoch != 0 {
                    let list = &mut self.us[unit as usize].slowed;
                    match list.iter().position(|r| r.node == node) {
                        Some(i) if list[i].epoch == epoch => {
                            list.swap_remove(i);
                        }
                        // Rescheduled since: a later event ends it.
                        _ => return Ok(()),
                    }
                }
                // A collective of one unit alone (closed form, `arrive`) ends here, not in
                // `finish_coll`: it leaves the DP in-flight count here too.
                let n = self.prog(unit).nodes[node as usize];
                if slows_compute(&n) {
                    self.dp_left(unit, t);
                }
                self.complete(unit, node, t)
            }
            Ev::CollDone { coll } => self.finish_coll(coll, t),
            Ev::PlanLocal { inst, node } => self.plan_node_done(inst, node, t),
            Ev::HostIssued { unit, node } => self.start_node(unit, node, t),
        }
    }

    fn on_transfer(&mut self, c: &Completion) -> Result<(), SimError> {
        let id = c.id.0;
        if self.opts.record_flows
            && let Some((start, kind, serial)) = self.flow_start.remove(&id)
        {
            self.run.flows.push(FlowRecord {
                id: serial,
                kind,
                src: c.src.0,
                dst: c.dst.0,
                bytes: c.bytes.0,
                start,
                finish: c.finish,
                recovered: self.net.transport_counters(c.id).unwrap_or_default(),
            });
        }
        if id & P2P_BIT != 0 {
            let k = (id & !P2P_REST_BIT) as u32;
            let inst = self.p2p[k as usize].as_mut().expect("live p2p");
            inst.left -= 1;
            if self.mirrors > 1 {
                // Which replica's copy: lane = replica * tp + tp rank, in bits 32..63.
                let replica = ((id & !P2P_BIT) >> 32) as u32 / self.layout.tp;
                let li = k as usize * self.mirrors as usize + replica as usize;
                self.p2p_lanes[li] -= 1;
                if self.p2p_lanes[li] == 0 && self.p2p_first[k as usize].is_none() {
                    self.p2p_first[k as usize] = Some(c.finish);
                }
                // Replica 0's own copy delivers the message (the fold's premise: every replica
                // moves with replica 0); the other copies stay on the network until they arrive.
                if self.p2p_lanes[li] == 0 && replica == 0 && !self.opts.stop_on_divergence {
                    inst.delivered = true;
                    let i = *inst;
                    self.deliver(i, c.finish)?;
                }
            }
            let inst = self.p2p[k as usize].as_mut().expect("live p2p");
            if inst.left == 0 {
                let inst = self.p2p[k as usize].take().expect("live p2p");
                self.free_p2p.push(k);
                if self.mirrors > 1 {
                    let first = self.p2p_first[k as usize].take().expect("a replica arrived first");
                    let f = &mut self.run.fold;
                    f.mirrored_messages += 1;
                    let spread = c.finish - first;
                    if spread > SimTime::ZERO {
                        f.diverged_messages += 1;
                        f.max_spread = f.max_spread.max(spread);
                        f.total_spread += spread;
                        f.first_divergence.get_or_insert(c.finish);
                        if self.opts.stop_on_divergence {
                            f.aborted = true;
                            return Ok(());
                        }
                    }
                }
                if inst.delivered {
                    return Ok(());
                }
                return self.deliver(inst, c.finish);
            }
            Ok(())
        } else {
            self.plan_node_done((id >> 32) as u32, id as u32, c.finish)
        }
    }

    /// Starts `node` of `unit` at `t` if its stream reached it and its dependencies finished.
    fn try_start(&mut self, unit: u32, node: u32, t: SimTime) -> Result<(), SimError> {
        let u = unit as usize;
        let st = self.prog_of[u] as usize;
        let slot = self.dep_slot[st][node as usize];
        if slot != NO_DEPS && self.us[u].deps_left[slot as usize] != 0 {
            return Ok(());
        }
        let n = self.prog(unit).nodes[node as usize];
        if n.stream != Stream::Free && self.prog(unit).stream_order[n.stream as usize] == SchedulingPolicy::Lifo {
            // A LIFO stream: queue the node; a free stream runs the last issued ready node.
            let s = n.stream as usize;
            debug_assert!(n.stream != Stream::Compute, "the compute stream runs in program order");
            self.stream_ready[u][s].push(node);
            return self.run_lifo(unit, s, t);
        }
        if n.stream != Stream::Free {
            let s = n.stream as usize;
            // One node per stream at a time: a node can be released twice (as its stream's next
            // node and as a dependent finishing inside the same completion).
            if self.us[u].stream_pos[s] != self.pos_in_stream[st][node as usize] || self.us[u].stream_busy[s] {
                return Ok(());
            }
            self.us[u].stream_busy[s] = true;
        }
        if n.stream == Stream::Compute
            && let Some(h) = self.opts.host.as_deref()
        {
            // The host issues this node after everything before it, once it is free; at a
            // synchronization only once the GPU got here.
            let mut base = self.us[u].host_at;
            if h.sync[st][node as usize] {
                base = base.max(t);
            }
            let (first, total) = match n.kind {
                DagNodeKind::Comp { segment } => {
                    let hs = h.seg[segment as usize];
                    (hs.first, hs.total)
                }
                _ => (h.call, h.call),
            };
            self.us[u].host_at = base + total;
            let issued = base + first;
            if issued > t {
                self.us[u].host_delay = issued - t;
                self.queue.push(issued, Ev::HostIssued { unit, node });
                return Ok(());
            }
        }
        self.start_node(unit, node, t)
    }

    /// A LIFO stream `s` of `unit`: if it is free, starts its ready node latest in program order.
    fn run_lifo(&mut self, unit: u32, s: usize, t: SimTime) -> Result<(), SimError> {
        let u = unit as usize;
        if self.us[u].stream_busy[s] {
            return Ok(());
        }
        let ready = &mut self.stream_ready[u][s];
        let Some((k, _)) = ready.iter().enumerate().max_by_key(|(_, n)| **n) else {
            return Ok(());
        };
        let node = ready.swap_remove(k);
        self.us[u].stream_busy[s] = true;
        self.start_node(unit, node, t)
    }

    /// Starts `node` of `unit` at `t`: its stream is reserved, its dependencies finished and
    /// the host issued it.
    fn start_node(&mut self, unit: u32, node: u32, t: SimTime) -> Result<(), SimError> {
        let u = unit as usize;
        let n = self.prog(unit).nodes[node as usize];
        if n.stream == Stream::Free {
            let slot = self.free_slot[self.prog_of[u] as usize][node as usize];
            self.node_start[u][slot as usize] = t;
        } else {
            self.us[u].stream_start[n.stream as usize] = t;
        }
        match n.kind {
            DagNodeKind::Comp { segment } => {
                if n.stream == Stream::Compute {
                    // What this kernel waited on: the communication that finished last, or a
                    // host copy that finished just now.
                    let copy = (self.us[u].last_offload == Some(t)).then_some(WaitOn::Offload);
                    self.us[u].waited_on = self.us[u].last_comm.take().or(copy);
                }
                let mut d = self.seg_time[segment as usize];
                if let Some(slow) = self.opts.compute_slowdown.get(u)
                    && n.stream != Stream::Offload
                {
                    let x = slow.iter().filter(|e| e.0 <= t).map(|e| e.1).fold(1.0, f64::max);
                    if x != 1.0 {
                        d = SimTime::from_ps_f64(d.as_ps() as f64 * x);
                    }
                }
                // Host copies run on a copy engine: no SMs for NCCL to take. Other nodes run
                // slower while DP communication is in flight (and only then: `Slowed`).
                let slowable = n.stream != Stream::Offload && self.opts.overlap_slowdown > 1.0;
                let work = d;
                if slowable && self.us[u].dp_in_flight > 0 {
                    d = SimTime::from_ps_f64(d.as_ps() as f64 * self.opts.overlap_slowdown);
                }
                // The segment's last kernel runs only after the host issued it.
                let mut floor = SimTime::ZERO;
                if n.stream == Stream::Compute
                    && let Some(h) = self.opts.host.as_deref()
                {
                    let end = self.us[u].host_at + h.seg[segment as usize].last_gpu;
                    floor = end;
                    if end > t + d {
                        self.us[u].host_tail = end - (t + d);
                        d = end - t;
                    }
                }
                let epoch = if slowable {
                    let epoch = self.next_epoch();
                    self.us[u].slowed.push(Slowed {
                        node,
                        left_ps: work.as_ps() as f64,
                        since: t,
                        floor,
                        epoch,
                    });
                    epoch
                } else {
                    0
                };
                self.queue.push(t + d, Ev::NodeDone { unit, node, epoch });
            }
            DagNodeKind::CommColl { op, group, bytes } => {
                if slows_compute(&n) {
                    self.us[u].dp_in_flight += 1;
                    if self.us[u].dp_in_flight == 1 {
                        self.reslow(unit, t, false);
                    }
                }
                self.arrive(unit, node, op, group, bytes, t)?;
            }
            DagNodeKind::CommSend { peer, bytes, tag } => {
                let dst_unit = self.layout.peer_unit(unit, peer);
                if self.opts.ideal_comm || bytes == 0 {
                    let inst = P2pInst {
                        left: 0,
                        delivered: false,
                        unit,
                        node,
                        dst_unit,
                        tag,
                        rest: 0,
                        wire: t,
                    };
                    return self.deliver(inst, t);
                }
                let blocking = self.rendezvous && n.stream == Stream::Compute;
                if blocking {
                    self.post_batch(unit, t)?;
                }
                let k = match self.free_p2p.pop() {
                    Some(k) => k,
                    None => {
                        self.p2p.push(None);
                        (self.p2p.len() - 1) as u32
                    }
                };
                // A blocking send whose receiver has not posted yet moves what the receiver's
                // FIFO holds and the rest once the receive is posted.
                let key = (unit, dst_unit, tag);
                let posted = !blocking || self.rv_posted.remove(&key).is_some();
                let rest = if posted {
                    0
                } else {
                    bytes.saturating_sub(self.opts.p2p_eager_bytes)
                };
                let parts = if rest > 0 { 2 } else { 1 };
                let l = self.layout;
                let m = self.mirrors;
                self.p2p[k as usize] = Some(P2pInst {
                    left: l.tp * m * parts,
                    delivered: false,
                    unit,
                    node,
                    dst_unit,
                    tag,
                    rest,
                    wire: t,
                });
                if m > 1 {
                    let need = (k as usize + 1) * m as usize;
                    if self.p2p_lanes.len() < need {
                        self.p2p_lanes.resize(need, 0);
                        self.p2p_first.resize(k as usize + 1, None);
                    }
                    self.p2p_lanes[k as usize * m as usize..need].fill(l.tp * parts);
                }
                if !posted {
                    self.rv_parked.insert(key, (rest > 0).then_some(k));
                }
                self.send_lanes(k, bytes - rest, false, t)?;
            }
            DagNodeKind::CommRecv { peer, tag, .. } => {
                if self.rendezvous && n.stream == Stream::Compute {
                    self.post_batch(unit, t)?;
                }
                let src_unit = self.layout.peer_unit(unit, peer);
                match self.mail.remove(&(src_unit, unit, tag)) {
                    Some(Mail::Arrived { sent, at }) => {
                        self.account_recv(unit, node, t, sent, at);
                        self.complete(unit, node, t.max(at))?;
                    }
                    Some(Mail::Waiting { .. }) => {
                        return Err(SimError::Internal(format!("unit {unit}: two receives with tag {tag:?}")));
                    }
                    None => {
                        self.mail.insert((src_unit, unit, tag), Mail::Waiting { node, posted: t });
                    }
                }
            }
        }
        Ok(())
    }

    /// Puts `bytes` of each lane of p2p slot `k` on the network at `t` (every mirrored
    /// replica's copy too): the whole message, its eager head or (`rest`) what follows it.
    fn send_lanes(&mut self, k: u32, bytes: u64, rest: bool, t: SimTime) -> Result<(), SimError> {
        let inst = self.p2p[k as usize].expect("live p2p");
        let (unit, dst_unit, tag) = (inst.unit, inst.dst_unit, inst.tag);
        let l = self.layout;
        let m = self.mirrors;
        // Replica 0's send, then (mirroring) every other replica's copy of it, each with
        // the hash and ranks of that replica's own send in the plain run.
        let ((c, _, p), (dc, _, dpp)) = (l.coords(unit), l.coords(dst_unit));
        let part = if rest { P2P_REST_BIT } else { 0 };
        for r in 0..m {
            let (su, du) = if m > 1 {
                (l.unit(c, r, p), l.unit(dc, r, dpp))
            } else {
                (unit, dst_unit)
            };
            for i in 0..l.tp {
                let src = host_of(&self.opts.hosts, l.rank(su, i));
                let dst = host_of(&self.opts.hosts, l.rank(du, i));
                // Low 31 bits: the message, bit 31 its part; bits 32..: the lane (replica * tp
                // + tp rank).
                let tid = P2P_BIT | part | (((r * l.tp + i) as u64) << 32) | k as u64;
                self.submit(
                    Transfer {
                        id: TransferId(tid),
                        src,
                        dst,
                        bytes: Bytes(bytes),
                        start: t,
                        flow_hash: llmsim_core::mix64(((su as u64) << 32) ^ (tag.microbatch as u64) << 8 ^ i as u64),
                        route: RouteSpec::Direct,
                    },
                    "pp",
                )?;
            }
        }
        Ok(())
    }

    /// `unit`'s compute stream reached a pipeline send or receive at `t`: the receives of the
    /// batch it opens (the run of sends and receives adjacent in the stream, which Megatron
    /// issues as one `batch_isend_irecv`) are posted, and each blocking send parked on one of
    /// them sends the rest of its message.
    fn post_batch(&mut self, unit: u32, t: SimTime) -> Result<(), SimError> {
        let u = unit as usize;
        let st = self.prog_of[u] as usize;
        let s = Stream::Compute as usize;
        let mut pos = self.us[u].stream_pos[s];
        if pos < self.us[u].posted_until {
            return Ok(());
        }
        let prog = self.prog(unit);
        while let Some(&i) = self.stream_nodes[st][s].get(pos as usize) {
            match prog.nodes[i as usize].kind {
                DagNodeKind::CommSend { .. } => {}
                DagNodeKind::CommRecv { peer, tag, .. } => {
                    let key = (self.layout.peer_unit(unit, peer), unit, tag);
                    match self.rv_parked.remove(&key) {
                        Some(None) => {}
                        Some(Some(k)) => {
                            let inst = self.p2p[k as usize].as_mut().expect("live p2p");
                            let rest = std::mem::take(&mut inst.rest);
                            inst.wire = t;
                            self.send_lanes(k, rest, true, t)?;
                        }
                        None => {
                            self.rv_posted.insert(key, t);
                        }
                    }
                }
                _ => break,
            }
            pos += 1;
        }
        self.us[u].posted_until = pos;
        Ok(())
    }

    fn submit(&mut self, tr: Transfer, kind: &'static str) -> Result<(), SimError> {
        if self.opts.record_flows {
            let serial = self.flow_serial;
            self.flow_serial += 1;
            self.flow_start.insert(tr.id.0, (tr.start, kind, serial));
        }
        match &self.opts.traffic_classes {
            Some(tc) => self.net.submit_in_class(tr, tc.of(kind))?,
            None => self.net.submit(tr)?,
        }
        Ok(())
    }

    fn account_recv(&mut self, unit: u32, node: u32, posted: SimTime, sent: SimTime, at: SimTime) {
        if self.prog(unit).nodes[node as usize].stream == Stream::Free {
            // Only the kernels that wait on it see this receive's time (see `complete`).
            self.us[unit as usize].last_comm = Some(WaitOn::Recv { sent });
            return;
        }
        let ai = self.acct_index(unit, node);
        let a = &mut self.acct[ai];
        if at > posted {
            let on_wire_from = sent.max(posted);
            a.exposed_pp += at - on_wire_from;
            a.bubble += on_wire_from - posted;
        }
    }

    /// A pipeline message fully arrived at `t`.
    fn deliver(&mut self, inst: P2pInst, t: SimTime) -> Result<(), SimError> {
        let sent = self.started(inst.unit, inst.node);
        if self.prog(inst.unit).nodes[inst.node as usize].stream == Stream::Compute {
            // A blocking send held the compute stream: waiting for its receiver is pipeline
            // bubble, the transfer from then on exposed pipeline communication.
            let ai = self.acct_index(inst.unit, inst.node);
            let from = inst.wire.clamp(sent, t);
            let a = &mut self.acct[ai];
            a.bubble += from - sent;
            a.exposed_pp += t - from;
        }
        self.complete(inst.unit, inst.node, t)?;
        let key = (inst.unit, inst.dst_unit, inst.tag);
        match self.mail.remove(&key) {
            Some(Mail::Waiting { node, posted }) => {
                self.account_recv(inst.dst_unit, node, posted, sent, t);
                self.complete(inst.dst_unit, node, t)
            }
            Some(Mail::Arrived { .. }) => Err(SimError::Internal(format!("two messages with tag {:?}", inst.tag))),
            None => {
                self.mail.insert(key, Mail::Arrived { sent, at: t });
                Ok(())
            }
        }
    }

    /// The group instance of `unit` for `group`, created on first use.
    fn group_of(&mut self, unit: u32, group: Group) -> u32 {
        if let Some(g) = self.unit_groups[unit as usize].get(&group) {
            return *g;
        }
        let l = self.layout;
        // (key, member units, one host set over every lane of every member)
        let (key, all_units, spans_lanes) = match (group, &self.wl.explicit) {
            (Group::Pg(i), Some(x)) => {
                let pg = &x.groups[i as usize];
                (i, pg.units.clone(), pg.spans_lanes)
            }
            _ => {
                let (key, units) = l.group_units(unit, group).expect("symbolic group");
                (key, units, l.spans_lanes(group))
            }
        };
        let gid = match self.group_index.get(&(group, key)) {
            Some(g) => *g,
            None => {
                let units: Vec<u32> = all_units.iter().copied().filter(|x| l.coords(*x).1 < self.opts.active_dp).collect();
                let hosts = &self.opts.hosts;
                let host_sets: Vec<Vec<NodeId>> = l
                    .lane_rank_sets(&all_units, spans_lanes)
                    .into_iter()
                    .map(|ranks| ranks.into_iter().map(|r| host_of(hosts, r)).collect())
                    .collect();
                let intra_server = host_sets.iter().all(|hs| {
                    let s0 = self.topo.server_of(hs[0]);
                    hs.iter().all(|h| self.topo.server_of(*h) == s0)
                });
                let kind = match (group, &self.wl.explicit) {
                    (Group::Pg(i), Some(x)) => x.groups[i as usize].kind.name(),
                    _ => group.name(),
                };
                let gid = self.groups.len() as u32;
                self.groups.push(GroupInst {
                    group,
                    kind,
                    issued: vec![0; units.len()],
                    units,
                    host_sets,
                    pending: FastMap::default(),
                    intra_server,
                });
                self.group_index.insert((group, key), gid);
                gid
            }
        };
        self.unit_groups[unit as usize].insert(group, gid);
        gid
    }

    /// What a collective over `group` counts as in the report.
    fn group_kind(&self, group: Group) -> Group {
        match (group, &self.wl.explicit) {
            (Group::Pg(i), Some(x)) => x.groups[i as usize].kind,
            _ => group,
        }
    }

    /// A collective of `unit` alone inside one server (TP): closed form, no bookkeeping.
    fn arrive_closed(&mut self, unit: u32, node: u32, op: CollectiveOp, bytes: u64, t: SimTime, c: ClosedGroup) {
        self.run.collectives += 1;
        count_group(&mut self.run.collectives_by_group, c.kind, false);
        let d = if self.opts.ideal_comm {
            SimTime::ZERO
        } else {
            self.intra_server_time(op, c.group, bytes, c.ranks)
        };
        self.queue.push(t + d, Ev::NodeDone { unit, node, epoch: 0 });
    }

    /// Time of `op` over `group` on `bytes` inside one NVLink domain of `ranks` GPUs: an
    /// expert-parallel all-to-all of the `flex` dispatcher at its measured kernels' rate
    /// ([`ScaleUpModel::flex_time`]), any other collective by [`Self::scale_up_time`].
    fn intra_server_time(&mut self, op: CollectiveOp, group: Group, bytes: u64, ranks: u32) -> SimTime {
        if op == CollectiveOp::AllToAll
            && self.opts.scale_up.flex_all_to_all.is_some()
            && matches!(self.group_kind(group), Group::Ep | Group::EpIntra)
        {
            return self.opts.scale_up.flex_time(Bytes(bytes), ranks);
        }
        self.scale_up_time(op, bytes, ranks)
    }

    /// [`ScaleUpModel::time`] of `op` on `bytes` over `ranks` GPUs, from the memo when it was
    /// asked lately (the same value: the formula depends on these three alone).
    fn scale_up_time(&mut self, op: CollectiveOp, bytes: u64, ranks: u32) -> SimTime {
        let key = (op, bytes, ranks);
        if let Some(&(_, _, _, d)) = self.scale_up_memo.iter().flatten().find(|m| (m.0, m.1, m.2) == key) {
            return d;
        }
        let d = self.opts.scale_up.time(op, Bytes(bytes), ranks);
        self.scale_up_memo[self.scale_up_next] = Some((op, bytes, ranks, d));
        self.scale_up_next = (self.scale_up_next + 1) % SCALE_UP_MEMO;
        d
    }

    fn arrive(&mut self, unit: u32, node: u32, op: CollectiveOp, group: Group, bytes: u64, t: SimTime) -> Result<(), SimError> {
        if let Some(c) = self.us[unit as usize].closed_group
            && c.group == group
        {
            self.arrive_closed(unit, node, op, bytes, t, c);
            return Ok(());
        }
        let gid = self.group_of(unit, group);
        let g = &mut self.groups[gid as usize];
        if g.units.len() == 1 && (g.intra_server || self.opts.ideal_comm) {
            let c = ClosedGroup {
                group,
                ranks: g.host_sets[0].len() as u32,
                kind: g.kind,
            };
            self.us[unit as usize].closed_group = Some(c);
            self.arrive_closed(unit, node, op, bytes, t, c);
            return Ok(());
        }
        let pos = g.units.iter().position(|x| *x == unit).expect("member");
        let seq = if self.coll_seq.is_empty() {
            g.issued[pos]
        } else {
            self.coll_seq[self.prog_of[unit as usize] as usize][node as usize]
        };
        g.issued[pos] += 1;
        let n = g.units.len() as u32;
        let p = g.pending.entry(seq).or_insert_with(|| Pending {
            arrived: 0,
            members: Vec::with_capacity(n as usize),
        });
        // Members match by the order they issue their collectives. A LIFO stream picks among
        // its ready collectives, so members that share a program must pick alike.
        if let Some(&(u0, n0)) = p.members.first()
            && n0 != node
            && self.prog_of[u0 as usize] == self.prog_of[unit as usize]
            && self.wl.stages[self.prog_of[unit as usize] as usize]
                .stream_order
                .contains(&SchedulingPolicy::Lifo)
        {
            return Err(SimError::Internal(format!(
                "units {u0} and {unit} issued different collectives (program nodes {n0} and {node}) as their collective {seq} over group {}: a LIFO stream needs its group's members to see the same ready collectives",
                group.name()
            )));
        }
        p.arrived += 1;
        p.members.push((unit, node));
        if p.arrived < n {
            return Ok(());
        }
        let p = g.pending.remove(&seq).expect("just seen");
        self.start_coll(gid, p.members, op, bytes, t)
    }

    fn start_coll(&mut self, gid: u32, members: Vec<(u32, u32)>, op: CollectiveOp, bytes: u64, t: SimTime) -> Result<(), SimError> {
        self.run.collectives += 1;
        let cid = match self.free_colls.pop() {
            Some(c) => c,
            None => {
                self.colls.push(None);
                (self.colls.len() - 1) as u32
            }
        };
        let g = &self.groups[gid as usize];
        let nranks = g.host_sets[0].len() as u32;
        let on_network = !(self.opts.ideal_comm || nranks < 2 || bytes == 0 || g.intra_server);
        count_group(&mut self.run.collectives_by_group, g.kind, on_network);
        if self.opts.ideal_comm || nranks < 2 || bytes == 0 {
            self.colls[cid as usize] = Some(CollInst { plans_left: 0, members });
            self.queue.push(t, Ev::CollDone { coll: cid });
            return Ok(());
        }
        if g.intra_server {
            let group = g.group;
            let d = self.intra_server_time(op, group, bytes, nranks);
            self.colls[cid as usize] = Some(CollInst { plans_left: 0, members });
            self.queue.push(t + d, Ev::CollDone { coll: cid });
            return Ok(());
        }
        self.run.collectives_on_network += 1;
        let sets = g.host_sets.len() as u32;
        let kind = g.kind;
        self.colls[cid as usize] = Some(CollInst { plans_left: sets, members });
        for si in 0..sets {
            let key = (gid, si, op, bytes);
            let prep = match self.plan_cache.get(&key) {
                Some(p) => p.clone(),
                None => {
                    let hosts = &self.groups[gid as usize].host_sets[si as usize];
                    let planned = plan_collective(&self.topo, op, Bytes(bytes), hosts, &self.opts.plan, &self.opts.scale_up)?;
                    let p = Arc::new(Prepared::new(planned.plan));
                    self.plan_cache.insert(key, p.clone());
                    p
                }
            };
            self.start_plan(prep, cid, kind, t)?;
        }
        Ok(())
    }

    fn start_plan(&mut self, prep: Arc<Prepared>, coll: u32, kind: &'static str, t: SimTime) -> Result<(), SimError> {
        let n = prep.plan.len();
        let inst = match self.free_plans.pop() {
            Some(i) => i,
            None => {
                self.plans.push(None);
                (self.plans.len() - 1) as u32
            }
        };
        if n == 0 {
            self.plans[inst as usize] = None;
            self.free_plans.push(inst);
            return self.plan_finished(coll, t);
        }
        self.plans[inst as usize] = Some(PlanInst {
            prep: prep.clone(),
            cursor: PlanCursor::start(&prep.plan, t),
            coll,
            kind,
        });
        for i in PlanCursor::roots(&prep.plan) {
            self.launch_plan_node(inst, i)?;
        }
        Ok(())
    }

    fn launch_plan_node(&mut self, inst: u32, i: u32) -> Result<(), SimError> {
        let p = self.plans[inst as usize].as_ref().expect("live plan");
        let t0 = p.cursor.ready_at(i);
        let node = p.prep.plan.node(i);
        match node.step.start(TransferId(((inst as u64) << 32) | i as u64), t0) {
            StepStart::Network(tr) => {
                let kind = p.kind;
                self.submit(tr, kind)?;
            }
            StepStart::EndsAt(t) => self.queue.push(t, Ev::PlanLocal { inst, node: i }),
        }
        Ok(())
    }

    fn plan_node_done(&mut self, inst: u32, i: u32, t: SimTime) -> Result<(), SimError> {
        let p = self.plans[inst as usize].as_mut().expect("live plan");
        // The released nodes, in a buffer kept across events (no allocation per event).
        let mut launch = std::mem::take(&mut self.released);
        launch.clear();
        p.cursor.finish(&p.prep.plan, &p.prep.edges, i, t, &mut launch);
        if p.cursor.remaining() == 0 {
            let coll = p.coll;
            self.plans[inst as usize] = None;
            self.free_plans.push(inst);
            self.released = launch;
            return self.plan_finished(coll, t);
        }
        for &d in &launch {
            self.launch_plan_node(inst, d)?;
        }
        self.released = launch;
        Ok(())
    }

    fn plan_finished(&mut self, coll: u32, t: SimTime) -> Result<(), SimError> {
        let c = self.colls[coll as usize].as_mut().expect("live collective");
        c.plans_left -= 1;
        if c.plans_left == 0 {
            self.finish_coll(coll, t)?;
        }
        Ok(())
    }

    /// A new [`Slowed`] epoch. It wraps (a run would need 4 G node starts and reschedules) and
    /// skips 0, which marks a completion no record tracks.
    fn next_epoch(&mut self) -> u32 {
        self.slowed_epoch = self.slowed_epoch.wrapping_add(1).max(1);
        self.slowed_epoch
    }

    /// One of `unit`'s DP collectives finished at `t`: the last one lets its slowed nodes run at
    /// full speed again.
    fn dp_left(&mut self, unit: u32, t: SimTime) {
        let u = unit as usize;
        self.us[u].dp_in_flight -= 1;
        if self.us[u].dp_in_flight == 0 {
            self.reslow(unit, t, true);
        }
    }

    /// `unit`'s DP communication started (`was_slow` false) or stopped (true) at `t`: each of its
    /// running [`Slowed`] nodes banks the work done at the old speed and is rescheduled at the
    /// new one (the event already queued goes stale).
    fn reslow(&mut self, unit: u32, t: SimTime, was_slow: bool) {
        let s = self.opts.overlap_slowdown;
        let (old, new) = if was_slow { (s, 1.0) } else { (1.0, s) };
        let u = unit as usize;
        for i in 0..self.us[u].slowed.len() {
            let epoch = self.next_epoch();
            let r = &mut self.us[u].slowed[i];
            let done = (t - r.since).as_ps() as f64 / old;
            r.left_ps = (r.left_ps - done).max(0.0);
            r.since = t;
            r.epoch = epoch;
            let end = (t + SimTime::from_ps_f64(r.left_ps * new)).max(r.floor);
            let (node, epoch) = (r.node, r.epoch);
            self.queue.push(end, Ev::NodeDone { unit, node, epoch });
        }
    }

    fn finish_coll(&mut self, coll: u32, t: SimTime) -> Result<(), SimError> {
        let c = self.colls[coll as usize].take().expect("live collective");
        self.free_colls.push(coll);
        for &(unit, node) in &c.members {
            let n = self.prog(unit).nodes[node as usize];
            if slows_compute(&n) {
                self.dp_left(unit, t);
            }
            self.complete(unit, node, t)?;
        }
        Ok(())
    }

    /// `node` of `unit` finished at `t`: advance its stream and release its dependents.
    fn complete(&mut self, unit: u32, node: u32, t: SimTime) -> Result<(), SimError> {
        let u = unit as usize;
        let st = self.prog_of[unit as usize] as usize;
        let prog = self.prog(unit);
        let n = prog.nodes[node as usize];
        self.run.nodes_executed += 1;
        if let Some(f) = self.finished.get_mut(u) {
            f[node as usize] = true;
        }
        let start = self.started(unit, node);
        let ai = self.acct_index(unit, node);
        let (mut delay, mut tail) = (SimTime::ZERO, SimTime::ZERO);
        if n.stream == Stream::Compute && self.opts.host.is_some() {
            delay = std::mem::take(&mut self.us[u].host_delay);
            tail = std::mem::take(&mut self.us[u].host_tail);
            self.acct[ai].exposed_host += delay + tail;
        }
        match n.kind {
            DagNodeKind::Comp { .. } if n.stream == Stream::Offload => {
                self.us[u].last_offload = Some(t);
            }
            DagNodeKind::Comp { .. } if n.stream != Stream::Free => {
                let a = &mut self.acct[ai];
                a.compute += t - start - tail;
                let e = self.us[u].last_compute_end;
                let waited_on = self.us[u].waited_on.take();
                // The wait before the host issued the kernel is the host's, counted above.
                let start = start.saturating_sub(delay).max(e);
                if start > e {
                    match waited_on {
                        // Imported traces: the kernel waited on free communication.
                        Some(WaitOn::Coll(kind)) => *a.exposed_mut(kind) += start - e,
                        Some(WaitOn::Offload) => a.exposed_offload += start - e,
                        Some(WaitOn::Recv { sent }) => {
                            let bubble = sent.clamp(e, start) - e;
                            a.bubble += bubble;
                            a.exposed_pp += start - e - bubble;
                        }
                        // A kernel waits only on data-parallel work (stream order covers the
                        // rest): the optimizer on gradient reduction, a first forward on its
                        // prefetched parameter all-gather.
                        None => a.exposed_dp += start - e,
                    }
                }
                self.us[u].last_compute_end = t;
            }
            DagNodeKind::CommColl { group, .. } if n.stream == Stream::Compute => {
                let kind = self.group_kind(group);
                *self.acct[ai].exposed_mut(kind) += t - start;
                self.us[u].last_compute_end = t;
            }
            DagNodeKind::CommColl { group, .. } if n.stream == Stream::Free => {
                self.us[u].last_comm = Some(WaitOn::Coll(self.group_kind(group)));
            }
            DagNodeKind::CommRecv { .. } if n.stream != Stream::Free => {
                self.us[u].last_compute_end = t;
            }
            DagNodeKind::CommSend { .. } if n.stream == Stream::Compute => {
                self.us[u].last_compute_end = t;
            }
            _ => {}
        }
        if self.acct[ai].finish < t {
            self.acct[ai].finish = t;
        }
        if self.opts.trace_units.contains(&unit) {
            self.run.spans.push(Span {
                unit,
                stream: n.stream,
                node,
                start,
                end: t,
            });
        }
        let s = n.stream as usize;
        let lifo = n.stream != Stream::Free && prog.stream_order[s] == SchedulingPolicy::Lifo;
        let next = if n.stream == Stream::Free {
            None
        } else {
            self.us[u].stream_busy[s] = false;
            self.us[u].stream_pos[s] += 1;
            // A LIFO stream's ready nodes are started below, once this completion released its
            // dependents.
            (!lifo)
                .then(|| self.stream_nodes[st][s].get(self.us[u].stream_pos[s] as usize).copied())
                .flatten()
        };
        for k in self.dependents[st].range(node) {
            let d = self.dependents[st].node[k];
            let left = &mut self.us[u].deps_left[self.dep_slot[st][d as usize] as usize];
            *left -= 1;
            if *left == 0 {
                self.try_start(unit, d, t)?;
            }
        }
        if let Some(nx) = next {
            self.try_start(unit, nx, t)?;
        }
        if lifo {
            self.run_lifo(unit, s, t)?;
        }
        Ok(())
    }
}

/// Counts one collective of group kind `kind` (a linear search: a run has a handful of kinds).
/// Bits 56..62 of a transfer id carry its job in a run of several jobs ([`run_jobs`]); an
/// engine's own ids use bits 0..55 and 63 (plan instances and pipeline lanes below 2^24).
const JOB_SHIFT: u32 = 56;
const JOB_MASK: u64 = 0x7f << JOB_SHIFT;
/// Jobs one shared network carries at most (the job bits of a transfer id).
pub const MAX_JOBS: usize = 128;

/// One job's view of a network that several jobs share: its transfers carry the job in their
/// id, and (from the second job on) a flow hash salted by it, as two jobs' flows differ in
/// their addresses on a real fabric. The coordinator ([`run_jobs`]) advances the shared network.
pub struct JobNet {
    shared: Rc<RefCell<Box<dyn Network>>>,
    topo: Arc<Topology>,
    job: u64,
}

impl JobNet {
    /// Job `job`'s view of `shared` (on `topo`).
    #[must_use]
    pub fn new(shared: Rc<RefCell<Box<dyn Network>>>, topo: Arc<Topology>, job: usize) -> Self {
        JobNet {
            shared,
            topo,
            job: job as u64,
        }
    }

    /// `t` with this job in its id and (from the second job on) its flow hash.
    fn tagged(&self, mut t: Transfer) -> Result<Transfer, llmsim_net::NetError> {
        if t.id.0 & JOB_MASK != 0 {
            return Err(llmsim_net::NetError::Backend(format!(
                "transfer id {:#x} uses the job bits: too many collectives or pipeline lanes in flight for a run of several jobs",
                t.id.0
            )));
        }
        t.id = TransferId(t.id.0 | self.job << JOB_SHIFT);
        if self.job > 0 {
            t.flow_hash = llmsim_core::mix64(t.flow_hash ^ self.job.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        Ok(t)
    }
}

impl Network for JobNet {
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn now(&self) -> SimTime {
        self.shared.borrow().now()
    }
    fn submit(&mut self, t: Transfer) -> Result<(), llmsim_net::NetError> {
        let t = self.tagged(t)?;
        self.shared.borrow_mut().submit(t)
    }
    fn submit_in_class(&mut self, t: Transfer, class: u8) -> Result<(), llmsim_net::NetError> {
        let t = self.tagged(t)?;
        self.shared.borrow_mut().submit_in_class(t, class)
    }
    fn next_event_time(&self) -> Option<SimTime> {
        self.shared.borrow().next_event_time()
    }
    fn advance_to(&mut self, _t: SimTime, _done: &mut Vec<Completion>) {
        unreachable!("the coordinator advances the shared network")
    }
    fn in_flight(&self) -> usize {
        self.shared.borrow().in_flight()
    }
    fn fault_error(&self) -> Option<llmsim_net::NetError> {
        self.shared.borrow().fault_error()
    }
    fn stats(&self) -> NetStats {
        self.shared.borrow().stats()
    }
    fn transport_counters(&self, id: TransferId) -> Option<llmsim_net::TransportCounters> {
        self.shared.borrow().transport_counters(TransferId(id.0 | self.job << JOB_SHIFT))
    }
    fn packet_details(&self) -> Option<llmsim_net::PacketDetails> {
        self.shared.borrow().packet_details()
    }
    fn set_link_bytes(&mut self, on: bool) {
        self.shared.borrow_mut().set_link_bytes(on);
    }
}

/// Runs several jobs' engines together on one network: `(job, engine)` pairs, each engine built
/// on the [`JobNet`] of `shared` for that job (jobs distinct, below [`MAX_JOBS`]). Local events
/// at one time run engine by engine in order, before the network's; each completion goes to
/// the job its id names. With one engine this is [`SystemEngine::run`] step for step (the same
/// events in the same order).
///
/// # Errors
/// As [`SystemEngine::run`], from the first job that fails.
pub fn run_jobs(
    jobs: Vec<(usize, SystemEngine<'_>)>,
    shared: &Rc<RefCell<Box<dyn Network>>>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<EngineRun>, SimError> {
    let mut slot = [usize::MAX; MAX_JOBS];
    for (k, (job, _)) in jobs.iter().enumerate() {
        if *job >= MAX_JOBS || slot[*job] != usize::MAX {
            return Err(SimError::Scenario {
                field: "jobs".into(),
                message: format!("job {job}: at most {MAX_JOBS} jobs, each once, share one network"),
            });
        }
        slot[*job] = k;
    }
    let mut engines: Vec<SystemEngine<'_>> = jobs.into_iter().map(|(_, e)| e).collect();
    let totals = engines.iter_mut().map(SystemEngine::begin).collect::<Result<Vec<u64>, _>>()?;
    let total: u64 = totals.iter().sum();
    let mut finished: Vec<(SimTime, Ev)> = Vec::new();
    let mut done: Vec<Completion> = Vec::new();
    let executed = |es: &[SystemEngine<'_>]| es.iter().map(|e| e.run.nodes_executed).sum::<u64>();
    let mut last_report = 0u64;
    let report_every = (total / 200).clamp(1, 65_536);
    progress(0, total);
    let live = engines.iter().find_map(|e| e.opts.live.clone());
    let (mut steps, mut now) = (0u64, SimTime::ZERO);
    loop {
        let tl = engines.iter_mut().filter_map(|e| e.queue.peek_time()).min();
        let tn = shared.borrow().next_event_time();
        steps += 1;
        if let Some(l) = live.as_deref().filter(|_| steps.is_multiple_of(LIVE_EVERY)) {
            let net = shared.borrow();
            l.record(now.max(net.now()), &net.stats());
        }
        match (tl, tn) {
            (None, None) => break,
            (Some(l), _) if tn.is_none_or(|n| l <= n) => {
                now = l;
                for e in &mut engines {
                    if e.queue.peek_time() == Some(l) {
                        e.run_local(l, &mut finished)?;
                    }
                }
            }
            (_, Some(_)) => {
                done.clear();
                shared.borrow_mut().advance_until_completion(before(tl), &mut done);
                for c in &done {
                    let job = ((c.id.0 & JOB_MASK) >> JOB_SHIFT) as usize;
                    let own = Completion {
                        id: TransferId(c.id.0 & !JOB_MASK),
                        ..*c
                    };
                    engines[slot[job]].on_transfer(&own)?;
                }
            }
            (Some(_), None) => unreachable!("covered by the guard above"),
        }
        let n = executed(&engines);
        if n - last_report >= report_every {
            last_report = n;
            progress(n, total);
        }
    }
    progress(executed(&engines), total);
    let runs = engines
        .into_iter()
        .zip(totals)
        .map(|(e, t)| e.end(t))
        .collect::<Result<Vec<_>, _>>()?;
    shared.borrow_mut().finish()?;
    Ok(runs)
}

/// The topology host of `rank`: itself, or its placed host.
#[inline]
fn host_of(hosts: &Option<Arc<[u32]>>, rank: u32) -> NodeId {
    NodeId(hosts.as_ref().map_or(rank, |h| h[rank as usize]))
}

/// The latest time strictly before the next local event (`SimTime::MAX` when none).
fn before(tl: Option<SimTime>) -> SimTime {
    tl.map_or(SimTime::MAX, |l| SimTime::from_ps(l.as_ps() - 1))
}

fn count_group(counts: &mut Vec<GroupCount>, kind: &'static str, on_network: bool) {
    let i = match counts.iter().position(|c| c.group == kind) {
        Some(i) => i,
        None => {
            counts.push(GroupCount {
                group: kind,
                collectives: 0,
                on_network: 0,
            });
            counts.len() - 1
        }
    };
    counts[i].collectives += 1;
    counts[i].on_network += u64::from(on_network);
}
