//! The `training:` and `parallel:` sections: YAML, defaults, Megatron aliases and validation errors.

use llmsim_workload::model::preset;
use llmsim_workload::{ParallelConfig, PipelineSchedule, TrainingConfig, WorkloadError};

fn par(yaml: &str) -> ParallelConfig {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn train(yaml: &str) -> TrainingConfig {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn expect_divisibility(e: WorkloadError, field: &str) -> String {
    match &e {
        WorkloadError::Divisibility { field: f, message } if f == field => message.clone(),
        _ => panic!("expected a divisibility error on {field}, got {e:?}"),
    }
}

#[test]
fn defaults_and_aliases() {
    let p = par("{}");
    assert_eq!((p.tp, p.pp, p.dp, p.ep, p.cp, p.vpp), (1, 1, 0, 1, 1, 1));
    assert_eq!(p.schedule, PipelineSchedule::OneFOneB);
    assert!(!p.overlap_grad_reduce && !p.use_distributed_optimizer);
    let p = par(
        "{ tensor_model_parallel_size: 4, pipeline_model_parallel_size: 2, context_parallel_size: 2, schedule: interleaved, virtual_pipeline_model_parallel_size: 2 }",
    );
    assert_eq!((p.tp, p.pp, p.cp, p.vpp, p.schedule), (4, 2, 2, 2, PipelineSchedule::Interleaved));
    let t = train("{ seq_length: 4096, dtype: fp16, recompute: selective }");
    assert_eq!(t.seq_length, 4096);
    assert_eq!(t.micro_batch_size, 1);
    assert!(t.flash_attention);
}

#[test]
fn unknown_keys_are_errors() {
    let e = serde_yaml_ng::from_str::<ParallelConfig>("{ tp: 2, tensor_parallel: 2 }").unwrap_err();
    assert!(e.to_string().contains("tensor_parallel"), "{e}");
    let e = serde_yaml_ng::from_str::<TrainingConfig>("{ seq: 2 }").unwrap_err();
    assert!(e.to_string().contains("seq"), "{e}");
    assert!(serde_yaml_ng::from_str::<TrainingConfig>("{ recompute: partial }").is_err());
}

#[test]
fn resolve_derives_dp_and_megatron_defaults() {
    let m = preset("gpt3-175b").unwrap();
    let t = TrainingConfig::default();
    let p = par("{ tp: 8, pp: 8, sequence_parallel: true, zero_stage: 1 }")
        .resolve(1024, &m, &t)
        .unwrap();
    assert_eq!(p.dp, 16);
    assert_eq!(p.world_size(), 1024);
    assert!(p.use_distributed_optimizer);
    assert_eq!(p.grad_bucket_size, 40_000_000);
    assert_eq!(p.micro_batches(&t), 1);
    let t = TrainingConfig {
        global_batch_size: 1536,
        ..t
    };
    assert_eq!(p.micro_batches(&t), 1536 / 16);

    let p = par("{ tp: 1, sequence_parallel: true, dp: 128 }")
        .resolve(128, &preset("gpt3-6.7b").unwrap(), &t)
        .unwrap();
    assert!(!p.sequence_parallel, "Megatron turns SP off at tp=1");
    assert_eq!(p.grad_bucket_size, 128_000_000);

    let p = par("{ pp: 4, vpp: 2 }").resolve(
        4,
        &preset("gpt3-6.7b").unwrap(),
        &TrainingConfig {
            global_batch_size: 8,
            ..TrainingConfig::default()
        },
    );
    assert_eq!(p.unwrap().schedule, PipelineSchedule::Interleaved);
}

#[test]
fn tp_must_divide_heads() {
    let m = preset("gpt3-13b").unwrap();
    let e = par("{ tp: 3 }").resolve(3, &m, &TrainingConfig::default()).unwrap_err();
    let msg = expect_divisibility(e, "parallel.tp");
    assert!(msg.contains("num_attention_heads=40"), "{msg}");
    assert!(msg.contains("valid tp: 1, 2, 4, 5, 8, 10, 20, 40"), "{msg}");
    // GQA: tp must divide the 8 kv heads of Llama-3 70B although it divides the 64 heads.
    let e = par("{ tp: 16 }")
        .resolve(16, &preset("llama3-70b").unwrap(), &TrainingConfig::default())
        .unwrap_err();
    let msg = expect_divisibility(e, "parallel.tp");
    assert!(
        msg.contains("num_key_value_heads=8") && msg.ends_with("valid tp: 1, 2, 4, 8"),
        "{msg}"
    );
}

#[test]
fn pp_must_divide_layers() {
    let m = preset("gpt3-13b").unwrap();
    let e = par("{ pp: 3 }").resolve(3, &m, &TrainingConfig::default()).unwrap_err();
    let msg = expect_divisibility(e, "parallel.pp");
    assert!(msg.contains("num_hidden_layers=40"), "{msg}");
    let e = par("{ pp: 4, vpp: 3 }").resolve(4, &m, &TrainingConfig::default()).unwrap_err();
    expect_divisibility(e, "parallel.vpp");
}

#[test]
fn global_batch_must_be_a_multiple_of_micro_batch_times_dp() {
    let m = preset("gpt3-13b").unwrap();
    let t = TrainingConfig {
        global_batch_size: 100,
        micro_batch_size: 2,
        ..TrainingConfig::default()
    };
    let e = par("{ tp: 2 }").resolve(128, &m, &t).unwrap_err();
    let msg = expect_divisibility(e, "training.global_batch_size");
    assert!(msg.contains("micro_batch_size*dp = 2*64 = 128"), "{msg}");
}

#[test]
fn ep_must_divide_experts() {
    let m = preset("mixtral-8x7b").unwrap();
    let e = par("{ ep: 3 }").resolve(6, &m, &TrainingConfig::default()).unwrap_err();
    let msg = expect_divisibility(e, "parallel.ep");
    assert!(msg.contains("num_experts=8"), "{msg}");
    // ep is carved out of dp*cp.
    let e = par("{ ep: 8, tp: 2, sequence_parallel: true }")
        .resolve(8, &m, &TrainingConfig::default())
        .unwrap_err();
    expect_divisibility(e, "parallel.ep");
    let p = par("{ ep: 8, tp: 2, sequence_parallel: true }")
        .resolve(16, &m, &TrainingConfig::default())
        .unwrap();
    assert_eq!((p.dp, p.expert_dp_group()), (8, 1));
    // Dense model with ep.
    let e = par("{ ep: 2 }")
        .resolve(2, &preset("gpt3-13b").unwrap(), &TrainingConfig::default())
        .unwrap_err();
    assert_eq!(e.field(), Some("parallel.ep"));
    // MoE with tp > 1 needs sequence parallelism (Megatron asserts it).
    let e = par("{ tp: 2 }").resolve(2, &m, &TrainingConfig::default()).unwrap_err();
    assert_eq!(e.field(), Some("parallel.sequence_parallel"));
}

#[test]
fn gpu_count_must_equal_the_product() {
    let m = preset("gpt3-175b").unwrap();
    let e = par("{ tp: 8, pp: 8, dp: 2 }")
        .resolve(100, &m, &TrainingConfig::default())
        .unwrap_err();
    match e {
        WorkloadError::GpuCount { gpus, product, .. } => assert_eq!((gpus, product), (100, 8 * 8 * 2)),
        e => panic!("{e:?}"),
    }
    let e = par("{ tp: 8, pp: 8 }").resolve(100, &m, &TrainingConfig::default()).unwrap_err();
    assert!(matches!(e, WorkloadError::GpuCount { product: 64, .. }), "{e:?}");
}

#[test]
fn cp_and_interleaving_checks() {
    let m = preset("gpt3-6.7b").unwrap();
    let t = TrainingConfig {
        seq_length: 2050,
        ..TrainingConfig::default()
    };
    let e = par("{ cp: 2 }").resolve(2, &m, &t).unwrap_err();
    expect_divisibility(e, "parallel.cp");
    let t = TrainingConfig {
        global_batch_size: 6,
        ..TrainingConfig::default()
    };
    let e = par("{ pp: 4, vpp: 2 }").resolve(4, &m, &t).unwrap_err();
    expect_divisibility(e, "parallel.vpp");
    let e = par("{ pp: 4, schedule: interleaved }")
        .resolve(4, &m, &TrainingConfig::default())
        .unwrap_err();
    assert_eq!(e.field(), Some("parallel.vpp"));
    let e = par("{ zero_stage: 4 }").resolve(1, &m, &TrainingConfig::default()).unwrap_err();
    assert_eq!(e.field(), Some("parallel.zero_stage"));
}
