//! How well one fused-attention launch fills the GPU: its thread blocks (one per 128-row tile of
//! one head) run one per SM, and with a causal mask their work differs, so a launch with few
//! blocks ends on a tail of long ones while other SMs idle.
//!
//! The attention tables (`data/attention.csv`) were measured at one size of launch: 16k tokens
//! and `heads x head_dim = 2048` (flash-attention's `benchmark_flash_attention.py`), thousands of
//! blocks. A training op is often far smaller: Megatron's tensor parallelism leaves 8 heads of a
//! 70B model on a GPU, 8 x 4096/128 = 256 blocks on 132 SMs. [`relative`] scales a table rate by
//! how well the op's launch fills the GPU against how well the table's did.
//!
//! Model: blocks are handed, in launch order, to whichever SM frees first (list scheduling);
//! a block's time is its number of 128 x 128 tiles. Forward: one block per query tile, all
//! heads' first tiles first (the lightest first under a causal mask). Backward: one block per
//! key/value tile, a head's tiles in order, the heaviest first. FlashAttention-3 schedules
//! causal blocks heaviest first (its LPT tile scheduler); that is modelled, not measured.
//!
//! Calibrated on kernel measurements only: cuDNN 9.19's causal attention through PyTorch SDPA on
//! an H200 SXM, BF16, batch 1, sequence 1k-16k x 2-64 heads x head dim 64 and 128, forward and
//! backward (`data/op-db/h200/attention-cudnn.csv`, `bench/gpu_attention.py`); PyTorch's
//! FlashAttention-2 on the same launches follows it from 8 heads on (`attention-fa2.csv`). The launch orders
//! and the 128-row tile were chosen among five orders, two tile heights, one or two blocks per
//! SM and a per-block overhead of 0-2 tiles as the best fit to those 60 launches; see
//! `bench/kernels.md`, "Hopper measured on an H200".

use std::collections::{BinaryHeap, HashMap};
use std::sync::{LazyLock, Mutex};

use crate::attention::AttentionKernel;
use crate::op::AttentionShape;

/// Rows (query or key tokens) of one thread block's tile.
pub const TILE: u64 = 128;

/// Launches larger than this many blocks fill the GPU to within a fraction of a percent of the
/// limit; they are not simulated block by block.
const MAX_BLOCKS: u64 = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    heads: u64,
    n_q: u64,
    n_kv: u64,
    causal: bool,
    backward: bool,
    lpt: bool,
    sms: u32,
}

/// Fraction of `sms x makespan` the launch's blocks keep busy, in (0, 1].
fn fill(k: Key) -> f64 {
    static MEMO: LazyLock<Mutex<HashMap<Key, f64>>> = LazyLock::new(Default::default);
    if let Some(&v) = MEMO.lock().ok().as_ref().and_then(|m| m.get(&k)) {
        return v;
    }
    let v = simulate(k);
    if let Ok(mut m) = MEMO.lock() {
        m.insert(k, v);
    }
    v
}

/// Tiles of work of each block, in launch order.
fn blocks(k: Key) -> Vec<u64> {
    // Bottom-right aligned causal mask when the keys outnumber the queries (a context-parallel
    // chunk): query tile i sees the key tiles up to `offset + i`.
    let offset = k.n_kv.saturating_sub(k.n_q);
    let mut out = Vec::with_capacity((k.heads * k.n_q.max(k.n_kv)) as usize);
    if !k.backward {
        let work = |i: u64| if k.causal { (offset + i + 1).min(k.n_kv) } else { k.n_kv };
        for i in 0..k.n_q {
            out.extend(std::iter::repeat_n(work(i), k.heads as usize));
        }
    } else {
        // Key tile j is seen by the query tiles from `j - offset` on.
        let work = |j: u64| {
            if k.causal {
                k.n_q - j.saturating_sub(offset).min(k.n_q - 1)
            } else {
                k.n_q
            }
        };
        for _ in 0..k.heads {
            out.extend((0..k.n_kv).map(work));
        }
    }
    if k.lpt {
        out.sort_unstable_by(|a, b| b.cmp(a));
    }
    out
}

fn simulate(k: Key) -> f64 {
    let work = blocks(k);
    let total: u64 = work.iter().sum();
    let sms = k.sms.max(1) as usize;
    if total == 0 {
        return 1.0;
    }
    // Min-heap of SM finish times (as negatives in a max-heap of integers: exact, deterministic).
    let mut free: BinaryHeap<std::cmp::Reverse<u64>> = (0..sms).map(|_| std::cmp::Reverse(0)).collect();
    for w in work {
        let std::cmp::Reverse(t) = free.pop().expect("sms >= 1");
        free.push(std::cmp::Reverse(t + w));
    }
    let makespan = free.into_iter().map(|std::cmp::Reverse(t)| t).max().unwrap_or(0);
    total as f64 / (sms as f64 * makespan as f64)
}

fn key(kernel: AttentionKernel, shape: &AttentionShape, heads: u64, sms: u32) -> Key {
    Key {
        heads: heads.max(1),
        n_q: shape.s_q.div_ceil(TILE).max(1),
        n_kv: shape.s_kv.div_ceil(TILE).max(1),
        causal: shape.causal,
        backward: shape.backward,
        lpt: kernel == AttentionKernel::Fa3 && shape.causal,
        sms,
    }
}

/// How well the op's launch fills `sms` SMs, relative to the table's benchmark launch at the same
/// sequence length on the table GPU's `table_sms`: the factor on the table's rate. The launch is
/// `bench_batch_heads` (batch x heads) when given, else flash-attention's (batch x seq = 16k
/// tokens, heads x head dim = 2048). Below 1 for small launches, slightly above for launches
/// larger than the benchmark's.
pub fn relative(kernel: AttentionKernel, shape: &AttentionShape, sms: u32, table_sms: u32, bench_batch_heads: Option<u64>) -> f64 {
    let capped = |heads: u64, s: &AttentionShape| {
        let n = s.s_q.div_ceil(TILE).max(s.s_kv.div_ceil(TILE)).max(1);
        heads.min((MAX_BLOCKS / n).max(1))
    };
    let ours = fill(key(kernel, shape, capped(shape.batch_heads, shape), sms));
    let bench_heads = bench_batch_heads.unwrap_or_else(|| (16384 / shape.s_kv.max(1)).max(1) * (2048 / shape.head_dim.max(1)).max(1));
    let bench_shape = AttentionShape { s_q: shape.s_kv, ..*shape };
    let bench = fill(key(kernel, &bench_shape, capped(bench_heads, &bench_shape), table_sms));
    ours / bench
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(heads: u64, s: u64, d: u64, causal: bool, backward: bool) -> AttentionShape {
        AttentionShape::square(heads, s, d, causal, backward)
    }

    #[test]
    fn one_block_per_sm_runs_at_the_longest_blocks_pace() {
        // 2 heads x 8 query tiles = 16 blocks on 132 SMs: the makespan is the last tile's 8 tiles
        // of work; the busy fraction is 2 x (1 + ... + 8) / (132 x 8).
        let k = key(AttentionKernel::Cudnn, &shape(2, 1024, 128, true, false), 2, 132);
        assert!((simulate(k) - 72.0 / 1056.0).abs() < 1e-12);
        // Non-causal: all blocks alike, 16 of 132 SMs busy.
        let k = key(AttentionKernel::Cudnn, &shape(2, 1024, 128, false, false), 2, 132);
        assert!((simulate(k) - 16.0 / 132.0).abs() < 1e-12);
    }

    #[test]
    fn work_is_conserved_forward_and_backward() {
        for (s_q, s_kv) in [(1024, 1024), (512, 2048), (4096, 4096)] {
            let sh = AttentionShape {
                s_q,
                s_kv,
                ..shape(3, 0, 128, true, false)
            };
            let f: u64 = blocks(key(AttentionKernel::Cudnn, &sh, 3, 132)).iter().sum();
            let b: u64 = blocks(key(AttentionKernel::Cudnn, &AttentionShape { backward: true, ..sh }, 3, 132))
                .iter()
                .sum();
            assert_eq!(f, b, "{s_q} {s_kv}");
        }
    }

    #[test]
    fn the_benchmark_launch_is_the_reference_and_fills_grow_with_heads() {
        // The table's own launch (16 heads of 128 at 16k tokens) gets exactly 1.
        let r = relative(AttentionKernel::Cudnn, &shape(16, 16384, 128, true, false), 132, 132, None);
        assert!((r - 1.0).abs() < 1e-12);
        for bwd in [false, true] {
            let mut last = 0.0;
            for h in [1, 2, 4, 8, 16, 32, 64, 256] {
                let r = relative(AttentionKernel::Cudnn, &shape(h, 4096, 128, true, bwd), 132, 132, None);
                assert!(r >= last - 0.02 && r > 0.0 && r < 1.2, "{h} {bwd} {r} {last}");
                last = r;
            }
        }
    }

    /// Mean and max |log(model / measured)| of each launch's throughput against the same
    /// sequence's 64-head launch, over the launches of at least `min_heads` heads.
    fn fit(text: &str, backward: bool, min_heads: f64) -> (f64, f64) {
        let rows: Vec<Vec<f64>> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("head_dim"))
            .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
            .collect();
        assert_eq!(rows.len(), 60);
        let find = |d: f64, s: f64, h: f64| rows.iter().find(|r| r[0] == d && r[1] == s && r[2] == h).unwrap();
        let col = if backward { 6 } else { 5 };
        let f = |d: f64, s: f64, heads: f64| {
            let sh = shape(heads as u64, s as u64, d as u64, true, backward);
            fill(key(AttentionKernel::Cudnn, &sh, heads as u64, 132))
        };
        let errs: Vec<f64> = rows
            .iter()
            .filter(|r| r[2] >= min_heads)
            .map(|r| {
                let (d, s, h) = (r[0], r[1], r[2]);
                let measured = r[col] / find(d, s, 64.0)[col];
                (f(d, s, h) / f(d, s, 64.0) / measured).ln().abs()
            })
            .collect();
        (
            errs.iter().sum::<f64>() / errs.len() as f64,
            errs.iter().cloned().fold(0.0, f64::max),
        )
    }

    #[test]
    fn fits_the_measured_h200_launches() {
        // data/op-db/h200: causal SDPA on an H200, batch 1, 1k-16k tokens x 2-64 heads x head
        // dim 64 and 128 (bench/gpu_attention.py).
        let cudnn = include_str!("../../../data/op-db/h200/attention-cudnn.csv");
        let fa2 = include_str!("../../../data/op-db/h200/attention-fa2.csv");
        for (text, backward, min_heads, mean_below, max_below) in [
            (cudnn, false, 0.0, 0.06, 0.20),
            (cudnn, true, 0.0, 0.04, 0.20),
            // FlashAttention-2's forward runs tiny launches (2-4 heads) faster than one block
            // per SM would; from 8 heads on it follows the model.
            (fa2, false, 8.0, 0.09, 0.30),
            (fa2, true, 0.0, 0.03, 0.20),
        ] {
            let (mean, max) = fit(text, backward, min_heads);
            assert!(
                mean < mean_below && max < max_below,
                "{backward} {min_heads}: mean {mean:.3} max {max:.3}"
            );
        }
    }
}
