//! Transports: how a flow's sender turns bytes into packets and recovers losses, and what its
//! receiver acknowledges. The engine picks one per run (`PacketConfig::transport`) and branches
//! on it once per packet at the host (send, data receipt, ACK receipt); switches branch once per
//! packet on the fabric being lossless (PFC) or lossy (tail drop).
//!
//! - `roce`: RoCEv2 as the ns-3 RDMA model of the HPCC code base has it: rate pacing by
//!   congestion control (`cc/`), per-packet ACK, NACK and go-back-N, over a lossless fabric.
//!   Its code is the engine's own (`engine/nic.rs`), unchanged.
//! - `tcp` (`tcp.rs`): TCP NewReno (RFC 5681, RFC 6582), or CUBIC (RFC 9438), with an RFC 6298
//!   retransmission timer, over a lossy fabric.
//! - `uet` (`uet.rs`): an Ultra Ethernet-style transport: NSCC window control (delay + ECN),
//!   per-packet selective ACK/NACK that tolerates any arrival order, over a lossy fabric whose
//!   switches trim a data packet to its header instead of dropping it.
//!
//! Adding a transport: a file here with its sender and receiver on `PacketEngine`, a variant of
//! [`Transport`], and its three branches in `engine/nic.rs` (`host_send`, `host_receive`).

pub(crate) mod tcp;
pub(crate) mod uet;

use llmsim_core::SimTime;

/// The transport every flow of a run uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// RoCEv2 with go-back-N over a lossless (PFC) fabric: the ns-3 RDMA model. Default.
    #[default]
    Roce,
    /// TCP NewReno over a lossy fabric (switches drop at a full buffer, no PFC).
    Tcp,
    /// Ultra Ethernet-style transport: NSCC, packet trimming, out-of-order delivery.
    Uet,
}

impl Transport {
    /// The transport's name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Roce => "roce",
            Transport::Tcp => "tcp",
            Transport::Uet => "uet",
        }
    }
}

/// Where a lossy switch (PFC off) drops a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DropPolicy {
    /// The switch buffer is divided evenly among the switch's ports; a packet is dropped when
    /// its egress queue would overrun its share (the ASTRA-sim + ns-3 DLRM study's switch).
    /// Default.
    #[default]
    PerPortTailDrop,
    /// One buffer shared by every port of the switch; a packet is dropped when the switch's
    /// queued bytes would exceed it.
    SharedTailDrop,
}

impl DropPolicy {
    /// The policy's name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            DropPolicy::PerPortTailDrop => "per_port",
            DropPolicy::SharedTailDrop => "shared",
        }
    }
}

/// TCP's congestion control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TcpCc {
    /// NewReno (RFC 5681, RFC 6582): halve on a loss, one segment per RTT in congestion
    /// avoidance. Default.
    #[default]
    NewReno,
    /// CUBIC (RFC 9438): multiplicative decrease to 0.7, a cubic window growth in time since
    /// the last decrease, with the Reno-friendly region.
    Cubic,
}

impl TcpCc {
    /// The algorithm's name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            TcpCc::NewReno => "newreno",
            TcpCc::Cubic => "cubic",
        }
    }
}

/// TCP's parameters. Defaults follow the ASTRA-sim + ns-3 DLRM study where it states them
/// (RTO 50 ms, window 0.5 MB) and the RFCs elsewhere.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Lower bound of the retransmission timeout (RFC 6298 (2.4) asks 1 s; the study set its RTO
    /// timer to 50 ms). Default 50 ms.
    pub min_rto: SimTime,
    /// The timeout before the first RTT sample (RFC 6298 (2.1): 1 s). Default 50 ms, the
    /// study's RTO.
    pub initial_rto: SimTime,
    /// Upper bound of the backed-off timeout (RFC 6298 (2.5): at least 60 s). Default 60 s.
    pub max_rto: SimTime,
    /// Largest window in bytes (the receiver's window; the study's "TCP window size" 0.5 MB).
    pub max_window_bytes: u64,
    /// Initial congestion window in segments (RFC 6928: 10).
    pub initial_cwnd_segments: u32,
    /// Duplicate ACKs that trigger fast retransmit (RFC 5681: 3).
    pub dupack_threshold: u32,
    /// Delayed ACKs (RFC 1122 4.2.3.2, RFC 5681 4.2): the receiver acknowledges every second
    /// in-order segment, or `delack_timeout` after an unacknowledged one; out-of-order
    /// segments and those that fill a hole are acknowledged at once. Default off (one ACK per
    /// segment).
    pub delayed_ack: bool,
    /// The delayed-ACK timer (ns-3's `TcpSocket::DelAckTimeout`: 200 ms).
    pub delack_timeout: SimTime,
    /// Congestion control: NewReno (default) or CUBIC.
    pub cc: TcpCc,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            min_rto: SimTime::from_ms(50),
            initial_rto: SimTime::from_ms(50),
            max_rto: SimTime::from_ms(60_000),
            max_window_bytes: 500_000,
            initial_cwnd_segments: 10,
            dupack_threshold: 3,
            delayed_ack: false,
            delack_timeout: SimTime::from_ms(200),
            cc: TcpCc::NewReno,
        }
    }
}

impl TcpConfig {
    /// # Errors
    /// A message naming the field out of range.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_rto.as_ps() == 0 {
            return Err("tcp.min_rto must be above 0, e.g. 50ms".into());
        }
        if self.initial_rto < self.min_rto {
            return Err(format!(
                "tcp.initial_rto={} is below tcp.min_rto={}; give an initial RTO at least the minimum",
                self.initial_rto, self.min_rto
            ));
        }
        if self.max_rto < self.initial_rto {
            return Err(format!(
                "tcp.max_rto={} is below tcp.initial_rto={}",
                self.max_rto, self.initial_rto
            ));
        }
        if self.initial_cwnd_segments == 0 {
            return Err("tcp.initial_cwnd must be at least 1 segment".into());
        }
        if self.delayed_ack && self.delack_timeout.as_ps() == 0 {
            return Err("tcp.delack_timeout must be above 0 with delayed_ack, e.g. 200ms".into());
        }
        if self.dupack_threshold == 0 {
            return Err("tcp.dupack_threshold must be at least 1".into());
        }
        Ok(())
    }
}

/// Per-flow transport counters of a TCP run (all zero under RoCE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpFlowStats {
    /// Retransmission timeouts that fired.
    pub rtos: u32,
    /// Fast retransmits (entries into fast recovery on `dupack_threshold` duplicate ACKs).
    pub fast_retransmits: u32,
    /// Segments sent again (fast retransmit, partial ACKs, and after a timeout).
    pub retransmitted_segments: u32,
    /// The flow's packets (data and ACKs) dropped by switches.
    pub drops: u32,
    /// RTT samples taken (RFC 6298's timed segments).
    pub rtt_samples: u32,
    /// Their sum, in ps.
    pub rtt_sum_ps: u64,
}

/// UET's parameters (`network.uet`). Defaults follow uet-htsim (`htsim/sim/uec.cpp`,
/// `UecSrc::initNsccParams`, and its 64-byte header), scaled to the fabric where uet-htsim scales
/// its constants from a 100 Gb/s, 12 us reference network.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UetConfig {
    /// A switch trims a data packet to its header when the packet's egress queue would hold more
    /// than this many bytes of data (or the buffer would overflow). Default 200 KB.
    pub trim_threshold_bytes: u64,
    /// Wire bytes of every UET header: a data packet's (added to its payload), an ACK, a NACK
    /// and a trimmed packet (uet-htsim `UecSrc::_hdr_size`: 64).
    pub header_bytes: u32,
    /// NSCC's target queueing delay (`_target_Qdelay`); `None`: half the fabric's largest base
    /// RTT, as uet-htsim's 6 us is half its 12 us reference RTT.
    pub target_qdelay: Option<SimTime>,
    /// ECN marking thresholds of the data queue as fractions of `trim_threshold_bytes` (marking
    /// probability rises linearly from 0 at `kmin` to 1 at `kmax`). Default 0.2 and 0.8.
    pub ecn_kmin_frac: f64,
    /// Data-queue ECN `kmax` as a fraction of `trim_threshold_bytes` (default 0.8).
    pub ecn_kmax_frac: f64,
    /// Retransmission timeout: a flow with packets unacknowledged and no ACK for this long resends
    /// them (trimmed packets are NACKed, so only a packet lost on a link waits for it). Default
    /// 500 us.
    pub rto: SimTime,
    /// Largest window as a multiple of the flow's base bandwidth-delay product (uet-htsim
    /// `_maxwnd = 1.5 * _bdp`; the window also starts there).
    pub max_window_bdp: f64,
}

impl Default for UetConfig {
    fn default() -> Self {
        UetConfig {
            trim_threshold_bytes: 200_000,
            header_bytes: 64,
            target_qdelay: None,
            ecn_kmin_frac: 0.2,
            ecn_kmax_frac: 0.8,
            rto: SimTime::from_us(500),
            max_window_bdp: 1.5,
        }
    }
}

impl UetConfig {
    /// # Errors
    /// A message naming the field out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(40..=4096).contains(&self.header_bytes) {
            return Err(format!(
                "uet.header_bytes={} must be between 40 (Ethernet + IPv4 + UDP) and 4096",
                self.header_bytes
            ));
        }
        if self.trim_threshold_bytes == 0 {
            return Err("uet.trim_threshold must be above 0, e.g. 200KB".into());
        }
        if !(0.0 <= self.ecn_kmin_frac && self.ecn_kmin_frac < self.ecn_kmax_frac && self.ecn_kmax_frac <= 1.0) {
            return Err(format!(
                "uet.ecn_kmin={} and uet.ecn_kmax={} must satisfy 0 <= kmin < kmax <= 1 (fractions of uet.trim_threshold)",
                self.ecn_kmin_frac, self.ecn_kmax_frac
            ));
        }
        if self.rto.as_ps() == 0 {
            return Err("uet.rto must be above 0, e.g. 500us".into());
        }
        if let Some(t) = self.target_qdelay
            && t.as_ps() == 0
        {
            return Err("uet.target_qdelay must be above 0, e.g. 2us".into());
        }
        if !(self.max_window_bdp >= 0.1 && self.max_window_bdp.is_finite()) {
            return Err(format!("uet.max_window_bdp={} must be at least 0.1", self.max_window_bdp));
        }
        Ok(())
    }
}

/// Per-flow transport counters of a UET run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UetFlowStats {
    /// The flow's data packets trimmed by switches (each NACKed and sent again).
    pub trimmed: u32,
    /// Packets sent again (after a NACK or a timeout).
    pub retransmitted_packets: u32,
    /// Retransmission timeouts that fired.
    pub rtos: u32,
    /// Quick adapts (NSCC: the window set to what was acknowledged over the last RTT).
    pub quick_adapts: u32,
    /// Multiplicative decreases (NSCC).
    pub decreases: u32,
    /// Receiver: data packets that arrived after a packet sent later than them (out of order),
    /// each delivered at once.
    pub out_of_order: u32,
}

impl super::engine::PacketEngine {
    /// What flow `f`'s transport did to recover its losses (zero under RoCE, whose go-back-N
    /// retransmissions are in the engine's totals only).
    pub fn transport_counters(&self, f: u32) -> crate::TransportCounters {
        if let Some(t) = self.tcp_flow_stats(f) {
            return crate::TransportCounters {
                retransmitted_packets: t.retransmitted_segments,
                rtos: t.rtos,
                fast_retransmits: t.fast_retransmits,
                trimmed: 0,
                rtt_samples: t.rtt_samples,
                rtt_sum_ps: t.rtt_sum_ps,
            };
        }
        if let Some(u) = self.uet_flow_stats(f) {
            return crate::TransportCounters {
                retransmitted_packets: u.retransmitted_packets,
                rtos: u.rtos,
                fast_retransmits: 0,
                trimmed: u.trimmed,
                ..Default::default()
            };
        }
        crate::TransportCounters::default()
    }

    /// The NIC of host `h` of a window-based transport sends, if its port is idle: an ACK (or
    /// NACK) first, else `make_data`'s packet of the next flow [`Self::next_window_flow`] picks.
    pub(crate) fn window_host_send(
        &mut self,
        h: u32,
        from_last: bool,
        can_send: fn(&Self, usize) -> bool,
        make_data: fn(&mut Self, u32) -> u32,
    ) {
        let hi = h as usize;
        let link = self.nics[hi].link;
        if self.ports[link as usize].busy {
            return;
        }
        if let Some(p) = self.nics[hi].ackq.pop_front(&self.pkts) {
            self.transmit(link, p);
            return;
        }
        if let Some(f) = self.next_window_flow(hi, from_last, can_send) {
            let p = make_data(self, f);
            self.transmit(link, p);
        }
    }

    /// The next flow of host `hi`'s NIC that `can_send` admits, round robin over its flows
    /// starting at the one served last (`from_last`) or at the one after it; it becomes the one
    /// served last. When none can send and some are done, the done ones leave the list (only
    /// then, so the round-robin index stays meaningful).
    pub(crate) fn next_window_flow(&mut self, hi: usize, from_last: bool, can_send: fn(&Self, usize) -> bool) -> Option<u32> {
        let n = self.nics[hi].qps.len();
        if n == 0 {
            return None;
        }
        let last = self.nics[hi].rrlast as usize % n;
        let mut idx = if from_last { (last + n - 1) % n } else { last };
        let mut any_done = false;
        for _ in 0..n {
            idx = if idx + 1 == n { 0 } else { idx + 1 };
            let f = self.nics[hi].qps[idx] as usize;
            if can_send(self, f) {
                self.nics[hi].rrlast = idx as u32;
                return Some(f as u32);
            }
            any_done |= self.flows[f].done;
        }
        if any_done {
            let flows = &self.flows;
            self.nics[hi].qps.retain(|&f| !flows[f as usize].done);
        }
        None
    }
}
