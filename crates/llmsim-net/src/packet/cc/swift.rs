//! Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
//! Datacenter", SIGCOMM 2020), section 3 and Algorithm 1, on the RoCE engine's QPs.
//!
//! A congestion window `cwnd` in packets, driven by the RTT each ACK echoes (data packets carry
//! their send time, as TIMELY's do):
//! - target delay = the QP's base RTT (`Flow::base_rtt_ns`: the fabric's largest under ns-3's
//!   `GLOBAL_T`, the default) + `swift_hop_scale` per hop of its path + the flow
//!   scaling term `fs = clamp(a / sqrt(cwnd) + b, 0, fs_range)` (a, b chosen so that fs is
//!   `fs_range` at `fs_min_cwnd` packets and 0 at `fs_max_cwnd`: small windows get a larger
//!   target, which makes many flows converge to fairness);
//! - RTT under the target: additive increase, `cwnd += ai * acked / cwnd` (`cwnd += ai * acked`
//!   below one packet);
//! - RTT at or over it, at most once per RTT: multiplicative decrease,
//!   `cwnd *= max(1 - beta * (rtt - target) / rtt, 1 - max_mdf)`;
//! - a NACK (a loss) cuts `cwnd *= 1 - max_mdf`, at most once per RTT.
//!
//! The window is the QP's (`Flow::win`, the engine's window bound), at most the fabric's BDP it
//! starts at; below one packet the QP is paced at `cwnd * mtu / rtt` instead (Swift's pacing
//! mode). Simplified: the paper's separate fabric and endpoint (host) delays and windows are one
//! (the engine has no host delay), and there is no retransmission timer (the RoCE engine is
//! lossless).

use super::{CcHost, CongestionControl};
use crate::packet::config::PacketConfig;
use crate::packet::tables::{Kind, Pkt};

#[derive(Clone, Debug, Default)]
pub(crate) struct Swift {
    /// Window in packets (0 before the first ACK: then the QP's starting window).
    pub cwnd: f64,
    pub max_cwnd: f64,
    pub last_decrease_ns: u64,
    /// Highest acknowledged byte seen.
    pub last_ack: u64,
}

/// Swift's target-delay knobs, copied out of the configuration (the ACK path holds the flow).
#[derive(Clone, Copy)]
pub(crate) struct SwiftTarget {
    pub hop_scale_ns: u64,
    pub fs_range_ns: u64,
    pub fs_min_cwnd: f64,
    pub fs_max_cwnd: f64,
}

impl PacketConfig {
    fn clone_swift(&self) -> SwiftTarget {
        SwiftTarget {
            hop_scale_ns: self.swift_hop_scale.as_ns(),
            fs_range_ns: self.swift_fs_range.as_ns(),
            fs_min_cwnd: self.swift_fs_min_cwnd,
            fs_max_cwnd: self.swift_fs_max_cwnd,
        }
    }
}

/// The flow-scaling term (ns) for a window of `cwnd` packets.
fn fs_delay(cfg: &SwiftTarget, cwnd: f64) -> f64 {
    let range = cfg.fs_range_ns as f64;
    let (lo, hi) = (cfg.fs_min_cwnd, cfg.fs_max_cwnd);
    let a = range / (1.0 / lo.sqrt() - 1.0 / hi.sqrt());
    let b = -a / hi.sqrt();
    (a / cwnd.max(1e-9).sqrt() + b).clamp(0.0, range)
}

/// The target delay (ns) of a flow with base RTT `base_rtt_ns` over `hops` links.
pub(crate) fn target_ns(cfg: &SwiftTarget, base_rtt_ns: u64, hops: u32, cwnd: f64) -> f64 {
    base_rtt_ns as f64 + f64::from(hops) * cfg.hop_scale_ns as f64 + fs_delay(cfg, cwnd)
}

impl CongestionControl for Swift {
    const NAME: &'static str = "swift";
    /// Not an ns-3 `CC_MODE` (the HPCC code base has no Swift): llmsim's own number.
    const NS3_MODE: u32 = 12;
    const DOC: &'static str = "Swift (delay target with per-hop and flow scaling, AI/MD on delay).";
    /// The timestamp the ACK echoes.
    const INT_BYTES: u32 = 8;
    const SEND_TS: bool = true;

    fn ns3_defaults(c: &mut PacketConfig) {
        // The window is the QP's.
        c.has_win = true;
        c.var_win = false;
    }

    fn new(_cfg: &PacketConfig, _line: u64) -> Self {
        Swift::default()
    }

    fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt) {
        let now_ns = h.now_ns();
        let rtt = now_ns.saturating_sub(h.send_ts(p)) as f64;
        let hops = h.path_hops(f);
        let cfg = h.cfg();
        let mtu = f64::from(cfg.mtu);
        let (ai, beta, max_mdf, min_cwnd) = (cfg.swift_ai, cfg.swift_beta, cfg.swift_max_mdf, cfg.swift_min_cwnd);
        let cfg = cfg.clone_swift();
        let fl = h.flow(f);
        let (win, base_rtt, line) = (fl.win, fl.base_rtt_ns, fl.max_rate);
        let c = Swift::state_of(&mut fl.cc);
        if c.cwnd == 0.0 {
            c.max_cwnd = (win as f64 / mtu).max(1.0);
            c.cwnd = c.max_cwnd;
        }
        let acked = (pk.seq.saturating_sub(c.last_ack) as f64 / mtu).max(0.0);
        c.last_ack = c.last_ack.max(pk.seq);
        let can_decrease = now_ns.saturating_sub(c.last_decrease_ns) as f64 >= rtt;
        if pk.kind == Kind::Nack {
            if can_decrease {
                c.cwnd *= 1.0 - max_mdf;
                c.last_decrease_ns = now_ns;
            }
        } else {
            let target = target_ns(&cfg, base_rtt, hops, c.cwnd);
            if rtt < target {
                if c.cwnd >= 1.0 {
                    c.cwnd += ai * acked / c.cwnd;
                } else {
                    c.cwnd += ai * acked;
                }
            } else if can_decrease {
                c.cwnd *= (1.0 - beta * (rtt - target) / rtt).max(1.0 - max_mdf);
                c.last_decrease_ns = now_ns;
            }
        }
        c.cwnd = c.cwnd.clamp(min_cwnd, c.max_cwnd);
        let cwnd = c.cwnd;
        let win_bytes = ((cwnd * mtu) as u64).max(1);
        let fl = h.flow(f);
        fl.win = win_bytes;
        // Below one packet: a one-packet window, paced at cwnd packets per RTT.
        let rate = if cwnd < 1.0 {
            fl.win = mtu as u64;
            let r = cwnd * mtu * 8.0 / (rtt.max(base_rtt as f64).max(1.0) * 1e-9);
            (r as u64).clamp(1, line)
        } else {
            line
        };
        if rate != h.flow(f).rate {
            h.change_rate(f, rate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_scaling_spans_its_range_between_the_windows() {
        let cfg = PacketConfig::default().clone_swift();
        let r = cfg.fs_range_ns as f64;
        assert!((fs_delay(&cfg, cfg.fs_min_cwnd) - r).abs() < 1e-6 * r);
        assert!(fs_delay(&cfg, cfg.fs_max_cwnd).abs() < 1e-6 * r);
        assert_eq!(fs_delay(&cfg, cfg.fs_max_cwnd * 10.0), 0.0);
        assert!(fs_delay(&cfg, 1.0) > fs_delay(&cfg, 10.0));
        // Per-hop scaling: each hop adds `swift_hop_scale`.
        let d = target_ns(&cfg, 5000, 4, 50.0) - target_ns(&cfg, 5000, 2, 50.0);
        assert!((d - 2.0 * cfg.hop_scale_ns as f64).abs() < 1e-9);
    }
}
