//! Memory footprint: Megatron's bytes per parameter, Korthikanti et al.'s activations, OOM.

mod common;
use common::plan;

use llmsim_workload::memory::{check_config_fits, check_fits, footprint, layer_activation_bytes};
use llmsim_workload::model::preset;
use llmsim_workload::ops::stage_params;
use llmsim_workload::{ModelConfig, ParallelConfig, Recompute, TrainingConfig, WorkloadError};

const GB80: u64 = 80_000_000_000;

#[test]
fn gpt3_175b_on_one_gpu_is_out_of_memory() {
    let m = preset("gpt3-175b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 1, "{ tp: 1, pp: 1 }");
    let f = footprint(&m, &t, &p);
    // 18 bytes per parameter of model states alone.
    assert_eq!(f.parameters + f.gradients + f.optimizer_states, 18 * stage_params(&m, &p, 0));
    let e = check_fits(&f, GB80, "H100").unwrap_err();
    let WorkloadError::OutOfMemory {
        ref suggestion,
        ref footprint,
        ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!(footprint, &f);
    assert!(suggestion.contains("distributed_optimizer"), "{suggestion}");
    let msg = e.to_string();
    for word in [
        "H100",
        "parameters",
        "gradients",
        "optimizer states",
        "activations",
        "workspace",
        "GiB",
    ] {
        assert!(msg.contains(word), "{msg}");
    }
    assert!(matches!(
        check_config_fits(&m, &t, &p, GB80, "H100"),
        Err(WorkloadError::OutOfMemory { .. })
    ));
}

#[test]
fn gpt3_13b_tp2_distributed_optimizer_fits() {
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 128, "{ tp: 2, pp: 1, use_distributed_optimizer: true }");
    assert_eq!(p.dp, 64);
    let f = footprint(&m, &t, &p);
    check_fits(&f, GB80, "H100").unwrap();
    check_config_fits(&m, &t, &p, GB80, "H100").unwrap();
    // Megatron's distributed optimizer: 6 + 12/d bytes per parameter (bf16 weight, fp32 grad,
    // fp32 main weight and Adam moments sharded over d = dp).
    let n = stage_params(&m, &p, 0);
    assert_eq!(f.parameters, 2 * n);
    assert_eq!(f.gradients, 4 * n);
    assert_eq!(f.optimizer_states, (12 * n).div_ceil(64));
}

#[test]
fn concrete_suggestion_fits() {
    // 13B on tp=2 without the distributed optimizer does not fit 40 GB; the suggestion names one change.
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig::default();
    let p = plan(&m, &t, 128, "{ tp: 2 }");
    let e = check_config_fits(&m, &t, &p, 40_000_000_000, "A100-40GB").unwrap_err();
    let WorkloadError::OutOfMemory { suggestion, .. } = e else {
        panic!()
    };
    assert!(suggestion.contains("parallel."), "{suggestion}");
}

#[test]
fn zero_stages_shard_more() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig::default();
    let totals: Vec<u64> = (0..=3)
        .map(|z| {
            let p = plan(&m, &t, 8, &format!("{{ zero_stage: {z} }}"));
            let f = footprint(&m, &t, &p);
            f.parameters + f.gradients + f.optimizer_states
        })
        .collect();
    let n = stage_params(&m, &plan(&m, &t, 8, "{}"), 0);
    assert_eq!(totals[0], 18 * n);
    assert_eq!(totals[1], 6 * n + (12 * n).div_ceil(8));
    assert_eq!(totals[2], 2 * n + (4 * n).div_ceil(8) + (12 * n).div_ceil(8));
    // ZeRO-3 also holds two gathered FSDP units' weights and one unit's unsharded gradient.
    let unit = llmsim_workload::megatron::fsdp_unit_params(&m, &plan(&m, &t, 8, "{ zero_stage: 3 }"), 0);
    assert_eq!(
        totals[3],
        (2 * n).div_ceil(8) + (4 * n).div_ceil(8) + (12 * n).div_ceil(8) + 2 * 2 * unit + 4 * unit
    );
    assert!(totals[3] < totals[2]);
}

#[test]
fn activations_follow_korthikanti() {
    // Korthikanti et al. 2022, Table 2: per layer, s·b·h·(10 + 24/t + 5as/(ht)) with TP,
    // s·b·h/t·(34 + 5as/h) with SP, 34·s·b·h/t with selective recomputation and SP.
    let m = preset("gpt3-175b").unwrap();
    let (s, b, h, a) = (2048, 2, m.hidden_size, m.num_attention_heads);
    let t = TrainingConfig {
        seq_length: s,
        micro_batch_size: b,
        flash_attention: false,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 8, "{ tp: 8 }");
    let tp = 8;
    assert_eq!(
        layer_activation_bytes(&m, &t, &p, 0),
        s * b * h * 10 + s * b * h * 24 / tp + 5 * a * s * s * b / tp
    );
    let p_sp = plan(&m, &t, 8, "{ tp: 8, sequence_parallel: true }");
    assert_eq!(
        layer_activation_bytes(&m, &t, &p_sp, 0),
        s * b * h * 34 / tp + 5 * a * s * s * b / tp
    );
    let sel = TrainingConfig {
        recompute: Recompute::Selective,
        ..t.clone()
    };
    assert_eq!(layer_activation_bytes(&m, &sel, &p_sp, 0), s * b * h * 34 / tp);
    // FlashAttention keeps only the fp32 log-sum-exp per head and query.
    let flash = TrainingConfig {
        flash_attention: true,
        ..t.clone()
    };
    assert_eq!(
        layer_activation_bytes(&m, &flash, &p_sp, 0),
        s * b * h * 34 / tp + 4 * a * s * b / tp
    );

    // Full recomputation stores 2·s·b·h/t per layer and micro-batch, far less.
    let sel = TrainingConfig {
        global_batch_size: 64,
        ..sel
    };
    let full = TrainingConfig {
        recompute: Recompute::Full,
        ..sel.clone()
    };
    let p = plan(&m, &t, 64, "{ tp: 8, pp: 8, sequence_parallel: true }");
    assert!(footprint(&m, &full, &p).activations < footprint(&m, &sel, &p).activations / 4);
}

#[test]
fn pipeline_in_flight_micro_batches() {
    // 1F1B stage 0 holds pp micro-batches of its L/pp layers; interleaving multiplies that by
    // 1 + (pp−1)/(pp·vpp) (Korthikanti et al. 2022, §4.2.3).
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let one = plan(&m, &t, 4, "{ pp: 4 }");
    let inter = plan(&m, &t, 4, "{ pp: 4, vpp: 2 }");
    let per_layer = layer_activation_bytes(&m, &t, &one, 0);
    let layers = m.num_hidden_layers / 4;
    let a1 = footprint(&m, &t, &one).activations;
    let expected1 = 4 * layers * per_layer;
    assert!(
        (a1 as f64 - expected1 as f64).abs() / (expected1 as f64) < 0.01,
        "{a1} vs {expected1}"
    );
    let a2 = footprint(&m, &t, &inter).activations as f64;
    let ratio = a2 / a1 as f64;
    let expected = 1.0 + 3.0 / 8.0;
    assert!((ratio - expected).abs() < 0.01, "{ratio} vs {expected}");
    // Fewer micro-batches than stages: only those are in flight.
    let t1 = TrainingConfig::default();
    let p = plan(&m, &t1, 4, "{ pp: 4 }");
    assert!(footprint(&m, &t1, &p).activations < a1 / 3);
}

/// The suggestion never asks for what the plan already does (issue 35: "set
/// use_distributed_optimizer: true" when it was set).
#[test]
fn suggestion_leaves_out_what_the_plan_already_does() {
    let m = preset("gpt3-175b").unwrap();
    let t = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 16, "tp: 8\nuse_distributed_optimizer: true\n");
    let e = check_config_fits(&m, &t, &p, GB80, "H100").unwrap_err().to_string();
    assert!(e.contains("suggestion"), "{e}");
    assert!(!e.contains("use_distributed_optimizer: true"), "{e}");
}

/// The fragmentation allowance is an estimate: a plan whose tensors and fixed workspace fit but
/// whose allowance does not is accepted as tight; one byte less of capacity than the firm part is
/// rejected.
#[test]
fn fragmentation_allowance_makes_a_plan_tight_not_rejected() {
    use llmsim_workload::memory::{FRAGMENTATION, MemoryFootprint, WORKSPACE_FIXED_BYTES};
    let f = MemoryFootprint::new(10 << 30, 20 << 30, 5 << 30, 40 << 30);
    let tensors = 75u64 << 30;
    assert_eq!(f.fragmentation, (tensors as f64 * FRAGMENTATION) as u64);
    assert_eq!(f.workspace, WORKSPACE_FIXED_BYTES + f.fragmentation);
    assert_eq!(f.firm(), tensors + WORKSPACE_FIXED_BYTES);
    // Roomy: fits, not tight.
    check_fits(&f, f.total, "H100").unwrap();
    assert!(!f.is_tight(f.total));
    // Between the firm part and the total: tight, accepted.
    let cap = f.firm() + f.fragmentation / 2;
    check_fits(&f, cap, "H100").unwrap();
    assert!(f.is_tight(cap));
    // Below the firm part: rejected.
    assert!(matches!(
        check_fits(&f, f.firm() - 1, "H100"),
        Err(WorkloadError::OutOfMemory { .. })
    ));
    assert!(!f.is_tight(f.firm() - 1));
}

/// FP8 weight casts: Hopper keeps a row-wise and a transposed copy (2 B per linear weight),
/// Blackwell one (1 B); FSDP that reshards after forward keeps casts of its gathered units only.
#[test]
fn fp8_weight_cache_follows_the_architecture_and_fsdp() {
    use llmsim_compute::DType;
    use llmsim_core::GpuArch;
    use llmsim_workload::memory::footprint_on;
    let m = preset("llama3-8b").unwrap();
    let bf16 = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let fp8 = TrainingConfig {
        dtype: DType::Fp8,
        ..bf16.clone()
    };
    let p = plan(&m, &bf16, 8, "{ tp: 1, use_distributed_optimizer: true }");
    let params = |t: &TrainingConfig, p: &ParallelConfig, a: GpuArch| footprint_on(&m, t, p, a).parameters;
    let base = params(&bf16, &p, GpuArch::Hopper);
    assert_eq!(base, params(&bf16, &p, GpuArch::Blackwell));
    let hopper = params(&fp8, &p, GpuArch::Hopper) - base;
    let blackwell = params(&fp8, &p, GpuArch::Blackwell) - base;
    assert!(blackwell > 0);
    assert_eq!(hopper, 2 * blackwell);
    // Linear weights only: less than one byte per parameter on Blackwell.
    assert!(blackwell < stage_params(&m, &p, 0));
    // FSDP with reshard after forward: casts of the gathered units only, far below the stage's.
    let fsdp = plan(&m, &fp8, 8, "{ tp: 1, zero_stage: 3 }");
    let fsdp16 = plan(&m, &bf16, 8, "{ tp: 1, zero_stage: 3 }");
    let extra = params(&fp8, &fsdp, GpuArch::Hopper) - params(&bf16, &fsdp16, GpuArch::Hopper);
    assert!(extra > 0 && extra < hopper / 4, "{extra} vs {hopper}");
}

/// Parameter bytes `t` keeps on a Blackwell GPU beyond those of `bf16` (its low-precision weight
/// copies), on 8 GPUs with TP 1 and the distributed optimizer.
fn blackwell_weight_cache(m: &ModelConfig, bf16: &TrainingConfig, t: &TrainingConfig) -> u64 {
    use llmsim_core::GpuArch;
    use llmsim_workload::memory::footprint_on;
    let p = plan(m, bf16, 8, "{ tp: 1, use_distributed_optimizer: true }");
    footprint_on(m, t, &p, GpuArch::Blackwell).parameters - footprint_on(m, bf16, &p, GpuArch::Blackwell).parameters
}

/// MXFP8 keeps both weight copies even on Blackwell, each with a scale byte per 32 elements.
#[test]
fn mxfp8_weight_cache_has_two_scaled_copies() {
    use llmsim_compute::DType;
    use llmsim_workload::Fp8Recipe;
    let m = preset("llama3-8b").unwrap();
    let bf16 = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let cs = TrainingConfig {
        dtype: DType::Fp8,
        fp8_recipe: Fp8Recipe::Current,
        ..bf16.clone()
    };
    let mx = TrainingConfig {
        fp8_recipe: Fp8Recipe::Mxfp8,
        ..cs.clone()
    };
    let cache = |t: &TrainingConfig| blackwell_weight_cache(&m, &bf16, t);
    let one = cache(&cs);
    let two = cache(&mx);
    assert_eq!(two, 2 * one + (2 * one).div_ceil(32));
}

/// NVFP4 keeps a row-wise and a column-wise weight copy, each 0.5 + 1/16 bytes per weight.
#[test]
fn nvfp4_weight_cache_has_two_half_byte_copies() {
    use llmsim_compute::DType;
    let m = preset("llama3-8b").unwrap();
    let bf16 = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let fp8 = TrainingConfig {
        dtype: DType::Fp8,
        ..bf16.clone()
    };
    let fp4 = TrainingConfig {
        dtype: DType::Fp4,
        ..bf16.clone()
    };
    let cache = |t: &TrainingConfig| blackwell_weight_cache(&m, &bf16, t);
    // FP8 on Blackwell: one 1-byte copy per linear weight.
    let linear = cache(&fp8);
    assert_eq!(cache(&fp4), (9 * 2 * linear).div_ceil(16));
}

/// Optimizer-state precision: bf16 moments and NeMo's 2-byte main-parameter remainders shrink the
/// optimizer states by their bytes; an FP8 moment or remainders without bf16 weights are errors.
#[test]
fn optimizer_state_dtypes_set_its_bytes() {
    use llmsim_compute::DType;
    let m = preset("llama3-8b").unwrap();
    let base = TrainingConfig {
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    assert_eq!(base.optimizer_bytes_per_param(), 12);
    let p = plan(&m, &base, 8, "{ tp: 1, use_distributed_optimizer: true }");
    let states = |t: &TrainingConfig| footprint(&m, t, &p).optimizer_states;
    let bf16_moments = TrainingConfig {
        exp_avg_dtype: DType::Bf16,
        exp_avg_sq_dtype: DType::Bf16,
        ..base.clone()
    };
    let remainders = TrainingConfig {
        store_param_remainders: true,
        ..base.clone()
    };
    assert_eq!(bf16_moments.optimizer_bytes_per_param(), 8);
    assert_eq!(remainders.optimizer_bytes_per_param(), 10);
    let n = stage_params(&m, &p, 0);
    assert_eq!(states(&base), (12 * n).div_ceil(8));
    assert_eq!(states(&bf16_moments), (8 * n).div_ceil(8));
    assert_eq!(states(&remainders), (10 * n).div_ceil(8));
    for (bad, field) in [
        (
            TrainingConfig {
                exp_avg_dtype: DType::Fp8,
                ..base.clone()
            },
            "training.exp_avg_dtype",
        ),
        (
            TrainingConfig {
                dtype: DType::Fp32,
                store_param_remainders: true,
                ..base.clone()
            },
            "training.store_param_remainders",
        ),
    ] {
        let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1 }").unwrap();
        let e = p.resolve(8, &m, &bad).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
}
