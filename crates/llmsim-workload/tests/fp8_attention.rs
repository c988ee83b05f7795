//! FP8 attention (`training.fp8_dot_product_attention`, Transformer Engine's `fp8_dpa`): the
//! fused attention runs cuDNN's FP8 kernel of the recipe, with its quantization passes.

mod common;
use common::plan;

use llmsim_compute::{AttentionKernel, DType, KernelShape};
use llmsim_workload::config::{AttentionKernelChoice, Fp8Recipe};
use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

fn kernel(ops: &[OpSpec], name: &str) -> Option<AttentionKernel> {
    ops.iter().find(|o| o.name == name).and_then(|o| match &o.kernel {
        Some(KernelShape::Attention(a)) => a.kernel,
        _ => None,
    })
}

fn bytes(ops: &[OpSpec], name: &str) -> f64 {
    ops.iter()
        .filter(|o| o.name == name)
        .map(|o| match o.kind {
            OpSpecKind::Compute { bytes, .. } => bytes,
            _ => 0.0,
        })
        .sum()
}

fn training(recipe: Fp8Recipe, on: bool) -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 8,
        dtype: DType::Fp8,
        fp8_recipe: recipe,
        fp8_dot_product_attention: on,
        ..TrainingConfig::default()
    }
}

#[test]
fn the_recipe_picks_the_fp8_kernel_and_its_casts_run() {
    let m = preset("llama3-8b").unwrap();
    for (recipe, k, elem) in [
        (Fp8Recipe::Mxfp8, AttentionKernel::CudnnMxfp8, 1.0 + 1.0 / 32.0),
        (Fp8Recipe::Current, AttentionKernel::CudnnFp8, 1.0),
        (Fp8Recipe::Delayed, AttentionKernel::CudnnFp8, 1.0),
    ] {
        let t = training(recipe, true);
        let p = plan(&m, &t, 8, "{ tp: 2, pp: 1 }");
        let l = transformer_layer(&m, &t, &p, 0);
        assert_eq!(kernel(&l.forward, "core_attention"), Some(k), "{recipe:?}");
        assert_eq!(kernel(&l.backward, "core_attention_bwd"), Some(k), "{recipe:?}");
        // Q, K, V in and O out (forward), dO in and dQ, dK, dV out (backward): per element 2
        // bytes one way, one FP8 copy the other. Local heads at TP 2: 16 query, 4 K/V of 128.
        let tok = (t.micro_batch_size * t.seq_length) as f64;
        let d = m.head_dim() as f64;
        let (q, kv, o) = (tok * 16.0 * d, 2.0 * tok * 4.0 * d, tok * 16.0 * d);
        let want = (q + kv + o) * (2.0 + elem);
        assert!((bytes(&l.forward, "fp8_dpa_quantize") - want).abs() < 1e-6 * want, "{recipe:?}");
        assert!(
            (bytes(&l.backward, "fp8_dpa_quantize_bwd") - want).abs() < 1e-6 * want,
            "{recipe:?}"
        );
        // Off: BF16 cuDNN (the GPU's default) and no casts.
        let off = training(recipe, false);
        let lo = transformer_layer(&m, &off, &plan(&m, &off, 8, "{ tp: 2, pp: 1 }"), 0);
        assert_eq!(kernel(&lo.forward, "core_attention"), None);
        assert!(lo.forward.iter().chain(&lo.backward).all(|o| !o.name.starts_with("fp8_dpa")));
    }
}

#[test]
fn fp8_attention_outside_an_fp8_te_run_names_the_field() {
    let m = preset("llama3-8b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1 }").unwrap();
    let bf16 = TrainingConfig {
        dtype: DType::Bf16,
        ..training(Fp8Recipe::Mxfp8, true)
    };
    let fa2 = TrainingConfig {
        attention_kernel: AttentionKernelChoice::Fa2,
        ..training(Fp8Recipe::Mxfp8, true)
    };
    let unfused = TrainingConfig {
        flash_attention: false,
        ..training(Fp8Recipe::Mxfp8, true)
    };
    for t in [bf16, fa2, unfused] {
        let e = p.resolve(8, &m, &t).unwrap_err().to_string();
        assert!(e.contains("training.fp8_dot_product_attention"), "{e}");
    }
}
