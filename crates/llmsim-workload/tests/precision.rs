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
    // Attention is BF16 under FP8 training, fused or not (unfused: its batched GEMMs too).
    let unfused = TrainingConfig {
        flash_attention: false,
        ..t.clone()
    };
    let attn: Vec<_> = transformer_layer(&m, &unfused, &p, 0)
        .forward
        .iter()
        .filter(|o| o.name.starts_with("core_attention"))
        .filter_map(|o| o.query(unfused.dtype))
        .collect();
    assert!(attn.iter().any(|q| q.class == OpClass::Gemm));
    assert!(attn.len() >= 3 && attn.iter().all(|q| q.dtype == DType::Bf16));
}

/// MXFP8 (`dtype: fp8`, `fp8_recipe: mxfp8`): the layers' GEMMs, dense and grouped expert ones,
/// are timed as [`DType::Mxfp8`] (block-scaled, calibrated apart from per-tensor FP8), the ops
/// with a dtype of their own (the router's, the BF16 logits) keep it, every other op is BF16.
/// Delayed and current scaling's GEMMs stay [`DType::Fp8`].
#[test]
fn mxfp8_recipe_gemms_query_mxfp8_and_the_other_recipes_fp8() {
    use llmsim_workload::Fp8Recipe;
    use llmsim_workload::ops::{OpSpec, embedding};
    let m = preset("qwen3-30b-a3b").unwrap();
    for (recipe, gemm) in [
        (Fp8Recipe::Mxfp8, DType::Mxfp8),
        (Fp8Recipe::Delayed, DType::Fp8),
        (Fp8Recipe::Current, DType::Fp8),
        (Fp8Recipe::Blockwise, DType::Fp8Block),
    ] {
        let t = TrainingConfig {
            dtype: DType::Fp8,
            fp8_recipe: recipe,
            seq_length: 4096,
            ..TrainingConfig::default()
        };
        assert_eq!(t.gemm_compute_dtype(), gemm, "{recipe:?}");
        let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 2, sequence_parallel: true, ep: 4}").unwrap();
        let p = p.resolve(8, &m, &t).unwrap();
        let (l, h, e) = (transformer_layer(&m, &t, &p, 0), head(&m, &t, &p), embedding(&m, &t, &p));
        let ops: Vec<&OpSpec> = [&l, &h, &e].iter().flat_map(|x| x.forward.iter().chain(&x.backward)).collect();
        let mut timed_as = std::collections::BTreeMap::<String, usize>::new();
        let mut quantized = Vec::new();
        for o in ops {
            let Some(q) = o.query(t.gemm_compute_dtype()) else { continue };
            let want = o.dtype.unwrap_or(if q.class == OpClass::Gemm { gemm } else { DType::Bf16 });
            assert_eq!(q.dtype, want, "{recipe:?} {} {:?}", o.name, q.class);
            *timed_as.entry(format!("{}:{}", q.class, q.dtype)).or_default() += 1;
            if q.dtype == gemm {
                quantized.push(q.name);
            }
        }
        // Dense and expert GEMMs in the recipe's format; the logits (and router) GEMMs not.
        for n in ["attn_qkv", "attn_proj", "expert_fc1", "expert_fc2"] {
            assert!(quantized.iter().any(|q| q.starts_with(n)), "{recipe:?} {n}: {quantized:?}");
        }
        assert!(
            !quantized.iter().any(|q| q.starts_with("logits") || q.starts_with("moe_router")),
            "{quantized:?}"
        );
        assert!(timed_as["gemm:bf16"] >= 3, "{timed_as:?}");
        assert!(
            timed_as.keys().all(|k| k.starts_with("gemm:") || k.ends_with(":bf16")),
            "{timed_as:?}"
        );
        if gemm == DType::Mxfp8 {
            assert!(!timed_as.contains_key("gemm:fp8"), "{timed_as:?}");
        }
    }
    // Other training dtypes time their GEMMs in their own format, whatever the recipe says.
    for d in [DType::Bf16, DType::Fp16, DType::Fp32, DType::Fp4] {
        let t = TrainingConfig {
            dtype: d,
            fp8_recipe: Fp8Recipe::Mxfp8,
            ..TrainingConfig::default()
        };
        assert_eq!(t.gemm_compute_dtype(), d);
    }
}

/// MXFP8 is a GEMM format, not a training dtype: a config built in code with it is refused,
/// naming the field and what to write instead.
#[test]
fn mxfp8_is_not_a_training_dtype() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        dtype: DType::Mxfp8,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 1}").unwrap();
    let e = p.resolve(1, &m, &t).unwrap_err().to_string();
    assert!(e.contains("training.dtype") && e.contains("fp8_recipe: mxfp8"), "{e}");
    let e = serde_yaml_ng::from_str::<TrainingConfig>("dtype: mxfp8").unwrap_err().to_string();
    assert!(e.contains("dtype") && e.contains("unknown variant `mxfp8`"), "{e}");
}

/// NVFP4 (`dtype: fp4`): the layers' GEMMs query FP4, everything else BF16; every GEMM input and
/// output gradient gets one quantize op of 2 + 2 + 2 x (0.5 + 1/16) bytes per element (Transformer
/// Engine's amax pass, then the fused quantize writing row-wise and Hadamard-transformed
/// column-wise NVFP4 copies).
#[test]
fn nvfp4_training_quantizes_every_gemm_input_and_gradient() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        dtype: DType::Fp4,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 1}").unwrap();
    let p = p.resolve(1, &m, &t).unwrap();
    let l = transformer_layer(&m, &t, &p, 0);
    let queries: Vec<_> = l.forward.iter().chain(&l.backward).filter_map(|o| o.query(t.dtype)).collect();
    let gemms = queries.iter().filter(|q| q.class == OpClass::Gemm).count();
    assert!(gemms > 0);
    assert!(queries.iter().all(|q| (q.class == OpClass::Gemm) == (q.dtype == DType::Fp4)));
    // Forward: QKV, attention output, fc1, fc2 inputs; backward: their output gradients.
    let quant = |ops: &[llmsim_workload::ops::OpSpec], name: &str| -> Vec<(f64, f64)> {
        ops.iter()
            .filter(|o| o.name == name)
            .filter_map(|o| o.query(t.dtype))
            .map(|q| (q.flops, q.bytes))
            .collect()
    };
    let fwd = quant(&l.forward, "nvfp4_quantize_rht");
    let bwd = quant(&l.backward, "nvfp4_quantize_rht_bwd");
    assert_eq!((fwd.len(), bwd.len()), (4, 4));
    let (s, h) = (t.seq_length as f64, m.hidden_size as f64);
    // The QKV input is the [s, h] norm output (micro-batch 1): 5.125 bytes per element.
    assert!(fwd.iter().any(|&(e, b)| e == s * h && b == 5.125 * s * h), "{fwd:?}");
    assert!(fwd.iter().chain(&bwd).all(|&(e, b)| b == 5.125 * e));
    assert!(l.forward.iter().chain(&l.backward).all(|o| !o.name.starts_with("fp8_cast")));
    // The output layer stays BF16, as under FP8.
    let hd = head(&m, &t, &p);
    assert!(
        hd.forward
            .iter()
            .chain(&hd.backward)
            .filter_map(|o| o.query(t.dtype))
            .all(|q| q.dtype == DType::Bf16)
    );
}

/// Pipeline sends carry the hidden states in Megatron's `pipeline_dtype`, `params_dtype`: 2
/// bytes an element under FP8 and FP4 training as under BF16 (the 1-byte tensors live inside
/// TE's GEMMs only).
#[test]
fn pipeline_sends_stay_in_16_bits_under_low_precision_training() {
    use llmsim_workload::dag::DagNodeKind;
    use llmsim_workload::megatron::generate;
    let m = preset("llama3-8b").unwrap();
    let sends = |dtype: DType| -> Vec<u64> {
        let t = TrainingConfig {
            dtype,
            seq_length: 4096,
            micro_batch_size: 2,
            global_batch_size: 8,
            ..TrainingConfig::default()
        };
        let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 2, pp: 2, sequence_parallel: true}").unwrap();
        let p = p.resolve(4, &m, &t).unwrap();
        let w = generate(&m, &t, &p).unwrap();
        w.stages
            .iter()
            .flat_map(|s| s.nodes.iter())
            .filter_map(|n| match n.kind {
                DagNodeKind::CommSend { bytes, .. } | DagNodeKind::CommRecv { bytes, .. } => Some(bytes),
                _ => None,
            })
            .collect()
    };
    // b · s · h · 2 bytes, split over the tp ranks by sequence parallelism.
    let expect = 2 * 4096 * 4096 * 2 / 2;
    for dtype in [DType::Bf16, DType::Fp8] {
        let b = sends(dtype);
        assert!(!b.is_empty(), "{dtype:?}: a two-stage pipeline sends");
        assert!(b.iter().all(|&x| x == expect), "{dtype:?}: {b:?}");
    }
}

/// Only a linear fused with its norm (QKV, a dense layer's fc1) can receive its input quantized
/// by the norm kernel: always with delayed scaling, with MXFP8 only under `cudnn_norm` (TE's own
/// norm writes BF16 for MXFP8 and block scaling, `normalization.cpp`), never with blockwise; with
/// current scaling TE's norm hands over the amax, so its cast reads the tensor once (4 bytes an
/// element), or twice with the cuDNN norm (6). Transformer Engine casts every other GEMM input in
/// forward: the row-parallel ones, the grouped expert GEMMs (`GroupedLinear` quantizes the
/// permuted BF16 tokens and the activation's output) and an MoE layer's shared-expert fc1, whose
/// norm is a separate module.
#[test]
fn fp8_casts_every_gemm_input_no_norm_kernel_quantizes() {
    use llmsim_workload::ops::OpSpecKind;
    use llmsim_workload::{Fp8Impl, Fp8Recipe};
    let m = preset("deepseek-moe-16b").unwrap();
    let mx = 2.0 + 2.0 * (1.0 + 1.0 / 32.0);
    // (recipe, cudnn_norm, bytes an element of a norm-fed input's cast; None: no cast), with
    // Transformer Engine; torchao (TorchTitan) fuses nothing into its norms.
    let te = Fp8Impl::TransformerEngine;
    let cases = [
        (Fp8Recipe::Delayed, false, te, None),
        (Fp8Recipe::Delayed, true, te, None),
        (Fp8Recipe::Mxfp8, true, te, None),
        (Fp8Recipe::Mxfp8, false, te, Some(mx)),
        (Fp8Recipe::Blockwise, false, te, Some(mx)),
        (Fp8Recipe::Blockwise, true, te, Some(mx)),
        (Fp8Recipe::Current, false, te, Some(4.0)),
        (Fp8Recipe::Current, true, te, Some(6.0)),
        (Fp8Recipe::Current, false, Fp8Impl::Torchao, Some(6.0)),
        (Fp8Recipe::Delayed, false, Fp8Impl::Torchao, Some(4.0)),
    ];
    for (recipe, cudnn_norm, fp8_impl, norm_fed) in cases {
        let t = TrainingConfig {
            dtype: DType::Fp8,
            fp8_recipe: recipe,
            cudnn_norm,
            fp8_impl,
            seq_length: 4096,
            ..TrainingConfig::default()
        };
        let p: ParallelConfig = serde_yaml_ng::from_str("{tp: 2, sequence_parallel: true, ep: 4}").unwrap();
        let p = p.resolve(8, &m, &t).unwrap();
        // (GEMM the cast feeds, bytes per element)
        let cast_for = |layer: u64| -> Vec<(String, f64)> {
            transformer_layer(&m, &t, &p, layer)
                .forward
                .iter()
                .filter(|o| o.name == "fp8_cast")
                .filter_map(|o| {
                    let OpSpecKind::Compute { flops, bytes, .. } = o.kind else {
                        return None;
                    };
                    o.shape.split("gemm=").nth(1).map(|g| (g.to_string(), bytes / flops))
                })
                .collect()
        };
        let (dense, moe) = (cast_for(0), cast_for(1));
        let cast = |casts: &[(String, f64)], g: &str| casts.iter().find(|c| c.0 == g).map(|c| c.1);
        let unfused = match recipe {
            Fp8Recipe::Current => 6.0,
            Fp8Recipe::Delayed => 4.0,
            Fp8Recipe::Mxfp8 | Fp8Recipe::Blockwise => mx,
        };
        for g in ["attn_proj", "expert_fc1", "expert_fc2", "shared_fc1", "shared_fc2"] {
            let got = cast(&moe, g).unwrap_or_else(|| panic!("{recipe:?} {g}: {moe:?}"));
            assert!((got - unfused).abs() < 1e-9, "{recipe:?} {g}: {got}");
        }
        assert!(cast(&dense, "mlp_fc2").is_some(), "{recipe:?}: {dense:?}");
        for got in [cast(&dense, "mlp_fc1"), cast(&moe, "attn_qkv")] {
            match (got, norm_fed) {
                (None, None) => {}
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9, "{recipe:?} cudnn {cudnn_norm}: {g}, want {w}"),
                _ => panic!("{recipe:?} cudnn {cudnn_norm}: norm-fed cast {got:?}, want {norm_fed:?}"),
            }
        }
    }
}

/// With sequence parallelism Transformer Engine all-gathers the quantized GEMM operand, not the
/// BF16 one (TE v2.11 `module/layernorm_linear.py`, `module/linear.py`, `module/base.py`
/// `grad_output_preprocess`): per-tensor FP8 one byte an element everywhere; MXFP8 and NVFP4 the
/// usages each GEMM needs (the output gradient both ways, so no smaller than BF16 for MXFP8);
/// reduce-scatters and the output layer's gathers stay BF16.
#[test]
fn te_all_gathers_quantized_operands_under_sequence_parallelism() {
    use llmsim_core::CollectiveOp;
    use llmsim_workload::Fp8Recipe;
    use llmsim_workload::ops::{CommGroup, OpSpecKind};
    let m = preset("llama3-8b").unwrap();
    // (name, op) -> bytes of each TP collective of one layer and the head.
    let tp_colls = |dtype: DType, recipe: Fp8Recipe, overlap: bool| {
        let t = TrainingConfig {
            dtype,
            fp8_recipe: recipe,
            ..TrainingConfig::default()
        };
        let yaml = format!("{{tp: 4, sequence_parallel: true, tp_comm_overlap: {overlap}}}");
        let p: ParallelConfig = serde_yaml_ng::from_str(&yaml).unwrap();
        let p = p.resolve(4, &m, &t).unwrap();
        let (l, h) = (transformer_layer(&m, &t, &p, 0), head(&m, &t, &p));
        let mut out = std::collections::BTreeMap::new();
        for o in [&l, &h].iter().flat_map(|x| x.forward.iter().chain(&x.backward)) {
            if let OpSpecKind::Comm {
                op,
                group: CommGroup::Tp,
                bytes,
                ..
            } = o.kind
            {
                out.insert(o.name.to_string(), (op, bytes as f64));
            }
            if let Some(ov) = o.overlap {
                out.insert(format!("{}@overlap", o.name), (ov.op, ov.bytes as f64));
            }
        }
        out
    };
    let bf16 = tp_colls(DType::Bf16, Fp8Recipe::Delayed, false);
    assert!(
        bf16.values().filter(|(op, _)| *op == CollectiveOp::AllGather).count() >= 6,
        "{bf16:?}"
    );
    let is_grad_gather = |name: &str| name.starts_with("attn_proj") || name.starts_with("mlp_fc2");
    for (dtype, recipe, fwd, grad) in [
        (DType::Fp8, Fp8Recipe::Delayed, 0.5, 0.5),
        (DType::Fp8, Fp8Recipe::Current, 0.5, 0.5),
        (DType::Fp8, Fp8Recipe::Mxfp8, 0.515625, 1.0),
        (DType::Fp4, Fp8Recipe::Delayed, 0.28125, 0.5625),
    ] {
        let q = tp_colls(dtype, recipe, false);
        assert_eq!(q.keys().collect::<Vec<_>>(), bf16.keys().collect::<Vec<_>>());
        for (name, (op, bytes)) in &q {
            let base = bf16[name].1;
            let want = match op {
                CollectiveOp::AllGather if name.starts_with("logits") => 1.0,
                CollectiveOp::AllGather if is_grad_gather(name) => grad,
                CollectiveOp::AllGather => fwd,
                _ => 1.0,
            };
            assert!((bytes / base - want).abs() < 1e-3, "{dtype:?} {recipe:?} {name}: {bytes} / {base}");
        }
    }
    // Under userbuffers (TP comm overlap) the output gradient is gathered one usage at a time.
    let ub = tp_colls(DType::Fp8, Fp8Recipe::Mxfp8, true);
    let ub_bf16 = tp_colls(DType::Bf16, Fp8Recipe::Delayed, true);
    let grads: Vec<_> = ub
        .iter()
        .filter(|(n, (op, _))| *op == CollectiveOp::AllGather && n.ends_with("@overlap") && is_grad_gather(n))
        .collect();
    assert!(!grads.is_empty(), "{ub:?}");
    for (n, (_, b)) in grads {
        assert!((b / ub_bf16[n].1 - 0.515625).abs() < 1e-3, "{n}");
    }
}
