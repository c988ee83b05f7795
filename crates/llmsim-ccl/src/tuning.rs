//! NCCL's own cost model: which algorithm, protocol and channel count NCCL 2.30.7 picks for a
//! collective, and the time it predicts.
//!
//! Sources followed (NVIDIA/nccl 2.30.7): `src/graph/tuning.cc` (`ncclTopoTuneModel`,
//! `ncclTopoGetAlgoTime`), `src/enqueue.cc` (`updateCollCostTable`, `topoGetAlgoInfo`,
//! `calcCollChunking`), `src/graph/search.cc` (`ncclTopoCompute`, `ncclTopoDupChannels`),
//! `src/graph/connect.cc` (`ncclTopoPostset`), `src/transport/nvls.cc` (`ncclNvlsTuning`).
//!
//! Units: the API takes and returns [`Bytes`], [`Bandwidth`] and [`SimTime`]. Inside, the
//! model works in f64 GB/s (10^9 B/s) and microseconds, as NCCL does; fields that hold such
//! values say so in their names (`_gbps` here means GB/s, not Gbit/s, as in NCCL logs).
//!
//! Not modelled: CollNet (SHARP) graphs, tuner plugins, the NCCL_CTA_POLICY_EFFICIENCY path,
//! fp8 penalties, aggregated launches (`numPipeOps` is 1).

use std::fmt;
use std::str::FromStr;

use llmsim_core::{Bandwidth, Bytes, SimTime};
use serde::Serialize;
use thiserror::Error;

mod graph;

pub use graph::{GraphInfo, GraphSearch, MAXCHANNELS};

/// NCCL release whose model this module reproduces.
pub const NCCL_VERSION: &str = "2.30.7";

/// Errors of the tuning model. Messages name the field and the valid values.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TuningError {
    /// A string that does not name a value of `field`.
    #[error("{field}: cannot read {input:?}; valid: {valid}")]
    Parse {
        /// Name of the field being parsed ("kind", "algo", "proto", "cpu").
        field: &'static str,
        /// The string as given.
        input: String,
        /// The accepted spellings, comma-separated.
        valid: String,
    },
    /// A numeric input out of range.
    #[error("{field}: {message}")]
    InvalidField {
        /// Name of the offending [`TuningInput`] field.
        field: &'static str,
        /// What is wrong and what would be valid.
        message: String,
    },
    /// An NCCL_ALGO-style override naming an algorithm NCCL never runs for this collective.
    #[error("algo_override: {algo} is not implemented for {kind} in NCCL {NCCL_VERSION}; valid: {valid}")]
    AlgoNotAllowed {
        /// The collective being tuned.
        kind: CollKind,
        /// The overriding algorithm NCCL does not implement for `kind`.
        algo: Algo,
        /// The algorithms NCCL implements for `kind`, comma-separated.
        valid: String,
    },
    /// An NCCL_PROTO-style override that leaves no protocol usable with the allowed algorithms.
    #[error("proto_override: {proto} cannot run {kind} with algorithms {algos}; valid: {valid}")]
    ProtoNotAllowed {
        /// The collective being tuned.
        kind: CollKind,
        /// The overriding protocol that cannot run.
        proto: Proto,
        /// The algorithms still allowed, comma-separated.
        algos: String,
        /// The protocols those algorithms can run, comma-separated.
        valid: String,
    },
    /// Every (algorithm, protocol) pair left is disabled on this system.
    #[error("no algorithm/protocol available for {kind}: {reasons}")]
    NoCandidate {
        /// The collective being tuned.
        kind: CollKind,
        /// Each (algorithm, protocol) pair with the reason it is disabled.
        reasons: String,
    },
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Normalized spelling for FromStr: lower case, no '-', '_' or spaces.
fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Identifiers
// ---------------------------------------------------------------------------------------------

/// A collective NCCL tunes. Mirrors NCCL's `ncclFunc_t` (the collectives only; no SendRecv).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CollKind {
    /// Every rank ends with the reduction of all ranks' buffers (`ncclFuncAllReduce`).
    AllReduce,
    /// Every rank ends with the concatenation of all ranks' buffers (`ncclFuncAllGather`).
    AllGather,
    /// Every rank ends with its shard of the reduction of all buffers (`ncclFuncReduceScatter`).
    ReduceScatter,
    /// The root's buffer is copied to every rank (`ncclFuncBroadcast`).
    Broadcast,
    /// The reduction of all ranks' buffers lands on the root (`ncclFuncReduce`).
    Reduce,
}

impl CollKind {
    /// Every kind, in NCCL's `ncclFunc_t` order.
    pub const ALL: [CollKind; 5] = [
        CollKind::AllReduce,
        CollKind::AllGather,
        CollKind::ReduceScatter,
        CollKind::Broadcast,
        CollKind::Reduce,
    ];

    /// NCCL tuning.cc: ring steps of one collective (AllReduce 2(n-1), AllGather and
    /// ReduceScatter n-1, others n).
    pub fn nsteps(self, nranks: u32) -> u32 {
        match self {
            CollKind::AllReduce => 2 * nranks.saturating_sub(1),
            CollKind::AllGather | CollKind::ReduceScatter => nranks.saturating_sub(1),
            CollKind::Broadcast | CollKind::Reduce => nranks,
        }
    }

    /// Inter-node steps of a ring (tuning.cc: `nInterSteps`).
    pub fn ninter_steps(self, nnodes: u32) -> u32 {
        match (nnodes, self) {
            (1, _) => 0,
            (n, CollKind::AllReduce) => 2 * (n - 1),
            (n, _) => n - 1,
        }
    }

    /// tuning.cc: algorithms NCCL implements for this collective.
    pub fn implemented_algos(self) -> &'static [Algo] {
        match self {
            CollKind::AllReduce => &[
                Algo::Tree,
                Algo::Ring,
                Algo::CollNetDirect,
                Algo::CollNetChain,
                Algo::Nvls,
                Algo::NvlsTree,
            ],
            CollKind::AllGather | CollKind::ReduceScatter => &[Algo::Ring, Algo::CollNetDirect, Algo::Nvls, Algo::Pat],
            CollKind::Broadcast | CollKind::Reduce => &[Algo::Ring],
        }
    }

    /// NCCL's `ncclFuncStr` spelling.
    pub fn nccl_name(self) -> &'static str {
        match self {
            CollKind::AllReduce => "AllReduce",
            CollKind::AllGather => "AllGather",
            CollKind::ReduceScatter => "ReduceScatter",
            CollKind::Broadcast => "Broadcast",
            CollKind::Reduce => "Reduce",
        }
    }
}

impl fmt::Display for CollKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

impl FromStr for CollKind {
    type Err = TuningError;
    /// Accepts "all-reduce", "allreduce", "all_reduce", "AllReduce", … for every kind.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CollKind::ALL
            .into_iter()
            .find(|k| squash(k.nccl_name()) == squash(s))
            .ok_or_else(|| TuningError::Parse {
                field: "kind",
                input: s.to_string(),
                valid: "all-reduce, all-gather, reduce-scatter, broadcast, reduce".into(),
            })
    }
}

/// NCCL algorithms, in NCCL's order (`NCCL_ALGO_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Algo {
    /// Double binary tree (`NCCL_ALGO_TREE`).
    Tree,
    /// Ring (`NCCL_ALGO_RING`).
    Ring,
    /// CollNet (IB SHARP) with direct intra-node scatter (`NCCL_ALGO_COLLNET_DIRECT`). Not
    /// modelled: always disabled.
    CollNetDirect,
    /// CollNet (IB SHARP) with an intra-node chain (`NCCL_ALGO_COLLNET_CHAIN`). Not modelled:
    /// always disabled.
    CollNetChain,
    /// NVLink SHARP: reduction in the NVSwitch (`NCCL_ALGO_NVLS`).
    Nvls,
    /// NVLS inside a node, tree across nodes (`NCCL_ALGO_NVLS_TREE`).
    NvlsTree,
    /// Parallel aggregated trees, for AllGather and ReduceScatter (`NCCL_ALGO_PAT`).
    Pat,
}

impl Algo {
    /// Every algorithm, in NCCL's `NCCL_ALGO_*` order (the rows of the cost table).
    pub const ALL: [Algo; 7] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];

    /// NCCL's `ncclAlgoStr` spelling (what NCCL_ALGO accepts, case-insensitively).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Algo::Tree => "Tree",
            Algo::Ring => "Ring",
            Algo::CollNetDirect => "CollnetDirect",
            Algo::CollNetChain => "CollnetChain",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLSTree",
            Algo::Pat => "PAT",
        }
    }

    fn idx(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

impl FromStr for Algo {
    type Err = TuningError;
    /// NCCL_ALGO spellings, case-insensitive ("Ring", "tree", "nvlstree", "collnet_direct").
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algo::ALL
            .into_iter()
            .find(|a| squash(a.nccl_name()) == squash(s))
            .ok_or_else(|| TuningError::Parse {
                field: "algo",
                input: s.to_string(),
                valid: join(&Algo::ALL),
            })
    }
}

/// NCCL protocols (`NCCL_PROTO_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Proto {
    /// Low latency: 16 B lines, 8 B of data and 8 B of flags (`NCCL_PROTO_LL`).
    LL,
    /// Low latency on 128 B lines, 120 B of data and an 8 B flag (`NCCL_PROTO_LL128`).
    LL128,
    /// Bulk copies with a memory fence per step (`NCCL_PROTO_SIMPLE`).
    Simple,
}

impl Proto {
    /// Every protocol, in NCCL's `NCCL_PROTO_*` order (the columns of the cost table).
    pub const ALL: [Proto; 3] = [Proto::LL, Proto::LL128, Proto::Simple];

    /// NCCL's `ncclProtoStr` spelling (what NCCL_PROTO accepts, case-insensitively).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
            Proto::Simple => "Simple",
        }
    }

    fn idx(self) -> usize {
        self as usize
    }

    /// NCCL init.cc default buffer per connection (NCCL_BUFFSIZE / LL / LL128 defaults).
    pub fn buffer_size(self) -> Bytes {
        match self {
            // NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS * NCCL_STEPS * 16 B line
            Proto::LL => Bytes(8 * 512 * NCCL_STEPS * 16),
            // NCCL_LL128_ELEMS_PER_THREAD * NCCL_LL128_MAX_NTHREADS * NCCL_STEPS * 8 B
            Proto::LL128 => Bytes(120 * 640 * NCCL_STEPS * 8),
            Proto::Simple => Bytes::mib(4),
        }
    }

    /// NCCL device.h `ncclProtoGrainSize`.
    fn grain(self) -> u64 {
        match self {
            Proto::LL => 16,
            // WARP_SIZE * LL128_SHMEM_ELEMS_PER_THREAD / LINEELEMS * DATAELEMS * 8
            Proto::LL128 => 32 * 8 / 16 * 15 * 8,
            Proto::Simple => 512,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.nccl_name())
    }
}

impl FromStr for Proto {
    type Err = TuningError;
    /// NCCL_PROTO spellings, case-insensitive ("LL", "ll128", "simple").
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Proto::ALL
            .into_iter()
            .find(|p| squash(p.nccl_name()) == squash(s))
            .ok_or_else(|| TuningError::Parse {
                field: "proto",
                input: s.to_string(),
                valid: join(&Proto::ALL),
            })
    }
}

/// Moved to `llmsim_core`; its NCCL constants stay here (`NcclArch`).
pub use llmsim_core::GpuArch;

/// NCCL's per-compute-capability constants of a [`GpuArch`].
trait NcclArch {
    /// NCCL tuning.cc compCapIndex (Volta 0 is not modelled).
    fn cc_idx(self) -> usize;
    /// NCCL topo.h SMxx_NVLINK_BW: what NCCL counts per NVLink, GB/s.
    fn nccl_nvlink_per_link(self) -> f64;
    /// Physical per-link, per-direction NVLink bandwidth (NVLink3/4: 25 GB/s, NVLink5: 50).
    fn physical_nvlink_per_link(self) -> f64;
}

impl NcclArch for GpuArch {
    fn cc_idx(self) -> usize {
        match self {
            GpuArch::Ampere => 1,
            GpuArch::Hopper => 2,
            GpuArch::Blackwell => 3,
        }
    }

    fn nccl_nvlink_per_link(self) -> f64 {
        match self {
            GpuArch::Ampere => 20.0,
            GpuArch::Hopper => 20.6,
            GpuArch::Blackwell => 40.1,
        }
    }

    fn physical_nvlink_per_link(self) -> f64 {
        match self {
            GpuArch::Ampere | GpuArch::Hopper => 25.0,
            GpuArch::Blackwell => 50.0,
        }
    }
}

/// Host CPU vendor; NCCL's network overhead and LL bandwidth limits depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CpuVendor {
    /// Intel hosts (NCCL `NCCL_TOPO_CPU_VENDOR_INTEL`).
    Intel,
    /// AMD hosts (NCCL `NCCL_TOPO_CPU_VENDOR_AMD`).
    Amd,
}

impl FromStr for CpuVendor {
    type Err = TuningError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match squash(s).as_str() {
            "intel" => Ok(CpuVendor::Intel),
            "amd" => Ok(CpuVendor::Amd),
            _ => Err(TuningError::Parse {
                field: "cpu",
                input: s.to_string(),
                valid: "intel, amd".into(),
            }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Constants (NCCL 2.30.7 tuning.cc, ncclTunerConstantsDefaults unless said otherwise)
// ---------------------------------------------------------------------------------------------

const NCCL_STEPS: u64 = 8;
const NALGO: usize = 7;
const NPROTO: usize = 3;

/// Base latency (µs) [algo][proto].
const BASE_LAT: [[f64; NPROTO]; NALGO] = [
    [6.8, 14.0, 8.4], // Tree
    [6.6, 14.0, 8.4], // Ring
    [0.0, 0.0, 0.0],  // CollNetDirect
    [0.0, 0.0, 0.0],  // CollNetChain
    [0.0, 0.0, 0.0],  // NVLS
    [0.0, 0.0, 0.0],  // NVLSTree
    [8.0, 8.0, 8.0],  // PAT
];

const HW_NVLINK: usize = 0;
const HW_PCI: usize = 1;
const HW_NET: usize = 2;

/// Hardware latency (µs) [NVLINK/PCI/NET][algo][proto].
const HW_LAT: [[[f64; NPROTO]; NALGO]; 3] = [
    [
        [0.6, 1.25, 4.0],
        [0.6, 1.9, 3.4],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 25.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [1.0, 1.9, 4.0],
        [1.0, 2.5, 5.7],
        [0.0, 0.0, 3.7],
        [0.0, 0.0, 2.8],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 4.0],
    ],
    [
        [5.0, 8.5, 14.0],
        [2.7, 4.0, 14.0],
        [0.0, 0.0, 31.0],
        [0.0, 0.0, 30.0],
        [0.0, 0.0, 18.0],
        [0.0, 0.0, 20.9],
        [0.0, 0.0, 14.0],
    ],
];

/// llMaxBws [row][N1/N2/N4]. Row: one node -> compute capability index; several nodes ->
/// 0 on Intel, 1 on AMD (the CPU bounds LL across nodes).
const LL_MAX_BW: [[f64; 3]; 4] = [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [282.0, 90.0, 70.0]];
/// Per-channel caps [ccIdx][N1/N2/N4].
const PER_CH_MAX_RING_LL128: [[f64; 3]; 4] = [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 36.7], [40.0, 40.0, 40.0]];
const PER_CH_MAX_TREE_LL128: [[f64; 3]; 4] = [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]];
const PER_CH_MAX_TREE: [[f64; 3]; 4] = [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]];
const PER_CH_MAX_NVLS_TREE: [[f64; 3]; 4] = [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0]];
/// tuning.cc nvlsEfficiency [ccIdx].
const NVLS_EFFICIENCY: [f64; 4] = [0.0, 0.0, 0.85, 0.74];

/// tuning.cc treeCorrectionFactor [proto][log2(nBytes/64)], 64 B .. 256 MiB.
const TREE_CORRECTION: [[f64; 24]; NPROTO] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ],
];

/// topo.h PCI_BW: below this ring bandwidth Simple runs 256 threads instead of 512.
const PCI_BW: f64 = 12.0;
const WARP_SIZE: u32 = 32;
const NCCL_MAX_NTHREADS: u32 = 640;
const NCCL_SIMPLE_MAX_NTHREADS: u32 = 512;
const NCCL_LL_MAX_NTHREADS: u32 = 512;
const NCCL_LL128_MAX_NTHREADS: u32 = 640;
/// comm.h NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD (bytes per thread before adding channels).
const THREAD_THRESHOLD: [u64; NPROTO] = [8, 8, 64];
/// nvls.cc NCCL_NVLS_CHUNKSIZE default.
const NVLS_CHUNK_SIZE: u64 = 128 * 1024;

/// floor(log2(n)), -1 for 0 (NCCL utils.h log2i).
fn log2i(n: u64) -> i32 {
    if n == 0 { -1 } else { 63 - n.leading_zeros() as i32 }
}

// ---------------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------------

/// One collective on one communicator: what NCCL knows when it picks an algorithm.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuningInput {
    /// The collective.
    pub kind: CollKind,
    /// NCCL's nBytes: the buffer size for AllReduce/Broadcast/Reduce; for AllGather and
    /// ReduceScatter the full gathered size, nRanks x count x elemSize (the "size" column of
    /// nccl-tests).
    pub bytes: Bytes,
    /// Ranks (GPUs) in the communicator (NCCL's nRanks).
    pub nranks: u32,
    /// Nodes; `nranks` must be a multiple of it (same GPUs per node everywhere).
    pub nnodes: u32,
    /// GPU generation; picks NCCL's per-compute-capability constants.
    pub arch: GpuArch,
    /// Host CPU vendor; bounds LL bandwidth across nodes.
    pub cpu: CpuVendor,
    /// NVLink bandwidth per GPU per direction (H100 SXM: 450 GB/s); zero for PCIe-only GPUs.
    pub nvlink_bw: Bandwidth,
    /// Bandwidth of one NIC (400 Gbit/s for ConnectX-7 NDR).
    pub nic_bw: Bandwidth,
    /// NICs per node; each carries `nic_bw`.
    pub nics_per_node: u32,
    /// PCIe bandwidth between a GPU and its NIC as NCCL rates it. Default: `arch.default_pcie_bw()`.
    pub pcie_bw: Bandwidth,
    /// NVLink SHARP available and enabled (NCCL_NVLS_ENABLE defaults to on where supported:
    /// Hopper+ behind NVSwitch). Default true on Hopper/Blackwell.
    pub nvls: bool,
    /// CollNet (IB SHARP) enabled (NCCL_COLLNET_ENABLE, default 0). llmsim does not model the
    /// CollNet graphs; when true only NVLS across nodes is unlocked.
    pub collnet: bool,
    /// NCCL_ALGO-style list: only these algorithms are considered. Default: none.
    pub algo_override: Option<Vec<Algo>>,
    /// NCCL_PROTO-style list: only these protocols are considered. Default: none.
    pub proto_override: Option<Vec<Proto>>,
    /// NCCL_MIN_NCHANNELS. Default: none.
    pub min_channels: Option<u32>,
    /// NCCL_MAX_NCHANNELS. Default: none (MAXCHANNELS = 64).
    pub max_channels: Option<u32>,
}

impl TuningInput {
    /// `nranks` H100 SXM GPUs, 8 per node (fewer if `nranks` < 8), NVLink4 450 GB/s per
    /// direction, one 400 Gbit/s NIC per GPU, Intel hosts, NVLS on, CollNet off.
    pub fn h100(kind: CollKind, bytes: Bytes, nranks: u32) -> Self {
        let ppn = nranks.clamp(1, 8);
        TuningInput {
            kind,
            bytes,
            nranks,
            nnodes: nranks.div_ceil(ppn).max(1),
            arch: GpuArch::Hopper,
            cpu: CpuVendor::Intel,
            nvlink_bw: Bandwidth::from_gbytes_per_sec(450),
            nic_bw: Bandwidth::from_gbps(400),
            nics_per_node: 8,
            pcie_bw: GpuArch::Hopper.default_pcie_bw(),
            nvls: true,
            collnet: false,
            algo_override: None,
            proto_override: None,
            min_channels: None,
            max_channels: None,
        }
    }

    fn validate(&self) -> Result<(), TuningError> {
        let bad = |field, message: String| Err(TuningError::InvalidField { field, message });
        if self.nranks == 0 {
            return bad("nranks", "must be at least 1".into());
        }
        if self.nnodes == 0 || !self.nranks.is_multiple_of(self.nnodes) {
            return bad(
                "nnodes",
                format!("={} must divide nranks={} (same GPUs per node)", self.nnodes, self.nranks),
            );
        }
        if self.nnodes > 1 && (self.nics_per_node == 0 || self.nic_bw.is_zero()) {
            return bad("nics_per_node", "multi-node needs at least one NIC with nic_bw > 0".into());
        }
        if self.nvlink_bw.is_zero() && self.pcie_bw.is_zero() {
            return bad("pcie_bw", "must be > 0 when nvlink_bw is 0".into());
        }
        for (field, v) in [("min_channels", self.min_channels), ("max_channels", self.max_channels)] {
            if let Some(v) = v
                && !(1..=MAXCHANNELS).contains(&v)
            {
                return bad(field, format!("={v}; valid: 1..={MAXCHANNELS}"));
            }
        }
        Ok(())
    }

    fn ppn(&self) -> u32 {
        self.nranks / self.nnodes
    }

    /// NVLink ports as NCCL counts them: links x per-link constant (GB/s).
    fn nccl_nvlink_gbps(&self) -> f64 {
        let gbs = self.nvlink_bw.gbytes_per_sec_f64();
        let links = (gbs / self.arch.physical_nvlink_per_link()).round();
        links * self.arch.nccl_nvlink_per_link()
    }

    /// Runs the topology search model for this input's system.
    ///
    /// # Errors
    /// An input that does not validate (a field out of range, named in the error).
    pub fn graph(&self) -> Result<GraphInfo, TuningError> {
        self.validate()?;
        Ok(graph::search(&graph::SearchSystem {
            arch: self.arch,
            ppn: self.ppn(),
            nnodes: self.nnodes,
            nics: self.nics_per_node,
            nvlink: self.nccl_nvlink_gbps(),
            nic: self.nic_bw.gbytes_per_sec_f64(),
            pcie: self.pcie_bw.gbytes_per_sec_f64(),
            nvls: self.nvls,
            min_channels: self.min_channels,
            max_channels: self.max_channels,
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// One cell of NCCL's cost table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlgoCost {
    /// The algorithm (row of the table).
    pub algo: Algo,
    /// The protocol (column of the table).
    pub proto: Proto,
    /// Whether NCCL may pick this pair on this system; see `reason_if_disabled`.
    pub enabled: bool,
    /// Why the pair is disabled; `None` when enabled.
    pub reason_if_disabled: Option<String>,
    /// Latency term (µs), after the ring plateau factor.
    pub lat_us: f64,
    /// NCCL's model bandwidth (`comm->bandwidths`, GB/s; algorithm bandwidth except for
    /// non-ring AllGather/ReduceScatter, where NCCL keeps bus bandwidth), after the tree
    /// correction factor.
    pub bw_gbps: f64,
    /// `lat_us * latCount + nBytes / (1000 * bw_gbps)`; infinite when disabled.
    pub time_us: f64,
}

/// NCCL's choice for one collective and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuningDecision {
    /// The collective, as in the input.
    pub kind: CollKind,
    /// NCCL's nBytes, as in the input.
    pub bytes: Bytes,
    /// Ranks in the communicator, as in the input.
    pub nranks: u32,
    /// The algorithm NCCL picks (lowest `time_us` among enabled cells).
    pub algo: Algo,
    /// The protocol NCCL picks with `algo`.
    pub proto: Proto,
    /// Channels (CTAs) after topoGetAlgoInfo's reduction for small messages.
    pub nchannels: u32,
    /// Threads per CTA (topoGetAlgoInfo nWarps * 32).
    pub nthreads: u32,
    /// NCCL's predicted time.
    pub time: SimTime,
    /// Predicted time in µs (unrounded).
    pub time_us: f64,
    /// nccl-tests algbw: bytes / time, GB/s.
    pub algbw_gbps: f64,
    /// nccl-tests busbw: algbw x busbw_factor, GB/s.
    pub predicted_busbw_gbps: f64,
    /// Chunk size the pipelined transfers use (calcCollChunking).
    pub chunk_bytes: Bytes,
    /// All 21 (algo, proto) cells, in NCCL's order.
    pub table: Vec<AlgoCost>,
    /// The topology search results the model read.
    pub graph: GraphInfo,
    /// NCCL release the model follows ([`NCCL_VERSION`]).
    pub nccl_version: &'static str,
}

/// nccl-tests bus-bandwidth factor: busbw = algbw x factor.
pub fn busbw_factor(kind: CollKind, nranks: u32) -> f64 {
    let n = f64::from(nranks.max(1));
    match kind {
        CollKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollKind::AllGather | CollKind::ReduceScatter => (n - 1.0) / n,
        CollKind::Broadcast | CollKind::Reduce => 1.0,
    }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

struct Cell {
    bw: f64,
    lat: f64,
    reason: Option<String>,
}

struct Model<'a> {
    input: &'a TuningInput,
    graph: &'a GraphInfo,
}

impl Model<'_> {
    fn graph_of(&self, a: Algo) -> GraphSearch {
        match a {
            Algo::Ring => self.graph.ring,
            Algo::Tree | Algo::Pat => self.graph.tree,
            Algo::Nvls | Algo::NvlsTree => self.graph.nvls.unwrap_or(GraphSearch {
                nchannels: 0,
                bw_intra_gbps: 0.0,
                bw_inter_gbps: 0.0,
            }),
            // CollNet graphs are not searched: llmsim has no SHARP model.
            Algo::CollNetDirect | Algo::CollNetChain => GraphSearch {
                nchannels: 0,
                bw_intra_gbps: 0.0,
                bw_inter_gbps: 0.0,
            },
        }
    }

    /// Why NCCL would not consider (a, p) for this collective, before overrides.
    fn disabled_reason(&self, a: Algo, p: Proto) -> Option<String> {
        let inp = self.input;
        let kind = inp.kind;
        let (nnodes, ppn) = (inp.nnodes, inp.ppn());
        if !kind.implemented_algos().contains(&a) {
            return Some(format!("{a} is not implemented for {kind}"));
        }
        if matches!(a, Algo::Nvls | Algo::NvlsTree) && p != Proto::Simple {
            return Some(format!("{a} runs Simple only"));
        }
        match a {
            Algo::Pat => {
                if p != Proto::Simple {
                    return Some("PAT runs Simple only".into());
                }
                if nnodes != inp.nranks {
                    return Some(format!("PAT needs 1 GPU per node (have {ppn})"));
                }
            }
            Algo::CollNetDirect | Algo::CollNetChain => {
                return Some(if inp.collnet {
                    "CollNet (SHARP) graphs are not modelled by llmsim".into()
                } else {
                    "CollNet disabled (NCCL_COLLNET_ENABLE=0)".into()
                });
            }
            Algo::Nvls | Algo::NvlsTree => {
                if inp.arch == GpuArch::Ampere {
                    return Some("NVLS needs sm90+".into());
                }
                if !inp.nvls {
                    return Some("NVLS disabled (nvls=false)".into());
                }
                match self.graph.nvls {
                    None => return Some("no NVLS graph (needs 2+ GPUs behind NVSwitch)".into()),
                    Some(g) if g.nchannels < 2 => {
                        return Some("NVLS graph has fewer than 2 channels".into());
                    }
                    Some(_) => {}
                }
                if kind != CollKind::AllReduce && ppn > 32 {
                    return Some("NVLS AllGather/ReduceScatter needs <= 32 local ranks".into());
                }
                if a == Algo::NvlsTree && nnodes == 1 {
                    return Some("NVLSTree is off on a single node".into());
                }
                if a == Algo::Nvls && nnodes > 1 {
                    if !inp.collnet {
                        return Some("NVLS across nodes needs CollNet (NVLS+SHARP)".into());
                    }
                    if kind != CollKind::AllReduce {
                        return Some(
                            "NVLS AllGather/ReduceScatter across nodes needs CollNet \
                             allgather/reducescatter (not modelled)"
                                .into(),
                        );
                    }
                }
            }
            Algo::Ring | Algo::Tree => {}
        }
        None
    }

    /// tuning.cc ncclTopoTuneModel: model bandwidth and latency of one cell.
    fn cell(&self, a: Algo, p: Proto) -> Cell {
        if let Some(reason) = self.disabled_reason(a, p) {
            return Cell {
                bw: 0.0,
                lat: 0.0,
                reason: Some(reason),
            };
        }
        let inp = self.input;
        let kind = inp.kind;
        let nranks = inp.nranks;
        let nnodes = inp.nnodes;
        let ppn = f64::from(nranks) / f64::from(nnodes);
        let cc = inp.arch.cc_idx();
        let idx2 = if nnodes <= 2 { nnodes as usize - 1 } else { 2 };
        let idx1 = if nnodes == 1 {
            cc
        } else if inp.cpu == CpuVendor::Amd {
            1
        } else {
            0
        };
        let ll_max_bw = LL_MAX_BW[idx1][idx2];
        let per_ch_tree = PER_CH_MAX_TREE[cc][idx2];
        let per_ch_ring_ll128 = PER_CH_MAX_RING_LL128[cc][idx2];
        let per_ch_tree_ll128 = PER_CH_MAX_TREE_LL128[cc][idx2];
        let per_ch_nvls_tree = PER_CH_MAX_NVLS_TREE[cc][idx2];
        let nsteps = f64::from(kind.nsteps(nranks));
        let g = self.graph_of(a);
        let nch = f64::from(g.nchannels);

        // --- bandwidth ---
        let mut bw = if nnodes <= 2 { g.bw_intra_gbps } else { g.bw_inter_gbps };
        if matches!(a, Algo::Nvls | Algo::NvlsTree) {
            let mut intra = nvls_head_gbps(inp.arch, &g);
            if kind == CollKind::AllReduce {
                intra *= 2.0; // AllReduce pipelines two operations.
            } else {
                intra *= (ppn - 1.0) / ppn;
            }
            let inter_mult = if nnodes <= 2 && a == Algo::NvlsTree { 2.0 } else { 1.0 };
            let inter = g.bw_inter_gbps * inter_mult;
            bw = intra.min(inter);
            if a == Algo::NvlsTree {
                bw = bw.min(per_ch_nvls_tree);
            }
        }
        let mut bus = nch * bw;
        match (a, p) {
            (Algo::Ring, Proto::LL) => bus = ll_max_bw.min(bus * 0.5),
            (Algo::Ring, Proto::LL128) => bus = (bus * 0.92).min(nch * per_ch_ring_ll128),
            _ => {}
        }
        if a == Algo::Tree && kind == CollKind::AllReduce {
            bus = (bus * 0.92).min(nch * per_ch_tree);
        }
        if a == Algo::Tree && p == Proto::LL {
            bus = (bus / 3.8).min(ll_max_bw);
        }
        if a == Algo::Tree && p == Proto::LL128 {
            let f = if nnodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
            bus = (bus * f).min(nch * per_ch_tree_ll128);
        }
        // The 0.85 x for NCCL_TOPO_PATTERN_TREE is not applied: on the NVSwitch + 1 NIC/GPU
        // systems modelled here the BALANCED_TREE search succeeds.
        if a == Algo::Pat {
            bus *= 0.75;
        }
        let rs_ag = matches!(kind, CollKind::AllGather | CollKind::ReduceScatter);
        if !(a != Algo::Ring && rs_ag) {
            let ratio = if matches!(a, Algo::Ring | Algo::Nvls | Algo::NvlsTree) {
                f64::from(nranks) / nsteps
            } else {
                0.5
            };
            bus *= ratio;
        }

        // --- latency ---
        let intra_hw = if inp.nvlink_bw.is_zero() { HW_PCI } else { HW_NVLINK };
        let hw = if nnodes == 1 { intra_hw } else { HW_NET };
        let (ai, pi) = (a.idx(), p.idx());
        let mut lat = BASE_LAT[ai][pi];
        let mut intra_lat = HW_LAT[intra_hw][ai][pi];
        // ppn = 1 exposes the full network latency: use Tree's. Graph latencyInter is 0 for IB.
        let inter_lat = if nranks == nnodes {
            HW_LAT[HW_NET][Algo::Tree.idx()][pi]
        } else {
            HW_LAT[HW_NET][ai][pi]
        };
        let log_nodes = f64::from(log2i(u64::from(nnodes)));
        let ppn_m1 = f64::from(nranks / nnodes - 1);
        match a {
            Algo::Ring => {
                let step_lat = HW_LAT[hw][ai][pi];
                if matches!(kind, CollKind::Broadcast | CollKind::Reduce) {
                    // Ring graphs on these systems replay the same channels (sameChannels=1).
                    lat += step_lat;
                } else {
                    let mut net_overhead = 0.0;
                    if nnodes > 1 {
                        net_overhead = if inp.cpu == CpuVendor::Amd { 2.0 } else { 1.0 };
                        if p == Proto::Simple {
                            net_overhead *= 3.0;
                        }
                    }
                    intra_lat = intra_lat.max(net_overhead);
                    let ninter = f64::from(kind.ninter_steps(nnodes));
                    lat += (nsteps - ninter) * intra_lat + ninter * inter_lat;
                }
            }
            Algo::Tree => {
                if kind == CollKind::AllReduce {
                    lat += 2.0 * (ppn_m1 * intra_lat + log_nodes * inter_lat);
                }
            }
            Algo::Nvls => {
                lat = intra_lat;
                if nnodes > 1 {
                    lat += inter_lat;
                }
            }
            Algo::NvlsTree => lat += intra_lat + 2.0 * log_nodes * inter_lat,
            Algo::Pat => {
                if rs_ag {
                    lat += log_nodes * (inter_lat / 3.5) + f64::from(nranks) * 2.8;
                }
            }
            Algo::CollNetDirect | Algo::CollNetChain => {}
        }
        if bus <= 0.0 {
            return Cell {
                bw: 0.0,
                lat,
                reason: Some("zero model bandwidth".into()),
            };
        }
        Cell {
            bw: bus,
            lat,
            reason: None,
        }
    }

    /// tuning.cc ncclTopoGetAlgoTime with numPipeOps = 1.
    fn time(&self, a: Algo, p: Proto, cell: &Cell) -> (f64, f64, f64) {
        let inp = self.input;
        let nbytes = inp.bytes.get();
        let mut bw = cell.bw;
        let mut lat = cell.lat;
        let log_size = log2i(nbytes >> 6);
        if a == Algo::Tree && inp.kind == CollKind::AllReduce && (0..23).contains(&log_size) {
            bw *= TREE_CORRECTION[p.idx()][log_size as usize];
        }
        // NVLSTree correction applies on Blackwell x86 hosts (all hosts modelled are x86).
        if a == Algo::NvlsTree && inp.kind == CollKind::AllReduce && inp.arch == GpuArch::Blackwell && (0..24).contains(&log_size) {
            bw *= TREE_CORRECTION[p.idx()][log_size as usize];
        }
        let per = u64::from(self.graph.comm_channels) * u64::from(inp.nranks);
        if a == Algo::Ring && p == Proto::Simple && inp.nnodes > 1 && inp.kind == CollKind::AllReduce && nbytes / per >= 64 {
            lat *= 1.4; // Ring plateau effect (1.9 before sm80, not modelled).
        }
        let time = lat + nbytes as f64 / (1000.0 * bw);
        (lat, bw, time)
    }

    /// tuning.cc: comm->maxThreads[algo][proto].
    fn max_threads(&self, a: Algo, p: Proto) -> u32 {
        match (a, p) {
            (Algo::Ring, Proto::Simple) => {
                let ring = self.graph.ring;
                if ring.bw_intra_gbps * f64::from(ring.nchannels) <= PCI_BW {
                    256
                } else {
                    NCCL_SIMPLE_MAX_NTHREADS
                }
            }
            (Algo::Tree, Proto::Simple) => NCCL_SIMPLE_MAX_NTHREADS,
            (Algo::Ring | Algo::Tree, Proto::LL) => NCCL_LL_MAX_NTHREADS,
            (Algo::Ring | Algo::Tree, Proto::LL128) => NCCL_LL128_MAX_NTHREADS,
            _ => NCCL_MAX_NTHREADS,
        }
    }

    /// enqueue.cc topoGetAlgoInfo: channels and threads for the winner.
    fn channels_threads(&self, a: Algo, p: Proto) -> (u32, u32) {
        let inp = self.input;
        let nbytes = inp.bytes.get();
        let mut nc = self.graph.comm_channels;
        let mut nt = self.max_threads(a, p);
        let mut threshold = THREAD_THRESHOLD[p.idx()];
        if a == Algo::Ring && p == Proto::LL {
            threshold *= u64::from(inp.nranks);
        }
        let small = |nc: u32, nt: u32| nbytes < u64::from(nc) * u64::from(nt) * threshold;
        match a {
            Algo::Nvls | Algo::NvlsTree => {
                nc = if inp.nnodes > 1 && a == Algo::Nvls {
                    self.graph.nvls_channels.min(self.graph.comm_channels)
                } else {
                    self.graph.nvls_channels
                };
            }
            _ => {
                while small(nc, nt) && nc >= 2 {
                    nc -= 1;
                }
                while small(nc, nt) && nt.is_multiple_of(128) {
                    nt /= 2;
                }
            }
        }
        if p == Proto::Simple {
            match a {
                Algo::Ring => nt += WARP_SIZE, // extra warp for sync
                Algo::Tree => nt += 4 * WARP_SIZE,
                _ => {}
            }
        }
        if nt / WARP_SIZE < 3 {
            nt = 3 * WARP_SIZE;
        }
        if matches!(a, Algo::Tree | Algo::Pat) {
            nt = NCCL_MAX_NTHREADS;
        }
        (nc, nt)
    }
}

/// One NVLS head's share of the NVSwitch reduction (multimem) bandwidth, GB/s: the graph's
/// intra-node speed x nvlsEfficiency x (heads - 1) / heads (NCCL tuning.cc, NVLS bandwidth).
fn nvls_head_gbps(arch: GpuArch, g: &GraphSearch) -> f64 {
    let nch = f64::from(g.nchannels);
    g.bw_intra_gbps * NVLS_EFFICIENCY[arch.cc_idx()] * (nch - 1.0) / nch
}

/// The NVSwitch reduction bandwidth cap of an NVLS all-reduce inside one node, as nccl-tests
/// busbw (GB/s): heads x `nvls_head_gbps` x 2 (NCCL pipelines the reduce-scatter and the
/// all-gather halves). On one node NCCL also bounds each head by the NVLS graph's second speed
/// (its NVLink to the switch; across nodes that speed is the network's, which llmsim simulates).
/// This is the intra-node term of NCCL's NVLS and NVLSTree model; it bounds an NVLS
/// all-reduce's busbw whatever the message size. None without an NVLS graph.
pub fn nvls_reduction_busbw_gbps(arch: GpuArch, graph: &GraphInfo) -> Option<f64> {
    let g = graph.nvls.filter(|g| g.nchannels >= 2)?;
    let mut head = nvls_head_gbps(arch, &g) * 2.0;
    if graph.nnodes == 1 {
        head = head.min(g.bw_inter_gbps);
    }
    let bw = f64::from(g.nchannels) * head;
    (bw > 0.0).then_some(bw)
}

/// NCCL's latency of an NVLS collective inside one node (tuning.cc: NVLS base latency plus the
/// NVLink hardware latency of NVLS, Simple).
pub fn nvls_intra_latency() -> SimTime {
    let (a, p) = (Algo::Nvls.idx(), Proto::Simple.idx());
    SimTime::from_secs_f64((BASE_LAT[a][p] + HW_LAT[HW_NVLINK][a][p]) * 1e-6)
}

/// Chunk size NCCL's `calcCollChunking` uses for one collective: the step size of the
/// protocol's buffer (x chunkSteps for Ring/Simple), shrunk for small NVLS/NVLSTree/Tree-LL128
/// and PAT transfers, aligned to the protocol grain. `nchannels` is the channel count the
/// collective runs on; `graph` supplies nodes, NVLS heads and NVLS channels.
pub fn chunk_size(kind: CollKind, algo: Algo, proto: Proto, bytes: Bytes, nchannels: u32, nranks: u32, graph: &GraphInfo) -> Bytes {
    let nbytes = bytes.get();
    let nch = u64::from(nchannels.max(1));
    let step = proto.buffer_size().get() / NCCL_STEPS;
    // collectives.h: ring AllReduce/AllGather/ReduceScatter use chunkSteps NCCL_STEPS/2;
    // Broadcast/Reduce use 1.
    let chunk_steps = match (algo, proto, kind) {
        (Algo::Ring, Proto::Simple, CollKind::Broadcast | CollKind::Reduce) => 1,
        (Algo::Ring, Proto::Simple, _) => NCCL_STEPS / 2,
        _ => 1,
    };
    let mut chunk = step * chunk_steps;
    match proto {
        Proto::LL => chunk /= 2,
        Proto::LL128 => chunk = chunk / 16 * 15,
        Proto::Simple => {}
    }
    let nnodes = u64::from(graph.nnodes.max(1));
    let heads = graph.nvls.map_or(1, |g| u64::from(g.nchannels.max(1)));
    match algo {
        Algo::Nvls => {
            let mut max_chunk = NVLS_CHUNK_SIZE;
            // enqueue.cc: multi-node NVLS with low model bandwidth uses 32 KiB (the model
            // bandwidth is not at hand here; the multi-node NVLS case needs CollNet).
            if nnodes > 1 {
                max_chunk = 32768;
            }
            chunk = chunk.min(max_chunk);
            let ops = nch * heads;
            if nbytes < 64 * ops * chunk && chunk > 65536 {
                chunk = 65536;
            }
            if nbytes < 8 * ops * chunk && chunk > 32768 {
                chunk = 32768;
            }
            if nbytes < 2 * ops * chunk && chunk > 16384 {
                chunk = 16384;
            }
        }
        Algo::NvlsTree => {
            let ops = nch * heads;
            // nvls.cc: treeMaxChunkSize is 64 KiB from 4 nodes, else the NVLS chunk size.
            let tree_max = if nnodes >= 4 { 65536 } else { NVLS_CHUNK_SIZE };
            chunk = NVLS_CHUNK_SIZE.min(tree_max);
            for (mult, floor) in [(32, 262144), (16, 131072), (4, 65536), (1, 32768)] {
                if nbytes < mult * ops * chunk && chunk > floor {
                    chunk = floor;
                }
            }
        }
        Algo::Tree if proto == Proto::LL128 => {
            let ppn = f64::from(nranks.max(1)) / nnodes as f64;
            let nsteps = 1.0 + f64::from(log2i(nnodes)) + 0.1 * ppn;
            while ((nbytes / (nch * chunk)) as f64) < nsteps * 64.0 / ppn && chunk > 131072 {
                chunk /= 2;
            }
            while ((nbytes / (nch * chunk)) as f64) < nsteps * 16.0 / ppn && chunk > 32768 {
                chunk /= 2;
            }
        }
        Algo::Pat => {
            let mult = if kind == CollKind::AllGather { 32 } else { 16 };
            while chunk * nch * mult > nbytes && chunk > 65536 {
                chunk /= 2;
            }
        }
        _ => {}
    }
    Bytes(chunk / proto.grain() * proto.grain())
}

/// Reproduces NCCL's choice of algorithm, protocol and channels for `input`.
///
/// # Errors
/// [`TuningError::InvalidField`] for inconsistent sizes; [`TuningError::AlgoNotAllowed`] /
/// [`TuningError::ProtoNotAllowed`] for overrides NCCL cannot run for this collective;
/// [`TuningError::NoCandidate`] when every remaining pair is disabled on this system.
pub fn decide(input: &TuningInput) -> Result<TuningDecision, TuningError> {
    let graph = input.graph()?;
    let kind = input.kind;

    if let Some(algos) = &input.algo_override {
        for &a in algos {
            if !kind.implemented_algos().contains(&a) {
                return Err(TuningError::AlgoNotAllowed {
                    kind,
                    algo: a,
                    valid: join(kind.implemented_algos()),
                });
            }
        }
    }
    let algo_allowed = |a: Algo| input.algo_override.as_ref().is_none_or(|v| v.contains(&a));
    let proto_allowed = |p: Proto| input.proto_override.as_ref().is_none_or(|v| v.contains(&p));
    if let Some(protos) = &input.proto_override {
        let algos: Vec<Algo> = kind.implemented_algos().iter().copied().filter(|&a| algo_allowed(a)).collect();
        let simple_only = |a: Algo| matches!(a, Algo::Nvls | Algo::NvlsTree | Algo::Pat);
        let valid: Vec<Proto> = Proto::ALL
            .into_iter()
            .filter(|&p| algos.iter().any(|&a| p == Proto::Simple || !simple_only(a)))
            .collect();
        if let Some(&bad) = protos.iter().find(|p| !valid.contains(p))
            && !protos.iter().any(|p| valid.contains(p))
        {
            return Err(TuningError::ProtoNotAllowed {
                kind,
                proto: bad,
                algos: join(&algos),
                valid: join(&valid),
            });
        }
    }

    let model = Model { input, graph: &graph };
    let mut table = Vec::with_capacity(NALGO * NPROTO);
    let mut best: Option<(Algo, Proto, f64)> = None;
    for a in Algo::ALL {
        for p in Proto::ALL {
            let mut cell = model.cell(a, p);
            if cell.reason.is_none() && !algo_allowed(a) {
                cell.reason = Some("excluded by algo_override (NCCL_ALGO)".into());
            }
            if cell.reason.is_none() && !proto_allowed(p) {
                cell.reason = Some("excluded by proto_override (NCCL_PROTO)".into());
            }
            let cost = if input.nranks == 1 {
                // enqueue.cc: a single rank costs nothing and runs Ring/Simple.
                let on = a == Algo::Ring && p == Proto::Simple;
                AlgoCost {
                    algo: a,
                    proto: p,
                    enabled: on,
                    reason_if_disabled: (!on).then(|| "single rank: Ring/Simple copy".into()),
                    lat_us: 0.0,
                    bw_gbps: 0.0,
                    time_us: if on { 0.0 } else { f64::INFINITY },
                }
            } else if let Some(reason) = cell.reason {
                AlgoCost {
                    algo: a,
                    proto: p,
                    enabled: false,
                    reason_if_disabled: Some(reason),
                    lat_us: cell.lat,
                    bw_gbps: cell.bw,
                    time_us: f64::INFINITY,
                }
            } else {
                let (lat, bw, time) = model.time(a, p, &cell);
                AlgoCost {
                    algo: a,
                    proto: p,
                    enabled: true,
                    reason_if_disabled: None,
                    lat_us: lat,
                    bw_gbps: bw,
                    time_us: time,
                }
            };
            // enqueue.cc topoGetAlgoInfo: strict '<', so the first minimum in NCCL order wins.
            if cost.enabled && best.is_none_or(|(_, _, t)| cost.time_us < t) {
                best = Some((a, p, cost.time_us));
            }
            table.push(cost);
        }
    }
    let Some((algo, proto, time_us)) = best else {
        let reasons = table
            .iter()
            .filter(|c| kind.implemented_algos().contains(&c.algo) && algo_allowed(c.algo) && proto_allowed(c.proto))
            .map(|c| format!("{}/{}: {}", c.algo, c.proto, c.reason_if_disabled.as_deref().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(TuningError::NoCandidate { kind, reasons });
    };

    let (nchannels, nthreads) = if input.nranks == 1 {
        (1, NCCL_MAX_NTHREADS)
    } else {
        model.channels_threads(algo, proto)
    };
    let chunk_bytes = chunk_size(kind, algo, proto, input.bytes, nchannels, input.nranks, &graph);
    let algbw = if time_us > 0.0 {
        input.bytes.as_f64() / (time_us * 1000.0)
    } else {
        0.0
    };
    Ok(TuningDecision {
        kind,
        bytes: input.bytes,
        nranks: input.nranks,
        algo,
        proto,
        nchannels,
        nthreads,
        time: SimTime::from_us_f64(time_us),
        time_us,
        algbw_gbps: algbw,
        predicted_busbw_gbps: algbw * busbw_factor(kind, input.nranks),
        chunk_bytes,
        table,
        graph,
        nccl_version: NCCL_VERSION,
    })
}

impl TuningDecision {
    /// The runner-up among enabled cells, if any.
    pub fn runner_up(&self) -> Option<&AlgoCost> {
        self.table
            .iter()
            .filter(|c| c.enabled && !(c.algo == self.algo && c.proto == self.proto))
            .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
    }

    /// Human-readable cost table and why the winner won (what `llmsim collective` prints).
    pub fn explain(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TuningDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.graph;
        writeln!(
            f,
            "NCCL {} model: {} of {} on {} ranks ({} nodes x {} GPUs)",
            self.nccl_version, self.kind, self.bytes, self.nranks, g.nnodes, g.ppn
        )?;
        writeln!(
            f,
            "graphs ({} speeds): ring {}ch x {:.1}/{:.1} GB/s, tree {}ch x {:.1}/{:.1} GB/s, nvls {}; \
             comm channels {}, nvls channels {}",
            g.speed_array,
            g.ring.nchannels,
            g.ring.bw_intra_gbps,
            g.ring.bw_inter_gbps,
            g.tree.nchannels,
            g.tree.bw_intra_gbps,
            g.tree.bw_inter_gbps,
            g.nvls.map_or("none".to_string(), |n| format!(
                "{}ch x {:.1}/{:.1} GB/s",
                n.nchannels, n.bw_intra_gbps, n.bw_inter_gbps
            )),
            g.comm_channels,
            g.nvls_channels
        )?;
        writeln!(
            f,
            "{:<14} {:<7} {:>10} {:>10} {:>12}  note",
            "algo", "proto", "lat(us)", "bw(GB/s)", "time(us)"
        )?;
        for c in &self.table {
            let win = c.algo == self.algo && c.proto == self.proto;
            if c.enabled {
                writeln!(
                    f,
                    "{:<14} {:<7} {:>10.2} {:>10.2} {:>12.2}  {}",
                    c.algo.nccl_name(),
                    c.proto.nccl_name(),
                    c.lat_us,
                    c.bw_gbps,
                    c.time_us,
                    if win { "<= chosen" } else { "" }
                )?;
            } else {
                writeln!(
                    f,
                    "{:<14} {:<7} {:>10} {:>10} {:>12}  off: {}",
                    c.algo.nccl_name(),
                    c.proto.nccl_name(),
                    "-",
                    "-",
                    "-",
                    c.reason_if_disabled.as_deref().unwrap_or("")
                )?;
            }
        }
        write!(
            f,
            "chosen {}/{}: {:.2} us, algbw {:.1} GB/s, busbw {:.1} GB/s, {} channels x {} threads, chunk {}",
            self.algo,
            self.proto,
            self.time_us,
            self.algbw_gbps,
            self.predicted_busbw_gbps,
            self.nchannels,
            self.nthreads,
            self.chunk_bytes
        )?;
        if let Some(r) = self.runner_up() {
            let lat_bound = r.lat_us > r.time_us - r.lat_us;
            write!(
                f,
                "\nwhy: fastest predicted time; runner-up {}/{} takes {:.2} us ({:.2}x), \
                 its time is {}-dominated",
                r.algo,
                r.proto,
                r.time_us,
                r.time_us / self.time_us.max(f64::MIN_POSITIVE),
                if lat_bound { "latency" } else { "bandwidth" }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nccl_spellings() {
        for s in ["all-reduce", "allreduce", "all_reduce", "AllReduce"] {
            assert_eq!(s.parse::<CollKind>().unwrap(), CollKind::AllReduce);
        }
        assert_eq!("reduce_scatter".parse::<CollKind>().unwrap(), CollKind::ReduceScatter);
        assert_eq!("Ring".parse::<Algo>().unwrap(), Algo::Ring);
        assert_eq!("tree".parse::<Algo>().unwrap(), Algo::Tree);
        assert_eq!("nvlstree".parse::<Algo>().unwrap(), Algo::NvlsTree);
        assert_eq!("collnet_direct".parse::<Algo>().unwrap(), Algo::CollNetDirect);
        assert_eq!("LL128".parse::<Proto>().unwrap(), Proto::LL128);
        assert_eq!("simple".parse::<Proto>().unwrap(), Proto::Simple);
        let e = "allreduc".parse::<CollKind>().unwrap_err().to_string();
        assert!(e.contains("kind") && e.contains("all-gather"), "{e}");
        let e = "ring2".parse::<Algo>().unwrap_err().to_string();
        assert!(e.contains("NVLSTree"), "{e}");
    }

    #[test]
    fn log2i_matches_nccl() {
        assert_eq!(log2i(0), -1);
        assert_eq!(log2i(1), 0);
        assert_eq!(log2i(63), 5);
        assert_eq!(log2i(64), 6);
    }

    #[test]
    fn buffer_and_chunk_constants() {
        assert_eq!(Proto::LL.buffer_size(), Bytes::kib(512));
        assert_eq!(Proto::LL128.buffer_size(), Bytes(4_915_200));
        assert_eq!(Proto::Simple.buffer_size(), Bytes::mib(4));
        let g = TuningInput::h100(CollKind::AllReduce, Bytes::gib(1), 16).graph().unwrap();
        let big = Bytes::gib(1);
        // 4 MiB / 8 steps x chunkSteps 4.
        assert_eq!(
            chunk_size(CollKind::AllReduce, Algo::Ring, Proto::Simple, big, 16, 16, &g),
            Bytes::mib(2)
        );
        // 512 KiB / 8 steps / 2 (half of each LL line is flags).
        assert_eq!(
            chunk_size(CollKind::AllReduce, Algo::Ring, Proto::LL, big, 16, 16, &g),
            Bytes::kib(32)
        );
        // 4,915,200 / 8 x 15/16, rounded down to the 1920 B grain.
        let ll128 = 4_915_200 / 8 / 16 * 15;
        assert_eq!(
            chunk_size(CollKind::AllReduce, Algo::Ring, Proto::LL128, big, 16, 16, &g),
            Bytes(ll128 / 1920 * 1920)
        );
        // Broadcast rings use chunkSteps 1.
        assert_eq!(
            chunk_size(CollKind::Broadcast, Algo::Ring, Proto::Simple, big, 16, 16, &g),
            Bytes::kib(512)
        );
    }
}
