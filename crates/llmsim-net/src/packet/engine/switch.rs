//! Switches: next hop (ECMP), the shared-buffer MMU (ingress admission, headroom, dynamic PFC
//! threshold, PAUSE/RESUME), the egress round robin, ECN marking and INT stamping at dequeue.

use super::*;

impl PacketEngine {
    // ---------------------------------------------------------------- switch

    /// Next hop at switch `at` of a packet travelling from host `src` to host `dst`.
    pub(super) fn next_hop_for(&self, at: u32, src: u32, dst: u32, ports: (u16, u16, u64), kind: Kind) -> Result<u32, PacketError> {
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
    pub(super) fn switch_receive(&mut self, s: u32, in_link: u32, out: u32, p: u32) {
        if self.ww.is_some() && self.ww_passes(out, p) {
            // Before any buffer accounting: the packet never enters this port.
            self.ww_pass(out, p);
            return;
        }
        let pk = &self.pkts[p as usize];
        let (kind, pg, size) = (pk.kind, pk.pg, pk.size);
        let mut q = if kind != Kind::Data && self.cfg.switch_ack_high_prio {
            0
        } else {
            usize::from(pg)
        };
        let mut size = u64::from(size);
        if q != 0 && self.lossy {
            if self.uet_on && self.uet_must_trim(s, out, q, size) {
                // UET: cut to the header, which goes on in the control queue.
                self.uet_trim(p);
                q = 0;
                size = u64::from(self.pkts[p as usize].size);
            } else if !self.lossy_admit(s, out, p, size) {
                return;
            }
        } else if q != 0 {
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
    pub(super) fn port_free_for(&mut self, port: u32, q: usize) -> bool {
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
    pub(super) fn deferred_txdone_past(&self, pi: usize) -> bool {
        let pt = &self.ports[pi];
        self.now > pt.busy_until || (self.now == pt.busy_until && self.events.cur_seq() > pt.txdone_seq)
    }

    pub(super) fn pfc_threshold(&self, s: u32, in_link: u32) -> u64 {
        self.pfc_threshold_at(s, in_link, self.bufs[s as usize].shared_used)
    }

    /// The dynamic PFC threshold of `in_link` at switch `s` were the switch's shared bytes
    /// `shared_used`.
    #[inline]
    pub(super) fn pfc_threshold_at(&self, s: u32, in_link: u32, shared_used: u64) -> u64 {
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
    pub(super) fn ingress_transparent(&self, s: u32, in_link: u32, q: usize, size: u64) -> bool {
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
    pub(super) fn shared_used(&self, in_link: u32, q: usize) -> u64 {
        self.ingress[in_link as usize].bytes(q).saturating_sub(self.cfg.reserve_bytes)
    }

    /// `SwitchMmu::CheckIngressAdmission`.
    pub(super) fn check_ingress(&self, s: u32, in_link: u32, q: usize, size: u64) -> bool {
        let ig = &self.ingress[in_link as usize];
        !(size + ig.hdrm(q) > ig.headroom() && size + self.shared_used(in_link, q) > self.pfc_threshold(s, in_link))
    }

    /// `SwitchMmu::UpdateIngressAdmission`.
    pub(super) fn update_ingress(&mut self, s: u32, in_link: u32, q: usize, size: u64) {
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
    pub(super) fn remove_ingress(&mut self, s: u32, in_link: u32, q: usize, size: u64) {
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
    pub(super) fn pause_due(&self, s: u32, in_link: u32, q: usize) -> bool {
        let ig = &self.ingress[in_link as usize];
        !ig.paused(q) && (ig.hdrm(q) > 0 || self.shared_used(in_link, q) >= self.pfc_threshold(s, in_link))
    }

    pub(super) fn check_and_send_pfc(&mut self, s: u32, in_link: u32, q: usize) {
        if self.pause_due(s, in_link, q) {
            self.send_pfc(in_link, q, true);
            self.ingress[in_link as usize].set_paused(q, true);
        }
    }

    pub(super) fn check_and_send_resume(&mut self, s: u32, in_link: u32, q: usize) {
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
    pub(super) fn send_pfc(&mut self, in_link: u32, q: usize, pause: bool) {
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
        if self.ww.is_some() && self.ww_passes(port, p) {
            // Out of a frozen port: the port it pauses or resumes may be running.
            self.ww_pass(port, p);
            return;
        }
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
    pub(super) fn send_dequeued<const ACCOUNTED: bool>(&mut self, port: u32, q: usize, p: u32, size: u64) {
        let pi = port as usize;
        let pt = &mut self.ports[pi];
        if q != 0 {
            pt.rrlast = q as u8;
        }
        let s = pt.src;
        if !ACCOUNTED {
            debug_assert!(q != 0 && pt.total == 0);
        } else if q != 0 && self.lossy {
            self.bufs[s as usize].shared_used -= size;
            if self.uet_on && self.cfg.ecn && self.should_mark(pi, q) {
                self.pkts[p as usize].ecn = true;
                self.stats.ecn_marks += 1;
            }
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

    /// A lossy switch (PFC off) admits packet `p` (`size` bytes) to egress port `out`, or drops
    /// it when the port's share of the buffer (per-port tail drop) or the switch's buffer
    /// (shared tail drop) would overflow. No ingress accounting, no PFC, no ECN marking.
    #[inline]
    pub(super) fn lossy_admit(&mut self, s: u32, out: u32, p: u32, size: u64) -> bool {
        let b = &self.bufs[s as usize];
        let full = match self.cfg.drop_policy {
            DropPolicy::PerPortTailDrop => self.ports[out as usize].total + size > b.port_cap,
            DropPolicy::SharedTailDrop => b.shared_used + size > self.cfg.buffer_bytes,
        };
        if full {
            self.stats.drops_buffer += 1;
            if let Some(t) = self.tcp.get_mut(self.pkts[p as usize].flow as usize) {
                t.stats.drops += 1;
            }
            self.release(p);
            return false;
        }
        self.bufs[s as usize].shared_used += size;
        true
    }

    /// Whether a UET data packet of `size` bytes in class `q` for egress `out` of switch `s` is
    /// to be trimmed: the class's queue would pass `uet.trim_threshold`, or the lossy buffer
    /// would overflow (where TCP's packet would be dropped).
    #[inline]
    fn uet_must_trim(&self, s: u32, out: u32, q: usize, size: u64) -> bool {
        let pt = &self.ports[out as usize];
        if pt.queues[q].bytes + size > self.cfg.uet.trim_threshold_bytes {
            return true;
        }
        let b = &self.bufs[s as usize];
        match self.cfg.drop_policy {
            DropPolicy::PerPortTailDrop => pt.total + size > b.port_cap,
            DropPolicy::SharedTailDrop => b.shared_used + size > self.cfg.buffer_bytes,
        }
    }

    /// `SwitchMmu::ShouldSendCN` on the egress bytes of `q` (after this packet left).
    #[inline(always)]
    pub(super) fn should_mark(&mut self, pi: usize, q: usize) -> bool {
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
    pub(super) fn ecn_draw(&mut self) -> f64 {
        match &mut self.ns3_streams {
            Some(s) => s.next_u01(),
            None => self.rng_ecn.unit_f64(),
        }
    }
}
