//! An Ultra Ethernet-style transport on the packet engine's NICs and switches.
//!
//! What it follows:
//! - **NSCC** (network signal-based congestion control, UEC 1.0 specification, "Congestion
//!   Management", the sender-based algorithm), as uet-htsim implements it (`htsim/sim/uec.cpp`,
//!   `UecSrc::updateCwndOnAck_NSCC` and the functions it calls; constants from
//!   `UecSrc::initNsccParams`). A window in bytes; on every ACK, with `delay` = the packet's RTT
//!   less the flow's base RTT and `ecn` its echoed mark:
//!   - no mark, `delay` at or above the target queueing delay: *fair increase*, `inc += fi * mss
//!     * acked`;
//!   - no mark, `delay` under the target: *proportional increase*, `inc += min(adjust_bytes,
//!     alpha * (target - delay) * acked)` plus the fair increase; or, when `delay` is under 1 us
//!     for a window's worth of bytes, *fast increase* `cwnd += fi_scale * acked`;
//!   - a mark, `delay` at or above the target: *multiplicative decrease*, at most once per base
//!     RTT, `cwnd *= max(1 - gamma * (avg_delay - target) / avg_delay, 0.5)` when the averaged
//!     delay is over the target;
//!   - a mark under the target: nothing (uet-htsim only changes path);
//!   - the increases accumulate and are applied `cwnd += inc / cwnd` once per `adjust_bytes`
//!     acknowledged or per adjust period, with an extra `eta` per adjust period;
//!   - *quick adapt*: once per base RTT + target, after a trim (NACK) or with the averaged delay
//!     over 4 x the target, the window drops to the bytes acknowledged over the last such
//!     period; marks on the packets then in flight are ignored;
//!   - a NACK takes the packet's bytes off the window.
//!
//!   The averaged delay is an EWMA (gain 0.0125) of the delay samples, pulled toward a quarter of
//!   the base RTT by an unmarked sample over the target (uet-htsim `update_delay`). The base RTT
//!   starts at the flow's path RTT and follows the smallest full-packet sample; the window
//!   starts at, and is capped by, `max_window_bdp` x the base BDP.
//! - **Trimming** (UEC 1.0 "packet trimming"; uet-htsim's trimming queues): a lossy switch that
//!   would queue a data packet past `uet.trim_threshold` bytes of data on its egress, or past its
//!   buffer, cuts it to its header and forwards that in the strict-priority control queue. The
//!   receiver answers a trimmed header with a NACK naming the packet; the sender resends that
//!   packet alone. A trimmed packet carries no payload: the receiver delivers nothing from it.
//! - **Out-of-order delivery** (UEC 1.0 PDS, "RUD": reliable, unordered): the receiver keeps a
//!   bitmap of the packets it holds and acknowledges each data packet it receives by its own
//!   sequence number (a selective ACK), so packets sprayed over several paths may arrive in any
//!   order without a retransmission.
//!
//! Simplified or left out: RCCC (receiver credits), the NIC's control/data ratio (control packets
//! go first), path penalties on ECN/NACK (REPS/bitmap path selection: `load_balance` picks
//! paths), SACK bitmaps covering several packets (one ACK per data packet), the fast loss
//! recovery on out-of-order counts (off by default in uet-htsim), and the RTO's estimator (a
//! fixed `uet.rto`). The control queue (trimmed headers, ACKs, NACKs) is not limited by the
//! buffer. The adjust period is the fabric's largest base RTT rather than uet-htsim's fixed
//! 12 us reference RTT.
//!
//! The timer is lazy, as TCP's: an ACK that makes progress moves the deadline, and the one
//! pending event re-arms itself at the deadline when it fires early.

use std::collections::VecDeque;

use crate::packet::engine::PacketEngine;
use crate::packet::events::{EV_RTO, MASK30, ev};
use crate::packet::tables::{Kind, Pkt};

use super::{UetConfig, UetFlowStats};

/// No event pending.
const NONE: u64 = u64::MAX;
/// uet-htsim's reference network: 100 Gb/s, 12 us RTT (`initNsccParams`).
const REF_RTT_PS: f64 = 12e6;
const REF_BDP_BYTES: f64 = 12e-6 * 100e9 / 8.0;
/// Below this queueing delay (ps) NSCC's fast increase may run (uet-htsim: 1 us).
const FAST_INCREASE_DELAY_PS: f64 = 1e6;

/// NSCC's constants for one fabric (`initNsccParams`), scaled by `a` = the fabric's BDP over the
/// reference BDP and `b` = the target delay over the reference RTT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NsccParams {
    /// Target queueing delay (ps).
    pub target: f64,
    /// Proportional-increase gain (bytes per ps of headroom per byte acknowledged).
    pub alpha: f64,
    pub fi: f64,
    pub fi_scale: f64,
    pub eta: f64,
    pub gamma: f64,
    pub delay_alpha: f64,
    pub qa_threshold: f64,
    /// The adjust period (ps) and bytes.
    pub adjust_period: u64,
    pub adjust_bytes: f64,
    pub mss: f64,
}

impl NsccParams {
    /// For a fabric whose largest base RTT is `net_rtt_ps` at NIC rate `nic_bps`, payload `mss`.
    pub(crate) fn new(cfg: &UetConfig, net_rtt_ps: u64, nic_bps: u64, mss: u32) -> Self {
        let net_rtt = net_rtt_ps.max(1) as f64;
        let target = cfg.target_qdelay.map_or(net_rtt / 2.0, |t| t.as_ps() as f64);
        let net_bdp = net_rtt * 1e-12 * nic_bps as f64 / 8.0;
        let a = net_bdp / REF_BDP_BYTES;
        let b = target / REF_RTT_PS;
        let mss = f64::from(mss);
        NsccParams {
            target,
            alpha: 4.0 * a * b * mss / target,
            fi: 5.0 * a,
            fi_scale: 0.25 * a,
            eta: 0.15 * mss * a,
            gamma: 0.8,
            delay_alpha: 0.0125,
            qa_threshold: 4.0 * target,
            adjust_period: net_rtt_ps.max(1),
            adjust_bytes: 16_000.0 * b,
            mss,
        }
    }
}

/// One flow's NSCC window state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Nscc {
    pub cwnd: f64,
    pub maxwnd: f64,
    /// Base RTT (ps) and the NIC rate (bytes/ps) its BDP is taken at.
    pub base_rtt: u64,
    pub line_bytes_per_ps: f64,
    pub avg_delay: f64,
    pub achieved: u64,
    pub qa_end: u64,
    pub trigger_qa: bool,
    pub bytes_to_ignore: u64,
    pub bytes_ignored: u64,
    pub inc: f64,
    pub received: u64,
    pub last_adjust: u64,
    pub last_eta: u64,
    pub last_dec: u64,
    pub fi_count: u64,
    pub increase: bool,
}

impl Nscc {
    /// A flow with base RTT `base_rtt` (ps) at `line_bps`: the window starts at its cap.
    pub(crate) fn new(base_rtt: u64, line_bps: u64, max_window_bdp: f64, mss: f64, now: u64) -> Self {
        let line_bytes_per_ps = line_bps as f64 / 8e12;
        let maxwnd = (max_window_bdp * base_rtt as f64 * line_bytes_per_ps).max(mss);
        Nscc {
            cwnd: maxwnd,
            maxwnd,
            base_rtt,
            line_bytes_per_ps,
            last_adjust: now,
            last_eta: now,
            ..Nscc::default()
        }
    }

    /// uet-htsim `update_base_rtt`: a smaller RTT of a full packet lowers the base RTT and the
    /// window cap with it.
    fn update_base_rtt(&mut self, rtt: u64, full: bool, max_window_bdp: f64) {
        if full && rtt < self.base_rtt {
            self.base_rtt = rtt;
            self.maxwnd = (max_window_bdp * rtt as f64 * self.line_bytes_per_ps).max(1.0);
        }
    }

    /// uet-htsim `update_delay`.
    fn update_delay(&mut self, p: &NsccParams, delay: f64, ecn: bool) {
        let da = p.delay_alpha;
        let sample = if !ecn && delay > p.target {
            self.base_rtt as f64 * 0.25
        } else {
            delay
        };
        self.avg_delay = da * sample + (1.0 - da) * self.avg_delay;
    }

    /// uet-htsim `quick_adapt`; returns whether it cut the window. One cut per period: the
    /// period restarts after a cut too (uet-htsim keeps its end, so a cut may repeat at once).
    fn quick_adapt(&mut self, p: &NsccParams, now: u64, is_loss: bool, in_flight: u64) -> bool {
        if now <= self.qa_end {
            return false;
        }
        let mut cut = false;
        if self.qa_end != 0 && (self.trigger_qa || is_loss || self.avg_delay > p.qa_threshold) && self.cwnd >= self.achieved as f64 {
            self.cwnd = (self.achieved as f64).max(p.mss);
            self.bytes_to_ignore = in_flight;
            self.bytes_ignored = 0;
            self.trigger_qa = false;
            cut = true;
        }
        self.achieved = 0;
        self.qa_end = now + self.base_rtt + p.target as u64;
        cut
    }

    fn fast_increase(&mut self, p: &NsccParams, acked: u64, delay: f64) -> bool {
        if delay < FAST_INCREASE_DELAY_PS {
            self.fi_count += acked;
            if self.fi_count as f64 > self.cwnd || self.increase {
                self.cwnd = (self.cwnd + acked as f64 * p.fi_scale).min(self.maxwnd);
                self.increase = true;
                return true;
            }
        } else {
            self.fi_count = 0;
        }
        self.increase = false;
        false
    }

    /// An ACK of `acked` new payload bytes with queueing delay `delay` (ps) and ECN echo `ecn`
    /// (uet-htsim `updateCwndOnAck_NSCC`). Returns what it did, for the statistics.
    pub(crate) fn on_ack(&mut self, p: &NsccParams, now: u64, ecn: bool, delay: f64, acked: u64, in_flight: u64) -> Reaction {
        self.achieved += acked;
        self.received += acked;
        if self.bytes_ignored < self.bytes_to_ignore {
            self.bytes_ignored += acked;
            if ecn {
                return Reaction::None;
            }
        }
        self.update_delay(p, delay, ecn);
        if self.quick_adapt(p, now, false, in_flight) {
            return Reaction::QuickAdapt;
        }
        let mut r = Reaction::None;
        let a = acked as f64;
        match (ecn, delay >= p.target) {
            (false, true) => self.inc += p.fi * p.mss * a,
            (false, false) => {
                if !self.fast_increase(p, acked, delay) {
                    self.inc += (p.alpha * (p.target - delay) * a).min(p.adjust_bytes);
                    self.inc += p.fi * p.mss * a;
                }
            }
            (true, true) => {
                self.increase = false;
                self.fi_count = 0;
                let avg = self.avg_delay;
                if avg > p.target && now - self.last_dec > self.base_rtt {
                    self.cwnd *= (1.0 - p.gamma * (avg - p.target) / avg).max(0.5);
                    self.last_dec = now;
                    r = Reaction::Decrease;
                }
            }
            (true, false) => {}
        }
        if self.received as f64 > p.adjust_bytes || now - self.last_adjust > p.adjust_period {
            self.cwnd += self.inc / self.cwnd;
            self.inc = 0.0;
            self.received = 0;
            self.last_adjust = now;
        }
        if now - self.last_eta > p.adjust_period {
            self.cwnd += p.eta;
            self.last_eta = now;
        }
        self.cwnd = self.cwnd.clamp(p.mss, self.maxwnd.max(p.mss));
        r
    }

    /// A NACK of `nacked` payload bytes (uet-htsim `updateCwndOnNack_NSCC`); returns whether
    /// quick adapt cut the window.
    pub(crate) fn on_nack(&mut self, p: &NsccParams, now: u64, nacked: u64, in_flight: u64) -> bool {
        self.cwnd = (self.cwnd - nacked as f64).max(p.mss);
        self.trigger_qa = true;
        self.bytes_ignored >= self.bytes_to_ignore && self.quick_adapt(p, now, true, in_flight)
    }
}

/// What an ACK made NSCC do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reaction {
    None,
    QuickAdapt,
    Decrease,
}

/// One flow's UET sender and receiver state (`PacketEngine::uet`, indexed by flow id).
#[derive(Clone, Debug, Default)]
pub(crate) struct UetFlow {
    pub cc: Nscc,
    /// Payload bytes sent and neither acknowledged nor NACKed.
    pub in_flight: u64,
    /// Sender: packets acknowledged (bit per packet), and their payload bytes.
    pub acked: Vec<u64>,
    pub acked_bytes: u64,
    /// Receiver: packets received (bit per packet), and one past the highest received.
    pub rx: Vec<u64>,
    pub rx_high: u64,
    /// First bytes of packets to send again, in order.
    pub rtx: VecDeque<u64>,
    /// The timer: deadline (0: stopped), pending event time (`NONE`: none), its generation.
    pub rto_deadline: u64,
    pub rto_event_at: u64,
    pub rto_gen: u32,
    pub stats: UetFlowStats,
}

#[inline]
fn bit(v: &[u64], i: u64) -> bool {
    v[(i / 64) as usize] & (1 << (i % 64)) != 0
}

#[inline]
fn set_bit(v: &mut [u64], i: u64) {
    v[(i / 64) as usize] |= 1 << (i % 64);
}

impl UetFlow {
    pub(crate) fn new() -> Self {
        UetFlow {
            rto_event_at: NONE,
            ..UetFlow::default()
        }
    }
}

impl PacketEngine {
    /// Flow `f` starts: its window from its path's base RTT, its bitmaps.
    pub(crate) fn uet_start(&mut self, f: u32) {
        let fi = f as usize;
        let fl = &self.flows[fi];
        let len = ((fl.path_ack - fl.path_data) / u32::from(fl.npaths.max(1))) as usize;
        let path: Vec<u32> = self.paths[fl.path_data as usize..fl.path_data as usize + len].to_vec();
        let (rtt_ns, _) = self.path_rtt(&path);
        let line = self.link_rate[self.nics[fl.src as usize].link as usize];
        let npkts = fl.size.div_ceil(u64::from(self.cfg.mtu));
        let words = npkts.div_ceil(64) as usize;
        let mss = f64::from(self.cfg.mtu);
        let u = &mut self.uet[fi];
        u.cc = Nscc::new(rtt_ns * 1000, line, self.cfg.uet.max_window_bdp, mss, self.now);
        u.acked = vec![0; words];
        u.rx = vec![0; words];
    }

    /// Whether flow `f` has a packet it may send now: one to resend or new data, and room in
    /// its window (uet-htsim `sendIfPermitted`: the window is checked before any packet).
    #[inline]
    fn uet_can_send(&self, f: usize) -> bool {
        let fl = &self.flows[f];
        let u = &self.uet[f];
        !fl.done && (!u.rtx.is_empty() || fl.snd_nxt < fl.size) && (u.in_flight as f64) < u.cc.cwnd
    }

    /// The NIC of host `h` sends, if its port is idle: an ACK or NACK first, else a packet of
    /// the next flow (round robin, packet by packet) whose window has room.
    pub(crate) fn uet_host_send(&mut self, h: u32) {
        // From the flow after the one served last: packet by packet.
        self.window_host_send(h, false, Self::uet_can_send, Self::uet_make_data);
    }

    /// The next packet of flow `f`: the first one queued for retransmission, else new data.
    fn uet_make_data(&mut self, f: u32) -> u32 {
        let fi = f as usize;
        let mss = u64::from(self.cfg.mtu);
        let now = self.now;
        let hdr = self.hdr_bytes;
        let fl = &mut self.flows[fi];
        let u = &mut self.uet[fi];
        let seq = match u.rtx.pop_front() {
            Some(s) => {
                u.stats.retransmitted_packets += 1;
                s
            }
            None => {
                let s = fl.snd_nxt;
                fl.snd_nxt = (s + mss).min(fl.size);
                s
            }
        };
        let payload = (fl.size - seq).min(mss);
        if seq < fl.max_sent {
            self.stats.retransmitted_bytes += payload;
        }
        fl.max_sent = fl.max_sent.max(seq + payload);
        u.in_flight += payload;
        let mut pk = Pkt::empty();
        pk.kind = Kind::Data;
        pk.pg = fl.pg;
        pk.flow = f;
        pk.path = crate::packet::lb::pick(self.cfg.load_balance, fl, now, &self.paths, &self.ports);
        pk.seq = seq;
        pk.size = (payload as u32 + hdr) as u16;
        fl.last_pkt_size = u32::from(pk.size);
        self.stats.data_packets += 1;
        if self.uet[fi].rto_deadline == 0 {
            let at = now + self.cfg.uet.rto.as_ps();
            self.uet_arm(f, at);
        }
        let p = self.alloc(pk);
        // The send time (ps) the ACK or NACK echoes.
        self.ts[p as usize] = now;
        p
    }

    /// A switch cuts data packet `p` of a UET flow to its header.
    pub(crate) fn uet_trim(&mut self, p: u32) {
        let pk = &mut self.pkts[p as usize];
        pk.kind = Kind::Trim;
        pk.size = self.cfg.uet.header_bytes as u16;
        self.stats.trimmed += 1;
        if let Some(u) = self.uet.get_mut(pk.flow as usize) {
            u.stats.trimmed += 1;
        }
    }

    /// (Re)starts flow `f`'s retransmission timer to expire at `at`.
    fn uet_arm(&mut self, f: u32, at: u64) {
        let u = &mut self.uet[f as usize];
        u.rto_deadline = at;
        if at < u.rto_event_at {
            u.rto_gen = u.rto_gen.wrapping_add(1);
            u.rto_event_at = at;
            let g = u.rto_gen;
            self.schedule(at, ev(EV_RTO, f, g));
        }
    }

    /// The retransmission-timer event of flow `f` (generation `g`): every packet sent and not
    /// acknowledged is sent again.
    pub(crate) fn uet_on_rto(&mut self, f: u32, g: u32) {
        let fi = f as usize;
        let now = self.now;
        let u = &mut self.uet[fi];
        if u64::from(u.rto_gen) & MASK30 != u64::from(g) {
            self.stats.events -= 1;
            return;
        }
        u.rto_event_at = NONE;
        if self.flows[fi].done || u.rto_deadline == 0 {
            return;
        }
        if now < u.rto_deadline {
            let at = u.rto_deadline;
            u.rto_deadline = 0;
            return self.uet_arm(f, at);
        }
        let mss = u64::from(self.cfg.mtu);
        let fl = &self.flows[fi];
        u.rtx.clear();
        let mut s = 0;
        while s < fl.max_sent {
            if !bit(&u.acked, s / mss) {
                u.rtx.push_back(s);
            }
            s += mss;
        }
        u.rto_deadline = 0;
        if u.rtx.is_empty() {
            return;
        }
        u.in_flight = 0;
        u.cc.trigger_qa = true;
        u.stats.rtos += 1;
        self.stats.uet_rtos += 1;
        let at = now + self.cfg.uet.rto.as_ps();
        let src = self.flows[fi].src;
        self.uet_arm(f, at);
        self.uet_host_send(src);
    }

    /// A data packet `pk` reaches its receiver, host `h`: a payload not held yet is delivered,
    /// and every data packet is acknowledged by its own sequence number. Returns whether slot
    /// `p` now holds the ACK (it keeps the send time it echoes).
    pub(crate) fn uet_receive_data(&mut self, h: u32, p: u32, pk: &Pkt) -> bool {
        let fi = pk.flow as usize;
        if self.flows[fi].done {
            return false;
        }
        let psn = pk.seq / u64::from(self.cfg.mtu);
        let u = &mut self.uet[fi];
        if psn + 1 < u.rx_high {
            u.stats.out_of_order += 1;
        }
        u.rx_high = u.rx_high.max(psn + 1);
        if !bit(&u.rx, psn) {
            set_bit(&mut u.rx, psn);
            self.stats.payload_delivered += u64::from(pk.size) - u64::from(self.hdr_bytes);
        }
        self.uet_reply(h, p, pk, Kind::Ack);
        true
    }

    /// A trimmed header `pk` reaches its receiver, host `h`: a NACK asks for that packet again.
    /// Returns whether slot `p` now holds the NACK.
    pub(crate) fn uet_receive_trim(&mut self, h: u32, p: u32, pk: &Pkt) -> bool {
        if self.flows[pk.flow as usize].done {
            return false;
        }
        self.uet_reply(h, p, pk, Kind::Nack);
        true
    }

    fn uet_reply(&mut self, h: u32, p: u32, pk: &Pkt, kind: Kind) {
        let mut a = Pkt::empty();
        a.kind = kind;
        a.pg = pk.pg;
        a.flow = pk.flow;
        a.path = self.flows[pk.flow as usize].path_ack;
        a.seq = pk.seq;
        a.cnp = pk.ecn;
        a.size = self.ack_bytes as u16;
        if kind == Kind::Ack {
            self.stats.acks += 1;
        } else {
            self.stats.nacks += 1;
        }
        self.pkts[p as usize] = a;
        self.nics[h as usize].ackq.push_back(&mut self.pkts, p);
        self.uet_host_send(h);
    }

    /// An ACK or NACK `pk` (slot `p`) of flow `pk.flow` reaches its sender, host `h`.
    pub(crate) fn uet_receive_ack(&mut self, h: u32, p: u32, pk: &Pkt) {
        let f = pk.flow;
        let fi = f as usize;
        if self.flows[fi].done {
            return;
        }
        let mss = u64::from(self.cfg.mtu);
        let now = self.now;
        let size = self.flows[fi].size;
        let psn = pk.seq / mss;
        let payload = (size - pk.seq).min(mss);
        let params = self.nscc;
        let max_bdp = self.cfg.uet.max_window_bdp;
        let sent_at = self.ts[p as usize];
        let u = &mut self.uet[fi];
        if bit(&u.acked, psn) {
            // A late NACK or the ACK of a second copy: nothing left to do for this packet.
            return self.uet_host_send(h);
        }
        if pk.kind == Kind::Nack {
            u.in_flight = u.in_flight.saturating_sub(payload);
            u.rtx.push_back(pk.seq);
            let in_flight = u.in_flight;
            if u.cc.on_nack(&params, now, payload, in_flight) {
                u.stats.quick_adapts += 1;
            }
            return self.uet_host_send(h);
        }
        set_bit(&mut u.acked, psn);
        u.acked_bytes += payload;
        u.in_flight = u.in_flight.saturating_sub(payload);
        let rtt = now.saturating_sub(sent_at);
        u.cc.update_base_rtt(rtt, payload == mss, max_bdp);
        let delay = rtt.saturating_sub(u.cc.base_rtt) as f64;
        let in_flight = u.in_flight;
        match u.cc.on_ack(&params, now, pk.cnp, delay, payload, in_flight) {
            Reaction::QuickAdapt => u.stats.quick_adapts += 1,
            Reaction::Decrease => u.stats.decreases += 1,
            Reaction::None => {}
        }
        if u.acked_bytes >= size {
            u.rto_deadline = 0;
            u.acked = Vec::new();
            u.rx = Vec::new();
            u.rtx = VecDeque::new();
            self.flows[fi].snd_una = size;
            self.complete(f);
        } else {
            self.flows[fi].snd_una = self.flows[fi].snd_una.max(u.acked_bytes.min(size));
            let at = now + self.cfg.uet.rto.as_ps();
            self.uet_arm(f, at);
        }
        self.uet_host_send(h);
    }

    /// Flow `f`'s UET counters; `None` when the engine has no flow `f` or does not run UET.
    pub fn uet_flow_stats(&self, f: u32) -> Option<UetFlowStats> {
        self.uet.get(f as usize).map(|u| u.stats)
    }

    /// Flow `f`'s NSCC window in bytes now; `None` when the engine has no flow `f` or does not
    /// run UET.
    pub fn uet_cwnd(&self, f: u32) -> Option<u64> {
        self.uet.get(f as usize).map(|u| u.cc.cwnd as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::SimTime;

    fn params() -> NsccParams {
        // The reference network itself: a = 1; target 6 us: b = 0.5.
        let cfg = UetConfig {
            target_qdelay: Some(SimTime::from_us(6)),
            ..UetConfig::default()
        };
        NsccParams::new(&cfg, 12_000_000, 100_000_000_000, 4096)
    }

    #[test]
    fn reference_network_constants_match_uet_htsim() {
        let p = params();
        // initNsccParams with scaling_factor_a = 1, scaling_factor_b = 0.5.
        assert!((p.fi - 5.0).abs() < 1e-9);
        assert!((p.eta - 0.15 * 4096.0).abs() < 1e-6);
        assert!((p.adjust_bytes - 8000.0).abs() < 1e-6);
        assert!((p.alpha - 4.0 * 0.5 * 4096.0 / 6e6).abs() < 1e-12);
        assert!((p.qa_threshold - 24e6).abs() < 1e-3);
    }

    #[test]
    fn marks_over_target_cut_the_window_and_quiet_acks_grow_it() {
        let p = params();
        let mut c = Nscc::new(12_000_000, 100_000_000_000, 1.5, p.mss, 0);
        let start = c.cwnd;
        assert!((start - 1.5 * 150_000.0).abs() < 1.0, "starts at 1.5 BDP: {start}");
        // Sustained marked ACKs with a large delay: the averaged delay passes the target and the
        // window shrinks (quick adapt or multiplicative decrease).
        let mut t = 0;
        for _ in 0..4000 {
            t += 100_000;
            c.on_ack(&p, t, true, 20e6, 4096, 100_000);
        }
        assert!(c.cwnd < start * 0.6, "{} vs {start}", c.cwnd);
        // Unmarked ACKs with no queueing: it grows back toward the cap.
        let low = c.cwnd;
        for _ in 0..4000 {
            t += 100_000;
            c.on_ack(&p, t, false, 0.0, 4096, 10_000);
        }
        assert!(c.cwnd > low, "{} vs {low}", c.cwnd);
        assert!(c.cwnd <= c.maxwnd);
    }

    #[test]
    fn a_nack_takes_its_bytes_off_the_window() {
        let p = params();
        let mut c = Nscc::new(12_000_000, 100_000_000_000, 1.5, p.mss, 0);
        let w = c.cwnd;
        c.on_nack(&p, 1, 4096, 0);
        assert!((c.cwnd - (w - 4096.0)).abs() < 1e-6);
        assert!(c.trigger_qa);
    }
}
