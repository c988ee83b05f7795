//! Per-layer and per-module precision in a quantized run: Megatron-Core's BF16 first and last
//! layers (`training.bf16_layers_at_start` / `_at_end`) and Transformer Engine's per-module
//! quantization recipe (`training.module_dtype`).

mod common;
use common::plan;

use llmsim_compute::{DType, OpClass};
use llmsim_workload::config::Fp8Recipe;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{LayerOps, transformer_layer};
use llmsim_workload::{GemmModule, OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

fn nvfp4() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 8,
        dtype: DType::Fp4,
        fp8_recipe: Fp8Recipe::Mxfp8,
        ..TrainingConfig::default()
    }
}

fn gemms(l: &LayerOps) -> Vec<&OpSpec> {
    l.iter()
        .filter(|o| matches!(o.kind, OpSpecKind::Compute { class: OpClass::Gemm, .. }))
        .collect()
}

/// The quantization ops of the GEMM named `gemm` (forward name): their `shape` names it.
fn casts_of<'a>(l: &'a LayerOps, gemm: &str) -> Vec<&'a OpSpec> {
    let tag = format!("gemm={gemm}");
    l.iter().filter(|o| o.shape.split(',').any(|f| f == tag)).collect()
}

fn flops_and_bytes(o: &OpSpec) -> (f64, f64) {
    match o.kind {
        OpSpecKind::Compute { flops, bytes, .. } => (flops, bytes),
        _ => (0.0, 0.0),
    }
}

#[test]
fn the_first_and_last_layers_run_in_bf16() {
    let m = preset("llama3-8b").unwrap();
    let l = m.num_hidden_layers;
    let t = TrainingConfig {
        bf16_layers_at_start: 1,
        bf16_layers_at_end: 2,
        ..nvfp4()
    };
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1 }");
    let in_bf16: Vec<u64> = (0..l).filter(|&i| t.layer_in_bf16(i, l)).collect();
    assert_eq!(in_bf16, vec![0, l - 2, l - 1]);
    // MTP blocks (layers beyond the decoder) are not the decoder's last layers.
    assert!(!t.layer_in_bf16(l, l) && !t.layer_in_bf16(l + 1, l));
    // Not in a BF16 run.
    assert!(
        !TrainingConfig {
            dtype: DType::Bf16,
            ..t.clone()
        }
        .layer_in_bf16(0, l)
    );
    for i in [0, 1, l - 3, l - 2, l - 1] {
        let ops = transformer_layer(&m, &t, &p, i);
        let quantized = ops.iter().filter(|o| o.name.starts_with("nvfp4_quantize")).count();
        if t.layer_in_bf16(i, l) {
            assert_eq!(quantized, 0, "layer {i}: no quantization in a BF16 layer");
            assert!(gemms(&ops).iter().all(|g| g.dtype == Some(DType::Bf16)), "layer {i}");
        } else {
            assert!(quantized > 0, "layer {i}");
            assert!(gemms(&ops).iter().all(|g| g.dtype.is_none()), "layer {i}: the run's dtype");
        }
        // The same work either way.
        let f: f64 = gemms(&ops).iter().map(|g| flops_and_bytes(g).0).sum();
        let f0: f64 = gemms(&transformer_layer(&m, &nvfp4(), &p, i))
            .iter()
            .map(|g| flops_and_bytes(g).0)
            .sum();
        assert_eq!(f, f0, "layer {i}");
    }
}

#[test]
fn a_module_runs_in_its_own_dtype_with_its_own_quantization() {
    let m = preset("llama3-8b").unwrap();
    let mut t = nvfp4();
    t.module_dtype.insert(GemmModule::AttnQkv, DType::Bf16);
    t.module_dtype.insert(GemmModule::MlpFc2, DType::Fp8);
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1 }");
    let ops = transformer_layer(&m, &t, &p, 3);
    let dtype = |name: &str| ops.iter().find(|o| o.name == name).unwrap().dtype;
    // BF16: no quantization, BF16 GEMMs (forward, dgrad and wgrad).
    for g in ["attn_qkv", "attn_qkv_dgrad", "attn_qkv_wgrad"] {
        assert_eq!(dtype(g), Some(DType::Bf16), "{g}");
    }
    assert!(casts_of(&ops, "attn_qkv").is_empty());
    // FP8 under the run's fp8_recipe (MXFP8): its GEMMs, and its casts, one read of the BF16
    // tensor and two MXFP8 copies (1 + 1/32 bytes an element each).
    for g in ["mlp_fc2", "mlp_fc2_dgrad", "mlp_fc2_wgrad"] {
        assert_eq!(dtype(g), Some(DType::Mxfp8), "{g}");
    }
    let casts = casts_of(&ops, "mlp_fc2");
    assert_eq!(casts.len(), 2, "its input forward, its output gradient backward");
    assert!(casts.iter().all(|c| c.name.starts_with("fp8_cast")));
    let fc2_in = (t.seq_length * m.intermediate_size) as f64;
    let want = fc2_in * (2.0 + 2.0 * (1.0 + 1.0 / 32.0));
    let fwd = casts.iter().find(|c| c.name == "fp8_cast").unwrap();
    assert!((flops_and_bytes(fwd).1 - want).abs() < 1e-6 * want);
    // The other modules keep the run's NVFP4.
    assert_eq!(dtype("attn_proj"), None);
    assert!(casts_of(&ops, "attn_proj").iter().all(|c| c.name.starts_with("nvfp4_quantize")));
    assert!(!casts_of(&ops, "attn_proj").is_empty());
    // A BF16 layer stays BF16 whatever the modules say.
    t.bf16_layers_at_end = 1;
    let last = transformer_layer(&m, &t, &p, m.num_hidden_layers - 1);
    assert!(gemms(&last).iter().all(|g| g.dtype == Some(DType::Bf16)));
    assert!(last.iter().all(|o| !o.name.starts_with("fp8_cast") && !o.name.starts_with("nvfp4")));
}

#[test]
fn bad_precision_settings_name_their_field() {
    let m = preset("llama3-8b").unwrap();
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 4 }").unwrap();
    let err = |t: TrainingConfig| p.resolve(8, &m, &t).unwrap_err().to_string();
    let bf16 = TrainingConfig {
        dtype: DType::Bf16,
        bf16_layers_at_end: 1,
        ..nvfp4()
    };
    assert!(err(bf16).contains("training.bf16_layers_at_end"));
    let delayed = TrainingConfig {
        dtype: DType::Fp8,
        fp8_recipe: Fp8Recipe::Delayed,
        bf16_layers_at_start: 1,
        ..nvfp4()
    };
    let e = err(delayed);
    assert!(e.contains("training.bf16_layers_at_start") && e.contains("delayed"), "{e}");
    // Megatron-Core allows at most num_layers / pp: 32 / 4 = 8.
    let many = TrainingConfig {
        bf16_layers_at_end: 9,
        ..nvfp4()
    };
    let e = err(many);
    assert!(e.contains("training.bf16_layers_at_end") && e.contains("= 8"), "{e}");
    assert!(
        p.resolve(
            8,
            &m,
            &TrainingConfig {
                bf16_layers_at_end: 8,
                ..nvfp4()
            }
        )
        .is_ok()
    );
    let mut fp4_module = nvfp4();
    fp4_module.dtype = DType::Fp8;
    fp4_module.module_dtype.insert(GemmModule::MambaOutProj, DType::Fp4);
    assert!(err(fp4_module).contains("training.module_dtype.mamba_out_proj"));
    let mut in_bf16 = nvfp4();
    in_bf16.dtype = DType::Bf16;
    in_bf16.module_dtype.insert(GemmModule::AttnProj, DType::Fp8);
    assert!(err(in_bf16).contains("training.module_dtype.attn_proj"));
    // An unknown module is refused with the names it could be.
    let e = serde_yaml_ng::from_str::<TrainingConfig>("module_dtype: { attn_qkvv: bf16 }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("attn_qkvv") && e.contains("attn_qkv"), "{e}");
}
