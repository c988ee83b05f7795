//! The event-driven core: NICs (QPs, pacing, windows, ACK/NACK, go-back-N; `nic.rs`), switches
//! (shared buffer MMU, PFC, ECN at dequeue, INT, priority queues; `switch.rs`), store-and-forward
//! links (`link.rs`), set-up (`build.rs`), and the congestion-control hooks of `cc/`. This file
//! holds the engine's state, the event loop and dispatch, and the read-out.
//!
//! Semantics follow the ns-3 RDMA model of the HPCC code base (`qbb-net-device.cc`,
//! `rdma-hw.cc`, `switch-node.cc`, `switch-mmu.cc`); the comments name the function each piece
//! mirrors. Layout: every directed link is an egress port (`ports`, indexed by `LinkId`), every
//! link into a switch an ingress account (`ingress`), packets live in a slab with a free list,
//! port and ACK queues are lists linked through that slab, events are `u64` words in the timing
//! wheel of `queue.rs`. Nothing is allocated per packet event once the slab and the wheel have
//! grown to their working size.

use std::sync::Arc;

use llmsim_core::{NodeId, SimRng, SimTime};
use llmsim_topo::{NodeKind, Topology};

use super::PacketError;
use super::at::{Table, prefetch};
use super::cc::{self, CcHost, CcState};
use super::config::{DropPolicy, LoadBalance, PFC_FRAME_BYTES, PacketConfig, PacketRouting, Transport, UetConfig};
use super::events::{
    self, CC_TIMERS, EV_ARRIVE, EV_CC_TIMER, EV_CC_TIMER_LAST, EV_DELACK, EV_FAULT, EV_HOP, EV_RTO, EV_START, EV_TXDONE, EV_WAKE, MASK30,
    ev,
};
use super::queue::EvQueue;
use super::route::Ns3Routes;
use super::tables::{Flow, Ingress, Kind, MAX_HOPS, NIL, NQ, Nic, Pkt, PktList, Port, QLEN_SAMPLE, RateInfo, SwitchBuf};

mod build;
mod fault;
pub(crate) use build::check_load_balance;
pub use fault::FAULT_ACK_TIMEOUT;
mod link;
mod nic;
mod switch;
mod wormhole_api;

/// A flow to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    /// The sending host.
    pub src: NodeId,
    /// The receiving host.
    pub dst: NodeId,
    /// Payload bytes.
    pub size: u64,
    /// When the first packet may leave.
    pub start: SimTime,
    /// Priority group (ns-3 `pg`, 3 in the HPCC runs); 1..=7.
    pub pg: u8,
    /// Destination port (ns-3 `dport`), part of the 5-tuple.
    pub dport: u16,
    /// The caller's id, returned with the completion.
    pub tag: u64,
    /// ECMP hash when routing by the topology's rule.
    pub flow_hash: u64,
}

/// A PFC frame's arrival, as ns-3's `pfc.txt` logs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcEvent {
    /// When the frame arrived.
    pub time: SimTime,
    /// The node that received the frame and its port's link.
    pub node: NodeId,
    /// The link of the port it pauses or resumes.
    pub link: u32,
    /// True for a pause, false for a resume.
    pub pause: bool,
}

/// Counters of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Events the engine ran.
    pub events: u64,
    /// Data packets sent.
    pub data_packets: u64,
    /// ACKs sent.
    pub acks: u64,
    /// NACKs sent.
    pub nacks: u64,
    /// Payload bytes sent again (go-back-N).
    pub retransmitted_bytes: u64,
    /// Packets dropped for want of buffer.
    pub drops_buffer: u64,
    /// Packets lost to link errors.
    pub drops_error: u64,
    /// Times a sender whose flow a link failure touched went back after `FAULT_ACK_TIMEOUT`
    /// without progress (`engine::fault`).
    pub fault_timeouts: u64,
    /// PFC pause frames sent.
    pub pfc_pauses: u64,
    /// PFC resume frames sent.
    pub pfc_resumes: u64,
    /// Packets ECN-marked by switches.
    pub ecn_marks: u64,
    /// TCP: retransmission timeouts and fast retransmits, over all flows.
    pub tcp_rtos: u64,
    /// TCP fast retransmits, over all flows.
    pub tcp_fast_retransmits: u64,
    /// UET: data packets trimmed to their header by switches, and retransmission timeouts.
    pub trimmed: u64,
    /// UET retransmission timeouts.
    pub uet_rtos: u64,
    /// Flows finished.
    pub flows_done: u64,
    /// Payload bytes delivered.
    pub payload_delivered: u64,
    /// Largest number of pending events.
    pub max_pending: u64,
}

/// Flows the flow table has room for before it first grows (see `PacketEngine::new`): 24 MiB of
/// address space.
const FLOW_RESERVE: usize = 1 << 16;
/// The packet-level simulator.
pub struct PacketEngine {
    pub(crate) cfg: PacketConfig,
    pub(crate) topo: Arc<Topology>,
    /// `topo.num_hosts()`, kept here: node ids below it are hosts (one load on the per-event
    /// paths instead of two through the `Arc`).
    hosts: u32,
    pub(crate) now: u64,
    pub(crate) events: EvQueue,
    pub(crate) link_rate: Table<u64>,
    pub(crate) link_rev: Vec<u32>,
    link_err: Vec<f64>,
    pub(crate) ports: Table<Port>,
    /// Per distinct link rate (`Port::rate`).
    pub(crate) rates: Table<RateInfo>,
    pub(crate) ingress: Table<Ingress>,
    pub(crate) bufs: Table<SwitchBuf>,
    pub(crate) nics: Table<Nic>,
    pub(crate) flows: Table<Flow>,
    pub(crate) pkts: Table<Pkt>,
    /// INT hop words of each packet slot (HPCC only; empty otherwise), kept apart so the
    /// other algorithms' packets stay small.
    pub(crate) ints: Table<[u64; MAX_HOPS]>,
    /// Send time in ns of each packet slot (TIMELY's timestamp; empty otherwise).
    pub(crate) ts: Table<u64>,
    free: Vec<u32>,
    routes: Option<Ns3Routes>,
    /// Per-flow data and ACK paths (links), concatenated.
    pub(crate) paths: Vec<u32>,
    /// ns-3 id of each node (its id in the topology file), for IPs and ECMP seeds.
    pub(crate) ns3_ids: Vec<u32>,
    port_count: Vec<u16>,
    rng_ecn: SimRng,
    ns3_streams: Option<super::ns3rng::Ns3Streams>,
    rng_err: SimRng,
    pub(crate) stats: EngineStats,
    pub(crate) completed: Vec<u32>,
    pub(crate) pfc_log: Vec<PfcEvent>,
    pub(crate) max_rtt_ns: u64,
    pub(crate) max_bdp: u64,
    /// sport counter per (src, dst) pair, from 10000 as in ns-3.
    sports: std::collections::HashMap<(u32, u32), u16>,
    pub(crate) ack_bytes: u32,
    pub(crate) hdr_bytes: u32,
    /// `cfg.transport` is TCP (one load on the per-packet host paths).
    pub(crate) tcp_on: bool,
    /// PFC is off: switches drop at a full buffer (`cfg.pfc` false).
    pub(crate) lossy: bool,
    /// TCP state per flow (empty under RoCE).
    pub(crate) tcp: Vec<crate::packet::transport::tcp::TcpFlow>,
    /// Shortest wait of a fired retransmission timeout (ps; `u64::MAX` before one).
    pub(crate) tcp_min_rto_wait: u64,
    /// `cfg.transport` is UET.
    pub(crate) uet_on: bool,
    /// UET state per flow (empty otherwise) and NSCC's constants for this fabric.
    pub(crate) uet: Vec<crate::packet::transport::uet::UetFlow>,
    pub(crate) nscc: crate::packet::transport::uet::NsccParams,
    /// Packet slots carry a send time (`ts`): TIMELY, UET.
    ts_on: bool,
    /// Width of link-utilization bins in ps (0: off).
    util_bin: u64,
    /// Wormhole fast-forward state (`None` when off: the plain engine, event for event).
    pub(crate) ww: Option<Box<super::wormhole::Wormhole>>,
    /// Per link, the share of its time (in 1/65536) the ACKs of frozen flows would take
    /// (`PacketEngine::add_ack_load`); empty when Wormhole is off.
    pub(crate) ack_load: Vec<u32>,
    /// Link failures during the run (`None` when none is scheduled).
    pub(crate) faults: Option<Box<fault::FaultState>>,
}

/// ns-3's `Seconds(bytes*8/bps)` at nanosecond resolution: the double is converted to 64.64
/// fixed point (truncating), multiplied by 1e9, and floored.
#[inline]
pub(crate) fn ns3_tx_ns(bytes: u64, bps: u64) -> u64 {
    let secs = bytes as f64 * 8.0 / bps as f64;
    let scaled = secs * 18_446_744_073_709_551_616.0;
    let fixed = if scaled < 18_446_744_073_709_551_616.0 {
        u128::from(scaled as u64)
    } else {
        scaled as u128
    };
    ((fixed * 1_000_000_000u128) >> 64) as u64
}

impl PacketEngine {
    // ---------------------------------------------------------------- time helpers

    #[inline]
    pub(crate) fn tx_ps(&self, bytes: u32, bps: u64) -> u64 {
        if self.cfg.ns_resolution {
            ns3_tx_ns(u64::from(bytes), bps) * 1000
        } else {
            (u128::from(bytes) * 8 * 1_000_000_000_000u128).div_ceil(u128::from(bps)) as u64
        }
    }

    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        self.now / 1000
    }

    #[inline]
    pub(crate) fn schedule(&mut self, at: u64, e: u64) {
        self.events.push(at, e);
        self.stats.max_pending = self.stats.max_pending.max(self.events.len() as u64);
    }

    // ---------------------------------------------------------------- packets

    #[inline]
    pub(crate) fn alloc(&mut self, p: Pkt) -> u32 {
        if let Some(i) = self.free.pop() {
            self.pkts[i as usize] = p;
            i
        } else {
            self.pkts.push(p);
            if self.cfg.cc.uses_int() {
                self.ints.push([0; MAX_HOPS]);
            }
            if self.ts_on {
                self.ts.push(0);
            }
            (self.pkts.len() - 1) as u32
        }
    }

    #[inline]
    pub(crate) fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    // ---------------------------------------------------------------- main loop

    /// Time of the next event.
    pub fn next_event(&self) -> Option<SimTime> {
        self.events.peek_time().map(SimTime::from_ps)
    }

    /// Runs every event at or before `t`.
    pub fn run_until(&mut self, t: SimTime) {
        self.run_loop(t.as_ps(), false);
    }

    /// Runs the events at or before `t` until one of them completes a flow, then the rest of
    /// that instant's events, and stops there. Returns whether it stopped for a completion (then
    /// `now()` is that instant; otherwise it is `t`, as after `run_until(t)`).
    pub fn run_until_completion(&mut self, t: SimTime) -> bool {
        self.run_loop(t.as_ps(), true)
    }

    /// The event loop (one copy, so the dispatch is inlined into it).
    fn run_loop(&mut self, t: u64, stop_on_completion: bool) -> bool {
        while let Some((et, e)) = self.events.pop_until(t) {
            if let Some(n) = self.events.peek_next_ev() {
                self.prefetch_for(n);
            }
            self.now = et;
            self.dispatch(e);
            if stop_on_completion && !self.completed.is_empty() && self.events.peek_time().is_none_or(|n| n > et) {
                return true;
            }
        }
        if t != u64::MAX && t > self.now {
            self.now = t;
        }
        false
    }

    /// Starts loading what event `e` will touch first, so the load overlaps the event before it:
    /// the port of word `a` (both lines a dequeue reads: a `TxDone`'s port, a hop's egress, an
    /// arrival's link) and the packet of word `b`. Branch-free, as the kind of the next event is
    /// not predictable: for the other kinds the lines are clamped ids' and merely not needed. A
    /// hint only: no effect on results.
    #[inline]
    fn prefetch_for(&self, e: u64) {
        let a = (events::op_a(e) as usize).min(self.ports.len().saturating_sub(1));
        let b = (events::op_b(e) as usize).min(self.pkts.len().saturating_sub(1));
        let pt: *const u8 = self.ports.as_ptr().wrapping_add(a).cast();
        prefetch(pt);
        prefetch(pt.wrapping_add(64));
        prefetch(self.pkts.as_ptr().wrapping_add(b));
    }

    /// Runs until no event is left.
    pub fn run(&mut self) {
        self.run_until(SimTime::MAX);
    }

    #[inline]
    fn dispatch(&mut self, e: u64) {
        self.stats.events += 1;
        let kind = events::kind(e);
        let a = events::op_a(e);
        let b = events::op_b(e);
        // Wormhole: a packet or timer event of no frozen partition (the common case) goes
        // straight on; the rest (its own events, flow starts, a frozen partition's) go through it.
        if let Some(w) = self.ww.as_deref()
            && !(kind < EV_START && w.owner(&self.nics, &self.pkts, e) == super::wormhole::NONE)
            && self.ww_intercept(e, kind, a, b)
        {
            return;
        }
        match kind {
            EV_HOP => self.hop(a, b),
            EV_ARRIVE => self.arrive(a, b),
            EV_TXDONE => {
                let pt = &mut self.ports[a as usize];
                pt.busy = false;
                pt.txdone_pending = false;
                let src = pt.src;
                if src < self.hosts {
                    self.host_send(src);
                } else {
                    self.switch_send(a);
                }
            }
            EV_WAKE => {
                let nic = &mut self.nics[a as usize];
                if u64::from(nic.wake_gen) & MASK30 == u64::from(b) && nic.next_send.is_some() {
                    nic.next_send = None;
                    self.host_send(a);
                }
            }
            EV_START => self.start_flow(a),
            EV_RTO if self.uet_on => self.uet_on_rto(a, b),
            EV_RTO => self.tcp_on_rto(a, b),
            EV_DELACK => self.tcp_on_delack(a, b),
            EV_FAULT => self.on_fault(a, b),
            EV_CC_TIMER..=EV_CC_TIMER_LAST => {
                let slot = (kind - EV_CC_TIMER) as usize;
                let fl = &self.flows[a as usize];
                if fl.done || u64::from(fl.timer_gen[slot]) & MASK30 != u64::from(b) {
                    self.stats.events -= 1;
                    return;
                }
                cc::on_timer(self, a, slot);
            }
            _ => unreachable!("event kind {kind}"),
        }
    }

    /// Records bytes sent per port in bins of `bin` (link utilization over time); off by default.
    pub fn set_util_bin(&mut self, bin: SimTime) {
        self.util_bin = bin.as_ps();
    }

    /// Per port with traffic: (link, bin index, utilization) for every non-empty bin (bins of the
    /// width given to [`PacketEngine::set_util_bin`], counted from time zero). A transmission counts in
    /// each bin in proportion to the time it spends there. Utilization can read a few %
    /// over 1: serialization times are truncated to whole ns, as in ns-3 (a 1,048-byte packet takes
    /// 83 ns instead of 83.84 at 100 Gbit/s, 20 ns instead of 20.96 at 400 Gbit/s).
    pub fn link_utilization(&self) -> Vec<(u32, usize, f64)> {
        let mut out = Vec::new();
        if self.util_bin == 0 {
            return out;
        }
        for (l, p) in self.ports.iter().enumerate() {
            let cap = self.link_rate[l] as f64 * self.util_bin as f64 / 8e12;
            for (b, &bytes) in p.util.iter().enumerate() {
                if bytes > 0 {
                    out.push((l as u32, p.util_first as usize + b, bytes as f64 / cap));
                }
            }
        }
        out
    }

    /// Pending events (for tests and sizing).
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// The engine's current time.
    pub fn now(&self) -> SimTime {
        SimTime::from_ps(self.now)
    }

    /// Bytes sent so far on link `link` (every packet: data, ACKs, PFC frames); `None` when
    /// the engine has no such link.
    pub fn link_tx_bytes(&self, link: u32) -> Option<u64> {
        self.ports.get(link as usize).map(|p| p.tx_bytes)
    }

    /// The run's counters so far.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// The parameters the engine runs with.
    pub fn config(&self) -> &PacketConfig {
        &self.cfg
    }

    /// The topology the engine runs on.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Flows completed since the last call, in completion order.
    pub fn drain_completed(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.completed);
    }

    /// PFC frames received so far, in arrival order.
    pub fn pfc_events(&self) -> &[PfcEvent] {
        &self.pfc_log
    }

    /// ns-3 id of node `n`; `None` when the topology has no node `n`.
    pub fn ns3_id(&self, n: u32) -> Option<u32> {
        self.ns3_ids.get(n as usize).copied()
    }

    /// ns-3 interface index (1-based) of a link at its source node; `None` when the topology
    /// has no such link.
    pub fn ns3_ifindex(&self, link: u32) -> Option<u32> {
        let s = self.ports.get(link as usize)?.src;
        let ports = self.topo.ports(NodeId(s));
        Some(ports.iter().position(|l| l.0 == link).map_or(0, |i| i as u32 + 1))
    }

    /// Number of ports of node `n`; `None` when the topology has no node `n`.
    pub fn port_count(&self, n: u32) -> Option<u16> {
        self.port_count.get(n as usize).copied()
    }
}

/// ns-3's host address: `0x0b000001 + (id/256)<<16 + (id%256)<<8`.
pub fn ns3_ip(id: u32) -> u32 {
    0x0b00_0001 + ((id / 256) << 16) + ((id % 256) << 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::config::CcMode;
    use proptest::prelude::*;

    /// Two hosts under one switch (node 2), 100G, a 1 MB buffer: the PFC threshold is in reach
    /// of the counters the test draws.
    fn one_switch() -> PacketEngine {
        let text = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n";
        let imp = llmsim_topo::ns3::parse_ns3(text, "test.txt", 1).expect("topology parses");
        let cfg = PacketConfig {
            buffer_bytes: 1 << 20,
            ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
        };
        PacketEngine::new(Arc::new(imp.topology), Some(imp.file_ids), cfg).expect("engine")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// `ingress_transparent` holds exactly when admitting a packet and removing it at once
        /// (`update_ingress`, the PFC check, `remove_ingress`) would pause nothing, and then it
        /// leaves the ingress account and the shared bytes as they were.
        #[test]
        fn ingress_transparent_is_exact(
            anywhere in 0u32..600_000,
            near in any::<bool>(),
            off in -3000i64..3000,
            hdrm in prop_oneof![Just(0u32), 1u32..20_000],
            paused in any::<bool>(),
            shared in 0u64..1_100_000,
            size in 64u64..1100,
            q in 1usize..NQ,
            in_link in 0usize..2,
        ) {
            let mut e = one_switch();
            // The `in_link`-th of the links into the switch.
            let into: Vec<usize> = (0..e.ports.len()).filter(|&l| e.ports[l].dst == 2).collect();
            prop_assert_eq!(into.len(), 2);
            let in_link = into[in_link];
            let s = 2;
            let il = in_link as u32;
            e.bufs[s as usize].shared_used = shared;
            // Half the cases within a few packets of the PFC threshold.
            let bytes = if near {
                let at = (e.cfg.reserve_bytes + e.pfc_threshold(s, il)) as i64 + off;
                at.max(0) as u32
            } else {
                anywhere
            };
            {
                let ig = &mut e.ingress[in_link];
                ig.w[q] = [bytes, hdrm];
                ig.set_paused(q, paused);
            }
            let (ig0, sh0) = (e.ingress[in_link], shared);
            let transparent = e.ingress_transparent(s, il, q, size);
            e.update_ingress(s, il, q, size);
            let pauses = e.pause_due(s, il, q);
            e.remove_ingress(s, il, q, size);
            let restored = e.ingress[in_link] == ig0 && e.bufs[s as usize].shared_used == sh0;
            prop_assert_eq!(transparent, hdrm == 0 && !paused && !pauses, "pauses {}", pauses);
            if transparent {
                prop_assert!(restored);
            }
        }
    }
}
