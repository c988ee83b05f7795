//! `parallel.moe_fused_grouped_mlp` (Transformer Engine's CuTe DSL fused grouped MLP, the
//! 26.06 / 26.08 Megatron-Bridge GB200 and GB300 MoE recipes): the activation runs in fc1's
//! epilogue and its gradient in fc2's data-gradient epilogue, which also write the quantized
//! operands, so the activation kernels, fc2's forward input cast and fc1's backward output-gradient
//! cast do not run; every GEMM and every other op is unchanged.

use llmsim_compute::DType;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{LayerOps, OpSpec, transformer_layer};
use llmsim_workload::{Fp8Recipe, ParallelConfig, TrainingConfig};

fn mxfp8() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 4,
        global_batch_size: 512,
        dtype: DType::Fp8,
        fp8_recipe: Fp8Recipe::Mxfp8,
        ..TrainingConfig::default()
    }
}

fn layer(model: &str, t: &TrainingConfig, extra: &str) -> LayerOps {
    let m = preset(model).unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str(&format!("{{ ep: 8, moe_token_dispatcher: flex{extra} }}")).unwrap();
    let p = p.resolve(8, &m, t).unwrap();
    let l = (0..m.num_hidden_layers).find(|&l| m.is_moe(l)).unwrap();
    transformer_layer(&m, t, &p, l)
}

/// (name, the GEMM its cast feeds, when it is a cast)
fn key(o: &OpSpec) -> (String, String) {
    let gemm = o.shape.split(",gemm=").nth(1).unwrap_or("").to_string();
    (o.name.to_string(), gemm)
}

#[test]
fn the_fused_kernels_drop_the_activation_and_two_casts() {
    for model in ["qwen3-30b-a3b", "gpt-oss-120b"] {
        let t = mxfp8();
        let plain = layer(model, &t, "");
        let fused = layer(model, &t, ", moe_fused_grouped_mlp: true");
        for (ops_plain, ops_fused, dropped) in [
            (&plain.forward, &fused.forward, vec![("fp8_cast", "expert_fc2")]),
            (&plain.backward, &fused.backward, vec![("fp8_cast_transpose_bwd", "expert_fc1")]),
        ] {
            let kept: Vec<_> = ops_plain
                .iter()
                .filter(|o| {
                    let (n, g) = key(o);
                    // The activation (with GPT-OSS's clamp) and fc2's per-expert bias loop.
                    let fused_away = n.starts_with("expert_act") || n.starts_with("expert_fc2_bias") || n == "expert_fc2_split_bwd";
                    !fused_away && !dropped.iter().any(|(dn, dg)| n == *dn && g == *dg)
                })
                .collect();
            let fused_ops: Vec<_> = ops_fused.iter().collect();
            assert_eq!(kept, fused_ops, "{model}");
            assert!(ops_fused.iter().all(|o| !o.name.starts_with("expert_act")), "{model}");
            assert!(ops_plain.len() > ops_fused.len(), "{model}");
        }
        // GPT-OSS's clamp no longer synchronizes the host (its blocking copy is in the eager path).
        assert!(fused.forward.iter().chain(&fused.backward).all(|o| !o.host_sync), "{model}");
    }
}

#[test]
fn the_fused_path_needs_a_blackwell_quantized_run_and_experts() {
    let m = preset("qwen3-30b-a3b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ ep: 8, moe_fused_grouped_mlp: true }").unwrap();
    for t in [
        TrainingConfig {
            dtype: DType::Bf16,
            ..mxfp8()
        },
        TrainingConfig {
            fp8_recipe: Fp8Recipe::Delayed,
            ..mxfp8()
        },
    ] {
        let e = p.clone().resolve(8, &m, &t).unwrap_err().to_string();
        assert!(e.contains("parallel.moe_fused_grouped_mlp") && e.contains("mxfp8"), "{e}");
    }
    let dense = preset("llama3-8b").unwrap();
    let e = p.clone().resolve(8, &dense, &mxfp8()).unwrap_err().to_string();
    assert!(e.contains("parallel.moe_fused_grouped_mlp") && e.contains("no experts"), "{e}");
    // Expert tensor parallelism: Megatron-Core's fused path has none.
    let tp: ParallelConfig = serde_yaml_ng::from_str("{ tp: 2, ep: 4, etp: 2, moe_fused_grouped_mlp: true }").unwrap();
    let e = tp.resolve(8, &m, &mxfp8()).unwrap_err().to_string();
    assert!(e.contains("parallel.moe_fused_grouped_mlp") && e.contains("etp"), "{e}");
    // Megatron-Bridge's name is accepted.
    let q: ParallelConfig = serde_yaml_ng::from_str("{ ep: 8, cutedsl_fused_grouped_mlp: true }").unwrap();
    assert!(q.moe_fused_grouped_mlp);
}
