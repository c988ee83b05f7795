//! Per-op FLOPs against the standard formulas, and collective sizes against Megatron's.

mod common;
use common::plan;

use llmsim_compute::OpClass;
use llmsim_core::CollectiveOp;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{embedding, head, padded_vocab, stage_param_split, stage_params, transformer_layer};
use llmsim_workload::{CommGroup, LayerOps, ModelConfig, OpSpec, OpSpecKind, ParallelConfig, Pass, Recompute, TrainingConfig};

/// GEMMs, core attention and the MoE router's GEMM (the router class also holds the
/// memory-bound token permutations).
fn is_matmul(o: &OpSpec) -> bool {
    match o.kind {
        OpSpecKind::Compute { class, .. } => match class {
            OpClass::Gemm | OpClass::Attention | OpClass::FlashAttention => true,
            OpClass::Router => o.name.starts_with("moe_router"),
            _ => false,
        },
        OpSpecKind::Comm { .. } | OpSpecKind::HostCopy { .. } => false,
    }
}

/// FLOPs of one micro-batch of one model replica: every layer, embedding and head on one rank,
/// times the tp·cp ranks that split it. Returns (matmul FLOPs, all FLOPs).
fn replica_flops(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> (f64, f64) {
    let mut ops: Vec<LayerOps> = (0..m.num_hidden_layers).map(|l| transformer_layer(m, t, p, l)).collect();
    ops.push(embedding(m, t, p));
    ops.push(head(m, t, p));
    let ranks = (p.tp * p.cp) as f64;
    let mm: f64 = ops.iter().flat_map(|l| l.iter()).filter(|o| is_matmul(o)).map(OpSpec::flops).sum();
    let all: f64 = ops.iter().map(LayerOps::flops).sum();
    (mm * ranks, all * ranks)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn gpt3_matches_narayanan_model_flops() {
    // Narayanan et al. 2021, §5.1: F = 72·B·s·l·h²·(1 + s/(6h) + V/(12hl)) per iteration without
    // recomputation (V the padded vocabulary), counting matmuls and unfused attention (bwd = 2×fwd).
    for (name, gpus, yaml) in [
        ("gpt3-6.7b", 8, "{ tp: 1 }"),
        ("gpt3-13b", 8, "{ tp: 2 }"),
        ("gpt3-175b", 64, "{ tp: 8, pp: 8, sequence_parallel: true }"),
    ] {
        let m = preset(name).unwrap();
        let t = TrainingConfig {
            micro_batch_size: 2,
            flash_attention: false,
            ..TrainingConfig::default()
        };
        let p = plan(&m, &t, gpus, yaml);
        let (b, s, l, h) = (2.0, t.seq_length as f64, m.num_hidden_layers as f64, m.hidden_size as f64);
        let v = padded_vocab(&m, p.tp) as f64;
        let expected = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * l));
        let (mm, all) = replica_flops(&m, &t, &p);
        assert!(close(mm, expected, 1e-12), "{name}: {mm:.6e} vs {expected:.6e}");
        // Norms, element-wise and softmax add well under 1 %.
        assert!(all > mm && close(all, expected, 0.01), "{name}: all ops {all:.6e}");
    }
}

#[test]
fn dense_training_is_6n_tokens_plus_attention() {
    // 6·N·tokens over the matmul weights (params without the input embedding lookup and the norm
    // vectors, with the padded vocabulary in the output layer), plus attention 3·4·b·s²·h per layer
    // (unfused) or 3.5·4·b·s²·h (FlashAttention recomputes QKᵀ in backward: 2.5× forward).
    for (name, gpus, yaml, flash) in [
        ("gpt3-13b", 4, "{ tp: 4 }", false),
        ("llama3-8b", 8, "{ tp: 4, cp: 2, sequence_parallel: true }", true),
        ("llama-7b", 2, "{ tp: 2 }", true),
    ] {
        let m = preset(name).unwrap();
        let t = TrainingConfig {
            flash_attention: flash,
            seq_length: 4096,
            ..TrainingConfig::default()
        };
        let p = plan(&m, &t, gpus, yaml);
        let (l, h, v) = (m.num_hidden_layers, m.hidden_size, m.vocab_size);
        let norms = 2 * l * h + h;
        let embedding_lookup = v * h;
        let padding = padded_vocab(&m, p.tp) - v;
        let n_matmul = (m.param_count() - embedding_lookup - norms + padding * h) as f64;
        let (b, s) = (t.micro_batch_size as f64, t.seq_length as f64);
        let attn_ratio = if flash { 3.5 } else { 3.0 };
        let expected = 6.0 * n_matmul * b * s + attn_ratio * 4.0 * b * s * s * h as f64 * l as f64;
        let (mm, _) = replica_flops(&m, &t, &p);
        assert!(close(mm, expected, 1e-12), "{name}: {mm:.6e} vs {expected:.6e}");
    }
}

#[test]
fn moe_training_is_6n_active_tokens_plus_attention() {
    for (name, gpus, yaml) in [
        ("mixtral-8x7b", 16, "{ tp: 2, ep: 8, sequence_parallel: true }"),
        ("deepseek-moe-16b", 8, "{ ep: 8 }"),
    ] {
        let m = preset(name).unwrap();
        let t = TrainingConfig::default();
        let p = plan(&m, &t, gpus, yaml);
        let (l, h, v) = (m.num_hidden_layers, m.hidden_size, m.vocab_size);
        let n = m.active_param_count() - v * h - (2 * l * h + h) + (padded_vocab(&m, p.tp) - v) * h;
        let s = t.seq_length as f64;
        let expected = 6.0 * n as f64 * s + 3.5 * 4.0 * s * s * (h * l) as f64;
        let (mm, _) = replica_flops(&m, &t, &p);
        assert!(close(mm, expected, 1e-12), "{name}: {mm:.6e} vs {expected:.6e}");
    }
}

/// The `group` collectives of `ops` in order: collectives of their own, and the TP ones that
/// ride on a GEMM (`OpSpec::overlap`: userbuffers, or `parallel.tp_backward_overlap`).
fn comms(ops: &[OpSpec], group: CommGroup) -> Vec<(CollectiveOp, u64)> {
    ops.iter()
        .filter_map(|o| match o.comm() {
            Some((op, g, bytes)) => (g == group).then_some((op, bytes)),
            None => o.overlap.filter(|_| group == CommGroup::Tp).map(|ov| (ov.op, ov.bytes)),
        })
        .collect()
}

#[test]
fn tp_collectives_are_megatrons() {
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig::default();
    let bsh = t.micro_batch_size * t.seq_length * m.hidden_size * t.dtype.bytes();
    use CollectiveOp::*;

    // Without SP: one all-reduce of b·s·h·dtype after each row-parallel GEMM in forward, after
    // each column-parallel input-gradient GEMM in backward.
    let p = plan(&m, &t, 2, "{ tp: 2 }");
    let layer = transformer_layer(&m, &t, &p, 0);
    assert_eq!(comms(&layer.forward, CommGroup::Tp), vec![(AllReduce, bsh); 2]);
    assert_eq!(comms(&layer.backward, CommGroup::Tp), vec![(AllReduce, bsh); 2]);

    // With SP: all-gather before, reduce-scatter after each block; backward swaps them and
    // re-gathers the column-parallel input for the weight gradient.
    let p = plan(&m, &t, 2, "{ tp: 2, sequence_parallel: true }");
    let layer = transformer_layer(&m, &t, &p, 0);
    assert_eq!(
        comms(&layer.forward, CommGroup::Tp),
        vec![(AllGather, bsh), (ReduceScatter, bsh), (AllGather, bsh), (ReduceScatter, bsh)]
    );
    let bwd = comms(&layer.backward, CommGroup::Tp);
    assert_eq!(bwd.iter().filter(|c| c.0 == AllGather).count(), 4);
    assert_eq!(bwd.iter().filter(|c| c.0 == ReduceScatter).count(), 2);
    assert!(bwd.iter().all(|c| c.1 == bsh));

    // tp = 1: no TP traffic at all.
    let p = plan(&m, &t, 1, "{}");
    let layer = transformer_layer(&m, &t, &p, 0);
    assert!(layer.iter().all(|o| o.comm().is_none()));

    // Embedding: all-reduce of its output; head: three b·s·4-byte cross-entropy all-reduces.
    let p = plan(&m, &t, 2, "{ tp: 2 }");
    assert_eq!(comms(&embedding(&m, &t, &p).forward, CommGroup::Tp), vec![(AllReduce, bsh)]);
    let ce = t.micro_batch_size * t.seq_length * 4;
    assert_eq!(comms(&head(&m, &t, &p).forward, CommGroup::Tp), vec![(AllReduce, ce); 3]);
    assert_eq!(comms(&head(&m, &t, &p).backward, CommGroup::Tp), vec![(AllReduce, bsh)]);
}

#[test]
fn backward_order_and_passes() {
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 2, "{ tp: 2 }");
    let layer = transformer_layer(&m, &t, &p, 0);
    assert!(layer.forward.iter().all(|o| o.pass == Pass::Forward));
    // Per GEMM: input-gradient then weight-gradient, in reverse module order.
    let gemms: Vec<&str> = layer.backward.iter().filter(|o| is_matmul(o)).map(|o| o.name).collect();
    assert_eq!(
        gemms,
        vec![
            "mlp_fc2_dgrad",
            "mlp_fc2_wgrad",
            "mlp_fc1_dgrad",
            "mlp_fc1_wgrad",
            "attn_proj_dgrad",
            "attn_proj_wgrad",
            "core_attention_bwd",
            "attn_qkv_dgrad",
            "attn_qkv_wgrad"
        ]
    );
    let fwd_flops: f64 = layer.forward.iter().map(OpSpec::flops).sum();
    let wgrad: f64 = layer
        .backward
        .iter()
        .filter(|o| o.pass == Pass::BackwardWeight)
        .map(OpSpec::flops)
        .sum();
    let gemm_fwd: f64 = layer
        .forward
        .iter()
        .filter(|o| matches!(o.kind, OpSpecKind::Compute { class: OpClass::Gemm, .. }))
        .map(OpSpec::flops)
        .sum();
    assert_eq!(wgrad, gemm_fwd);
    assert!(fwd_flops > gemm_fwd);

    // Full recompute re-runs the forward (TP comms included) before the backward.
    let full = transformer_layer(
        &m,
        &TrainingConfig {
            recompute: Recompute::Full,
            ..t.clone()
        },
        &p,
        0,
    );
    let n = full.forward.len();
    assert!(
        full.backward[..n]
            .iter()
            .zip(&full.forward)
            .all(|(r, f)| r.pass == Pass::Recompute && r.name == f.name && r.kind == f.kind)
    );
    assert_eq!(full.backward[n..], layer.backward[..]);
    // Selective recomputes core attention only.
    let sel = transformer_layer(
        &m,
        &TrainingConfig {
            recompute: Recompute::Selective,
            ..t.clone()
        },
        &p,
        0,
    );
    let re: Vec<&str> = sel.backward.iter().filter(|o| o.pass == Pass::Recompute).map(|o| o.name).collect();
    assert_eq!(re, vec!["core_attention"]);
    // Every compute op has a query; comms do not.
    assert!(layer.iter().all(|o| o.query(t.dtype).is_some() == o.comm().is_none()));
}

#[test]
fn cp_and_ep_collectives() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        seq_length: 8192,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 8, "{ tp: 2, cp: 4, sequence_parallel: true }");
    let layer = transformer_layer(&m, &t, &p, 0);
    // K and V of the whole sequence for the local kv heads.
    let kv = 2 * t.micro_batch_size * t.seq_length * (m.num_key_value_heads / p.tp) * m.head_dim() * 2;
    assert_eq!(comms(&layer.forward, CommGroup::Cp), vec![(CollectiveOp::AllGather, kv)]);
    assert_eq!(
        comms(&layer.backward, CommGroup::Cp),
        vec![(CollectiveOp::AllGather, kv), (CollectiveOp::ReduceScatter, kv)]
    );
    // Attention over s/cp local queries against all s keys, h/tp of the heads.
    let attn = layer.forward.iter().find(|o| o.name == "core_attention").unwrap();
    let s = t.seq_length as f64;
    assert_eq!(attn.flops(), 4.0 * (s / 4.0) * s * (m.hidden_size / 2) as f64);
    // TP collectives carry the local sequence.
    let bsh = t.seq_length / p.cp * m.hidden_size * 2;
    assert!(comms(&layer.forward, CommGroup::Tp).iter().all(|c| c.1 == bsh));

    let m = preset("mixtral-8x7b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 16, "{ tp: 2, ep: 8, sequence_parallel: true }");
    let layer = transformer_layer(&m, &t, &p, 0);
    // Dispatch and combine: the rank's (SP-local) tokens × top-k × h × dtype.
    let a2a = t.seq_length / p.tp * m.num_experts_per_tok * m.hidden_size * 2;
    assert_eq!(comms(&layer.forward, CommGroup::Ep), vec![(CollectiveOp::AllToAll, a2a); 2]);
    assert_eq!(comms(&layer.backward, CommGroup::Ep), vec![(CollectiveOp::AllToAll, a2a); 2]);
}

#[test]
fn stage_params_cover_the_model() {
    // Σ over stages of stage_params · tp = param_count + vocab padding (embedding and output
    // layer) + the (tp−1) extra copies of the TP-replicated norm vectors; a tied embedding gets a
    // copy on the last stage when pp > 1.
    for (name, gpus, yaml) in [
        ("gpt3-175b", 1024, "{ tp: 8, pp: 8 }"),
        ("gpt3-13b", 8, "{ tp: 2, pp: 4 }"),
        ("llama3-70b", 64, "{ tp: 8, pp: 4, vpp: 5 }"),
        ("mixtral-8x7b", 8, "{ pp: 8 }"),
    ] {
        let m = preset(name).unwrap();
        let t = TrainingConfig {
            global_batch_size: 64,
            ..TrainingConfig::default()
        };
        let p = plan(&m, &t, gpus, yaml);
        let sum: u64 = (0..p.pp).map(|s| stage_params(&m, &p, s)).sum::<u64>() * p.tp;
        let (l, h, v) = (m.num_hidden_layers, m.hidden_size, m.vocab_size);
        let padding = (padded_vocab(&m, p.tp) - v) * h * if m.tie_word_embeddings { 1 } else { 2 };
        let replicated = (2 * l * h + h + m.moe_layers() * h * m.num_experts) * (p.tp - 1);
        assert_eq!(sum, m.param_count() + padding + replicated, "{name}");
    }
    // A middle stage of GPT-3 175B TP8 PP8 holds params/(tp·pp) of the layers: DP gradient bytes
    // are that times 4 (fp32 gradients for bf16 training).
    let m = preset("gpt3-175b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 1024, "{ tp: 8, pp: 8 }");
    let h = m.hidden_size;
    let per_stage_layers = m.num_hidden_layers / 8;
    assert_eq!(stage_params(&m, &p, 3), per_stage_layers * (12 * h * h / 8 + 2 * h));
    assert_eq!(t.grad_dtype().bytes(), 4);

    let tied = ModelConfig {
        tie_word_embeddings: true,
        ..preset("llama-7b").unwrap()
    };
    let p1 = plan(&tied, &t, 1, "{}");
    let p2 = plan(&tied, &t, 2, "{ pp: 2 }");
    let total1 = stage_params(&tied, &p1, 0);
    let total2 = stage_params(&tied, &p2, 0) + stage_params(&tied, &p2, 1);
    assert_eq!(total2 - total1, padded_vocab(&tied, 1) * tied.hidden_size);
}

#[test]
fn optimizer_step_shards_with_distributed_optimizer() {
    use llmsim_workload::ops::optimizer_step;
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 128, "{ tp: 2 }");
    let split = stage_param_split(&m, &p, 0);
    let n = split.total();
    let full = optimizer_step(split, &t, &p);
    let p = plan(&m, &t, 128, "{ tp: 2, use_distributed_optimizer: true }");
    let sharded = optimizer_step(split, &t, &p);
    let bytes = |ops: &[OpSpec], name: &str| {
        let op = ops.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("{name}"));
        match op.kind {
            OpSpecKind::Compute { bytes, class, .. } => {
                assert_eq!(class == OpClass::Optimizer, name == "optimizer_step");
                bytes
            }
            _ => panic!(),
        }
    };
    assert_eq!(bytes(&full, "optimizer_step"), 30.0 * n as f64);
    assert_eq!(bytes(&sharded, "optimizer_step"), 30.0 * n.div_ceil(64) as f64);
    // The gradient-norm pass reads the optimizer's FP32 gradients (its shard); the gradient
    // buffer is zeroed whole either way (FP32 gradients: 4 bytes a parameter).
    assert_eq!(bytes(&full, "grad_norm"), 4.0 * n as f64);
    assert_eq!(bytes(&sharded, "grad_norm"), 4.0 * n.div_ceil(64) as f64);
    assert_eq!(bytes(&full, "zero_grad"), 4.0 * n as f64);
    assert_eq!(bytes(&sharded, "zero_grad"), 4.0 * n as f64);
    // FSDP frees its gradients: no zeroing pass.
    let fsdp = plan(&m, &t, 128, "{ tp: 2, zero_stage: 3 }");
    assert!(optimizer_step(split, &t, &fsdp).iter().all(|o| o.name != "zero_grad"));
}

#[test]
fn the_distributed_optimizer_shards_experts_over_the_expert_dp_group() {
    use llmsim_workload::ops::optimizer_step;
    // 64 GPUs, EP 8: dense parameters sharded over 64 ranks, routed experts over 64 / 8 = 8.
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 64, "{ tp: 1, ep: 8, use_distributed_optimizer: true }");
    assert_eq!((p.dense_dp_group(), p.expert_dp_group()), (64, 8));
    let split = stage_param_split(&m, &p, 0);
    assert!(split.expert > 2 * split.dense, "{split:?}");
    let step = optimizer_step(split, &t, &p);
    let op = step.iter().find(|o| o.name == "optimizer_step").unwrap();
    let OpSpecKind::Compute { bytes, .. } = op.kind else { panic!() };
    let shard = split.dense.div_ceil(64) + split.expert.div_ceil(8);
    assert_eq!(bytes, 30.0 * shard as f64);
}
