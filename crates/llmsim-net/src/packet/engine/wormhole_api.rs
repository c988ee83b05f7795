//! The engine as Wormhole sees it: the one interface `packet/wormhole/` uses (issue 31; issue
//! 32 §0 found Wormhole reaching into the engine's tables directly).
//!
//! Wormhole reads flows and links, parks and requeues events, and when a frozen partition
//! resumes, moves the clocks of its ports, NICs and packets on. Everything it needs of the
//! engine is a method here; `wormhole/` touches no engine field. A change to the engine's
//! tables (a new absolute time on a port or a packet, say) is made here once for Wormhole.

use std::ops::Range;

use super::PacketEngine;
use crate::packet::tables::{Flow, Kind};
use crate::packet::wormhole::Wormhole;

impl PacketEngine {
    // ---------------------------------------------------------------- time and events

    /// The current time, in ps.
    #[inline]
    pub(in crate::packet) fn now_ps(&self) -> u64 {
        self.now
    }

    /// Queues event `e` at `at` (ps).
    #[inline]
    pub(in crate::packet) fn ww_schedule(&mut self, at: u64, e: u64) {
        self.schedule(at, e);
    }

    /// The frozen slot event `e` belongs to ([`Wormhole::owner`]), or `NONE`.
    #[inline]
    pub(in crate::packet) fn event_owner(&self, w: &Wormhole, e: u64) -> u32 {
        w.owner(&self.nics, &self.pkts, e)
    }

    /// Moves the queued events that belong to slot `s` (its links' packets and transmissions,
    /// its NICs' wake-ups, its flows' CC timers) into `out` as `(time, seq, event)`.
    pub(in crate::packet) fn take_slot_events(&mut self, w: &Wormhole, s: u32, out: &mut Vec<(u64, u64, u64)>) {
        let (nics, pkts) = (&self.nics, &self.pkts);
        self.events.extract(|e| w.owner(nics, pkts, e) == s, out);
    }

    /// Puts a parked event back at `t` with its original sequence number.
    #[inline]
    pub(in crate::packet) fn requeue_event(&mut self, t: u64, seq: u64, e: u64) {
        self.events.push_seq(t, seq, e);
    }

    /// Parks the event being dispatched: it is not counted as run, and its sequence number is
    /// returned so it can be requeued in order.
    #[inline]
    pub(in crate::packet) fn park_current_event(&mut self) -> u64 {
        self.stats.events -= 1;
        self.events.cur_seq()
    }

    // ---------------------------------------------------------------- flows

    /// Flow `f`.
    #[inline]
    pub(in crate::packet) fn flow(&self, f: u32) -> &Flow {
        &self.flows[f as usize]
    }

    /// Flow `f`, to move its sequence numbers and clocks on.
    #[inline]
    pub(in crate::packet) fn flow_mut(&mut self, f: u32) -> &mut Flow {
        &mut self.flows[f as usize]
    }

    /// Every flow, by id.
    #[inline]
    pub(in crate::packet) fn flow_table(&self) -> &[Flow] {
        &self.flows
    }

    /// The links of flow `f`: its data path, then its ACK path.
    #[inline]
    pub(in crate::packet) fn flow_links(&self, f: u32) -> &[u32] {
        &self.paths[self.flow_path_range(f as usize)]
    }

    /// Flow `f`'s data path and ACK path (links).
    #[inline]
    pub(in crate::packet) fn flow_paths(&self, f: u32) -> (&[u32], &[u32]) {
        let fl = &self.flows[f as usize];
        let end = self.flow_path_range(f as usize).end;
        (
            &self.paths[fl.path_data as usize..fl.path_ack as usize],
            &self.paths[fl.path_ack as usize..end],
        )
    }

    /// Flow `f`'s links as a range of `paths`: the ACK path ends at the link into the sender.
    /// (A flow a failure routed again has its paths at the end of the table, so the next flow's
    /// start does not bound them.)
    fn flow_path_range(&self, f: usize) -> Range<usize> {
        let fl = &self.flows[f];
        let start = fl.path_data as usize;
        let mut end = fl.path_ack as usize;
        while let Some(&l) = self.paths.get(end) {
            end += 1;
            if self.ports[l as usize].dst == fl.src {
                break;
            }
        }
        start..end
    }

    /// The base round trip of flow `f`'s own path, in ns (its `base_rtt_ns` is the network's
    /// largest under ns-3's `GLOBAL_T`, which is what the CC uses, not what its window in flight
    /// spans).
    pub(in crate::packet) fn own_rtt_ns(&self, f: u32) -> u64 {
        self.path_rtt(self.flow_paths(f).0).0
    }

    /// A flow's payload rate cap in bit/s: full packets back to back on its bottleneck link, at
    /// the engine's own serialization time (whole nanoseconds under `ns_resolution`, as ns-3:
    /// 1048 bytes take 20 ns at 400 Gbit/s, not 20.96), so never faster than the packets could go.
    pub(in crate::packet) fn payload_cap(&self, f: u32) -> f64 {
        let rate = self.flow_paths(f).0.iter().map(|&k| self.link_rate[k as usize]).min().unwrap_or(0);
        self.payload_bps_at(rate)
    }

    /// Link `l`'s payload rate in bit/s: full packets back to back (as [`Self::payload_cap`]).
    pub(in crate::packet) fn link_payload_bps(&self, l: u32) -> f64 {
        self.payload_bps_at(self.link_rate[l as usize])
    }

    /// The payload rate in bit/s of full packets back to back on a link of `rate`, at the
    /// engine's own serialization time.
    fn payload_bps_at(&self, rate: u64) -> f64 {
        let tx = self.tx_ps(self.cfg.mtu + self.hdr_bytes, rate);
        if tx == 0 {
            return 0.0;
        }
        f64::from(self.cfg.mtu) * 8.0 / (tx as f64 * 1e-12)
    }

    /// Counts `bytes` of payload delivered without packets (fast-forwarded).
    #[inline]
    pub(in crate::packet) fn count_delivered(&mut self, bytes: u64) {
        self.stats.payload_delivered += bytes;
    }

    /// Flow `f` is done now (a mirrored twin finishing with its leader).
    #[inline]
    pub(in crate::packet) fn finish_flow(&mut self, f: u32) {
        self.mark_done(f);
    }

    // ---------------------------------------------------------------- links

    /// Number of directed links.
    #[inline]
    pub(in crate::packet) fn num_links(&self) -> usize {
        self.link_rate.len()
    }

    /// Line rate of link `l`, in bit/s.
    #[inline]
    pub(in crate::packet) fn link_rate_bps(&self, l: u32) -> u64 {
        self.link_rate[l as usize]
    }

    /// Propagation delay of link `l`, in ps.
    #[inline]
    pub(in crate::packet) fn link_delay_ps(&self, l: u32) -> u64 {
        self.ports[l as usize].delay
    }

    /// Bytes queued at link `l`'s egress port.
    #[inline]
    pub(in crate::packet) fn link_queue_bytes(&self, l: u32) -> u64 {
        self.ports[l as usize].total
    }

    /// Bytes of a full data packet on the wire (payload and headers).
    #[inline]
    pub(in crate::packet) fn wire_mtu_bytes(&self) -> u32 {
        self.cfg.mtu + self.hdr_bytes
    }

    // ---------------------------------------------------------------- a frozen partition's clocks

    /// Thawing link `l` of a slot frozen at `t0` for `d`: its port's busy time and, on a host's
    /// link, the NIC's pending wake-up move on by `d`.
    pub(in crate::packet) fn shift_port_clocks(&mut self, l: u32, t0: u64, d: u64) {
        let li = l as usize;
        if self.ports[li].busy_until > t0 {
            self.ports[li].busy_until += d;
        }
        let src = self.ports[li].src;
        if src < self.topo.num_hosts()
            && let Some(t) = self.nics[src as usize].next_send.as_mut()
        {
            *t += d;
        }
    }

    /// Link `l` joins a slot frozen `back` ps ago (at `t0 = now - back`), whose resume moves
    /// every clock past `t0` on by the whole skip ([`Self::shift_port_clocks`]): a port busy past
    /// now is set back by `back`; one whose last transmission ended between `t0` and now is idle
    /// and must stay so, so its end is moved to `t0`, which the resume leaves alone (moved on,
    /// it read busy for the skip's length after the resume, and what was queued there waited).
    pub(in crate::packet) fn set_back_port_clock(&mut self, l: u32, back: u64) {
        let now = self.now;
        let t0 = now - back;
        let pt = &mut self.ports[l as usize];
        if pt.busy_until > now {
            pt.busy_until -= back;
        } else if pt.busy_until > t0 {
            pt.busy_until = t0;
        }
    }

    /// Whether packet `p`, about to enter link `l`'s port, is a PFC frame or an ACK, NACK or CNP
    /// of a running flow while `l` is frozen: partitions are made of data links only, so a running flow's ACK
    /// path may cross a frozen partition's data link, and the ACK must not wait for its resume.
    #[inline]
    pub(in crate::packet) fn ww_passes(&self, l: u32, p: u32) -> bool {
        let Some(w) = self.ww.as_deref() else { return false };
        let pk = &self.pkts[p as usize];
        w.link_frozen(l) && !matches!(pk.kind, Kind::Data) && (pk.kind.is_pfc() || !w.flow_frozen(pk.flow))
    }

    /// Sends packet `p` ([`Self::ww_passes`]) over frozen link `l` without its port: it reaches
    /// the far end one serialization and the propagation delay from now, as through an idle
    /// port; the frozen port's queues, clocks and buffer accounting stay as they are. The error
    /// is the wait the ACK would have had there: none behind a NIC's data (ACKs go first), the
    /// port's queue at a switch, where ACKs share the data's class by default (ns-3's).
    pub(in crate::packet) fn ww_pass(&mut self, l: u32, p: u32) {
        let li = l as usize;
        let tx = self.tx_ps(u32::from(self.pkts[p as usize].size), self.link_rate[li]);
        let at = self.now + tx + self.ports[li].delay;
        let e = self.far_end_event(l, p);
        self.schedule(at, e);
    }

    /// Frozen flow `f`, moving at `rate_bps`, would keep sending an ACK per data packet over its
    /// ACK path: each of those links loses that share of its time to them while `f` is frozen
    /// (a frozen flow sends no packets; without this a flow running on one of those links, a
    /// ring's next flow, ran at line rate where its packets shared the link with those ACKs:
    /// 4.8% faster at 400 Gbit/s). Adds the loads (1/65536 of the link's time) and appends
    /// them to `out` for [`Self::remove_ack_load`].
    pub(in crate::packet) fn add_ack_load(&mut self, f: u32, rate_bps: f64, out: &mut Vec<(u32, u32)>) {
        if self.ack_load.is_empty() {
            self.ack_load = vec![0; self.link_rate.len()];
        }
        if rate_bps.is_nan() || rate_bps <= 0.0 {
            return;
        }
        // Time between two of the flow's data packets, in ps.
        let gap_ps = f64::from(self.cfg.mtu) * 8.0 / rate_bps * 1e12;
        for i in 0..self.flow_paths(f).1.len() {
            let l = self.flow_paths(f).1[i];
            let ack_ps = self.tx_ps(self.ack_bytes, self.link_rate[l as usize]) as f64;
            let x = ((ack_ps / gap_ps).min(0.25) * 65536.0).round() as u32;
            if x > 0 {
                self.ack_load[l as usize] += x;
                out.push((l, x));
            }
        }
    }

    /// Link `l` has just frozen: the ACKs, NACKs and CNPs of running flows queued at its port
    /// (or its NIC's ACK queue) leave now over it ([`Self::ww_pass`]), in order, with the
    /// port's buffer accounting as at a dequeue; they would otherwise wait for the resume (a
    /// flow's last ACK among them left the flow unfinished until then).
    pub(in crate::packet) fn ww_release_foreign(&mut self, w: &Wormhole, l: u32) {
        let li = l as usize;
        let foreign = |e: &PacketEngine, p: u32| {
            let pk = &e.pkts[p as usize];
            !matches!(pk.kind, Kind::Data) && (pk.kind.is_pfc() || !w.flow_frozen(pk.flow))
        };
        let src = self.ports[li].src;
        let mut keep = Vec::new();
        let mut out = Vec::new();
        if src < self.hosts {
            while let Some(p) = self.nics[src as usize].ackq.pop_front(&self.pkts) {
                if foreign(self, p) { out.push(p) } else { keep.push(p) }
            }
            for &p in &keep {
                self.nics[src as usize].ackq.push_back(&mut self.pkts, p);
            }
            for &p in &out {
                self.ww_pass(l, p);
            }
            return;
        }
        for q in 0..crate::packet::tables::NQ {
            if !self.ports[li].has(q) {
                continue;
            }
            keep.clear();
            out.clear();
            while let Some((p, _)) = self.ports[li].dequeue(&self.pkts, q) {
                if foreign(self, p) { out.push(p) } else { keep.push(p) }
            }
            for &p in &keep {
                let size = u64::from(self.pkts[p as usize].size);
                self.ports[li].enqueue(&mut self.pkts, q, p, size);
            }
            for &p in &out {
                let size = u64::from(self.pkts[p as usize].size);
                if q != 0 && self.lossy {
                    self.bufs[src as usize].shared_used -= size;
                } else if q != 0 {
                    let in_link = self.pkts[p as usize].in_link;
                    self.remove_ingress(src, in_link, q, size);
                    self.check_and_send_resume(src, in_link, q);
                }
                self.ww_pass(l, p);
            }
        }
    }

    /// Takes back loads [`Self::add_ack_load`] added.
    pub(in crate::packet) fn remove_ack_load(&mut self, loads: &[(u32, u32)]) {
        for &(l, x) in loads {
            self.ack_load[l as usize] -= x;
        }
    }

    /// Thawed switch ports left with packets and nothing scheduled (a stray packet queued while
    /// frozen) start sending.
    pub(in crate::packet) fn kick_stray_ports(&mut self, links: &[u32]) {
        for &k in links {
            let ki = k as usize;
            let pt = &self.ports[ki];
            let src = pt.src;
            if src >= self.topo.num_hosts() {
                // A busy port with no TxDone queued has a deferred one (`transmit`), which
                // `switch_send` settles (it sends now if that time is past, else queues it).
                // Kicking only idle ports left what queued while the link was frozen waiting
                // for the next packet to arrive at the port.
                if pt.total > 0 && !(pt.busy && pt.txdone_pending) {
                    self.switch_send(k);
                }
            } else if !pt.busy && self.nics[src as usize].next_send.is_none() {
                // An idle NIC with no wake-up pending: a flow that started on it while its link
                // was frozen (a mirrored twin's, joined at the instant's episode check) found
                // `host_send` returning at once and left no event to park, so nothing else
                // would ever send its packets. With nothing to send this does nothing.
                self.host_send(src);
            }
        }
    }

    /// The packets queued on link `l`: at its egress port, then (on a host's link) in the
    /// NIC's ACK queue.
    pub(in crate::packet) fn queued_packets(&self, l: u32, out: &mut Vec<u32>) {
        let pt = &self.ports[l as usize];
        out.extend(pt.queues.iter().flat_map(|q| q.list.iter(&self.pkts)));
        if pt.src < self.topo.num_hosts() {
            out.extend(self.nics[pt.src as usize].ackq.iter(&self.pkts));
        }
    }

    /// Packet `p` of a resumed partition: when its flow moved on (`moved`, sorted by flow:
    /// `(flow, bytes)`), its sequence number moves by those bytes and its timestamps (TIMELY's
    /// send time, HPCC's INT words) by `d_ns`. PFC frames stay as they are.
    pub(in crate::packet) fn shift_packet(&mut self, p: u32, moved: &[(u32, u64)], d_ns: u64) {
        let pk = &mut self.pkts[p as usize];
        if pk.kind.is_pfc() {
            return;
        }
        if let Ok(k) = moved.binary_search_by_key(&pk.flow, |&(f, _)| f) {
            pk.seq += moved[k].1;
            if self.cfg.cc.uses_send_ts() {
                self.ts[p as usize] += d_ns;
            }
            if self.cfg.cc.uses_int() {
                for h in &mut self.ints[p as usize] {
                    *h = crate::packet::cc::int::shift_int_time(*h, d_ns);
                }
            }
        }
    }

    // ---------------------------------------------------------------- Wormhole's own state

    /// Wormhole's state, held by the engine (`None` when fast-forwarding is off).
    #[inline]
    pub(in crate::packet) fn ww_state(&self) -> Option<&Wormhole> {
        self.ww.as_deref()
    }

    /// Wormhole's state slot, to take it out while it works on the engine and put it back.
    #[inline]
    pub(in crate::packet) fn ww_slot(&mut self) -> &mut Option<Box<Wormhole>> {
        &mut self.ww
    }

    /// Sets the fast-forward knobs in the engine's config.
    #[inline]
    pub(in crate::packet) fn set_wormhole_config(&mut self, cfg: crate::packet::config::WormholeConfig) {
        self.cfg.wormhole = cfg;
    }
}
