//! Parameters of the packet engine. Names and defaults follow the ns-3 RDMA model of the HPCC
//! code base (`rdma-hw.cc`, `switch-mmu.cc`, `scratch/third.cc`); `ns3::Ns3Config` maps a
//! `config.txt` onto them one key at a time.

use llmsim_core::SimTime;

pub use super::cc::CcMode;
pub use super::lb::{LoadBalance, LoadBalanceKind};
pub use super::transport::{DropPolicy, TcpCc, TcpConfig, Transport, UetConfig};

/// ECN marking thresholds for ports of one bit rate (`KMIN_MAP`/`KMAX_MAP`/`PMAX_MAP`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EcnThresholds {
    /// Port bit rate these thresholds apply to, in bits per second.
    pub rate_bps: u64,
    /// `KMIN_MAP`: queue length where ECN marking starts, in bytes.
    pub kmin_bytes: u64,
    /// `KMAX_MAP`: queue length where marking probability reaches `pmax`, in bytes.
    pub kmax_bytes: u64,
    /// `PMAX_MAP`: marking probability at `kmax_bytes` (0 to 1).
    pub pmax: f64,
}

/// How switches pick among equal-cost next hops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketRouting {
    /// ns-3's tables: BFS shortest paths with next hops in ns-3's order, Murmur3 hash of
    /// `{sip, dip, sport | dport << 16}` seeded with the switch's file id.
    Ns3,
    /// The topology's routing rule with the flow's hash (llmsim topologies).
    Topology,
}

/// Every parameter of the packet engine. `Default` is ns-3's `run.py` at 100 Gbps with DCQCN.
#[derive(Clone, Debug)]
pub struct PacketConfig {
    /// The congestion control algorithm (`CC_MODE`).
    pub cc: CcMode,
    /// Payload bytes per data packet (`PACKET_PAYLOAD_SIZE`).
    pub mtu: u32,
    /// `L2_CHUNK_SIZE`: also ACK when the expected sequence crosses a multiple of it (0: off).
    pub chunk: u64,
    /// `L2_ACK_INTERVAL`: ACK every this many bytes received in order (1: every packet).
    pub ack_interval: u64,
    /// `L2_BACK_TO_ZERO`.
    pub back_to_zero: bool,
    /// Minimum gap between two NACKs for the same expected sequence (ns-3: 500 us).
    pub nack_interval: SimTime,
    /// `HAS_WIN`, `GLOBAL_T`, `VAR_WIN`.
    pub has_win: bool,
    /// `GLOBAL_T`: every flow uses the window and base RTT of the longest path.
    pub global_t: bool,
    /// `VAR_WIN`: the window scales with the flow's current rate.
    pub var_win: bool,
    /// `RATE_BOUND`: pace at the QP rate (else at line rate).
    pub rate_bound: bool,
    /// `ACK_HIGH_PRIO`: hosts' ACK queue obeys PAUSE of class 0 instead of the data class 3.
    /// In ns-3's `third.cc` this is all it does: the switches' `AckHighPrio` attribute is never
    /// set, so switches queue ACKs with the data (found by matching the TIMELY reference run).
    pub ack_high_prio: bool,
    /// Switches put ACK/NACK in the strict-priority queue 0 (ns-3's `SwitchNode::AckHighPrio`,
    /// off in the HPCC runs; not a `config.txt` key).
    pub switch_ack_high_prio: bool,
    /// `ENABLE_QCN`: ECN marking at switches.
    pub ecn: bool,
    /// ECN thresholds per port bit rate (`KMIN_MAP`, `KMAX_MAP`, `PMAX_MAP`).
    pub ecn_map: Vec<EcnThresholds>,
    /// Shared buffer per switch (`BUFFER_SIZE` MiB).
    pub buffer_bytes: u64,
    /// Per (ingress port, priority) reserve (ns-3: 4 KiB).
    pub reserve_bytes: u64,
    /// Resume when shared use + this is under the threshold (ns-3: 3 KiB).
    pub resume_offset_bytes: u64,
    /// PFC threshold shift at the NIC rate (alpha = 1/8); one less per doubling of port speed.
    pub pfc_shift: u32,
    /// Packet loss on every link (`ERROR_RATE_PER_LINK`), on top of the topology's per-link rates.
    pub error_rate_per_link: f64,
    /// Durations (serialization, pacing) are truncated to whole nanoseconds, as ns-3's
    /// `Seconds(double)` does at its default nanosecond resolution.
    pub ns_resolution: bool,
    /// How switches pick among equal-cost next hops.
    pub routing: PacketRouting,
    /// Seed of llmsim's random streams (ECN marks, link errors).
    pub seed: u64,
    /// Draw ECN marks as ns-3 does (a fresh MRG32k3a stream per mark and per PFC frame), with
    /// ns-3's stream counter at this value when the run starts (`None`: llmsim's own seeded
    /// stream). The value depends on the objects ns-3 built for the scenario.
    pub ns3_stream_base: Option<u64>,
    // DCQCN
    /// DCQCN `ALPHA_RESUME_INTERVAL`: period of the alpha update with no CNP.
    pub alpha_resume_interval: SimTime,
    /// DCQCN `RATE_DECREASE_INTERVAL`: least time between two rate cuts.
    pub rate_decrease_interval: SimTime,
    /// DCQCN `RP_TIMER`: period of the rate-increase timer.
    pub rp_timer: SimTime,
    /// DCQCN `CLAMP_TARGET_RATE`: reset the target rate to the current rate on each cut.
    pub clamp_target_rate: bool,
    /// DCQCN `EWMA_GAIN`: the gain g of the alpha moving average.
    pub ewma_gain: f64,
    /// DCQCN `FAST_RECOVERY_TIMES`: timer or byte-counter stages before additive increase.
    pub fast_recovery_times: u32,
    /// DCQCN: fraction of the rate kept at the first CNP (1: no cut).
    pub rate_on_first_cnp: f64,
    /// Rates in bit/s.
    pub rate_ai_bps: u64,
    /// DCQCN `RATE_HAI`: hyper additive increase step, in bits per second.
    pub rate_hai_bps: u64,
    /// `MIN_RATE`: lowest rate congestion control may set, in bits per second.
    pub min_rate_bps: u64,
    // HPCC
    /// HPCC `FAST_REACT`: react on every ACK, not once per RTT.
    pub fast_react: bool,
    /// HPCC `U_TARGET`: target link utilization (eta, default 0.95).
    pub u_target: f64,
    /// HPCC `MI_THRESH`: additive-increase stages before a multiplicative increase.
    pub mi_thresh: u32,
    /// HPCC `INT_MULTI`: unit of the INT byte counter (1: exact bytes).
    pub int_multi: u32,
    /// HPCC-PINT (`PINT_LOG_BASE`, `PINT_PROB`): the base utilization values are rounded to a
    /// power of (default 1.05), and the fraction of packets that carry one (default 1).
    pub pint_log_base: f64,
    /// HPCC-PINT `PINT_PROB`: fraction of packets that carry a value.
    pub pint_prob: f64,
    // TIMELY (ns-3 attribute defaults; not in config.txt)
    /// TIMELY alpha: EWMA weight of the RTT gradient.
    pub timely_alpha: f64,
    /// TIMELY beta: multiplicative-decrease factor.
    pub timely_beta: f64,
    /// TIMELY T_low: below this RTT the rate increases (used in whole ns).
    pub timely_t_low: SimTime,
    /// TIMELY T_high: above this RTT the rate decreases (used in whole ns).
    pub timely_t_high: SimTime,
    /// TIMELY minimum RTT, the gradient's normalizer (used in whole ns).
    pub timely_min_rtt: SimTime,
    // DCTCP
    /// DCTCP `DCTCP_RATE_AI`: additive increase step, in bits per second.
    pub dctcp_rate_ai_bps: u64,
    // Swift (SIGCOMM 2020, section 3.1-3.2; not in ns-3)
    /// Target delay added per hop of a flow's path (used in whole ns; default 1 us).
    pub swift_hop_scale: SimTime,
    /// Flow scaling: the target grows by up to `swift_fs_range` (used in whole ns; default 5 us)
    /// as the window shrinks from `swift_fs_max_cwnd` (default 100 packets) to
    /// `swift_fs_min_cwnd` (0.1).
    pub swift_fs_range: SimTime,
    /// Swift flow scaling: window (packets) where the target adds all of `swift_fs_range`.
    pub swift_fs_min_cwnd: f64,
    /// Swift flow scaling: window (packets) where the target adds nothing.
    pub swift_fs_max_cwnd: f64,
    /// Additive increase (packets per RTT; default 1), multiplicative-decrease gain (0.8) and
    /// largest decrease factor (0.5), smallest window in packets (0.001).
    pub swift_ai: f64,
    /// Swift multiplicative-decrease gain (default 0.8).
    pub swift_beta: f64,
    /// Swift largest decrease factor per cut (default 0.5).
    pub swift_max_mdf: f64,
    /// Swift smallest window, in packets (default 0.001).
    pub swift_min_cwnd: f64,
    /// How a flow's data packets spread over equal-cost paths (`lb.rs`). Default ECMP.
    pub load_balance: LoadBalance,
    /// Wormhole steady-state fast-forwarding and memoization (off by default here: the exact
    /// engine; `llmsim run` turns it on where it applies).
    pub wormhole: WormholeConfig,
    /// The hosts' transport (`transport/`): RoCE (default), TCP or UET.
    pub transport: Transport,
    /// TCP's parameters (used when `transport` is TCP). `mtu` is its MSS.
    pub tcp: TcpConfig,
    /// UET's parameters (used when `transport` is UET). `mtu` is its payload per packet.
    pub uet: UetConfig,
    /// Switches run PFC and never drop for want of buffer (lossless, default); off, they drop at
    /// a full buffer by `drop_policy` (lossy: TCP's fabric).
    pub pfc: bool,
    /// Where a lossy switch drops (`pfc` off). Default per-port tail drop.
    pub drop_policy: DropPolicy,
}

/// Knobs of Wormhole's steady-state fast-forwarding (NSDI'26 §5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WormholeConfig {
    /// Skip steady partitions (default off).
    pub fast_forward: bool,
    /// θ: a flow is steady when (max - min) / mean of its last `window` rate samples is below
    /// this (default 0.05).
    pub theta: f64,
    /// l: rate samples per steadiness test (default 8).
    pub window: usize,
    /// Rate samples per steadiness test of an uncontended partition, one where no two flows send
    /// data over the same link (each flow's rate is then only its own CC settling; under DCQCN
    /// each flow must also be at line rate). Default `window`, i.e. eq. 6 unchanged;
    /// `llmsim run` uses 3.
    pub uncontended_window: usize,
    /// Rate samples per steadiness test of a contended partition whose flows each run, over
    /// these samples, within θ of their max-min fair share of the partition's links (the
    /// contended counterpart of `uncontended_window`'s line rate: the flows have converged to
    /// the shares they keep, not passing through them). Default `window`, i.e. eq. 6 unchanged;
    /// `llmsim run` uses 4.
    pub fair_window: usize,
    /// Time between two rate samples of a flow (default 50 us: with `window` 8, a 400 us
    /// window, longer than DCQCN's fairness transients on 100G).
    pub sample_interval: SimTime,
    /// Memoize unsteady episodes (NSDI'26 §4): a partition whose flow-conflict graph was seen
    /// before skips its transient (default off; needs `fast_forward`).
    pub memo: bool,
}

impl Default for WormholeConfig {
    fn default() -> Self {
        WormholeConfig {
            fast_forward: false,
            theta: 0.05,
            window: 8,
            uncontended_window: 8,
            fair_window: 8,
            sample_interval: SimTime::from_us(50),
            memo: false,
        }
    }
}

impl WormholeConfig {
    /// Fast-forwarding on with these knobs: what `network.fast_forward` of a scenario and
    /// `llmsim ns3 run --fast-forward` build (their defaults differ, this does not choose them).
    /// Not checked: [`WormholeConfig::validate`] does that. `fair_window` is `window` (eq. 6
    /// for contended partitions); set it after.
    #[must_use]
    pub fn fast_forwarding(theta: f64, window: usize, uncontended_window: usize, sample_interval: SimTime, memo: bool) -> Self {
        WormholeConfig {
            fast_forward: true,
            theta,
            window,
            uncontended_window,
            fair_window: window,
            sample_interval,
            memo,
        }
    }

    /// # Errors
    /// A message naming the field out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.theta > 0.0 && self.theta < 1.0) {
            return Err(format!("wormhole.theta={} must be in (0, 1)", self.theta));
        }
        if self.window < 2 {
            return Err(format!("wormhole.window={} must be at least 2", self.window));
        }
        if !(2..=self.window).contains(&self.uncontended_window) {
            return Err(format!(
                "wormhole.uncontended_window={} must be between 2 and window={}",
                self.uncontended_window, self.window
            ));
        }
        if !(2..=self.window).contains(&self.fair_window) {
            return Err(format!(
                "wormhole.fair_window={} must be between 2 and window={}",
                self.fair_window, self.window
            ));
        }
        if self.memo && !self.fast_forward {
            return Err("wormhole.memo needs fast_forward on".into());
        }
        if self.sample_interval.as_ps() < 1_000_000 {
            return Err(format!(
                "wormhole.sample_interval={} must be at least 1us",
                self.sample_interval.as_ps()
            ));
        }
        Ok(())
    }
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            cc: CcMode::Dcqcn,
            mtu: 1000,
            chunk: 4000,
            ack_interval: 1,
            back_to_zero: false,
            nack_interval: SimTime::from_us(500),
            has_win: false,
            global_t: true,
            var_win: false,
            rate_bound: true,
            ack_high_prio: true,
            switch_ack_high_prio: false,
            ecn: true,
            ecn_map: vec![
                EcnThresholds {
                    rate_bps: 100_000_000_000,
                    kmin_bytes: 400_000,
                    kmax_bytes: 1_600_000,
                    pmax: 0.2,
                },
                EcnThresholds {
                    rate_bps: 400_000_000_000,
                    kmin_bytes: 1_600_000,
                    kmax_bytes: 6_400_000,
                    pmax: 0.2,
                },
            ],
            buffer_bytes: 32 << 20,
            reserve_bytes: 4 * 1024,
            resume_offset_bytes: 3 * 1024,
            pfc_shift: 3,
            error_rate_per_link: 0.0,
            ns_resolution: true,
            routing: PacketRouting::Topology,
            seed: 1,
            ns3_stream_base: None,
            alpha_resume_interval: SimTime::from_us(1),
            rate_decrease_interval: SimTime::from_us(4),
            rp_timer: SimTime::from_us(300),
            clamp_target_rate: false,
            ewma_gain: 1.0 / 256.0,
            fast_recovery_times: 1,
            rate_on_first_cnp: 1.0,
            rate_ai_bps: 20_000_000,
            rate_hai_bps: 200_000_000,
            min_rate_bps: 1_000_000_000,
            fast_react: true,
            u_target: 0.95,
            mi_thresh: 0,
            int_multi: 1,
            pint_log_base: 1.05,
            pint_prob: 1.0,
            timely_alpha: 0.875,
            timely_beta: 0.8,
            timely_t_low: SimTime::from_ns(50_000),
            timely_t_high: SimTime::from_ns(500_000),
            timely_min_rtt: SimTime::from_ns(20_000),
            dctcp_rate_ai_bps: 1_000_000_000,
            swift_hop_scale: SimTime::from_ns(1000),
            swift_fs_range: SimTime::from_ns(5000),
            swift_fs_min_cwnd: 0.1,
            swift_fs_max_cwnd: 100.0,
            swift_ai: 1.0,
            swift_beta: 0.8,
            swift_max_mdf: 0.5,
            swift_min_cwnd: 0.001,
            load_balance: LoadBalance::Ecmp,
            wormhole: WormholeConfig::default(),
            transport: Transport::Roce,
            tcp: TcpConfig::default(),
            uet: UetConfig::default(),
            pfc: true,
            drop_policy: DropPolicy::PerPortTailDrop,
        }
    }
}

impl PacketConfig {
    /// The `run.py` parameters ns-3's HPCC code base uses at 100 Gbps for `cc`.
    pub fn ns3_defaults(cc: CcMode) -> Self {
        let mut c = PacketConfig {
            cc,
            ..PacketConfig::default()
        };
        cc.apply_ns3_defaults(&mut c);
        c
    }

    /// Wire bytes of a data packet with `payload` bytes: L2 14 + IPv4 20 + UDP 8 + SeqTs 6 + INT
    /// (RoCE); L2 14 + IPv4 20 + TCP 20, no options (TCP); `uet.header_bytes` (UET).
    pub fn data_packet_bytes(&self, payload: u32) -> u32 {
        match self.transport {
            Transport::Tcp => payload + 54,
            Transport::Uet => payload.saturating_add(self.uet.header_bytes),
            _ => payload + 48 + self.cc.int_bytes(),
        }
    }

    /// Wire bytes of an ACK/NACK: 14 + 20 + 12 + INT, padded to 60 (RoCE); 14 + 20 + 20, padded
    /// to 60 (TCP); `uet.header_bytes` (UET).
    pub fn ack_packet_bytes(&self) -> u32 {
        let hdr = match self.transport {
            Transport::Tcp => 20,
            Transport::Uet => return self.uet.header_bytes,
            _ => 12 + self.cc.int_bytes(),
        };
        14 + 20 + hdr.max(60 - 14 - 20)
    }

    /// Settings that run but likely not as meant, each naming its consequence (the engine
    /// builds anyway): spraying or adaptive balancing under RoCE reorders packets, which its
    /// go-back-N receiver takes for losses.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.transport == Transport::Roce && matches!(self.load_balance, LoadBalance::Spray | LoadBalance::Adaptive) {
            w.push(format!(
                "load_balance {} with RoCE go-back-N: packets of one flow take different paths and arrive out of order; \
                 each gap triggers a NACK and the sender resends everything from the gap (retransmitted bytes, lower goodput)",
                self.load_balance.name()
            ));
        }
        if self.transport == Transport::Tcp && self.tcp.delayed_ack && self.tcp.delack_timeout >= self.tcp.min_rto {
            w.push(format!(
                "tcp.delack_timeout={} is not below tcp.min_rto={}: a held ACK outlasts the sender's timeout, \
                 so a flow whose last segment is held times out spuriously",
                self.tcp.delack_timeout, self.tcp.min_rto
            ));
        }
        if self.transport == Transport::Tcp && !matches!(self.load_balance, LoadBalance::Ecmp) {
            w.push(format!(
                "load_balance {} with TCP: reordered segments produce duplicate ACKs, and {} of them trigger a spurious fast retransmit that halves the window",
                self.load_balance.name(),
                self.tcp.dupack_threshold
            ));
        }
        w
    }

    /// Checks the transport against the fabric and the other knobs.
    ///
    /// # Errors
    /// A message naming the field and the fix.
    pub fn check_transport(&self) -> Result<(), String> {
        match self.transport {
            Transport::Uet => {
                if self.pfc {
                    return Err(
                        "network.transport=uet runs on a lossy fabric whose switches trim packets: set network.pfc: false \
                         (UET over a PFC fabric is not modelled)"
                            .into(),
                    );
                }
                if self.wormhole.fast_forward {
                    return Err("network.fast_forward does not model UET (its windows, trimming and timers): \
                         turn fast_forward off with transport uet"
                        .into());
                }
                if self.cc.uses_int() || self.cc.uses_send_ts() {
                    return Err(format!(
                        "network.cc={} is RoCE's rate control; UET runs its own window (NSCC): leave network.cc out with transport uet",
                        self.cc.name()
                    ));
                }
                self.uet.validate()?;
                if self.uet.trim_threshold_bytes < u64::from(self.mtu) + u64::from(self.uet.header_bytes) {
                    return Err(format!(
                        "uet.trim_threshold={} bytes is below one data packet ({} bytes): every packet would be trimmed",
                        self.uet.trim_threshold_bytes,
                        self.data_packet_bytes(self.mtu)
                    ));
                }
                Ok(())
            }
            Transport::Roce if !self.pfc => Err(
                "network.transport=roce needs PFC (network.pfc: true): this RoCE model has no retransmission timeout, \
                 so a dropped last packet would never be recovered; use transport tcp or uet on a lossy fabric"
                    .into(),
            ),
            Transport::Roce => Ok(()),
            Transport::Tcp => {
                if self.pfc {
                    return Err("network.transport=tcp runs on a lossy fabric: set network.pfc: false \
                         (TCP over a PFC fabric is not modelled)"
                        .into());
                }
                if self.wormhole.fast_forward {
                    return Err("network.fast_forward does not model TCP (its windows, losses and timers): \
                         turn fast_forward off with transport tcp"
                        .into());
                }
                if self.cc.uses_int() || self.cc.uses_send_ts() {
                    return Err(format!(
                        "network.cc={} is RoCE's rate control; TCP runs its own window (NewReno): leave network.cc out with transport tcp",
                        self.cc.name()
                    ));
                }
                self.tcp.validate()?;
                if self.tcp.max_window_bytes < u64::from(self.mtu) {
                    return Err(format!(
                        "tcp.max_window={} bytes is below one segment (mss {} bytes)",
                        self.tcp.max_window_bytes, self.mtu
                    ));
                }
                Ok(())
            }
        }
    }

    /// Thresholds for a rate the map lacks, scaled in proportion to the rate from the nearest
    /// listed one (as `run.py` scales them: 400 KB/1600 KB at 100G, 1600/6400 at 400G).
    pub fn ecn_scaled(&self, rate_bps: u64) -> Option<EcnThresholds> {
        let near = self
            .ecn_map
            .iter()
            .min_by_key(|e| (e.rate_bps as f64 / rate_bps as f64).ln().abs().to_bits())?;
        let k = rate_bps as f64 / near.rate_bps as f64;
        Some(EcnThresholds {
            rate_bps,
            kmin_bytes: (near.kmin_bytes as f64 * k) as u64,
            kmax_bytes: (near.kmax_bytes as f64 * k) as u64,
            pmax: near.pmax,
        })
    }

    /// ECN thresholds for a port of this bit rate.
    pub fn ecn_for(&self, rate_bps: u64) -> Option<EcnThresholds> {
        self.ecn_map.iter().copied().find(|e| e.rate_bps == rate_bps)
    }
}

/// Wire bytes of a PFC frame (L2 14 + IPv4 20 + pause header 9).
pub const PFC_FRAME_BYTES: u32 = 43;
