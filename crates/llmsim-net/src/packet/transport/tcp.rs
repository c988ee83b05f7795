//! TCP NewReno on the packet engine's NICs.
//!
//! Sender (RFC 5681, RFC 6582, RFC 6298):
//! - a congestion window in bytes replaces RoCE's rate pacing: a flow may send a segment when
//!   its bytes in flight plus the segment fit in `min(cwnd, max_window)`; the NIC serves its
//!   flows round robin at line rate, ACKs first (ACK clocking);
//! - slow start (cwnd += min(acked, MSS) per ACK) below ssthresh, congestion avoidance
//!   (cwnd += MSS²/cwnd per ACK) above it;
//! - fast retransmit on `dupack_threshold` duplicate ACKs when the cumulative ACK is above
//!   `recover`, then fast recovery: cwnd = ssthresh + 3 MSS, inflated by one MSS per further
//!   duplicate ACK; a partial ACK retransmits the next hole and deflates cwnd by the bytes it
//!   acknowledged (plus one MSS back); a full ACK (at or above `recover`) ends recovery with
//!   cwnd = min(ssthresh, flight + MSS);
//! - one retransmission timer per flow: started when data is sent and it is not running,
//!   restarted by every ACK of new data, stopped when everything is acknowledged. RTO =
//!   SRTT + 4 RTTVAR from Karn-filtered samples (no sample from a retransmitted segment),
//!   clamped to [`min_rto`, `max_rto`]; each timeout doubles it (back-off). On a timeout:
//!   ssthresh = max(flight / 2, 2 MSS), cwnd = 1 MSS, `recover` = highest byte sent, and the
//!   sender goes back to the first unacknowledged byte (it resends what the receiver may
//!   already hold: no SACK).
//!
//! Receiver: cumulative ACK of the next byte expected, one ACK per data segment (or, with
//! `delayed_ack`, per second in-order segment or after `delack_timeout`; at once for a segment
//! out of order or filling a hole), out-of-order segments buffered as byte ranges and delivered
//! when the hole fills, so a retransmission of the hole moves the ACK past everything buffered.
//!
//! With `tcp.cc: cubic` (RFC 9438) a loss sets ssthresh to 0.7 x flight (not half) and
//! remembers the window as `W_max` (with fast convergence, 4.7); congestion avoidance then grows
//! the window toward `W_cubic(t + RTT) = C (t - K)^3 + W_max` (C = 0.4 segments/s^3, t since the
//! first ACK after the loss, `K = cbrt(W_max (1 - 0.7) / C)`), by `(target - cwnd) / cwnd` per
//! segment acknowledged, target clamped to [cwnd, 1.5 cwnd], and at least as fast as the
//! Reno-friendly estimate (`W_est += 3 (1 - 0.7) / 1.7` segments per window). Slow start, fast
//! recovery and the timer are NewReno's. Not modelled: HyStart, CUBIC's own timeout rule (a
//! timeout resets the epoch and `W_max` as a loss does).
//!
//! Not modelled: SACK, timestamps, the three-way handshake and FIN, ECN, receiver-window
//! updates (the window is the fixed `max_window`).
//!
//! The timer is lazy: restarting it moves a deadline; the one pending event, when it fires
//! before the deadline, re-arms itself at the deadline. A restart per ACK costs no event.

use crate::packet::engine::PacketEngine;
use crate::packet::events::{EV_DELACK, EV_RTO, MASK30, ev};
use crate::packet::tables::{Kind, Pkt};

use super::{TcpCc, TcpFlowStats};

/// No event pending / no `recover` point yet.
const NONE: u64 = u64::MAX;

/// One flow's TCP sender and receiver state (`PacketEngine::tcp`, indexed by flow id).
#[derive(Clone, Debug)]
pub(crate) struct TcpFlow {
    pub cwnd: u64,
    pub ssthresh: u64,
    pub dupacks: u32,
    pub in_recovery: bool,
    /// RFC 6582 `recover`: the highest byte sent when recovery or the last timeout began
    /// (`NONE` before any).
    pub recover: u64,
    /// The segment at `snd_una` is to be sent again before new data.
    pub retx: bool,
    // RFC 6298 estimator, ps.
    pub srtt: u64,
    pub rttvar: u64,
    pub rto: u64,
    pub has_rtt: bool,
    /// A segment is being timed: it ends at `rtt_seq`, sent at `rtt_sent`.
    pub timing: bool,
    pub rtt_seq: u64,
    pub rtt_sent: u64,
    /// The timer: when it expires (0: stopped), when it was last (re)started, when its pending
    /// event is due (`NONE`: none) and that event's generation.
    pub rto_deadline: u64,
    pub rto_started: u64,
    pub rto_event_at: u64,
    pub rto_gen: u32,
    pub stats: TcpFlowStats,
    /// Receiver, delayed ACKs: in-order segments not yet acknowledged, and the generation of
    /// the pending timer.
    pub delack_segs: u32,
    pub delack_gen: u32,
    /// Receiver: byte ranges [start, end) held beyond `Flow::rx_expected`, sorted, disjoint,
    /// not adjacent.
    pub ooo: Vec<(u64, u64)>,
    /// CUBIC (RFC 9438): `W_max` and the previous one (bytes), the epoch start (ps; `NONE`:
    /// none since the last loss), K (s) and the Reno-friendly estimate (bytes).
    pub w_max: f64,
    pub w_last_max: f64,
    pub epoch: u64,
    pub k: f64,
    pub w_est: f64,
}

/// CUBIC's constants (RFC 9438 4.5, 4.6): C in segments/s^3, the multiplicative decrease.
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

impl TcpFlow {
    pub(crate) fn new(cfg: &super::TcpConfig, mss: u64) -> Self {
        TcpFlow {
            cwnd: u64::from(cfg.initial_cwnd_segments) * mss,
            ssthresh: u64::MAX,
            dupacks: 0,
            in_recovery: false,
            recover: NONE,
            retx: false,
            srtt: 0,
            rttvar: 0,
            rto: cfg.initial_rto.as_ps(),
            has_rtt: false,
            timing: false,
            rtt_seq: 0,
            rtt_sent: 0,
            rto_deadline: 0,
            rto_started: 0,
            rto_event_at: NONE,
            rto_gen: 0,
            stats: TcpFlowStats::default(),
            delack_segs: 0,
            delack_gen: 0,
            ooo: Vec::new(),
            w_max: 0.0,
            w_last_max: 0.0,
            epoch: NONE,
            k: 0.0,
            w_est: 0.0,
        }
    }
}

/// Adds [s, e) to the sorted, disjoint, non-adjacent ranges `r`, merging what it touches.
pub(crate) fn insert_range(r: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    // First range that ends at or after `s` (could merge with it).
    let i = r.partition_point(|&(_, b)| b < s);
    // Ranges from `i` that start at or before `e` merge.
    let j = i + r[i..].partition_point(|&(a, _)| a <= e);
    if i == j {
        r.insert(i, (s, e));
    } else {
        let lo = s.min(r[i].0);
        let hi = e.max(r[j - 1].1);
        r[i] = (lo, hi);
        r.drain(i + 1..j);
    }
}

/// The slow-start threshold after a loss with `flight` bytes in flight: half of it (NewReno,
/// RFC 5681 (4)) or 0.7 of it (CUBIC, RFC 9438 4.6, which also records `W_max` and ends the
/// growth epoch); at least 2 segments.
fn cubic_or_half(cc: TcpCc, t: &mut TcpFlow, flight: u64, mss: u64) -> u64 {
    match cc {
        TcpCc::NewReno => (flight / 2).max(2 * mss),
        TcpCc::Cubic => {
            let w = t.cwnd as f64;
            // Fast convergence (4.7): a flow whose window shrank since the last loss releases
            // more.
            t.w_max = if w < t.w_last_max { w * (1.0 + CUBIC_BETA) / 2.0 } else { w };
            t.w_last_max = w;
            t.epoch = NONE;
            ((flight as f64 * CUBIC_BETA) as u64).max(2 * mss)
        }
    }
}

/// CUBIC's congestion-avoidance increase for `acked` new bytes at `now` (ps), RFC 9438 4.2-4.4.
fn cubic_increase(t: &mut TcpFlow, acked: u64, mss: u64, now: u64) {
    let seg = mss as f64;
    let cwnd = t.cwnd as f64;
    if t.epoch == NONE {
        t.epoch = now;
        if cwnd < t.w_max {
            t.k = ((t.w_max - cwnd) / seg / CUBIC_C).cbrt();
        } else {
            t.k = 0.0;
            t.w_max = cwnd;
        }
        t.w_est = cwnd;
    }
    let rtt_s = t.srtt as f64 * 1e-12;
    let el = (now - t.epoch) as f64 * 1e-12 + rtt_s - t.k;
    let w_cubic = (CUBIC_C * el * el * el) * seg + t.w_max;
    // Reno-friendly estimate (4.3): alpha = 3 (1 - beta) / (1 + beta) segments per window.
    let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
    t.w_est += alpha * acked as f64 * seg / cwnd;
    let next = if w_cubic < t.w_est {
        t.w_est
    } else {
        let target = w_cubic.clamp(cwnd, 1.5 * cwnd);
        cwnd + (target - cwnd) * acked as f64 / cwnd
    };
    t.cwnd = (next as u64).max(t.cwnd).max(mss);
}

impl PacketEngine {
    /// Effective send window of flow `f` in bytes.
    #[inline]
    fn tcp_window(&self, f: usize) -> u64 {
        self.tcp[f].cwnd.min(self.cfg.tcp.max_window_bytes)
    }

    /// Whether flow `f` has a segment it may send now.
    #[inline]
    fn tcp_can_send(&self, f: usize) -> bool {
        let fl = &self.flows[f];
        if fl.done {
            return false;
        }
        if self.tcp[f].retx {
            return true;
        }
        let mss = u64::from(self.cfg.mtu);
        let seg = fl.size.saturating_sub(fl.snd_nxt).min(mss);
        seg > 0 && fl.snd_nxt - fl.snd_una + seg <= self.tcp_window(f)
    }

    /// The NIC of host `h` sends, if its port is idle: an ACK first, else a segment of the flow
    /// it served last if that flow's window allows one, else of the next such flow (round
    /// robin). A flow thus sends its window in one burst, as a socket that writes its window
    /// into the host's FIFO device queue does (a kernel stack, ns-3's `TcpSocketBase` over a
    /// `NetDevice` queue); RoCE's per-packet round robin would interleave the flows instead. No
    /// pacing and no PFC: the port's line rate and the windows clock the data.
    pub(crate) fn tcp_host_send(&mut self, h: u32) {
        // From the flow served last, wrapping.
        self.window_host_send(h, true, Self::tcp_can_send, Self::tcp_make_data);
    }

    /// The next segment of flow `f`: the retransmission of `snd_una` when one is due, else new
    /// data at `snd_nxt` (again, after a timeout's go-back).
    fn tcp_make_data(&mut self, f: u32) -> u32 {
        let fi = f as usize;
        let mss = u64::from(self.cfg.mtu);
        let now = self.now;
        let hdr = self.hdr_bytes;
        let fl = &mut self.flows[fi];
        let t = &mut self.tcp[fi];
        let (seq, payload) = if t.retx {
            t.retx = false;
            (fl.snd_una, fl.size.saturating_sub(fl.snd_una).min(mss))
        } else {
            let s = fl.snd_nxt;
            let len = fl.size.saturating_sub(s).min(mss);
            fl.snd_nxt += len;
            (s, len)
        };
        if seq < fl.max_sent {
            self.stats.retransmitted_bytes += payload;
            t.stats.retransmitted_segments += 1;
            // Karn: no RTT sample while a retransmitted segment may be what is acknowledged.
            t.timing = false;
        } else if !t.timing {
            t.timing = true;
            t.rtt_seq = seq + payload;
            t.rtt_sent = now;
        }
        fl.max_sent = fl.max_sent.max(seq + payload);
        let mut pk = Pkt::empty();
        pk.kind = Kind::Data;
        pk.pg = fl.pg;
        pk.flow = f;
        pk.path = crate::packet::lb::pick(self.cfg.load_balance, fl, now, &self.paths, &self.ports);
        pk.seq = seq;
        pk.size = (payload as u32 + hdr) as u16;
        fl.last_pkt_size = u32::from(pk.size);
        self.stats.data_packets += 1;
        // RFC 6298 (5.1): start the timer if it is not running.
        if self.tcp[fi].rto_deadline == 0 {
            let at = now + self.tcp[fi].rto;
            self.tcp_arm(f, at);
        }
        self.alloc(pk)
    }

    /// (Re)starts flow `f`'s retransmission timer to expire at `at`.
    fn tcp_arm(&mut self, f: u32, at: u64) {
        let now = self.now;
        let t = &mut self.tcp[f as usize];
        t.rto_deadline = at;
        t.rto_started = now;
        if at < t.rto_event_at {
            // No event, or one due after the new deadline: a new one (the old goes stale).
            t.rto_gen = t.rto_gen.wrapping_add(1);
            t.rto_event_at = at;
            let g = t.rto_gen;
            self.schedule(at, ev(EV_RTO, f, g));
        }
    }

    /// The retransmission-timer event of flow `f` (generation `g`).
    pub(crate) fn tcp_on_rto(&mut self, f: u32, g: u32) {
        let fi = f as usize;
        let now = self.now;
        {
            let t = &mut self.tcp[fi];
            if u64::from(t.rto_gen) & MASK30 != u64::from(g) {
                self.stats.events -= 1;
                return;
            }
            t.rto_event_at = NONE;
            if self.flows[fi].done || t.rto_deadline == 0 {
                return;
            }
            if now < t.rto_deadline {
                // Restarted since this event was set: wait for the deadline.
                let at = t.rto_deadline;
                t.rto_gen = t.rto_gen.wrapping_add(1);
                t.rto_event_at = at;
                let g = t.rto_gen;
                self.schedule(at, ev(EV_RTO, f, g));
                return;
            }
        }
        // The timeout (RFC 6298 (5.4)-(5.7), RFC 5681 (4), RFC 6582 section 4).
        let mss = u64::from(self.cfg.mtu);
        let max_rto = self.cfg.tcp.max_rto.as_ps();
        let fl = &mut self.flows[fi];
        let t = &mut self.tcp[fi];
        let waited = now - t.rto_started;
        self.tcp_min_rto_wait = self.tcp_min_rto_wait.min(waited);
        t.stats.rtos += 1;
        self.stats.tcp_rtos += 1;
        let flight = fl.snd_nxt - fl.snd_una;
        t.ssthresh = cubic_or_half(self.cfg.tcp.cc, t, flight, mss);
        t.cwnd = mss;
        t.recover = fl.max_sent;
        t.in_recovery = false;
        t.dupacks = 0;
        t.retx = false;
        t.timing = false;
        fl.snd_nxt = fl.snd_una;
        t.rto = (t.rto * 2).min(max_rto);
        let at = now + t.rto;
        let src = fl.src;
        self.tcp_arm(f, at);
        self.tcp_host_send(src);
    }

    /// An RTT sample of `r` ps (RFC 6298 (2.2), (2.3)).
    fn tcp_rtt_sample(&mut self, fi: usize, r: u64) {
        let (min_rto, max_rto) = (self.cfg.tcp.min_rto.as_ps(), self.cfg.tcp.max_rto.as_ps());
        let t = &mut self.tcp[fi];
        t.stats.rtt_samples += 1;
        t.stats.rtt_sum_ps += r;
        if t.has_rtt {
            t.rttvar = (3 * t.rttvar + t.srtt.abs_diff(r)) / 4;
            t.srtt = (7 * t.srtt + r) / 8;
        } else {
            t.srtt = r;
            t.rttvar = r / 2;
            t.has_rtt = true;
        }
        t.rto = (t.srtt + (4 * t.rttvar).max(1)).clamp(min_rto, max_rto);
    }

    /// A data segment `pk` of flow `pk.flow` reaches its receiver, host `h`. Returns whether
    /// slot `p` now holds the ACK it triggered (always, unless the flow is done).
    pub(crate) fn tcp_receive_data(&mut self, h: u32, p: u32, pk: &Pkt) -> bool {
        let f = pk.flow as usize;
        if self.flows[f].done {
            return false;
        }
        let payload = u64::from(pk.size) - u64::from(self.hdr_bytes);
        let (s, e) = (pk.seq, pk.seq + payload);
        let old = self.flows[f].rx_expected;
        let mut rx = old;
        let t = &mut self.tcp[f];
        // RFC 5681 4.2: ACK at once a segment out of order, or one that fills (part of) a hole.
        let mut now_ack = !t.ooo.is_empty();
        if s <= rx {
            if e > rx {
                rx = e;
                // Buffered ranges the segment reaches are delivered with it.
                let k = t.ooo.partition_point(|&(a, _)| a <= rx);
                if k > 0 {
                    rx = rx.max(t.ooo[k - 1].1);
                    t.ooo.drain(..k);
                }
            } else {
                now_ack = true;
            }
        } else {
            insert_range(&mut t.ooo, s, e);
            now_ack = true;
        }
        self.flows[f].rx_expected = rx;
        self.stats.payload_delivered += rx - old;
        if self.cfg.tcp.delayed_ack {
            let t = &mut self.tcp[f];
            t.delack_segs += 1;
            if !now_ack && t.delack_segs < 2 {
                // Hold the ACK: the next segment or the timer sends it.
                t.delack_gen = t.delack_gen.wrapping_add(1);
                let (g, at) = (t.delack_gen, self.now + self.cfg.tcp.delack_timeout.as_ps());
                self.schedule(at, ev(EV_DELACK, pk.flow, g));
                return false;
            }
            t.delack_segs = 0;
            t.delack_gen = t.delack_gen.wrapping_add(1);
        }
        let mut a = Pkt::empty();
        a.kind = Kind::Ack;
        a.pg = pk.pg;
        a.flow = pk.flow;
        a.path = self.flows[f].path_ack;
        a.seq = rx;
        a.size = self.ack_bytes as u16;
        self.stats.acks += 1;
        self.pkts[p as usize] = a;
        self.nics[h as usize].ackq.push_back(&mut self.pkts, p);
        self.tcp_host_send(h);
        true
    }

    /// The delayed-ACK timer of flow `f`'s receiver (generation `g`): acknowledge what it holds.
    pub(crate) fn tcp_on_delack(&mut self, f: u32, g: u32) {
        let fi = f as usize;
        let t = &mut self.tcp[fi];
        if u64::from(t.delack_gen) & MASK30 != u64::from(g) || t.delack_segs == 0 || self.flows[fi].done {
            self.stats.events -= 1;
            return;
        }
        t.delack_segs = 0;
        t.delack_gen = t.delack_gen.wrapping_add(1);
        let fl = &self.flows[fi];
        let mut a = Pkt::empty();
        a.kind = Kind::Ack;
        a.pg = fl.pg;
        a.flow = f;
        a.path = fl.path_ack;
        a.seq = fl.rx_expected;
        a.size = self.ack_bytes as u16;
        let h = fl.dst;
        self.stats.acks += 1;
        let p = self.alloc(a);
        self.nics[h as usize].ackq.push_back(&mut self.pkts, p);
        self.tcp_host_send(h);
    }

    /// An ACK `pk` of flow `pk.flow` reaches its sender, host `h`.
    pub(crate) fn tcp_receive_ack(&mut self, h: u32, pk: &Pkt) {
        let f = pk.flow;
        let fi = f as usize;
        if self.flows[fi].done {
            return;
        }
        let mss = u64::from(self.cfg.mtu);
        let dupthresh = self.cfg.tcp.dupack_threshold;
        let now = self.now;
        let ack = pk.seq;
        let snd_una = self.flows[fi].snd_una;
        if ack > snd_una {
            let acked = ack - snd_una;
            let t = &self.tcp[fi];
            if t.timing && ack >= t.rtt_seq {
                let r = now - t.rtt_sent;
                self.tcp[fi].timing = false;
                self.tcp_rtt_sample(fi, r);
            }
            let fl = &mut self.flows[fi];
            fl.snd_una = ack;
            // After a timeout's go-back the receiver may acknowledge past what was resent.
            fl.snd_nxt = fl.snd_nxt.max(ack);
            let flight = fl.snd_nxt - fl.snd_una;
            let t = &mut self.tcp[fi];
            if t.in_recovery {
                if ack >= t.recover {
                    // Full ACK (RFC 6582 3.2 step 3).
                    t.in_recovery = false;
                    t.dupacks = 0;
                    t.cwnd = t.ssthresh.min(flight.max(mss) + mss);
                } else {
                    // Partial ACK (step 4): resend the next hole, deflate.
                    t.retx = true;
                    t.cwnd = t.cwnd.saturating_sub(acked);
                    if acked >= mss {
                        t.cwnd += mss;
                    }
                    t.cwnd = t.cwnd.max(mss);
                }
            } else {
                t.dupacks = 0;
                if t.cwnd < t.ssthresh {
                    t.cwnd += acked.min(mss);
                } else if self.cfg.tcp.cc == TcpCc::Cubic {
                    cubic_increase(t, acked, mss, now);
                } else {
                    t.cwnd += (mss * mss / t.cwnd).max(1);
                }
            }
            if self.flows[fi].finished() {
                self.tcp[fi].rto_deadline = 0;
                self.tcp[fi].ooo = Vec::new();
                self.complete(f);
            } else {
                // RFC 6298 (5.3): restart the timer.
                let at = now + self.tcp[fi].rto;
                self.tcp_arm(f, at);
            }
        } else if ack == snd_una && self.flows[fi].max_sent > snd_una {
            let max_sent = self.flows[fi].max_sent;
            let flight = self.flows[fi].snd_nxt - snd_una;
            let t = &mut self.tcp[fi];
            t.dupacks += 1;
            if t.in_recovery {
                t.cwnd += mss;
            } else if t.dupacks == dupthresh && (t.recover == NONE || ack > t.recover) {
                // Fast retransmit (RFC 6582 3.2 steps 1-2).
                t.ssthresh = cubic_or_half(self.cfg.tcp.cc, t, flight, mss);
                t.recover = max_sent;
                t.cwnd = t.ssthresh + 3 * mss;
                t.in_recovery = true;
                t.retx = true;
                t.stats.fast_retransmits += 1;
                self.stats.tcp_fast_retransmits += 1;
            }
        }
        self.tcp_host_send(h);
    }

    /// Flow `f`'s TCP counters; `None` when the engine has no flow `f` or does not run TCP.
    pub fn tcp_flow_stats(&self, f: u32) -> Option<TcpFlowStats> {
        self.tcp.get(f as usize).map(|t| t.stats)
    }

    /// The shortest time any retransmission timeout waited between its timer's last start and
    /// its firing; `None` when none fired. RFC 6298 asks it to be at least `tcp.min_rto`.
    pub fn tcp_min_rto_wait(&self) -> Option<llmsim_core::SimTime> {
        (self.stats.tcp_rtos > 0).then(|| llmsim_core::SimTime::from_ps(self.tcp_min_rto_wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubic_backs_off_to_0_7_and_grows_back_toward_w_max() {
        let mss = 1000u64;
        let cfg = crate::packet::transport::TcpConfig::default();
        let mut t = TcpFlow::new(&cfg, mss);
        t.cwnd = 100 * mss;
        t.srtt = 10_000_000; // 10 us
        let ss = cubic_or_half(TcpCc::Cubic, &mut t, 100 * mss, mss);
        assert_eq!(ss, 70 * mss, "RFC 9438 4.6: beta = 0.7");
        assert_eq!(t.w_max, 100.0 * mss as f64);
        assert_eq!(cubic_or_half(TcpCc::NewReno, &mut t, 100 * mss, mss), 50 * mss);
        // Congestion avoidance from 70 segments: K = cbrt((100 - 70) / 0.4) s.
        t.cwnd = 70 * mss;
        t.w_last_max = 100.0 * mss as f64;
        cubic_increase(&mut t, mss, mss, 1_000_000);
        assert!((t.k - (30.0f64 / 0.4).cbrt()).abs() < 1e-9, "K = {}", t.k);
        // Microseconds after the loss the cubic curve is flat: the Reno-friendly estimate
        // (3 * 0.3 / 1.7 segments per window) leads, slower than NewReno's one per window.
        let mut now = 1_000_000;
        for _ in 0..700 {
            now += 10_000;
            cubic_increase(&mut t, mss, mss, now);
        }
        let grown = t.cwnd as f64 / mss as f64 - 70.0;
        let expect = 10.0 * 3.0 * 0.3 / 1.7;
        assert!(
            (grown - expect).abs() < 1.0,
            "{grown} segments over ten windows, expected ~{expect}"
        );
        // 6 s after the loss (past K = 4.2 s) the cubic target is C (6 - K)^3 + W_max = 102.3
        // segments: the window climbs past W_max toward it (the convex region).
        for _ in 0..500 {
            cubic_increase(&mut t, mss, mss, 6_000_000_000_000);
        }
        let w = t.cwnd as f64 / mss as f64;
        let target = 0.4 * (6.0 - 1e-6 + 1e-5 - (30.0f64 / 0.4).cbrt()).powi(3) + 100.0;
        assert!(w > 100.0 && w <= target, "{w} segments, target {target}");
    }

    #[test]
    fn ranges_merge_when_they_touch_or_overlap() {
        let mut r = Vec::new();
        insert_range(&mut r, 10, 20);
        insert_range(&mut r, 30, 40);
        assert_eq!(r, vec![(10, 20), (30, 40)]);
        insert_range(&mut r, 20, 30);
        assert_eq!(r, vec![(10, 40)]);
        insert_range(&mut r, 0, 5);
        insert_range(&mut r, 50, 60);
        insert_range(&mut r, 3, 55);
        assert_eq!(r, vec![(0, 60)]);
        insert_range(&mut r, 70, 80);
        insert_range(&mut r, 65, 66);
        assert_eq!(r, vec![(0, 60), (65, 66), (70, 80)]);
    }
}
