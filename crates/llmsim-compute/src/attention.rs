//! Fused attention time from published kernel benchmarks, by kernel generation, head dim,
//! causal mask and sequence length (`data/attention.csv`, with its sources).
//!
//! The benchmarks count causal attention at half the FLOPs; llmsim's ops count the full `QKᵀ`
//! and `AV` (the Megatron/Narayanan convention, see `llmsim-workload` ops). So a causal op's
//! kernel does half the op's FLOPs, at the causal rate. Rates are for the benchmarked GPU
//! (H100 SXM for Hopper, A100 SXM for Ampere); another GPU of the architecture, or a Blackwell
//! GPU with no table of its own, runs at the same fraction of its own BF16 peak; every rate is
//! taken at the sustained fraction of a training step ([`seconds`]).

use std::sync::OnceLock;

use llmsim_core::GpuArch;
use serde::{Deserialize, Serialize};

use crate::csvtext::CsvText;
use crate::gpu::GpuSpec;

pub use crate::op::AttentionShape;

/// The shipped table.
pub const ATTENTION_CSV: &str = include_str!("../data/attention.csv");

/// Fused attention kernels with published tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// FlashAttention-2 (Dao 2023).
    Fa2,
    /// FlashAttention-3 (Shah et al. 2024), Hopper only.
    Fa3,
    /// cuDNN 9 fused attention (Transformer Engine's `FusedAttention`).
    Cudnn,
    /// cuDNN fused attention on per-tensor-scaled FP8 (E4M3) Q, K, V (Transformer Engine's FP8
    /// `FusedAttention`, `fp8_dpa` with delayed or current scaling). Boards without measured
    /// rows take [`AttentionKernel::Cudnn`]'s.
    CudnnFp8,
    /// cuDNN fused attention on MXFP8 Q, K, V (Transformer Engine's FP8 `FusedAttention` under
    /// `MXFP8BlockScaling` with `fp8_dpa`). Boards without measured rows take
    /// [`AttentionKernel::Cudnn`]'s.
    CudnnMxfp8,
}

impl AttentionKernel {
    fn name(self) -> &'static str {
        match self {
            AttentionKernel::Fa2 => "fa2",
            AttentionKernel::Fa3 => "fa3",
            AttentionKernel::Cudnn => "cudnn",
            AttentionKernel::CudnnFp8 => "cudnn_fp8",
            AttentionKernel::CudnnMxfp8 => "cudnn_mxfp8",
        }
    }

    /// Whether the kernel takes FP8 inputs.
    pub fn is_fp8(self) -> bool {
        matches!(self, AttentionKernel::CudnnFp8 | AttentionKernel::CudnnMxfp8)
    }

    /// Transformer Engine's default on the architecture: cuDNN fused attention on Hopper and
    /// later, FlashAttention-2 on Ampere.
    pub fn default_for(arch: GpuArch) -> AttentionKernel {
        match arch {
            GpuArch::Ampere => AttentionKernel::Fa2,
            GpuArch::Hopper | GpuArch::Blackwell => AttentionKernel::Cudnn,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Fwd,
    Bwd,
    FwdBwd,
}

const SEQS: [f64; 6] = [512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];

struct Row {
    /// `hopper` / `ampere` (the architecture's reference GPU), or a catalog GPU's name for rates
    /// measured on that GPU.
    arch: &'static str,
    kernel: String,
    head_dim: u64,
    causal: bool,
    pass: Pass,
    /// A sliding-window row (`top_left` mask with a left bound of this many keys): rates at the
    /// query length; `None`, the full mask of `causal`.
    window: Option<u64>,
    tflops: [f64; 6],
}

fn table() -> &'static [Row] {
    static T: OnceLock<Vec<Row>> = OnceLock::new();
    T.get_or_init(|| {
        let csv = CsvText::parse(
            "built-in attention CSV",
            ATTENTION_CSV,
            &[
                "arch", "kernel", "head_dim", "causal", "pass", "s512", "s1k", "s2k", "s4k", "s8k", "s16k",
            ],
            &["window"],
        )
        .expect("data/attention.csv is valid: the tests parse it");
        csv.records()
            .map(|r| {
                let num = |c: &str| r.number(c, 0.0, true, f64::INFINITY).expect("attention.csv numbers");
                // A blank sequence cell: not measured (see `at_seq`).
                let rate = |c: &str| if r.field(c).is_empty() { f64::NAN } else { num(c) };
                Row {
                    arch: match r.field("arch") {
                        "hopper" => "hopper",
                        "ampere" => "ampere",
                        a => {
                            crate::gpu::find(a)
                                .unwrap_or_else(|| panic!("attention.csv: unknown arch or GPU {a}"))
                                .name
                        }
                    },
                    kernel: r.field("kernel").to_string(),
                    head_dim: num("head_dim") as u64,
                    causal: r.field("causal") == "1",
                    pass: match r.field("pass") {
                        "fwd" => Pass::Fwd,
                        "bwd" => Pass::Bwd,
                        _ => Pass::FwdBwd,
                    },
                    window: match r.field("window") {
                        "" => None,
                        _ => Some(num("window") as u64),
                    },
                    tflops: ["s512", "s1k", "s2k", "s4k", "s8k", "s16k"].map(rate),
                }
            })
            .collect()
    })
}

/// Linear in log2(seq), clamped to the row's measured range (a row may leave its shortest
/// sequences blank: not measured).
fn at_seq(v: &[f64; 6], seq: u64) -> f64 {
    let first = v.iter().position(|x| x.is_finite()).unwrap_or(0);
    let last = v.iter().rposition(|x| x.is_finite()).unwrap_or(5);
    let x = (seq.max(1) as f64).log2().clamp(SEQS[first].log2(), SEQS[last].log2());
    let i = ((x - 9.0).floor() as usize).clamp(first, last.saturating_sub(1).max(first));
    if i >= last {
        return v[last];
    }
    let f = x - (9.0 + i as f64);
    v[i] + (v[i + 1] - v[i]) * f
}

fn find(arch: &str, kernel: &str, head_dim: u64, causal: bool, pass: Pass) -> Option<&'static Row> {
    table().iter().find(|r| {
        r.window.is_none() && r.arch == arch && r.kernel == kernel && r.head_dim == head_dim && r.causal == causal && r.pass == pass
    })
}

/// Rate at one tabulated head dim, TFLOP/s (sources' convention), or `None`.
fn rate_at_dim(arch: &str, kernel: &str, head_dim: u64, causal: bool, backward: bool, seq: u64) -> Option<f64> {
    let direct = |c: bool, p: Pass| find(arch, kernel, head_dim, c, p).map(|r| at_seq(&r.tflops, seq));
    if !backward {
        return direct(causal, Pass::Fwd).or_else(|| direct(causal, Pass::FwdBwd));
    }
    if let Some(r) = direct(causal, Pass::Bwd) {
        return Some(r);
    }
    if causal {
        // Causal backward: the non-causal backward scaled like the forward.
        if let (Some(b), Some(fc), Some(fn_)) = (direct(false, Pass::Bwd), direct(true, Pass::Fwd), direct(false, Pass::Fwd)) {
            return Some(b * fc / fn_);
        }
    }
    direct(causal, Pass::FwdBwd)
}

/// Kernel throughput in TFLOP/s of the sources' convention (causal halved) for `shape`, on the
/// architecture's benchmarked GPU, or `None` where the table has nothing for the kernel.
/// Head dims between tabulated ones are interpolated linearly; outside, clamped.
pub fn table_rate(arch: GpuArch, kernel: AttentionKernel, shape: &AttentionShape) -> Option<f64> {
    rate_in(table_arch(arch), kernel, shape)
}

/// [`table_rate`] in the rows of `a` (an architecture or a GPU's own table).
fn rate_in(a: &str, kernel: AttentionKernel, shape: &AttentionShape) -> Option<f64> {
    let k = kernel.name();
    let seq = shape.s_kv;
    let mut dims: Vec<u64> = table()
        .iter()
        .filter(|r| r.window.is_none() && r.arch == a && r.kernel == k)
        .map(|r| r.head_dim)
        .collect();
    dims.sort_unstable();
    dims.dedup();
    let rate = |d: u64| rate_at_dim(a, k, d, shape.causal, shape.backward, seq);
    let usable: Vec<(u64, f64)> = dims.iter().filter_map(|&d| rate(d).map(|r| (d, r))).collect();
    let (lo, hi) = (usable.first()?, usable.last()?);
    let d = shape.head_dim;
    if d <= lo.0 {
        return Some(lo.1);
    }
    if d >= hi.0 {
        return Some(hi.1);
    }
    let w = usable.windows(2).find(|w| w[0].0 <= d && d <= w[1].0)?;
    let f = (d - w[0].0) as f64 / (w[1].0 - w[0].0) as f64;
    Some(w[0].1 + (w[1].1 - w[0].1) * f)
}

/// Blackwell boards without a table of their own take the table of the board on the same die
/// (B200 and GB200 are both SM100; B300 and GB300 both SM103, Blackwell Ultra), at their own
/// BF16 peak: the datasheet peaks differ by the boards' power limits.
const SAME_DIE: [(&str, &str); 2] = [("B200", "GB200"), ("B300", "GB300")];

/// The catalog GPU whose own measured table (`data/attention.csv` rows named after a GPU) gives
/// `kernel`'s rate on `gpu` at `head_dim`: the GPU itself, its `base` chain, or the board on the
/// same die; `None` where no such table covers the head dim (the architecture's table applies).
fn measured_on(gpu: &GpuSpec, kernel: AttentionKernel, head_dim: u64) -> Option<&'static GpuSpec> {
    let covers = |name: &str| {
        let dims = table()
            .iter()
            .filter(|r| r.window.is_none() && r.arch == name && r.kernel == kernel.name())
            .map(|r| r.head_dim);
        let (lo, hi) = dims.fold((u64::MAX, 0), |(lo, hi), d| (lo.min(d), hi.max(d)));
        lo <= head_dim && head_dim <= hi
    };
    table_boards(gpu).find_map(|c| if covers(c) { crate::gpu::find(c) } else { None })
}

/// The boards whose measured rows may stand for `gpu`, in order: each GPU of its lineage (itself,
/// then its `base` chain), each followed by the board on the same die ([`SAME_DIE`]).
fn table_boards(gpu: &GpuSpec) -> impl Iterator<Item = &'static str> {
    gpu.lineage().flat_map(|n| {
        let die = SAME_DIE.iter().find(|(b, _)| *b == n).map_or(n, |&(_, g)| g);
        [n, die]
    })
}

/// Batch x heads of the launches behind the GPU tables (cudnn-frontend's training SDPA
/// benchmark: batch 2 x 64 query heads, or batch 1 x 128; DeepSeek-V3's 2 x 128 for head dim 192).
const GPU_TABLE_BATCH_HEADS: u64 = 128;

/// The architecture whose table stands for `arch` (Blackwell: Hopper's, scaled by peak).
fn table_arch(arch: GpuArch) -> &'static str {
    match arch {
        GpuArch::Ampere => "ampere",
        GpuArch::Hopper | GpuArch::Blackwell => "hopper",
    }
}

/// SMs of the GPU each architecture's table was measured on (A100 SXM 108, H100 SXM 132).
fn table_sms(arch: GpuArch) -> u32 {
    match arch {
        GpuArch::Ampere => 108,
        GpuArch::Hopper | GpuArch::Blackwell => 132,
    }
}

/// BF16 dense peak of the GPU each architecture's table was measured on (A100 SXM, H100 SXM).
fn table_peak_tflops(arch: GpuArch) -> f64 {
    match arch {
        GpuArch::Ampere => 312.0,
        GpuArch::Hopper | GpuArch::Blackwell => 989.4,
    }
}

/// Seconds for a fused attention op of `op_flops` (llmsim's convention: causal not halved) on
/// `gpu` with `kernel`, or `None` when the kernel has no table for the GPU's architecture.
///
/// The tables are short benchmarks (30 timed repeats in flash-attention's
/// `benchmark_flash_attention.py`), run before the GPU's clocks settle under its power limit;
/// in a training step attention runs back to back with the GEMMs, so it takes the same
/// sustained fraction as they do ([`crate::gemm::SUSTAINED_FRACTION`], 0.880). Attention's own
/// measurement agrees: FlashAttention-4 in BF16 on a B200, timed back to back, fell from 1,450
/// to 1,237 TFLOP/s (0.853) as the SM clock dropped from 1,965 to ~1,580 MHz within ~70
/// iterations (flashinfer-ai/flashinfer PR #2899, 2026-03-26).
///
/// The tables' launches had thousands of thread blocks; an op's launch with fewer ends on a tail
/// of its longest blocks, so the rate also takes [`crate::tile_schedule::relative`]'s factor
/// (e.g. 0.69 forward for 8 heads of 128 at 4k tokens on an H100).
///
/// A GPU with a measured table of its own (or of its `base`, or of the board on the same die,
/// [`SAME_DIE`]) uses it at the ratio of its BF16 peak to that board's; any other GPU, the
/// architecture's table at the ratio of its peak to the architecture's benchmarked GPU.
pub fn seconds(gpu: &GpuSpec, kernel: AttentionKernel, shape: &AttentionShape, op_flops: f64) -> Option<f64> {
    // FP8 attention was measured on some boards and head dims only, and its sliding-window rows
    // are not taken (data/attention.csv): elsewhere it takes BF16 cuDNN's rate.
    let kernel = if kernel.is_fp8() && (window_of(shape).is_some() || measured_on(gpu, kernel, shape.head_dim).is_none()) {
        AttentionKernel::Cudnn
    } else {
        kernel
    };
    if let Some(t) = window_seconds(gpu, kernel, shape, op_flops) {
        return Some(t);
    }
    let bf16 = |g: &GpuSpec| g.peak_flops(crate::op::DType::Bf16) / 1e12;
    let (table, table_sms, table_peak, bench) = match measured_on(gpu, kernel, shape.head_dim) {
        Some(t) => (t.name, t.sm_count, bf16(t), Some(GPU_TABLE_BATCH_HEADS)),
        None => (table_arch(gpu.arch), table_sms(gpu.arch), table_peak_tflops(gpu.arch), None),
    };
    let fill = crate::tile_schedule::relative(kernel, shape, gpu.sm_count, table_sms, bench);
    let rate = rate_in(table, kernel, shape)? * crate::gemm::SUSTAINED_FRACTION * fill;
    // A Blackwell board without a full-mask table at this head dim scales Hopper's table by the
    // two architectures' measured ratio at that head dim where one exists, else by peak.
    let measured = (bench.is_none() && gpu.arch == GpuArch::Blackwell)
        .then(|| measured_ratio_to_hopper(gpu, kernel, shape))
        .flatten();
    let scale = match measured {
        Some((ratio, board)) => ratio * bf16(gpu) / bf16(board),
        None => bf16(gpu) / table_peak,
    };
    let kernel_flops = if shape.causal { op_flops / 2.0 } else { op_flops };
    Some(kernel_flops.max(0.0) / (rate * scale * 1e12))
}

/// The Hopper board of the paired runs behind [`measured_ratio_to_hopper`].
const PAIRED_HOPPER: &str = "H200";

/// The measured rate of `gpu`'s Blackwell board over Hopper's for `shape`'s head dim, kernel and
/// pass, with the board it was measured on: the ratio of the two boards' rates in one benchmark
/// run on both with one software version and the same launches (`data/attention.csv`: cuDNN
/// 9.19's training SDPA benchmark on an H200, a GB200 and a GB300, head dim 64, a 1,024-key
/// window, at the op's query length). Taken at the widest window both measured (the one closest
/// to a full mask); `None` where no such pair exists.
///
/// Why not the peak ratio: at head dim 64 a Blackwell board gains over Hopper much less than
/// its tensor cores do (GB200 over H200 1.71-1.77x forward and 2.13-2.21x backward at 2k-32k
/// tokens, against 2.53x in BF16 peak; at head dim 128 the same runs give 2.15-2.51x): the
/// forward's exponentials, one per score, run on units Blackwell did not widen (Blackwell Ultra
/// doubled them: GB300 2.0x forward), and the narrower head halves the matrix work per score.
fn measured_ratio_to_hopper(gpu: &GpuSpec, kernel: AttentionKernel, shape: &AttentionShape) -> Option<(f64, &'static GpuSpec)> {
    let hopper = window_rows(PAIRED_HOPPER, kernel, shape);
    table_boards(gpu).find_map(|c| {
        let board = crate::gpu::find(c)?;
        if board.arch != GpuArch::Blackwell {
            return None;
        }
        let pair = window_rows(c, kernel, shape)
            .into_iter()
            .filter_map(|b| hopper.iter().find(|h| h.window == b.window).map(|h| (b, *h)))
            .max_by_key(|(b, _)| b.window)?;
        let seq = shape.s_q;
        Some((at_seq(&pair.0.tflops, seq) / at_seq(&pair.1.tflops, seq), board))
    })
}

/// The sliding-window rows of board `name` for `kernel` at `shape`'s head dim and pass, by window.
fn window_rows(name: &str, kernel: AttentionKernel, shape: &AttentionShape) -> Vec<&'static Row> {
    let pass = if shape.backward { Pass::Bwd } else { Pass::Fwd };
    let mut v: Vec<&'static Row> = table()
        .iter()
        .filter(|r| r.arch == name && r.kernel == kernel.name() && r.head_dim == shape.head_dim && r.pass == pass)
        .filter(|r| r.window.is_some())
        .collect();
    v.sort_by_key(|r| r.window);
    v
}

/// A sliding-window op as the workload writes it: a non-causal pass over fewer keys than
/// queries, each query attending to `s_kv` keys (the window).
fn window_of(shape: &AttentionShape) -> Option<u64> {
    (!shape.causal && shape.s_kv < shape.s_q).then_some(shape.s_kv)
}

/// Seconds for a sliding-window op from the measured sliding-window rows of the GPU (or of its
/// `base`, or of the board on the same die) at the op's head dim; `None` where there are none
/// (the op is then timed as a non-causal pass over the window, [`seconds`]).
///
/// The rows give the rate at the query length for each measured window; a window between two
/// measured ones is interpolated in log2(window), one outside them takes the nearest. Their FLOP
/// convention counts the keys each query sees (`W(W+1)/2 + (S-W)W` per head, cudnn-frontend
/// `benchmark_single_sdpa.py` `flops`), where the op counts `S·W`. Every query tile of a long
/// sequence is a block of its own, so the launch fill of [`crate::tile_schedule`] is not applied.
fn window_seconds(gpu: &GpuSpec, kernel: AttentionKernel, shape: &AttentionShape, op_flops: f64) -> Option<f64> {
    let w = window_of(shape)?;
    let (table_gpu, rows) = table_boards(gpu).find_map(|c| {
        let r = window_rows(c, kernel, shape);
        if r.is_empty() { None } else { crate::gpu::find(c).map(|g| (g, r)) }
    })?;
    let at = |r: &Row| (r.window.unwrap_or(1).max(1) as f64, at_seq(&r.tflops, shape.s_q));
    let (lo, hi) = (at(rows[0]), at(rows[rows.len() - 1]));
    let x = (w.max(1) as f64).log2();
    let rate = if x <= lo.0.log2() {
        lo.1
    } else if x >= hi.0.log2() {
        hi.1
    } else {
        let pair = rows
            .windows(2)
            .map(|p| (at(p[0]), at(p[1])))
            .find(|(a, b)| a.0.log2() <= x && x <= b.0.log2())?;
        let f = (x - pair.0.0.log2()) / (pair.1.0.log2() - pair.0.0.log2());
        pair.0.1 + (pair.1.1 - pair.0.1) * f
    };
    let bf16 = |g: &GpuSpec| g.peak_flops(crate::op::DType::Bf16) / 1e12;
    let (s, wf) = (shape.s_q as f64, w as f64);
    let seen = wf * (wf + 1.0) / 2.0 + (s - wf).max(0.0) * wf;
    let kernel_flops = op_flops.max(0.0) * seen / (s * wf).max(1.0);
    let sustained = rate * crate::gemm::SUSTAINED_FRACTION * bf16(gpu) / bf16(table_gpu);
    (sustained > 0.0).then(|| kernel_flops / (sustained * 1e12))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::gpu;

    fn shape(d: u64, s: u64, causal: bool, backward: bool) -> AttentionShape {
        AttentionShape::square(16, s, d, causal, backward)
    }

    #[test]
    fn table_points_come_back_exactly() {
        let r = table_rate(GpuArch::Hopper, AttentionKernel::Cudnn, &shape(128, 4096, true, false)).unwrap();
        assert_eq!(r, 518.0);
        let r = table_rate(GpuArch::Ampere, AttentionKernel::Fa2, &shape(64, 16384, false, true)).unwrap();
        assert_eq!(r, 176.0);
    }

    #[test]
    fn rates_grow_with_sequence_and_interpolate_head_dims() {
        let h = GpuArch::Hopper;
        for k in [AttentionKernel::Cudnn, AttentionKernel::Fa3, AttentionKernel::Fa2] {
            for bwd in [false, true] {
                let mut last = 0.0;
                for s in [256, 512, 700, 1024, 3000, 4096, 16384, 65536] {
                    let r = table_rate(h, k, &shape(128, s, true, bwd)).unwrap();
                    assert!(r >= last * 0.97, "{k:?} {s} {r} {last}");
                    last = r;
                }
            }
        }
        let (a, b, c) = (
            table_rate(h, AttentionKernel::Fa3, &shape(128, 4096, false, false)).unwrap(),
            table_rate(h, AttentionKernel::Fa3, &shape(192, 4096, false, false)).unwrap(),
            table_rate(h, AttentionKernel::Fa3, &shape(256, 4096, false, false)).unwrap(),
        );
        assert!(a < b && b < c, "{a} {b} {c}");
        // FA3 is Hopper-only: no Ampere table.
        assert!(table_rate(GpuArch::Ampere, AttentionKernel::Fa3, &shape(128, 4096, false, false)).is_none());
    }

    #[test]
    fn causal_backward_is_derived_and_below_non_causal() {
        let h = GpuArch::Hopper;
        let nc = table_rate(h, AttentionKernel::Cudnn, &shape(128, 4096, false, true)).unwrap();
        let c = table_rate(h, AttentionKernel::Cudnn, &shape(128, 4096, true, true)).unwrap();
        assert!((c - 499.0 * 518.0 / 609.0).abs() < 1e-9 && c < nc);
    }

    #[test]
    fn causal_halves_the_work_and_other_gpus_scale_by_peak() {
        let h100 = gpu("H100").unwrap();
        let s = shape(128, 4096, true, false);
        let t = seconds(h100, AttentionKernel::Cudnn, &s, 1e12).unwrap();
        // The table's causal rate, at the sustained fraction and the launch's fill against the
        // table's (16 heads here, 64 in the benchmark's launch at 4k tokens).
        let fill = crate::tile_schedule::relative(AttentionKernel::Cudnn, &s, 132, 132, None);
        assert!(fill < 1.0);
        assert!((t - 0.5 / (518.0 * crate::gemm::SUSTAINED_FRACTION * fill)).abs() < 1e-12);
        let h20 = gpu("H20").unwrap();
        let t20 = seconds(h20, AttentionKernel::Cudnn, &s, 1e12).unwrap();
        // H20: its peak, and its 78 SMs' fill of the same launch.
        let fill20 = crate::tile_schedule::relative(AttentionKernel::Cudnn, &s, h20.sm_count, 132, None);
        assert!((t20 / t - 989.4 / 148.0 * fill / fill20).abs() < 1e-9);
        // Never faster than the dense peak.
        for g in crate::gpu::catalog() {
            let k = AttentionKernel::default_for(g.arch);
            for bwd in [false, true] {
                for causal in [false, true] {
                    let s = shape(256, 1 << 20, causal, bwd);
                    let t = seconds(g, k, &s, 1e12).unwrap();
                    let work = if causal { 0.5e12 } else { 1e12 };
                    assert!(t >= work / g.peak_flops(crate::op::DType::Bf16), "{}", g.name);
                }
            }
        }
    }

    /// GPT-OSS's sliding layers as the workload writes them: 4,096 queries, each over a window of
    /// `w` keys, head dim 64, a non-causal pass over the window.
    fn gpt_oss_window(w: u64, backward: bool) -> AttentionShape {
        AttentionShape {
            batch_heads: 256,
            s_q: 4096,
            s_kv: w,
            head_dim: 64,
            causal: false,
            backward,
            kernel: None,
        }
    }

    #[test]
    fn fp8_attention_takes_its_measured_rows_and_bf16s_elsewhere() {
        let (gb200, b200, h100) = (gpu("GB200").unwrap(), gpu("B200").unwrap(), gpu("H100").unwrap());
        let sh = |d: u64, backward: bool| AttentionShape {
            batch_heads: GPU_TABLE_BATCH_HEADS,
            ..shape(d, 4096, true, backward)
        };
        let t = |g: &GpuSpec, k: AttentionKernel, d: u64, b: bool| seconds(g, k, &sh(d, b), 1e12).unwrap();
        // DeepSeek-V3's MLA (head dim 192) at 4k, causal, on GB200: MXFP8 1925 / 1364 TFLOP/s
        // against BF16 1406 / 1057 (the benchmark's launch, so the fill is 1 for both).
        for (b, mx, bf) in [(false, 1925.0, 1406.0), (true, 1364.0, 1057.0)] {
            let r = t(gb200, AttentionKernel::Cudnn, 192, b) / t(gb200, AttentionKernel::CudnnMxfp8, 192, b);
            assert!((r - mx / bf).abs() < 1e-9, "{r}");
        }
        // Per-tensor FP8 has rows of its own (2095 forward at 192, 4k, causal).
        let r = t(gb200, AttentionKernel::Cudnn, 192, false) / t(gb200, AttentionKernel::CudnnFp8, 192, false);
        assert!((r - 2095.0 / 1406.0).abs() < 1e-9, "{r}");
        // B200 takes its die's rows at its own peak, as BF16 does.
        let r = t(b200, AttentionKernel::Cudnn, 128, true) / t(b200, AttentionKernel::CudnnMxfp8, 128, true);
        assert!((r - 1054.0 / 1148.0).abs() < 1e-9, "{r}");
        // No FP8 rows on Hopper: BF16 cuDNN's time.
        for k in [AttentionKernel::CudnnFp8, AttentionKernel::CudnnMxfp8] {
            assert_eq!(t(h100, k, 128, false), t(h100, AttentionKernel::Cudnn, 128, false));
        }
        // A sliding window: no FP8 window rows are taken (data/attention.csv says why), so
        // BF16's window rows.
        for (w, b) in [(128, true), (127, false), (1024, true)] {
            let tw = |k: AttentionKernel| seconds(gb200, k, &gpt_oss_window(w, b), 1e12).unwrap();
            assert_eq!(tw(AttentionKernel::CudnnMxfp8), tw(AttentionKernel::Cudnn));
            assert_eq!(tw(AttentionKernel::CudnnFp8), tw(AttentionKernel::Cudnn));
        }
    }

    #[test]
    fn sliding_windows_take_the_measured_window_rows() {
        let (gb200, b200, h100) = (gpu("GB200").unwrap(), gpu("B200").unwrap(), gpu("H100").unwrap());
        let k = AttentionKernel::Cudnn;
        let win = gpt_oss_window;
        let seen = |w: f64| (w * (w + 1.0) / 2.0 + (4096.0 - w) * w) / (4096.0 * w);
        let sus = crate::gemm::SUSTAINED_FRACTION;
        // The measured forward and backward rates at 4k: 161 and 182 TFLOP/s.
        let t = seconds(gb200, k, &win(128, false), 1e12).unwrap();
        assert!((t - seen(128.0) / (161.0 * sus)).abs() < 1e-12, "{t}");
        let tb = seconds(gb200, k, &win(128, true), 1e12).unwrap();
        assert!((tb - seen(128.0) / (182.0 * sus)).abs() < 1e-12, "{tb}");
        // Halfway between the measured windows in log2: halfway between their rates.
        let w = 362; // 2^8.5
        let t_mid = seconds(gb200, k, &win(w, false), 1e12).unwrap();
        let x = (w as f64).log2() - 7.0;
        let rate = 161.0 + (574.0 - 161.0) * x / 3.0;
        assert!((t_mid - seen(w as f64) / (rate * sus)).abs() < 1e-12, "{t_mid}");
        // Beyond the measured windows: the nearer one's rate.
        let t_big = seconds(gb200, k, &win(2048, false), 1e12).unwrap();
        assert!((t_big - seen(2048.0) / (574.0 * sus)).abs() < 1e-12, "{t_big}");
        // Same die at its own peak; a GPU without window rows keeps the non-causal pass over the
        // window (much faster than the measured windowed kernel on Blackwell).
        let t_b200 = seconds(b200, k, &win(128, false), 1e12).unwrap();
        assert!((t_b200 / t - 2500.0 / 2250.0).abs() < 1e-12);
        assert!(window_seconds(h100, k, &win(128, false), 1e12).is_none());
        let plain = AttentionShape {
            s_q: 128,
            ..win(128, false)
        };
        assert!(window_seconds(gb200, k, &plain, 1e12).is_none());
        assert!(seconds(gb200, k, &plain, 1e12).unwrap() < 0.5 * t);
        // The window rows do not stand in for the full mask at head dim 64.
        assert!(measured_on(gb200, k, 64).is_none());
    }

    #[test]
    fn blackwell_boards_use_their_measured_tables() {
        let (gb200, gb300, b200, b300) = (
            gpu("GB200").unwrap(),
            gpu("GB300").unwrap(),
            gpu("B200").unwrap(),
            gpu("B300").unwrap(),
        );
        let k = AttentionKernel::Cudnn;
        let s = shape(128, 4096, true, false);
        // The measured point, at the sustained fraction and the fill against the benchmark's
        // launch (batch x heads = 128), on the board it was measured on.
        let fill = crate::tile_schedule::relative(k, &s, gb200.sm_count, gb200.sm_count, Some(GPU_TABLE_BATCH_HEADS));
        let t = seconds(gb200, k, &s, 1e12).unwrap();
        assert!((t - 0.5 / (1408.0 * crate::gemm::SUSTAINED_FRACTION * fill)).abs() < 1e-12, "{t}");
        // GB300's own rows: Blackwell Ultra's faster forward (1,703 against 1,408 TFLOP/s here)
        // and a smaller gain backward (1,248 against 1,148), at the same datasheet BF16 peak.
        let t300 = seconds(gb300, k, &s, 1e12).unwrap();
        let fill300 = crate::tile_schedule::relative(k, &s, gb300.sm_count, gb300.sm_count, Some(GPU_TABLE_BATCH_HEADS));
        assert!((t / t300 - 1703.0 * fill300 / (1408.0 * fill)).abs() < 1e-9);
        let sb = shape(128, 4096, true, true);
        let gain_bwd = seconds(gb200, k, &sb, 1e12).unwrap() / seconds(gb300, k, &sb, 1e12).unwrap();
        assert!(gain_bwd > 1.0 && gain_bwd < t / t300, "{gain_bwd}");
        // Same die, own peak: B200 runs GB200's table at 2,250 / 2,500, B300 GB300's.
        assert_eq!(measured_on(b200, k, 128).map(|g| g.name), Some("GB200"));
        assert_eq!(measured_on(b300, k, 128).map(|g| g.name), Some("GB300"));
        // (B200 has 148 SMs to GB200's 152: the fill of its own launch differs slightly.)
        let tb = seconds(b200, k, &s, 1e12).unwrap();
        let fill_b200 = crate::tile_schedule::relative(k, &s, b200.sm_count, gb200.sm_count, Some(GPU_TABLE_BATCH_HEADS));
        assert!((tb / t - 2500.0 / 2250.0 * fill / fill_b200).abs() < 1e-9, "{}", tb / t);
        // Outside the measured head dims (128-192), the Hopper table: at head dim 64 times the
        // measured Blackwell/Hopper ratio (below), elsewhere at the peak ratio.
        assert!(measured_on(gb200, k, 64).is_none() && measured_on(gb200, k, 256).is_none());
        let s256 = shape(256, 4096, true, false);
        let fill256 = crate::tile_schedule::relative(k, &s256, gb200.sm_count, 132, None);
        let hopper256 = rate_in("hopper", k, &s256).unwrap() * crate::gemm::SUSTAINED_FRACTION * fill256;
        let t256 = seconds(gb200, k, &s256, 1e12).unwrap();
        assert!((t256 - 0.5 / (hopper256 * 2500.0 / 989.4)).abs() < 1e-12 * t256.max(1.0), "{t256}");
        assert!(measured_on(gpu("H100").unwrap(), k, 128).is_none());
        // FlashAttention-2 on Blackwell runs at its measured ~390 TFLOP/s, far below cuDNN (it does
        // not use Blackwell's tensor-core instructions); the Hopper table scaled by peak gave ~800.
        let fa2 = seconds(gb200, AttentionKernel::Fa2, &s, 1e12).unwrap();
        assert!(fa2 > 3.0 * t, "{fa2} {t}");
    }

    #[test]
    fn head_dim_64_on_blackwell_takes_the_measured_ratio_to_hopper() {
        let k = AttentionKernel::Cudnn;
        let (gb200, gb300, b200) = (gpu("GB200").unwrap(), gpu("GB300").unwrap(), gpu("B200").unwrap());
        let hopper = |s: &AttentionShape, g: &GpuSpec| {
            let fill = crate::tile_schedule::relative(k, s, g.sm_count, 132, None);
            rate_in("hopper", k, s).unwrap() * crate::gemm::SUSTAINED_FRACTION * fill
        };
        // The paired window-1024 runs at 4k tokens (data/attention.csv): GB200 574 / 617 against
        // the H200's 336 / 289 forward / backward; GB300 675 / 638.
        for (g, fwd, bwd) in [(gb200, 574.0, 617.0), (gb300, 675.0, 638.0)] {
            for (backward, ratio) in [(false, fwd / 336.0), (true, bwd / 289.0)] {
                let s = shape(64, 4096, true, backward);
                let t = seconds(g, k, &s, 1e12).unwrap();
                assert!((t - 0.5 / (hopper(&s, g) * ratio)).abs() < 1e-12, "{} {backward}: {t}", g.name);
                // Well below the peak ratio (2.53x): forward 1.71x / 2.01x, backward 2.13x / 2.21x.
                assert!(ratio < 0.9 * 2500.0 / 989.4, "{ratio}");
            }
        }
        // Between measured lengths, the ratio of the two interpolated rates.
        let s = shape(64, 5793, true, false); // 2^12.5
        let r = (574.0 + 609.0) / 2.0 / ((336.0 + 349.0) / 2.0);
        let t = seconds(gb200, k, &s, 1e12).unwrap();
        assert!((t - 0.5 / (hopper(&s, gb200) * r)).abs() < 1e-4 * t, "{t}");
        // B200 takes its die's pair at its own peak.
        let s = shape(64, 4096, true, true);
        let (t200, tb) = (seconds(gb200, k, &s, 1e12).unwrap(), seconds(b200, k, &s, 1e12).unwrap());
        let fills = hopper(&s, gb200) / hopper(&s, b200);
        assert!((tb / t200 - 2500.0 / 2250.0 * fills).abs() < 1e-9, "{}", tb / t200);
        // Hopper boards are untouched: the H100 keeps its table at its own peak.
        let h100 = gpu("H100").unwrap();
        let th = seconds(h100, k, &s, 1e12).unwrap();
        assert!((th - 0.5 / hopper(&s, h100)).abs() < 1e-12, "{th}");
        assert!(measured_ratio_to_hopper(h100, k, &s).is_none());
    }

    #[test]
    fn blank_cells_take_the_shortest_measured_sequence() {
        // GB200's non-causal rows start at 2k: 1k takes the 2k rate, 512 too.
        let r = |s| rate_in("GB200", AttentionKernel::Cudnn, &shape(128, s, false, false)).unwrap();
        assert_eq!(r(2048), 1433.0);
        assert_eq!((r(1024), r(512)), (1433.0, 1433.0));
        // Between measured points: linear in log2(seq); past the last: clamped.
        assert!((r(2896) - (1433.0 + (1599.0 - 1433.0) * (2896f64.log2() - 11.0))).abs() < 1e-9);
        assert_eq!(r(1 << 20), 1697.0);
        // A causal row measured from 512 interpolates there as before.
        let c = |s| rate_in("GB200", AttentionKernel::Cudnn, &shape(128, s, true, false)).unwrap();
        assert_eq!((c(512), c(1024)), (408.0, 733.0));
    }
}
