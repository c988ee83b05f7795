//! TIMELY (`CC_MODE 7`): `RdmaHw::HandleAckTimely` + `UpdateRateTimely` of the HPCC ns-3 code
//! base (its fast reaction is empty). Data packets carry their send time; the ACK echoes it.

use super::{CcHost, CongestionControl, scale};
use crate::packet::config::PacketConfig;
use crate::packet::memo::CcSnap;
use crate::packet::tables::Pkt;

#[derive(Clone, Debug, Default)]
pub(crate) struct Timely {
    pub last_update_seq: u64,
    pub inc_stage: u32,
    pub cur_rate: u64,
    pub last_rtt: u64,
    pub rtt_diff: f64,
}

impl CongestionControl for Timely {
    const NAME: &'static str = "timely";
    const NS3_MODE: u32 = 7;
    const DOC: &'static str = "TIMELY (RTT gradient).";
    const INT_BYTES: u32 = 8;
    const SEND_TS: bool = true;

    fn ns3_defaults(c: &mut PacketConfig) {
        c.rate_ai_bps = 100_000_000;
        c.rate_hai_bps = 500_000_000;
    }

    fn new(_cfg: &PacketConfig, line: u64) -> Self {
        Timely {
            cur_rate: line,
            ..Timely::default()
        }
    }

    fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt) {
        let ts_ns = h.send_ts(p);
        let now_ns = h.now_ns();
        let c = h.cfg();
        let (alpha, beta, t_low, t_high, min_rtt) = (
            c.timely_alpha,
            c.timely_beta,
            c.timely_t_low.as_ns(),
            c.timely_t_high.as_ns(),
            c.timely_min_rtt.as_ns(),
        );
        let (rai, rhai, min_rate) = (c.rate_ai_bps, c.rate_hai_bps, c.min_rate_bps);
        let fl = h.flow(f);
        let (next_seq, max_rate) = (fl.snd_nxt, fl.max_rate);
        let st = Timely::state_of(&mut fl.cc);
        if pk.seq <= st.last_update_seq {
            return;
        }
        let rtt = now_ns.saturating_sub(ts_ns);
        let mut rate = None;
        if st.last_update_seq != 0 {
            let new_diff = rtt as i64 - st.last_rtt as i64;
            let rtt_diff = (1.0 - alpha) * st.rtt_diff + alpha * new_diff as f64;
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
            let r = if inc {
                let add = if st.inc_stage < 5 { rai } else { rhai };
                st.inc_stage += 1;
                (st.cur_rate + add).min(max_rate)
            } else {
                st.inc_stage = 0;
                min_rate.max(scale(st.cur_rate, c))
            };
            st.cur_rate = r;
            st.rtt_diff = rtt_diff;
            rate = Some(r);
        }
        if next_seq > st.last_update_seq {
            st.last_update_seq = next_seq;
            st.last_rtt = rtt;
        }
        if let Some(r) = rate {
            fl.rate = r;
        }
    }

    fn fast_forward(&mut self, bytes: u64, _d_ns: u64) {
        if self.last_update_seq != 0 {
            self.last_update_seq += bytes;
        }
    }

    fn snapshot(&self, s: &mut CcSnap) {
        s.inc_stage = self.inc_stage;
        s.cur_rate = self.cur_rate;
        s.last_rtt = self.last_rtt;
        s.rtt_diff = self.rtt_diff;
    }

    fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
        let fl = h.flow(f);
        let line = fl.max_rate;
        let c = Timely::state_of(&mut fl.cc);
        c.inc_stage = s.inc_stage;
        c.cur_rate = s.cur_rate.min(line);
        c.last_rtt = s.last_rtt;
        c.rtt_diff = s.rtt_diff;
    }
}
