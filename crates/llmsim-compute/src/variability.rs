//! GPU-to-GPU performance variability: a synchronous job runs at the pace of its slowest GPU.
//!
//! The same compute-bound kernel runs at different speeds on different boards of one model under
//! the same power limit (silicon leakage and temperature set the clock the board can hold). The
//! difference is a property of the board, not of the run: on 392 V100s of TACC Longhorn, SGEMM
//! (cuBLAS, 25536^2, boards at their 300 W cap) varies by 1.6% (standard deviation of each
//! board's median time over the fleet median, the fleet trimmed of 1% outliers; 2.0% untrimmed)
//! between boards and by 0.12% between runs on one board, with time tracking the SM clock (data
//! of Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale,
//! Accelerator-Rich Systems", SC 2022, as redistributed in the PAL artifact,
//! github.com/hal-uw/blox-pal at da726ca, `aggregated_data/sim/sgemm-longhorn-agg.csv`, whose
//! `perf` column is the kernel time; the statistics are computed from each board's median time
//! over its ~22 runs: trimmed standard deviation 1.60%, interquartile range / 1.349 = 1.71%,
//! slowest board 1.20x and fastest 0.95x the median; `bench/kernels.md`). The paper's summary over five clusters is "8% (max 22%) average
//! performance variation" as a range, which a 1.6% standard deviation over 392 boards matches.
//!
//! Fleets screen boards: Microsoft's SuperBench flags a GPU whose GEMM benchmark is more than 5%
//! below its baseline (`superbench/analyzer/rules/diagnosis_rules.yaml`, ATC 2024), so the boards
//! a job runs on are modelled as the distribution truncated there.
//!
//! Every kernel of llmsim's calibration is a median board's. A job of `n` GPUs synchronizes them
//! every iteration (tensor-parallel collectives every layer, pipeline hand-offs, the data-parallel
//! reduction), so its compute-bound kernels run at the pace of its slowest board: in expectation
//! `1 + sigma * E[max of n draws of z]`, `z` a standard normal truncated at `screen / sigma`.
//! The expectation is computed, not sampled, so a run is deterministic and identical data-parallel
//! replicas stay identical. At `sigma` 1.6% and a 5% screen: 1.023 for 8 GPUs, 1.037 for 64,
//! 1.047 for 1,024, 1.050 for 16,384 (a test checks these against an independent sum).
//!
//! What is not modelled: which board is slowest (every rank is paced alike), memory-bound kernels
//! (HBM has its own clock; the same study's memory-heavier workloads vary less), and slowdowns
//! that come and go (thermal events, stragglers: `faults`).

/// Default standard deviation of a board's compute-bound kernel time over the fleet median:
/// 1.6%, V100 SGEMM on 392 boards (see the module doc). No per-board GEMM distribution of
/// A100, H100 or Blackwell boards is published; the same figure is used for every GPU.
pub const DEFAULT_SIGMA: f64 = 0.016;

/// Default screening threshold: a board more than 5% slower than the median is taken out of
/// the fleet (SuperBench's GEMM rule; see the module doc).
pub const DEFAULT_SCREEN: f64 = 0.05;

/// Largest accepted `sigma`: 50%, far beyond any measured fleet.
pub const MAX_SIGMA: f64 = 0.5;

/// Standard normal CDF.
fn phi(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// Expected factor by which a job of `n` GPUs' compute-bound kernels take longer than on the
/// median board: `1 + sigma * E[max of n]` of a standard normal truncated at `screen / sigma`,
/// never below 1 (the calibration is the median board's). 1 for `sigma` 0 or `n` <= 1.
///
/// `E[max] = c - integral from -inf to c of G(z)^n dz` with `G` the truncated CDF, integrated
/// with Simpson's rule on 4,000 intervals from -12 (`G` below 1e-32 there), `c` capped at 12.
pub fn slowest_of(n: u64, sigma: f64, screen: f64) -> f64 {
    if n <= 1 || sigma <= 0.0 || !sigma.is_finite() {
        return 1.0;
    }
    let c = if screen.is_finite() && screen > 0.0 {
        (screen / sigma).min(12.0)
    } else {
        12.0
    };
    let top = phi(c);
    let nf = n as f64;
    let g_pow = |z: f64| -> f64 {
        let g = (phi(z) / top).min(1.0);
        if g <= 0.0 { 0.0 } else { (nf * g.ln()).exp() }
    };
    let lo = -12.0;
    const STEPS: usize = 4000;
    let h = (c - lo) / STEPS as f64;
    let mut sum = g_pow(lo) + g_pow(c);
    for i in 1..STEPS {
        let w = if i % 2 == 1 { 4.0 } else { 2.0 };
        sum += w * g_pow(lo + h * i as f64);
    }
    let integral = sum * h / 3.0;
    (1.0 + sigma * (c - integral)).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// E[max of n] by a different route: the density of the maximum, `n g(z) G(z)^(n-1)`, times
    /// `z`, summed on a fine midpoint grid (no shared code with [`slowest_of`] but `phi`).
    fn by_density(n: u64, sigma: f64, screen: f64) -> f64 {
        let c = screen / sigma;
        let top = phi(c);
        let (lo, steps) = (-12.0, 200_000);
        let h = (c - lo) / steps as f64;
        let mut e = 0.0;
        for i in 0..steps {
            let z = lo + h * (i as f64 + 0.5);
            let g = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt() / top;
            let cdf = phi(z) / top;
            e += z * n as f64 * g * cdf.powi(n as i32 - 1) * h;
        }
        (1.0 + sigma * e).max(1.0)
    }

    #[test]
    fn matches_the_density_integral() {
        for n in [2u64, 8, 64, 1024, 16_384] {
            let a = slowest_of(n, DEFAULT_SIGMA, DEFAULT_SCREEN);
            let b = by_density(n, DEFAULT_SIGMA, DEFAULT_SCREEN);
            assert!((a - b).abs() < 1e-6, "n={n}: {a} vs {b}");
        }
    }

    #[test]
    fn untruncated_maxima_match_known_order_statistics() {
        // E[max of 2 standard normals] = 1/sqrt(pi); of 8: 1.4236 (Harter's tables).
        let s = 0.01;
        let two = (slowest_of(2, s, f64::INFINITY) - 1.0) / s;
        assert!((two - 1.0 / std::f64::consts::PI.sqrt()).abs() < 1e-6, "{two}");
        let eight = (slowest_of(8, s, f64::INFINITY) - 1.0) / s;
        assert!((eight - 1.4236).abs() < 1e-3, "{eight}");
    }

    #[test]
    fn grows_with_n_and_stays_below_the_screen() {
        let mut last = 1.0;
        for n in [1u64, 2, 8, 64, 1024, 16_384, 131_072, 1 << 20] {
            let f = slowest_of(n, DEFAULT_SIGMA, DEFAULT_SCREEN);
            assert!(f >= last && f <= 1.0 + DEFAULT_SCREEN + 1e-12, "n={n}: {f}");
            last = f;
        }
        assert_eq!(slowest_of(1, DEFAULT_SIGMA, DEFAULT_SCREEN), 1.0);
        assert_eq!(slowest_of(1024, 0.0, DEFAULT_SCREEN), 1.0);
    }
}
