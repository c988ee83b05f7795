//! Which ops FP8 training runs in FP8: Transformer Engine's linear layers only.

use llmsim_compute::{DType, OpClass};
use llmsim_workload::model::preset;
use llmsim_workload::ops::{head, transformer_layer};
use llmsim_workload::{ParallelConfig, TrainingConfig};

#[test]
fn fp8_training_keeps_the_output_layer_in_bf16() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        dtype: DType::Fp8,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 2, sequence_parallel: true}").unwrap();
    let p = p.resolve(2, &m, &t).unwrap();
    let h = head(&m, &t, &p);
    let gemms: Vec<_> = h
        .forward
        .iter()
        .chain(&h.backward)
        .filter_map(|o| o.query(t.dtype))
        .filter(|q| q.class == OpClass::Gemm)
        .collect();
    assert_eq!(gemms.len(), 3, "logits forward, dgrad and wgrad");
    assert!(gemms.iter().all(|q| q.dtype == DType::Bf16));
    assert!(h.forward.iter().chain(&h.backward).all(|o| !o.name.starts_with("fp8_cast")));
    // The transformer layers' GEMMs (TE modules) do run in FP8, with their casts.
    let l = transformer_layer(&m, &t, &p, 0);
    let layer_gemms: Vec<_> = l
        .forward
        .iter()
        .filter_map(|o| o.query(t.dtype))
        .filter(|q| q.class == OpClass::Gemm)
        .collect();
    assert!(!layer_gemms.is_empty() && layer_gemms.iter().all(|q| q.dtype == DType::Fp8));
    assert!(l.backward.iter().any(|o| o.name.starts_with("fp8_cast")));
    // BF16 training is unchanged: every op queries the training dtype.
    let bf = TrainingConfig {
        dtype: DType::Bf16,
        ..t.clone()
    };
    assert!(
        head(&m, &bf, &p)
            .forward
            .iter()
            .filter_map(|o| o.query(bf.dtype))
            .all(|q| q.dtype == DType::Bf16)
    );
    // Attention is BF16 under FP8 training, fused or not.
    let unfused = TrainingConfig {
        flash_attention: false,
        ..t.clone()
    };
    let attn: Vec<_> = transformer_layer(&m, &unfused, &p, 0)
        .forward
        .iter()
        .filter_map(|o| o.query(unfused.dtype))
        .filter(|q| matches!(q.class, OpClass::Attention | OpClass::FlashAttention))
        .collect();
    assert!(!attn.is_empty() && attn.iter().all(|q| q.dtype == DType::Bf16));
}
