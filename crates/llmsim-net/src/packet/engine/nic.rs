//! Host NICs: flows (QPs) added and started, the send loop (ACK queue first, then round robin
//! over ready QPs, rate pacing and windows), receipt of data (ACK/NACK, go-back-N) and of ACKs
//! (congestion control through `cc/`), completion; and the `CcHost` view of the engine.

use super::*;

impl PacketEngine {
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
        let mut npaths = 1u8;
        let r = self
            .route_path_kind(spec.src.0, spec.dst.0, (spec.dport, sport, spec.flow_hash), Kind::Data, &mut p)
            .and_then(|()| {
                if self.cfg.load_balance != LoadBalance::Ecmp {
                    npaths = self.equal_cost_paths(
                        spec.src.0,
                        spec.dst.0,
                        (spec.dport, sport, spec.flow_hash),
                        path_data as usize,
                        &mut p,
                    )?;
                }
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
            npaths,
            path_idx: 0,
            last_tx: 0,
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
        if self.tcp_on {
            self.tcp
                .push(crate::packet::transport::tcp::TcpFlow::new(&self.cfg.tcp, u64::from(self.cfg.mtu)));
        }
        if self.uet_on {
            self.uet.push(crate::packet::transport::uet::UetFlow::new());
        }
        self.schedule(start, ev(EV_START, id, 0));
        Ok(id)
    }

    /// Appends to `p` the distinct data paths from `s` to `d` of the same length as the one at
    /// `p[first..]` (routed by derived hashes through the topology's rule), up to
    /// `lb::MAX_PATHS` in all; returns how many `p` then holds from `first`.
    pub(super) fn equal_cost_paths(
        &self,
        s: u32,
        d: u32,
        ports: (u16, u16, u64),
        first: usize,
        p: &mut Vec<u32>,
    ) -> Result<u8, PacketError> {
        let len = p.len() - first;
        let mut n = 1usize;
        let mut cand = Vec::with_capacity(len);
        for k in 1..(crate::packet::lb::MAX_PATHS * 4) as u64 {
            if n == crate::packet::lb::MAX_PATHS {
                break;
            }
            cand.clear();
            let h = llmsim_core::mix64(ports.2 ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            self.route_path_kind(s, d, (ports.0, ports.1, h), Kind::Data, &mut cand)?;
            if cand.len() == len && !p[first..].chunks(len).any(|q| q == cand.as_slice()) {
                p.extend_from_slice(&cand);
                n += 1;
            }
        }
        Ok(n as u8)
    }

    /// `RdmaHw::AddQueuePair` + `QbbNetDevice::NewQp`.
    pub(super) fn start_flow(&mut self, f: u32) {
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
        if self.uet_on {
            self.uet_start(f);
        }
        if self.faults.is_some() {
            self.fault_on_start(f);
        }
        self.nics[src as usize].qps.push(f);
        self.host_send(src);
    }

    // ---------------------------------------------------------------- host

    /// `QbbNetDevice::DequeueAndTransmit` (host) + `RdmaEgressQueue::GetNextQindex`.
    pub(crate) fn host_send(&mut self, h: u32) {
        if self.tcp_on {
            return self.tcp_host_send(h);
        }
        if self.uet_on {
            return self.uet_host_send(h);
        }
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

    pub(super) fn schedule_wake(&mut self, h: u32, t: u64) {
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
    pub(super) fn make_data(&mut self, f: u32) -> u32 {
        let mtu = u64::from(self.cfg.mtu);
        let now_ns = self.now_ns();
        let hdr = self.hdr_bytes;
        let fl = &mut self.flows[f as usize];
        let payload = fl.bytes_left().min(mtu) as u32;
        let mut pk = Pkt::empty();
        pk.kind = Kind::Data;
        pk.pg = fl.pg;
        pk.flow = f;
        pk.path = crate::packet::lb::pick(self.cfg.load_balance, fl, self.now, &self.paths, &self.ports);
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

    pub(super) fn host_receive(&mut self, h: u32, p: u32) {
        let pk = self.pkts[p as usize];
        match pk.kind {
            Kind::Data => {
                let kept = if self.tcp_on {
                    self.tcp_receive_data(h, p, &pk)
                } else if self.uet_on {
                    self.uet_receive_data(h, p, &pk)
                } else {
                    self.receive_data(h, p, &pk)
                };
                if !kept {
                    self.release(p);
                }
            }
            Kind::Trim => {
                if !self.uet_receive_trim(h, p, &pk) {
                    self.release(p);
                }
            }
            Kind::Ack | Kind::Nack => {
                if self.tcp_on {
                    self.tcp_receive_ack(h, &pk);
                } else if self.uet_on {
                    self.uet_receive_ack(h, p, &pk);
                } else {
                    self.receive_ack(h, p, &pk);
                }
                self.release(p);
            }
            Kind::Pause | Kind::Resume => unreachable!("PFC handled on arrival"),
        }
    }

    /// `RdmaHw::ReceiveUdp` + `ReceiverCheckSeq`. Returns whether data packet `p`'s slot now
    /// holds the ACK or NACK it triggered (else the caller releases it): the ACK takes over the
    /// slot whose line was just read, and with it the INT words (HPCC) and send timestamp
    /// (TIMELY) it echoes, which are then not copied.
    pub(super) fn receive_data(&mut self, h: u32, p: u32, pk: &Pkt) -> bool {
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
        let link = self.nics[h as usize].link;
        if self.ww_passes(link, p) {
            self.ww_pass(link, p);
            return true;
        }
        self.nics[h as usize].ackq.push_back(&mut self.pkts, p);
        self.host_send(h);
        true
    }

    /// `RdmaHw::ReceiveAck`.
    pub(super) fn receive_ack(&mut self, h: u32, p: u32, pk: &Pkt) {
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

    pub(crate) fn complete(&mut self, f: u32) {
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

    pub(super) fn tx_gap(&self, bytes: u32, bps: u64) -> u64 {
        if bytes == 0 || bps == 0 {
            return 0;
        }
        if self.cfg.ns_resolution {
            ns3_tx_ns(u64::from(bytes), bps) * 1000
        } else {
            (u128::from(bytes) * 8 * 1_000_000_000_000u128).div_ceil(u128::from(bps)) as u64
        }
    }
}

/// What congestion control sees of the engine (`cc/`).
impl CcHost for PacketEngine {
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
    fn path_hops(&self, f: u32) -> u32 {
        let fl = &self.flows[f as usize];
        (fl.path_ack - fl.path_data) / u32::from(fl.npaths.max(1))
    }
}
