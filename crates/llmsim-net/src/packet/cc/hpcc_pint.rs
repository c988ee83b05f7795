//! HPCC with probabilistic INT (PINT: Ben Basat et al., "PINT: Probabilistic In-band Network
//! Telemetry", SIGCOMM 2020, section 4.3 and the HPCC use case of section 6): instead of HPCC's
//! per-hop INT stack (42 header bytes), a packet carries one small value, the largest link
//! utilization on its path, in 8 bits as a power of `PINT_LOG_BASE` (multiplicative
//! approximation), and only a `PINT_PROB` fraction of packets carry it.
//!
//! Modelled as HPCC (`hpcc.rs`, the same window and rate update) fed with what PINT delivers:
//! - the header grows by 2 bytes, not 42;
//! - an ACK updates the rate only when its packet carried the value: a deterministic draw per
//!   (flow, sequence) below `pint_prob`;
//! - the utilization HPCC uses is the largest hop's, rounded to the nearest power of
//!   `pint_log_base` with an 8-bit signed exponent.
//!
//! The HPCC-PINT ns-3 code base (`CC_MODE 10`, `RdmaHw::HandleAckHpPint` and
//! `UpdateRateHpPint`) samples ACKs with `rand() % 65536 < 65536 * PINT_PROB` and sets the rate
//! from the decoded utilization as HPCC does (`max_c = U / U_TARGET`). Simplified here: the
//! simulator computes each hop's utilization at the sender from per-hop words the switches stamp
//! (as for HPCC) and smooths it over the base RTT there (HPCC's EWMA), where PINT's switches keep
//! the utilization per port and fold it into the packet's value with a max; the sample is a
//! deterministic hash of (flow, sequence), not `rand()`.

use super::hpcc::{Hpcc, update};
use super::{CcHost, CongestionControl};
use crate::packet::config::PacketConfig;
use crate::packet::memo::CcSnap;
use crate::packet::tables::Pkt;

#[derive(Clone, Debug, Default)]
pub(crate) struct HpccPint(pub Hpcc);

/// `u` rounded to the nearest power of `base` with an exponent in [-128, 127] (0 below the
/// smallest).
pub(crate) fn quantize(u: f64, base: f64) -> f64 {
    if u <= 0.0 {
        return 0.0;
    }
    let c = (u.ln() / base.ln()).round();
    if c < -128.0 {
        return 0.0;
    }
    base.powf(c.min(127.0))
}

/// The HPCC state inside flow state `cc`.
fn pint_state(cc: &mut super::CcState) -> &mut Hpcc {
    &mut HpccPint::state_of(cc).0
}

/// Whether packet `seq` of flow `f` carries PINT's value (a deterministic draw below `prob`).
fn carries(f: u32, seq: u64, prob: f64) -> bool {
    if prob >= 1.0 {
        return true;
    }
    let h = llmsim_core::mix64(seq ^ (u64::from(f) << 40) ^ 0x5049_4E54);
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < prob
}

impl CongestionControl for HpccPint {
    const NAME: &'static str = "hpcc-pint";
    const ALIASES: &'static [&'static str] = &["pint"];
    const NS3_MODE: u32 = 10;
    const DOC: &'static str = "HPCC with probabilistic INT (PINT): one 8-bit max-utilization value on a fraction of packets.";
    const INT_BYTES: u32 = 2;
    const INT: bool = true;
    const FF_WINDOW: usize = 4;

    fn ns3_defaults(c: &mut PacketConfig) {
        Hpcc::ns3_defaults(c);
    }

    fn new(cfg: &PacketConfig, line: u64) -> Self {
        HpccPint(Hpcc::new(cfg, line))
    }

    fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt) {
        let (prob, base, fast_react) = (h.cfg().pint_prob, h.cfg().pint_log_base, h.cfg().fast_react);
        if !carries(f, pk.seq, prob) {
            return;
        }
        let hops = h.int_words(p);
        let st = pint_state;
        let last = st(&mut h.flow(f).cc).last_update_seq;
        if pk.seq > last {
            update(h, f, pk, &hops, false, Some(base), st);
        } else if fast_react {
            update(h, f, pk, &hops, true, Some(base), st);
        }
    }

    fn fast_forward(&mut self, bytes: u64, d_ns: u64) {
        self.0.fast_forward(bytes, d_ns);
    }

    fn snapshot(&self, s: &mut CcSnap) {
        self.0.snapshot(s);
    }

    fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
        let fl = h.flow(f);
        let line = fl.max_rate;
        let c = &mut HpccPint::state_of(&mut fl.cc).0;
        c.inc_stage = s.inc_stage;
        c.cur_rate = s.cur_rate.min(line);
        c.u = s.u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_is_within_half_a_step() {
        let base: f64 = 1.05;
        for u in [0.01, 0.3, 0.95, 1.0, 1.7, 12.0] {
            let q = quantize(u, base);
            let r = q / u;
            assert!(
                r <= base.sqrt() * (1.0 + 1e-12) && r >= 1.0 / base.sqrt() * (1.0 - 1e-12),
                "{u} -> {q}"
            );
        }
        assert_eq!(quantize(0.0, base), 0.0);
        assert_eq!(quantize(1e-9, base), 0.0, "under base^-128");
    }

    #[test]
    fn a_fraction_of_packets_carries_the_value() {
        let n = (0..10_000u64).filter(|&s| carries(3, s * 1000, 0.25)).count();
        assert!((2300..2700).contains(&n), "{n}");
        assert!((0..100u64).all(|s| carries(3, s, 1.0)));
    }
}
