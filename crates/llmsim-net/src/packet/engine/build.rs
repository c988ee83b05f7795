//! Building the engine: ports, rate table, ingress accounts, NICs and routes from a topology
//! and a configuration; paths, RTTs and stand-alone FCTs of flows.

use super::*;

impl PacketEngine {
    /// Builds the engine on `topo`. `ns3_ids[n]` is node `n`'s id in an ns-3 topology file
    /// (identity when `None`): it sets IPs, ECMP seeds and the order of next hops.
    ///
    /// # Errors
    /// `PacketError::Config` when a port's rate has no ECN thresholds, a host has no NIC, a
    /// Wormhole knob is out of range, `ns3_ids` does not give one id per node, or the topology's
    /// hosts relay traffic (BCube: this engine forwards at switches only).
    pub fn new(topo: Arc<Topology>, ns3_ids: Option<Vec<u32>>, mut cfg: PacketConfig) -> Result<PacketEngine, PacketError> {
        if topo.hosts_forward() {
            return Err(PacketError::Config(format!(
                "{}: hosts relay traffic ({} routing) and the packet engine forwards at switches only; \
                 use network.backend: flow or analytical",
                topo.name,
                topo.routing().name()
            )));
        }
        if cfg.transport == Transport::Uet {
            // UET's control packets (ACK, NACK, trimmed headers) take the strict-priority queue.
            cfg.switch_ack_high_prio = true;
        }
        if cfg.wormhole.fast_forward {
            cfg.wormhole.validate().map_err(PacketError::Config)?;
        }
        check_load_balance(&cfg)?;
        cfg.check_transport().map_err(PacketError::Config)?;
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
                let e = switch_ecn(&cfg, rate).ok_or_else(|| {
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
        // Lossy switches: the buffer divided evenly among the switch's ports.
        for (n, b) in bufs.iter_mut().enumerate() {
            let ports = topo.ports(NodeId(n as u32)).len() as u64;
            if is_switch(n as u32) && ports > 0 {
                b.port_cap = cfg.buffer_bytes / ports;
            }
        }
        if !cfg.pfc {
            // A lossy switch that cannot hold one packet on a port drops (TCP) or trims (UET)
            // every packet: no flow would ever finish.
            let pkt = u64::from(cfg.data_packet_bytes(cfg.mtu));
            for (n, b) in bufs.iter().enumerate() {
                let ports = topo.ports(NodeId(n as u32)).len() as u64;
                let room = match cfg.drop_policy {
                    DropPolicy::PerPortTailDrop => b.port_cap,
                    DropPolicy::SharedTailDrop => cfg.buffer_bytes,
                };
                if is_switch(n as u32) && ports > 0 && room < pkt {
                    return Err(PacketError::Config(format!(
                        "network.switch_buffer={} bytes leaves {room} bytes per port on switch {n} ({ports} ports), under one \
                         {pkt}-byte data packet: the lossy switch would drop (tcp) or trim (uet) every packet and no flow \
                         would finish; give at least {} bytes",
                        cfg.buffer_bytes,
                        pkt * ports
                    )));
                }
            }
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
            PacketRouting::Ns3 => Some(Ns3Routes::build(&topo, &ns3_ids, &link_dst)),
            PacketRouting::Topology => None,
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
        let (cfg_transport, cfg_pfc) = (cfg.transport, cfg.pfc);
        let cfg_ts_on = cfg.cc.uses_send_ts() || cfg.transport == Transport::Uet;
        let mut e = PacketEngine {
            rng_ecn: SimRng::derive(cfg.seed, 0xEC4),
            ns3_streams: cfg.ns3_stream_base.map(|b| crate::packet::ns3rng::Ns3Streams::new(1, 1, b)),
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
            ack_load: Vec::new(),
            faults: None,
            tcp_on: cfg_transport == Transport::Tcp,
            lossy: !cfg_pfc,
            tcp: Vec::new(),
            tcp_min_rto_wait: u64::MAX,
            uet_on: cfg_transport == Transport::Uet,
            uet: Vec::new(),
            nscc: crate::packet::transport::uet::NsccParams::new(&UetConfig::default(), 1, 1, 1),
            ts_on: cfg_ts_on,
        };
        for r in 0..e.rates.len() {
            let mut ri = e.rates[r];
            e.finish_rate(&mut ri);
            e.rates[r] = ri;
        }
        e.compute_max_rtt();
        if e.uet_on {
            e.nscc = crate::packet::transport::uet::NsccParams::new(&e.cfg.uet, e.max_rtt_ns * 1000, nic_rate, e.cfg.mtu);
        }
        if e.cfg.wormhole.fast_forward {
            e.ww = Some(Box::new(crate::packet::wormhole::Wormhole::new(&e)));
        }
        Ok(e)
    }

    /// What follows from a rate entry once the engine exists: the serialization times of the
    /// two common packet sizes, and under UET the switch ports' marking between fractions of
    /// the trim threshold (on their data queue) in place of the configuration's thresholds.
    pub(super) fn finish_rate(&self, ri: &mut RateInfo) {
        let rate = ri.bps;
        ri.tx_cache = [self.hdr_bytes + self.cfg.mtu, self.ack_bytes].map(|b| (b, self.tx_ps(b, rate)));
        if self.uet_on {
            let u = self.cfg.uet;
            ri.kmin = (u.trim_threshold_bytes as f64 * u.ecn_kmin_frac) as u64;
            ri.kmax = (u.trim_threshold_bytes as f64 * u.ecn_kmax_frac) as u64;
            ri.pmax = 1.0;
        }
    }

    /// Max base RTT and BDP over host pairs (`third.cc`: maxRtt, maxBdp), over routed paths.
    pub(super) fn compute_max_rtt(&mut self) {
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

    /// Standalone FCT of flow `f`, in whole ns as ns-3 computes it (`third.cc` `qp_finish`): base
    /// RTT + wire bytes without INT over the bottleneck; `None` when the engine has no flow `f`.
    pub fn standalone_fct(&self, f: usize) -> Option<SimTime> {
        (f < self.flows.len()).then(|| SimTime::from_ns(self.standalone_fct_ns_of(f)))
    }

    /// [`Self::standalone_fct`] of a flow the engine made (`f < self.flows.len()`), in ns.
    pub(crate) fn standalone_fct_ns_of(&self, f: usize) -> u64 {
        let fl = &self.flows[f];
        let mut path = Vec::new();
        let _ = self.route_path(fl.src, fl.dst, f as u32, &mut path);
        let (rtt, bw) = self.path_rtt(&path);
        let pkts = (fl.size.max(1) - 1) / u64::from(self.cfg.mtu) + 1;
        let hdr = if self.tcp_on {
            54
        } else if self.uet_on {
            u64::from(self.hdr_bytes)
        } else {
            48
        };
        let total = fl.size + pkts * hdr;
        rtt + total * 8_000_000_000 / bw
    }
}

/// `load_balance` other than ECMP needs the topology's routing rule (ns-3's tables hash ports,
/// not the flow hash the paths are found by), no Wormhole fast-forward (it takes a flow's data
/// path to be one path), and a flowlet gap above zero.
pub(crate) fn check_load_balance(cfg: &PacketConfig) -> Result<(), PacketError> {
    let lb = cfg.load_balance;
    if lb == LoadBalance::Ecmp {
        return Ok(());
    }
    if cfg.routing != PacketRouting::Topology {
        return Err(PacketError::Config(format!(
            "load_balance {} needs the topology's routing rule (routing = topology), not ns-3's tables; use ecmp with them",
            lb.name()
        )));
    }
    if cfg.wormhole.fast_forward {
        return Err(PacketError::Config(format!(
            "load_balance {} does not combine with Wormhole fast-forward yet; use ecmp or turn fast_forward off",
            lb.name()
        )));
    }
    if let LoadBalance::Flowlet { gap } = lb
        && gap.as_ps() == 0
    {
        return Err(PacketError::Config(
            "load_balance flowlet: the idle gap must be above 0, e.g. 50us".into(),
        ));
    }
    Ok(())
}

/// ECN thresholds of a switch port at `rate`: the configuration's for that rate, else (under the
/// topology's routing) scaled from the configured ones; `None` when neither applies.
pub(super) fn switch_ecn(cfg: &PacketConfig, rate: u64) -> Option<crate::packet::config::EcnThresholds> {
    cfg.ecn_for(rate)
        .or_else(|| (cfg.routing == PacketRouting::Topology).then(|| cfg.ecn_scaled(rate)).flatten())
}
