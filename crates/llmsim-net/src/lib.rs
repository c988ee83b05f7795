#![doc = include_str!("../README.md")]

use std::sync::Arc;

use llmsim_core::{Bytes, LinkId, NodeId, SimTime, TransferId};
use llmsim_topo::{TopoError, Topology};
use thiserror::Error;

pub mod analytical;
pub mod flow;
pub mod packet;
pub mod route;

pub use analytical::AnalyticalNetwork;
pub use flow::FlowNetwork;
pub use packet::PacketNetwork;
pub use route::{RouteLink, RouteSummary};

/// How a transfer's bytes travel from `src` to `dst`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteSpec {
    /// The topology's route from `src` to `dst`.
    Direct,
    /// Relayed through another host: `src -> via -> dst` (NCCL PXN: inter-node traffic leaves
    /// through the NIC of the GPU on the destination's rail, reached over NVLink).
    Via(NodeId),
    /// A pipelined chain through hosts `src -> hops[0] -> … -> dst`, carried as **one** flow
    /// whose rate is shared on every link of every leg (a link used by k legs carries k times the
    /// rate). This is a pipelined ring channel in steady state. Latency: the largest leg latency;
    /// pipeline fill is the caller's to add.
    ///
    /// Leg `i` is routed with its own ECMP hash ([`route::leg_hash`]), as each hop of a ring is
    /// its own connection; leg 0 (and a `Via` route's first leg) keeps `flow_hash`.
    Chain(Arc<[NodeId]>),
}

/// A point-to-point transfer handed to a network backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Its id, unique among transfers in flight.
    pub id: TransferId,
    /// The sending host.
    pub src: NodeId,
    /// The receiving host.
    pub dst: NodeId,
    /// Payload bytes to move.
    pub bytes: Bytes,
    /// When the first byte may leave; must not be before the network's `now()` at submission.
    pub start: SimTime,
    /// The 5-tuple hash ECMP uses.
    pub flow_hash: u64,
    /// How the bytes travel: directly, via a relay host, or along a chain.
    pub route: RouteSpec,
}

impl Transfer {
    /// Its completion record, the last byte having arrived at `finish`.
    pub fn completed_at(&self, finish: SimTime) -> Completion {
        Completion {
            id: self.id,
            src: self.src,
            dst: self.dst,
            bytes: self.bytes,
            start: self.start,
            finish,
        }
    }

    /// A direct transfer with `flow_hash` equal to its id.
    pub fn new(id: TransferId, src: NodeId, dst: NodeId, bytes: Bytes, start: SimTime) -> Self {
        Transfer {
            id,
            src,
            dst,
            bytes,
            start,
            flow_hash: id.0,
            route: RouteSpec::Direct,
        }
    }
}

/// A finished transfer: the last byte reached `dst` at `finish`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The transfer's id.
    pub id: TransferId,
    /// The sending host.
    pub src: NodeId,
    /// The receiving host.
    pub dst: NodeId,
    /// Payload bytes moved.
    pub bytes: Bytes,
    /// When the transfer was allowed to start.
    pub start: SimTime,
    /// When its last byte arrived at `dst`.
    pub finish: SimTime,
}

/// What a lossy transport did to recover one transfer's losses, and TCP's RTT samples of it
/// (summed over its network legs): the packet backend under TCP or UET.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransportCounters {
    /// Packets (TCP segments) sent again.
    pub retransmitted_packets: u32,
    /// Retransmission timeouts that fired.
    pub rtos: u32,
    /// TCP fast retransmits (entries into fast recovery).
    pub fast_retransmits: u32,
    /// Data packets trimmed by switches (UET).
    pub trimmed: u32,
    /// TCP round-trip-time samples taken (RFC 6298: one timed segment per round trip, none of
    /// a retransmitted segment).
    pub rtt_samples: u32,
    /// Their sum, in ps: [`Self::mean_rtt`] is the study's per-flow average RTT.
    pub rtt_sum_ps: u64,
}

impl TransportCounters {
    /// Column names of [`Self::values`], as flows.csv and transfers.csv head them.
    pub const COLUMNS: [&'static str; 4] = ["retransmitted_packets", "rtos", "fast_retransmits", "trimmed"];

    /// Whether nothing was recovered and no RTT was sampled.
    pub fn is_zero(&self) -> bool {
        *self == TransportCounters::default()
    }

    /// Mean of the RTT samples; none without samples.
    pub fn mean_rtt(&self) -> Option<SimTime> {
        (self.rtt_samples > 0).then(|| SimTime::from_ps(self.rtt_sum_ps / u64::from(self.rtt_samples)))
    }

    /// The counters in [`Self::COLUMNS`] order.
    pub fn values(&self) -> [u32; 4] {
        [self.retransmitted_packets, self.rtos, self.fast_retransmits, self.trimmed]
    }
}

impl std::ops::AddAssign for TransportCounters {
    fn add_assign(&mut self, o: Self) {
        self.retransmitted_packets += o.retransmitted_packets;
        self.rtos += o.rtos;
        self.fast_retransmits += o.fast_retransmits;
        self.trimmed += o.trimmed;
        self.rtt_samples += o.rtt_samples;
        self.rtt_sum_ps += o.rtt_sum_ps;
    }
}

/// Counters a backend keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetStats {
    /// Transfers submitted.
    pub submitted: u64,
    /// Transfers completed.
    pub completed: u64,
    /// Payload bytes of completed transfers, each counted once.
    pub bytes_delivered: u64,
    /// Times max-min rates were recomputed (flow backend).
    pub rate_recomputations: u64,
    /// Flows whose rate was recomputed, summed over recomputations.
    pub flows_rerated: u64,
    /// Flow backend: of `rate_recomputations`, the max-min fillings of whole components (after
    /// a link change, under traffic classes, or where an arrival could not resume), and the
    /// flows those rerated (a share of `flows_rerated`).
    #[serde(skip_serializing_if = "is_zero")]
    pub rate_fills_full: u64,
    /// Flows rerated by `rate_fills_full`.
    #[serde(skip_serializing_if = "is_zero")]
    pub flows_rerated_full: u64,
    /// Of `flows_rerated`, those whose new rate is the old one to the bit: what an exact
    /// filling that found the changed flows alone would not have had to visit.
    #[serde(skip_serializing_if = "is_zero")]
    pub rates_unchanged: u64,
    /// Flow backend: fillings resumed at a level below which every rate stays (after
    /// departures and arrivals); the rest of `rate_recomputations` are lone flows.
    #[serde(skip_serializing_if = "is_zero")]
    pub rate_fills_resumed: u64,
    /// Flow backend: timestamps with arrivals whose resumed filling was refused (the filling's
    /// floats could not be shown to replay the full one's) and that filled in full instead.
    #[serde(skip_serializing_if = "is_zero")]
    pub arrival_full_fallbacks: u64,
    /// Flow backend: recomputations done by the local filling (only the flows whose rate or
    /// bottleneck can move are visited; the rest of `rate_recomputations` filled components).
    #[serde(skip_serializing_if = "is_zero")]
    pub rate_fills_local: u64,
    /// Flow backend: local fillings given up (a link's share could fall by rounding, or the
    /// region grew past its budget), after which the component was filled as before.
    #[serde(skip_serializing_if = "is_zero")]
    pub local_fill_fallbacks: u64,
    /// Packet backend with Wormhole: partitions fast-forwarded, memo hits and misses, and the
    /// memo database's entries at the end.
    pub ff_freezes: u64,
    /// Wormhole memo lookups that found a stored episode.
    pub memo_hits: u64,
    /// Wormhole memo lookups that found none.
    pub memo_misses: u64,
    /// Of those lookups, partitions that waited for (or mirrored) an identical one started at
    /// the same instant (counted as hits or misses by that one's outcome).
    pub memo_deferred: u64,
    /// Episodes in the Wormhole memo database at the end of the run.
    pub memo_entries: u64,
    /// Packet backend: events the engine ran (Wormhole's own included), and payload bytes that
    /// fast-forwarding or mirrored twins moved instead of packets.
    pub packet_events: u64,
    /// Payload bytes moved by fast-forwarding or mirrored twins instead of packets.
    pub ff_skipped_bytes: u64,
    /// Packet backend: payload bytes its flows delivered, packets and fast-forwarding together.
    /// A transfer with several network legs (a ring step's hops) counts once per leg, so this
    /// can exceed `bytes_delivered`; `ff_skipped_bytes` is a share of it.
    pub net_payload_bytes: u64,
    /// Packet backend: ECN marks, PFC pause frames sent, packets dropped (buffer overflow or
    /// link errors), NACKs and retransmitted payload bytes (go-back-N).
    pub ecn_marks: u64,
    /// PFC pause frames sent.
    pub pfc_pauses: u64,
    /// Packets dropped (buffer overflow or link errors).
    pub drops: u64,
    /// NACKs sent.
    pub nacks: u64,
    /// Payload bytes sent again (go-back-N).
    pub retransmitted_bytes: u64,
    /// Packet backend under TCP: retransmission timeouts and fast retransmits.
    pub tcp_rtos: u64,
    /// TCP fast retransmits.
    pub tcp_fast_retransmits: u64,
    /// Packet backend under UET: data packets trimmed by switches, retransmission timeouts.
    pub trimmed: u64,
    /// UET retransmission timeouts.
    pub uet_rtos: u64,
    /// Packet backend with Wormhole: frozen partitions resumed by the watchdog's deadline
    /// because nothing else ended their wait; their flows finished late, so the run's times
    /// are too long. Zero, and omitted from JSON, in a sound run.
    #[serde(skip_serializing_if = "is_zero")]
    pub ff_watchdog_resumes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One egress port of a packet-level run: its queue (p50/p99 from samples at every 8th dequeue,
/// in 1 KB buckets; the maximum exact) and the bytes it put on the wire (every packet kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortDetail {
    /// The egress port's link.
    pub link: LinkId,
    /// Median queue length, in bytes (1 KB buckets).
    pub p50_bytes: u64,
    /// 99th-percentile queue length, in bytes (1 KB buckets).
    pub p99_bytes: u64,
    /// Largest queue length, in bytes (exact).
    pub max_bytes: u64,
    /// Bytes the port put on the wire, every packet kind.
    pub tx_bytes: u64,
}

/// A PFC frame received: `node` pauses (or resumes) its egress port `link`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcRecord {
    /// When the frame arrived.
    pub time: SimTime,
    /// The node that received it.
    pub node: NodeId,
    /// The egress port (link) it pauses or resumes.
    pub link: LinkId,
    /// True for a pause, false for a resume.
    pub pause: bool,
}

/// What a packet-level backend saw beyond the transfers: per-port queues and PFC frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketDetails {
    /// Ports that sent anything, by link.
    pub ports: Vec<PortDetail>,
    /// PFC frames received, in the order they arrived.
    pub pfc: Vec<PfcRecord>,
}

/// What happens to a link during a run (`faults:` with `at:` after 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinkChange {
    /// The link fails: flows on it move to other paths by the routing rule.
    Down,
    /// The link comes back: later routes may use it again; flows already moved stay.
    Up,
    /// The link runs at this bandwidth from now on.
    Bandwidth(llmsim_core::Bandwidth),
    /// Each packet crossing the link from now on is dropped with this probability (a backend
    /// that simulates packets; the others refuse it).
    Loss(f64),
}

/// Why a network backend refused a transfer or failed a run.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NetError {
    /// A transfer was submitted with a start time before the network's `now()`.
    #[error("transfer {id} starts at {start} but the network is already at {now}")]
    StartInPast {
        /// The transfer.
        id: TransferId,
        /// Its start time.
        start: SimTime,
        /// The network's time at submission.
        now: SimTime,
    },
    /// The topology has no route for a transfer.
    #[error("transfer {id}: {source}")]
    Route {
        /// The transfer.
        id: TransferId,
        /// Why the topology could not route it.
        source: TopoError,
    },
    /// A transfer was submitted while one with the same id is still in flight.
    #[error("transfer {0} was submitted twice")]
    Duplicate(TransferId),
    /// A backend could not save what it learned (e.g. the Wormhole memo database file).
    #[error("{0}")]
    Backend(String),
    /// A link change during the run this backend does not simulate, or one that left a flow
    /// with no route.
    #[error("{0}")]
    Fault(String),
}

impl NetError {
    /// The checks every backend makes on a new transfer: it does not start before `now`, and
    /// its id is not in flight already (`in_flight`).
    pub(crate) fn check_new(t: &Transfer, now: SimTime, in_flight: bool) -> Result<(), NetError> {
        if t.start < now {
            return Err(NetError::StartInPast {
                id: t.id,
                start: t.start,
                now,
            });
        }
        if in_flight {
            return Err(NetError::Duplicate(t.id));
        }
        Ok(())
    }
}

/// [`Network::set_link_bytes`] on a backend's per-link counters (`links` of them): off empties
/// them; on again restarts the count from zero.
pub(crate) fn set_link_counters(counters: &mut Vec<Bytes>, on: bool, links: usize) {
    if !on {
        *counters = Vec::new();
    } else if counters.is_empty() {
        *counters = vec![Bytes::ZERO; links];
    }
}

/// The network seam. The caller owns time: it submits transfers, then advances.
pub trait Network {
    /// The topology the network runs on.
    fn topology(&self) -> &Topology;
    /// The time the network has advanced to.
    fn now(&self) -> SimTime;
    /// Queues a transfer that starts at `t.start >= now()`.
    ///
    /// # Errors
    /// `NetError::StartInPast` if `t.start < now()`, `NetError::Route` if it cannot be routed,
    /// `NetError::Duplicate` if a transfer with the same id is still in flight.
    fn submit(&mut self, t: Transfer) -> Result<(), NetError>;
    /// Queues a transfer in traffic class `class` (0 the lowest). The flow backend serves a
    /// higher class strictly first (max-min filled class by class, from the highest down); the
    /// packet backend gives each class its own priority group (queues and PFC pauses). Default:
    /// [`Network::submit`], the class ignored (the analytical backend has no contention).
    ///
    /// # Errors
    /// As `submit`.
    fn submit_in_class(&mut self, t: Transfer, class: u8) -> Result<(), NetError> {
        let _ = class;
        self.submit(t)
    }
    /// The earliest time at which something happens inside the network (a transfer starts or
    /// completes), given what has been submitted so far; `None` when idle.
    fn next_event_time(&self) -> Option<SimTime>;
    /// Processes everything up to and including `t`, appending completions to `done` in
    /// completion-time order (ties by transfer id). Afterwards `now() == max(now(), t)`: time
    /// never goes back, and a `t` in the past only delivers nothing.
    fn advance_to(&mut self, t: SimTime, done: &mut Vec<Completion>);
    /// Advances event by event, never past `limit`, and stops at the first instant that delivers
    /// a completion (appended to `done` as `advance_to` does): what a caller gets from calling
    /// `advance_to(next_event_time())` until something completes, which is the default. A
    /// backend with many events between completions (the packet engine) overrides it so the
    /// caller does not step it one instant at a time.
    fn advance_until_completion(&mut self, limit: SimTime, done: &mut Vec<Completion>) {
        let before = done.len();
        while let Some(n) = self.next_event_time() {
            if n > limit {
                break;
            }
            self.advance_to(n, done);
            if done.len() > before {
                break;
            }
        }
    }
    /// Number of transfers submitted and not yet completed.
    fn in_flight(&self) -> usize;
    /// Schedules a change of `link` at time `at >= now()` (a failure, a repair, a degraded
    /// bandwidth). Default: not simulated by this backend.
    ///
    /// # Errors
    /// `NetError::Fault` when the backend does not simulate link changes during a run, or `at`
    /// is in the past.
    fn schedule_link_change(&mut self, at: SimTime, link: LinkId, change: LinkChange) -> Result<(), NetError> {
        let _ = (at, link, change);
        Err(NetError::Fault(
            "this network backend simulates faults from the start only (at: 0); use backend: flow for faults during the run".into(),
        ))
    }
    /// A flow that a link change left with no route (the error names it), once the run is over.
    /// Default: none.
    fn fault_error(&self) -> Option<NetError> {
        None
    }
    /// Called once when the run is over: a backend may persist what it learned (the packet
    /// backend saves its Wormhole memo database). Default: nothing.
    ///
    /// # Errors
    /// `NetError::Backend` when that fails.
    fn finish(&mut self) -> Result<(), NetError> {
        Ok(())
    }
    /// The backend's counters so far.
    fn stats(&self) -> NetStats;
    /// What the transport did to recover completed transfer `id`'s losses, and TCP's RTT
    /// samples of it (the last transfer submitted with that id); `None` for a transfer that
    /// lost nothing and took no RTT sample, or a backend without lossy transports (the
    /// default).
    fn transport_counters(&self, id: TransferId) -> Option<TransportCounters> {
        let _ = id;
        None
    }
    /// Per-port queues and PFC frames, from a backend that simulates packets. Default `None`.
    fn packet_details(&self) -> Option<PacketDetails> {
        None
    }
    /// Bytes each directed link has carried for completed transfers, indexed by `LinkId`. A link
    /// crossed by k legs of a `Chain` (or both legs of a `Via`) counts the bytes k times. After
    /// every transfer has completed, all backends agree. A backend that keeps no counters
    /// returns an empty slice (the default, so test doubles need not implement it).
    fn link_bytes(&self) -> &[Bytes] {
        &[]
    }
    /// Whether to keep the counters [`Network::link_bytes`] returns (on by default). A caller
    /// that never reads them, as the system simulator, turns them off: the flow backend then
    /// skips an add per link of every completed transfer (a cache miss each, 3% of the 16k-GPU
    /// flow run). Off, `link_bytes` is empty. Default: nothing to turn off.
    fn set_link_bytes(&mut self, on: bool) {
        let _ = on;
    }
    /// Mean utilization of `link` over `[0, now()]`: carried bits / (bandwidth · now). Zero at
    /// time zero.
    fn link_utilization(&self, link: LinkId) -> f64 {
        let secs = self.now().as_secs_f64();
        let bw = self.topology().link(link).bandwidth.bps_f64();
        if secs <= 0.0 || bw <= 0.0 {
            return 0.0;
        }
        self.link_bytes().get(link.idx()).map_or(0.0, |b| b.0 as f64 * 8.0 / (bw * secs))
    }
}

/// Submits `transfers` and runs until all complete. A convenience for tests and tools.
///
/// # Errors
/// The first submission error.
pub fn run_all(net: &mut dyn Network, transfers: impl IntoIterator<Item = Transfer>) -> Result<Vec<Completion>, NetError> {
    for t in transfers {
        net.submit(t)?;
    }
    let mut done = Vec::new();
    while let Some(t) = net.next_event_time() {
        net.advance_to(t, &mut done);
    }
    Ok(done)
}
