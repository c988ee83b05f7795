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

use llmsim_ccl::tuning::GpuArch;
use llmsim_core::Bandwidth;

use crate::error::ComputeError;
use crate::op::DType;

/// Peak dense throughput per dtype, in TFLOP/s (10^12 FLOP/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakTflops {
    /// Non-tensor FP32.
    pub fp32: f64,
    /// Tensor-core TF32, dense.
    pub tf32: f64,
    /// Tensor-core BF16, dense.
    pub bf16: f64,
    /// Tensor-core FP16, dense.
    pub fp16: f64,
    /// Tensor-core FP8, dense; `None` where the GPU has no FP8 tensor cores (A100).
    pub fp8: Option<f64>,
}

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSpec {
    /// Canonical catalog name: "A100", "H100", "H800", "H20", "H200", "B200".
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
    /// The architecture NCCL's tuning model keys its latencies and bandwidths on.
    pub arch: GpuArch,
    /// Streaming multiprocessors: GEMM tiles run in waves of this many
    /// ([`crate::gemm`], wave quantization).
    pub sm_count: u32,
    /// Extra capacity tokens accepted in names ("80gb"); other sizes are other products.
    pub memory_tokens: &'static [&'static str],
    /// The public documents the figures come from.
    pub source: &'static str,
}

impl GpuSpec {
    /// Whether the GPU has native (tensor-core) support for `dtype`.
    pub fn supports(&self, dtype: DType) -> bool {
        match dtype {
            DType::Fp8 => self.peak_tflops.fp8.is_some(),
            DType::Fp32 | DType::Tf32 | DType::Bf16 | DType::Fp16 => true,
        }
    }

    /// Peak dense FLOP/s for `dtype`. FP8 on a GPU without FP8 tensor cores falls back to the
    /// BF16 peak (the op would run in BF16: what Transformer Engine does on A100).
    pub fn peak_flops(&self, dtype: DType) -> f64 {
        let p = &self.peak_tflops;
        let tflops = match dtype {
            DType::Fp32 => p.fp32,
            DType::Tf32 => p.tf32,
            DType::Bf16 => p.bf16,
            DType::Fp16 => p.fp16,
            DType::Fp8 => p.fp8.unwrap_or(p.bf16),
        };
        tflops * 1e12
    }

    /// HBM bandwidth as a [`Bandwidth`] (bits/s).
    pub fn hbm_bandwidth(&self) -> Bandwidth {
        Bandwidth::from_bps_f64(self.hbm_bandwidth_bytes_per_s * 8.0)
    }
}

const TB: f64 = 1e12;
const MIB: u64 = 1 << 20;

static CATALOG: [GpuSpec; 6] = [
    GpuSpec {
        name: "A100",
        variant: "SXM4 80GB",
        peak_tflops: PeakTflops {
            fp32: 19.5,
            tf32: 156.0,
            bf16: 312.0,
            fp16: 312.0,
            fp8: None,
        },
        hbm_bandwidth_bytes_per_s: 2.039 * TB,
        memory_bytes: 81920 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(300),
        arch: GpuArch::Ampere,
        sm_count: 108,
        memory_tokens: &["80gb"],
        source: "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column; TF32/BF16/FP16 dense = sparse/2), \
                 https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; \
                 NVLink 600 GB/s bidirectional",
    },
    GpuSpec {
        name: "H100",
        variant: "SXM5 80GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: 494.7,
            bf16: 989.4,
            fp16: 989.4,
            fp8: Some(1978.9),
        },
        hbm_bandwidth_bytes_per_s: 3.35 * TB,
        memory_bytes: 81559 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        arch: GpuArch::Hopper,
        sm_count: 132,
        memory_tokens: &["80gb"],
        source: "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: FP16/BF16 989.4, FP8 1978.9, TF32 494.7, \
                 FP32 66.9 dense TFLOPS) and NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 80 GB, 3.35 TB/s, NVLink 900 GB/s \
                 bidirectional), https://www.nvidia.com/en-us/data-center/h100/",
    },
    GpuSpec {
        name: "H800",
        variant: "SXM5 80GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: 494.7,
            bf16: 989.4,
            fp16: 989.4,
            fp8: Some(1978.9),
        },
        hbm_bandwidth_bytes_per_s: 3.35 * TB,
        memory_bytes: 81559 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(200),
        arch: GpuArch::Hopper,
        sm_count: 132,
        memory_tokens: &["80gb"],
        source: "H100 SXM5 silicon with NVLink cut to 400 GB/s bidirectional (export variant; no public NVIDIA SXM datasheet): \
                 compute and HBM as the H100 SXM whitepaper/datasheet; NVLink figure as stated in DeepSeek, \
                 'Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI Architectures' (ISCA 2025)",
    },
    GpuSpec {
        name: "H20",
        variant: "SXM 96GB",
        peak_tflops: PeakTflops {
            fp32: 44.0,
            tf32: 74.0,
            bf16: 148.0,
            fp16: 148.0,
            fp8: Some(296.0),
        },
        hbm_bandwidth_bytes_per_s: 4.0 * TB,
        memory_bytes: 97871 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        arch: GpuArch::Hopper,
        sm_count: 78,
        memory_tokens: &["96gb"],
        source: "NVIDIA HGX H20 specification as distributed to OEMs and reported by the press (no public NVIDIA datasheet): \
                 BF16/FP16 148, FP8 296, TF32 74, FP32 44 dense TFLOPS; 96 GB HBM3 at 4.0 TB/s; NVLink 900 GB/s bidirectional",
    },
    GpuSpec {
        name: "H200",
        variant: "SXM 141GB",
        peak_tflops: PeakTflops {
            fp32: 66.9,
            tf32: 494.7,
            bf16: 989.4,
            fp16: 989.4,
            fp8: Some(1978.9),
        },
        hbm_bandwidth_bytes_per_s: 4.8 * TB,
        memory_bytes: 143771 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(450),
        arch: GpuArch::Hopper,
        sm_count: 132,
        memory_tokens: &["141gb"],
        source: "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column: compute as H100 SXM, 141 GB HBM3e, 4.8 TB/s, \
                 NVLink 900 GB/s bidirectional), https://www.nvidia.com/en-us/data-center/h200/",
    },
    GpuSpec {
        name: "B200",
        variant: "HGX B200 (1000 W) 180GB",
        peak_tflops: PeakTflops {
            fp32: 80.0,
            tf32: 1100.0,
            bf16: 2250.0,
            fp16: 2250.0,
            fp8: Some(4500.0),
        },
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        memory_bytes: 183359 * MIB,
        nvlink_bandwidth: Bandwidth::from_gbytes_per_sec(900),
        arch: GpuArch::Blackwell,
        sm_count: 148,
        memory_tokens: &["180gb", "192gb"],
        source: "NVIDIA HGX B200 datasheet, per GPU, dense = sparse/2 (FP8 4.5 PF, FP16/BF16 2.25 PF, TF32 1.1 PF; \
                 the DGX/GB200 sheets quote 2.5 PF BF16 at higher power); DGX B200 datasheet: 1,440 GB and 64 TB/s HBM3e \
                 per 8 GPUs (180 GB, 8 TB/s each); NVLink 5 1.8 TB/s bidirectional, https://www.nvidia.com/en-us/data-center/hgx/",
    },
];

/// Every GPU the catalog knows, in generation order.
pub fn catalog() -> &'static [GpuSpec] {
    &CATALOG
}

/// Name tokens that do not change which product is meant.
const NEUTRAL_TOKENS: &[&str] = &[
    "nvidia", "tesla", "sxm", "sxm4", "sxm5", "sxm6", "hgx", "dgx", "hbm2e", "hbm3", "hbm3e", "gpu",
];

/// Looks a GPU up by name, ignoring ASCII case. Accepts the catalog name with vendor, form-factor
/// and capacity decorations, as written in datasheets and by `nvidia-smi`: "H100", "h100-sxm",
/// "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB". Other variants of the same
/// chip (PCIe, NVL, A100 40GB) have other figures and are rejected. Allocates nothing on success.
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
    let mut tokens = name.split(['-', '_', ' ', '/']).filter(|t| !t.is_empty());
    let mut first = tokens.next()?;
    while NEUTRAL_TOKENS.iter().any(|n| n.eq_ignore_ascii_case(first)) {
        first = tokens.next()?;
    }
    let spec = CATALOG.iter().find(|g| g.name.eq_ignore_ascii_case(first))?;
    let rest_ok = tokens
        .all(|t| NEUTRAL_TOKENS.iter().any(|n| n.eq_ignore_ascii_case(t)) || spec.memory_tokens.iter().any(|m| m.eq_ignore_ascii_case(t)));
    rest_ok.then_some(spec)
}

/// "A100, H100, H800, H20, H200, B200 (also accepted: ...)".
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
        ] {
            assert_eq!(gpu(input).map(|g| g.name), Ok(want), "{input}");
        }
    }

    #[test]
    fn other_variants_are_rejected_with_the_valid_list() {
        for input in ["H100-PCIe", "A100-40GB", "H200-NVL", "V100", "", "nvidia", "H1000"] {
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
    fn catalog_is_sane() {
        for g in catalog() {
            let p = g.peak_tflops;
            assert!(p.fp32 > 0.0 && p.fp32 < p.tf32 && p.tf32 < p.bf16, "{}", g.name);
            assert_eq!(p.bf16, p.fp16, "{}", g.name);
            if let Some(fp8) = p.fp8 {
                assert!((fp8 / p.bf16 - 2.0).abs() < 1e-3, "{}", g.name);
            }
            assert!(
                g.hbm_bandwidth_bytes_per_s > 1e12 && g.memory_bytes >= 80 * 1_000_000_000,
                "{}",
                g.name
            );
            assert!(!g.nvlink_bandwidth.is_zero() && !g.source.is_empty(), "{}", g.name);
            assert_eq!(find(g.name).map(|s| s.name), Some(g.name));
        }
        // Half of 900 GB/s bidirectional.
        assert_eq!(gpu("H100").unwrap().nvlink_bandwidth.gbytes_per_sec_f64(), 450.0);
    }
}
