//! Rate-based DCTCP (`CC_MODE 8`): `RdmaHw::HandleAckDctcp` of the HPCC ns-3 code base.

use super::{CcHost, CongestionControl, scale};
use crate::packet::config::PacketConfig;
use crate::packet::memo::CcSnap;
use crate::packet::tables::Pkt;

#[derive(Clone, Debug, Default)]
pub(crate) struct Dctcp {
    pub last_update_seq: u64,
    pub d_alpha: f64,
    pub ecn_cnt: u64,
    pub batch: u64,
    pub cwr: bool,
    pub high_seq: u64,
}

impl CongestionControl for Dctcp {
    const NAME: &'static str = "dctcp";
    const NS3_MODE: u32 = 8;
    const DOC: &'static str = "Rate-based DCTCP.";

    fn ns3_defaults(c: &mut PacketConfig) {
        c.ewma_gain = 1.0 / 16.0;
        c.rate_ai_bps = 10_000_000;
        c.rate_hai_bps = 10_000_000;
        c.dctcp_rate_ai_bps = 615_000_000;
        c.has_win = true;
        c.var_win = true;
        c.ack_high_prio = false;
        for e in &mut c.ecn_map {
            let k = e.rate_bps / 100_000_000_000 * 300_000;
            e.kmin_bytes = k;
            e.kmax_bytes = k;
            e.pmax = 1.0;
        }
    }

    fn new(_cfg: &PacketConfig, _line: u64) -> Self {
        Dctcp {
            d_alpha: 1.0,
            ..Dctcp::default()
        }
    }

    fn on_ack<H: CcHost>(h: &mut H, f: u32, _p: u32, pk: &Pkt) {
        let cfg = h.cfg();
        let (g, mtu, min_rate, ai) = (cfg.ewma_gain, u64::from(cfg.mtu), cfg.min_rate_bps, cfg.dctcp_rate_ai_bps);
        let fl = h.flow(f);
        let (snd_nxt, max_rate) = (fl.snd_nxt, fl.max_rate);
        let mut rate = fl.rate;
        let c = Dctcp::state_of(&mut fl.cc);
        let ack = pk.seq;
        let mut new_batch = false;
        c.ecn_cnt += u64::from(pk.cnp);
        if ack > c.last_update_seq {
            new_batch = true;
            if c.last_update_seq == 0 {
                c.last_update_seq = snd_nxt;
                c.batch = snd_nxt / mtu + 1;
            } else {
                let frac = (c.ecn_cnt as f64 / c.batch as f64).min(1.0);
                c.d_alpha = (1.0 - g) * c.d_alpha + g * frac;
                c.last_update_seq = snd_nxt;
                c.ecn_cnt = 0;
                c.batch = snd_nxt.saturating_sub(ack) / mtu + 1;
            }
        }
        if c.cwr && ack > c.high_seq {
            c.cwr = false;
        }
        if pk.cnp && !c.cwr {
            c.cwr = true;
            c.high_seq = snd_nxt;
            rate = min_rate.max(scale(rate, 1.0 - c.d_alpha / 2.0));
        }
        if !c.cwr && new_batch {
            rate = max_rate.min(rate + ai);
        }
        fl.rate = rate;
    }

    fn fast_forward(&mut self, bytes: u64, _d_ns: u64) {
        if self.last_update_seq != 0 {
            self.last_update_seq += bytes;
        }
        if self.high_seq != 0 {
            self.high_seq += bytes;
        }
    }

    fn snapshot(&self, s: &mut CcSnap) {
        s.d_alpha = self.d_alpha;
    }

    fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
        Dctcp::state_of(&mut h.flow(f).cc).d_alpha = s.d_alpha;
    }
}
