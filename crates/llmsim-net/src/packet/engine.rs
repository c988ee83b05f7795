//! The event-driven core: NICs (QPs, pacing, windows, ACK/NACK, go-back-N), switches (shared
//! buffer MMU, PFC, ECN at dequeue, INT, priority queues), store-and-forward links, and the
//! congestion-control hooks of `cc.rs`.
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
use super::config::{PFC_FRAME_BYTES, PacketConfig, Routing};
use super::events::{self, CC_TIMERS, EV_ARRIVE, EV_CC_TIMER, EV_CC_TIMER_LAST, EV_HOP, EV_START, EV_TXDONE, EV_WAKE, MASK30, ev};
use super::queue::EvQueue;
use super::route::Ns3Routes;
use super::tables::{Flow, Ingress, Kind, MAX_HOPS, NIL, NQ, Nic, Pkt, PktList, Port, QLEN_SAMPLE, RateInfo, SwitchBuf};

/// A flow to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: NodeId,
    pub dst: NodeId,
    pub size: u64,
    pub start: SimTime,
    /// Priority group (ns-3 `pg`, 3 in the HPCC runs); 1..=7.
    pub pg: u8,
    pub dport: u16,
    /// The caller's id, returned with the completion.
    pub tag: u64,
    /// ECMP hash when routing by the topology's rule.
    pub flow_hash: u64,
}

/// A PFC frame's arrival, as ns-3's `pfc.txt` logs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcEvent {
    pub time: SimTime,
    /// The node that received the frame and its port's link.
    pub node: NodeId,
    pub link: u32,
    pub pause: bool,
}

/// Counters of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    pub events: u64,
    pub data_packets: u64,
    pub acks: u64,
    pub nacks: u64,
    pub retransmitted_bytes: u64,
    pub drops_buffer: u64,
    pub drops_error: u64,
    pub pfc_pauses: u64,
    pub pfc_resumes: u64,
    pub ecn_marks: u64,
    pub flows_done: u64,
    pub payload_delivered: u64,
    /// Largest number of pending events.
    pub max_pending: u64,
}

/// Flows the flow table has room for before it first grows (see `Engine::new`): 24 MiB of
/// address space.
const FLOW_RESERVE: usize = 1 << 16;
/// The packet-level simulator.
pub struct Engine {
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
    ack_bytes: u32,
    pub(crate) hdr_bytes: u32,
    /// Width of link-utilization bins in ps (0: off).
    util_bin: u64,
    /// Wormhole fast-forward state (`None` when off: the plain engine, event for event).
    pub(crate) ww: Option<Box<super::wormhole::Wormhole>>,
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

impl Engine {
    /// Builds the engine on `topo`. `ns3_ids[n]` is node `n`'s id in an ns-3 topology file
    /// (identity when `None`): it sets IPs, ECMP seeds and the order of next hops.
    ///
    /// # Errors
    /// `PacketError::Config` when a port's rate has no ECN thresholds, a host has no NIC, a
    /// Wormhole knob is out of range, or `ns3_ids` does not give one id per node.
    pub fn new(topo: Arc<Topology>, ns3_ids: Option<Vec<u32>>, cfg: PacketConfig) -> Result<Engine, PacketError> {
        if cfg.wormhole.fast_forward {
            cfg.wormhole.validate().map_err(PacketError::Config)?;
        }
        let nl = topo.num_links();
        let nn = topo.num_nodes();
        let ns3_ids = ns3_ids.unwrap_or_else(|| (0..nn as u32).collect());
        if ns3_ids.len() != nn {
            return Err(PacketError::Config(format!(
                "ns3_ids has {} ids for a topology of {nn} nodes; give one id per node",
                ns3_ids.len()
            )));
        }
        let mut link_src = Vec::with_capacity(nl);
        let mut link_dst = Vec::with_capacity(nl);
        let mut link_rate = Vec::with_capacity(nl);
        let mut link_delay = Vec::with_capacity(nl);
        let mut link_err = Vec::with_capacity(nl);
        for (i, l) in topo.links().iter().enumerate() {
            link_src.push(l.src.0);
            link_dst.push(l.dst.0);
            link_rate.push(l.bandwidth.bps());
            link_delay.push(l.latency.as_ps());
            let e = topo.link_error_rate(llmsim_core::LinkId::from_idx(i));
            link_err.push(1.0 - (1.0 - e) * (1.0 - cfg.error_rate_per_link));
        }
        // Reverse links: the cable's other direction.
        let mut link_rev = vec![u32::MAX; nl];
        for n in 0..nn {
            for &l in topo.ports(NodeId(n as u32)) {
                let d = link_dst[l.idx()];
                if link_rev[l.idx()] != u32::MAX {
                    continue;
                }
                if let Some(&r) = topo
                    .ports(NodeId(d))
                    .iter()
                    .find(|&&r| link_dst[r.idx()] == n as u32 && link_rev[r.idx()] == u32::MAX)
                {
                    link_rev[l.idx()] = r.0;
                    link_rev[r.idx()] = l.0;
                }
            }
        }
        if let Some(l) = link_rev.iter().position(|&r| r == u32::MAX) {
            return Err(PacketError::Config(format!(
                "link {l} ({} -> {}) has no reverse direction; the packet engine needs full-duplex cables",
                link_src[l], link_dst[l]
            )));
        }
        let is_switch = |n: u32| matches!(topo.node(NodeId(n)), NodeKind::Switch { .. } | NodeKind::NvSwitch);
        let nic_rate = (0..topo.num_hosts())
            .find_map(|h| {
                topo.ports(NodeId(h))
                    .iter()
                    .find(|&&l| topo.link(l).kind != llmsim_topo::LinkKind::NvLink)
                    .map(|l| link_rate[l.idx()])
            })
            .ok_or_else(|| PacketError::Config("no host has a NIC".into()))?;
        let mut ports = Vec::with_capacity(nl);
        let mut rates: Vec<RateInfo> = Vec::new();
        for l in 0..nl {
            let rate = link_rate[l];
            let ecn = if is_switch(link_src[l]) && cfg.ecn {
                let e = cfg
                    .ecn_for(rate)
                    .or_else(|| (cfg.routing == Routing::Topology).then(|| cfg.ecn_scaled(rate)).flatten())
                    .ok_or_else(|| {
                        PacketError::Config(format!(
                            "no ECN thresholds for {} bit/s ports (link {l}); add the rate to KMIN_MAP/KMAX_MAP/PMAX_MAP",
                            rate
                        ))
                    })?;
                Some((e.kmin_bytes, e.kmax_bytes, e.pmax))
            } else {
                None
            };
            let r = match rates.iter().position(|r| r.bps == rate) {
                Some(r) => r,
                None => {
                    rates.push(RateInfo {
                        bps: rate,
                        tx_cache: [(u32::MAX, 0); 2],
                        kmin: u64::MAX,
                        kmax: u64::MAX,
                        pmax: 0.0,
                        int_rate: cc::int::int_rate_index(rate),
                    });
                    rates.len() - 1
                }
            };
            // Only switch ports mark, and the thresholds are the configuration's for the rate.
            if let Some((kmin, kmax, pmax)) = ecn {
                let ri = &mut rates[r];
                ri.kmin = kmin;
                ri.kmax = kmax;
                ri.pmax = pmax;
            }
            let rate_idx = u16::try_from(r).map_err(|_| PacketError::Config(format!("over {} distinct link rates", u16::MAX)))?;
            ports.push(Port {
                busy: false,
                queues: Default::default(),
                nonempty: 0,
                rate: rate_idx,
                src: link_src[l],
                dst: link_dst[l],
                delay: link_delay[l],
                total: 0,
                paused: 0,
                rrlast: 0,
                tx_bytes: 0,
                qlen_hist: Vec::new(),
                dequeues: 0,
                util: Vec::new(),
                util_first: 0,
                busy_until: 0,
                txdone_seq: 0,
                txdone_pending: false,
                max_qlen: 0,
            });
        }
        // MMU: headroom 3 * rate * delay per port, shift from the NIC rate (third.cc).
        if cfg.buffer_bytes > u64::from(u32::MAX) {
            return Err(PacketError::Config(format!(
                "a switch buffer of {} bytes is over the 4 GiB the MMU counts (in 32 bits, as ns-3)",
                cfg.buffer_bytes
            )));
        }
        let mut ingress = vec![Ingress::default(); nl];
        let mut bufs = vec![SwitchBuf::default(); nn];
        // Per switch: every port's headroom and reserve.
        let mut held = vec![(0u64, 0u64); nn];
        for l in 0..nl {
            let s = link_dst[l];
            if !is_switch(s) {
                continue;
            }
            let rate = link_rate[l];
            let delay_ns = link_delay[l] / 1000;
            let headroom = (u128::from(rate) * u128::from(delay_ns) / 8 / 1_000_000_000) as u64 * 3;
            let mut shift = cfg.pfc_shift;
            let mut r = rate;
            while r > nic_rate && shift > 0 {
                shift -= 1;
                r /= 2;
            }
            let hr = u32::try_from(headroom).map_err(|_| {
                PacketError::Config(format!(
                    "link {l}: a PFC headroom of {headroom} bytes (3 x rate x delay) is over the 4 GiB an ingress counter holds"
                ))
            })?;
            ingress[l] = Ingress::new(hr, shift.min(63) as u8);
            held[s as usize].0 += headroom;
            held[s as usize].1 += cfg.reserve_bytes;
        }
        for (b, &(hdrm, rsrv)) in bufs.iter_mut().zip(&held) {
            b.free_base = cfg.buffer_bytes.saturating_sub(hdrm).saturating_sub(rsrv);
        }
        let mut nics = Vec::with_capacity(topo.num_hosts() as usize);
        for h in 0..topo.num_hosts() {
            let link = topo
                .ports(NodeId(h))
                .iter()
                .copied()
                .find(|&l| topo.link(l).kind != llmsim_topo::LinkKind::NvLink)
                .ok_or_else(|| PacketError::Config(format!("host {h} has no NIC link")))?;
            let id = ns3_ids[h as usize];
            nics.push(Nic {
                link: link.0,
                ackq: PktList::default(),
                qps: Vec::new(),
                rrlast: 0,
                next_send: None,
                wake_gen: 0,
                ns3_ip: ns3_ip(id),
            });
        }
        let routes = match cfg.routing {
            Routing::Ns3 => Some(Ns3Routes::build(&topo, &ns3_ids, &link_dst)),
            Routing::Topology => None,
        };
        let port_count = (0..nn).map(|n| topo.ports(NodeId(n as u32)).len() as u16).collect();
        let hdr_bytes = cfg.data_packet_bytes(0);
        let full = cfg.data_packet_bytes(cfg.mtu);
        if full > u32::from(u16::MAX) {
            return Err(PacketError::Config(format!(
                "packets of {} payload bytes ({full} on the wire) are over the {} bytes the engine carries",
                cfg.mtu,
                u16::MAX
            )));
        }
        let ack_bytes = cfg.ack_packet_bytes();
        // Unchecked tables (`at.rs`): the engine indexes them only with ids it made: links of
        // `topo` (its validated routes, `link_rev`, NIC links), its nodes and hosts, flows from
        // `add_flow` (packets carry those), packets from `alloc`; and `Table`s only grow.
        let (link_rate, ports, rates, ingress, bufs, nics, flows, pkts, ints, ts) = (
            Table::new(link_rate),
            Table::new(ports),
            Table::new(rates),
            Table::new(ingress),
            Table::new(bufs),
            Table::new(nics),
            // Room for `FLOW_RESERVE` flows up front: address space only (a page is touched
            // when a flow first lands on it), where growing by doubling would copy the table
            // and fault in twice its pages (flows are 64-byte aligned, which rules out an
            // in-place reallocation).
            Table::new(Vec::with_capacity(FLOW_RESERVE)),
            Table::new(Vec::new()),
            Table::new(Vec::new()),
            Table::new(Vec::new()),
        );
        let mut e = Engine {
            rng_ecn: SimRng::derive(cfg.seed, 0xEC4),
            ns3_streams: cfg.ns3_stream_base.map(|b| super::ns3rng::Ns3Streams::new(1, 1, b)),
            rng_err: SimRng::derive(cfg.seed, 0xE22),
            cfg,
            hosts: topo.num_hosts(),
            topo,
            now: 0,
            events: EvQueue::default(),
            link_rate,
            link_rev,
            // Empty when no link drops packets: `arrive` then skips the per-link load.
            link_err: if link_err.iter().any(|&e| e > 0.0) { link_err } else { Vec::new() },
            ports,
            rates,
            ingress,
            bufs,
            nics,
            flows,
            pkts,
            ints,
            ts,
            free: Vec::new(),
            routes,
            paths: Vec::new(),
            ns3_ids,
            port_count,
            stats: EngineStats::default(),
            completed: Vec::new(),
            pfc_log: Vec::new(),
            max_rtt_ns: 0,
            max_bdp: 0,
            sports: Default::default(),
            ack_bytes,
            hdr_bytes,
            util_bin: 0,
            ww: None,
        };
        let common = [e.hdr_bytes + e.cfg.mtu, e.ack_bytes];
        for r in 0..e.rates.len() {
            let rate = e.rates[r].bps;
            e.rates[r].tx_cache = common.map(|b| (b, e.tx_ps(b, rate)));
        }
        e.compute_max_rtt();
        if e.cfg.wormhole.fast_forward {
            e.ww = Some(Box::new(super::wormhole::Wormhole::new(&e)));
        }
        Ok(e)
    }

    /// Max base RTT and BDP over host pairs (`third.cc`: maxRtt, maxBdp), over routed paths.
    fn compute_max_rtt(&mut self) {
        let h = self.topo.num_hosts();
        let mut path = Vec::new();
        // Every pair on small fabrics; from host 0 (symmetric generated fabrics) on large ones.
        let srcs: Vec<u32> = if h <= 2048 { (0..h).collect() } else { vec![0] };
        for &s in &srcs {
            for d in 0..h {
                if d == s {
                    continue;
                }
                path.clear();
                if self.route_path(s, d, 0, &mut path).is_err() {
                    continue;
                }
                let (rtt, bw) = self.path_rtt(&path);
                let bdp = (u128::from(rtt) * u128::from(bw) / 1_000_000_000 / 8) as u64;
                self.max_rtt_ns = self.max_rtt_ns.max(rtt);
                self.max_bdp = self.max_bdp.max(bdp);
            }
        }
    }

    /// Base RTT in ns (2 x propagation + per-hop serialization of one MTU payload) and
    /// bottleneck rate of a path, as `third.cc` computes `pairRtt`/`pairBw`.
    pub(crate) fn path_rtt(&self, path: &[u32]) -> (u64, u64) {
        let mut delay = 0u64;
        let mut tx = 0u64;
        let mut bw = u64::MAX;
        for &l in path {
            let l = l as usize;
            delay += self.ports[l].delay / 1000;
            tx += u64::from(self.cfg.mtu) * 1_000_000_000 * 8 / self.link_rate[l];
            bw = bw.min(self.link_rate[l]);
        }
        (delay * 2 + tx, bw)
    }

    /// The links from host `s` to host `d` for a data packet of a flow with this hash/sport.
    pub(crate) fn route_path(&self, s: u32, d: u32, flow: u32, out: &mut Vec<u32>) -> Result<(), PacketError> {
        let ports = self
            .flows
            .get(flow as usize)
            .map_or((100, 10000, 0), |f| (f.dport, f.sport, f.hash));
        self.route_path_kind(s, d, ports, Kind::Data, out)
    }

    /// The links a packet of `kind` takes from host `s` to host `d`; `ports` is the flow's
    /// (dport, sport, hash). An ACK travels from the flow's receiver `s` to its sender `d`.
    pub(crate) fn route_path_kind(
        &self,
        s: u32,
        d: u32,
        ports: (u16, u16, u64),
        kind: Kind,
        out: &mut Vec<u32>,
    ) -> Result<(), PacketError> {
        let mut at = s;
        let mut guard = 0;
        while at != d {
            let l = if at < self.topo.num_hosts() {
                self.nics[at as usize].link
            } else {
                self.next_hop_for(at, s, d, ports, kind)?
            };
            out.push(l);
            at = self.ports[l as usize].dst;
            guard += 1;
            if guard > 64 {
                return Err(PacketError::Config(format!("routing loop from {s} to {d}")));
            }
        }
        Ok(())
    }

    /// Standalone FCT of flow `f` in ns (`third.cc` `qp_finish`): base RTT + wire bytes without
    /// INT over the bottleneck; `None` when the engine has no flow `f`.
    pub fn standalone_fct_ns(&self, f: usize) -> Option<u64> {
        (f < self.flows.len()).then(|| self.standalone_fct_of(f))
    }

    /// [`Self::standalone_fct_ns`] of a flow the engine made (`f < self.flows.len()`).
    pub(crate) fn standalone_fct_of(&self, f: usize) -> u64 {
        let fl = &self.flows[f];
        let mut path = Vec::new();
        let _ = self.route_path(fl.src, fl.dst, f as u32, &mut path);
        let (rtt, bw) = self.path_rtt(&path);
        let pkts = (fl.size.max(1) - 1) / u64::from(self.cfg.mtu) + 1;
        let total = fl.size + pkts * 48;
        rtt + total * 8_000_000_000 / bw
    }

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
    fn alloc(&mut self, p: Pkt) -> u32 {
        if let Some(i) = self.free.pop() {
            self.pkts[i as usize] = p;
            i
        } else {
            self.pkts.push(p);
            if self.cfg.cc.uses_int() {
                self.ints.push([0; MAX_HOPS]);
            }
            if self.cfg.cc.uses_send_ts() {
                self.ts.push(0);
            }
            (self.pkts.len() - 1) as u32
        }
    }

    #[inline]
    fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    // ---------------------------------------------------------------- flows

    /// Adds a flow; it starts at `spec.start` (not before the engine's current time).
    ///
    /// # Errors
    /// `PacketError::Flow` for a non-host endpoint, `src == dst`, a zero size or a `pg` outside 1..=7.
    pub fn add_flow(&mut self, spec: FlowSpec) -> Result<u32, PacketError> {
        let h = self.topo.num_hosts();
        if spec.src.0 >= h || spec.dst.0 >= h || spec.src == spec.dst {
            return Err(PacketError::Flow(format!(
                "flow {} -> {}: both ends must be distinct hosts (0..{h})",
                spec.src.0, spec.dst.0
            )));
        }
        if spec.size == 0 {
            return Err(PacketError::Flow(format!(
                "flow {} -> {}: size must be positive",
                spec.src.0, spec.dst.0
            )));
        }
        if spec.pg == 0 || usize::from(spec.pg) >= NQ {
            return Err(PacketError::Flow(format!(
                "flow pg {} must be in 1..=7 (0 is the control class)",
                spec.pg
            )));
        }
        let sport = {
            let c = self.sports.entry((spec.src.0, spec.dst.0)).or_insert(10000);
            let s = *c;
            *c = c.wrapping_add(1);
            s
        };
        let id = self.flows.len() as u32;
        let start = spec.start.as_ps().max(self.now);
        // Routes are static: each flow's data and ACK paths are computed once.
        let path_data = self.paths.len() as u32;
        let mut p = std::mem::take(&mut self.paths);
        let r = self
            .route_path_kind(spec.src.0, spec.dst.0, (spec.dport, sport, spec.flow_hash), Kind::Data, &mut p)
            .and_then(|()| {
                let at = p.len();
                self.route_path_kind(spec.dst.0, spec.src.0, (spec.dport, sport, spec.flow_hash), Kind::Ack, &mut p)
                    .map(|()| at)
            });
        self.paths = p;
        let path_ack = match r {
            Ok(at) => at as u32,
            Err(e) => {
                self.paths.truncate(path_data as usize);
                return Err(PacketError::Flow(format!("flow {} -> {}: {e}", spec.src.0, spec.dst.0)));
            }
        };
        self.flows.push(Flow {
            src: spec.src.0,
            dst: spec.dst.0,
            size: spec.size,
            start,
            sport,
            dport: spec.dport,
            pg: spec.pg,
            tag: spec.tag,
            hash: spec.flow_hash,
            snd_nxt: 0,
            snd_una: 0,
            max_sent: 0,
            rate: 0,
            max_rate: 0,
            win: 0,
            base_rtt_ns: 0,
            next_avail: 0,
            last_pkt_size: 0,
            started: false,
            done: false,
            finish: 0,
            rx_expected: 0,
            rx_milestone: 0,
            nack_timer: 0,
            last_nack: 0,
            cc: CcState::default(),
            timer_gen: [0; CC_TIMERS],
            path_data,
            path_ack,
        });
        self.schedule(start, ev(EV_START, id, 0));
        Ok(id)
    }

    /// `RdmaHw::AddQueuePair` + `QbbNetDevice::NewQp`.
    fn start_flow(&mut self, f: u32) {
        let fi = f as usize;
        let src = self.flows[fi].src;
        let link = self.nics[src as usize].link;
        let line = self.link_rate[link as usize];
        let (win, base_rtt) = if self.cfg.global_t {
            (self.max_bdp, self.max_rtt_ns)
        } else {
            let mut path = Vec::new();
            let _ = self.route_path(src, self.flows[fi].dst, f, &mut path);
            let (rtt, bw) = self.path_rtt(&path);
            ((u128::from(rtt) * u128::from(bw) / 1_000_000_000 / 8) as u64, rtt)
        };
        let now = self.now;
        let fl = &mut self.flows[fi];
        fl.started = true;
        fl.rate = line;
        fl.max_rate = line;
        fl.win = if self.cfg.has_win { win } else { 0 };
        fl.base_rtt_ns = base_rtt;
        fl.next_avail = now;
        fl.cc = self.cfg.cc.new_state(&self.cfg, line);
        if self.ww.is_some() {
            self.ww_on_start(f);
        }
        self.nics[src as usize].qps.push(f);
        self.host_send(src);
    }

    // ---------------------------------------------------------------- main loop

    /// Time of the next event, in ps.
    pub fn next_event_ps(&self) -> Option<u64> {
        self.events.peek_time()
    }

    /// Runs every event at or before `t` (ps).
    pub fn run_until(&mut self, t: u64) {
        self.run_loop(t, false);
    }

    /// Runs the events at or before `t` until one of them completes a flow, then the rest of
    /// that instant's events, and stops there. Returns whether it stopped for a completion (then
    /// `now()` is that instant; otherwise it is `t`, as after `run_until(t)`).
    pub fn run_until_completion(&mut self, t: u64) -> bool {
        self.run_loop(t, true)
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
        self.run_until(u64::MAX);
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

    // ---------------------------------------------------------------- links

    /// `QbbNetDevice::TransmitStart` + `QbbChannel::TransmitStart`.
    #[inline(always)]
    fn transmit(&mut self, link: u32, p: u32) {
        self.transmit_from::<true>(link, p);
    }

    /// [`Engine::transmit`]; `ANY` false: the port is a switch's and holds no queued packet.
    #[inline(always)]
    fn transmit_from<const ANY: bool>(&mut self, link: u32, p: u32) {
        let li = link as usize;
        let size = u32::from(self.pkts[p as usize].size);
        let ri = &self.rates[usize::from(self.ports[li].rate)];
        let c = &ri.tx_cache;
        let tx = if size == c[0].0 {
            c[0].1
        } else if size == c[1].0 {
            c[1].1
        } else {
            self.tx_ps(size, ri.bps)
        };
        self.ports[li].busy = true;
        // After the INT hop (which reads the bytes sent before this packet).
        self.ports[li].tx_bytes += u64::from(size);
        let now = self.now;
        if self.util_bin != 0 {
            self.util_add(li, now, tx, u64::from(size));
        }
        debug_assert!(ANY || (self.ports[li].src >= self.hosts && self.ports[li].total == 0));
        if ANY && (self.ports[li].src < self.hosts || self.ports[li].total > 0) {
            self.schedule(now + tx, ev(EV_TXDONE, link, 0));
            self.ports[li].txdone_pending = true;
        } else {
            // An idle switch port: its TxDone would find nothing to send. Keep its place in the
            // event order and push it only if a packet arrives before it.
            let seq = self.events.reserve_seq();
            let pt = &mut self.ports[li];
            pt.busy_until = now + tx;
            pt.txdone_seq = seq;
            pt.txdone_pending = false;
        }
        let delay = self.ports[li].delay;
        let e = if self.ports[li].dst >= self.hosts && !self.pkts[p as usize].kind.is_pfc() {
            // Into a switch: its egress is the path's next link.
            let pk = &mut self.pkts[p as usize];
            pk.in_link = link;
            let out = self.paths[pk.path as usize + usize::from(pk.hop) + 1];
            ev(EV_HOP, out, p)
        } else {
            ev(EV_ARRIVE, link, p)
        };
        self.schedule(now + tx + delay, e);
    }

    /// Counts a transmission of `size` bytes over [`start`, `start + tx`) in port `li`'s
    /// utilization bins, split across bins in proportion to the time it spends in each.
    #[cold]
    fn util_add(&mut self, li: usize, start: u64, tx: u64, size: u64) {
        let w = self.util_bin;
        let pt = &mut self.ports[li];
        if pt.util.is_empty() {
            pt.util_first = start / w;
        }
        let end = start + tx;
        // Bytes sent by time t (all of them at once when tx is 0).
        let sent = |t: u64| {
            if t <= start {
                0
            } else if t >= end {
                size
            } else {
                size * (t - start) / tx
            }
        };
        let mut t = start;
        loop {
            let b = t / w;
            let bin_end = (b + 1) * w;
            let part = sent(bin_end) - sent(t);
            let i = (b - pt.util_first) as usize;
            if pt.util.len() <= i {
                pt.util.resize(i + 1, 0);
            }
            pt.util[i] += part;
            if bin_end >= end {
                break;
            }
            t = bin_end;
        }
    }

    /// Whether packet `p`, at the end of `link`, was lost to the link's error rate (then it is
    /// counted and released).
    #[inline]
    fn lost_on_wire(&mut self, link: u32, p: u32) -> bool {
        let li = link as usize;
        if !self.link_err.is_empty() && self.link_err[li] > 0.0 && self.rng_err.unit_f64() < self.link_err[li] {
            self.stats.drops_error += 1;
            self.release(p);
            return true;
        }
        false
    }

    fn arrive(&mut self, link: u32, p: u32) {
        if self.lost_on_wire(link, p) {
            return;
        }
        let node = self.ports[link as usize].dst;
        self.pkts[p as usize].hop += 1;
        if self.pkts[p as usize].kind.is_pfc() {
            self.receive_pfc(node, link, p);
        } else {
            debug_assert!(node < self.topo.num_hosts(), "a packet into a switch is an EV_HOP");
            self.host_receive(node, p);
        }
    }

    /// A data packet or ACK reaches a switch, which sends it on `out` (the next link of its path).
    fn hop(&mut self, out: u32, p: u32) {
        let in_link = self.pkts[p as usize].in_link;
        if self.lost_on_wire(in_link, p) {
            return;
        }
        self.pkts[p as usize].hop += 1;
        self.switch_receive(self.ports[out as usize].src, in_link, out, p);
    }

    /// `QbbNetDevice::Receive` of a PFC frame: pause or resume our egress on that cable.
    fn receive_pfc(&mut self, node: u32, in_link: u32, p: u32) {
        let port = self.link_rev[in_link as usize];
        let pk = self.pkts[p as usize];
        self.release(p);
        let q = usize::from(pk.pg);
        self.pfc_log.push(PfcEvent {
            time: SimTime::from_ps(self.now),
            node: NodeId(node),
            link: port,
            pause: pk.kind == Kind::Pause,
        });
        if pk.kind == Kind::Pause {
            self.stats.pfc_pauses += 1;
            self.ports[port as usize].paused |= 1 << q;
        } else {
            self.stats.pfc_resumes += 1;
            self.ports[port as usize].paused &= !(1 << q);
            if node < self.topo.num_hosts() {
                self.host_send(node);
            } else {
                self.switch_send(port);
            }
        }
    }

    // ---------------------------------------------------------------- switch

    /// Next hop at switch `at` of a packet travelling from host `src` to host `dst`.
    fn next_hop_for(&self, at: u32, src: u32, dst: u32, ports: (u16, u16, u64), kind: Kind) -> Result<u32, PacketError> {
        let (dport, sport, hash) = ports;
        match &self.routes {
            Some(r) => {
                let (sip, dip, ports) = match kind {
                    Kind::Data => (
                        self.nics[src as usize].ns3_ip,
                        self.nics[dst as usize].ns3_ip,
                        u32::from(sport) | (u32::from(dport) << 16),
                    ),
                    _ => (
                        self.nics[src as usize].ns3_ip,
                        self.nics[dst as usize].ns3_ip,
                        u32::from(dport) | (u32::from(sport) << 16),
                    ),
                };
                r.next_hop(at, dst, sip, dip, ports, self.ns3_ids[at as usize])
                    .ok_or_else(|| PacketError::Config(format!("no route from node {at} to host {dst}")))
            }
            None => {
                let h = if kind == Kind::Data {
                    hash
                } else {
                    llmsim_core::mix64(hash ^ 0xACC)
                };
                self.topo
                    .next_hop(NodeId(at), NodeId(dst), h)
                    .map(|l| l.0)
                    .map_err(|e| PacketError::Config(e.to_string()))
            }
        }
    }

    /// `SwitchNode::SendToDev`: route, classify, admit, enqueue.
    fn switch_receive(&mut self, s: u32, in_link: u32, out: u32, p: u32) {
        let pk = &self.pkts[p as usize];
        let (kind, pg, size) = (pk.kind, pk.pg, pk.size);
        let q = if kind != Kind::Data && self.cfg.switch_ack_high_prio {
            0
        } else {
            usize::from(pg)
        };
        let size = u64::from(size);
        if q != 0 {
            if !self.check_ingress(s, in_link, q, size) {
                self.stats.drops_buffer += 1;
                self.release(p);
                return;
            }
            if self.port_free_for(out, q) && self.ingress_transparent(s, in_link, q, size) {
                // Straight through without a trace in the ingress account: admitting the packet
                // and taking it out again at once would leave every counter as it was, and
                // neither the PFC check between the two nor the resume check after them would
                // send a frame (see `ingress_transparent`). The port is tested first: on a busy
                // one the ingress test would be wasted. (`port_free_for` only settles a deferred
                // TxDone already past, as any later call would; it is asked again below, after
                // a PFC frame that may have gone out on this very port.)
                self.send_dequeued::<false>(out, q, p, size);
                return;
            }
            self.update_ingress(s, in_link, q, size);
            self.check_and_send_pfc(s, in_link, q);
        }
        if self.port_free_for(out, q) {
            // Straight through: what `enqueue` and then `switch_send` would do, without the
            // round trip through the queue (it is empty, the port idle and class `q` not
            // paused, so `switch_send` would dequeue this very packet).
            self.send_dequeued::<true>(out, q, p, size);
        } else {
            self.ports[out as usize].enqueue(&mut self.pkts, q, p, size);
            self.switch_send(out);
        }
    }

    /// Whether a packet of class `q` arriving for switch port `port` now would leave at once:
    /// nothing queued, the port idle (a deferred TxDone already past counts as idle, as in
    /// `switch_send`, which this settles the same way), class `q` not paused (queue 0 never
    /// is), the link not frozen by Wormhole.
    #[inline]
    fn port_free_for(&mut self, port: u32, q: usize) -> bool {
        let pi = port as usize;
        let pt = &self.ports[pi];
        if pt.total != 0 || (q != 0 && pt.paused & (1 << q) != 0) || matches!(&self.ww, Some(w) if w.link_frozen(port)) {
            return false;
        }
        if pt.busy {
            if pt.txdone_pending {
                return false;
            }
            if self.deferred_txdone_past(pi) {
                self.ports[pi].busy = false;
            } else {
                return false;
            }
        }
        true
    }

    /// Whether the deferred TxDone of switch port `pi` (see `transmit`) would already have run:
    /// its time is past, or now with a sequence number below the running event's.
    #[inline]
    fn deferred_txdone_past(&self, pi: usize) -> bool {
        let pt = &self.ports[pi];
        self.now > pt.busy_until || (self.now == pt.busy_until && self.events.cur_seq() > pt.txdone_seq)
    }

    fn pfc_threshold(&self, s: u32, in_link: u32) -> u64 {
        self.pfc_threshold_at(s, in_link, self.bufs[s as usize].shared_used)
    }

    /// The dynamic PFC threshold of `in_link` at switch `s` were the switch's shared bytes
    /// `shared_used`.
    #[inline]
    fn pfc_threshold_at(&self, s: u32, in_link: u32, shared_used: u64) -> u64 {
        let free = self.bufs[s as usize].free_base.saturating_sub(shared_used);
        // ns-3 computes this in uint32; the configured buffers fit.
        free >> self.ingress[in_link as usize].shift()
    }

    /// Whether a `size`-byte packet of class `q` admitted from `in_link` and dequeued at once
    /// leaves no trace in the ingress account and sends no PFC frame. It holds when the class
    /// holds no headroom bytes and is not paused, and the admission would not pause it
    /// (`check_and_send_pfc` after `update_ingress`): then the packet's bytes go to the class's
    /// reserve or shared bytes, `remove_ingress` takes exactly those back (headroom first, of
    /// which there is none), and `check_and_send_resume` finds the class not paused.
    #[inline]
    fn ingress_transparent(&self, s: u32, in_link: u32, q: usize, size: u64) -> bool {
        let ig = &self.ingress[in_link as usize];
        if ig.hdrm(q) != 0 || ig.paused(q) {
            return false;
        }
        let new_bytes = ig.bytes(q) + size;
        let shared = self.bufs[s as usize].shared_used;
        let reserve = self.cfg.reserve_bytes;
        if new_bytes <= reserve {
            // All in the reserve: the shared bytes stay, and the check compares 0 with the
            // threshold.
            return self.pfc_threshold_at(s, in_link, shared) > 0;
        }
        let used = new_bytes - reserve;
        // The PFC check after the admission compares `used` with the threshold of the shared
        // bytes after it; that threshold is at most the one before, so this also rules out
        // `update_ingress`'s headroom case (`used` over the threshold before), which pauses.
        used < self.pfc_threshold_at(s, in_link, shared + size.min(used))
    }

    #[inline]
    fn shared_used(&self, in_link: u32, q: usize) -> u64 {
        self.ingress[in_link as usize].bytes(q).saturating_sub(self.cfg.reserve_bytes)
    }

    /// `SwitchMmu::CheckIngressAdmission`.
    fn check_ingress(&self, s: u32, in_link: u32, q: usize, size: u64) -> bool {
        let ig = &self.ingress[in_link as usize];
        !(size + ig.hdrm(q) > ig.headroom() && size + self.shared_used(in_link, q) > self.pfc_threshold(s, in_link))
    }

    /// `SwitchMmu::UpdateIngressAdmission`.
    fn update_ingress(&mut self, s: u32, in_link: u32, q: usize, size: u64) {
        let reserve = self.cfg.reserve_bytes;
        let new_bytes = self.ingress[in_link as usize].bytes(q) + size;
        if new_bytes <= reserve {
            self.ingress[in_link as usize].add(q, 0, size);
        } else {
            let thresh = self.pfc_threshold(s, in_link);
            if new_bytes - reserve > thresh {
                self.ingress[in_link as usize].add(q, 1, size);
            } else {
                self.ingress[in_link as usize].add(q, 0, size);
                self.bufs[s as usize].shared_used += size.min(new_bytes - reserve);
            }
        }
    }

    /// `SwitchMmu::RemoveFromIngressAdmission`.
    fn remove_ingress(&mut self, s: u32, in_link: u32, q: usize, size: u64) {
        let reserve = self.cfg.reserve_bytes;
        let ig = &mut self.ingress[in_link as usize];
        let from_hdrm = ig.hdrm(q).min(size);
        let from_shared = (size - from_hdrm).min(ig.bytes(q).saturating_sub(reserve));
        ig.add(q, 1, from_hdrm.wrapping_neg());
        ig.add(q, 0, (size - from_hdrm).wrapping_neg());
        self.bufs[s as usize].shared_used -= from_shared;
    }

    /// Whether class `q` from `in_link` should pause its sender now (`CheckAndSendPfc`'s test).
    #[inline]
    fn pause_due(&self, s: u32, in_link: u32, q: usize) -> bool {
        let ig = &self.ingress[in_link as usize];
        !ig.paused(q) && (ig.hdrm(q) > 0 || self.shared_used(in_link, q) >= self.pfc_threshold(s, in_link))
    }

    fn check_and_send_pfc(&mut self, s: u32, in_link: u32, q: usize) {
        if self.pause_due(s, in_link, q) {
            self.send_pfc(in_link, q, true);
            self.ingress[in_link as usize].set_paused(q, true);
        }
    }

    fn check_and_send_resume(&mut self, s: u32, in_link: u32, q: usize) {
        let ig = &self.ingress[in_link as usize];
        if !ig.paused(q) {
            return;
        }
        let used = self.shared_used(in_link, q);
        if ig.hdrm(q) == 0 && (used == 0 || used + self.cfg.resume_offset_bytes <= self.pfc_threshold(s, in_link)) {
            self.send_pfc(in_link, q, false);
            self.ingress[in_link as usize].set_paused(q, false);
        }
    }

    /// `QbbNetDevice::SendPfc`: a frame in queue 0 of the port back toward the sender.
    fn send_pfc(&mut self, in_link: u32, q: usize, pause: bool) {
        let port = self.link_rev[in_link as usize];
        let mut pk = Pkt::empty();
        pk.kind = if pause { Kind::Pause } else { Kind::Resume };
        pk.pg = q as u8;
        pk.size = PFC_FRAME_BYTES as u16;
        // ns-3 draws the frame's IP id from a fresh random variable.
        if let Some(s) = &mut self.ns3_streams {
            s.skip();
        }
        let p = self.alloc(pk);
        self.ports[port as usize].enqueue(&mut self.pkts, 0, p, u64::from(PFC_FRAME_BYTES));
        self.switch_send(port);
    }

    /// `QbbNetDevice::DequeueAndTransmit` (switch) + `SwitchNode::SwitchNotifyDequeue`.
    pub(crate) fn switch_send(&mut self, port: u32) {
        let pi = port as usize;
        if let Some(w) = &self.ww
            && w.link_frozen(port)
        {
            return;
        }
        if self.ports[pi].busy {
            let pt = &self.ports[pi];
            if pt.txdone_pending {
                return;
            }
            // The deferred TxDone: already past (the port is free), or still ahead (push it).
            let (until, seq) = (pt.busy_until, pt.txdone_seq);
            if self.deferred_txdone_past(pi) {
                self.ports[pi].busy = false;
            } else {
                self.events.push_seq(until, seq, ev(EV_TXDONE, port, 0));
                self.ports[pi].txdone_pending = true;
                return;
            }
        }
        // BEgressQueue::DequeueRR: queue 0 strictly first, then round robin over the others.
        let pt = &mut self.ports[pi];
        if pt.dequeues.wrapping_add(1).is_multiple_of(QLEN_SAMPLE) && !pt.qlen_hist.is_empty() {
            // This dequeue samples the queue-length histogram (below): start loading its bucket
            // now (a hint; the bucket is the same or the one before once the packet is out).
            let kb = ((pt.total / 1000) as usize).min(pt.qlen_hist.len() - 1);
            prefetch(pt.qlen_hist.as_ptr().wrapping_add(kb));
        }
        let q = if pt.has(0) {
            0
        } else {
            // The first queue after `rrlast` (wrapping) that holds a packet and is not paused:
            // rotate the candidates so that queue `rrlast + 1` is bit 0, take the lowest bit.
            let ready = pt.nonempty & !pt.paused;
            if ready == 0 {
                return;
            }
            let from = (u32::from(pt.rrlast) + 1) % NQ as u32;
            (ready.rotate_right(from).trailing_zeros() + from) as usize % NQ
        };
        let Some((p, size)) = pt.dequeue(&self.pkts, q) else { return };
        if self.cfg.cc.uses_int() {
            // HPCC: the next packet out of this queue gets an INT word at its dequeue, a store
            // to a line last touched when the packet was sent. A hint only.
            let h = pt.queues[q].list.head;
            if h != NIL {
                prefetch(self.ints.as_ptr().wrapping_add(h as usize));
            }
        }
        self.send_dequeued::<true>(port, q, p, size);
    }

    /// The rest of `switch_send` once packet `p` (`size` bytes) is out of queue `q`: ingress
    /// accounting, ECN, PFC resume, INT, queue statistics, transmission.
    /// `ACCOUNTED` false: the packet came straight through an empty, idle port and
    /// `ingress_transparent` held, so the ingress account was left as it was; and with every
    /// queue of the port empty, ECN marks nothing (no draw: the egress bytes, 0, are not over
    /// kmin) and the queue length is 0.
    fn send_dequeued<const ACCOUNTED: bool>(&mut self, port: u32, q: usize, p: u32, size: u64) {
        let pi = port as usize;
        let pt = &mut self.ports[pi];
        if q != 0 {
            pt.rrlast = q as u8;
        }
        let s = pt.src;
        if !ACCOUNTED {
            debug_assert!(q != 0 && pt.total == 0);
        } else if q != 0 {
            let in_link = self.pkts[p as usize].in_link;
            self.remove_ingress(s, in_link, q, size);
            if self.cfg.ecn && self.should_mark(pi, q) {
                self.pkts[p as usize].ecn = true;
                self.stats.ecn_marks += 1;
            }
            self.check_and_send_resume(s, in_link, q);
        }
        let pt = &mut self.ports[pi];
        if self.cfg.cc.uses_int() && self.pkts[p as usize].kind == Kind::Data {
            let int_rate = self.rates[usize::from(pt.rate)].int_rate;
            let hop = cc::int::int_hop(self.now / 1000, pt.tx_bytes, pt.total, int_rate, self.cfg.int_multi);
            let pk = &mut self.pkts[p as usize];
            if usize::from(pk.nhop) < MAX_HOPS {
                self.ints[p as usize][usize::from(pk.nhop)] = hop;
                pk.nhop += 1;
            }
        }
        // Queue-length distribution: every 8th dequeue (the histogram is a cache miss on busy
        // fabrics); the maximum is exact.
        let total = if ACCOUNTED { pt.total } else { 0 };
        pt.dequeues = pt.dequeues.wrapping_add(1);
        if pt.dequeues.is_multiple_of(QLEN_SAMPLE) {
            let kb = (total / 1000) as usize;
            if pt.qlen_hist.len() <= kb {
                pt.qlen_hist.resize(kb + 1, 0);
            }
            pt.qlen_hist[kb] += 1;
        }
        pt.max_qlen = pt.max_qlen.max(total + size);
        self.transmit_from::<ACCOUNTED>(port, p);
    }

    /// `SwitchMmu::ShouldSendCN` on the egress bytes of `q` (after this packet left).
    #[inline(always)]
    fn should_mark(&mut self, pi: usize, q: usize) -> bool {
        let pt = &self.ports[pi];
        let b = pt.queues[q].bytes;
        let ri = &self.rates[usize::from(pt.rate)];
        if b > ri.kmax {
            return true;
        }
        if b > ri.kmin {
            let p = ri.pmax * (b - ri.kmin) as f64 / (ri.kmax - ri.kmin) as f64;
            return self.ecn_draw() < p;
        }
        false
    }

    /// The uniform draw of an ECN marking decision between kmin and kmax.
    #[cold]
    fn ecn_draw(&mut self) -> f64 {
        match &mut self.ns3_streams {
            Some(s) => s.next_u01(),
            None => self.rng_ecn.unit_f64(),
        }
    }

    // ---------------------------------------------------------------- host

    /// `QbbNetDevice::DequeueAndTransmit` (host) + `RdmaEgressQueue::GetNextQindex`.
    pub(crate) fn host_send(&mut self, h: u32) {
        let hi = h as usize;
        let link = self.nics[hi].link as usize;
        if let Some(w) = &self.ww
            && w.link_frozen(link as u32)
        {
            return;
        }
        if self.ports[link].busy {
            return;
        }
        let ack_class = if self.cfg.ack_high_prio { 0 } else { 3 };
        if self.ports[link].paused & (1 << ack_class) == 0
            && let Some(p) = self.nics[hi].ackq.pop_front(&self.pkts)
        {
            self.transmit(link as u32, p);
            return;
        }
        let var_win = self.cfg.var_win;
        let now = self.now;
        let n = self.nics[hi].qps.len();
        let mut res: Option<usize> = None;
        let mut min_finish = usize::MAX;
        {
            let nic = &self.nics[hi];
            let paused = self.ports[link].paused;
            // From the QP after the last one served, wrapping: (rrlast + i) % n for i in 1..=n,
            // with one division instead of one per QP.
            let mut idx = if n == 0 { 0 } else { nic.rrlast as usize % n };
            for _ in 0..n {
                idx = if idx + 1 == n { 0 } else { idx + 1 };
                let fl = &self.flows[nic.qps[idx] as usize];
                if paused & (1 << fl.pg) == 0 && fl.bytes_left() > 0 && !fl.win_bound(var_win) {
                    if fl.next_avail > now {
                        continue;
                    }
                    res = Some(idx);
                    break;
                } else if fl.finished() {
                    min_finish = min_finish.min(idx);
                }
            }
        }
        if min_finish != usize::MAX {
            let flows = &self.flows;
            let qps = &mut self.nics[hi].qps;
            let mut nxt = min_finish;
            for i in min_finish + 1..n {
                if !flows[qps[i] as usize].finished() {
                    if res == Some(i) {
                        res = Some(nxt);
                    }
                    qps[nxt] = qps[i];
                    nxt += 1;
                }
            }
            qps.truncate(nxt);
        }
        if let Some(idx) = res {
            let f = self.nics[hi].qps[idx];
            // A NIC's QPs are indexed in u32 (`Flow` ids are).
            self.nics[hi].rrlast = idx as u32;
            let p = self.make_data(f);
            self.transmit(link as u32, p);
            // RdmaHw::PktSent -> UpdateNextAvail
            let size = u32::from(self.pkts[p as usize].size);
            let fl = &self.flows[f as usize];
            let rate = if self.cfg.rate_bound { fl.rate } else { fl.max_rate };
            let gap = self.tx_ps(size, rate);
            let fl = &mut self.flows[f as usize];
            fl.last_pkt_size = size;
            fl.next_avail = now + gap;
        } else {
            let nic = &self.nics[hi];
            let mut t = u64::MAX;
            for &f in &nic.qps {
                let fl = &self.flows[f as usize];
                if fl.bytes_left() > 0 {
                    t = t.min(fl.next_avail);
                }
            }
            if nic.next_send.is_none() && t != u64::MAX && t > now {
                self.schedule_wake(h, t);
            }
        }
    }

    fn schedule_wake(&mut self, h: u32, t: u64) {
        let nic = &mut self.nics[h as usize];
        nic.wake_gen = nic.wake_gen.wrapping_add(1);
        nic.next_send = Some(t);
        let g = nic.wake_gen;
        self.schedule(t, ev(EV_WAKE, h, g));
    }

    /// `QbbNetDevice::UpdateNextAvail`: pull a pending wake-up earlier.
    pub(crate) fn nic_update_next_avail(&mut self, h: u32, t: u64) {
        if let Some(pending) = self.nics[h as usize].next_send
            && t < pending
        {
            let at = t.max(self.now);
            self.schedule_wake(h, at);
        }
    }

    /// `RdmaHw::GetNxtPacket`.
    fn make_data(&mut self, f: u32) -> u32 {
        let mtu = u64::from(self.cfg.mtu);
        let now_ns = self.now_ns();
        let hdr = self.hdr_bytes;
        let fl = &mut self.flows[f as usize];
        let payload = fl.bytes_left().min(mtu) as u32;
        let mut pk = Pkt::empty();
        pk.kind = Kind::Data;
        pk.pg = fl.pg;
        pk.flow = f;
        pk.path = fl.path_data;
        pk.seq = fl.snd_nxt;
        // At most `mtu` payload bytes: `new` checked that a full packet fits.
        pk.size = (payload + hdr) as u16;
        if fl.snd_nxt < fl.max_sent {
            self.stats.retransmitted_bytes += u64::from(payload);
        }
        fl.snd_nxt += u64::from(payload);
        fl.max_sent = fl.max_sent.max(fl.snd_nxt);
        self.stats.data_packets += 1;
        let p = self.alloc(pk);
        if self.cfg.cc.uses_send_ts() {
            self.ts[p as usize] = now_ns;
        }
        p
    }

    fn host_receive(&mut self, h: u32, p: u32) {
        let pk = self.pkts[p as usize];
        match pk.kind {
            Kind::Data => {
                if !self.receive_data(h, p, &pk) {
                    self.release(p);
                }
            }
            Kind::Ack | Kind::Nack => {
                self.receive_ack(h, p, &pk);
                self.release(p);
            }
            Kind::Pause | Kind::Resume => unreachable!("PFC handled on arrival"),
        }
    }

    /// `RdmaHw::ReceiveUdp` + `ReceiverCheckSeq`. Returns whether data packet `p`'s slot now
    /// holds the ACK or NACK it triggered (else the caller releases it): the ACK takes over the
    /// slot whose line was just read, and with it the INT words (HPCC) and send timestamp
    /// (TIMELY) it echoes, which are then not copied.
    fn receive_data(&mut self, h: u32, p: u32, pk: &Pkt) -> bool {
        let f = pk.flow as usize;
        if self.flows[f].done {
            return false;
        }
        let now = self.now;
        let cfg_ack = self.cfg.ack_interval;
        let chunk = self.cfg.chunk;
        let nack_iv = self.cfg.nack_interval.as_ps();
        let back0 = self.cfg.back_to_zero;
        let hdr = self.hdr_bytes;
        let fl = &mut self.flows[f];
        fl.rx_milestone = cfg_ack;
        let expected = fl.rx_expected;
        let x = if pk.seq == expected {
            let payload = u64::from(pk.size) - u64::from(hdr);
            fl.rx_expected = expected + payload;
            self.stats.payload_delivered += payload;
            if fl.rx_expected >= fl.rx_milestone {
                fl.rx_milestone += cfg_ack;
                1
            } else if chunk > 0 && fl.rx_expected.is_multiple_of(chunk) {
                1
            } else {
                5
            }
        } else if pk.seq > expected {
            if now >= fl.nack_timer || fl.last_nack != expected {
                fl.nack_timer = now + nack_iv;
                fl.last_nack = expected;
                if back0 && chunk > 0 {
                    fl.rx_expected = fl.rx_expected / chunk * chunk;
                }
                2
            } else {
                4
            }
        } else {
            3
        };
        if x != 1 && x != 2 {
            return false;
        }
        let mut a = Pkt::empty();
        a.kind = if x == 1 { Kind::Ack } else { Kind::Nack };
        a.pg = pk.pg;
        a.flow = pk.flow;
        a.path = self.flows[f].path_ack;
        a.seq = self.flows[f].rx_expected;
        a.cnp = pk.ecn;
        a.nhop = pk.nhop;
        a.size = self.ack_bytes as u16;
        if x == 1 {
            self.stats.acks += 1;
        } else {
            self.stats.nacks += 1;
        }
        // The data packet's slot: its `ints` and `ts` entries are the ones the ACK echoes.
        self.pkts[p as usize] = a;
        self.nics[h as usize].ackq.push_back(&mut self.pkts, p);
        self.host_send(h);
        true
    }

    /// `RdmaHw::ReceiveAck`.
    fn receive_ack(&mut self, h: u32, p: u32, pk: &Pkt) {
        let f = pk.flow;
        let fi = f as usize;
        if self.flows[fi].done {
            return;
        }
        let chunk = self.cfg.chunk;
        {
            let fl = &mut self.flows[fi];
            let ack = if self.cfg.back_to_zero && chunk > 0 {
                pk.seq / chunk * chunk
            } else {
                pk.seq
            };
            if ack > fl.snd_una {
                fl.snd_una = ack;
            }
        }
        if self.flows[fi].finished() {
            self.complete(f);
        }
        if pk.kind == Kind::Nack {
            let fl = &mut self.flows[fi];
            fl.snd_nxt = fl.snd_una;
        }
        cc::on_ack(self, f, p, pk);
        self.host_send(h);
    }

    fn complete(&mut self, f: u32) {
        self.mark_done(f);
        if self.ww.is_some() {
            self.ww_on_finish(f);
        }
    }

    /// Flow `f` is done now: its timers stop and its completion is reported.
    pub(crate) fn mark_done(&mut self, f: u32) {
        let now = self.now;
        let fl = &mut self.flows[f as usize];
        fl.done = true;
        fl.finish = now;
        for g in &mut fl.timer_gen {
            *g = g.wrapping_add(1);
        }
        self.stats.flows_done += 1;
        self.completed.push(f);
    }

    fn tx_gap(&self, bytes: u32, bps: u64) -> u64 {
        if bytes == 0 || bps == 0 {
            return 0;
        }
        if self.cfg.ns_resolution {
            ns3_tx_ns(u64::from(bytes), bps) * 1000
        } else {
            (u128::from(bytes) * 8 * 1_000_000_000_000u128).div_ceil(u128::from(bps)) as u64
        }
    }

    /// Records bytes sent per port in bins of `bin` (link utilization over time); off by default.
    pub fn set_util_bin(&mut self, bin: SimTime) {
        self.util_bin = bin.as_ps();
    }

    /// Per port with traffic: (link, bin index, utilization) for every non-empty bin (bins of the
    /// width given to [`Engine::set_util_bin`], counted from time zero). A transmission counts in
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

    pub fn now(&self) -> SimTime {
        SimTime::from_ps(self.now)
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    pub fn config(&self) -> &PacketConfig {
        &self.cfg
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Flows completed since the last call, in completion order.
    pub fn drain_completed(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.completed);
    }

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

/// What congestion control sees of the engine (`cc/`).
impl CcHost for Engine {
    #[inline]
    fn cfg(&self) -> &PacketConfig {
        &self.cfg
    }
    #[inline]
    fn flow(&mut self, f: u32) -> &mut Flow {
        &mut self.flows[f as usize]
    }
    #[inline]
    fn now_ns(&self) -> u64 {
        self.now / 1000
    }
    #[inline]
    fn max_bdp(&self) -> u64 {
        self.max_bdp
    }
    fn schedule_timer(&mut self, f: u32, slot: usize, delay_ps: u64) {
        let g = self.flows[f as usize].timer_gen[slot];
        let at = self.now + delay_ps;
        self.schedule(at, ev(EV_CC_TIMER + slot as u64, f, g));
    }
    fn cancel_timer(&mut self, f: u32, slot: usize) {
        let g = &mut self.flows[f as usize].timer_gen[slot];
        *g = g.wrapping_add(1);
    }
    #[inline]
    fn change_rate(&mut self, f: u32, new_rate: u64) {
        let fl = &self.flows[f as usize];
        let size = fl.last_pkt_size;
        let old_gap = self.tx_gap(size, fl.rate);
        let new_gap = self.tx_gap(size, new_rate);
        let na = (i128::from(fl.next_avail) + i128::from(new_gap) - i128::from(old_gap)).max(0) as u64;
        let src = fl.src;
        self.flows[f as usize].next_avail = na;
        self.nic_update_next_avail(src, na);
        self.flows[f as usize].rate = new_rate;
    }
    #[inline]
    fn int_words(&self, p: u32) -> [u64; MAX_HOPS] {
        self.ints[p as usize]
    }
    #[inline]
    fn send_ts(&self, p: u32) -> u64 {
        self.ts[p as usize]
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
    fn one_switch() -> Engine {
        let text = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n";
        let imp = llmsim_topo::ns3::parse_ns3(text, "test.txt", 1).expect("topology parses");
        let cfg = PacketConfig {
            buffer_bytes: 1 << 20,
            ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
        };
        Engine::new(Arc::new(imp.topology), Some(imp.file_ids), cfg).expect("engine")
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
