//! The memory savers real runs use (issue 28; evidence in bench/validation.md, "Changes on
//! 2026-11-26, second"): FP8 primary weights (`fp8_param`), Transformer Engine's fused cross
//! entropy, and an optimizer without a main copy (Apex `store_params: false`). Each expected
//! difference is counted from the plan's own parameter and token counts.

mod common;
use common::plan;

use llmsim_core::GpuArch;
use llmsim_workload::dag::{DagNodeKind, Workload};
use llmsim_workload::megatron::generate;
use llmsim_workload::memory::footprint_on;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{padded_vocab, stage_param_split, stage_vocab_params};
use llmsim_workload::{ParallelConfig, TrainingConfig, WorkloadError};

fn fp8() -> TrainingConfig {
    serde_yaml_ng::from_str("{ dtype: fp8, fp8_recipe: current, seq_length: 4096, micro_batch_size: 1, global_batch_size: 64 }").unwrap()
}

/// With `fp8_param` the linear layers' bf16 copy goes; their FP8 bytes (1 on Blackwell, 2 on
/// Hopper with the transpose) stay; the vocab parameters keep 2 bytes.
#[test]
fn fp8_primary_weights_drop_the_bf16_copy_of_linear_weights() {
    let m = preset("llama3-8b").unwrap();
    let t = fp8();
    let p = plan(&m, &t, 8, "{ tp: 2, pp: 2 }");
    let on = TrainingConfig {
        fp8_param: true,
        ..t.clone()
    };
    for stage_arch in [GpuArch::Hopper, GpuArch::Blackwell] {
        let before = footprint_on(&m, &t, &p, stage_arch);
        let after = footprint_on(&m, &on, &p, stage_arch);
        // The footprint is the worst stage's: it must be one of the stages' hand counts.
        let worst = |f: u64, fp8p: bool| {
            (0..p.pp)
                .map(|s| {
                    let total = stage_param_split(&m, &p, s).total();
                    let vocab = stage_vocab_params(&m, &p, s);
                    let copies = if stage_arch == GpuArch::Blackwell { 1 } else { 2 };
                    if fp8p {
                        2 * vocab + copies * (total - vocab)
                    } else {
                        2 * total + copies * (total - vocab)
                    }
                })
                .any(|b| b == f)
        };
        assert!(worst(before.parameters, false), "{stage_arch:?}: {}", before.parameters);
        assert!(worst(after.parameters, true), "{stage_arch:?}: {}", after.parameters);
        assert!(after.parameters < before.parameters);
        // Nothing else moves.
        assert_eq!(
            (after.gradients, after.optimizer_states, after.activations),
            (before.gradients, before.optimizer_states, before.activations)
        );
    }
}

fn dp_gather_bytes(w: &Workload) -> u64 {
    w.stages
        .iter()
        .flat_map(|s| s.nodes.iter())
        .filter_map(|n| match n.kind {
            DagNodeKind::CommColl {
                op: llmsim_core::CollectiveOp::AllGather,
                group: llmsim_workload::dag::Group::Dp,
                bytes,
            } => Some(bytes),
            _ => None,
        })
        .sum()
}

/// The distributed optimizer's parameter all-gather carries the FP8 weights (1 byte) and the
/// vocab parameters at 2 bytes.
#[test]
fn fp8_param_gather_sends_one_byte_per_linear_weight() {
    let m = preset("llama3-8b").unwrap();
    let t = fp8();
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 2, use_distributed_optimizer: true }");
    let on = TrainingConfig {
        fp8_param: true,
        ..t.clone()
    };
    let before = dp_gather_bytes(&generate(&m, &t, &p).unwrap());
    let after = dp_gather_bytes(&generate(&m, &on, &p).unwrap());
    let all: u64 = (0..p.pp).map(|s| stage_param_split(&m, &p, s).total()).sum();
    // The output layer's bucket also holds the final norm (hidden_size weights), not FP8 either.
    let vocab: u64 = (0..p.pp).map(|s| stage_vocab_params(&m, &p, s)).sum::<u64>() + m.hidden_size;
    assert_eq!(before, 2 * all, "bf16 gathers of every parameter");
    assert_eq!(after, 2 * vocab + (all - vocab), "FP8 linear weights, bf16 vocab and final norm");
}

/// TE's fused cross entropy keeps the bf16 logits only: the last stage holds 4 bytes per logit
/// less (Megatron's unfused loss keeps fp32 softmax beside them).
#[test]
fn fused_cross_entropy_keeps_two_bytes_per_logit() {
    let m = preset("llama3-8b").unwrap();
    let t: TrainingConfig = serde_yaml_ng::from_str("{ seq_length: 4096, micro_batch_size: 2, global_batch_size: 64 }").unwrap();
    let p = plan(&m, &t, 4, "{ tp: 2, pp: 1 }");
    let on = TrainingConfig {
        cross_entropy_fusion: true,
        ..t.clone()
    };
    let before = footprint_on(&m, &t, &p, GpuArch::Hopper);
    let after = footprint_on(&m, &on, &p, GpuArch::Hopper);
    let tokens = t.micro_batch_size * t.seq_length;
    let logits = tokens * padded_vocab(&m, p.tp) / p.tp;
    assert_eq!(before.activations - after.activations, 4 * logits);
    assert_eq!(before.parameters, after.parameters);
}

/// Apex distributed Adam with bf16 state and no main copy: 4 bytes per parameter, sharded.
#[test]
fn an_optimizer_without_a_main_copy_keeps_only_the_moments() {
    let m = preset("llama3-8b").unwrap();
    let t: TrainingConfig =
        serde_yaml_ng::from_str("{ seq_length: 4096, exp_avg_dtype: bf16, exp_avg_sq_dtype: bf16, store_params: false }").unwrap();
    assert_eq!(t.optimizer_bytes_per_param(), 4);
    let with_main = TrainingConfig {
        store_params: true,
        ..t.clone()
    };
    assert_eq!(with_main.optimizer_bytes_per_param(), 8, "2 + 2 + a 4-byte main copy");
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, use_distributed_optimizer: true }");
    let f = footprint_on(&m, &t, &p, GpuArch::Hopper);
    assert_eq!(f.optimizer_states, (4 * stage_param_split(&m, &p, 0).total()).div_ceil(8));
}

#[test]
fn the_new_switches_refuse_what_cannot_be() {
    let m = preset("llama3-8b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1 }").unwrap();
    let bf16: TrainingConfig = serde_yaml_ng::from_str("{ fp8_param: true }").unwrap();
    match p.clone().resolve(8, &m, &bf16) {
        Err(WorkloadError::Invalid { field, message }) => {
            assert_eq!(field, "training.fp8_param");
            assert!(message.contains("dtype: fp8"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let both: TrainingConfig = serde_yaml_ng::from_str("{ store_params: false, store_param_remainders: true }").unwrap();
    match p.resolve(8, &m, &both) {
        Err(WorkloadError::Invalid { field, .. }) => assert_eq!(field, "training.store_param_remainders"),
        other => panic!("{other:?}"),
    }
    // Megatron-Bridge's name for the switch is accepted.
    let alias: TrainingConfig = serde_yaml_ng::from_str("{ dtype: fp8, fp8_param_gather: true }").unwrap();
    assert!(alias.fp8_param);
}
