//! The GPU catalog: peak dense FLOP/s per dtype, HBM bandwidth and capacity, NVLink bandwidth,
//! each entry with the public document its figures come from.
//!
//! Conventions:
//! - Tensor-core peaks are **dense** (no 2:4 sparsity): NVIDIA datasheets print the sparse figure
//!   with a footnote; the dense one is half of it.
//! - `fp32` is the non-tensor (CUDA-core FMA) peak; `tf32`, `bf16`, `fp16`, `fp8` are tensor-core
//!   peaks.
//! - `memory_bytes` is the capacity `nvidia-smi` reports as `memory.total` on the board (H100 80GB:
//!   81,559 MiB, not 80·10^9 bytes): what PyTorch can allocate into, minus the CUDA context, which
//!   the memory model counts in its workspace. An OOM check on the datasheet figure (74.5 GiB for
//!   an H100) rejected configurations that really ran (issue 28).
//! - `nvlink_bandwidth` is **per GPU, per direction**: half the bidirectional figure NVIDIA quotes
//!   (H100: 900 GB/s bidirectional -> 450 GB/s each way).
//! - `host_bandwidth` is the GPU's link to host memory, **per direction**, from the same
//!   datasheets: PCIe Gen3 x16 32 GB/s bidirectional (V100), Gen4 64 GB/s (A100), Gen5 128 GB/s
//!   (H100, H800, H20, H200, B200, B300 on its Gen5 hosts, MI300X): half each way. GB200's and
//!   GB300's GPUs reach Grace's memory over
//!   NVLink-C2C, 900 GB/s bidirectional per Grace CPU and shared by its two GPUs (GB200
//!   datasheet): 225 GB/s per GPU and direction, assuming an even split. These are link peaks;
//!   pinned-memory copies reach less (PCIe: protocol overhead), so offload times are a lower bound.
//! - A dtype a GPU has no tensor cores for is `None` and falls back (see [`GpuSpec::peak_flops`]):
//!   V100 has FP16 tensor cores only, so BF16 runs at the FP16 peak (Megatron trains in FP16 on
//!   V100: same bytes, same FLOPs) and TF32 at the FP32 CUDA-core peak (what PyTorch does with
//!   `allow_tf32` on sm70).
//! - `arch` is the NCCL tuning architecture of `llmsim-ccl`, which models Ampere, Hopper and
//!   Blackwell only. V100 (Volta) and MI300X (CDNA3) are mapped to `Ampere`: no NVLS, no stream-K
//!   GEMM schedule, FlashAttention-2-class attention scaled by peak. For V100 this is NCCL's
//!   nearest modelled generation (25 GB/s NVLink lanes, as NVLink2); for MI300X, RCCL and its
//!   Infinity Fabric mesh are not modelled at all: treat its collective times as rough.
//! - `tdp` is the board power the peaks and efficiency rows stand for: the datasheet's maximum
//!   (default) power limit of that board. Given only where a datasheet states it; H800 and H20
//!   have none public, so their power cannot be capped. A `power_limit` below it (a custom GPU)
//!   slows compute-bound kernels ([`crate::power`]).

use llmsim_core::GpuArch;
use llmsim_core::{Bandwidth, Power};

use crate::error::ComputeError;
use crate::op::DType;

/// Peak dense throughput per dtype, in TFLOP/s (10^12 FLOP/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakTflops {
    /// Non-tensor FP32.
    pub fp32: f64,
    /// Tensor-core TF32, dense; `None` where the GPU has no TF32 tensor cores (V100).
    pub tf32: Option<f64>,
    /// Tensor-core BF16, dense; `None` where the GPU has no BF16 tensor cores (V100).
    pub bf16: Option<f64>,
    /// Tensor-core FP16, dense.
    pub fp16: f64,
    /// Tensor-core FP8, dense; `None` where the GPU has no FP8 tensor cores (A100).
    pub fp8: Option<f64>,
    /// Tensor-core FP4 (NVFP4: E2M1 with E4M3 block scales), dense; `None` before Blackwell.
    pub fp4: Option<f64>,
}

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSpec {
    /// Canonical catalog name: "A100", "A100-40GB", "H100", ... A second product of a family
    /// is named `FAMILY-CAPACITY` and chosen by its capacity token (see [`gpu`]).
    pub name: &'static str,
    /// Board variant the figures are for, e.g. "SXM4 80GB".
    pub variant: &'static str,
    /// Peak dense TFLOP/s per dtype. Prefer [`GpuSpec::peak_flops`], which handles fallbacks.
    pub peak_tflops: PeakTflops,
    /// Peak HBM bandwidth in bytes/s (10^12 bytes/s = 1 TB/s).
    pub hbm_bandwidth_bytes_per_s: f64,
    /// HBM capacity in bytes, as `nvidia-smi` reports it (`memory.total`).
    pub memory_bytes: u64,
    /// NVLink bandwidth per GPU and per direction (half the bidirectional datasheet figure).
    pub nvlink_bandwidth: Bandwidth,
    /// Host link (GPU <-> CPU memory) bandwidth per direction, the datasheet figure: PCIe or
    /// NVLink-C2C. Activation CPU offloading (`training.cpu_offload_layers`) copies over it.
    /// `None` for a custom GPU that declares none (offloading then asks for it).
    pub host_bandwidth: Option<Bandwidth>,
    /// The architecture NCCL's tuning model keys its latencies and bandwidths on.
    pub arch: GpuArch,
    /// Streaming multiprocessors: GEMM tiles run in waves of this many
    /// ([`crate::gemm`], wave quantization).
    pub sm_count: u32,
    /// Maximum SM clock in MHz (`nvidia-smi -q`, "Max Clocks: SM"), the clock a kernel that is
    /// bound by its SMs' issue rate and latency rather than by HBM runs at: the Mamba-2 SSD scan
    /// ([`crate::ssd`]). `None` where no capture or datasheet gives it for an NVIDIA SM (the SSD
    /// is then timed by its bandwidth fraction alone).
    pub sm_clock_mhz: Option<u32>,
    /// Extra capacity tokens accepted in names ("80gb"); other sizes are other products.
    pub memory_tokens: &'static [&'static str],
    /// The public documents the figures come from.
    pub source: &'static str,
    /// The catalog GPU whose efficiency rows (`data/efficiency.csv`) apply where this one has none
    /// of its own: the same silicon (A100 40GB -> A100) or the `base` of a custom GPU.
    pub base: Option<&'static str>,
    /// Board power the figures stand for (the datasheet's maximum, default power limit); `None`
    /// where no datasheet states it.
    pub tdp: Option<Power>,
    /// Power limit set on the board (`nvidia-smi -pl`); `None`: the TDP. Only a custom GPU sets it.
    pub power_limit: Option<Power>,
}

impl GpuSpec {
    /// This GPU's name, then its [`GpuSpec::base`] chain (a custom GPU's catalog base may have a
    /// base of its own: A100-40GB -> A100), at most five names: where the GPU has no calibration
    /// rows of its own, the next name's apply.
    pub fn lineage(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name)
            .chain(std::iter::successors(self.base, |b| find(b).and_then(|g| g.base)))
            .take(5)
    }

    /// Whether the GPU has native (tensor-core) support for `dtype`. MXFP8 needs Blackwell's
    /// block-scaled MMA besides FP8 tensor cores.
    pub fn supports(&self, dtype: DType) -> bool {
        match dtype {
            DType::Fp8 => self.peak_tflops.fp8.is_some(),
            DType::Mxfp8 => self.arch == GpuArch::Blackwell && self.peak_tflops.fp8.is_some(),
            // Block-scaled FP8 GEMMs need FP8 tensor cores (Transformer Engine:
            // compute capability 9.0 or newer).
            DType::Fp8Block => self.arch != GpuArch::Ampere && self.peak_tflops.fp8.is_some(),
            DType::Fp4 => self.peak_tflops.fp4.is_some(),
            DType::Tf32 => self.peak_tflops.tf32.is_some(),
            DType::Bf16 => self.peak_tflops.bf16.is_some(),
            DType::Fp32 | DType::Fp16 => true,
        }
    }

    /// Peak dense FLOP/s for `dtype`, with fallbacks where the GPU lacks the tensor cores:
    /// FP8 runs at the BF16 peak, BF16 at the FP16 peak, TF32 at the FP32 peak, FP4 at the FP8
    /// peak (a training scenario asking for BF16, FP8 or FP4 on such a GPU is rejected before
    /// this: the frameworks refuse or only emulate them there).
    /// MXFP8 runs at the FP8 peak: the block scales are applied inside the MMA; FP8 block scaling
    /// too (its lower rate on Hopper is in its efficiency rows).
    pub fn peak_flops(&self, dtype: DType) -> f64 {
        let p = &self.peak_tflops;
        let bf16 = p.bf16.unwrap_or(p.fp16);
        let tflops = match dtype {
            DType::Fp32 => p.fp32,
            DType::Tf32 => p.tf32.unwrap_or(p.fp32),
            DType::Bf16 => bf16,
            DType::Fp16 => p.fp16,
            DType::Fp8 | DType::Mxfp8 | DType::Fp8Block => p.fp8.unwrap_or(bf16),
            DType::Fp4 => p.fp4.or(p.fp8).unwrap_or(bf16),
        };
        tflops * 1e12
    }

    /// Fraction of its rate at TDP that a compute-bound kernel sustains under the board's power
    /// limit ([`crate::power::compute_rate_fraction`]): 1 without a limit below the TDP.
    pub fn compute_rate_fraction(&self) -> f64 {
        match (self.power_limit, self.tdp) {
            (Some(limit), Some(tdp)) => crate::power::compute_rate_fraction(limit, tdp),
            _ => 1.0,
        }
    }

    /// HBM bandwidth as a [`Bandwidth`] (bits/s).
    pub fn hbm_bandwidth(&self) -> Bandwidth {
        Bandwidth::from_bps_f64(self.hbm_bandwidth_bytes_per_s * 8.0)
    }
}

const TB: f64 = 1e12;
const MIB: u64 = 1 << 20;

static CATALOG: [GpuSpec; 12] = [
    GpuSpec {
        name: "V100",
        variant: "SXM2 32GB",
        peak_tflops: PeakTflops {
            fp32: 15.7,
            tf32: None,
            bf16: None,
            fp16: 125.0,
            fp8: None,
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 0.9 * TB,
        memory_bytes: 32768 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(150),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(16)),
        arch: GpuArch::Ampere,
        sm_count: 80,
        // Volta whitepaper (Tesla V100 SXM2: GPU boost clock 1530 MHz).
        sm_clock_mhz: Some(1530),
        memory_tokens: &["32gb"],
        base: None,
        // NVIDIA V100 datasheet: SXM2 max power consumption 300 W.
        tdp: Some(Power::from_watts(300)),
        power_limit: None,
        source: "NVIDIA, 'Programming Tensor Cores in CUDA 9' (V100: 125 tensor TFLOPS, FP16 only; no BF16/TF32/FP8), \
                 https://developer.nvidia.com/blog/programming-tensor-cores-cuda-9/; Cornell Virtual Workshop 'GPU example: \
                 Tesla V100' (80 SMs, 1.53 GHz, FP32 15.7 TFLOPS); NVIDIA V100 datasheet (SXM2: 32 GB HBM2, 900 GB/s, \
                 NVLink 300 GB/s bidirectional); memory.total 32768 MiB as nvidia-smi prints it for a Tesla V100-SXM2 32GB \
                 (github.com/Wan-Video/Wan2.1 issue 5). NCCL arch mapped to Ampere (Volta is not modelled)",
    },
    GpuSpec {
        name: "A100",
        variant: "SXM4 80GB",
        peak_tflops: PeakTflops {
            fp32: 19.5,
            tf32: Some(156.0),
            bf16: Some(312.0),
            fp16: 312.0,
            fp8: None,
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 2.039 * TB,
        memory_bytes: 81920 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(300),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(32)),
        arch: GpuArch::Ampere,
        sm_count: 108,
        // nvidia-smi -q of an A100-SXM4 (NVIDIA/k8s-test-infra 5f8956a, tests/e2e/go/assertions/
        // nvidiasmi/testdata/hardware/qx-a100.xml: Max Clocks SM 1410 MHz); the A100 whitepaper's boost clock.
        sm_clock_mhz: Some(1410),
        memory_tokens: &["80gb"],
        base: None,
        // NVIDIA A100 datasheet: SXM max TDP 400 W.
        tdp: Some(Power::from_watts(400)),
        power_limit: None,
        source: "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column; TF32/BF16/FP16 dense = sparse/2), \
                 https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; \
                 NVLink 600 GB/s bidirectional",
    },
    GpuSpec {
        name: "A100-40GB",
        variant: "SXM4 40GB",
        peak_tflops: PeakTflops {
            fp32: 19.5,
            tf32: Some(156.0),
            bf16: Some(312.0),
            fp16: 312.0,
            fp8: None,
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 1.555 * TB,
        memory_bytes: 40960 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(300),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(32)),
        arch: GpuArch::Ampere,
        sm_count: 108,
        // The same capture (qx-a100.xml is an A100-SXM4-40GB): 1410 MHz.
        sm_clock_mhz: Some(1410),
        memory_tokens: &["40gb"],
        base: Some("A100"),
        // NVIDIA A100 datasheet: SXM max TDP 400 W.
        tdp: Some(Power::from_watts(400)),
        power_limit: None,
        source: "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM column: compute as the 80GB, 40 GB HBM2 at 1,555 GB/s, \
                 NVLink 600 GB/s bidirectional), \
                 https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; \
                 memory.total 40960 MiB as nvidia-smi reports it (github.com/modal-labs/modal-client pull 2797)",
    },
    GpuSpec {
        name: "H100",
        variant: "SXM5 80GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: Some(494.7),
            bf16: Some(989.4),
            fp16: 989.4,
            fp8: Some(1978.9),
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 3.35 * TB,
        memory_bytes: 81559 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Hopper,
        sm_count: 132,
        // nvidia-smi -q of an H100 80GB HBM3 (k8s-test-infra 5f8956a, qx-h100.xml): Max Clocks SM 1980 MHz.
        sm_clock_mhz: Some(1980),
        memory_tokens: &["80gb"],
        base: None,
        // NVIDIA H100 datasheet: SXM max TDP up to 700 W (configurable).
        tdp: Some(Power::from_watts(700)),
        power_limit: None,
        source: "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: FP16/BF16 989.4, FP8 1978.9, TF32 494.7, \
                 FP32 66.9 dense TFLOPS) and NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 80 GB, 3.35 TB/s, NVLink 900 GB/s \
                 bidirectional), https://www.nvidia.com/en-us/data-center/h100/",
    },
    GpuSpec {
        name: "H800",
        variant: "SXM5 80GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: Some(494.7),
            bf16: Some(989.4),
            fp16: 989.4,
            fp8: Some(1978.9),
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 3.35 * TB,
        memory_bytes: 81559 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(200),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Hopper,
        sm_count: 132,
        // H100 silicon: the H100 capture's 1980 MHz (assumed; no capture of an H800).
        sm_clock_mhz: Some(1980),
        memory_tokens: &["80gb"],
        base: None,
        // No public datasheet states its TDP: the power cannot be capped.
        tdp: None,
        power_limit: None,
        source: "H100 SXM5 silicon with NVLink cut to 400 GB/s bidirectional (export variant; no public NVIDIA SXM datasheet): \
                 compute and HBM as the H100 SXM whitepaper/datasheet; NVLink figure as stated in DeepSeek, \
                 'Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI Architectures' (ISCA 2025)",
    },
    GpuSpec {
        name: "H20",
        variant: "SXM 96GB",
        peak_tflops: PeakTflops {
            fp32: 44.0,
            tf32: Some(74.0),
            bf16: Some(148.0),
            fp16: 148.0,
            fp8: Some(296.0),
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 4.0 * TB,
        memory_bytes: 97871 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Hopper,
        sm_count: 78,
        // GH100 silicon: the H100 capture's 1980 MHz (assumed; no capture of an H20).
        sm_clock_mhz: Some(1980),
        memory_tokens: &["96gb"],
        base: None,
        // No public datasheet states its TDP: the power cannot be capped.
        tdp: None,
        power_limit: None,
        source: "NVIDIA HGX H20 specification as distributed to OEMs and reported by the press (no public NVIDIA datasheet): \
                 BF16/FP16 148, FP8 296, TF32 74, FP32 44 dense TFLOPS; 96 GB HBM3 at 4.0 TB/s; NVLink 900 GB/s bidirectional",
    },
    GpuSpec {
        name: "H200",
        variant: "SXM 141GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: Some(494.7),
            bf16: Some(989.4),
            fp16: 989.4,
            fp8: Some(1978.9),
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 4.8 * TB,
        memory_bytes: 143771 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Hopper,
        sm_count: 132,
        // GH100 silicon: the H100 capture's 1980 MHz (assumed; no capture of an H200).
        sm_clock_mhz: Some(1980),
        memory_tokens: &["141gb"],
        base: None,
        // NVIDIA H200 datasheet: SXM max TDP up to 700 W (configurable).
        tdp: Some(Power::from_watts(700)),
        power_limit: None,
        source: "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column: compute as H100 SXM, 141 GB HBM3e, 4.8 TB/s, \
                 NVLink 900 GB/s bidirectional), https://www.nvidia.com/en-us/data-center/h200/",
    },
    GpuSpec {
        name: "B200",
        variant: "HGX B200 (1000 W) 180GB",
        peak_tflops: PeakTflops {
            fp32: 80.0,
            tf32: Some(1100.0),
            bf16: Some(2250.0),
            fp16: 2250.0,
            fp8: Some(4500.0),
            fp4: Some(9000.0),
        },
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        memory_bytes: 183359 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(900),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Blackwell,
        sm_count: 148,
        // nvidia-smi -q of a B200 (k8s-test-infra 5f8956a, qx-b200.xml): Max Clocks SM 1965 MHz.
        sm_clock_mhz: Some(1965),
        memory_tokens: &["180gb", "192gb"],
        base: None,
        // HGX B200 max TDP configurable up to 1,000 W (NVIDIA Blackwell specifications table; the variant above).
        tdp: Some(Power::from_watts(1000)),
        power_limit: None,
        source: "NVIDIA HGX B200 datasheet, per GPU, dense = sparse/2 (FP8 4.5 PF, FP16/BF16 2.25 PF, TF32 1.1 PF, FP4 9 PF: \
                 144 PF sparse per 8 GPUs, 9000 in the TFLOPS table of stas00/ml-engineering at 744d01e; \
                 the DGX/GB200 sheets quote 2.5 PF BF16 at higher power); DGX B200 datasheet: 1,440 GB and 64 TB/s HBM3e \
                 per 8 GPUs (180 GB, 8 TB/s each); NVLink 5 1.8 TB/s bidirectional, https://www.nvidia.com/en-us/data-center/hgx/",
    },
    GpuSpec {
        name: "GB200",
        variant: "GB200 NVL72, per GPU (1200 W) 186GB",
        peak_tflops: PeakTflops {
            fp32: 90.0,
            tf32: Some(1250.0),
            bf16: Some(2500.0),
            fp16: 2500.0,
            fp8: Some(5000.0),
            fp4: Some(10000.0),
        },
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        memory_bytes: 189471 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(900),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(225)),
        arch: GpuArch::Blackwell,
        sm_count: 152,
        // nvidia-smi -q of a GB200 (k8s-test-infra 5f8956a, qx-gb200.xml): Max Clocks SM 2062 MHz.
        sm_clock_mhz: Some(2062),
        memory_tokens: &["186gb"],
        base: None,
        // GB200 NVL72 max TDP configurable up to 1,200 W (same table; the variant above).
        tdp: Some(Power::from_watts(1200)),
        power_limit: None,
        source: "NVIDIA GB200 NVL72 datasheet, per Blackwell GPU at 1200 W, dense = sparse/2 (FP8 5 PF, FP16/BF16 2.5 PF, \
                 TF32 1.25 PF, FP32 90 TFLOPS; FP4 10 PF: 1,440 PF sparse per 72 GPUs) as tabulated at \
                 glennklockwood.com/garden/processors/B200; 186 GB HBM3e at \
                 8 TB/s (stas00/ml-engineering compute/accelerator/README.md, 744d01e); memory.total 189,471 MiB as nvidia-smi \
                 prints it on GB200 (public nvidia-smi dumps, drivers 580.95.05/580.126.09/595.58.03; Azure/AI-benchmarking-guide \
                 Azure_Results/ND_GB200_v6_results.md at fa799957: \"NVIDIA GB200 185GB\"; PyTorch OOM messages show 184.31 GiB, \
                 the same ~0.7 GiB CUDA context below it as on H100 and B200); NVLink 5 1.8 TB/s bidirectional; 152 SMs enabled \
                 (4 more than B200's 148): cuDNN's SDPA benchmark records GB200's dense BF16 MMA peak as 2,568 TFLOP/s \
                 (FLOP/clk/SM x CUDA multi_processor_count x sampled SM clock; NVIDIA/cudnn-frontend at 20dc108, \
                 benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260813_111214.csv, \
                 peak_mma_tflops) = 152 x 8,192 x 2,062 MHz, and 2,062 MHz is GB200's maximum SM clock (nvidia-smi -q, \
                 NVIDIA/k8s-test-infra tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb200.xml at 5f8956a; \
                 148 SMs would need 2,118 MHz)",
    },
    GpuSpec {
        name: "B300",
        variant: "HGX B300 (Blackwell Ultra SXM6 AC) 288GB",
        peak_tflops: PeakTflops {
            fp32: 80.0,
            tf32: Some(1125.0),
            bf16: Some(2250.0),
            fp16: 2250.0,
            fp8: Some(4500.0),
            fp4: Some(12600.0),
        },
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        memory_bytes: 275040 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(900),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Blackwell,
        sm_count: 148,
        // The SM103 die of GB300: its capture's 2070 MHz (assumed; no capture of a B300).
        sm_clock_mhz: Some(2070),
        memory_tokens: &["288gb", "ac"],
        base: None,
        // 1,000 W maximum TGP (NVIDIA DGX B300 user guide, as cited in the source).
        tdp: Some(Power::from_watts(1000)),
        power_limit: None,
        source: "Dense per-GPU peaks of the TFLOPS table in stas00/ml-engineering compute/accelerator/README.md at 744d01e \
                 (from the NVIDIA DGX B300 datasheet: FP32 80, TF32 1125, FP16/BF16 2250, FP8 4500 TFLOPS, the HGX B200 \
                 figures; NVIDIA's HGX page prints the 8-GPU sparse sums, FP8 72 and BF16 36 PFLOPS = 2x dense). Dense FP4 \
                 is where Blackwell Ultra differs: 12,600 in that table's fp4 column (B200: 9,000); its nvfp4 column has \
                 the full-power chip's 15 PF of NVIDIA's blog, and the DGX B300 datasheet's 108 PF dense per 8 GPUs would \
                 give 13.5: the HGX figure is uncertain within that range. 288 GB HBM3e (8 x 12-Hi stacks) at 8 TB/s and NVLink 5 1.8 TB/s bidirectional: \
                 NVIDIA Technical Blog, 'Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era' (2025-08). \
                 memory.total 275,040 MiB as nvidia-smi prints it for 'NVIDIA B300 SXM6 AC' (public nvidia-smi dumps, drivers \
                 580.82.07/580.95.05/580.126.09/580.159.04); 148 SMs enabled (CUDA multi_processor_count in the same public \
                 logs; the full die has 160). Host link: the GPU has a PCIe Gen6 interface but DGX B300's Xeon 6 hosts are \
                 PCIe Gen5 (64 GB/s each way). Not modelled: Blackwell Ultra's doubled SFU (MUFU.EX2) rate for attention \
                 softmax (10.7 vs 5 TeraExponentials/s, same blog); the cut INT8/FP64 rates; power (1,000 W \
                 maximum TGP, NVIDIA DGX B300 user guide 'Power capping', as tabulated in the same README)",
    },
    GpuSpec {
        name: "GB300",
        variant: "GB300 NVL72, per GPU (1400 W) 288GB",
        peak_tflops: PeakTflops {
            fp32: 80.0,
            tf32: Some(1250.0),
            bf16: Some(2500.0),
            fp16: 2500.0,
            fp8: Some(5000.0),
            fp4: Some(15000.0),
        },
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        memory_bytes: 284208 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(900),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(225)),
        arch: GpuArch::Blackwell,
        sm_count: 152,
        // nvidia-smi -q of a GB300 (k8s-test-infra 5f8956a, qx-gb300.xml): Max Clocks SM 2070 MHz.
        sm_clock_mhz: Some(2070),
        memory_tokens: &["288gb"],
        base: Some("GB200"),
        // 1,400 W (NVIDIA Technical Blog, Blackwell Ultra, as cited in the source).
        tdp: Some(Power::from_watts(1400)),
        power_limit: None,
        source: "Dense per-GPU peaks of the TFLOPS table in stas00/ml-engineering compute/accelerator/README.md at 744d01e \
                 (NVIDIA GB300 NVL72 specifications, https://www.nvidia.com/en-us/data-center/gb300-nvl72/: FP8 720 PF, \
                 FP16/BF16 360 PF, TF32 180 PF sparse per 72 GPUs = 5 / 2.5 / 1.25 PF dense per GPU, the GB200 NVL72 \
                 figures; FP4 1,440 PF sparse / 1,080 PF dense = 15 PF dense per GPU vs GB200's 10: where Blackwell Ultra \
                 differs). 288 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s bidirectional, 1,400 W: NVIDIA Technical Blog, 'Inside \
                 NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era' (2025-08). memory.total 284,208 MiB as \
                 nvidia-smi prints it on GB300 NVL72 compute trays (4 GPUs + Grace; public nvidia-smi dumps, drivers \
                 580.95.05/580.173.02; the single-GPU DGX Station GB300 reports 256,703 MiB and is another product); \
                 152 SMs (CUDA multi_processor_count in public GB300 kernel logs, driver 580.159.03). Host link: NVLink-C2C, \
                 900 GB/s bidirectional per Grace shared by its two GPUs, as GB200. No GB300 GEMM measurement is \
                 published in that MAMF table: GB200's efficiency rows apply (`base`). Not modelled: the doubled SFU \
                 (MUFU.EX2) rate for attention softmax (10.7 vs 5 TeraExponentials/s, same blog)",
    },
    GpuSpec {
        name: "MI300X",
        variant: "OAM 192GB",
        peak_tflops: PeakTflops {
            fp32: 163.4,
            tf32: Some(653.7),
            bf16: Some(1307.4),
            fp16: 1307.4,
            fp8: Some(2614.9),
            fp4: None,
        },
        hbm_bandwidth_bytes_per_s: 5.3 * TB,
        memory_bytes: 206_141_652_992,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(448),
        host_bandwidth: Some(Bandwidth::from_gbytes_per_sec(64)),
        arch: GpuArch::Ampere,
        sm_count: 304,
        // Not an NVIDIA SM: the SSD's per-SM-cycle rate (crate::ssd) does not carry over.
        sm_clock_mhz: None,
        memory_tokens: &["192gb"],
        base: None,
        // AMD Instinct MI300X data sheet: 750 W peak total board power.
        tdp: Some(Power::from_watts(750)),
        power_limit: None,
        source: "AMD Instinct MI300X data sheet (dense: FP16/BF16 1307.4, FP8 2614.9, TF32 653.7, FP32 163.4 TFLOPS; \
                 192 GB HBM3 at 5.3 TB/s; 2100 MHz x 1216 matrix cores x 512 FLOP/clk = 1307.4); ROCm docs GPU specs \
                 (304 CUs, 38 per XCD); rocm-smi VRAM Total Memory 206,141,652,992 B (github.com/ROCm/legacy-rocm-build \
                 issue 4750); 7 Infinity Fabric links x 128 GB/s bidirectional = 448 GB/s per direction, a full mesh \
                 (64 GB/s each way per peer) modelled as a switch. sm_count holds CUs; NCCL arch mapped to Ampere \
                 (RCCL is not modelled)",
    },
];

/// Every GPU the catalog knows, in generation order.
pub fn catalog() -> &'static [GpuSpec] {
    &CATALOG
}

/// Name tokens that do not change which product is meant.
const NEUTRAL_TOKENS: &[&str] = &[
    "nvidia", "tesla", "amd", "instinct", "sxm", "sxm2", "sxm4", "sxm5", "sxm6", "oam", "hgx", "dgx", "hbm2", "hbm2e", "hbm3", "hbm3e",
    "gpu",
];

/// The family a catalog name belongs to: "A100-40GB" -> "A100".
fn family(name: &str) -> &str {
    name.split_once('-').map_or(name, |(f, _)| f)
}

/// Looks a GPU up by name, ignoring ASCII case. Accepts the catalog name with vendor, form-factor
/// and capacity decorations, as written in datasheets and by `nvidia-smi`: "H100", "h100-sxm",
/// "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-32GB".
///
/// A family with several products (A100 80GB and 40GB) is resolved by the capacity token: the
/// first catalog entry of the family that accepts every remaining token wins, so plain "A100" is
/// the 80GB (listed first) and "A100-40GB" the 40GB. Variants not in the catalog (PCIe, NVL,
/// V100 16GB) have other figures and are rejected. Allocates nothing on success.
///
/// # Errors
/// [`ComputeError::UnknownGpu`] listing the valid names.
pub fn gpu(name: &str) -> Result<&'static GpuSpec, ComputeError> {
    find(name).ok_or_else(|| ComputeError::UnknownGpu {
        name: name.to_string(),
        valid: valid_names(),
    })
}

/// Allocation-free lookup behind [`gpu`].
pub(crate) fn find(name: &str) -> Option<&'static GpuSpec> {
    let neutral = |t: &str| NEUTRAL_TOKENS.iter().any(|n| n.eq_ignore_ascii_case(t));
    let mut tokens = name.split(['-', '_', ' ', '/']).filter(|t| !t.is_empty());
    let mut first = tokens.next()?;
    while neutral(first) {
        first = tokens.next()?;
    }
    CATALOG.iter().filter(|g| family(g.name).eq_ignore_ascii_case(first)).find(|g| {
        tokens
            .clone()
            .all(|t| neutral(t) || g.memory_tokens.iter().any(|m| m.eq_ignore_ascii_case(t)))
    })
}

/// "V100, A100, A100-40GB, ... (case-insensitive; ...)".
fn valid_names() -> String {
    let names: Vec<&str> = CATALOG.iter().map(|g| g.name).collect();
    format!(
        "{} (case-insensitive; decorations such as `-SXM5`, `-80GB`, `NVIDIA ` and `HBM3` are accepted; PCIe/NVL variants are not in the catalog)",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_decorations_resolve() {
        for (input, want) in [
            ("H100", "H100"),
            ("h100", "H100"),
            ("h100-sxm", "H100"),
            ("H100-SXM5-80GB", "H100"),
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("h20", "H20"),
            ("H200-SXM-141GB", "H200"),
            ("nvidia b200", "B200"),
            ("B200-192GB", "B200"),
            ("H800", "H800"),
            ("A100-40GB", "A100-40GB"),
            ("A100-SXM4-40GB", "A100-40GB"),
            ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
            ("a100-80gb", "A100"),
            ("Tesla V100-SXM2-32GB", "V100"),
            ("v100", "V100"),
            ("NVIDIA GB200", "GB200"),
            ("B300", "B300"),
            ("NVIDIA B300 SXM6 AC", "B300"),
            ("b300-288gb", "B300"),
            ("GB300", "GB300"),
            ("NVIDIA GB300", "GB300"),
            ("gb300-288gb", "GB300"),
            ("AMD Instinct MI300X", "MI300X"),
            ("mi300x-192gb", "MI300X"),
        ] {
            assert_eq!(gpu(input).map(|g| g.name), Ok(want), "{input}");
        }
    }

    #[test]
    fn other_variants_are_rejected_with_the_valid_list() {
        for input in [
            "H100-PCIe",
            "A100-PCIe-40GB",
            "A100-40GB-80GB",
            "H200-NVL",
            "V100-16GB",
            "",
            "nvidia",
            "H1000",
        ] {
            match gpu(input) {
                Err(ComputeError::UnknownGpu { name, valid }) => {
                    assert_eq!(name, input);
                    for g in catalog() {
                        assert!(valid.contains(g.name), "{valid}");
                    }
                }
                other => panic!("{input}: {other:?}"),
            }
        }
    }

    #[test]
    fn fp8_falls_back_to_bf16_where_unsupported() {
        let a100 = gpu("A100").unwrap();
        assert!(!a100.supports(DType::Fp8));
        assert_eq!(a100.peak_flops(DType::Fp8), a100.peak_flops(DType::Bf16));
        let h100 = gpu("H100").unwrap();
        assert!(h100.supports(DType::Fp8));
        assert_eq!(h100.peak_flops(DType::Fp8), 1978.9e12);
        assert_eq!(h100.peak_flops(DType::Bf16), 989.4e12);
    }

    #[test]
    fn fp4_is_blackwell_only_with_the_cited_dense_peaks() {
        for (name, tflops) in [("B200", 9000.0), ("GB200", 10000.0), ("B300", 12600.0), ("GB300", 15000.0)] {
            let g = gpu(name).unwrap();
            assert!(g.supports(DType::Fp4), "{name}");
            assert_eq!(g.peak_flops(DType::Fp4), tflops * 1e12, "{name}");
        }
        for name in ["V100", "A100", "H100", "H200", "MI300X"] {
            assert!(!gpu(name).unwrap().supports(DType::Fp4), "{name}");
        }
    }

    #[test]
    fn mxfp8_is_blackwell_only_at_the_fp8_peak() {
        for g in catalog() {
            assert_eq!(g.supports(DType::Mxfp8), g.arch == GpuArch::Blackwell, "{}", g.name);
            assert_eq!(g.peak_flops(DType::Mxfp8), g.peak_flops(DType::Fp8), "{}", g.name);
        }
        assert!(gpu("B200").unwrap().supports(DType::Mxfp8) && !gpu("H100").unwrap().supports(DType::Mxfp8));
    }

    #[test]
    fn v100_falls_back_to_fp16_and_fp32_peaks() {
        let v100 = gpu("V100").unwrap();
        assert!(!v100.supports(DType::Bf16) && !v100.supports(DType::Tf32) && !v100.supports(DType::Fp8));
        assert_eq!(v100.peak_flops(DType::Bf16), 125e12);
        assert_eq!(v100.peak_flops(DType::Fp8), 125e12);
        assert_eq!(v100.peak_flops(DType::Tf32), v100.peak_flops(DType::Fp32));
    }

    #[test]
    fn plain_family_name_is_the_first_product() {
        let a80 = gpu("A100").unwrap();
        let a40 = gpu("A100-40GB").unwrap();
        assert_eq!((a80.memory_bytes, a40.memory_bytes), (81920 * MIB, 40960 * MIB));
        assert_eq!(a80.peak_tflops, a40.peak_tflops);
        assert!(a40.hbm_bandwidth_bytes_per_s < a80.hbm_bandwidth_bytes_per_s);
        assert_eq!(a40.base, Some("A100"));
    }

    #[test]
    fn blackwell_ultra_entries_carry_the_cited_figures() {
        let b300 = gpu("NVIDIA B300 SXM6 AC").unwrap();
        let gb300 = gpu("gb300").unwrap();
        // Dense per-GPU peaks: HGX B300 as HGX B200, GB300 NVL72 as GB200 NVL72.
        assert_eq!(b300.peak_flops(DType::Bf16), 2250e12);
        assert_eq!(b300.peak_flops(DType::Fp8), 4500e12);
        assert_eq!(b300.peak_flops(DType::Tf32), 1125e12);
        assert_eq!(gb300.peak_flops(DType::Bf16), 2500e12);
        assert_eq!(gb300.peak_flops(DType::Fp8), 5000e12);
        assert_eq!(gb300.peak_flops(DType::Tf32), 1250e12);
        for g in [b300, gb300] {
            assert_eq!(g.arch, GpuArch::Blackwell);
            assert_eq!(g.hbm_bandwidth_bytes_per_s, 8e12);
            assert_eq!(g.nvlink_bandwidth.gbytes_per_sec_f64(), 900.0);
            // nvidia-smi's memory.total: below the raw HBM3e (8 stacks x 12 dies x 24 Gbit =
            // 288 GiB; ECC and reserved pages come off it), above GB200's.
            assert!(g.memory_bytes < 288 << 30, "{}", g.name);
            assert!(g.memory_bytes > gpu("GB200").unwrap().memory_bytes, "{}", g.name);
        }
        assert_eq!((b300.memory_bytes, gb300.memory_bytes), (275040 * MIB, 284208 * MIB));
        assert_eq!((b300.sm_count, gb300.sm_count), (148, 152));
        // NVLink-C2C to Grace as GB200; HGX B300 over PCIe Gen5 hosts as B200.
        assert_eq!(gb300.host_bandwidth, gpu("GB200").unwrap().host_bandwidth);
        assert_eq!(b300.host_bandwidth, gpu("B200").unwrap().host_bandwidth);
        // GB300 has no GEMM measurement of its own: GB200's efficiency rows apply.
        assert_eq!((b300.base, gb300.base), (None, Some("GB200")));
    }

    #[test]
    fn catalog_is_sane() {
        for g in catalog() {
            let p = g.peak_tflops;
            // Tensor peaks above the CUDA-core FP32; TF32 half of BF16 where both exist.
            assert!(p.fp32 > 0.0 && p.fp32 < p.fp16, "{}", g.name);
            if let Some(tf32) = p.tf32 {
                assert!(p.fp32 < tf32 && tf32 < p.fp16, "{}", g.name);
            }
            if let Some(bf16) = p.bf16 {
                assert_eq!(bf16, p.fp16, "{}", g.name);
            }
            if let Some(fp8) = p.fp8 {
                assert!((fp8 / p.fp16 - 2.0).abs() < 1e-3, "{}", g.name);
            }
            // FP4 only on Blackwell, at two (Blackwell) to three (Blackwell Ultra) times FP8.
            if let Some(fp4) = p.fp4 {
                let ratio = fp4 / p.fp8.unwrap();
                assert!(g.arch == GpuArch::Blackwell && (2.0..=3.0).contains(&ratio), "{}", g.name);
            }
            assert!(g.hbm_bandwidth_bytes_per_s > 0.5e12 && g.memory_bytes >= 16 << 30, "{}", g.name);
            assert!(
                g.sm_count > 0 && !g.nvlink_bandwidth.is_zero() && !g.source.is_empty(),
                "{}",
                g.name
            );
            assert_eq!(find(g.name).map(|s| s.name), Some(g.name));
            // Catalog boards run at their TDP; the TDPs are board-class figures.
            assert!(g.power_limit.is_none() && g.compute_rate_fraction() == 1.0, "{}", g.name);
            if let Some(t) = g.tdp {
                assert!((250.0..=1400.0).contains(&t.watts_f64()), "{}", g.name);
            }
            if let Some(b) = g.base {
                assert_eq!(find(b).map(|s| s.name), Some(b), "{}: base {b}", g.name);
            }
        }
        // Half of 900 GB/s bidirectional.
        assert_eq!(gpu("H100").unwrap().nvlink_bandwidth.gbytes_per_sec_f64(), 450.0);
    }
}
