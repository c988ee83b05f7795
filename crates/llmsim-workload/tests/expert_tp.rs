//! Expert tensor parallelism (`parallel.etp`, Megatron-Core `--expert-tensor-parallel-size`):
//! with `etp: 1` experts stay whole, the expert-parallel group runs across the TP ranks in
//! Megatron-Core's expert rank order (etp-ep-edp-pp), and the MoE layer needs no TP gather.

mod common;

use std::collections::BTreeSet;

use common::rank_sets;
use llmsim_core::CollectiveOp;
use llmsim_workload::dag::{Group, Layout};
use llmsim_workload::model::preset;
use llmsim_workload::ops::{layer_params, transformer_layer};
use llmsim_workload::{CommGroup, ModelConfig, OpSpecKind, ParallelConfig, TrainingConfig, WorkloadError};

fn plan(m: &ModelConfig, t: &TrainingConfig, gpus: u64, yaml: &str) -> Result<ParallelConfig, WorkloadError> {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    p.resolve(gpus, m, t)
}

/// Megatron-Core's expert groups for etp = 1: within a pipeline stage of `n` ranks (rank index
/// `r` in tp-cp-dp order), EP groups are `ep` consecutive ranks and expert-DP groups the ranks
/// with the same `r mod ep`.
#[test]
fn etp1_groups_follow_megatron_expert_rank_order() {
    let m = preset("qwen3-235b-a22b").unwrap();
    let t = TrainingConfig {
        global_batch_size: 256,
        ..TrainingConfig::default()
    };
    for (gpus, yaml) in [
        (256, "{ tp: 2, pp: 2, ep: 32, etp: 1, sequence_parallel: true }"),
        (128, "{ tp: 4, pp: 1, cp: 2, ep: 8, etp: 1, sequence_parallel: true }"),
        (64, "{ tp: 2, pp: 2, ep: 2, etp: 1, sequence_parallel: true }"),
    ] {
        let p = plan(&m, &t, gpus, yaml).unwrap();
        assert!(p.ep_spans_tp(), "{yaml}");
        let l = Layout::of(&p);
        let per_stage = l.tp * l.cp * l.dp;
        let ep = l.ep;
        for u in 0..l.units() {
            let stage = l.stage(u);
            let base = stage * per_stage;
            for lane in 0..l.tp {
                let r = l.rank(u, lane) - base;
                // The EP group: one set, every lane.
                let eps = rank_sets(&l, u, Group::Ep);
                assert_eq!(eps.len(), 1, "{yaml}");
                let want: BTreeSet<u32> = (r / ep * ep..(r / ep + 1) * ep).map(|x| x + base).collect();
                assert_eq!(eps[0], want, "{yaml}: EP group of rank {}", r + base);
                // The expert-DP group of this lane: ranks of the stage with the same r mod ep.
                let edp = rank_sets(&l, u, Group::ExpertDp);
                let mine: Vec<&BTreeSet<u32>> = edp.iter().filter(|s| s.contains(&(r + base))).collect();
                assert_eq!(mine.len(), 1, "{yaml}");
                let want: BTreeSet<u32> = (0..per_stage).filter(|x| x % ep == r % ep).map(|x| x + base).collect();
                assert_eq!(mine[0], &want, "{yaml}: expert-DP group of rank {}", r + base);
                assert_eq!(want.len() as u64, p.expert_dp_group(), "{yaml}");
            }
        }
    }
}

/// With etp = 1 the MoE layer has no TP collectives, dispatches the SP shard's tokens, and does
/// the same expert FLOPs per rank as with etp = tp; expert weights are whole (tp times larger).
#[test]
fn etp1_moe_layer_keeps_experts_whole() {
    let m = preset("mixtral-8x7b").unwrap();
    let t = TrainingConfig::default();
    let whole = plan(&m, &t, 16, "{ tp: 2, ep: 8, etp: 1, sequence_parallel: true }").unwrap();
    let sharded = plan(&m, &t, 32, "{ tp: 2, ep: 8, sequence_parallel: true }").unwrap();
    assert_eq!((whole.dp, sharded.dp), (8, 16));
    let lw = transformer_layer(&m, &t, &whole, 0);
    let ls = transformer_layer(&m, &t, &sharded, 0);
    let moe_tp = |l: &llmsim_workload::LayerOps| {
        l.iter()
            .filter(|o| o.name.starts_with("moe_tp_") && matches!(o.kind, OpSpecKind::Comm { .. }))
            .count()
    };
    assert_eq!(moe_tp(&lw), 0);
    assert_eq!(moe_tp(&ls), 4);
    let a2a = t.seq_length / 2 * m.num_experts_per_tok * m.hidden_size * 2;
    let ep_comms: Vec<(CollectiveOp, u64)> = lw
        .forward
        .iter()
        .filter_map(|o| match o.kind {
            OpSpecKind::Comm {
                op,
                group: CommGroup::Ep,
                bytes,
                ..
            } => Some((op, bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(ep_comms, vec![(CollectiveOp::AllToAll, a2a); 2]);
    let expert_flops =
        |l: &llmsim_workload::LayerOps| -> f64 { l.iter().filter(|o| o.name.starts_with("expert_fc")).map(|o| o.flops()).sum() };
    assert!(expert_flops(&lw) > 0.0);
    assert_eq!(expert_flops(&lw), expert_flops(&ls));
    // Expert weights: 8/8 = 1 local expert, whole vs halved.
    let (pw, ps) = (layer_params(&m, &whole, 0), layer_params(&m, &sharded, 0));
    assert_eq!(pw.expert, m.mlp_params(m.moe_intermediate_size));
    assert_eq!(pw.expert, 2 * ps.expert);
    assert_eq!(pw.dense, ps.dense);
}

#[test]
fn bad_etp_names_the_field() {
    let m = preset("mixtral-8x7b").unwrap();
    let t = TrainingConfig::default();
    let e = plan(&m, &t, 64, "{ tp: 4, ep: 8, etp: 2, sequence_parallel: true }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("parallel.etp") && e.contains("valid etp: 1, 4"), "{e}");
    // etp: 1 needs ep to be whole TP groups.
    let e = plan(&m, &t, 64, "{ tp: 4, ep: 2, etp: 1, sequence_parallel: true }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("parallel.ep") && e.contains("multiple of tp"), "{e}");
    // The default (etp = tp) keeps today's rule: ep divides dp·cp.
    let e = plan(&m, &t, 8, "{ tp: 2, ep: 8, sequence_parallel: true }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("parallel.ep") && e.contains("dp*cp"), "{e}");
}
