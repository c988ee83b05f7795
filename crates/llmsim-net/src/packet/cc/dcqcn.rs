//! DCQCN, Mellanox timer variant (`CC_MODE 1`): `RdmaHw::*Mlx` of the HPCC ns-3 code base.
//! Timer slots: 0 alpha update, 1 rate decrease, 2 rate increase.

use super::{CcHost, CongestionControl, scale};
use crate::packet::config::PacketConfig;
use crate::packet::memo::CcSnap;
use crate::packet::tables::{Flow, Pkt};

const ALPHA: usize = 0;
const DECREASE: usize = 1;
const RATE_INC: usize = 2;

#[derive(Clone, Debug, Default)]
pub(crate) struct Dcqcn {
    pub alpha: f64,
    pub target: u64,
    pub alpha_cnp: bool,
    pub decrease_cnp: bool,
    pub first_cnp: bool,
    pub rp_stage: u32,
}

impl CongestionControl for Dcqcn {
    const NAME: &'static str = "dcqcn";
    const NS3_MODE: u32 = 1;
    const DOC: &'static str = "DCQCN (Mellanox timer variant). Default.";

    fn new(_cfg: &PacketConfig, line: u64) -> Self {
        Dcqcn {
            alpha: 1.0,
            target: line,
            first_cnp: true,
            ..Dcqcn::default()
        }
    }

    fn on_ack<H: CcHost>(h: &mut H, f: u32, _p: u32, pk: &Pkt) {
        if pk.cnp {
            cnp(h, f);
        }
    }

    fn on_timer<H: CcHost>(h: &mut H, f: u32, slot: usize) {
        match slot {
            ALPHA => update_alpha(h, f),
            DECREASE => decrease(h, f),
            _ => rate_increase(h, f),
        }
    }

    fn snapshot(&self, s: &mut CcSnap) {
        s.alpha = self.alpha;
        s.target = self.target;
        s.rp_stage = self.rp_stage;
        s.first_cnp = self.first_cnp;
    }

    /// DCQCN's timers start if the stored flow had them running and `f` has not.
    fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
        let (a, dec, rp) = (
            h.cfg().alpha_resume_interval.as_ps(),
            h.cfg().rate_decrease_interval.as_ps() + 1000,
            h.cfg().rp_timer.as_ps(),
        );
        let fl = h.flow(f);
        let line = fl.max_rate;
        let c = Self::state_of(&mut fl.cc);
        c.alpha = s.alpha;
        c.target = s.target.min(line);
        c.rp_stage = s.rp_stage;
        if c.first_cnp && !s.first_cnp {
            c.first_cnp = false;
            c.alpha_cnp = false;
            c.decrease_cnp = false;
            h.schedule_timer(f, ALPHA, a);
            h.schedule_timer(f, DECREASE, dec);
            h.schedule_timer(f, RATE_INC, rp);
        }
    }

    /// Below line rate, DCQCN raises the rate only at its rate-increase timer (`RP_TIMER`, 300
    /// us in the HPCC runs): a window shorter than that sees a recovering flow as flat.
    fn settles_alone(fl: &Flow) -> bool {
        fl.rate >= fl.max_rate
    }

    /// Below its target by more than θ, each `RP_TIMER` halves the gap (fast recovery): two
    /// flows sharing a 400 Gbit/s link at 200 Gbit/s each with targets of 400 Gbit/s go to 300
    /// each at the next timer, fill the queue and are cut again. Their ACK rate is flat between
    /// timers, but the cycle's mean is below it (`jobs.rs`' 32-GPU job: two ring flows frozen
    /// at 195 Gbit/s for 690 us; their reduce-scatter took 1,289 us, 1,505 in the exact run).
    fn recovering(fl: &Flow, theta: f64) -> bool {
        let super::CcState::Dcqcn(c) = &fl.cc else { return false };
        (fl.rate as f64) < c.target as f64 * (1.0 - theta)
    }
}

/// `RdmaHw::cnp_received_mlx`.
fn cnp<H: CcHost>(h: &mut H, f: u32) {
    let first = {
        let c = Dcqcn::state_of(&mut h.flow(f).cc);
        c.alpha_cnp = true;
        c.decrease_cnp = true;
        c.first_cnp
    };
    if first {
        let alpha_iv = h.cfg().alpha_resume_interval.as_ps();
        let dec_iv = h.cfg().rate_decrease_interval.as_ps() + 1000;
        let k = h.cfg().rate_on_first_cnp;
        let fl = h.flow(f);
        fl.rate = scale(fl.rate, k);
        let rate = fl.rate;
        let c = Dcqcn::state_of(&mut fl.cc);
        c.alpha = 1.0;
        c.alpha_cnp = false;
        c.target = rate;
        c.first_cnp = false;
        h.schedule_timer(f, ALPHA, alpha_iv);
        // +1 ns: the rate decrease runs after the alpha update of the same instant.
        h.schedule_timer(f, DECREASE, dec_iv);
    }
}

/// `RdmaHw::UpdateAlphaMlx`.
fn update_alpha<H: CcHost>(h: &mut H, f: u32) {
    let g = h.cfg().ewma_gain;
    let iv = h.cfg().alpha_resume_interval.as_ps();
    let c = Dcqcn::state_of(&mut h.flow(f).cc);
    c.alpha = if c.alpha_cnp {
        (1.0 - g) * c.alpha + g
    } else {
        (1.0 - g) * c.alpha
    };
    c.alpha_cnp = false;
    h.schedule_timer(f, ALPHA, iv);
}

/// `RdmaHw::CheckRateDecreaseMlx`.
fn decrease<H: CcHost>(h: &mut H, f: u32) {
    let iv = h.cfg().rate_decrease_interval.as_ps();
    h.schedule_timer(f, DECREASE, iv);
    let clamp_cfg = h.cfg().clamp_target_rate;
    let min_rate = h.cfg().min_rate_bps;
    let rp = h.cfg().rp_timer.as_ps();
    let fl = h.flow(f);
    let rate = fl.rate;
    let c = Dcqcn::state_of(&mut fl.cc);
    if !c.decrease_cnp {
        return;
    }
    let clamp = clamp_cfg || c.rp_stage != 0;
    if clamp {
        c.target = rate;
    }
    let alpha = c.alpha;
    c.rp_stage = 0;
    c.decrease_cnp = false;
    fl.rate = min_rate.max(scale(rate, 1.0 - alpha / 2.0));
    h.cancel_timer(f, RATE_INC);
    h.schedule_timer(f, RATE_INC, rp);
}

/// `RdmaHw::RateIncEventTimerMlx` + `RateIncEventMlx`.
fn rate_increase<H: CcHost>(h: &mut H, f: u32) {
    let rp = h.cfg().rp_timer.as_ps();
    h.schedule_timer(f, RATE_INC, rp);
    let th = h.cfg().fast_recovery_times;
    let (ai, hai) = (h.cfg().rate_ai_bps, h.cfg().rate_hai_bps);
    let fl = h.flow(f);
    let line = fl.max_rate;
    let rate = fl.rate;
    let c = Dcqcn::state_of(&mut fl.cc);
    let new_rate = if c.rp_stage < th {
        rate / 2 + c.target / 2
    } else {
        let add = if c.rp_stage == th { ai } else { hai };
        c.target = (c.target + add).min(line);
        rate / 2 + c.target / 2
    };
    c.rp_stage += 1;
    fl.rate = new_rate;
}
