//! TorchTitan's op-level selective activation checkpointing (`recompute: selective_op`): per
//! block, `aten.mm` outputs are saved except every second one in forward order (wq, wk, wv, wo,
//! w1, w3, w2), SDPA and reduce-scatter outputs are saved, everything else re-runs; under
//! torchao's Float8 the same `mm`s are saved (the policy, a dispatch mode, sees `aten.mm` before
//! the Float8 subclass makes it a `_scaled_mm`) (torchtitan `parallelize_llama.py`, `_save_list`).

use llmsim_compute::{DType, OpClass};
use llmsim_workload::memory::layer_activation_bytes;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{OpSpec, OpSpecKind, transformer_layer};
use llmsim_workload::{ModelConfig, ParallelConfig, Pass, Recompute, RecomputeModule, TrainingConfig};

fn plan(m: &ModelConfig, t: &TrainingConfig, gpus: u64, yaml: &str) -> Result<ParallelConfig, llmsim_workload::WorkloadError> {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    p.resolve(gpus, m, t)
}

fn training(recompute: Recompute, dtype: DType) -> TrainingConfig {
    TrainingConfig {
        seq_length: 8192,
        micro_batch_size: 2,
        global_batch_size: 16,
        recompute,
        dtype,
        ..TrainingConfig::default()
    }
}

fn is_class(o: &OpSpec, c: OpClass) -> bool {
    matches!(o.kind, OpSpecKind::Compute { class, .. } if class == c)
}

/// FLOPs of the GEMMs of one pass.
fn gemm_flops(ops: &[OpSpec], pass: Pass) -> f64 {
    ops.iter()
        .filter(|o| o.pass == pass && is_class(o, OpClass::Gemm))
        .map(OpSpec::flops)
        .sum()
}

#[test]
fn bf16_reruns_wk_wo_w3_and_every_non_gemm_op() {
    let m = preset("llama3-8b").unwrap();
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let p = plan(&m, &t, 8, "{ dp: 8 }").unwrap();
    let ops = transformer_layer(&m, &t, &p, 0);
    let fwd = gemm_flops(&ops.forward, Pass::Forward);
    let re = gemm_flops(&ops.backward, Pass::Recompute);
    // The weights' shares of the block's forward matmul FLOPs, from the model's dimensions.
    let (h, d) = (m.hidden_size as f64, m.head_dim() as f64);
    let (a, kv, ffn) = (
        m.num_attention_heads as f64,
        m.num_key_value_heads as f64,
        m.intermediate_size as f64,
    );
    let (wq, wk, wv, wo) = (h * a * d, h * kv * d, h * kv * d, a * d * h);
    let (w1, w3, w2) = (h * ffn, h * ffn, ffn * h);
    let expect = (wk + wo + w3) / (wq + wk + wv + wo + w1 + w3 + w2);
    assert!((re / fwd - expect).abs() < 1e-9, "re-run share {} vs {expect}", re / fwd);
    let names: Vec<&str> = ops.backward.iter().filter(|o| o.pass == Pass::Recompute).map(|o| o.name).collect();
    assert!(
        names.contains(&"attn_qkv_k") && names.contains(&"attn_proj") && names.contains(&"mlp_fc1_up"),
        "{names:?}"
    );
    assert!(!names.contains(&"mlp_fc2") && !names.contains(&"attn_qkv"), "{names:?}");
    // SDPA is saved; every norm and element-wise op re-runs.
    let count = |ops: &[OpSpec], pass: Pass, c: OpClass| ops.iter().filter(|o| o.pass == pass && is_class(o, c)).count();
    assert_eq!(count(&ops.backward, Pass::Recompute, OpClass::FlashAttention), 0);
    for c in [OpClass::Norm, OpClass::Elementwise] {
        assert!(count(&ops.forward, Pass::Forward, c) > 0);
        assert_eq!(
            count(&ops.backward, Pass::Recompute, c),
            count(&ops.forward, Pass::Forward, c),
            "{c:?}"
        );
    }
}

#[test]
fn fp8_saves_the_same_linears_as_bf16() {
    let m = preset("llama3-8b").unwrap();
    let recomputed = |dtype: DType| {
        let t = training(Recompute::SelectiveOp, dtype);
        let p = plan(&m, &t, 8, "{ dp: 8 }").unwrap();
        let ops = transformer_layer(&m, &t, &p, 0);
        let names: Vec<&str> = ops
            .backward
            .iter()
            .filter(|o| o.pass == Pass::Recompute && is_class(o, OpClass::Gemm))
            .map(|o| o.name)
            .collect();
        (
            names,
            gemm_flops(&ops.backward, Pass::Recompute),
            gemm_flops(&ops.forward, Pass::Forward),
        )
    };
    let (bf16, bf16_re, fwd) = recomputed(DType::Bf16);
    let (fp8, fp8_re, _) = recomputed(DType::Fp8);
    assert_eq!(fp8, bf16);
    assert_eq!(fp8_re, bf16_re);
    assert!(fp8_re > 0.0 && fp8_re < fwd);
}

#[test]
fn a_plain_mlp_reruns_wk_wo_and_fc2() {
    let m = preset("gpt3-13b").unwrap();
    assert!(!m.gated_mlp);
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let p = plan(&m, &t, 8, "{ dp: 8 }").unwrap();
    let names: Vec<&str> = transformer_layer(&m, &t, &p, 0)
        .backward
        .iter()
        .filter(|o| o.pass == Pass::Recompute && is_class(o, OpClass::Gemm))
        .map(|o| o.name)
        .collect();
    assert_eq!(names, vec!["attn_qkv_k", "attn_proj", "mlp_fc2"]);
}

#[test]
fn tp_reruns_all_gathers_not_reduce_scatters() {
    let m = preset("llama3-70b").unwrap();
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let p = plan(&m, &t, 8, "{ tp: 8, sequence_parallel: true }").unwrap();
    let ops = transformer_layer(&m, &t, &p, 0);
    let comms = |pass: Pass| -> Vec<llmsim_core::CollectiveOp> {
        ops.forward
            .iter()
            .chain(ops.backward.iter())
            .filter(|o| o.pass == pass)
            .filter_map(|o| o.comm().map(|c| c.0))
            .collect()
    };
    use llmsim_core::CollectiveOp::*;
    let fwd = comms(Pass::Forward);
    let re = comms(Pass::Recompute);
    assert_eq!(re.len(), fwd.iter().filter(|c| **c == AllGather).count());
    assert!(re.iter().all(|c| *c == AllGather) && !re.is_empty(), "{re:?}");
}

#[test]
fn memory_sits_between_selective_and_full_and_fp8_keeps_as_much() {
    let m = preset("llama3-8b").unwrap();
    let p = plan(&m, &training(Recompute::None, DType::Bf16), 8, "{ dp: 8 }").unwrap();
    let bytes = |r: Recompute, dt: DType| layer_activation_bytes(&m, &training(r, dt), &p, 0);
    let op = bytes(Recompute::SelectiveOp, DType::Bf16);
    assert!(op < bytes(Recompute::Selective, DType::Bf16));
    assert!(op < bytes(Recompute::None, DType::Bf16));
    // More than the block input alone (what full recomputation keeps per layer).
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let input = t.activation_bytes() * t.micro_batch_size * t.seq_length * m.hidden_size;
    assert!(op > input);
    assert_eq!(bytes(Recompute::SelectiveOp, DType::Fp8), op);
    // The saved set, from the policy: input, SDPA output and LSE, wq, wv, w1, w2 outputs.
    let tok = t.micro_batch_size * t.seq_length;
    let (h, d, a, kv, ffn) = (
        m.hidden_size,
        m.head_dim(),
        m.num_attention_heads,
        m.num_key_value_heads,
        m.intermediate_size,
    );
    let dt = t.activation_bytes();
    let expect = dt * tok * (h + a * d + a * d + kv * d + ffn + h) + 4 * a * tok;
    assert_eq!(op, expect);
}

#[test]
fn refused_where_it_does_not_apply() {
    let moe = preset("deepseek-v3").unwrap();
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let e = plan(&moe, &t, 64, "{ ep: 64 }").unwrap_err().to_string();
    assert!(e.contains("training.recompute") && e.contains("selective_op"), "{e}");
    let dense = preset("llama3-8b").unwrap();
    let both = TrainingConfig {
        recompute_modules: vec![RecomputeModule::Mlp],
        ..t
    };
    let e = plan(&dense, &both, 8, "{ dp: 8 }").unwrap_err().to_string();
    assert!(e.contains("training.recompute") && e.contains("recompute_modules"), "{e}");
    // The YAML name.
    let y: TrainingConfig = serde_yaml_ng::from_str("{ recompute: selective_op }").unwrap();
    assert_eq!(y.recompute, Recompute::SelectiveOp);
}

#[test]
fn context_parallel_attention_stays_saved() {
    let m = preset("llama3-8b").unwrap();
    let t = training(Recompute::SelectiveOp, DType::Bf16);
    let p = plan(&m, &t, 8, "{ dp: 4, cp: 2 }").unwrap();
    let ops = transformer_layer(&m, &t, &p, 0);
    let re: Vec<&OpSpec> = ops.backward.iter().filter(|o| o.pass == Pass::Recompute).collect();
    assert!(ops.forward.iter().any(|o| o.name == "cp_attn_merge"));
    assert!(
        re.iter().all(|o| o.name != "cp_attn_merge" && o.comm().is_none()),
        "{:?}",
        re.iter().map(|o| o.name).collect::<Vec<_>>()
    );
}
