//! The embedding's weight gradient as PyTorch and Megatron produce it: a dense `[V/tp, h]`
//! tensor zero-filled every micro-batch (`embedding_dense_backward_cuda`), the tokens' rows
//! scattered into it, then Megatron's DDP hook adding it into `main_grad`.

mod common;
use common::plan;

use llmsim_workload::model::preset;
use llmsim_workload::ops::{embedding, padded_vocab};
use llmsim_workload::{ModelConfig, OpSpec, OpSpecKind, TrainingConfig};

fn bytes(ops: &[OpSpec], name: &str) -> Option<f64> {
    ops.iter().find(|o| o.name == name).map(|o| match o.kind {
        OpSpecKind::Compute { bytes, .. } => bytes,
        _ => panic!("{name} is not a compute op"),
    })
}

fn model() -> ModelConfig {
    preset("llama3-8b").unwrap()
}

fn training(mbs: u64, fp32_grads: Option<bool>) -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: mbs,
        global_batch_size: 64 * mbs,
        grad_reduce_in_fp32: fp32_grads,
        ..TrainingConfig::default()
    }
}

#[test]
fn the_dense_gradient_is_the_vocabulary_shard_not_the_tokens() {
    let m = model();
    for tp in [1u64, 4] {
        let yaml = format!("{{ tp: {tp}, pp: 1 }}");
        let dense = (padded_vocab(&m, tp) / tp * m.hidden_size) as f64;
        for fp32 in [None, Some(false)] {
            let (t1, t2) = (training(1, fp32), training(2, fp32));
            let (p1, p2) = (plan(&m, &t1, 8, &yaml), plan(&m, &t2, 8, &yaml));
            let (e1, e2) = (embedding(&m, &t1, &p1), embedding(&m, &t2, &p2));
            // bf16 activations: the dense gradient is 2 bytes an element, written once.
            assert_eq!(bytes(&e1.backward, "embedding_wgrad_zero"), Some(2.0 * dense), "tp {tp}");
            // main_grad: fp32 by default for bf16 (4 bytes read and written), bf16 when
            // grad_reduce_in_fp32 is off; the dense gradient read once.
            let mg = if fp32 == Some(false) { 2.0 } else { 4.0 };
            assert_eq!(bytes(&e1.backward, "embedding_main_grad_add"), Some(dense * (2.0 + 2.0 * mg)));
            // A twice larger micro-batch leaves the dense terms and doubles the scatter.
            for n in ["embedding_wgrad_zero", "embedding_main_grad_add"] {
                assert_eq!(bytes(&e1.backward, n), bytes(&e2.backward, n), "{n}");
            }
            let (s1, s2) = (
                bytes(&e1.backward, "embedding_wgrad").unwrap(),
                bytes(&e2.backward, "embedding_wgrad").unwrap(),
            );
            assert!((s2 - 2.0 * s1).abs() <= 1e-9 * s2, "scatter {s1} -> {s2}");
        }
    }
}

#[test]
fn fsdp2_reduce_scatters_the_gradient_without_a_main_grad_add() {
    let m = model();
    let t = training(1, None);
    let megatron = plan(&m, &t, 8, "{ tp: 1, pp: 1, zero_stage: 3 }");
    let fsdp2 = plan(&m, &t, 8, "{ tp: 1, pp: 1, zero_stage: 3, fsdp_impl: fsdp2 }");
    let (a, b) = (embedding(&m, &t, &megatron), embedding(&m, &t, &fsdp2));
    assert!(
        bytes(&a.backward, "embedding_main_grad_add").is_some(),
        "Megatron-FSDP keeps main_grad"
    );
    assert!(bytes(&b.backward, "embedding_main_grad_add").is_none());
    assert_eq!(
        bytes(&a.backward, "embedding_wgrad_zero"),
        bytes(&b.backward, "embedding_wgrad_zero")
    );
}
