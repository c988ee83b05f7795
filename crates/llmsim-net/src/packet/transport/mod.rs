//! Transports: how a flow's sender turns bytes into packets and recovers losses, and what its
//! receiver acknowledges. The engine picks one per run (`PacketConfig::transport`) and branches
//! on it once per packet at the host (send, data receipt, ACK receipt); switches branch once per
//! packet on the fabric being lossless (PFC) or lossy (tail drop).
//!
//! - `roce`: RoCEv2 as the ns-3 RDMA model of the HPCC code base has it: rate pacing by
//!   congestion control (`cc/`), per-packet ACK, NACK and go-back-N, over a lossless fabric.
//!   Its code is the engine's own (`engine/nic.rs`), unchanged.
//! - `tcp` ([`tcp`]): TCP NewReno (RFC 5681, RFC 6582) with an RFC 6298 retransmission timer,
//!   over a lossy fabric.
//! - `uet`: not yet implemented (a configuration error says so).
//!
//! Adding a transport: a file here with its sender and receiver on `Engine`, a variant of
//! [`Transport`], and its three branches in `engine/nic.rs` (`host_send`, `host_receive`).

pub(crate) mod tcp;

use llmsim_core::SimTime;

/// The transport every flow of a run uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// RoCEv2 with go-back-N over a lossless (PFC) fabric: the ns-3 RDMA model. Default.
    #[default]
    Roce,
    /// TCP NewReno over a lossy fabric (switches drop at a full buffer, no PFC).
    Tcp,
    /// Ultra Ethernet Transport: not yet implemented.
    Uet,
}

impl Transport {
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
    pub fn name(self) -> &'static str {
        match self {
            DropPolicy::PerPortTailDrop => "per_port",
            DropPolicy::SharedTailDrop => "shared",
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
}
