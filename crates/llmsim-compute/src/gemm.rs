//! GEMM time from its shape: tile and wave quantization over the GPU's SMs.
//!
//! A GEMM kernel (cuBLAS, CUTLASS) cuts the `m × n` output into `tm × tn` tiles; each SM computes
//! one tile at a time, walking `k` in steps. So (NVIDIA, "Matrix Multiplication Background User's
//! Guide", sections "Tile quantization" and "Wave quantization"):
//! - **tile quantization**: a ragged edge tile costs as much as a full one;
//! - **wave quantization**: tiles run in waves of `sm_count`; a last, partial wave costs a full
//!   wave's time;
//! - **per-tile fixed cost**: filling the software pipeline and writing the output tile cost about
//!   `k0` extra steps of `k`, so a short `k` runs below peak;
//! - smaller tiles re-read more operand bytes per FLOP, so a kernel with small tiles (the ones
//!   libraries pick for skinny GEMMs) sustains a lower fraction of the peak.
//!
//! The library picks the fastest of its kernels for the shape; the model takes the minimum over a
//! per-architecture set of tiles, and over split-K factors when the tiles alone do not fill the
//! GPU (split-K for small `m·n`, large `k`). On Hopper and Blackwell it also tries a stream-K
//! schedule (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense
//! Matrix-Matrix Multiplication on the GPU", PPoPP '23; CUTLASS 3.x ships a stream-K tile
//! scheduler for its sm90 kernels): the `k` iterations of all tiles are spread evenly over the
//! SMs, so the last wave is not quantized, at the price of one extra tile fix-up (`k0`) per SM.
//!
//! Time of one candidate, in the units of one full wave:
//! `waves(tiles · split) · 2·tm·tn·(⌈k/split⌉ + k0) / (peak/sm_count · eff · rel(tile)) · (1 + split penalty)`.
//! It is non-decreasing in `m`, `n`, `k` and `batch` (each factor is), and never below
//! `2mnk / peak` (tiles cover the output, `k0 ≥ 0`, efficiencies ≤ 1), so the minimum over
//! candidates keeps both properties. `eff` is the calibrated large-GEMM efficiency of the GPU and
//! dtype (`data/efficiency.csv`, class `gemm`): the fraction of the peak that a big, well-shaped
//! GEMM sustains.

use llmsim_core::GpuArch;

use crate::gpu::GpuSpec;
use crate::op::{DType, GemmShape};

/// One CTA tile shape a library ships, with its throughput relative to the architecture's best
/// tile on a large GEMM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tile {
    /// Rows of the output tile.
    pub m: u64,
    /// Columns of the output tile.
    pub n: u64,
    /// Fraction of the best tile's sustained rate (operand traffic per FLOP grows as the tile
    /// shrinks: intensity `tm·tn/(tm+tn)`).
    pub rel: f64,
}

/// The tiles the model chooses from, largest first. The shapes are the CTA tiles of cuBLAS /
/// CUTLASS kernels for the architecture (CUTLASS `default_gemm_configuration`, sm80 128×256 /
/// 256×128 / 128×128 / 64×64; sm90 warp-specialized kernels 128×256 with 64-row warpgroup
/// granularity). `rel` follows the operand intensity `I = tm·tn/(tm+tn)` as `I/(I+I0)`, normalized
/// to the largest tile, with `I0` = 16 elements: a 128×128 tile then runs at 0.94 of a 128×256 one
/// and a 64×64 tile at 0.75 (see `bench/kernels.md` for the check against published GEMM tables).
pub fn tiles(arch: GpuArch) -> &'static [Tile] {
    const I0: f64 = 16.0;
    /// `I/(I+I0)` of an `m × n` tile.
    const fn rate(m: u64, n: u64) -> f64 {
        let i = (m * n) as f64 / (m + n) as f64;
        i / (i + I0)
    }
    /// A tile, its rate relative to the set's largest tile `best`.
    const fn tile(m: u64, n: u64, best: (u64, u64)) -> Tile {
        Tile {
            m,
            n,
            rel: rate(m, n) / rate(best.0, best.1),
        }
    }
    const A: (u64, u64) = (256, 128);
    static AMPERE: [Tile; 5] = [
        tile(256, 128, A),
        tile(128, 256, A),
        tile(128, 128, A),
        tile(128, 64, A),
        tile(64, 64, A),
    ];
    const H: (u64, u64) = (128, 256);
    static HOPPER: [Tile; 6] = [
        tile(128, 256, H),
        tile(256, 128, H),
        tile(128, 128, H),
        tile(64, 256, H),
        tile(128, 64, H),
        tile(64, 128, H),
    ];
    // Blackwell's 2-SM MMA works on 256-row tiles across an SM pair: a 256×256 pair tile is a
    // 128×256 tile per SM.
    const B: (u64, u64) = (256, 256);
    static BLACKWELL: [Tile; 5] = [
        tile(256, 256, B),
        tile(128, 256, B),
        tile(256, 128, B),
        tile(128, 128, B),
        tile(128, 64, B),
    ];
    match arch {
        GpuArch::Ampere => &AMPERE,
        GpuArch::Hopper => &HOPPER,
        GpuArch::Blackwell => &BLACKWELL,
    }
}

/// Per-tile fixed cost in elements of `k`: three main-loop `k` steps (pipeline fill plus the
/// epilogue writing the output tile), a step being 64 elements of a 16-bit input or 128 of FP8
/// (the same 128-byte shared-memory rows, the same time). Three steps is what DeepGEMM's FP8 table
/// on H800 shows for short `k` (README 2025-03-25: m = 4096 at k = 512, 1536, 2048 and the
/// grouped k = 2048 rows imply 350-460 elements of fixed cost against the model's long-`k` rate;
/// `examples/gemm_table.rs`, `bench/kernels.md`). Blackwell keeps accumulators in tensor memory,
/// double-buffered, so a tile's epilogue overlaps the next tile's main loop: one step. (The cited
/// B200 best shapes reach the same fraction of peak in FP8 and BF16 at `k = 3072`, which three
/// FP8 steps would not give.)
pub fn k_overhead(arch: GpuArch, dtype: DType) -> u64 {
    let steps = match arch {
        GpuArch::Blackwell => 1,
        GpuArch::Ampere | GpuArch::Hopper => 3,
    };
    steps
        * match dtype {
            DType::Fp32 | DType::Tf32 => 32,
            DType::Bf16 | DType::Fp16 => 64,
            DType::Fp8 | DType::Mxfp8 | DType::Fp8Block => 128,
            // The same 128 bytes of each operand per k-step as BF16 (64) and FP8 (128).
            DType::Fp4 => 256,
        }
}

/// Split-K factors tried when the tiles of the shape fill less than one wave.
const SPLITS: [u64; 6] = [1, 2, 3, 4, 6, 8];
/// Split-K adds a reduction of the partial outputs: 5% of the GEMM's time per candidate.
const SPLIT_PENALTY: f64 = 0.05;
/// A split keeps at least this many elements of `k` per part.
const MIN_SPLIT_K: u64 = 512;

/// Fraction of the best-shape rate that GEMMs of a training step sustain; the shipped
/// `data/efficiency.csv` GEMM rows are the best-shape efficiencies times this. The best-shape figures come from short kernels timed alone; the GEMMs of a
/// training layer, run back to back for milliseconds, measure lower on the same GPU: Transformer
/// Engine's GEMM profiling of a hidden-4096 / FFN-16384 layer at 15,872 tokens on B300 (BF16;
/// NVIDIA/TransformerEngine docs/features/low_precision_training/gemm_profiling, commit 33294178)
/// gives 1569, 1562 and 1546 TFLOP/s for its QKV, MLP-up and MLP-down GEMMs (1.0-1.4 ms each),
/// where the model calibrated on the best-shape table (1769 TFLOP/s on B300, 1745 on B200)
/// predicts 1.124, 1.130 and 1.155 times as much (`examples/gemm_table.rs`): 0.880 is the inverse
/// of their mean. Only the short attention-output GEMM (0.3 ms) reaches the best-shape rate. It
/// is measured on one GPU (B300) and applied to every GPU: the same power-limited, sustained
/// tensor-core load is what every datasheet peak is quoted without.
pub const SUSTAINED_FRACTION: f64 = 0.880;

/// Whether the architecture's GEMM library schedules stream-K (see the module doc).
fn stream_k(arch: GpuArch) -> bool {
    matches!(arch, GpuArch::Hopper | GpuArch::Blackwell)
}

/// The chosen kernel for a shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmPlan {
    /// The CTA tile chosen.
    pub tile: Tile,
    /// Split-K factor; 0 for a stream-K schedule.
    pub split: u64,
    /// Waves of tiles over the SMs.
    pub waves: u64,
    /// Compute time in seconds, before the memory roof and the launch cost.
    pub secs: f64,
}

impl GemmPlan {
    /// `2mnk / peak` over this plan's time: the fraction of the dtype's peak the shape reaches.
    pub fn fraction_of_peak(&self, shape: &GemmShape, peak_flops: f64) -> f64 {
        shape.flops() / peak_flops / self.secs
    }
}

/// The fastest tile and split for `shape` on `gpu` in `dtype`, at large-GEMM efficiency `eff`.
/// A shape with a zero dimension takes no time.
///
/// A grouped GEMM (`batch` > 1: one GEMM per local expert) runs as `batch` kernels one after
/// another, each planned alone: Transformer Engine's `GroupedLinear` issues one cuBLAS GEMM per
/// expert (`nvte_multi_stream_cublas_gemm`, its default path on every GPU; the single-kernel
/// CUTLASS path of TE 2.8+ is opt-in and Hopper/BF16 only). So small groups pay their own tile and
/// wave quantization: on an H100 in BF16, TE 2.7's measured 628 and 554 TFLOP/s for 8 x 4096 and
/// 16 x 2048 tokens at n = 768, k = 2048 (TransformerEngine PR #2045) against the model's 591 and
/// 559 (`examples/gemm_table.rs`, `bench/kernels.md`); a single persistent kernel over all tiles
/// would give 649 for both.
pub fn plan(gpu: &GpuSpec, dtype: DType, eff: f64, shape: &GemmShape) -> GemmPlan {
    if shape.batch > 1 {
        let one = plan_one(gpu, dtype, eff, &GemmShape { batch: 1, ..*shape });
        return GemmPlan {
            waves: one.waves.saturating_mul(shape.batch),
            secs: one.secs * shape.batch as f64,
            ..one
        };
    }
    plan_one(gpu, dtype, eff, shape)
}

/// [`plan`] of one kernel over all of `shape`'s tiles.
fn plan_one(gpu: &GpuSpec, dtype: DType, eff: f64, shape: &GemmShape) -> GemmPlan {
    let peak = gpu.peak_flops(dtype);
    let sms = u64::from(gpu.sm_count.max(1));
    let k0 = k_overhead(gpu.arch, dtype);
    let mut best: Option<GemmPlan> = None;
    if shape.m == 0 || shape.n == 0 || shape.k == 0 || shape.batch == 0 {
        let t = tiles(gpu.arch)[0];
        return GemmPlan {
            tile: t,
            split: 1,
            waves: 0,
            secs: 0.0,
        };
    }
    let per_sm = peak / sms as f64 * eff;
    for &t in tiles(gpu.arch) {
        let tiles_one = shape.m.div_ceil(t.m).saturating_mul(shape.n.div_ceil(t.n));
        let tiles_all = tiles_one.saturating_mul(shape.batch);
        for &s in &SPLITS {
            if s > 1 && (tiles_all >= sms || shape.k / s < MIN_SPLIT_K) {
                break;
            }
            let waves = tiles_all.saturating_mul(s).div_ceil(sms);
            let k_part = shape.k.div_ceil(s) + k0;
            let tile_secs = 2.0 * (t.m * t.n) as f64 * k_part as f64 / (per_sm * t.rel);
            let penalty = if s > 1 { 1.0 + SPLIT_PENALTY } else { 1.0 };
            let secs = waves as f64 * tile_secs * penalty;
            if best.is_none_or(|b| secs < b.secs) {
                best = Some(GemmPlan {
                    tile: t,
                    split: s,
                    waves,
                    secs,
                });
            }
        }
        if stream_k(gpu.arch) {
            // Every tile's k iterations (with its fixed cost) spread over the SMs, plus one
            // fix-up of a shared tile per SM.
            let iters = tiles_all.saturating_mul(shape.k + k0).div_ceil(sms) + k0;
            let secs = 2.0 * (t.m * t.n) as f64 * iters as f64 / (per_sm * t.rel);
            if best.is_none_or(|b| secs < b.secs) {
                best = Some(GemmPlan {
                    tile: t,
                    split: 0,
                    waves: tiles_all.div_ceil(sms),
                    secs,
                });
            }
        }
    }
    best.expect("every architecture has tiles")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{catalog, gpu};

    fn secs(g: &GpuSpec, d: DType, m: u64, n: u64, k: u64) -> f64 {
        plan(g, d, 0.8, &GemmShape::new(m, n, k)).secs
    }

    #[test]
    fn relative_tile_rates_are_fractions_with_the_best_at_one() {
        for arch in [GpuArch::Ampere, GpuArch::Hopper, GpuArch::Blackwell] {
            let ts = tiles(arch);
            assert!((ts[0].rel - 1.0).abs() < 1e-12);
            assert!(ts.iter().all(|t| t.rel > 0.0 && t.rel <= 1.0 + 1e-12));
        }
    }

    #[test]
    fn a_big_square_gemm_is_near_the_calibrated_efficiency() {
        let h = gpu("H100").unwrap();
        let s = GemmShape::new(8192, 8192, 8192);
        let p = plan(h, DType::Bf16, 0.8, &s);
        let f = p.fraction_of_peak(&s, h.peak_flops(DType::Bf16));
        assert!(f > 0.75 && f <= 0.8, "{f}");
    }

    #[test]
    fn skinny_and_small_gemms_run_below_big_ones() {
        let h = gpu("H100").unwrap();
        let peak = h.peak_flops(DType::Bf16);
        let frac = |m, n, k| {
            let s = GemmShape::new(m, n, k);
            plan(h, DType::Bf16, 0.8, &s).fraction_of_peak(&s, peak)
        };
        let big = frac(8192, 8192, 8192);
        assert!(frac(4096, 2048, 2048) < big);
        assert!(frac(256, 8192, 8192) < big);
        assert!(frac(8192, 8192, 256) < big);
        // One wave plus one tile: on Ampere (no stream-K) nearly half the second wave idles.
        let a = gpu("A100").unwrap();
        let fa = |m, n, k| {
            let s = GemmShape::new(m, n, k);
            plan(a, DType::Bf16, 0.8, &s).fraction_of_peak(&s, a.peak_flops(DType::Bf16))
        };
        let one_wave = 108 * 128;
        assert!(fa(one_wave + 128, 256, 8192) < 0.75 * fa(one_wave, 256, 8192));
        // Hopper's stream-K spreads the extra tile's work: a few percent.
        let one_wave = 132 * 128;
        let (f0, f1) = (frac(one_wave, 256, 8192), frac(one_wave + 128, 256, 8192));
        assert!(f1 < f0 && f1 > 0.95 * f0, "{f0} {f1}");
    }

    #[test]
    fn time_is_monotone_in_every_dimension_and_never_beats_the_peak() {
        let sizes = [1u64, 7, 64, 100, 128, 129, 255, 512, 1000, 2048, 4096, 5120, 12288];
        for g in catalog() {
            for d in [DType::Bf16, DType::Fp8, DType::Fp4] {
                let peak = g.peak_flops(d);
                for &m in &sizes {
                    for &n in &sizes {
                        for &k in &sizes {
                            let t = secs(g, d, m, n, k);
                            assert!(t >= 2.0 * (m * n * k) as f64 / peak, "{} {m} {n} {k}", g.name);
                            for (m2, n2, k2) in [(m + 1, n, k), (m, n + 1, k), (m, n, k + 1), (2 * m, n, k)] {
                                let t2 = secs(g, d, m2, n2, k2);
                                assert!(t2 >= t, "{} {d}: ({m},{n},{k}) {t} > ({m2},{n2},{k2}) {t2}", g.name);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fp4_gemms_run_at_the_fp4_peak() {
        // GB300: 15 PF dense FP4 against 5 PF FP8. At the same efficiency a large GEMM takes a
        // third of its FP8 time (less the FP4 k-step's share) and the same fraction of its peak.
        let g = gpu("GB300").unwrap();
        let s = GemmShape::new(16384, 8192, 8192);
        let (p4, p8) = (plan(g, DType::Fp4, 0.7, &s), plan(g, DType::Fp8, 0.7, &s));
        let (f4, f8) = (
            p4.fraction_of_peak(&s, g.peak_flops(DType::Fp4)),
            p8.fraction_of_peak(&s, g.peak_flops(DType::Fp8)),
        );
        assert!(f4 <= 0.7 && (f4 / f8 - 1.0).abs() < 0.02, "{f4} {f8}");
        assert!((p8.secs / p4.secs / 3.0 - 1.0).abs() < 0.02, "{} {}", p8.secs, p4.secs);
    }

    #[test]
    fn batch_of_gemms_costs_at_least_one_and_at_most_the_sum() {
        let h = gpu("H100").unwrap();
        let one = GemmShape::new(512, 4096, 2048);
        let eight = GemmShape { batch: 8, ..one };
        let t1 = plan(h, DType::Bf16, 0.8, &one).secs;
        let t8 = plan(h, DType::Bf16, 0.8, &eight).secs;
        assert!(t8 >= t1 && t8 <= 8.0 * t1 + 1e-15, "{t1} {t8}");
    }
}
