//! HPCC with INT (`CC_MODE 3`): `RdmaHw::HandleAckHp` and `UpdateRateHp` (single rate,
//! `MULTI_RATE 0`) of the HPCC ns-3 code base. Switches stamp the INT hop words (`int.rs`).

use super::int::{bytes_delta, hop_qlen, hop_rate, shift_int_time, time_delta};
use super::{CcHost, CcState, CongestionControl};
use crate::packet::config::PacketConfig;
use crate::packet::memo::CcSnap;
use crate::packet::tables::{MAX_HOPS, Pkt};

#[derive(Clone, Debug, Default)]
pub(crate) struct Hpcc {
    pub last_update_seq: u64,
    pub inc_stage: u32,
    pub cur_rate: u64,
    pub u: f64,
    /// The INT words of the last update, per hop.
    pub hops: [u64; MAX_HOPS],
}

impl CongestionControl for Hpcc {
    const NAME: &'static str = "hpcc";
    const ALIASES: &'static [&'static str] = &["hp"];
    const NS3_MODE: u32 = 3;
    const DOC: &'static str = "HPCC (INT).";
    const INT_BYTES: u32 = 42;
    const INT: bool = true;
    /// Measured on the MoE 8x7B / 64-GPU workload (`llmsim_sim::default_window`).
    const FF_WINDOW: usize = 4;

    fn ns3_defaults(c: &mut PacketConfig) {
        c.rate_ai_bps = 40_000_000;
        c.rate_hai_bps = 40_000_000;
        c.has_win = true;
        c.var_win = true;
        c.fast_react = true;
        c.int_multi = 4;
        c.ack_high_prio = false;
    }

    fn new(_cfg: &PacketConfig, line: u64) -> Self {
        Hpcc {
            cur_rate: line,
            u: 1.0,
            ..Hpcc::default()
        }
    }

    /// `RdmaHw::HandleAckHp`.
    #[inline]
    fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt) {
        let hops = h.int_words(p);
        let last = Hpcc::state_of(&mut h.flow(f).cc).last_update_seq;
        if pk.seq > last {
            update(h, f, pk, &hops, false, None, Hpcc::state_of);
        } else if h.cfg().fast_react {
            update(h, f, pk, &hops, true, None, Hpcc::state_of);
        }
    }

    fn fast_forward(&mut self, bytes: u64, d_ns: u64) {
        if self.last_update_seq != 0 {
            self.last_update_seq += bytes;
        }
        for w in &mut self.hops {
            *w = shift_int_time(*w, d_ns);
        }
    }

    fn snapshot(&self, s: &mut CcSnap) {
        s.inc_stage = self.inc_stage;
        s.cur_rate = self.cur_rate;
        s.u = self.u;
    }

    fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
        let fl = h.flow(f);
        let line = fl.max_rate;
        let c = Hpcc::state_of(&mut fl.cc);
        c.inc_stage = s.inc_stage;
        c.cur_rate = s.cur_rate.min(line);
        c.u = s.u;
    }
}

/// `RdmaHw::UpdateRateHp` (single rate; `MULTI_RATE 0`). Inlined into the engine's ACK path,
/// as it was before the algorithms had files of their own. `pint`: HPCC-PINT's log base, which
/// the largest hop utilization is rounded to a power of (`hpcc_pint.rs`); `state`: where the
/// flow's HPCC state is in its `CcState`.
#[inline]
pub(super) fn update<H: CcHost>(
    h: &mut H,
    f: u32,
    pk: &Pkt,
    hops: &[u64; MAX_HOPS],
    fast: bool,
    pint: Option<f64>,
    state: impl Fn(&mut CcState) -> &mut Hpcc,
) {
    let cfg = h.cfg();
    let multi = u64::from(cfg.int_multi.max(1));
    let (u_target, mi_thresh, rai, min_rate) = (cfg.u_target, cfg.mi_thresh, cfg.rate_ai_bps, cfg.min_rate_bps);
    let max_bdp = h.max_bdp();
    let fl = h.flow(f);
    let next_seq = fl.snd_nxt;
    let (win, max_rate, base_rtt_ns) = (fl.win, fl.max_rate, fl.base_rtt_ns);
    let c = state(&mut fl.cc);
    let nhop = usize::from(pk.nhop);
    if c.last_update_seq == 0 {
        c.last_update_seq = next_seq;
        c.hops[..nhop].copy_from_slice(&hops[..nhop]);
        return;
    }
    let mut new_rate = None;
    if nhop > 0 {
        let win = if win == 0 { max_bdp.max(1) } else { win };
        let mut big_u = 0.0f64;
        let mut dt = 0u64;
        for (i, &w) in hops.iter().enumerate().take(nhop) {
            let last = c.hops[i];
            let tau = time_delta(w, last);
            if tau > 0 {
                let tx_rate = bytes_delta(w, last, multi) as f64 * 8.0 / (tau as f64 * 1e-9);
                let line = hop_rate(w) as f64;
                let q = hop_qlen(w, multi).min(hop_qlen(last, multi));
                // An empty queue adds exactly +0.0 (0 times finite rates, over a line rate
                // above 0): its two divisions are skipped, the sum is the same double.
                let u = if q == 0 && line > 0.0 {
                    tx_rate / line
                } else {
                    tx_rate / line + q as f64 * max_rate as f64 / line / win as f64
                };
                if u > big_u {
                    big_u = u;
                    dt = tau;
                }
            }
            c.hops[i] = w;
        }
        if let Some(base) = pint {
            big_u = super::hpcc_pint::quantize(big_u, base);
        }
        let t = base_rtt_ns.max(1);
        let dt = dt.min(t);
        c.u = (c.u * (t - dt) as f64 + big_u * dt as f64) / t as f64;
        let max_c = c.u / u_target;
        let (mut r, stage) = if max_c >= 1.0 || c.inc_stage >= mi_thresh {
            ((c.cur_rate as f64 / max_c) as u64 + rai, 0)
        } else {
            (c.cur_rate + rai, c.inc_stage + 1)
        };
        r = r.max(min_rate).min(max_rate);
        new_rate = Some((r, stage));
    }
    if let Some((r, stage)) = new_rate {
        h.change_rate(f, r);
        if !fast {
            let c = state(&mut h.flow(f).cc);
            c.cur_rate = r;
            c.inc_stage = stage;
        }
    }
    let c = state(&mut h.flow(f).cc);
    if !fast && next_seq > c.last_update_seq {
        c.last_update_seq = next_seq;
    }
}
