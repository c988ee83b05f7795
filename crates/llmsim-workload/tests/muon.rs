//! Muon (`training.optimizer: muon | dist_muon`): Newton-Schulz GEMMs on every weight matrix but
//! the vocabulary's, Adam on those, the layer-wise sharding of `dist_muon` in time, traffic and
//! memory, and the settings Megatron-Core refuses.

mod common;
use common::plan;

use llmsim_compute::{DType, KernelShape, OpClass};
use llmsim_core::CollectiveOp;
use llmsim_workload::dag::{DagNodeKind, Group, Phase};
use llmsim_workload::memory::footprint;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{muon_matrices, stage_optimizer_step, stage_param_split, stage_vocab_params};
use llmsim_workload::{OpSpec, OpSpecKind, OptimizerKind, ParallelConfig, TrainingConfig, megatron};

fn training(o: OptimizerKind) -> TrainingConfig {
    TrainingConfig {
        seq_length: 2048,
        micro_batch_size: 1,
        global_batch_size: 16,
        optimizer: o,
        ..TrainingConfig::default()
    }
}

fn flops(ops: &[OpSpec], prefix: &str) -> f64 {
    ops.iter()
        .filter(|o| o.name.starts_with(prefix))
        .map(|o| match o.kind {
            OpSpecKind::Compute { flops, .. } => flops,
            _ => 0.0,
        })
        .sum()
}

#[test]
fn newton_schulz_runs_on_every_weight_matrix_of_the_stage() {
    // Llama 3 8B at TP 2: per layer QKV [4096, 3072] as its parts Q [4096, 2048], K and V
    // [4096, 512] (Megatron-Core's `muon_split_qkv`), output [2048, 4096], gated fc1
    // [4096, 14336], fc2 [7168, 4096] per rank; 16 layers on each of 2 stages.
    let m = preset("llama3-8b").unwrap();
    let t = training(OptimizerKind::Muon);
    let p = plan(&m, &t, 8, "{ tp: 2, pp: 2 }");
    let mats = muon_matrices(&m, &t, &p, 0);
    let mut shapes: Vec<(u64, u64, u64)> = mats.iter().map(|w| (w.rows, w.cols, w.count)).collect();
    shapes.sort();
    assert_eq!(
        shapes,
        vec![
            (2048, 4096, 16),
            (4096, 512, 32),
            (4096, 2048, 16),
            (4096, 14336, 16),
            (7168, 4096, 16)
        ]
    );
    // The matrices and the vocabulary (Adam's) are the stage's parameters, less its norms.
    let in_matrices: u64 = mats.iter().map(|w| w.rows * w.cols * w.count).sum();
    let split = stage_param_split(&m, &p, 0);
    let norms = split.total() - in_matrices - stage_vocab_params(&m, &p, 0);
    assert_eq!(norms, 16 * 2 * 4096, "two norm vectors a layer");
    // 5 quintic iterations, three GEMMs each on the matrix with its short side a:
    // 2a²b + 2a³ + 2a²b FLOPs.
    let want: f64 = mats
        .iter()
        .map(|w| {
            let (a, b) = (w.rows.min(w.cols) as f64, w.rows.max(w.cols) as f64);
            5.0 * w.count as f64 * (4.0 * a * a * b + 2.0 * a * a * a)
        })
        .sum();
    let step = stage_optimizer_step(&m, &t, &p, 0);
    assert!((flops(&step, "muon_ns") - want).abs() < 1e-9 * want);
    for o in step.iter().filter(|o| o.name.starts_with("muon_ns")) {
        assert_eq!(o.dtype, Some(DType::Bf16), "medium precision: BF16 tensor cores");
        assert!(matches!(o.kernel, Some(KernelShape::Gemm(_))));
        assert!(matches!(o.kind, OpSpecKind::Compute { class: OpClass::Gemm, .. }));
    }
    // More steps, proportionally more.
    let t7 = TrainingConfig {
        muon_ns_steps: 7,
        ..t.clone()
    };
    let f7 = flops(&stage_optimizer_step(&m, &t7, &p, 0), "muon_ns");
    assert!((f7 / want - 7.0 / 5.0).abs() < 1e-12);
    // Adam has none of it.
    let adam = training(OptimizerKind::Adam);
    assert_eq!(
        flops(&stage_optimizer_step(&m, &adam, &plan(&m, &adam, 8, "{ tp: 2, pp: 2 }"), 0), "muon"),
        0.0
    );
}

#[test]
fn dist_muon_shares_the_matrices_and_gathers_the_parameters() {
    // 16 GPUs, DP 8 at TP 2: each rank orthogonalizes about an eighth of the matrices.
    let m = preset("llama3-8b").unwrap();
    let full = training(OptimizerKind::Muon);
    let shard = training(OptimizerKind::DistMuon);
    let p = plan(&m, &full, 16, "{ tp: 2, pp: 1 }");
    let f_full = flops(&stage_optimizer_step(&m, &full, &p, 0), "muon_ns");
    let f_shard = flops(&stage_optimizer_step(&m, &shard, &p, 0), "muon_ns");
    // 32 matrices of each shape (64 of the K and V parts' shape) over 8 ranks: an eighth.
    assert!((f_shard / f_full - 1.0 / 8.0).abs() < 1e-12, "{}", f_shard / f_full);
    // The parameters are all-gathered over the data-parallel group after the step, only with
    // the layer-wise sharding; the gradients are all-reduced either way.
    let gathers = |t: &TrainingConfig| {
        let w = megatron::generate(&m, t, &p).unwrap();
        let prog = &w.stages[0];
        // The optimizer step's node, and the DP all-gathers after it.
        let opt = prog.nodes.iter().position(|n| n.phase == Phase::Optimizer).unwrap();
        let after_opt: Vec<_> = prog.nodes[opt..]
            .iter()
            .filter_map(|n| match n.kind {
                DagNodeKind::CommColl {
                    op,
                    group: Group::Dp,
                    bytes,
                } => Some((op, bytes)),
                _ => None,
            })
            .collect();
        let reductions = prog
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.kind,
                    DagNodeKind::CommColl {
                        op: CollectiveOp::AllReduce,
                        group: Group::Dp,
                        ..
                    }
                )
            })
            .count();
        assert!(reductions > 0);
        after_opt
    };
    assert!(gathers(&full).is_empty());
    let g = gathers(&shard);
    assert!(!g.is_empty() && g.iter().all(|(op, _)| *op == CollectiveOp::AllGather));
    // BF16 parameters of the whole stage.
    let bytes: u64 = g.iter().map(|(_, b)| b).sum();
    assert_eq!(bytes, 2 * stage_param_split(&m, &p, 0).total());
}

#[test]
fn muon_keeps_one_moment_and_dist_muon_shards_it() {
    let m = preset("llama3-8b").unwrap();
    let adam = training(OptimizerKind::Adam);
    let p = plan(&m, &adam, 16, "{ tp: 2, pp: 1 }");
    let states = |o: OptimizerKind| footprint(&m, &training(o), &p).optimizer_states;
    let split = stage_param_split(&m, &p, 0);
    let vocab = stage_vocab_params(&m, &p, 0);
    // Adam: 12 bytes a parameter; Muon: the momentum and the main copy (8) on the matrices,
    // Adam's 12 on the vocabulary.
    assert_eq!(states(OptimizerKind::Adam), 12 * split.total());
    assert_eq!(states(OptimizerKind::Muon), 8 * split.total() + 4 * vocab);
    let dist = states(OptimizerKind::DistMuon);
    assert_eq!(dist, (8 * split.total()).div_ceil(8) + (4 * vocab).div_ceil(8));
}

#[test]
fn settings_megatron_refuses_name_their_field() {
    let m = preset("llama3-8b").unwrap();
    let t = training(OptimizerKind::DistMuon);
    let err = |t: &TrainingConfig, yaml: &str| {
        let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
        p.resolve(16, &m, t).unwrap_err().to_string()
    };
    let e = err(&t, "{ tp: 2, use_distributed_optimizer: true }");
    assert!(e.contains("training.optimizer") && e.contains("dist optimizer"), "{e}");
    let e = err(&t, "{ tp: 2, zero_stage: 3 }");
    assert!(e.contains("training.optimizer"), "{e}");
    let fp16 = TrainingConfig {
        dtype: DType::Fp16,
        ..t.clone()
    };
    assert!(err(&fp16, "{ tp: 2 }").contains("training.optimizer"));
    let zero = TrainingConfig {
        muon_ns_steps: 0,
        ..t.clone()
    };
    assert!(err(&zero, "{ tp: 2 }").contains("training.muon_ns_steps"));
    let e = serde_yaml_ng::from_str::<TrainingConfig>("optimizer: lion")
        .unwrap_err()
        .to_string();
    assert!(e.contains("dist_muon"), "{e}");
}
