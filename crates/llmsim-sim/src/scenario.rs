//! The scenario file: model, training, parallelism, cluster, network, collectives, compute,
//! output. YAML, strict (unknown keys are errors), every default documented here.
//!
//! ```yaml
//! name: gpt3-13b-128gpu
//! model: gpt3-13b                      # preset, path/to/config.json, or a map of fields
//! training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 512 }
//! parallel: { tp: 2, pp: 1 }           # dp derived from the GPU count
//! cluster:
//!   gpu: H100                          # or { name: MyGPU, base: H100, memory: 96GiB, ... }
//!   gpus: 128
//!   gpus_per_node: 8
//!   topology: { kind: rail-fat-tree, nic: { bandwidth: 400Gbps } }
//! network: { backend: flow }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llmsim_ccl::AlgoChoice;
use llmsim_ccl::expand::Granularity;
use llmsim_compute::{ComputeError, CustomGpu, GpuSpec};
use llmsim_core::{Bandwidth, Bytes, SimTime};
use llmsim_net::Network;
use llmsim_net::packet::CcMode;
use llmsim_topo::{Topology, TopologySpec};
use llmsim_workload::dlrm::DlrmConfig;
use llmsim_workload::formats::WorkloadSource;
use llmsim_workload::{ModelSpec, ParallelConfig, TrainingConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

use crate::yaml::YamlError;

use crate::SimError;

/// A whole scenario.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free-form name for the report. Default: the file name.
    #[serde(default)]
    pub name: String,
    /// The `--set KEY=VALUE` overrides applied on top of the file, in order (not a file key: the
    /// report's header shows them next to the scenario's name).
    #[serde(skip)]
    pub overrides: Vec<String>,
    /// The transformer to train (give this or `dlrm`).
    #[serde(default)]
    pub model: Option<ModelSpec>,
    /// A DLRM recommendation model instead of a transformer (MLP data parallel, embedding
    /// tables model parallel with all-to-all). `dlrm: {}` is MLPerf's DLRM.
    #[serde(default)]
    pub dlrm: Option<DlrmConfig>,
    /// A workload another tool wrote (Chakra traces, a SimAI file) instead of `model`/`dlrm`,
    /// e.g. `{ format: simai, path: gpt3-13b.txt }`. Paths are relative to the scenario file.
    // Left out when absent: sweeps key their stored runs by a hash of this serialization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadSource>,
    /// What one iteration computes: sequence length, batch sizes, dtype, recomputation.
    #[serde(default)]
    pub training: TrainingConfig,
    /// The parallelism plan: TP, PP (and virtual stages), DP, EP, CP, optimizer sharding, overlap.
    #[serde(default)]
    pub parallel: ParallelConfig,
    /// The machines: GPU type and count, servers, NVLink, the scale-out topology.
    pub cluster: ClusterSpec,
    /// The network model: backend (analytical, flow, packet), congestion control, fast-forwarding.
    #[serde(default)]
    pub network: NetworkSpec,
    /// NCCL overrides: algorithm, protocol, channels, PXN.
    #[serde(default)]
    pub collectives: CollectivesSpec,
    /// Compute calibration: efficiency table, op-time database, overlap slowdown.
    #[serde(default)]
    pub compute: ComputeSpec,
    /// What `--out` writes.
    #[serde(default)]
    pub output: OutputSpec,
    /// Failed or degraded links and switches, and straggler GPUs or servers, e.g.
    /// `[{links: {random: 4, seed: 7}, action: down}, {gpu: 3, slowdown: 1.3}]`. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<crate::faults::FaultSpec>,
    /// Several training jobs on this one cluster and network at once, each with its own
    /// `model`, `training` and `parallel` (then the scenario has none at the top level), e.g.
    /// `[{name: a, gpus: 64, placement: packed, model: gpt3-13b, parallel: {tp: 8}}, ...]`.
    /// The report gives each job's iteration time, its breakdown and its slowdown against
    /// running alone on the same GPUs. Default none (one job: the top-level `model`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobSpec>,
    /// Seed for ECMP hashing and anything random. Default 1.
    #[serde(default = "one")]
    pub seed: u64,
    /// Directory relative paths in the scenario are read from (the file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

fn one() -> u64 {
    1
}

/// One entry of `jobs:`: a training job with its own model, training and parallel settings,
/// placed on whole servers of the shared cluster.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// The job's name in the report (unique among the jobs).
    pub name: String,
    /// GPUs the job runs on: a positive multiple of `cluster.gpus_per_node` (jobs take whole
    /// servers); data parallelism is derived from it as for a one-job scenario's cluster size.
    pub gpus: u32,
    /// Which servers the job gets: packed | spread | {random: {seed: S}}. Default packed.
    #[serde(default)]
    #[schemars(with = "PlacementRepr")]
    pub placement: Placement,
    /// The transformer the job trains (as a scenario's `model`).
    pub model: ModelSpec,
    /// What one iteration computes (as a scenario's `training`).
    #[serde(default)]
    pub training: TrainingConfig,
    /// The job's parallelism plan (as a scenario's `parallel`; dp derived from `gpus`).
    #[serde(default)]
    pub parallel: ParallelConfig,
}

/// `jobs[i].placement`: which of the servers still free a job gets. Jobs are placed in list
/// order, each on whole servers; servers are numbered as the topology fills them (server `s`
/// holds hosts `s*gpus_per_node ..`), so consecutive servers share a leaf, then a pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "PlacementRepr", into = "PlacementRepr")]
pub enum Placement {
    /// The lowest-numbered free servers, consecutive where the free ones are: the job under as
    /// few leaves and pods as it fits in. Default.
    #[default]
    Packed,
    /// Servers evenly spaced over the free ones (every `free/k`-th): the job spread across the
    /// fabric's leaves and pods, so jobs placed after it interleave with it and share uplinks.
    Spread,
    /// A seeded shuffle of the free servers (`{random: {seed: 7}}`; `{random: {}}` uses the
    /// scenario's `seed`): what a busy scheduler hands out.
    Random(RandomPlacement),
}

/// `placement` as written: a word, or `{random: {...}}`.
#[derive(Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(untagged, expecting = "packed, spread or {random: {seed: S}}")]
#[schemars(rename = "Placement")]
enum PlacementRepr {
    /// packed | spread.
    Word(PlacementWord),
    /// `{random: {seed: S}}`.
    Random(RandomWrap),
}

/// packed | spread.
#[derive(Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum PlacementWord {
    /// The lowest-numbered free servers.
    Packed,
    /// Servers evenly spaced over the free ones.
    Spread,
}

/// `{random: {seed: S}}`: a seeded shuffle of the free servers.
#[derive(Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RandomWrap {
    /// The shuffle's settings.
    random: RandomPlacement,
}

impl From<PlacementRepr> for Placement {
    fn from(r: PlacementRepr) -> Self {
        match r {
            PlacementRepr::Word(PlacementWord::Packed) => Placement::Packed,
            PlacementRepr::Word(PlacementWord::Spread) => Placement::Spread,
            PlacementRepr::Random(w) => Placement::Random(w.random),
        }
    }
}

impl From<Placement> for PlacementRepr {
    fn from(p: Placement) -> Self {
        match p {
            Placement::Packed => PlacementRepr::Word(PlacementWord::Packed),
            Placement::Spread => PlacementRepr::Word(PlacementWord::Spread),
            Placement::Random(random) => PlacementRepr::Random(RandomWrap { random }),
        }
    }
}

/// `placement: {random: {...}}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomPlacement {
    /// The shuffle's seed. Default: the scenario's `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// `cluster:`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// GPU: a catalog name (V100, A100, A100-40GB, H100, H800, H20, H200, B200, GB200, B300, GB300,
    /// MI300X), or a custom GPU as a map, e.g. `{ name: H100-96, base: H100, memory: 96GiB }`
    /// (fields: [`llmsim_compute::CustomGpu`]). Default H100.
    #[serde(default = "default_gpu")]
    pub gpu: GpuChoice,
    /// Total GPUs. Give this or `nodes` (gpus = nodes x gpus_per_node).
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Servers; `gpus = nodes x gpus_per_node`. Give this or `gpus`.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// GPUs per server, sharing one NVLink/NVSwitch domain. Default 8.
    #[serde(default = "default_gpn")]
    pub gpus_per_node: u32,
    /// NVLink bandwidth per GPU per direction. Default: the GPU's catalog figure.
    #[serde(default)]
    pub nvlink_bandwidth: Option<Bandwidth>,
    /// GPU <-> NVSwitch one-way latency. Default 250ns.
    #[serde(default)]
    pub nvlink_latency: Option<SimTime>,
    /// The scale-out fabric (one NIC per GPU). Default `{ kind: rail-fat-tree }` with 400 Gbps NICs.
    #[serde(default = "default_topology")]
    pub topology: TopologySpec,
}

fn default_gpu() -> GpuChoice {
    GpuChoice::Catalog("H100".into())
}

/// `cluster.gpu`: a catalog name or a custom GPU.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum GpuChoice {
    /// A catalog name, with the decorations `llmsim_compute::gpu` accepts.
    Catalog(String),
    /// A GPU declared in the scenario.
    // Boxed: the declaration is several times the size of a name.
    Custom(#[schemars(with = "crate::schema::CustomGpuSchema")] Box<CustomGpu>),
}

impl GpuChoice {
    /// The spec: looked up in the catalog, or built (and interned) from the declaration.
    ///
    /// # Errors
    /// An unknown catalog name (listing the valid ones); a custom GPU with a missing or invalid
    /// field, named as `cluster.gpu.<field>`.
    pub fn resolve(&self) -> Result<&'static GpuSpec, SimError> {
        match self {
            GpuChoice::Catalog(name) => Ok(llmsim_compute::gpu(name)?),
            GpuChoice::Custom(c) => c.build().map_err(|e| match e {
                ComputeError::CustomGpu { field, message } => SimError::Scenario {
                    field: format!("cluster.gpu.{field}"),
                    message,
                },
                other => other.into(),
            }),
        }
    }
}

impl<'de> Deserialize<'de> for GpuChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = GpuChoice;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a catalog GPU name (e.g. H100) or a custom GPU map (e.g. { name: X, base: H100, memory: 96GiB })")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GpuChoice, E> {
                Ok(GpuChoice::Catalog(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<GpuChoice, A::Error> {
                // Through CustomGpu's own derive, so an unknown key is named in the error.
                CustomGpu::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(|c| GpuChoice::Custom(Box::new(c)))
            }
        }
        d.deserialize_any(V)
    }
}
fn default_gpn() -> u32 {
    8
}
fn default_topology() -> TopologySpec {
    serde_yaml_ng::from_str("kind: rail-fat-tree").expect("valid default topology")
}

/// Network backend: `network.backend` in a scenario, `--backend` of `llmsim run` and
/// `llmsim collective`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Alpha-beta per path, no contention.
    Analytical,
    /// Max-min fair sharing of links, event driven. Default.
    #[default]
    Flow,
    /// Packet-level RoCEv2 (NICs with congestion control, switches with shared buffer, PFC,
    /// ECN, ECMP), following the ns-3 RDMA model. The NVLink domain stays analytical.
    Packet,
}

impl std::fmt::Display for Backend {
    /// The word a scenario and `--backend` take.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Analytical => "analytical",
            Backend::Flow => "flow",
            Backend::Packet => "packet",
        })
    }
}

/// `network.load_balance`: the packet backend's policy, defined once in `llmsim-net`.
pub use llmsim_net::packet::LoadBalanceKind as LoadBalanceSpec;

/// `network.transport`: what the packet backend's hosts run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TransportSpec {
    /// RoCEv2: rate-paced QPs, ACK/NACK and go-back-N, over a lossless (PFC) fabric. Default.
    #[default]
    Roce,
    /// TCP NewReno (slow start, fast retransmit and recovery, RTO) over a lossy fabric:
    /// switches without PFC drop at a full buffer.
    Tcp,
    /// Ultra Ethernet-style transport: NSCC window control (delay + ECN), switches that trim a
    /// packet to its header instead of dropping it, per-packet ACK/NACK that takes packets in any
    /// order (combine with `load_balance: spray`); over a lossy fabric.
    Uet,
}

impl std::fmt::Display for TransportSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportSpec::Roce => "roce",
            TransportSpec::Tcp => "tcp",
            TransportSpec::Uet => "uet",
        })
    }
}

/// `network.drop_policy`: where a lossy switch (PFC off) drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DropPolicySpec {
    /// The buffer is divided evenly among the switch's ports; a packet that would overrun its
    /// egress port's share is dropped (the ASTRA-sim + ns-3 DLRM study's switch). Default.
    #[default]
    PerPort,
    /// One buffer for every port; a packet that would overrun it is dropped.
    Shared,
}

/// `network.tcp:` (with `transport: tcp`). Defaults follow the ASTRA-sim + ns-3 DLRM study
/// (RTO 50 ms, window 0.5 MB) and the RFCs elsewhere.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TcpSpec {
    /// Lower bound of the retransmission timeout (default 50ms, the study's RTO; RFC 6298 says 1s).
    pub min_rto: SimTime,
    /// Timeout before the first RTT sample (default: `min_rto`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_rto: Option<SimTime>,
    /// Payload bytes per segment (MSS; default 1460, a 1500-byte IP packet without options).
    pub mss: u32,
    /// Largest window, the receiver's (default 500KB, the study's "TCP window size 0.5MB").
    pub max_window: Bytes,
    /// Initial congestion window in segments (default 10, RFC 6928).
    pub initial_cwnd: u32,
    /// Delayed ACKs: one ACK per two in-order segments or after `delack_timeout` (default
    /// false: one ACK per segment).
    pub delayed_ack: bool,
    /// The delayed-ACK timer (default 200ms, ns-3's `DelAckTimeout`; keep it below `min_rto`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delack_timeout: Option<SimTime>,
    /// Congestion control: newreno (RFC 6582, default) | cubic (RFC 9438).
    pub cc: TcpCcSpec,
}

/// `network.tcp.cc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TcpCcSpec {
    /// NewReno: halve on a loss, one segment per RTT in congestion avoidance. Default.
    #[default]
    Newreno,
    /// CUBIC: decrease to 0.7 on a loss, cubic growth in time since it (Reno-friendly region).
    Cubic,
}

impl Default for TcpSpec {
    fn default() -> Self {
        TcpSpec {
            min_rto: SimTime::from_ms(50),
            initial_rto: None,
            mss: 1460,
            max_window: Bytes(500_000),
            initial_cwnd: 10,
            delayed_ack: false,
            delack_timeout: None,
            cc: TcpCcSpec::Newreno,
        }
    }
}

/// `network.uet:` (with `transport: uet`). Defaults follow uet-htsim (`htsim/sim/uec.cpp`):
/// 4096-byte payloads, 64-byte headers, a window starting at 1.5 BDP.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct UetSpec {
    /// Payload bytes per data packet (default 4096, uet-htsim's MSS).
    pub mtu: u32,
    /// Wire bytes of a header: every data packet's overhead, an ACK, a NACK, a trimmed packet
    /// (default 64).
    pub header_bytes: u32,
    /// A switch trims a data packet to its header when its egress queue would hold more data
    /// than this, or the buffer would overflow (default 200KB).
    pub trim_threshold: Bytes,
    /// ECN marking between these fractions of `trim_threshold` (default 0.2 and 0.8).
    pub ecn_kmin: f64,
    /// Above this fraction of `trim_threshold` every data packet is ECN-marked (default 0.8).
    pub ecn_kmax: f64,
    /// NSCC's target queueing delay (default: half the fabric's largest base RTT, as uet-htsim's
    /// 6us is half its 12us reference RTT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_qdelay: Option<SimTime>,
    /// Retransmission timeout for packets lost on a link (trimmed ones are NACKed; default 500us).
    pub rto: SimTime,
    /// Largest window, and the initial one, in multiples of the flow's base BDP (default 1.5).
    pub max_window_bdp: f64,
}

impl Default for UetSpec {
    fn default() -> Self {
        let d = llmsim_net::packet::UetConfig::default();
        UetSpec {
            mtu: 4096,
            header_bytes: d.header_bytes,
            trim_threshold: Bytes(d.trim_threshold_bytes),
            ecn_kmin: d.ecn_kmin_frac,
            ecn_kmax: d.ecn_kmax_frac,
            target_qdelay: d.target_qdelay,
            rto: d.rto,
            max_window_bdp: d.max_window_bdp,
        }
    }
}

/// `network.swift:` (with `cc: swift`). Defaults: the Swift paper's (Kumar et al., SIGCOMM
/// 2020, section 3.1-3.2), as the packet engine's `swift_*` settings.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SwiftSpec {
    /// Target delay added per hop of a flow's path (default 1us).
    pub hop_scale: SimTime,
    /// Flow scaling: the most the target grows as the window shrinks (default 5us).
    pub fs_range: SimTime,
    /// Window in packets where the target adds all of `fs_range` (default 0.1).
    pub fs_min_cwnd: f64,
    /// Window in packets where the target adds nothing (default 100).
    pub fs_max_cwnd: f64,
    /// Additive increase, packets per RTT (default 1).
    pub ai: f64,
    /// Multiplicative-decrease gain (default 0.8).
    pub beta: f64,
    /// Largest decrease per cut, a fraction of the window (default 0.5).
    pub max_mdf: f64,
    /// Smallest window in packets (default 0.001: one packet every 1000 RTTs).
    pub min_cwnd: f64,
}

impl Default for SwiftSpec {
    fn default() -> Self {
        let d = llmsim_net::packet::PacketConfig::ns3_defaults(CcMode::Swift);
        SwiftSpec {
            hop_scale: d.swift_hop_scale,
            fs_range: d.swift_fs_range,
            fs_min_cwnd: d.swift_fs_min_cwnd,
            fs_max_cwnd: d.swift_fs_max_cwnd,
            ai: d.swift_ai,
            beta: d.swift_beta,
            max_mdf: d.swift_max_mdf,
            min_cwnd: d.swift_min_cwnd,
        }
    }
}

impl SwiftSpec {
    /// Writes these parameters into `cfg`.
    ///
    /// # Errors
    /// A parameter out of range, named.
    fn apply(&self, cfg: &mut llmsim_net::packet::PacketConfig) -> Result<(), SimError> {
        let bad = |field: &str, message: String| SimError::Scenario {
            field: format!("network.swift.{field}"),
            message,
        };
        let positive = [
            ("fs_min_cwnd", self.fs_min_cwnd),
            ("fs_max_cwnd", self.fs_max_cwnd),
            ("ai", self.ai),
            ("min_cwnd", self.min_cwnd),
        ];
        for (f, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(f, format!("{v}: must be a positive number of packets")));
            }
        }
        if self.fs_min_cwnd >= self.fs_max_cwnd {
            return Err(bad(
                "fs_min_cwnd",
                format!("{} must be below fs_max_cwnd {}", self.fs_min_cwnd, self.fs_max_cwnd),
            ));
        }
        for (f, v) in [("beta", self.beta), ("max_mdf", self.max_mdf)] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(bad(f, format!("{v}: valid above 0 up to 1")));
            }
        }
        cfg.swift_hop_scale = self.hop_scale;
        cfg.swift_fs_range = self.fs_range;
        cfg.swift_fs_min_cwnd = self.fs_min_cwnd;
        cfg.swift_fs_max_cwnd = self.fs_max_cwnd;
        cfg.swift_ai = self.ai;
        cfg.swift_beta = self.beta;
        cfg.swift_max_mdf = self.max_mdf;
        cfg.swift_min_cwnd = self.min_cwnd;
        Ok(())
    }
}

/// `network:`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// analytical | flow | packet. Default flow.
    #[serde(default)]
    pub backend: Backend,
    /// Congestion control on the packet backend: one of the packet engine's registered
    /// algorithms (dcqcn | hpcc | timely | dctcp | swift | hpcc-pint), with the parameters of the HPCC ns-3
    /// experiments (`run.py`). Default dcqcn. Ignored by the other backends.
    #[serde(default)]
    pub cc: CcMode,
    /// How the packet backend spreads a flow's data packets over equal-cost paths: ecmp (one
    /// path per flow by its hash, as ns-3) | spray (per packet, round robin) | flowlet (a new
    /// path after an idle gap of `flowlet_gap`) | adaptive (per packet, the path whose first
    /// switch egress queue is shortest). Default ecmp. Reordered packets are repaired by RoCE
    /// go-back-N (costly: a warning says so) and taken in any order by `transport: uet`. Not
    /// with `fast_forward`. The flow backend spreads each flow's bytes evenly
    /// over all its equal-cost paths under spray and adaptive, and keeps one path per flow under
    /// ecmp and flowlet. Ignored by the analytical backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balance: Option<LoadBalanceSpec>,
    /// Idle gap that starts a new flowlet under `load_balance: flowlet` (default 100us).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flowlet_gap: Option<SimTime>,
    /// Wormhole steady-state fast-forwarding on the packet backend. Absent: on, with its
    /// defaults and memoization, wherever the run supports it (RoCE transport, ECMP, a CC other
    /// than swift, no faults;
    /// otherwise the exact engine, and the report says which ran);
    /// `off` (or `llmsim run --exact`): the exact engine; `{...}`: on with these knobs (`{}`
    /// for the defaults without memoization). Ignored by the other backends.
    #[serde(
        default = "implicit_fast_forward",
        deserialize_with = "fast_forward_setting",
        serialize_with = "serialize_fast_forward",
        skip_serializing_if = "is_implicit_fast_forward"
    )]
    #[schemars(with = "Option<FastForwardSetting>")]
    pub fast_forward: Option<FastForwardSpec>,
    /// The packet backend's transport: roce (go-back-N over a lossless PFC fabric) | tcp
    /// (NewReno over a lossy fabric) | uet (NSCC, trimming, out-of-order delivery over a lossy
    /// fabric). Default roce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportSpec>,
    /// PFC at the packet backend's switches. Default: on under roce (which needs it), off under
    /// tcp and uet (which need it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc: Option<bool>,
    /// Buffer of each switch of the packet backend (default 32MiB, the ns-3 HPCC runs').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_buffer: Option<Bytes>,
    /// RoCE ECN marking at the packet backend's switches (ns-3's `ENABLE_QCN` and its
    /// `KMIN_MAP`/`KMAX_MAP`/`PMAX_MAP`), e.g. `{kmin: 400KB, kmax: 1600KB, pmax: 0.2}` or
    /// `{enabled: false}`. Default: on, with the HPCC runs' thresholds per port rate (100 Gb/s:
    /// 400 KB, 1.6 MB, 0.2; 400 Gb/s: 1.6 MB, 6.4 MB, 0.2). With `transport: roce` only (UET has
    /// `uet.ecn_kmin`/`ecn_kmax`; TCP does not mark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<EcnSpec>,
    /// Where lossy switches (PFC off) drop: per_port (the buffer divided evenly among the ports)
    /// | shared. Default per_port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_policy: Option<DropPolicySpec>,
    /// TCP's parameters (with `transport: tcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSpec>,
    /// UET's parameters (with `transport: uet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uet: Option<UetSpec>,
    /// Swift's parameters (with `cc: swift`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swift: Option<SwiftSpec>,
    /// Folding of identical data-parallel replicas on the flow backend (simulate replica 0's
    /// programs; every replica's traffic still goes on the network): auto (where it gives the
    /// plain run's result: checked during the run, else every replica is simulated) |
    /// approximate (also where replicas' pipeline messages arrive at different times, e.g.
    /// after ECMP collisions; the report gives the spread) | off. Default auto.
    #[serde(default, skip_serializing_if = "FoldMode::is_auto")]
    pub fold: FoldMode,
    /// Traffic class per kind of traffic, e.g. `{pp: 1, ep: 1}` (absent kinds 0): a higher class
    /// is served strictly first on the flow backend (max-min filled class by class, as a switch
    /// with strict-priority queues); on the packet backend class `c` is priority group `1 + c`
    /// (its own queues and PFC pauses, served round robin with the others, as ns-3's switch
    /// does). Classes 0..=6. Default: absent, every transfer in one class. Ignored by the
    /// analytical backend (no contention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_classes: Option<TrafficClasses>,
}

/// `network.ecn`.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EcnSpec {
    /// Mark at all. Default true.
    pub enabled: bool,
    /// Egress queue length where marking starts, at every port rate. Default: per rate (above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kmin: Option<Bytes>,
    /// Egress queue length where the marking probability reaches `pmax` (every packet is marked
    /// above it), at every port rate. Default: per rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kmax: Option<Bytes>,
    /// Marking probability at `kmax`, 0 to 1. Default 0.2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmax: Option<f64>,
}

impl Default for EcnSpec {
    fn default() -> Self {
        EcnSpec {
            enabled: true,
            kmin: None,
            kmax: None,
            pmax: None,
        }
    }
}

/// `network.traffic_classes`: the class of each kind of traffic (0 the lowest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TrafficClasses {
    /// Tensor-parallel collectives that cross the network.
    pub tp: u8,
    /// Context-parallel collectives.
    pub cp: u8,
    /// Expert-parallel all-to-alls.
    pub ep: u8,
    /// Data-parallel collectives (gradients, parameters; expert-data-parallel and the embedding
    /// all-reduce too, and an imported workload's groups of no other kind).
    pub dp: u8,
    /// Pipeline sends.
    pub pp: u8,
}

impl TrafficClasses {
    /// The class of a transfer of `kind` (the flow table's kind: tp, cp, ep, dp, edp, embd, pp, pg).
    #[must_use]
    pub fn of(&self, kind: &str) -> u8 {
        match kind {
            "tp" => self.tp,
            "cp" => self.cp,
            "ep" => self.ep,
            "pp" => self.pp,
            _ => self.dp,
        }
    }

    /// # Errors
    /// A class above the packet backend's 6.
    pub fn check(&self) -> Result<(), SimError> {
        let max = llmsim_net::packet::MAX_TRAFFIC_CLASS;
        for (k, v) in [("tp", self.tp), ("cp", self.cp), ("ep", self.ep), ("dp", self.dp), ("pp", self.pp)] {
            if v > max {
                return Err(SimError::Scenario {
                    field: format!("network.traffic_classes.{k}"),
                    message: format!("class {v}: valid 0..={max} (0 the lowest)"),
                });
            }
        }
        Ok(())
    }
}

/// `network.fold`: how the flow backend folds data-parallel replicas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FoldMode {
    /// Fold where the result is the plain run's: always without pipeline parallelism; with it,
    /// as long as every replica's copy of each pipeline message arrives when replica 0's does
    /// (checked as the run goes; on the first that does not, the run restarts unfolded).
    #[default]
    Auto,
    /// Fold also when replicas' pipeline messages arrive at different times (e.g. after ECMP
    /// collisions): each message arrives with replica 0's copy, every replica's copy still
    /// loads the network. An approximation: within 3% of the plain run's iteration time on
    /// the random plans of `tests/fold.rs`; the report's `fold` gives the copies' spread.
    Approximate,
    /// Simulate every replica.
    Off,
}

impl FoldMode {
    fn is_auto(&self) -> bool {
        *self == FoldMode::Auto
    }
}

impl NetworkSpec {
    /// Settings of the packet backend that run, but likely not as meant, each naming its
    /// consequence (for the commands to print).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        if self.backend != Backend::Packet {
            return Vec::new();
        }
        match self.packet_config(1) {
            Ok(cfg) => cfg.warnings(),
            Err(_) => Vec::new(),
        }
    }

    /// `load_balance` and `flowlet_gap` as the engines take them.
    #[must_use]
    pub fn load_balance(&self) -> llmsim_net::packet::LoadBalance {
        self.load_balance
            .unwrap_or_default()
            .with_gap(self.flowlet_gap.unwrap_or(SimTime::from_us(100)))
    }

    /// The fast-forward knobs a packet run uses: the written ones, or the implicit default where
    /// it applies (RoCE over ECMP, any CC but Swift); `None`: the exact engine.
    pub fn effective_fast_forward(&self) -> Option<&FastForwardSpec> {
        let f = self.fast_forward.as_ref()?;
        // Swift's window is not in Wormhole's memo snapshot: its runs stay exact unless asked.
        let applies = self.transport.unwrap_or_default() == TransportSpec::Roce
            && matches!(self.load_balance, None | Some(LoadBalanceSpec::Ecmp))
            && self.cc != CcMode::Swift;
        (!f.implicit || applies).then_some(f)
    }

    /// The packet engine a run on this spec uses, for the report: `exact`, or Wormhole with
    /// its knobs and the error measured against the exact engine (θ bounds a frozen flow's
    /// rate, not the iteration: issue 29, bench/README.md).
    pub fn packet_engine(&self) -> String {
        match self.effective_fast_forward() {
            None if is_implicit_fast_forward(&self.fast_forward) => {
                "exact (Wormhole fast-forward, the default, does not apply to this transport, load balancing or congestion control)".into()
            }
            None => "exact (network.fast_forward: off)".into(),
            Some(f) => format!(
                "Wormhole fast-forward{} (theta {}: a flow frozen at its mean rate once its samples vary by less than that; not a bound on the iteration, measured within 3% of the exact engine on a 32-GPU DCQCN job with ECMP collisions over 12 seeds; {}network.fast_forward: off or --exact for the exact engine)",
                if f.implicit { ", the default" } else { "" },
                f.theta,
                if f.memo || f.memo_db.is_some() { "memoized episodes; " } else { "" },
            ),
        }
    }

    /// The packet engine's configuration this spec describes (not yet checked against a
    /// topology: `PacketNetwork::new` does that).
    ///
    /// # Errors
    /// Knobs out of range (`network.fast_forward`, `network.tcp`).
    pub fn packet_config(&self, seed: u64) -> Result<llmsim_net::packet::PacketConfig, SimError> {
        use llmsim_net::packet::{DropPolicy, PacketConfig, TcpConfig, Transport};
        let cc = self.cc;
        let mut cfg = PacketConfig {
            seed,
            ..PacketConfig::ns3_defaults(cc)
        };
        cfg.load_balance = self.load_balance();
        if let Some(ff) = self.effective_fast_forward() {
            let window = ff.window.unwrap_or(crate::default_window(cc));
            cfg.wormhole = llmsim_net::packet::WormholeConfig::fast_forwarding(
                ff.theta,
                window,
                ff.uncontended_window.unwrap_or(crate::UNCONTENDED_WINDOW.min(window)),
                SimTime::from_us(ff.sample_us),
                ff.memo || ff.memo_db.is_some(),
            );
            cfg.wormhole.fair_window = ff.fair_window.unwrap_or(crate::FAIR_WINDOW.min(window));
            cfg.wormhole.validate().map_err(|message| SimError::Scenario {
                field: "network.fast_forward".into(),
                message,
            })?;
        }
        let transport = self.transport.unwrap_or_default();
        cfg.transport = match transport {
            TransportSpec::Roce => Transport::Roce,
            TransportSpec::Tcp => Transport::Tcp,
            TransportSpec::Uet => Transport::Uet,
        };
        cfg.pfc = self.pfc.unwrap_or(transport == TransportSpec::Roce);
        if let Some(b) = self.switch_buffer {
            cfg.buffer_bytes = b.0;
        }
        cfg.drop_policy = match self.drop_policy.unwrap_or_default() {
            DropPolicySpec::PerPort => DropPolicy::PerPortTailDrop,
            DropPolicySpec::Shared => DropPolicy::SharedTailDrop,
        };
        if let Some(e) = &self.ecn {
            if transport != TransportSpec::Roce {
                return Err(SimError::Scenario {
                    field: "network.ecn".into(),
                    message: format!(
                        "RoCE's ECN given with transport {transport}; drop network.ecn (UET marks by uet.ecn_kmin/ecn_kmax; TCP does not mark)"
                    ),
                });
            }
            cfg.ecn = e.enabled;
            for t in &mut cfg.ecn_map {
                t.kmin_bytes = e.kmin.map_or(t.kmin_bytes, |b| b.0);
                t.kmax_bytes = e.kmax.map_or(t.kmax_bytes, |b| b.0);
                t.pmax = e.pmax.unwrap_or(t.pmax);
                if t.kmin_bytes > t.kmax_bytes || !(0.0..=1.0).contains(&t.pmax) {
                    return Err(SimError::Scenario {
                        field: "network.ecn".into(),
                        message: format!(
                            "kmin {} B, kmax {} B, pmax {} at {} Gb/s: need kmin <= kmax and pmax in 0..=1",
                            t.kmin_bytes,
                            t.kmax_bytes,
                            t.pmax,
                            t.rate_bps / 1_000_000_000
                        ),
                    });
                }
            }
        }
        if self.tcp.is_some() && transport != TransportSpec::Tcp {
            return Err(SimError::Scenario {
                field: "network.tcp".into(),
                message: format!("TCP parameters given with transport {transport}; set network.transport: tcp or drop network.tcp"),
            });
        }
        if let Some(sw) = &self.swift {
            if cc != CcMode::Swift {
                return Err(SimError::Scenario {
                    field: "network.swift".into(),
                    message: format!(
                        "Swift parameters given with cc {}; set network.cc: swift or drop network.swift",
                        cc.name()
                    ),
                });
            }
            sw.apply(&mut cfg)?;
        }
        if self.uet.is_some() && transport != TransportSpec::Uet {
            return Err(SimError::Scenario {
                field: "network.uet".into(),
                message: format!("UET parameters given with transport {transport}; set network.transport: uet or drop network.uet"),
            });
        }
        if transport == TransportSpec::Uet {
            let u = self.uet.clone().unwrap_or_default();
            if u.mtu == 0 || u64::from(u.mtu) + u64::from(u.header_bytes) > u64::from(u16::MAX) {
                return Err(SimError::Scenario {
                    field: "network.uet.mtu".into(),
                    message: format!(
                        "{} bytes: a packet of payload and header ({} bytes) must fit in 1..{} bytes, e.g. 4096",
                        u.mtu,
                        u.header_bytes,
                        u16::MAX
                    ),
                });
            }
            cfg.mtu = u.mtu;
            cfg.uet = llmsim_net::packet::UetConfig {
                trim_threshold_bytes: u.trim_threshold.0,
                header_bytes: u.header_bytes,
                target_qdelay: u.target_qdelay,
                ecn_kmin_frac: u.ecn_kmin,
                ecn_kmax_frac: u.ecn_kmax,
                rto: u.rto,
                max_window_bdp: u.max_window_bdp,
            };
            cfg.uet.validate().map_err(|message| SimError::Scenario {
                field: "network.uet".into(),
                message,
            })?;
        }
        if transport == TransportSpec::Tcp {
            let t = self.tcp.clone().unwrap_or_default();
            if t.mss == 0 {
                return Err(SimError::Scenario {
                    field: "network.tcp.mss".into(),
                    message: "must be at least 1 byte, e.g. 1460".into(),
                });
            }
            cfg.mtu = t.mss;
            // RoCE's ECN marking means nothing to NewReno.
            cfg.ecn = false;
            cfg.tcp = TcpConfig {
                min_rto: t.min_rto,
                initial_rto: t.initial_rto.unwrap_or(t.min_rto),
                max_window_bytes: t.max_window.0,
                initial_cwnd_segments: t.initial_cwnd,
                delayed_ack: t.delayed_ack,
                delack_timeout: t.delack_timeout.unwrap_or(TcpConfig::default().delack_timeout),
                cc: match t.cc {
                    TcpCcSpec::Newreno => llmsim_net::packet::TcpCc::NewReno,
                    TcpCcSpec::Cubic => llmsim_net::packet::TcpCc::Cubic,
                },
                ..TcpConfig::default()
            };
            cfg.tcp.validate().map_err(|message| SimError::Scenario {
                field: "network.tcp".into(),
                message,
            })?;
        }
        Ok(cfg)
    }

    /// The network this spec describes on `topo`: the one factory of every command (`llmsim
    /// run`, `llmsim collective`, sweeps, Python). `seed` drives the packet backend's ECMP hashing.
    ///
    /// # Errors
    /// Fast-forward knobs out of range (`network.fast_forward`), a packet configuration the
    /// topology cannot run (`network.backend`), or a memo database that cannot be read
    /// (`network.fast_forward.memo_db`).
    pub fn build(&self, topo: Arc<Topology>, seed: u64) -> Result<Box<dyn Network>, SimError> {
        if let Some(tc) = &self.traffic_classes {
            tc.check()?;
        }
        Ok(match self.backend {
            Backend::Analytical => Box::new(llmsim_net::analytical::AnalyticalNetwork::new(topo)),
            Backend::Flow => {
                let mut net = llmsim_net::flow::FlowNetwork::new(topo);
                net.set_load_balance(self.load_balance());
                Box::new(net)
            }
            Backend::Packet => {
                use llmsim_net::packet::PacketNetwork;
                let cfg = self.packet_config(seed)?;
                let ff = self.effective_fast_forward();
                let mut net = PacketNetwork::new(topo, cfg).map_err(|e| SimError::Scenario {
                    field: "network.backend".into(),
                    message: e.to_string(),
                })?;
                if let Some(path) = ff.and_then(|f| f.memo_db.as_ref()) {
                    net = net.with_memo_file(path.into()).map_err(|e| SimError::Scenario {
                        field: "network.fast_forward.memo_db".into(),
                        message: format!("{e}; give a path to an SQLite file this run may create or a memo database an earlier run saved"),
                    })?;
                }
                Box::new(net)
            }
        })
    }
}

/// `network.fast_forward:` as written: `off`, or the knobs.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum FastForwardSetting {
    /// `off`: the exact engine.
    Off(FastForwardOff),
    /// On with these knobs.
    On(FastForwardSpec),
}

/// The word `off`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum FastForwardOff {
    Off,
}

/// An absent `network.fast_forward`: on where the run supports it, with memoization.
fn implicit_fast_forward() -> Option<FastForwardSpec> {
    Some(FastForwardSpec {
        memo: true,
        implicit: true,
        ..FastForwardSpec::default()
    })
}

fn is_implicit_fast_forward(f: &Option<FastForwardSpec>) -> bool {
    f.as_ref().is_some_and(|f| f.implicit)
}

fn fast_forward_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<FastForwardSpec>, D::Error> {
    Ok(match Option::<FastForwardSetting>::deserialize(d)? {
        None | Some(FastForwardSetting::Off(_)) => None,
        Some(FastForwardSetting::On(f)) => Some(f),
    })
}

fn serialize_fast_forward<S: serde::Serializer>(f: &Option<FastForwardSpec>, s: S) -> Result<S::Ok, S::Error> {
    match f {
        None => s.serialize_str("off"),
        Some(f) => f.serialize(s),
    }
}

/// `network.fast_forward:` (Wormhole, NSDI'26): a flow is steady when its last `window` rate
/// samples, one every `sample_us`, fluctuate by less than `theta` of their mean.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FastForwardSpec {
    /// θ, relative (default 0.05).
    pub theta: f64,
    /// l, samples per test (default: 4 under HPCC, whose rate settles within a few round trips
    /// of INT feedback; 8 under the others: DCQCN's rate moves on its timers, and a 40 us window
    /// took its transients for steady state). See `llmsim_sim::default_window`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Samples per test of an uncontended partition, one where no two flows send data over the
    /// same link (a DP ring's flows, a PP step): each flow's rate is then only its own CC settling
    /// (default 3, or `window` if smaller; set it to `window` for eq. 6 everywhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncontended_window: Option<usize>,
    /// Samples per test of a contended partition whose flows each hold, over these samples,
    /// their max-min fair share of its links to within θ: they have converged (default 4, or
    /// `window` if smaller; set it to `window` for eq. 6 everywhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_window: Option<usize>,
    /// Microseconds between two rate samples (default 10: with l = 4, a 40 us window, several
    /// periods of HPCC's steady-state oscillation on a 400G rail, as NSDI'26 eq. 23-24 ask).
    pub sample_us: u64,
    /// Memoize unsteady episodes by their flow-conflict graph (default false).
    pub memo: bool,
    /// Memo database (SQLite) loaded before the run if it exists and saved after it, so the runs
    /// of a sweep share what they learned; implies `memo` (default none: in memory only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memo_db: Option<String>,
    /// Not written by the user: the default of an absent `network.fast_forward`, which falls back
    /// to the exact engine where fast-forwarding does not apply instead of refusing the run.
    #[serde(skip)]
    #[schemars(skip)]
    pub implicit: bool,
}

impl Default for FastForwardSpec {
    fn default() -> Self {
        FastForwardSpec {
            theta: 0.05,
            window: None,
            uncontended_window: None,
            fair_window: None,
            sample_us: 10,
            memo: false,
            memo_db: None,
            implicit: false,
        }
    }
}

/// `collectives:` — NCCL overrides.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectivesSpec {
    /// Like NCCL_ALGO. Default auto.
    #[serde(default)]
    pub algo: AlgoChoice,
    /// Like NCCL_PROTO: LL, LL128, Simple. Default: NCCL's choice.
    #[serde(default)]
    pub proto: Option<String>,
    /// Like NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS. Default: NCCL's choice.
    #[serde(default)]
    pub channels: Option<u32>,
    /// How a ring is simulated: per step, or as pipelined flows. Default pipelined.
    #[serde(default = "pipelined")]
    pub granularity: Granularity,
    /// PXN (NCCL_PXN_DISABLE=0). Default true.
    #[serde(default = "yes")]
    pub pxn: bool,
    /// Pieces every collective that crosses servers is split into, as ASTRA-sim's "number of
    /// chunks" (the ASTRA-sim + ns-3 DLRM study's experiment 4: 1024 flat, 128 hierarchical):
    /// the chunks of a tree or hierarchical all-reduce, the loops of a ring step DAG (a
    /// pipelined ring, the default granularity, is a fluid model and ignores it), and each
    /// all-to-all pair's transfers. 1..=65536. Default: NCCL's chunk size decides (at most 8
    /// chunks), one transfer per all-to-all pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u32>,
    /// Pieces of each all-to-all pair, where they should differ from `chunks` (the study's
    /// 1,024 chunks would split a DLRM all-to-all's 512-byte pairs into millions of transfers).
    /// 1..=65536. Default: `chunks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_to_all_chunks: Option<u32>,
    /// How many pieces a rank may work on at once (ASTRA-sim's "chunk parallelism", the study's
    /// 64 or 128): a tree's piece holds one of the rank's slots (per tree) from its reduce send
    /// until its result arrives at the rank; an all-to-all's until the rank's sends of it are
    /// done. 1..=65536. Default: a tree's pieces one after another on each edge (NCCL's
    /// pipeline), an all-to-all's all at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks_in_flight: Option<u32>,
    /// Time each piece takes from the NIC to the GPU and back, a proxy for memory copies (the
    /// study's "injection latency", its experiment 2: 10ns to 100us): added before every
    /// cross-server send of a piece, the first one and each one that waits on received data.
    /// Default 0.
    #[serde(default, skip_serializing_if = "crate::faults::is_zero")]
    pub injection_latency: SimTime,
    /// Bytes of a pipeline message that a blocking send (on the compute stream:
    /// `parallel.overlap_p2p_comm: false`, or a non-interleaved schedule) moves before the
    /// receiving rank's kernel runs; the rest waits for the receiver to reach the batch of
    /// sends and receives holding its receive (NCCL's rendezvous: the sender fills the peer's
    /// FIFO of `NCCL_STEPS` chunks per channel, then waits for the receiving kernel to drain
    /// it). Default 2MiB: 2 channels per network peer (`NCCL_NCHANNELS_PER_NET_PEER`, NCCL up to
    /// 2.28) x 8 steps x 128 KiB (`NCCL_P2P_NET_CHUNKSIZE`), for a pipeline group that spans
    /// servers; one inside a server (one NVLink domain) has NVLink-sized FIFOs and never waits.
    /// A size above every message turns the wait off.
    #[serde(default = "default_p2p_eager")]
    pub p2p_eager: Bytes,
}

fn default_p2p_eager() -> Bytes {
    Bytes(crate::engine::P2P_EAGER_BYTES)
}

fn yes() -> bool {
    true
}

fn pipelined() -> Granularity {
    Granularity::Pipelined
}

// Written out (not derived) so an absent `collectives:` section gets the same defaults as an
// empty one: PXN on.
impl Default for CollectivesSpec {
    fn default() -> Self {
        CollectivesSpec {
            algo: AlgoChoice::Auto,
            proto: None,
            channels: None,
            granularity: pipelined(),
            pxn: true,
            chunks: None,
            all_to_all_chunks: None,
            chunks_in_flight: None,
            injection_latency: SimTime::ZERO,
            p2p_eager: default_p2p_eager(),
        }
    }
}

/// `compute:` — calibration data.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputeSpec {
    /// Efficiency table CSV (gpu,class,compute_eff,memory_eff,...) replacing the shipped one.
    #[serde(default)]
    pub efficiency: Option<PathBuf>,
    /// Op-time database CSV (gpu,op,shape,time_us); its entries take precedence over the roofline.
    #[serde(default)]
    pub database: Option<PathBuf>,
    /// How many times slower compute runs while communication overlaps it (Multiverse §4.1):
    /// compute while the unit's DP communication is in flight (only that part of a node: a
    /// layer's segment pays for the milliseconds an FSDP all-gather overlaps it, not its whole
    /// length), the same while an expert-parallel all-to-all that `parallel.moe_a2a_overlap`
    /// runs beside the other micro-batch's compute is in flight, and the overlapped part of a
    /// GEMM beside its TP collective
    /// (`parallel.tp_comm_overlap`). Default 1.189: the average
    /// compute slowdown under overlapped communication measured for GPT and Llama training on
    /// A100 and H100 (18.9%; "Characterizing Compute-Communication Overlap in GPU-Accelerated
    /// Distributed Deep Learning", arXiv 2507.03114). 1.0 turns it off.
    #[serde(default = "default_overlap_slowdown")]
    pub overlap_slowdown: f64,
    /// Host (CPU) dispatch of kernels: the framework thread that issues each rank's kernels in
    /// program order, so the GPU waits when its kernels are shorter than their issue cost, and
    /// after each host synchronization. On by default with the costs of [`HostSpec`] (an eager
    /// PyTorch run without CUDA graphs); `host: null` turns it off (kernels issued for free, as
    /// under full-iteration CUDA graphs; imported traces always run so, their segments being
    /// recorded durations with no op list, and DLRM runs, as in the ASTRA-sim paper). An MoE
    /// layer's router and dispatcher carry their host work (`moe_ops_fwd`, `moe_ops_bwd`: measured
    /// on one path, scaled per dispatcher path by counted ops; llmsim has about 15 ops for the
    /// layer), and `cuda_graph_scope` replays captured modules as graphs. The per-op cost is the
    /// one measured on the x86 host of a lent H200 machine (20.8 us); the older citation
    /// (5-7 us, pytorch/pytorch issue #41383, 2020) is 3x lower, so host-bound predictions carry
    /// that uncertainty. Dense validation rows are GPU-bound either way; MoE rows move by up to
    /// 46% (`bench/validation.md`).
    #[serde(default = "default_host")]
    pub host: Option<HostSpec>,
    /// Board-to-board spread of compute speed: a synchronous job's compute-bound kernels run at
    /// the pace of its slowest GPU, in expectation over the boards it gets (see
    /// [`GpuVariabilitySpec`]). On by default; `gpu_variability: {sigma: 0}` turns it off.
    #[serde(default)]
    pub gpu_variability: GpuVariabilitySpec,
}

/// `compute.gpu_variability`: how much compute-bound kernel time varies between boards of one
/// GPU model, and where fleets screen them (`llmsim_compute::variability`). A job of N GPUs
/// runs its compute-bound kernels `1 + sigma * E[max of N]` times longer than the calibrated
/// (median) board, the normal spread truncated at `screen`: 1.023 at 8 GPUs, 1.047 at 1,024,
/// 1.050 at 16,384 with the defaults. Memory-bound kernels are unchanged.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuVariabilitySpec {
    /// Standard deviation of a board's compute-bound kernel time over the fleet median, as a
    /// fraction. Default 0.016: V100 SGEMM on 392 boards at their power cap (Sinha et al., SC
    /// 2022, per-GPU data of TACC Longhorn); no per-board distribution of newer GPUs is
    /// published. 0 turns the effect off; at most 0.5.
    #[serde(default = "default_variability_sigma")]
    pub sigma: f64,
    /// Boards slower than the median by more than this fraction are screened out of the fleet.
    /// Default 0.05: SuperBench's GEMM diagnosis rule (ATC 2024). Above 0, at most 1.
    #[serde(default = "default_variability_screen")]
    pub screen: f64,
}

impl Default for GpuVariabilitySpec {
    fn default() -> Self {
        GpuVariabilitySpec {
            sigma: default_variability_sigma(),
            screen: default_variability_screen(),
        }
    }
}

fn default_variability_sigma() -> f64 {
    llmsim_compute::variability::DEFAULT_SIGMA
}

fn default_variability_screen() -> f64 {
    llmsim_compute::variability::DEFAULT_SCREEN
}

/// `compute.host`: what issuing work costs the host thread of one rank (see
/// [`crate::engine::HostDispatch`]). Every cost is host time in microseconds. The defaults are
/// measurements of PyTorch eager mode (with Transformer Engine, for the linear layers) on x86
/// hosts of H100/H200 systems (2024-26 software); a slower host (e.g. Grace, about 2.5x on plain
/// PyTorch ops per TransformerEngine issue #2053) or CUDA graphs change them.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Per compute op of the workload that is not a GEMM (one row of ops.csv: a norm, an
    /// activation, attention, a cast, the router, ...): PyTorch's dispatch of it and its kernel
    /// launch. Default 20.8: an autograd-recorded eager op (torch 2.11, CUDA 13) measured on the
    /// Sapphire Rapids host of a lent H200 machine (`bench/gpu_moe_layer.py`,
    /// `data/op-db/h200/moe-layer.csv`; a bare op 17.8 us). A PyTorch maintainer's 2020 figures
    /// were 5-7 us (pytorch/pytorch issue #41383).
    #[serde(default = "default_op_us")]
    pub op_us: f64,
    /// Per linear-layer module call: charged to each GEMM's forward op and once to its backward
    /// (on the dgrad op; Transformer Engine's backward launches dgrad and wgrad from one call).
    /// Default 115: Megatron-Core's `TEColumnParallelLinear` forward, 140 us before and 115 us
    /// after TransformerEngine PR #1191 (NVIDIA, 2024).
    #[serde(default = "default_linear_us")]
    pub linear_us: f64,
    /// Per expert GEMM of a grouped expert GEMM, added to `linear_us`: Transformer Engine's
    /// `GroupedLinear` issues one cuBLAS GEMM per local expert from a host loop, in forward,
    /// dgrad and wgrad. Default 16: TE 2.2's grouped GEMMs on H100 take 16-25 us per expert GEMM
    /// whose kernel runs 12-22 us (TransformerEngine PR #2045; `bench/kernels.md`).
    #[serde(default = "default_expert_gemm_us")]
    pub expert_gemm_us: f64,
    /// Per communication call on the compute stream (a TP/CP/EP collective, a pipeline
    /// receive). Default 20.8, as `op_us`.
    #[serde(default = "default_op_us")]
    pub call_us: f64,
    /// The MoE all-to-all token dispatcher waits for the GPU before each forward dispatch (it
    /// reads the per-expert token counts on the host: Megatron-Core's `MoEAlltoAllTokenDispatcher`
    /// in dropless training, `token_dispatcher.py`, core_v0.9 to HEAD). Default true.
    #[serde(default = "default_true")]
    pub moe_sync: bool,
    /// The host waits for the GPU where the framework makes a blocking host-to-device copy
    /// just before an op (the workload's synchronizing ops, `OpSpec::host_sync`, each the first op of its segment in ops.csv): Megatron-Core's GPT-OSS activation
    /// (`activation_func_clamp_value`, `model.swiglu_limit`) builds a scalar with
    /// `torch.tensor(linear_offset, device=...)` at each call, and PyTorch's blocking copy
    /// synchronizes the stream (ATen `copy_kernel_cuda`: `memcpy_and_sync`); and Megatron's NaN
    /// check of each gradient bucket (`parallel.check_for_nan_in_grad`), whose norm the host
    /// reads (timed here as a wait before the norm, not after it). Default true.
    #[serde(default = "default_true")]
    pub blocking_copies: bool,
    /// Host work of one MoE layer's router, auxiliary loss, dispatcher preprocessing, token
    /// permutation and combine in the forward pass, in eager ops (each `op_us`), charged to the
    /// router op in place of its one op; the expert GEMMs keep `linear_us` + `expert_gemm_us`.
    /// Default: derived from the plan ([`crate::host::moe_host_ops`]). Measured: Megatron-Core
    /// 0.15's MoE layer (all-to-all dispatcher at EP 1, dropless, BF16, no fusions) issues 62
    /// kernels forward and its host takes 204 times a bare autograd-recorded op of the same CPU,
    /// 13 of them the stand-in expert GEMMs and activation: 190 (`bench/gpu_moe_layer.py`,
    /// `data/op-db/h200/moe-layer.csv`, an H200 host, 2026-11-27). Other paths (the all-to-all
    /// dispatcher at EP > 1 with Transformer Engine's fused router and permutation, the flex
    /// dispatcher, CUDA graphs over the router and preprocessing) scale it by their Python-level
    /// op counts per region, counted from Megatron-Core's code (`bench/kernels.md`, "MoE host
    /// work by dispatcher"). NeMo Automodel's MoE (`parallel.moe_experts: automodel`) keeps the
    /// measured 190 (not counted). A number here overrides the derivation.
    #[serde(default)]
    pub moe_ops_fwd: Option<f64>,
    /// As `moe_ops_fwd`, for the backward pass, charged to the un-permutation's backward (the
    /// layer's first MoE op in backward order). Measured: 190 (73 kernels, 235 ops measured, 212
    /// on a second instance, 45 of them the stand-in expert GEMMs' gradients); derived by plan
    /// as `moe_ops_fwd` is.
    #[serde(default)]
    pub moe_ops_bwd: Option<f64>,
    /// Modules captured in Transformer Engine CUDA graphs, replayed each micro-batch (Megatron-Core
    /// `--cuda-graph-impl transformer_engine --cuda-graph-scope ...`): `attn` (the input norm,
    /// attention and its residual add, the pre-MLP norm), `moe_router` (the router and its
    /// auxiliary loss), `moe_preprocess` (the dispatcher's preprocessing; needs `moe_router`, as
    /// Megatron-Core requires), `mamba` (a Mamba layer's compute). A captured op costs the host
    /// nothing; each run of captured ops in a pass costs one replay (`GRAPH_REPLAY_OPS` ops). The
    /// token dispatch, the experts and the combine stay eager. Full-iteration graphs are
    /// `compute.host: null`. Default: none.
    #[serde(default)]
    pub cuda_graph_scope: Vec<GraphScope>,
}

impl HostSpec {
    /// Refuses a graph scope Megatron-Core refuses: `moe_preprocess` without `moe_router`
    /// (checked when a scenario is loaded, and again when the host model is built).
    ///
    /// # Errors
    /// [`SimError::Scenario`] naming `compute.host.cuda_graph_scope`.
    pub fn check_scope(&self) -> Result<(), SimError> {
        let has = |g: GraphScope| self.cuda_graph_scope.contains(&g);
        if has(GraphScope::MoePreprocess) && !has(GraphScope::MoeRouter) {
            return Err(SimError::Scenario {
                field: "compute.host.cuda_graph_scope".into(),
                message: "moe_preprocess needs moe_router in the same scope (Megatron-Core refuses it alone); add moe_router".into(),
            });
        }
        Ok(())
    }
}

/// A module Megatron-Core captures in a CUDA graph (`--cuda-graph-scope`), see
/// [`HostSpec::cuda_graph_scope`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GraphScope {
    /// The attention block: input norm, attention, its residual add and the pre-MLP norm.
    Attn,
    /// The MoE router, its score function, top-k and auxiliary loss.
    MoeRouter,
    /// The token dispatcher's preprocessing (token counts, routing metadata).
    MoePreprocess,
    /// A Mamba layer (its norm, the mixer and the residual add; hybrid models such as
    /// Nemotron-H).
    Mamba,
}

impl GraphScope {
    /// Megatron-Core's name of the scope.
    pub fn as_str(self) -> &'static str {
        match self {
            GraphScope::Attn => "attn",
            GraphScope::MoeRouter => "moe_router",
            GraphScope::MoePreprocess => "moe_preprocess",
            GraphScope::Mamba => "mamba",
        }
    }
}

impl Default for HostSpec {
    fn default() -> Self {
        HostSpec {
            op_us: default_op_us(),
            linear_us: default_linear_us(),
            expert_gemm_us: default_expert_gemm_us(),
            call_us: default_op_us(),
            moe_sync: true,
            blocking_copies: true,
            moe_ops_fwd: None,
            moe_ops_bwd: None,
            cuda_graph_scope: Vec::new(),
        }
    }
}

fn default_op_us() -> f64 {
    20.8
}

fn default_linear_us() -> f64 {
    115.0
}

fn default_expert_gemm_us() -> f64 {
    16.0
}

fn default_host() -> Option<HostSpec> {
    Some(HostSpec::default())
}

fn default_true() -> bool {
    true
}

/// See [`ComputeSpec::overlap_slowdown`].
pub const DEFAULT_OVERLAP_SLOWDOWN: f64 = 1.189;

fn default_overlap_slowdown() -> f64 {
    DEFAULT_OVERLAP_SLOWDOWN
}

impl Default for ComputeSpec {
    fn default() -> Self {
        ComputeSpec {
            efficiency: None,
            database: None,
            overlap_slowdown: DEFAULT_OVERLAP_SLOWDOWN,
            host: default_host(),
            gpu_variability: GpuVariabilitySpec::default(),
        }
    }
}

/// Which ranks get trace tracks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TraceRanks {
    /// The first data-parallel replica: one unit per pipeline stage. Default.
    #[default]
    FirstReplica,
    /// Every unit (large files on large clusters).
    All,
}

/// `output:` — what `--out` writes.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// trace.json (Perfetto). Default true.
    #[serde(default = "yes")]
    pub trace: bool,
    /// Which ranks get trace tracks. Default first-replica.
    #[serde(default)]
    pub trace_ranks: TraceRanks,
    /// flows.csv, one row per network transfer. Default true.
    #[serde(default = "yes")]
    pub flows: bool,
    /// ops.csv, per stage, segment and op. Default true.
    #[serde(default = "yes")]
    pub ops: bool,
}

impl Default for OutputSpec {
    fn default() -> Self {
        OutputSpec {
            trace: true,
            trace_ranks: TraceRanks::FirstReplica,
            flows: true,
            ops: true,
        }
    }
}

/// Sections of the scenario and their keys, for error messages.
const SECTIONS: &str =
    "name, model, dlrm, workload, training, parallel, cluster, network, collectives, compute, output, faults, jobs, seed";

impl Scenario {
    /// The network a run builds: `network:` as written, except that the implicit Wormhole
    /// default gives way to the exact engine when the scenario has faults (a link failing in
    /// the middle of a steady state is not modelled by fast-forwarding).
    pub fn run_network(&self) -> std::borrow::Cow<'_, NetworkSpec> {
        if self.faults_stop_fast_forward() {
            let mut n = self.network.clone();
            n.fast_forward = None;
            std::borrow::Cow::Owned(n)
        } else {
            std::borrow::Cow::Borrowed(&self.network)
        }
    }

    /// The implicit Wormhole default gives way to the exact engine: the scenario makes a link
    /// lossy (random drops that frozen flows would not see). Links failing, coming back or
    /// changing bandwidth interrupt Wormhole's steady state, which it models (every frozen
    /// partition resumes at the change).
    fn faults_stop_fast_forward(&self) -> bool {
        crate::faults::lossy(&self.faults) && is_implicit_fast_forward(&self.network.fast_forward)
    }

    /// Which packet engine a run of this scenario uses (for the report); `None` off the packet
    /// backend.
    pub fn packet_engine(&self) -> Option<String> {
        if self.network.backend != Backend::Packet {
            return None;
        }
        if self.faults_stop_fast_forward() {
            return Some("exact (Wormhole fast-forward, the default, does not model lossy links)".into());
        }
        Some(self.network.packet_engine())
    }

    /// Reads a scenario file and applies `--set key.path=value` overrides.
    ///
    /// # Errors
    /// An unreadable file, YAML errors, unknown keys (naming the section and the valid keys),
    /// a malformed override.
    pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Scenario {
            field: path.display().to_string(),
            message: e.to_string(),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut s = Self::from_yaml(&text, sets, &base)?;
        if s.name.is_empty() {
            s.name = path.file_stem().and_then(|x| x.to_str()).unwrap_or("scenario").to_string();
        }
        Ok(s)
    }

    /// Parses scenario YAML text; relative paths resolve against `base_dir`.
    ///
    /// # Errors
    /// As [`Scenario::load`].
    pub fn from_yaml(text: &str, sets: &[String], base_dir: &Path) -> Result<Scenario, SimError> {
        let s = Self::from_yaml_any(text, sets, base_dir)?;
        if !s.jobs.is_empty() {
            return Ok(s);
        }
        if s.workload.is_some() {
            if s.model.is_some() || s.dlrm.is_some() {
                return Err(SimError::Scenario {
                    field: "workload".into(),
                    message: "a workload file brings its own model; remove `model`/`dlrm` (or `workload`)".into(),
                });
            }
            return Ok(s);
        }
        if s.model.is_some() == s.dlrm.is_some() {
            return Err(SimError::Scenario {
                field: "model".into(),
                message: "give exactly one of `model` (a transformer) and `dlrm`".into(),
            });
        }
        Ok(s)
    }

    /// Loads a cluster description for an imported workload: a scenario without `model`/`dlrm`
    /// (its other sections apply), or an ASTRA-sim network YAML (see [`crate::astra`]).
    ///
    /// # Errors
    /// As [`Scenario::load`]; a `model` or `dlrm` section.
    pub fn load_cluster(path: &Path, sets: &[String]) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Scenario {
            field: path.display().to_string(),
            message: e.to_string(),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut s = Self::cluster_from_yaml(&text, sets, &base)?;
        if s.name.is_empty() {
            s.name = path.file_stem().and_then(|x| x.to_str()).unwrap_or("cluster").to_string();
        }
        Ok(s)
    }

    /// [`Scenario::load_cluster`] from text.
    ///
    /// # Errors
    /// As [`Scenario::load_cluster`].
    pub fn cluster_from_yaml(text: &str, sets: &[String], base_dir: &Path) -> Result<Scenario, SimError> {
        let text = match crate::astra::to_scenario_yaml(text)? {
            Some(t) => t,
            None => text.to_string(),
        };
        let s = Self::from_yaml_any(&text, sets, base_dir)?;
        if s.model.is_some() || s.dlrm.is_some() {
            return Err(SimError::Scenario {
                field: "model".into(),
                message: "an imported workload brings its own model; remove `model`/`dlrm` (a cluster file needs `cluster:` only)".into(),
            });
        }
        Ok(s)
    }

    fn from_yaml_any(text: &str, sets: &[String], base_dir: &Path) -> Result<Scenario, SimError> {
        let mut v: Value = crate::yaml::parse(text).map_err(|e| SimError::Scenario {
            field: "scenario".into(),
            message: e.to_string(),
        })?;
        apply_sets(&mut v, sets)?;
        let mut s = Self::from_value(v, base_dir).map_err(|e| with_line(e, text, sets))?;
        if let Some(h) = &s.compute.host {
            h.check_scope().map_err(|e| with_line(e, text, sets))?;
        }
        s.overrides = sets.to_vec();
        Ok(s)
    }

    /// Builds a scenario from a parsed YAML tree (a scenario file with its overrides applied).
    ///
    /// # Errors
    /// As [`Scenario::load`].
    pub fn from_value(v: Value, base_dir: &Path) -> Result<Scenario, SimError> {
        let Value::Mapping(map) = &v else {
            return Err(SimError::Scenario {
                field: "scenario".into(),
                message: format!("expected a map with keys {SECTIONS}"),
            });
        };
        // Deserialize section by section so an error names its section and the key path in it.
        for (k, val) in map {
            let key = k.as_str().unwrap_or("?");
            use crate::yaml::from_value as typed;
            let r: Result<(), YamlError> = match key {
                "training" => typed::<TrainingConfig>(val.clone()).map(drop),
                "parallel" => typed::<ParallelConfig>(val.clone()).map(drop),
                "cluster" => typed::<ClusterSpec>(val.clone()).map(drop),
                "network" => typed::<NetworkSpec>(val.clone()).map(drop),
                "collectives" => typed::<CollectivesSpec>(val.clone()).map(drop),
                "compute" => typed::<ComputeSpec>(val.clone()).map(drop),
                "output" => typed::<OutputSpec>(val.clone()).map(drop),
                "model" => typed::<ModelSpec>(val.clone()).map(drop),
                "dlrm" => typed::<DlrmConfig>(val.clone()).map(drop),
                "workload" => typed::<WorkloadSource>(val.clone()).map(drop),
                "faults" => typed::<Vec<crate::faults::FaultSpec>>(val.clone()).map(drop),
                "jobs" => typed::<Vec<JobSpec>>(val.clone()).map(drop),
                "name" | "seed" => Ok(()),
                other => {
                    return Err(SimError::Scenario {
                        field: other.to_string(),
                        message: format!("unknown section; valid: {SECTIONS}"),
                    });
                }
            };
            r.map_err(|e| typed_error(key, e))?;
        }
        // `jobs:` carries each job's model, training and parallel settings: none at the top.
        if map.get("jobs").is_some_and(|j| !j.is_null()) {
            for key in ["model", "dlrm", "workload", "training", "parallel"] {
                if map.get(key).is_some() {
                    return Err(SimError::Scenario {
                        field: key.into(),
                        message: format!(
                            "a scenario with `jobs:` gives each job its own `{key}`; move it into the jobs' entries (or drop `jobs:` for one job)"
                        ),
                    });
                }
            }
        }
        let mut s: Scenario = crate::yaml::from_value(v).map_err(|e| typed_error("", e))?;
        s.base_dir = base_dir.to_path_buf();
        Ok(s)
    }

    /// The bytes a blocking pipeline send moves before its receiver posts
    /// (`collectives.p2p_eager`), for the engine: unbounded with `parallel.pp_impl: torch`,
    /// whose runtime posts each receive in the batch of the time step that produces its data
    /// (`PipelineScheduleMulti`), a moment llmsim's per-stage order of passes does not hold: the
    /// receive there is placed before the pass that consumes it, which can come steps later, so
    /// the sender is not made to wait for it.
    pub fn p2p_eager_bytes(&self) -> u64 {
        if self.parallel.pp_impl == llmsim_workload::PpImpl::Torch {
            u64::MAX
        } else {
            self.collectives.p2p_eager.0
        }
    }

    /// Total GPUs, from `gpus` or `nodes x gpus_per_node`.
    ///
    /// # Errors
    /// Neither given, both given and inconsistent, or a count not a multiple of the server size.
    pub fn gpus(&self) -> Result<u32, SimError> {
        let c = &self.cluster;
        if c.gpus_per_node == 0 {
            return Err(SimError::Scenario {
                field: "cluster.gpus_per_node".into(),
                message: "must be at least 1 (GPUs per server, e.g. 8)".into(),
            });
        }
        let gpn = c.gpus_per_node;
        // Checked: release builds would wrap 536870913 x 8 to 8 GPUs.
        let product = |n: u32| {
            n.checked_mul(gpn).ok_or_else(|| SimError::Scenario {
                field: "cluster.nodes".into(),
                message: format!(
                    "nodes x gpus_per_node = {n} x {gpn} overflows; valid: at most {} nodes of {gpn} GPUs ({} GPUs in all)",
                    (llmsim_topo::generators::MAX_HOSTS / gpn).max(1),
                    llmsim_topo::generators::MAX_HOSTS
                ),
            })
        };
        let g = match (c.gpus, c.nodes) {
            (Some(g), None) => g,
            (None, Some(n)) => product(n)?,
            (Some(g), Some(n)) if Some(g) == n.checked_mul(gpn) => g,
            (Some(g), Some(n)) => {
                return Err(SimError::Scenario {
                    field: "cluster.gpus".into(),
                    message: format!(
                        "gpus={g} but nodes x gpus_per_node = {n} x {gpn} = {}",
                        u64::from(n) * u64::from(gpn)
                    ),
                });
            }
            (None, None) => {
                return Err(SimError::Scenario {
                    field: "cluster.gpus".into(),
                    message: "give `gpus` or `nodes`".into(),
                });
            }
        };
        if g > llmsim_topo::generators::MAX_HOSTS {
            return Err(SimError::Scenario {
                field: "cluster.gpus".into(),
                message: format!(
                    "{g} GPUs is more than llmsim builds; valid: at most {}",
                    llmsim_topo::generators::MAX_HOSTS
                ),
            });
        }
        if g == 0 || g % gpn != 0 {
            return Err(SimError::Scenario {
                field: "cluster.gpus".into(),
                message: format!("{g} GPUs is not a positive multiple of gpus_per_node={gpn}"),
            });
        }
        Ok(g)
    }
}

/// A typed section's error as a scenario error naming the full key path (`parallel.tp`), with a
/// hint where a section got a scalar (`--set parallel=4`).
/// Where a field's bad value was written: `--set KEY=...` when an override set it, else the line
/// of the scenario text (block or flow style), appended to the message.
fn with_line(e: SimError, text: &str, sets: &[String]) -> SimError {
    let SimError::Scenario { field, message } = e else { return e };
    // An override at the field, above it, or inside it (an error may name only the section).
    let set = sets.iter().rev().find(|s| {
        s.split_once('=').is_some_and(|(k, _)| {
            let k = k.trim();
            k == field || field.starts_with(&format!("{k}.")) || k.starts_with(&format!("{field}."))
        })
    });
    let at = match set {
        Some(s) => format!(" (from --set {s})"),
        None => crate::yaml::line_of(text, &field).map_or_else(String::new, |l| format!(" (line {l})")),
    };
    SimError::Scenario {
        field,
        message: format!("{message}{at}"),
    }
}

fn typed_error(section: &str, e: YamlError) -> SimError {
    let (path, message) = match e {
        YamlError::Typed { path, message } => (path, message),
        other => (String::new(), other.to_string()),
    };
    let field = match (section, path.as_str()) {
        ("", "") => "scenario".to_string(),
        ("", p) => p.to_string(),
        (s, "") => s.to_string(),
        (s, p) => format!("{s}.{p}"),
    };
    let message = if message.starts_with("invalid type: ") && message.contains(", expected struct ") {
        format!("{message} (`{field}` is a section: give a map, or set one of its keys, e.g. --set {field}.<key>=value)")
    } else {
        message
    };
    SimError::Scenario { field, message }
}

/// Applies `a.b.c=value` overrides in order, each value read as YAML (numbers, booleans,
/// strings): the one `--set` parser of `llmsim run`, Python's `set=` and a sweep's `set:`.
///
/// # Errors
/// A `SimError::Scenario` whose field is `--set` (no `=`) or `--set <key>` (a value that is
/// not YAML, an empty key, a key through a scalar), its message saying what is expected.
pub fn apply_sets(root: &mut Value, sets: &[String]) -> Result<(), SimError> {
    sets.iter().try_for_each(|s| apply_set(root, s))
}

fn apply_set(root: &mut Value, set: &str) -> Result<(), SimError> {
    let Some((path, val)) = set.split_once('=') else {
        return Err(SimError::Scenario {
            field: "--set".into(),
            message: format!("{set:?}: expected key.path=value, e.g. parallel.tp=4"),
        });
    };
    let value: Value = crate::yaml::parse(val).map_err(|e| SimError::Scenario {
        field: format!("--set {path}"),
        message: e.to_string(),
    })?;
    set_path(root, path, value).map_err(|e| match e {
        SimError::Scenario { field, message } => SimError::Scenario {
            field: format!("--set {field}"),
            message,
        },
        other => other,
    })
}

/// Sets the dotted key `path` (as in `--set`) of a YAML tree to `value`, creating maps on the way
/// through absent or null keys.
///
/// # Errors
/// An empty key, or a key on the way that holds a scalar or a list: `model.layers.x` where
/// `model` is a preset name is refused rather than turning the name into a map.
pub fn set_path(root: &mut Value, path: &str, value: Value) -> Result<(), SimError> {
    let err = |field: &str, message: String| SimError::Scenario {
        field: field.to_string(),
        message,
    };
    let keys: Vec<&str> = path.split('.').collect();
    if keys.iter().any(|k| k.trim().is_empty()) {
        return Err(err(path, "an empty key; expected key.path=value, e.g. parallel.tp=4".into()));
    }
    let mut cur = root;
    for (i, k) in keys.iter().enumerate() {
        if cur.is_null() {
            *cur = Value::Mapping(Default::default());
        }
        let Value::Mapping(map) = cur else {
            let at = keys[..i].join(".");
            let shown = serde_yaml_ng::to_string(&*cur).unwrap_or_default();
            let shown = shown.trim_end();
            let what = if cur.is_sequence() { "a list" } else { "a scalar" };
            let shown = if shown.len() > 40 { "..." } else { shown };
            let fix = if at == "model" {
                format!("to change one field of a preset, give `model` as a map, e.g. {{preset: {shown}, {k}: ...}}")
            } else {
                format!("set `{at}` itself")
            };
            return Err(err(
                path,
                format!("`{at}` is {what} ({shown}), not a map, so it has no key `{k}`; {fix}"),
            ));
        };
        let key = Value::String((*k).to_string());
        if i + 1 == keys.len() {
            map.insert(key, value);
            return Ok(());
        }
        cur = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "model: gpt3-13b\ncluster: { gpus: 16 }\n";

    fn network(yaml: &str) -> Result<llmsim_net::packet::PacketConfig, SimError> {
        let s = Scenario::from_yaml(&format!("{MIN}network: {yaml}\n"), &[], Path::new("."))?;
        s.network.packet_config(1)
    }

    #[test]
    fn network_transport_sets_the_packet_engine() {
        use llmsim_net::packet::{DropPolicy, Transport};
        let roce = network("{backend: packet}").unwrap();
        assert_eq!((roce.transport, roce.pfc), (Transport::Roce, true));
        let tcp = network("{backend: packet, transport: tcp, switch_buffer: 64MiB, drop_policy: shared, tcp: {min_rto: 10ms, mss: 536}}")
            .unwrap();
        assert_eq!((tcp.transport, tcp.pfc, tcp.ecn), (Transport::Tcp, false, false));
        assert_eq!(
            (tcp.buffer_bytes, tcp.drop_policy, tcp.mtu),
            (64 << 20, DropPolicy::SharedTailDrop, 536)
        );
        assert_eq!(tcp.tcp.min_rto, SimTime::from_ms(10));
        assert_eq!(tcp.tcp.initial_rto, SimTime::from_ms(10), "the initial RTO follows min_rto");
        let cubic = network("{backend: packet, transport: tcp, tcp: {cc: cubic}}").unwrap();
        assert_eq!(cubic.tcp.cc, llmsim_net::packet::TcpCc::Cubic);
        assert_eq!(tcp.tcp.cc, llmsim_net::packet::TcpCc::NewReno);
        let uet = network("{backend: packet, transport: uet, uet: {trim_threshold: 100KB, mtu: 2048, rto: 1ms}}").unwrap();
        assert_eq!((uet.transport, uet.pfc, uet.mtu), (Transport::Uet, false, 2048));
        assert_eq!((uet.uet.trim_threshold_bytes, uet.uet.rto), (100_000, SimTime::from_ms(1)));
        let e = network("{backend: packet, uet: {mtu: 2048}}").unwrap_err().to_string();
        assert!(e.contains("network.uet") && e.contains("transport: uet"), "{e}");
        let e = network("{backend: packet, transport: uet, uet: {ecn_kmin: 0.9}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("uet.ecn_kmin"), "{e}");
        let e = network("{backend: packet, transport: uet, uet: {mtu: 4294967295}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("network.uet.mtu"), "{e}");
        let e = network("{backend: packet, tcp: {mss: 536}}").unwrap_err().to_string();
        assert!(e.contains("network.tcp") && e.contains("transport: tcp"), "{e}");
        let d = network("{backend: packet, transport: tcp, tcp: {delayed_ack: true, delack_timeout: 1ms}}").unwrap();
        assert!(d.tcp.delayed_ack && d.tcp.delack_timeout == SimTime::from_ms(1));
        assert!(d.warnings().is_empty(), "1ms is below the 50ms min_rto");
        let d = network("{backend: packet, transport: tcp, tcp: {delayed_ack: true}}").unwrap();
        assert!(d.warnings()[0].contains("spuriously"), "ns-3's 200ms over the 50ms RTO");
        let e = network("{backend: packet, transport: tcp, tcp: {min_rto: 1ms, rto: 2ms}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rto"), "unknown key refused: {e}");
        // The engine refuses what the config cannot run, naming the field.
        let topo = Arc::new(
            llmsim_topo::generators::flat(
                4,
                llmsim_topo::LinkParams::new(Bandwidth::from_gbps(100), SimTime::from_ns(500)),
                llmsim_topo::ScaleUp::none(),
                1,
            )
            .unwrap(),
        );
        let spec = |yaml: &str| {
            Scenario::from_yaml(&format!("{MIN}network: {yaml}\n"), &[], Path::new("."))
                .unwrap()
                .network
        };
        let e = spec("{backend: packet, transport: tcp, pfc: true}")
            .build(topo.clone(), 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("network.pfc: false"), "{e}");
        let e = spec("{backend: packet, transport: uet, pfc: true}")
            .build(topo.clone(), 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("network.transport=uet") && e.contains("network.pfc: false"), "{e}");
        let w = spec("{backend: packet, load_balance: spray}").warnings();
        assert!(w.len() == 1 && w[0].contains("go-back-N"), "{w:?}");
        assert!(spec("{backend: packet, transport: uet, load_balance: spray}").warnings().is_empty());
        assert!(spec("{backend: packet, transport: tcp}").build(topo.clone(), 1).is_ok());
        // RoCE's ECN thresholds, for every port rate; off; refused where they mean nothing.
        let e = network("{backend: packet, ecn: {kmin: 100KB, kmax: 400KB, pmax: 0.5}}").unwrap();
        assert!(e.ecn && e.ecn_map.len() == 2);
        assert!(
            e.ecn_map
                .iter()
                .all(|t| (t.kmin_bytes, t.kmax_bytes, t.pmax) == (100_000, 400_000, 0.5))
        );
        let d = network("{backend: packet}").unwrap();
        assert_eq!((d.ecn_map[1].kmin_bytes, d.ecn_map[1].kmax_bytes), (1_600_000, 6_400_000));
        assert!(!network("{backend: packet, ecn: {enabled: false}}").unwrap().ecn);
        let msg = network("{backend: packet, ecn: {kmin: 9MB}}").unwrap_err().to_string();
        assert!(msg.starts_with("network.ecn:") && msg.contains("kmin <= kmax"), "{msg}");
        let msg = network("{backend: packet, transport: tcp, ecn: {}}").unwrap_err().to_string();
        assert!(msg.starts_with("network.ecn:"), "{msg}");
        assert!(spec("{backend: packet, transport: uet}").build(topo, 1).is_ok());
    }

    #[test]
    fn swift_parameters_reach_the_packet_engine() {
        let d = network("{backend: packet, cc: swift}").unwrap();
        let s = network("{backend: packet, cc: swift, swift: {hop_scale: 2us, ai: 0.5, beta: 0.6, fs_range: 0ns}}").unwrap();
        assert_eq!((s.swift_hop_scale, s.swift_ai, s.swift_beta), (SimTime::from_us(2), 0.5, 0.6));
        assert_eq!(s.swift_fs_range, SimTime::ZERO);
        assert_eq!(
            (s.swift_max_mdf, s.swift_min_cwnd),
            (d.swift_max_mdf, d.swift_min_cwnd),
            "the rest keep their defaults"
        );
        let e = network("{backend: packet, swift: {ai: 2}}").unwrap_err().to_string();
        assert!(e.starts_with("network.swift:") && e.contains("cc: swift"), "{e}");
        let e = network("{backend: packet, cc: swift, swift: {beta: 1.5}}").unwrap_err().to_string();
        assert!(e.starts_with("network.swift.beta:"), "{e}");
        let e = network("{backend: packet, cc: swift, swift: {fs_min_cwnd: 200}}")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("network.swift.fs_min_cwnd:"), "{e}");
    }

    #[test]
    fn collectives_study_knobs_parse_and_are_checked() {
        let s = Scenario::from_yaml(
            &format!("{MIN}collectives: {{ chunks: 1024, chunks_in_flight: 64, injection_latency: 10us }}\n"),
            &[],
            Path::new("."),
        )
        .unwrap();
        assert_eq!(s.collectives.chunks, Some(1024));
        assert_eq!(s.collectives.chunks_in_flight, Some(64));
        assert_eq!(s.collectives.injection_latency, SimTime::from_us(10));
        let d = Scenario::from_yaml(MIN, &[], Path::new(".")).unwrap();
        assert_eq!((d.collectives.chunks, d.collectives.injection_latency), (None, SimTime::ZERO));
        let gpu = llmsim_compute::gpu::gpu("H100").unwrap();
        for bad in ["chunks: 0", "chunks_in_flight: 100000", "all_to_all_chunks: 0"] {
            let s = Scenario::from_yaml(&format!("{MIN}collectives: {{ {bad} }}\n"), &[], Path::new(".")).unwrap();
            let e = crate::setup::cluster_setup(&s, gpu, 16, &crate::Shared::default())
                .err()
                .unwrap()
                .to_string();
            let field = bad.split(':').next().unwrap();
            assert!(
                e.starts_with(&format!("collectives.{field}:")) && e.contains("valid 1..=65536"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn absent_sections_get_the_documented_defaults() {
        let s = Scenario::from_yaml(MIN, &[], Path::new(".")).unwrap();
        let empty = Scenario::from_yaml(
            &format!("{MIN}collectives: {{}}\noutput: {{}}\ncompute: {{}}\n"),
            &[],
            Path::new("."),
        )
        .unwrap();
        assert!(s.collectives.pxn && empty.collectives.pxn);
        assert_eq!(s.collectives.granularity, empty.collectives.granularity);
        assert_eq!(s.output.trace, empty.output.trace);
        assert_eq!(s.output.flows, empty.output.flows);
        assert_eq!(s.compute.overlap_slowdown, empty.compute.overlap_slowdown);
    }

    #[test]
    fn set_refuses_to_turn_a_scalar_into_a_map() {
        let e = Scenario::from_yaml(MIN, &["model.num_hidden_layers=4".into()], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--set model.num_hidden_layers: `model` is a scalar (gpt3-13b)"),
            "{e}"
        );
        assert!(e.contains("{preset: gpt3-13b, num_hidden_layers: ...}"), "{e}");
        let e = Scenario::from_yaml(MIN, &["cluster.gpus.x=1".into()], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cluster.gpus` is a scalar (16)"), "{e}");
        let e = Scenario::from_yaml(MIN, &["parallel..tp=1".into()], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty key"), "{e}");
        // Absent and null keys on the way become maps.
        let s = Scenario::from_yaml(&format!("{MIN}compute:\n"), &["parallel.tp=2".into()], Path::new(".")).unwrap();
        assert_eq!(s.parallel.tp, 2);
    }

    #[test]
    fn type_errors_name_the_key_path() {
        let e = Scenario::from_yaml(&format!("{MIN}parallel: {{ tp: x }}\n"), &[], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("parallel.tp: invalid type: string \"x\""), "{e}");
        let e = Scenario::from_yaml(MIN, &["parallel=4".into()], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`parallel` is a section"), "{e}");
        let e = Scenario::from_yaml(&format!("{MIN}seed: x\n"), &[], Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("seed: invalid type"), "{e}");
    }

    #[test]
    fn defaults_and_sets() {
        let s = Scenario::from_yaml(MIN, &["parallel.tp=4".into(), "cluster.gpu=H200".into()], Path::new(".")).unwrap();
        assert_eq!(s.parallel.tp, 4);
        assert_eq!(s.cluster.gpu, GpuChoice::Catalog("H200".into()));
        assert_eq!(s.network.backend, Backend::Flow);
        assert_eq!(s.gpus().unwrap(), 16);
    }

    #[test]
    fn unknown_keys_name_the_section() {
        let e = Scenario::from_yaml(&format!("{MIN}parallel: {{ tpp: 2 }}\n"), &[], Path::new(".")).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("parallel") && m.contains("tpp"), "{m}");
        let e = Scenario::from_yaml(&format!("{MIN}clutser: {{}}\n"), &[], Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("clutser") && e.to_string().contains("valid"), "{e}");
        let e = Scenario::from_yaml(MIN, &["parallel".into()], Path::new(".")).unwrap_err();
        assert!(e.to_string().contains("key.path=value"), "{e}");
    }

    #[test]
    fn gpu_count_checks() {
        let s = Scenario::from_yaml("model: gpt3-13b\ncluster: { gpus: 12 }\n", &[], Path::new(".")).unwrap();
        assert!(s.gpus().unwrap_err().to_string().contains("gpus_per_node"));
        let s = Scenario::from_yaml("model: gpt3-13b\ncluster: { nodes: 2 }\n", &[], Path::new(".")).unwrap();
        assert_eq!(s.gpus().unwrap(), 16);
    }
}
