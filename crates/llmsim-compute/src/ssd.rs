//! The Mamba-2 SSD chunked scan as Megatron-Core's `MambaMixer` runs it: mamba_ssm's Triton
//! kernels (`mamba_chunk_scan_combined`, state-spaces/mamba `mamba_ssm/ops/triton/ssd_combined.py`,
//! commit e9594ce), five kernels forward and fourteen backward, each reading its inputs from and
//! writing its outputs to HBM.
//!
//! The time is the HBM traffic summed over those kernels ([`hbm_bytes`]) at [`MEMORY_EFF`] of the
//! GPU's bandwidth forward and [`BWD_MEMORY_EFF`] backward, or the FLOPs at the attention class's
//! compute efficiency if that is longer. The unfused kernels are memory-bound ("the original
//! Mamba2 SSD implementation is mostly bottlenecked by memory bandwidth and latency", PyTorch blog
//! "Accelerating Mamba2 with Kernel Fusion", 2025).
//!
//! Traffic per kernel, read off the Triton code (x, dout, dx: `tokens·heads·head_dim` in BF16;
//! chunk states: `chunks·heads·head_dim·state`, FP32 where the code asks `states_in_fp32` or
//! keeps the states' dtype, BF16 where it casts to `C.dtype`/`x.dtype`; `CB`: `tokens·groups·chunk`
//! in FP32; B, C: `tokens·groups·state` in BF16; dt and the `dA` cumsum per token and head):
//!
//! - forward: `_chunk_cumsum_fwd` (dt in, dA_cumsum and dt out, FP32); `_chunk_state_fwd` (B, x,
//!   dt, dA_cumsum in, FP32 states out); `_state_passing_fwd` (FP32 states in, BF16 states out);
//!   `_bmm_chunk_fwd` (C, B in, FP32 CB out); `_chunk_scan_fwd` (CB, x, dt, dA_cumsum, C, BF16
//!   states in, y out): 3 passes over x-sized tensors, 3 over the FP32 states, 2 over CB, 4 over
//!   B/C, 26 bytes per token and head of dt/dA.
//! - backward (`_mamba_chunk_scan_combined_bwd`): recomputes cumsum, CB, chunk states and state
//!   passing (FP32 out), then `_chunk_scan_bwd_dstates` (C, dout in, FP32 dstates out),
//!   `_state_passing_bwd` (FP32 states and dstates in, BF16 dstates and states out),
//!   `_chunk_scan_chunk_state_bwd_dx` (x, dout, B, CB, dstates in, dx out), `_chunk_state_bwd_db`
//!   (x, dstates), `_chunk_scan_bwd_dC` (states, dout), `_chunk_scan_bwd_dcb` (x, dout, CB out),
//!   two `_bmm_chunk_bwd` (B/C, dCB), and `_chunk_scan_bwd_ddAcs_stable` (x, dout, CB): 11 passes
//!   over x-sized tensors, 8.5 over the FP32 states, 6 over CB, 8 over B/C, 52 bytes per token and
//!   head of dt/dA.
//! - the gate ([`SsdShape::gated`]): Megatron-Core trains through `mamba_split_conv1d_scan_combined`
//!   without `rmsnorm_weight` (`MambaMixer._ssm_training`, Megatron-LM 0d8e0714c and d7288711,
//!   `ssm/mamba_mixer.py`; its `ExtendedRMSNorm` then runs without `z`), so `z` goes into the
//!   scan: `_chunk_scan_fwd` also reads z and writes the ungated `out_x` it saves (2 more x-sized
//!   passes), and the backward's `_chunk_scan_bwd_dz` reads x, z, `out_x` and dout and writes dz
//!   and the gated dout (6 more).
//!
//! Re-reads of a tile by several heads of one group are taken to hit L2 and are not counted.

use serde::{Deserialize, Serialize};

/// Fraction of the HBM bandwidth the unfused Triton SSD kernels reach over the traffic of
/// [`hbm_bytes`].
///
/// Source: vLLM PR #27299 (cyang49, comment of 2025-10-25), microbenchmark on one H100 of the
/// unfused five-kernel SSD forward ("Original" column; vLLM's copy of the mamba_ssm kernels),
/// shape of granite-4.0-h-small (128 heads, head dim 64, 1 group, state 128; chunk 256), in
/// tokens/s: 8K 1.262e7, 16K 1.292e7, 32K 1.180e7, 64K 1.107e7, 128K 1.070e7, 256K 1.082e7.
/// With the traffic of [`hbm_bytes`] (104.7 KB per token) and the H100's 3.35 TB/s these are
/// 0.394, 0.404, 0.369, 0.346, 0.334, 0.338 of the bandwidth; their mean, 0.364, is shipped
/// (tests/calibration.rs recomputes each point within 12%). Shorter inputs (1K-4K tokens) are
/// launch-bound and were not used. vLLM's prefill calls the scan without z (an ungated
/// [`SsdShape`]). The forward's fraction; the backward has its own, [`BWD_MEMORY_EFF`].
pub const MEMORY_EFF: f64 = 0.364;

/// Bytes of [`hbm_bytes`] the SSD kernels move per SM and SM clock cycle: [`MEMORY_EFF`] of the
/// H100's 3.35 TB/s over its 132 SMs at their 1980 MHz maximum clock (`crate::gpu`), about 4.67.
///
/// Reaching only 0.36 of the bandwidth that a copy reaches at 0.9, the Triton kernels are bound
/// by their SMs' issue rate and latency, not by HBM ("mostly bottlenecked by memory bandwidth and
/// latency", the PyTorch blog above), so a GPU with more bandwidth but about as many SMs does not
/// run them proportionally faster. The scan's time is the longer of the bandwidth time and the
/// time at this rate per SM and cycle: on the H100 the two are equal by construction; on an A100
/// (108 SMs at 1410 MHz, 2.0 TB/s) they are within 5% of each other; on Blackwell (148-152 SMs at
/// 1965-2070 MHz, 8 TB/s) the SM rate's time is 2.0-2.15x the bandwidth's.
///
/// Kernel evidence that Blackwell does not speed the Triton scan up by its bandwidth: a CuTe DSL
/// SSD forward written for SM100 runs the Nemotron-3 Nano prefill scan 1.44x faster than the
/// Triton one (NVIDIA/Megatron-LM PR #5829, nsys durations 369 against 256, 2026-07). Model-level
/// check, not fitted: a pure Mamba-2 1.4B model (d_model 2048, 48 layers, batch 4 x 4096 tokens,
/// BF16, mamba_ssm's Triton SSD) trains at 102.5 / 239.2 / 360.4 TFLOP/s on an A100 / H200 /
/// GB200 (state-spaces/mamba issue #904, 2026-04-06): H200/A100 2.33 and GB200/H200 1.51, which
/// llmsim gives as 2.24 and 1.49 with this bound (2.40 and 1.65 before the backward took its own
/// fraction, [`BWD_MEMORY_EFF`]) and 2.68 and 1.96 with the bandwidth fraction
/// alone (`crates/llmsim-sim/tests/mamba_scaling.rs`).
pub const BYTES_PER_SM_CYCLE: f64 = MEMORY_EFF * 3.35e12 / (132.0 * 1980.0e6);

/// Fraction of the HBM bandwidth the backward kernels reach over their traffic of [`hbm_bytes`]
/// (the SM-rate bound of [`BYTES_PER_SM_CYCLE`] scales by the same [`BWD_MEMORY_EFF`] /
/// [`MEMORY_EFF`]).
///
/// Source: the TFLA paper's kernel benchmark (Beck et al., "Tiled Flash Linear Attention",
/// arXiv 2503.14376; NX-AI/mlstm_kernels 39d3c61, `notebooks/plots_mlstm_kernel_benchmark_tfla_paper/
/// mlstm_tfla_paper_consttoken_benchmark_results_rerun.p`, run by
/// `scripts/run_training_kernel_benchmarks.py::consttoken_benchmark_mamba`), one H100, BF16:
/// `mamba_split_conv1d_scan_combined` (the function Megatron-Core trains with: conv1d, the
/// gated scan) at 65,536 tokens, head dim 64, state 64, one group, chunk 256, forward alone and
/// forward + `sum(out).backward()`, median of 30: 128 heads 7.074 / 44.376 ms, 64 heads 3.626 /
/// 26.952 ms (8,192 x 8 tokens). The work outside the scan is taken out at llmsim's element-wise
/// rate (`tests/calibration.rs ssd_backward_reproduces_the_tfla_benchmark` recomputes it): the
/// conv1d (forward, its recompute and backward), the sum and its materialized gradient, and the
/// harness's own backward through its BF16 casts of FP32 leaves (the `zxbcdt` gradient cast to
/// FP32 and accumulated). That leaves 6.21 / 3.19 ms of scan forward, 0.354 / 0.353 of the
/// bandwidth over [`hbm_bytes`] (the shipped [`MEMORY_EFF`], from another benchmark, is 0.364),
/// and 26.46 / 17.86 ms of scan backward: 0.268 / 0.202. Their mean, 0.235, is shipped. The
/// backward is thus about 0.65 of the forward's rate, which puts it at 4-5x the forward's time,
/// not the 3x its traffic alone gives. The two head counts disagree by 28%: the backward has a
/// cost that does not grow with the heads, not resolved here.
pub const BWD_MEMORY_EFF: f64 = 0.235;

/// The bandwidth fraction of the pass `s` times.
fn efficiency(s: &SsdShape) -> f64 {
    if s.backward { BWD_MEMORY_EFF } else { MEMORY_EFF }
}

/// One SSD scan call on one GPU (its TP shard of heads and groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SsdShape {
    /// Tokens of the micro-batch (batch times sequence length).
    pub tokens: u64,
    /// Local SSM heads.
    pub heads: u64,
    /// Dimension of one head (P).
    pub head_dim: u64,
    /// State size (N).
    pub state: u64,
    /// Local B/C groups.
    pub groups: u64,
    /// Chunk length (Q), at most the sequence length.
    pub chunk: u64,
    /// The backward kernels rather than the forward.
    pub backward: bool,
    /// `z` gates the output inside the scan (module doc): Megatron-Core's training path. False:
    /// the scan alone, as `mamba_chunk_scan_combined` without `z` (inference kernels, benchmarks).
    #[serde(default)]
    pub gated: bool,
}

/// Bytes the SSD kernels move to and from HBM, summed over the kernels (module doc).
pub fn hbm_bytes(s: &SsdShape) -> f64 {
    let t = s.tokens as f64;
    let h = s.heads as f64;
    let chunks = s.tokens.div_ceil(s.chunk.max(1)) as f64;
    let x = t * h * s.head_dim as f64 * 2.0;
    let states = chunks * h * (s.head_dim * s.state) as f64 * 4.0;
    let cb = t * (s.groups * s.chunk) as f64 * 4.0;
    let bc = t * (s.groups * s.state) as f64 * 2.0;
    let dt = t * h;
    let gate = if s.gated { 1.0 } else { 0.0 };
    if s.backward {
        (11.0 + 6.0 * gate) * x + 8.5 * states + 6.0 * cb + 8.0 * bc + 52.0 * dt
    } else {
        (3.0 + 2.0 * gate) * x + 3.0 * states + 2.0 * cb + 4.0 * bc + 26.0 * dt
    }
}

/// Seconds the SSD kernels spend on memory traffic on a GPU of `hbm_bytes_per_s`.
pub fn memory_seconds(s: &SsdShape, hbm_bytes_per_s: f64) -> f64 {
    hbm_bytes(s) / (hbm_bytes_per_s * efficiency(s))
}

/// Seconds the SSD kernels take on `gpu`: the longer of [`memory_seconds`] and the same traffic
/// at [`BYTES_PER_SM_CYCLE`] over the GPU's SMs at its maximum SM clock (where the GPU gives one).
pub fn seconds(s: &SsdShape, gpu: &crate::GpuSpec) -> f64 {
    let memory = memory_seconds(s, gpu.hbm_bandwidth_bytes_per_s);
    match gpu.sm_clock_mhz {
        Some(mhz) => {
            let per_cycle = BYTES_PER_SM_CYCLE * efficiency(s) / MEMORY_EFF;
            let sm_rate = per_cycle * f64::from(gpu.sm_count) * f64::from(mhz) * 1e6;
            memory.max(hbm_bytes(s) / sm_rate)
        }
        None => memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granite(tokens: u64, backward: bool) -> SsdShape {
        SsdShape {
            tokens,
            heads: 128,
            head_dim: 64,
            state: 128,
            groups: 1,
            chunk: 256,
            backward,
            gated: false,
        }
    }

    #[test]
    fn traffic_per_token_matches_the_documented_count() {
        // 3·16384 + 3·16384 + 2·1024 + 4·256 + 26·128 bytes per token.
        let per_tok = hbm_bytes(&granite(16384, false)) / 16384.0;
        assert!((per_tok - 104_704.0).abs() < 1e-6, "{per_tok}");
    }

    #[test]
    fn the_h100_is_at_both_bounds_and_blackwell_at_its_sm_rate() {
        let gpu = |n: &str| crate::gpu::gpu(n).unwrap();
        let s = granite(16384, true);
        // H100: the per-SM-cycle rate is derived from its bandwidth fraction, so the two agree.
        let h100 = gpu("H100");
        let bw = memory_seconds(&s, h100.hbm_bandwidth_bytes_per_s);
        assert!((seconds(&s, h100) / bw - 1.0).abs() < 1e-12);
        // Blackwell: about as many SMs at about the same clock, 2.4x the bandwidth: SM-bound,
        // so the scan takes about as long as on an H100 scaled by SMs x clock, not bandwidth.
        for name in ["B200", "GB200", "GB300"] {
            let g = gpu(name);
            let t = seconds(&s, g);
            let bw_only = memory_seconds(&s, g.hbm_bandwidth_bytes_per_s);
            assert!(t > 1.9 * bw_only && t < 2.2 * bw_only, "{name}: {t} vs {bw_only}");
            let sm_cycles = |g: &crate::GpuSpec| f64::from(g.sm_count) * f64::from(g.sm_clock_mhz.unwrap());
            let expect = seconds(&s, h100) * sm_cycles(h100) / sm_cycles(g);
            assert!((t / expect - 1.0).abs() < 1e-12, "{name}");
        }
        // A GPU without a clock is timed by its bandwidth alone.
        let no_clock = crate::GpuSpec {
            sm_clock_mhz: None,
            ..*gpu("GB200")
        };
        assert_eq!(seconds(&s, &no_clock), memory_seconds(&s, no_clock.hbm_bandwidth_bytes_per_s));
    }

    #[test]
    fn the_gate_adds_its_passes_over_x() {
        let x = 8192.0 * 128.0 * 64.0 * 2.0;
        for (backward, passes) in [(false, 2.0), (true, 6.0)] {
            let plain = granite(8192, backward);
            let gated = SsdShape { gated: true, ..plain };
            let extra = hbm_bytes(&gated) - hbm_bytes(&plain);
            assert!((extra - passes * x).abs() < 1e-3, "{backward}: {extra}");
        }
    }

    #[test]
    fn the_backward_runs_at_its_own_fraction_on_both_bounds() {
        let gpu = |n: &str| crate::gpu::gpu(n).unwrap();
        let bwd = granite(16384, true);
        let per_byte = |s: &SsdShape, g: &crate::GpuSpec| seconds(s, g) / hbm_bytes(s);
        for name in ["H100", "GB200"] {
            let g = gpu(name);
            let ratio = per_byte(&bwd, g) / per_byte(&granite(16384, false), g);
            assert!((ratio - MEMORY_EFF / BWD_MEMORY_EFF).abs() < 1e-9, "{name}: {ratio}");
        }
    }

    #[test]
    fn backward_moves_more_than_forward_and_scales_with_tokens() {
        let f = hbm_bytes(&granite(8192, false));
        let b = hbm_bytes(&granite(8192, true));
        assert!(b > 2.5 * f && b < 4.0 * f, "{b} vs {f}");
        let f2 = hbm_bytes(&granite(16384, false));
        assert!((f2 / f - 2.0).abs() < 1e-9);
    }
}
