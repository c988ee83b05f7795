//! A board power limit below the GPU's TDP, as a lower sustained rate of compute-bound kernels.
//!
//! `nvidia-smi -pl` caps board power; the GPU holds it by lowering the SM clock. A kernel that is
//! bound by the tensor cores (GEMM, attention) or the CUDA cores slows with the clock; HBM has its
//! own clock, so a memory-bound kernel is held unchanged here (an assumption, see
//! `bench/kernels.md`, "Power limit").
//!
//! The curve is calibrated at the kernel level on published GEMM throughput at two power limits,
//! never on training-step throughput. It is a table of (power limit / TDP, rate / rate at TDP)
//! points, interpolated linearly in log-log space (a power law between neighbours):
//!
//! - **0.714 (500 of 700 W), H100 SXM: 0.797.** The geometric mean of two same-shape,
//!   same-library ratios at 8192 x 8192 x 8192:
//!   - BF16: 585.23 TFLOP/s at 500 W (pytorch/FBGEMM PR #2546, "H100 500W", `torch.matmul`)
//!     over 797.51 at the default 700 W (H100 80GB HBM3, PyTorch 2.7 / CUDA 12.8,
//!     zzc0721/torch-performance-test-data issue #79): 0.734.
//!   - FP8: CUTLASS rowwise `f8f8bf16_rowwise` with its 128x128x128 tile, 1,125.51 TFLOP/s at
//!     500 W (the same PR, "fp8 row gemm only") over 1,300 on an H100 (pytorch/FBGEMM PR #3617,
//!     the 128-128-128 row of its tile table, "the current FBGEMM f8 kernel"; that it is PR
//!     #2546's kernel and ran at the default 700 W limit are inferred): 0.866.
//!
//!   One curve serves every dtype: the two ratios are each 8% from their mean (BF16 lower, FP8
//!   higher), a spread that also holds two software generations between the 500 W and the 700 W
//!   runs. In power-law terms the segment is `(P/TDP)^0.674`.
//! - **0.357 (500 of 1,400 W), GB300: 0.331.** cuBLAS GEMMs at 617 TFLOP/s with the board capped
//!   at 500 W against 1,600-2,174 at its rated 1,400 W (facebookexperimental/triton PR #2023, SM
//!   clock locked at its maximum); the point takes the geometric middle of that range (1,865), so
//!   it is uncertain by +17%/-14%. Between the two points the exponent is 1.27: deep caps cost
//!   more than a square-root-like law near TDP would say, as a clock near its voltage floor saves
//!   power only linearly while the static share stays.
//! - **1.0: 1.0** by definition; at or above TDP nothing changes.
//!
//! Below 0.357 the last segment's exponent is extended; a limit below a quarter of the TDP is
//! rejected where a custom GPU is built ([`MIN_LIMIT_FRACTION`]).
//!
//! This factor multiplies the calibrated rates, which already carry the sustained fraction of a
//! 700 W-class board in a long training step ([`crate::gemm::SUSTAINED_FRACTION`], 0.880); the
//! points above are short benchmarks at both limits, so the capped board is assumed to settle by
//! the same fraction.

use llmsim_core::Power;

/// Limits below this fraction of the TDP are rejected: far outside the measured points, and
/// below what boards accept.
pub const MIN_LIMIT_FRACTION: f64 = 0.25;

/// Highest power limit or TDP accepted, a bound above every board in the catalog (GB300: 1,400 W).
pub const MAX_POWER: Power = Power::from_watts(3000);

/// The cited measurements, as (power limit W, TDP W, TFLOP/s at the limit, TFLOP/s at TDP).
/// The table points are derived from them (a test checks it).
pub const H100_BF16_8192: (f64, f64, f64, f64) = (500.0, 700.0, 585.23, 797.51);
/// See [`H100_BF16_8192`]: FP8 rowwise CUTLASS, 128x128x128 tile, 8192^3.
pub const H100_FP8_8192: (f64, f64, f64, f64) = (500.0, 700.0, 1125.51, 1300.0);
/// See [`H100_BF16_8192`]: GB300 cuBLAS, 1,400 W side at the geometric middle of 1,600-2,174.
pub const GB300_GEMM: (f64, f64, f64, f64) = (500.0, 1400.0, 617.0, 1865.05);

/// (limit / TDP, rate / rate at TDP), ascending; derived from the cited measurements above.
const POINTS: [(f64, f64); 3] = [(500.0 / 1400.0, 0.330_82), (500.0 / 700.0, 0.797_07), (1.0, 1.0)];

/// Fraction of its rate at TDP that a compute-bound kernel sustains with the board limited to
/// `limit`: 1 at or above `tdp`, non-decreasing in `limit`, in (0, 1]. A zero `tdp` gives 1.
pub fn compute_rate_fraction(limit: Power, tdp: Power) -> f64 {
    if tdp.is_zero() {
        return 1.0;
    }
    let x = limit.watts_f64() / tdp.watts_f64();
    if x >= 1.0 {
        return 1.0;
    }
    if x <= 0.0 {
        // Not reachable through a validated GPU; the smallest positive rate keeps times finite.
        return f64::MIN_POSITIVE;
    }
    let seg = if x < POINTS[1].0 {
        (POINTS[0], POINTS[1])
    } else {
        (POINTS[1], POINTS[2])
    };
    let ((x0, r0), (x1, r1)) = seg;
    let exponent = (r1 / r0).ln() / (x1 / x0).ln();
    (r1 * (x / x1).powf(exponent)).clamp(f64::MIN_POSITIVE, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(m: (f64, f64, f64, f64)) -> (f64, f64) {
        (m.0 / m.1, m.2 / m.3)
    }

    #[test]
    fn the_table_is_derived_from_the_cited_measurements() {
        let (xb, rb) = ratio(H100_BF16_8192);
        let (xf, rf) = ratio(H100_FP8_8192);
        assert_eq!(xb, xf);
        // The 500/700 W point: geometric mean of the BF16 and FP8 ratios.
        assert!((POINTS[1].0 - xb).abs() < 1e-12);
        assert!(((rb * rf).sqrt() - POINTS[1].1).abs() < 1e-5, "{}", (rb * rf).sqrt());
        let (xg, rg) = ratio(GB300_GEMM);
        assert!((POINTS[0].0 - xg).abs() < 1e-12);
        assert!((rg - POINTS[0].1).abs() < 1e-5, "{rg}");
        // The GB300 middle is the geometric middle of the cited range.
        assert!(((1600.0f64 * 2174.0).sqrt() - GB300_GEMM.3).abs() < 0.01);
        // Residuals at the H100 points: each dtype 8% from the curve.
        let at = compute_rate_fraction(Power::from_watts(500), Power::from_watts(700));
        assert!(
            (at / rb - 1.0 - 0.086).abs() < 0.002 && (at / rf - 1.0 + 0.079).abs() < 0.002,
            "{at}"
        );
        // The segment exponents stated in the module doc.
        let e1 = (1.0 / POINTS[1].1).ln() / (1.0 / POINTS[1].0).ln();
        let e0 = (POINTS[1].1 / POINTS[0].1).ln() / (POINTS[1].0 / POINTS[0].0).ln();
        assert!((e1 - 0.674).abs() < 0.001 && (e0 - 1.27).abs() < 0.01, "{e1} {e0}");
    }

    #[test]
    fn rate_is_monotone_and_one_at_or_above_tdp() {
        let tdp = Power::from_watts(700);
        let mut last = 0.0;
        for w in (1..=1000).map(|w| w as u64) {
            let r = compute_rate_fraction(Power::from_watts(w), tdp);
            assert!(r > 0.0 && r <= 1.0, "{w}: {r}");
            assert!(r >= last, "{w}: {r} < {last}");
            last = r;
            if w >= 700 {
                assert_eq!(r, 1.0, "{w}");
            }
        }
        // Continuous at the table points.
        for (x, r) in POINTS {
            let limit = Power::from_milliwatts((x * 700_000.0).round() as u64);
            assert!((compute_rate_fraction(limit, tdp) - r).abs() < 1e-4, "{x}");
        }
        assert_eq!(compute_rate_fraction(Power::from_watts(500), Power::ZERO), 1.0);
    }
}
