//! `parallel.moe_fp8_dispatch` (DeepSeek-V3 report section 3.3): the tokens sent to the experts
//! (the forward dispatch, the combine's gradient) travel in FP8 with an FP32 scale per 128
//! elements; the combine and the dispatch's gradient stay BF16.

use llmsim_compute::DType;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{OpSpec, OpSpecKind, transformer_layer};
use llmsim_workload::{ParallelConfig, TrainingConfig};

fn bytes(ops: &[OpSpec], name: &str) -> u64 {
    ops.iter()
        .find_map(|o| match o.kind {
            OpSpecKind::Comm { bytes, .. } if o.name == name => Some(bytes),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn tokens_to_the_experts_travel_in_fp8() {
    let m = preset("deepseek-v3").unwrap();
    let t = TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 1024,
        dtype: DType::Fp8,
        ..TrainingConfig::default()
    };
    for (dispatcher, names) in [
        ("alltoall", vec![("ep_dispatch", "ep_combine_bwd", "ep_combine", "ep_dispatch_bwd")]),
        (
            "flex",
            vec![
                (
                    "ep_dispatch_inter",
                    "ep_combine_inter_bwd",
                    "ep_combine_inter",
                    "ep_dispatch_inter_bwd",
                ),
                (
                    "ep_dispatch_intra",
                    "ep_combine_intra_bwd",
                    "ep_combine_intra",
                    "ep_dispatch_intra_bwd",
                ),
            ],
        ),
    ] {
        let resolve = |extra: &str| {
            let mut p: ParallelConfig =
                serde_yaml_ng::from_str(&format!("{{ ep: 64, moe_token_dispatcher: {dispatcher}{extra} }}")).unwrap();
            p.gpus_per_node = 8;
            let mut p = p.resolve(64, &m, &t).unwrap();
            p.gpus_per_node = 8;
            p
        };
        let layer = 5; // an MoE layer (DeepSeek-V3's first three are dense)
        let bf16 = transformer_layer(&m, &t, &resolve(""), layer);
        let fp8 = transformer_layer(&m, &t, &resolve(", moe_fp8_dispatch: true"), layer);
        for (to_fwd, to_bwd, back_fwd, back_bwd) in names {
            let want = |b: u64| (b as f64 / 2.0 * (1.0 + 4.0 / 128.0)).round() as u64;
            assert_eq!(
                bytes(&fp8.forward, to_fwd),
                want(bytes(&bf16.forward, to_fwd)),
                "{dispatcher} {to_fwd}"
            );
            assert_eq!(
                bytes(&fp8.backward, to_bwd),
                want(bytes(&bf16.backward, to_bwd)),
                "{dispatcher} {to_bwd}"
            );
            assert_eq!(
                bytes(&fp8.forward, back_fwd),
                bytes(&bf16.forward, back_fwd),
                "{dispatcher} {back_fwd}"
            );
            assert_eq!(
                bytes(&fp8.backward, back_bwd),
                bytes(&bf16.backward, back_bwd),
                "{dispatcher} {back_bwd}"
            );
            assert!(bytes(&fp8.forward, to_fwd) < bytes(&bf16.forward, to_fwd));
        }
    }
}

#[test]
fn fp8_dispatch_needs_fp8_training_and_experts_apart() {
    let m = preset("deepseek-v3").unwrap();
    let bf16 = TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 1024,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{ ep: 64, moe_fp8_dispatch: true }").unwrap();
    let e = p.resolve(64, &m, &bf16).unwrap_err().to_string();
    assert!(e.contains("parallel.moe_fp8_dispatch") && e.contains("fp8"), "{e}");
    let fp8 = TrainingConfig {
        dtype: DType::Fp8,
        ..bf16.clone()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{ ep: 1, moe_fp8_dispatch: true }").unwrap();
    let e = p.resolve(64, &m, &fp8).unwrap_err().to_string();
    assert!(e.contains("parallel.moe_fp8_dispatch") && e.contains("ep"), "{e}");
}
