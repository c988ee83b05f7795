//! The packet-level backend: an event-driven RoCEv2 simulator whose semantics follow the ns-3
//! RDMA model of the HPCC code base (the reference SimAI and others build on).
//!
//! - [`PacketEngine`]: NICs with QPs (rate pacing, `HAS_WIN`/`VAR_WIN` windows, per-packet ACK, NACK
//!   and go-back-N, ACK queue first then round robin over ready QPs, ECN echo), switches with a
//!   shared-buffer MMU (per-ingress reserve, headroom, dynamic PFC threshold, PAUSE/RESUME), ECN
//!   marking at dequeue, 8 priority queues, store-and-forward links, ECMP.
//! - Congestion control (`cc/`, one file per algorithm behind a static registry): DCQCN, HPCC,
//!   TIMELY, DCTCP.
//! - Transports (`transport/`): RoCE (the above, over a lossless PFC fabric) or TCP NewReno over
//!   a lossy fabric whose switches tail-drop per port or on a shared buffer
//!   (`PacketConfig::transport`, `pfc`, `drop_policy`).
//! - [`ns3`]: readers for ns-3's `config.txt`, topology and flow files, and its output formats.
//! - [`PacketNetwork`]: the engine behind the [`crate::Network`] trait.

// The one module allowed `unsafe` (the workspace denies it): unchecked per-id tables.
#[allow(unsafe_code)]
mod at;
mod cc;
pub mod config;
mod engine;
mod events;
mod lb;
mod memo;
pub mod ns3;
mod ns3rng;
mod queue;
mod route;
mod tables;
pub mod transport;
mod wormhole;

pub use config::{
    CcMode, DropPolicy, EcnThresholds, LoadBalance, LoadBalanceKind, PacketConfig, PacketRouting, TcpCc, TcpConfig, Transport, UetConfig,
    WormholeConfig,
};
pub use engine::{EngineStats, FAULT_ACK_TIMEOUT, FlowSpec, PacketEngine, PfcEvent, ns3_ip};
pub use memo::MemoDb;
pub use transport::{TcpFlowStats, UetFlowStats};
pub use wormhole::{SkipRecord, WormholeStats, steady_estimate};

use std::collections::HashMap;
use std::sync::Arc;

use llmsim_core::{Bytes, LinkId, NodeId, SimTime, TransferId};
use llmsim_topo::Topology;
use thiserror::Error;

use crate::{Completion, NetError, NetStats, Network, RouteSpec, Transfer};

/// Why the packet engine could not read its inputs, build or run.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PacketError {
    /// A malformed input file: which file, which line (1-based; 0 when the file as a whole).
    #[error("{file}:{line}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// The line, 1-based (0: the file as a whole).
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Parameters or a topology the engine cannot run.
    #[error("packet engine: {0}")]
    Config(String),
    /// A flow the engine cannot run (bad endpoints, size or priority group; no route).
    #[error("flow: {0}")]
    Flow(String),
    /// The Wormhole memo database file could not be read or written.
    #[error("wormhole memo database {path}: {message}")]
    MemoDb {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// Per-flow result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowResult {
    /// The caller's id for the flow (`FlowSpec::tag`).
    pub tag: u64,
    /// The sending host.
    pub src: NodeId,
    /// The receiving host.
    pub dst: NodeId,
    /// Payload bytes.
    pub size: u64,
    /// When the flow started.
    pub start: SimTime,
    /// When its last byte arrived (zero while it runs).
    pub finish: SimTime,
    /// Source port the engine gave the flow (part of its 5-tuple).
    pub sport: u16,
    /// Destination port (part of its 5-tuple).
    pub dport: u16,
    /// FCT the flow would have alone on the network, whole ns (`third.cc` `qp_finish`).
    pub standalone_fct: SimTime,
}

impl FlowResult {
    /// Flow completion time, `finish - start`.
    pub fn fct(&self) -> SimTime {
        self.finish - self.start
    }
    /// FCT divided by the standalone FCT (1: as fast as alone), both in whole ns as ns-3
    /// divides them.
    pub fn slowdown(&self) -> f64 {
        self.fct().as_ns() as f64 / self.standalone_fct.as_ns().max(1) as f64
    }
}

impl PacketEngine {
    /// The result of flow `f` (finished or not: `finish` is zero while it runs); `None` when
    /// the engine has no flow `f`.
    pub fn flow_result(&self, f: u32) -> Option<FlowResult> {
        let f = f as usize;
        let fl = self.flows.get(f)?;
        Some(FlowResult {
            tag: fl.tag,
            src: NodeId(fl.src),
            dst: NodeId(fl.dst),
            size: fl.size,
            start: SimTime::from_ps(fl.start),
            finish: SimTime::from_ps(fl.finish),
            sport: fl.sport,
            dport: fl.dport,
            standalone_fct: SimTime::from_ns(self.standalone_fct_ns_of(f)),
        })
    }

    /// Number of flows added to the engine.
    pub fn num_flows(&self) -> usize {
        self.flows.len()
    }

    /// Whether flow `f` has finished; `None` when the engine has no flow `f`.
    pub fn flow_done(&self, f: u32) -> Option<bool> {
        self.flows.get(f as usize).map(|fl| fl.done)
    }

    /// Per egress port with traffic: (link, p50, p99, max queued bytes), from the queue length
    /// seen at every 8th dequeue (1 KB buckets; max exact).
    pub fn queue_stats(&self) -> Vec<(u32, u64, u64, u64)> {
        (0..self.ports.len())
            .filter_map(|l| {
                self.queue_percentiles(l)
                    .map(|(p50, p99)| (l as u32, p50, p99, self.ports[l].max_qlen))
            })
            .collect()
    }

    /// Port `l`'s p50 and p99 queued bytes from the queue length seen at every 8th dequeue (1 KB
    /// buckets); `None` before its 8th dequeue.
    pub(crate) fn queue_percentiles(&self, l: usize) -> Option<(u64, u64)> {
        let hist = &self.ports[l].qlen_hist;
        let n: u64 = hist.iter().map(|&c| u64::from(c)).sum();
        if n == 0 {
            return None;
        }
        let pct = |q: f64| {
            let want = ((n as f64) * q).ceil().max(1.0) as u64;
            let mut acc = 0u64;
            for (kb, &c) in hist.iter().enumerate() {
                acc += u64::from(c);
                if acc >= want {
                    return kb as u64 * 1000;
                }
            }
            0
        };
        Some((pct(0.5), pct(0.99)))
    }

    /// Bytes each egress port has put on the wire (all packet kinds), indexed by link.
    pub fn port_tx_bytes(&self) -> Vec<u64> {
        self.ports.iter().map(|p| p.tx_bytes).collect()
    }
}

/// The packet engine behind the [`Network`] trait: each transfer becomes a QP. `Via` and
/// `Chain` routes become one QP per leg, started together (the legs are pipelined, as the
/// flow backend models them); the transfer completes when its last leg does. A leg between two
/// GPUs of one server (NVLink) is not simulated packet by packet: it takes its alpha-beta time.
/// A transfer in flight.
struct Pending {
    t: Transfer,
    /// Network legs not finished yet.
    legs_left: u32,
    /// When the last NVLink leg finishes.
    nv_done: SimTime,
    /// The links of all its legs, routed once at submission (for `link_bytes`).
    links: Vec<LinkId>,
}

/// The packet-level backend: a [`Network`] that runs each transfer as flows in the packet engine.
pub struct PacketNetwork {
    engine: PacketEngine,
    topo: Arc<Topology>,
    pending: HashMap<TransferId, Pending>,
    flow_transfer: Vec<TransferId>,
    /// Per transfer, what TCP or UET did to recover its losses; only transfers that lost
    /// something have an entry (until their id is submitted again).
    recovered: HashMap<TransferId, crate::TransportCounters>,
    stats: NetStats,
    scratch: Vec<u32>,
    done_buf: Vec<Completion>,
    link_bytes: Vec<Bytes>,
    /// Wormhole memo database file: loaded at construction, saved by `finish`.
    memo_file: Option<std::path::PathBuf>,
    /// The priority group of the transfer being submitted: 3 (ns-3's data class), or
    /// `1 + class` under [`Network::submit_in_class`].
    next_pg: u8,
}

impl PacketNetwork {
    /// Routing is the topology's rule (`cfg.routing` is set to [`PacketRouting::Topology`]).
    ///
    /// # Errors
    /// As [`PacketEngine::new`].
    pub fn new(topo: Arc<Topology>, cfg: PacketConfig) -> Result<Self, PacketError> {
        let nl = topo.num_links();
        let cfg = PacketConfig {
            routing: PacketRouting::Topology,
            ..cfg
        };
        let engine = PacketEngine::new(topo.clone(), None, cfg)?;
        Ok(PacketNetwork {
            engine,
            topo,
            pending: HashMap::new(),
            flow_transfer: Vec::new(),
            recovered: HashMap::new(),
            stats: NetStats::default(),
            scratch: Vec::new(),
            done_buf: Vec::new(),
            link_bytes: vec![Bytes(0); nl],
            memo_file: None,
            next_pg: DATA_PG,
        })
    }

    /// Loads the Wormhole memo database at `path` (if the file exists) and saves it there when
    /// the run finishes.
    ///
    /// # Errors
    /// `PacketError::MemoDb` when the file is not a memo database, `PacketError::Config` when
    /// memoization is off.
    pub fn with_memo_file(mut self, path: std::path::PathBuf) -> Result<Self, PacketError> {
        self.engine.set_memo_db(MemoDb::load(&path)?)?;
        self.memo_file = Some(path);
        Ok(self)
    }

    /// The packet engine underneath.
    pub fn engine(&self) -> &PacketEngine {
        &self.engine
    }

    /// The packet engine underneath, to set its recording options before a run
    /// ([`PacketEngine::set_util_bin`]).
    pub fn engine_mut(&mut self) -> &mut PacketEngine {
        &mut self.engine
    }

    fn finish(&mut self, t: &Transfer, links: &[LinkId], finish: SimTime) {
        self.stats.completed += 1;
        self.stats.bytes_delivered += t.bytes.0;
        for l in links {
            self.link_bytes[l.idx()].0 += t.bytes.0;
        }
        self.done_buf.push(t.completed_at(finish));
    }

    /// Moves the collected completions that finish by `t` to `done`, in (finish, id) order;
    /// returns whether there was any.
    fn deliver(&mut self, t: SimTime, done: &mut Vec<Completion>) -> bool {
        self.done_buf.sort_by_key(|c| (c.finish, c.id));
        let k = self.done_buf.partition_point(|c| c.finish <= t);
        done.extend(self.done_buf.drain(..k));
        k > 0
    }

    fn collect(&mut self) {
        self.scratch.clear();
        self.engine.drain_completed(&mut self.scratch);
        for i in 0..self.scratch.len() {
            let f = self.scratch[i];
            let tid = self.flow_transfer[f as usize];
            let finish = SimTime::from_ps(self.engine.flows[f as usize].finish);
            let Some(entry) = self.pending.get_mut(&tid) else { continue };
            entry.legs_left -= 1;
            let c = self.engine.transport_counters(f);
            if !c.is_zero() {
                *self.recovered.entry(tid).or_default() += c;
            }
            if entry.legs_left == 0 {
                let p = self.pending.remove(&tid).expect("present");
                self.finish(&p.t, &p.links, finish.max(p.nv_done));
            }
        }
    }

    fn same_server(&self, a: NodeId, b: NodeId) -> bool {
        self.topo.gpus_per_server() > 1 && self.topo.server_of(a) == self.topo.server_of(b)
    }
}

fn legs(t: &Transfer) -> Vec<(NodeId, NodeId, u64)> {
    match &t.route {
        RouteSpec::Direct => vec![(t.src, t.dst, t.flow_hash)],
        RouteSpec::Via(v) => vec![
            (t.src, *v, crate::route::leg_hash(t.flow_hash, 0)),
            (*v, t.dst, crate::route::leg_hash(t.flow_hash, 1)),
        ],
        RouteSpec::Chain(hops) => {
            let mut nodes = vec![t.src];
            nodes.extend(hops.iter().copied());
            nodes.push(t.dst);
            nodes
                .windows(2)
                .enumerate()
                .map(|(i, w)| (w[0], w[1], crate::route::leg_hash(t.flow_hash, i)))
                .collect()
        }
    }
}

/// The priority group of data without a traffic class (ns-3's HPCC runs use 3).
const DATA_PG: u8 = 3;

/// Highest traffic class: classes 0..=6 go to priority groups 1..=7 (group 0 is the control
/// queue, served first).
pub const MAX_TRAFFIC_CLASS: u8 = 6;

impl Network for PacketNetwork {
    /// Class `c` goes to priority group `1 + c`: its own egress queue at every switch port and
    /// its own PFC pause, the queues of a port served round robin (ns-3's `QbbNetDevice`), so
    /// classes are isolated from each other's pauses and share a link equally, not by strict
    /// priority.
    fn submit_in_class(&mut self, t: Transfer, class: u8) -> Result<(), NetError> {
        if class > MAX_TRAFFIC_CLASS {
            return Err(NetError::Backend(format!(
                "traffic class {class}: the packet backend has classes 0..={MAX_TRAFFIC_CLASS}"
            )));
        }
        self.next_pg = 1 + class;
        let r = self.submit(t);
        self.next_pg = DATA_PG;
        r
    }

    fn topology(&self) -> &Topology {
        &self.topo
    }

    fn now(&self) -> SimTime {
        self.engine.now()
    }

    fn submit(&mut self, t: Transfer) -> Result<(), NetError> {
        NetError::check_new(&t, self.engine.now(), self.pending.contains_key(&t.id))?;
        // Transfer ids are reused once a transfer has completed (the system simulator reuses a
        // collective's): the counters are the new transfer's from here on.
        if !self.recovered.is_empty() {
            self.recovered.remove(&t.id);
        }
        let all: Vec<_> = legs(&t).into_iter().filter(|(a, b, _)| a != b).collect();
        // NVLink legs: alpha-beta time over the topology's route.
        let mut nv = t.start;
        let mut net_legs = Vec::new();
        let mut path = Vec::new();
        let mut links = Vec::new();
        for &(a, b, h) in &all {
            path.clear();
            self.topo
                .route(a, b, h, &mut path)
                .map_err(|e| NetError::Route { id: t.id, source: e })?;
            links.extend_from_slice(&path);
            if self.same_server(a, b) {
                let (lat, bw) = self.topo.path_latency_and_bottleneck(&path);
                nv = nv.max(t.start + lat + bw.time_to_send(t.bytes));
            } else {
                net_legs.push((a, b, h));
            }
        }
        self.stats.submitted += 1;
        if net_legs.is_empty() || t.bytes.0 == 0 {
            self.finish(&t, &links, nv);
            return Ok(());
        }
        for &(a, b, h) in &net_legs {
            self.engine
                .add_flow(FlowSpec {
                    src: a,
                    dst: b,
                    size: t.bytes.0,
                    start: t.start,
                    pg: self.next_pg,
                    dport: 100,
                    tag: t.id.0,
                    flow_hash: h,
                })
                .map_err(|e| NetError::Route {
                    id: t.id,
                    source: llmsim_topo::TopoError::Unreachable {
                        src: a,
                        dst: b,
                        reason: e.to_string(),
                    },
                })?;
            self.flow_transfer.push(t.id);
        }
        let n = net_legs.len() as u32;
        self.pending.insert(
            t.id,
            Pending {
                t,
                legs_left: n,
                nv_done: nv,
                links,
            },
        );
        Ok(())
    }

    fn next_event_time(&self) -> Option<SimTime> {
        let done = self.done_buf.iter().map(|c| c.finish).min();
        let engine = self.engine.next_event();
        match (done, engine) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance_to(&mut self, t: SimTime, done: &mut Vec<Completion>) {
        self.engine.run_until(t);
        self.collect();
        self.deliver(t, done);
    }

    fn advance_until_completion(&mut self, limit: SimTime, done: &mut Vec<Completion>) {
        loop {
            // A collected transfer whose NVLink leg ends later is due at its finish time.
            let due = self.done_buf.iter().map(|c| c.finish).min();
            let lim = due.map_or(limit, |d| d.min(limit));
            match self.next_event_time() {
                Some(n) if n <= limit => {}
                _ => return,
            }
            let stopped = self.engine.run_until_completion(lim);
            self.collect();
            let reached = if stopped { self.engine.now() } else { lim };
            if self.deliver(reached, done) || (!stopped && lim == limit) {
                return;
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.done_buf.len()
    }

    /// A link failing during the run ([`PacketEngine::schedule_link_down`]): packets on it are lost,
    /// flows move to other paths, go-back-N (and an ACK timeout after a tail loss) recovers.
    /// Repairs and degraded bandwidths during the run are not modelled on packets.
    fn schedule_link_change(&mut self, at: SimTime, link: LinkId, change: crate::LinkChange) -> Result<(), NetError> {
        self.engine
            .schedule_link_change(at, link.0, change)
            .map_err(|e| NetError::Fault(e.to_string()))
    }

    fn fault_error(&self) -> Option<NetError> {
        self.engine.fault_error().map(|m| NetError::Fault(m.to_string()))
    }

    fn transport_counters(&self, id: TransferId) -> Option<crate::TransportCounters> {
        self.recovered.get(&id).copied()
    }

    fn stats(&self) -> NetStats {
        let mut s = self.stats;
        let e = self.engine.stats();
        s.packet_events = e.events;
        s.ecn_marks = e.ecn_marks;
        s.pfc_pauses = e.pfc_pauses;
        s.drops = e.drops_buffer + e.drops_error;
        s.nacks = e.nacks;
        s.retransmitted_bytes = e.retransmitted_bytes;
        s.tcp_rtos = e.tcp_rtos;
        s.tcp_fast_retransmits = e.tcp_fast_retransmits;
        s.trimmed = e.trimmed;
        s.uet_rtos = e.uet_rtos;
        s.net_payload_bytes = e.payload_delivered;
        if let Some(w) = self.engine.wormhole_stats() {
            s.ff_skipped_bytes = w.skipped_bytes;
            s.ff_freezes = w.freezes;
            s.memo_hits = w.memo_hits;
            s.memo_misses = w.memo_misses;
            s.memo_deferred = w.memo_deferred;
            s.ff_watchdog_resumes = w.watchdog_resumes;
            s.memo_entries = self.engine.memo_db().map_or(0, |d| d.len() as u64);
        }
        s
    }

    fn link_bytes(&self) -> &[Bytes] {
        &self.link_bytes
    }

    fn packet_details(&self) -> Option<crate::PacketDetails> {
        let e = &self.engine;
        let ports = (0..e.ports.len())
            .filter(|&l| e.ports[l].tx_bytes > 0)
            .map(|l| {
                let (p50, p99) = e.queue_percentiles(l).unwrap_or((0, 0));
                crate::PortDetail {
                    link: LinkId::from_idx(l),
                    p50_bytes: p50,
                    p99_bytes: p99,
                    max_bytes: e.ports[l].max_qlen,
                    tx_bytes: e.ports[l].tx_bytes,
                }
            })
            .collect();
        let pfc = e
            .pfc_events()
            .iter()
            .map(|p| crate::PfcRecord {
                time: p.time,
                node: p.node,
                link: LinkId(p.link),
                pause: p.pause,
            })
            .collect();
        Some(crate::PacketDetails { ports, pfc })
    }

    fn finish(&mut self) -> Result<(), NetError> {
        if let (Some(path), Some(db)) = (&self.memo_file, self.engine.memo_db()) {
            db.save(path).map_err(|e| NetError::Backend(e.to_string()))?;
        }
        Ok(())
    }
}
