//! Links: transmission (`QbbNetDevice::TransmitStart` + `QbbChannel`), utilization bins,
//! loss, arrival at the far end, and PFC frames arriving.

use super::*;

impl PacketEngine {
    // ---------------------------------------------------------------- links

    /// `QbbNetDevice::TransmitStart` + `QbbChannel::TransmitStart`.
    #[inline(always)]
    pub(crate) fn transmit(&mut self, link: u32, p: u32) {
        self.transmit_from::<true>(link, p);
    }

    /// [`PacketEngine::transmit`]; `ANY` false: the port is a switch's and holds no queued packet.
    #[inline(always)]
    pub(super) fn transmit_from<const ANY: bool>(&mut self, link: u32, p: u32) {
        let li = link as usize;
        let size = u32::from(self.pkts[p as usize].size);
        let ri = &self.rates[usize::from(self.ports[li].rate)];
        let c = &ri.tx_cache;
        let mut tx = if size == c[0].0 {
            c[0].1
        } else if size == c[1].0 {
            c[1].1
        } else {
            self.tx_ps(size, ri.bps)
        };
        if let Some(&x) = self.ack_load.get(li)
            && x != 0
        {
            // The ACKs of frozen flows (Wormhole) that would share this link: its other
            // packets get the rest of its time.
            tx = tx * 65536 / u64::from(65536 - x);
        }
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
        let e = self.far_end_event(link, p);
        self.schedule(now + tx + delay, e);
    }

    /// The event of packet `p` reaching the far end of `link`: into a switch, a hop onto the
    /// path's next link (PFC frames stop there); at a host, an arrival.
    #[inline]
    pub(in crate::packet) fn far_end_event(&mut self, link: u32, p: u32) -> u64 {
        if self.ports[link as usize].dst >= self.hosts && !self.pkts[p as usize].kind.is_pfc() {
            let pk = &mut self.pkts[p as usize];
            pk.in_link = link;
            let out = self.paths[pk.path as usize + usize::from(pk.hop) + 1];
            ev(EV_HOP, out, p)
        } else {
            ev(EV_ARRIVE, link, p)
        }
    }

    /// Counts a transmission of `size` bytes over [`start`, `start + tx`) in port `li`'s
    /// utilization bins, split across bins in proportion to the time it spends in each.
    #[cold]
    pub(super) fn util_add(&mut self, li: usize, start: u64, tx: u64, size: u64) {
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
    pub(super) fn lost_on_wire(&mut self, link: u32, p: u32) -> bool {
        let li = link as usize;
        if !self.link_err.is_empty() && self.link_err[li] > 0.0 && self.rng_err.unit_f64() < self.link_err[li] {
            self.stats.drops_error += 1;
            self.release(p);
            return true;
        }
        false
    }

    pub(super) fn arrive(&mut self, link: u32, p: u32) {
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
    pub(super) fn hop(&mut self, out: u32, p: u32) {
        let in_link = self.pkts[p as usize].in_link;
        if self.lost_on_wire(in_link, p) {
            return;
        }
        self.pkts[p as usize].hop += 1;
        self.switch_receive(self.ports[out as usize].src, in_link, out, p);
    }

    /// `QbbNetDevice::Receive` of a PFC frame: pause or resume our egress on that cable.
    pub(super) fn receive_pfc(&mut self, node: u32, in_link: u32, p: u32) {
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
}
