//! Congestion control at the sender NIC: DCQCN (Mellanox timer variant), HPCC, TIMELY and
//! rate-based DCTCP, as `rdma-hw.cc` of the HPCC ns-3 code base implements them. Rates are
//! integer bit/s like ns-3's `DataRate`; products with a float truncate as `DataRate * double`
//! does.

use super::config::PacketConfig;
use super::engine::Engine;
use super::tables::{Flow, MAX_HOPS, Pkt};

/// Per-QP state of every algorithm (only the configured one is used).
#[derive(Clone, Default)]
pub(crate) struct CcState {
    // DCQCN (`mlx`)
    pub alpha: f64,
    pub target: u64,
    pub alpha_cnp: bool,
    pub decrease_cnp: bool,
    pub first_cnp: bool,
    pub rp_stage: u32,
    // HPCC (`hp`), TIMELY (`tmly`) and DCTCP share the update bookkeeping
    pub last_update_seq: u64,
    pub inc_stage: u32,
    pub cur_rate: u64,
    pub u: f64,
    pub hops: [u64; MAX_HOPS],
    pub last_rtt: u64,
    pub rtt_diff: f64,
    pub d_alpha: f64,
    pub ecn_cnt: u64,
    pub batch: u64,
    pub cwr: bool,
    pub high_seq: u64,
}

/// `RdmaHw::AddQueuePair` initial values (`RdmaQueuePair` constructor).
pub(crate) fn init(_cfg: &PacketConfig, fl: &mut Flow, line: u64) {
    fl.cc = CcState {
        alpha: 1.0,
        target: line,
        first_cnp: true,
        cur_rate: line,
        u: 1.0,
        d_alpha: 1.0,
        ..CcState::default()
    };
}

// INT hop word (`IntHop`): line-rate index 3 bits, time 24 bits (ns), bytes 20 bits (units of
// 128 * INT_MULTI), queue length 17 bits (units of 80 * INT_MULTI).
const TIME_BITS: u32 = 24;
const BYTES_BITS: u32 = 20;
const QLEN_BITS: u32 = 17;
const BYTE_UNIT: u64 = 128;
const QLEN_UNIT: u64 = 80;
/// ns-3's table (25/50/100/200/400G); llmsim adds 800G and 1.6T in the unused slots.
const LINE_RATES: [u64; 8] = [
    25_000_000_000,
    50_000_000_000,
    100_000_000_000,
    200_000_000_000,
    400_000_000_000,
    800_000_000_000,
    1_600_000_000_000,
    0,
];

#[inline]
fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// An INT hop word with its time field moved `d_ns` later (modulo its 24 bits, as it wraps).
#[inline]
pub(crate) fn shift_int_time(word: u64, d_ns: u64) -> u64 {
    let m = mask(TIME_BITS) << 37;
    let t = (((word >> 37) & mask(TIME_BITS)) + d_ns) & mask(TIME_BITS);
    (word & !m) | t << 37
}

/// The index of line rate `rate` (bit/s) in the INT rate table; 0 (25G) for a rate not in it,
/// as ns-3's `IntHop::Set` leaves the field.
pub(crate) fn int_rate_index(rate: u64) -> u8 {
    LINE_RATES.iter().position(|&r| r == rate).unwrap_or(0) as u8
}

/// `IntHop::Set`, for a port whose rate has table index `rate_idx` (`int_rate_index`).
/// `INT_MULTI` 1 and 4 (the HPCC runs' value) pass `int_hop_any` a literal multiplier: inlined,
/// its divisors are constants, which the compiler turns into a shift and a multiply; the same
/// quotients as two 64-bit divisions.
#[inline]
pub(crate) fn int_hop(now_ns: u64, tx_bytes: u64, qlen: u64, rate_idx: u8, multi: u32) -> u64 {
    match multi {
        4 => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, 4),
        0 | 1 => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, 1),
        m => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, u64::from(m)),
    }
}

#[inline(always)]
fn int_hop_any(now_ns: u64, tx_bytes: u64, qlen: u64, rate_idx: u8, m: u64) -> u64 {
    let idx = u64::from(rate_idx & 7);
    let time = now_ns & mask(TIME_BITS);
    let bytes = (tx_bytes / (BYTE_UNIT * m)) & mask(BYTES_BITS);
    let q = (qlen / (QLEN_UNIT * m)) & mask(QLEN_BITS);
    idx << 61 | time << 37 | bytes << 17 | q
}

#[inline]
fn hop_time(h: u64) -> u64 {
    (h >> 37) & mask(TIME_BITS)
}
#[inline]
fn hop_bytes(h: u64) -> u64 {
    (h >> 17) & mask(BYTES_BITS)
}
#[inline]
fn hop_qlen(h: u64, multi: u64) -> u64 {
    (h & mask(QLEN_BITS)) * QLEN_UNIT * multi
}
#[inline]
fn hop_rate(h: u64) -> u64 {
    LINE_RATES[(h >> 61) as usize]
}
#[inline]
fn time_delta(h: u64, last: u64) -> u64 {
    hop_time(h).wrapping_sub(hop_time(last)) & mask(TIME_BITS)
}
#[inline]
fn bytes_delta(h: u64, last: u64, multi: u64) -> u64 {
    let (b, l) = (hop_bytes(h), hop_bytes(last));
    let d = if b >= l { b - l } else { b + (1 << BYTES_BITS) - l };
    d * BYTE_UNIT * multi
}

#[inline]
fn scale(rate: u64, f: f64) -> u64 {
    (rate as f64 * f) as u64
}

impl Engine {
    // ------------------------------------------------------------------ DCQCN

    /// `RdmaHw::cnp_received_mlx`.
    pub(crate) fn dcqcn_cnp(&mut self, f: u32) {
        let first = {
            let c = &mut self.flows[f as usize].cc;
            c.alpha_cnp = true;
            c.decrease_cnp = true;
            c.first_cnp
        };
        if first {
            let alpha_iv = self.cfg.alpha_resume_interval.as_ps();
            let dec_iv = self.cfg.rate_decrease_interval.as_ps() + 1000;
            let k = self.cfg.rate_on_first_cnp;
            let fl = &mut self.flows[f as usize];
            fl.cc.alpha = 1.0;
            fl.cc.alpha_cnp = false;
            fl.rate = scale(fl.rate, k);
            fl.cc.target = fl.rate;
            fl.cc.first_cnp = false;
            self.schedule_timer(f, 0, alpha_iv);
            // +1 ns: the rate decrease runs after the alpha update of the same instant.
            self.schedule_timer(f, 1, dec_iv);
        }
    }

    /// `RdmaHw::UpdateAlphaMlx`.
    pub(crate) fn dcqcn_alpha(&mut self, f: u32) {
        let g = self.cfg.ewma_gain;
        let c = &mut self.flows[f as usize].cc;
        c.alpha = if c.alpha_cnp {
            (1.0 - g) * c.alpha + g
        } else {
            (1.0 - g) * c.alpha
        };
        c.alpha_cnp = false;
        let iv = self.cfg.alpha_resume_interval.as_ps();
        self.schedule_timer(f, 0, iv);
    }

    /// `RdmaHw::CheckRateDecreaseMlx`.
    pub(crate) fn dcqcn_decrease(&mut self, f: u32) {
        let iv = self.cfg.rate_decrease_interval.as_ps();
        self.schedule_timer(f, 1, iv);
        let clamp_cfg = self.cfg.clamp_target_rate;
        let min_rate = self.cfg.min_rate_bps;
        let fl = &mut self.flows[f as usize];
        if !fl.cc.decrease_cnp {
            return;
        }
        let clamp = clamp_cfg || fl.cc.rp_stage != 0;
        if clamp {
            fl.cc.target = fl.rate;
        }
        fl.rate = min_rate.max(scale(fl.rate, 1.0 - fl.cc.alpha / 2.0));
        fl.cc.rp_stage = 0;
        fl.cc.decrease_cnp = false;
        self.cancel_timer(f, 2);
        let rp = self.cfg.rp_timer.as_ps();
        self.schedule_timer(f, 2, rp);
    }

    /// `RdmaHw::RateIncEventTimerMlx` + `RateIncEventMlx`.
    pub(crate) fn dcqcn_rp_timer(&mut self, f: u32) {
        let rp = self.cfg.rp_timer.as_ps();
        self.schedule_timer(f, 2, rp);
        let th = self.cfg.fast_recovery_times;
        let (ai, hai) = (self.cfg.rate_ai_bps, self.cfg.rate_hai_bps);
        let fl = &mut self.flows[f as usize];
        let line = fl.max_rate;
        if fl.cc.rp_stage < th {
            fl.rate = fl.rate / 2 + fl.cc.target / 2;
        } else {
            let add = if fl.cc.rp_stage == th { ai } else { hai };
            fl.cc.target = (fl.cc.target + add).min(line);
            fl.rate = fl.rate / 2 + fl.cc.target / 2;
        }
        fl.cc.rp_stage += 1;
    }

    // ------------------------------------------------------------------ HPCC

    /// `RdmaHw::HandleAckHp`.
    pub(crate) fn hpcc_ack(&mut self, f: u32, pk: &Pkt, hops: &[u64; MAX_HOPS]) {
        let last = self.flows[f as usize].cc.last_update_seq;
        if pk.seq > last {
            self.hpcc_update(f, pk, hops, false);
        } else if self.cfg.fast_react {
            self.hpcc_update(f, pk, hops, true);
        }
    }

    /// `RdmaHw::UpdateRateHp` (single rate; `MULTI_RATE 0`).
    fn hpcc_update(&mut self, f: u32, pk: &Pkt, hops: &[u64; MAX_HOPS], fast: bool) {
        let multi = u64::from(self.cfg.int_multi.max(1));
        let (u_target, mi_thresh, rai, min_rate) = (self.cfg.u_target, self.cfg.mi_thresh, self.cfg.rate_ai_bps, self.cfg.min_rate_bps);
        let max_bdp = self.max_bdp;
        let fl = &mut self.flows[f as usize];
        let next_seq = fl.snd_nxt;
        let nhop = usize::from(pk.nhop);
        if fl.cc.last_update_seq == 0 {
            fl.cc.last_update_seq = next_seq;
            fl.cc.hops[..nhop].copy_from_slice(&hops[..nhop]);
            return;
        }
        let mut new_rate = None;
        if nhop > 0 {
            let win = if fl.win == 0 { max_bdp.max(1) } else { fl.win };
            let mut big_u = 0.0f64;
            let mut dt = 0u64;
            for (i, &h) in hops.iter().enumerate().take(nhop) {
                let last = fl.cc.hops[i];
                let tau = time_delta(h, last);
                if tau > 0 {
                    let tx_rate = bytes_delta(h, last, multi) as f64 * 8.0 / (tau as f64 * 1e-9);
                    let line = hop_rate(h) as f64;
                    let q = hop_qlen(h, multi).min(hop_qlen(last, multi));
                    // An empty queue adds exactly +0.0 (0 times finite rates, over a line rate
                    // above 0): its two divisions are skipped, the sum is the same double.
                    let u = if q == 0 && line > 0.0 {
                        tx_rate / line
                    } else {
                        tx_rate / line + q as f64 * fl.max_rate as f64 / line / win as f64
                    };
                    if u > big_u {
                        big_u = u;
                        dt = tau;
                    }
                }
                fl.cc.hops[i] = h;
            }
            let t = fl.base_rtt_ns.max(1);
            let dt = dt.min(t);
            fl.cc.u = (fl.cc.u * (t - dt) as f64 + big_u * dt as f64) / t as f64;
            let max_c = fl.cc.u / u_target;
            let (mut r, stage) = if max_c >= 1.0 || fl.cc.inc_stage >= mi_thresh {
                ((fl.cc.cur_rate as f64 / max_c) as u64 + rai, 0)
            } else {
                (fl.cc.cur_rate + rai, fl.cc.inc_stage + 1)
            };
            r = r.max(min_rate).min(fl.max_rate);
            new_rate = Some((r, stage));
        }
        if let Some((r, stage)) = new_rate {
            self.change_rate(f, r);
            let fl = &mut self.flows[f as usize];
            if !fast {
                fl.cc.cur_rate = r;
                fl.cc.inc_stage = stage;
            }
        }
        let fl = &mut self.flows[f as usize];
        if !fast && next_seq > fl.cc.last_update_seq {
            fl.cc.last_update_seq = next_seq;
        }
    }

    /// `RdmaHw::ChangeRate`: shifts the next send time by the change in pacing gap.
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

    fn tx_gap(&self, bytes: u32, bps: u64) -> u64 {
        if bytes == 0 || bps == 0 {
            return 0;
        }
        if self.cfg.ns_resolution {
            super::engine::ns3_tx_ns(u64::from(bytes), bps) * 1000
        } else {
            (u128::from(bytes) * 8 * 1_000_000_000_000u128).div_ceil(u128::from(bps)) as u64
        }
    }

    // ------------------------------------------------------------------ TIMELY

    /// `RdmaHw::HandleAckTimely` + `UpdateRateTimely` (its fast reaction is empty).
    /// `ts_ns`: the send time the ACK echoes.
    pub(crate) fn timely_ack(&mut self, f: u32, pk: &Pkt, ts_ns: u64) {
        let now_ns = self.now_ns();
        let c = &self.cfg;
        let (alpha, beta, t_low, t_high, min_rtt) = (
            c.timely_alpha,
            c.timely_beta,
            c.timely_t_low_ns,
            c.timely_t_high_ns,
            c.timely_min_rtt_ns,
        );
        let (rai, rhai, min_rate) = (c.rate_ai_bps, c.rate_hai_bps, c.min_rate_bps);
        let fl = &mut self.flows[f as usize];
        if pk.seq <= fl.cc.last_update_seq {
            return;
        }
        let next_seq = fl.snd_nxt;
        let rtt = now_ns.saturating_sub(ts_ns);
        if fl.cc.last_update_seq != 0 {
            let new_diff = rtt as i64 - fl.cc.last_rtt as i64;
            let rtt_diff = (1.0 - alpha) * fl.cc.rtt_diff + alpha * new_diff as f64;
            let gradient = rtt_diff / min_rtt as f64;
            let (inc, c) = if rtt < t_low {
                (true, 0.0)
            } else if rtt > t_high {
                (false, 1.0 - beta * (1.0 - t_high as f64 / rtt as f64))
            } else if gradient <= 0.0 {
                (true, 0.0)
            } else {
                (false, (1.0 - beta * gradient).max(0.0))
            };
            if inc {
                let add = if fl.cc.inc_stage < 5 { rai } else { rhai };
                fl.rate = (fl.cc.cur_rate + add).min(fl.max_rate);
                fl.cc.cur_rate = fl.rate;
                fl.cc.inc_stage += 1;
            } else {
                fl.rate = min_rate.max(scale(fl.cc.cur_rate, c));
                fl.cc.cur_rate = fl.rate;
                fl.cc.inc_stage = 0;
            }
            fl.cc.rtt_diff = rtt_diff;
        }
        if next_seq > fl.cc.last_update_seq {
            fl.cc.last_update_seq = next_seq;
            fl.cc.last_rtt = rtt;
        }
    }

    // ------------------------------------------------------------------ DCTCP

    /// `RdmaHw::HandleAckDctcp`.
    pub(crate) fn dctcp_ack(&mut self, f: u32, pk: &Pkt) {
        let (g, mtu, min_rate, ai) = (
            self.cfg.ewma_gain,
            u64::from(self.cfg.mtu),
            self.cfg.min_rate_bps,
            self.cfg.dctcp_rate_ai_bps,
        );
        let fl = &mut self.flows[f as usize];
        let ack = pk.seq;
        let mut new_batch = false;
        fl.cc.ecn_cnt += u64::from(pk.cnp);
        if ack > fl.cc.last_update_seq {
            new_batch = true;
            if fl.cc.last_update_seq == 0 {
                fl.cc.last_update_seq = fl.snd_nxt;
                fl.cc.batch = fl.snd_nxt / mtu + 1;
            } else {
                let frac = (fl.cc.ecn_cnt as f64 / fl.cc.batch as f64).min(1.0);
                fl.cc.d_alpha = (1.0 - g) * fl.cc.d_alpha + g * frac;
                fl.cc.last_update_seq = fl.snd_nxt;
                fl.cc.ecn_cnt = 0;
                fl.cc.batch = fl.snd_nxt.saturating_sub(ack) / mtu + 1;
            }
        }
        if fl.cc.cwr && ack > fl.cc.high_seq {
            fl.cc.cwr = false;
        }
        if pk.cnp && !fl.cc.cwr {
            fl.cc.cwr = true;
            fl.cc.high_seq = fl.snd_nxt;
            fl.rate = min_rate.max(scale(fl.rate, 1.0 - fl.cc.d_alpha / 2.0));
        }
        if !fl.cc.cwr && new_batch {
            fl.rate = fl.max_rate.min(fl.rate + ai);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_hop_round_trips_and_wraps() {
        let a = int_hop(1_000, 128 * 4 * 10, 80 * 4 * 3, int_rate_index(100_000_000_000), 4);
        let b = int_hop(1_000 + 500, 128 * 4 * 25, 80 * 4 * 7, int_rate_index(100_000_000_000), 4);
        assert_eq!(time_delta(b, a), 500);
        assert_eq!(bytes_delta(b, a, 4), 15 * 128 * 4);
        assert_eq!(hop_qlen(b, 4), 7 * 80 * 4);
        assert_eq!(hop_rate(b), 100_000_000_000);
        // 24-bit time wraps.
        let c = int_hop((1 << 24) + 10, 0, 0, int_rate_index(400_000_000_000), 1);
        let d = int_hop((1 << 24) - 10, 0, 0, int_rate_index(400_000_000_000), 1);
        assert_eq!(time_delta(c, d), 20);
    }

    proptest::proptest! {
        /// The copies of `int_hop` with constant divisors give the fields the plain divisions
        /// give, for every `INT_MULTI`.
        #[test]
        fn int_hop_fields_are_the_quotients(now in 0u64..1 << 40, tx in 0u64..1 << 44, qlen in 0u64..1 << 30, multi in 0u32..9) {
            let h = int_hop(now, tx, qlen, int_rate_index(100_000_000_000), multi);
            let m = u64::from(multi.max(1));
            proptest::prop_assert_eq!(hop_time(h), now & mask(TIME_BITS));
            proptest::prop_assert_eq!(hop_bytes(h), (tx / (128 * m)) & mask(BYTES_BITS));
            proptest::prop_assert_eq!(h & mask(QLEN_BITS), (qlen / (80 * m)) & mask(QLEN_BITS));
            proptest::prop_assert_eq!(hop_rate(h), 100_000_000_000);
        }
    }
}
