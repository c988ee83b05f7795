//! The Mamba-2 SSD chunked scan as Megatron-Core's `MambaMixer` runs it: mamba_ssm's Triton
//! kernels (`mamba_chunk_scan_combined`, state-spaces/mamba `mamba_ssm/ops/triton/ssd_combined.py`,
//! commit e9594ce), five kernels forward and fourteen backward, each reading its inputs from and
//! writing its outputs to HBM.
//!
//! The time is the HBM traffic summed over those kernels ([`hbm_bytes`]) at [`MEMORY_EFF`] of the
//! GPU's bandwidth, or the FLOPs at the attention class's compute efficiency if that is longer.
//! The unfused kernels are memory-bound ("the original Mamba2 SSD implementation is mostly
//! bottlenecked by memory bandwidth and latency", PyTorch blog "Accelerating Mamba2 with Kernel
//! Fusion", 2025).
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
//! - backward (`_mamba_chunk_scan_combined_bwd`, no `z`, as `MambaMixer` with its separate gated
//!   norm calls it): recomputes cumsum, CB, chunk states and state passing (FP32 out), then
//!   `_chunk_scan_bwd_dstates` (C, dout in, FP32 dstates out), `_state_passing_bwd` (FP32 states
//!   and dstates in, BF16 dstates and states out), `_chunk_scan_chunk_state_bwd_dx` (x, dout, B,
//!   CB, dstates in, dx out), `_chunk_state_bwd_db` (x, dstates), `_chunk_scan_bwd_dC` (states,
//!   dout), `_chunk_scan_bwd_dcb` (x, dout, CB out), two `_bmm_chunk_bwd` (B/C, dCB), and
//!   `_chunk_scan_bwd_ddAcs_stable` (x, dout, CB): 11 passes over x-sized tensors, 8.5 over the
//!   FP32 states, 6 over CB, 8 over B/C, 52 bytes per token and head of dt/dA.
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
/// launch-bound and were not used. No backward measurement was found; the backward is timed at
/// the same fraction over its own kernels' traffic.
pub const MEMORY_EFF: f64 = 0.364;

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
    if s.backward {
        11.0 * x + 8.5 * states + 6.0 * cb + 8.0 * bc + 52.0 * dt
    } else {
        3.0 * x + 3.0 * states + 2.0 * cb + 4.0 * bc + 26.0 * dt
    }
}

/// Seconds the SSD kernels spend on memory traffic on a GPU of `hbm_bytes_per_s`.
pub fn memory_seconds(s: &SsdShape, hbm_bytes_per_s: f64) -> f64 {
    hbm_bytes(s) / (hbm_bytes_per_s * MEMORY_EFF)
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
        }
    }

    #[test]
    fn traffic_per_token_matches_the_documented_count() {
        // 3·16384 + 3·16384 + 2·1024 + 4·256 + 26·128 bytes per token.
        let per_tok = hbm_bytes(&granite(16384, false)) / 16384.0;
        assert!((per_tok - 104_704.0).abs() < 1e-6, "{per_tok}");
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
