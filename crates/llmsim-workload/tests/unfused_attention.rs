//! Unfused attention (`training.flash_attention: false`): the passes over the materialized
//! `[b, heads, s, s]` scores, by softmax implementation (`training.attention_softmax`) and with
//! dropout on or off.

use llmsim_workload::memory;
use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{AttentionSoftmax, OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

/// Bytes of the core attention's kernels (`core_attention*`) among `ops`.
fn bytes(ops: &[OpSpec]) -> f64 {
    let attn: Vec<_> = ops.iter().filter(|o| o.name.starts_with("core_attention")).collect();
    assert!(attn.len() >= 3, "unfused attention runs one op per kernel");
    attn.iter()
        .map(|o| match o.kind {
            OpSpecKind::Compute { bytes, .. } => bytes,
            _ => panic!("{} is not a kernel", o.name),
        })
        .sum()
}

/// Unfused attention at `seq` tokens, micro-batch `mbs`, with `dropout`.
fn unfused(seq: u64, mbs: u64, dropout: f64) -> TrainingConfig {
    TrainingConfig {
        seq_length: seq,
        micro_batch_size: mbs,
        global_batch_size: 8,
        flash_attention: false,
        dropout: Some(dropout),
        ..TrainingConfig::default()
    }
}

/// GPT-3 6.7B (32 heads of 128), seq 2048, micro-batch 2, tp 2: the core attention's forward and
/// backward bytes.
fn attention_bytes(softmax: AttentionSoftmax, dropout: f64) -> (f64, f64) {
    let m = preset("gpt3-6.7b").unwrap();
    let t = TrainingConfig {
        attention_softmax: softmax,
        ..unfused(2048, 2, dropout)
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 2, pp: 1 }").unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    let l = transformer_layer(&m, &t, &p, 0);
    (bytes(&l.forward), bytes(&l.backward))
}

/// Score elements on one rank: micro-batch 2 x 16 local heads x 2048 x 2048.
const SCORES: f64 = 2.0 * 16.0 * 2048.0 * 2048.0;

#[test]
fn each_pass_over_the_scores_is_counted() {
    let dt = 2.0;
    let (f0, b0) = attention_bytes(AttentionSoftmax::Fused, 0.0);
    let (f1, b1) = attention_bytes(AttentionSoftmax::Fused, 0.1);
    let (e0, eb0) = attention_bytes(AttentionSoftmax::Eager, 0.0);
    let (e1, eb1) = attention_bytes(AttentionSoftmax::Eager, 0.1);
    // Dropout reads and writes the probabilities and writes a 1-byte mask; its backward reads
    // the gradient and the mask and writes.
    assert_eq!(f1 - f0, SCORES * (2.0 * dt + 1.0));
    assert_eq!(b1 - b0, SCORES * (2.0 * dt + 1.0));
    assert_eq!(e1 - e0, f1 - f0);
    // GPT's mask is causal: Megatron's fused upper-triangular softmax reads each row up to the
    // diagonal (half the scores) and writes it whole; backward it reads the gradient and its
    // output up to the diagonal and writes the whole row.
    // The fused forward without dropout: QKᵀ writes, the softmax reads half and writes, AV reads,
    // beside q, k, v and the output (2 bytes each of 4 x 4096 x 16 x 128 per micro-batch row).
    let qkvo = 2.0 * 2048.0 * 16.0 * 128.0 * 4.0 * dt;
    assert_eq!(f0, qkvo + SCORES * 3.5 * dt);
    // Its backward: dP written, P read, the softmax's gradient (half, half, whole), dS read twice.
    assert_eq!(b0, 2.0 * qkvo + SCORES * 6.0 * dt);
    // Eager reads and writes every score in the mask multiply, the subtraction and PyTorch's
    // softmax (6 forward), and in the softmax's and the multiply's gradients (5 backward).
    assert_eq!(e0 - f0, SCORES * (6.0 - 1.5) * dt);
    assert_eq!(eb0 - b0, SCORES * (5.0 - 2.0) * dt);
    assert_eq!(eb1 - b1, eb0 - b0);
}

#[test]
fn eager_softmax_needs_unfused_attention() {
    let m = preset("gpt3-6.7b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1 }").unwrap();
    let t: TrainingConfig = serde_yaml_ng::from_str("{ seq_length: 2048, global_batch_size: 8, attention_softmax: eager }").unwrap();
    let e = p.resolve(8, &m, &t).unwrap_err().to_string();
    assert!(
        e.contains("training.attention_softmax") && e.contains("flash_attention: false"),
        "{e}"
    );
    let t = TrainingConfig {
        flash_attention: false,
        ..t
    };
    p.resolve(8, &m, &t).unwrap();
    let e = serde_yaml_ng::from_str::<TrainingConfig>("{ attention_softmax: eagre }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("eagre"), "{e}");
}

#[test]
fn dropout_keeps_its_probabilities_and_mask() {
    let m = preset("gpt3-6.7b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 2, pp: 1 }").unwrap();
    let t = |dropout: f64| unfused(2048, 2, dropout);
    let p = p.resolve(8, &m, &t(0.1)).unwrap();
    let on = memory::layer_activation_bytes(&m, &t(0.1), &p, 0);
    let off = memory::layer_activation_bytes(&m, &t(0.0), &p, 0);
    // Per score: the dropped probabilities (2 bytes) and the mask (1); the hidden-size dropout
    // masks (attention output, MLP output: 1 byte each per token and hidden element) beside them.
    let hidden_masks = 2 * 2 * 2048 * 4096;
    assert_eq!(on - off, 3 * SCORES as u64 + hidden_masks);
}

#[test]
fn a_sliding_window_reads_every_score() {
    // GPT-OSS 120B (64 heads of 64) alternates sliding-window (128 keys, layer 0) and full causal
    // layers; llmsim runs a window as a non-causal pass over its keys, which the softmax reads
    // whole. No dropout (gated MLP).
    let m = preset("gpt-oss-120b").unwrap();
    let t = unfused(4096, 1, 0.0);
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1 }").unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    let swa = transformer_layer(&m, &t, &p, 0);
    let full = transformer_layer(&m, &t, &p, 1);
    let dt = 2.0;
    let (s_full, s_window) = (64.0 * 4096.0 * 4096.0, 64.0 * 4096.0 * 128.0);
    // K and V, per key: expanded to the 64 query heads (`repeat_interleave`) from 8 groups of 64 +
    // 64 dims. Forward the copy reads the groups and writes the expansion, and QKᵀ and AV read it;
    // backward dP and dV, dQ and dK each touch it once, and the copy's gradient reads it and writes
    // the groups.
    let (expanded, grouped) = (64.0 * 128.0, 8.0 * 128.0);
    let keys = 4096.0 - 128.0;
    let d = bytes(&full.forward) - bytes(&swa.forward);
    assert_eq!(d, s_full * 3.5 * dt - s_window * 4.0 * dt + (2.0 * expanded + grouped) * keys * dt);
    let db = bytes(&full.backward) - bytes(&swa.backward);
    assert_eq!(db, s_full * 6.0 * dt - s_window * 7.0 * dt + (3.0 * expanded + grouped) * keys * dt);
}

#[test]
fn unfused_attention_refuses_megatron_context_parallelism() {
    let m = preset("gpt3-6.7b").unwrap();
    let t = unfused(4096, 1, 0.1);
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1, cp: 2 }").unwrap();
    let e = p.resolve(8, &m, &t).unwrap_err().to_string();
    assert!(e.contains("training.flash_attention") && e.contains("context parallelism"), "{e}");
    let fused = TrainingConfig {
        flash_attention: true,
        ..t
    };
    p.resolve(8, &m, &fused).unwrap();
}

/// One op per kernel, in Megatron's order: forward `baddbmm`, softmax, dropout, `bmm`; backward
/// the `AV` gradient's two `bmm`s, dropout's and the softmax's backward, then `QKᵀ`'s two. The
/// four batched GEMMs are GEMMs of every local head's tiles whose FLOPs are the attention's
/// `2·tok·heads·keys·(dqk + dv)` forward and twice that backward, in the activation dtype.
#[test]
fn each_kernel_is_its_own_op() {
    use llmsim_compute::{DType, GemmShape, KernelShape};
    let m = preset("gpt3-6.7b").unwrap();
    let t = TrainingConfig {
        dtype: DType::Fp8,
        ..unfused(2048, 2, 0.1)
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 2, pp: 1 }").unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    let l = transformer_layer(&m, &t, &p, 0);
    let names = |ops: &[OpSpec]| -> Vec<&str> { ops.iter().map(|o| o.name).filter(|n| n.starts_with("core_attention")).collect() };
    assert_eq!(
        names(&l.forward),
        [
            "core_attention_qk",
            "core_attention_softmax",
            "core_attention_dropout",
            "core_attention_av"
        ]
    );
    assert_eq!(
        names(&l.backward),
        [
            "core_attention_av_dp",
            "core_attention_av_dv",
            "core_attention_dropout_bwd",
            "core_attention_softmax_bwd",
            "core_attention_qk_dq",
            "core_attention_qk_dk"
        ]
    );
    // 2 x 16 local heads at 2048 queries and keys, head dim 128.
    let gemm = |ops: &[OpSpec], name: &str| -> GemmShape {
        let o = ops.iter().find(|o| o.name == name).unwrap();
        let q = o.query(t.dtype).unwrap();
        assert_eq!(q.dtype, DType::Bf16, "{name}: Transformer Engine quantizes only linear layers");
        match o.kernel {
            Some(KernelShape::Gemm(g)) => {
                assert_eq!(q.flops, g.flops());
                g
            }
            _ => panic!("{name} is not a GEMM"),
        }
    };
    let heads = 2 * 16;
    assert_eq!(gemm(&l.forward, "core_attention_qk"), GemmShape::new(heads * 2048, 2048, 128));
    assert_eq!(gemm(&l.forward, "core_attention_av"), GemmShape::new(heads * 2048, 128, 2048));
    assert_eq!(gemm(&l.backward, "core_attention_av_dv"), GemmShape::new(heads * 2048, 128, 2048));
    let flops = |ops: &[OpSpec]| -> f64 { ops.iter().filter(|o| o.name.starts_with("core_attention")).map(|o| o.flops()).sum() };
    let fwd = 2.0 * 2.0 * 2048.0 * 16.0 * 2048.0 * (128.0 + 128.0);
    assert_eq!(flops(&l.forward), fwd);
    assert_eq!(flops(&l.backward), 2.0 * fwd);
    // Without grouped K/V heads there is no expansion copy; GPT-OSS's 64 heads over 8 groups
    // have one each way.
    assert!(!l.forward.iter().any(|o| o.name == "core_attention_kv_expand"));
    let oss = preset("gpt-oss-120b").unwrap();
    let t = unfused(4096, 1, 0.0);
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1 }").unwrap();
    let p = p.resolve(8, &oss, &t).unwrap();
    let l = transformer_layer(&oss, &t, &p, 1);
    assert_eq!(names(&l.forward)[0], "core_attention_kv_expand");
    assert_eq!(names(&l.backward).last(), Some(&"core_attention_kv_expand_bwd"));
}
