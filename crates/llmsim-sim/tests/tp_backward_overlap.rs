//! `parallel.tp_backward_overlap` (default on): a column-parallel layer's backward runs its TP
//! collectives beside the next GEMM, as Transformer Engine's `Linear` / `LayerNormLinear`
//! backward (`async_op=True`) and Megatron's `LinearWithGradAccumulationAndAsyncCommunication`
//! do: the input's re-gather beside the dgrad GEMM, the input gradient's reduce-scatter (or
//! all-reduce without sequence parallelism) beside the wgrad GEMM.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::dag::{DagNodeKind, Group};
use llmsim_workload::ops::OverlapMethod;

/// Two layers of Llama 3 8B on one 8-GPU server, TP 8: the TP collectives are a large part of
/// the layer.
const TP8: &str = "
model: { preset: llama3-8b, num_hidden_layers: 2 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 2 }
parallel: { tp: 8, pp: 1 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 8, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";

fn run(sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(TP8, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs")
}

/// TP collectives of the run's programs, as nodes of their own.
fn tp_nodes(o: &Outcome) -> usize {
    o.workload
        .stages
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Tp, .. }))
        .count()
}

/// GEMMs that carry an NCCL collective beside them, per micro-batch of one stage.
fn nccl_overlaps(o: &Outcome) -> usize {
    o.workload
        .segments
        .iter()
        .flat_map(|s| s.ops.iter())
        .filter(|op| op.overlap.is_some_and(|ov| ov.method == OverlapMethod::Nccl))
        .count()
}

#[test]
fn the_backward_tp_collectives_run_beside_the_gemms() {
    for sp in ["true", "false"] {
        let sp_set = format!("parallel.sequence_parallel={sp}");
        let on = run(&[&sp_set]);
        let off = run(&[&sp_set, "parallel.tp_backward_overlap=false"]);
        // With the overlap the column-parallel backward's collectives ride on their GEMMs
        // instead of running on their own: QKV, fc1 and the output layer (the layers share one
        // template), a re-gather on the dgrad GEMM and a reduce-scatter on the wgrad GEMM each
        // with SP, an all-reduce on the wgrad GEMM without.
        assert_eq!(nccl_overlaps(&off), 0);
        let per_column = if sp == "true" { 2 } else { 1 };
        assert_eq!(nccl_overlaps(&on), 3 * per_column, "sp {sp}");
        assert!(
            tp_nodes(&on) < tp_nodes(&off),
            "sp {sp}: {} against {}",
            tp_nodes(&on),
            tp_nodes(&off)
        );
        // They hide behind the GEMMs: less exposed TP time and a shorter iteration, but the
        // GEMMs beside them run slower (`compute.overlap_slowdown`), so not all of it is saved.
        let (t_on, t_off) = (on.report.mean.exposed_tp_s, off.report.mean.exposed_tp_s);
        assert!(t_on < 0.9 * t_off, "sp {sp}: exposed TP {t_on} s with, {t_off} s without");
        let (i_on, i_off) = (on.report.iteration_time_s, off.report.iteration_time_s);
        assert!(i_on < i_off && i_off - i_on < t_off - t_on, "sp {sp}: {i_on} against {i_off} s");
        let free = run(&[&sp_set, "compute.overlap_slowdown=1.0"]);
        assert!(free.report.iteration_time_s < i_on, "sp {sp}");
    }
}

#[test]
fn userbuffers_and_dtensor_keep_their_own_tp_paths() {
    // `tp_comm_overlap` (userbuffers) overlaps by its own methods.
    let ub = run(&["parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"]);
    assert_eq!(nccl_overlaps(&ub), 0);
    // DTensor's TP collectives block either way.
    let dt = run(&["parallel.sequence_parallel=true", "parallel.tp_impl=dtensor"]);
    assert_eq!(nccl_overlaps(&dt), 0);
    // A TP group across servers keeps its collectives on their own (no NVLink timer for them).
    let across = run(&["parallel.sequence_parallel=true", "cluster.gpus_per_node=4"]);
    assert_eq!(nccl_overlaps(&across), 0);
    assert!(across.report.iteration_time_s > 0.0);
}
