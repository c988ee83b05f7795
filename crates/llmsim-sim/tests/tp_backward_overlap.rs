//! `parallel.tp_backward_overlap` (default on): a column-parallel layer's backward runs its TP
//! collectives beside the next GEMM, as Transformer Engine's `Linear` / `LayerNormLinear`
//! backward (`async_op=True`) and Megatron's `LinearWithGradAccumulationAndAsyncCommunication`
//! do: the input's re-gather beside the dgrad GEMM, the input gradient's reduce-scatter (or
//! all-reduce without sequence parallelism) beside the wgrad GEMM.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::dag::{DagNodeKind, Group, Stream};

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

/// (TP collectives on their own stream, TP collectives in all) of the run's programs.
fn tp_streams(o: &Outcome) -> (usize, usize) {
    let nodes = o.workload.stages.iter().flat_map(|p| p.nodes.iter());
    let tp: Vec<_> = nodes
        .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Tp, .. }))
        .collect();
    (tp.iter().filter(|n| n.stream == Stream::Free).count(), tp.len())
}

#[test]
fn the_backward_tp_collectives_run_beside_the_gemms() {
    for sp in ["true", "false"] {
        let sp_set = format!("parallel.sequence_parallel={sp}");
        let on = run(&[&sp_set]);
        let off = run(&[&sp_set, "parallel.tp_backward_overlap=false"]);
        let (free_on, all_on) = tp_streams(&on);
        let (free_off, all_off) = tp_streams(&off);
        // The same collectives either way; with the overlap, those of the column-parallel
        // backward (QKV and fc1: a re-gather and a reduce-scatter each with SP, an all-reduce
        // each without) leave the compute stream, per layer.
        assert_eq!(all_on, all_off);
        assert_eq!(free_off, 0, "sp {sp}");
        let per_layer = if sp == "true" { 4 } else { 2 };
        assert!(free_on >= 2 * per_layer, "sp {sp}: {free_on} async of {all_on}");
        // They hide behind the GEMMs: less exposed TP time and a shorter iteration, but the
        // GEMMs beside them run slower (`compute.overlap_slowdown`), so not all of it is saved.
        let (t_on, t_off) = (on.report.mean.exposed_tp_s, off.report.mean.exposed_tp_s);
        assert!(t_on < 0.9 * t_off, "sp {sp}: exposed TP {t_on} s with, {t_off} s without");
        let (i_on, i_off) = (on.report.iteration_time_s, off.report.iteration_time_s);
        assert!(i_on < i_off && i_off - i_on < t_off - t_on, "sp {sp}: {i_on} against {i_off} s");
        // Without the slowdown the saving is the whole hidden time's worth, or more of it.
        let free = run(&[&sp_set, "compute.overlap_slowdown=1.0"]);
        assert!(free.report.iteration_time_s < i_on, "sp {sp}");
    }
}

#[test]
fn userbuffers_and_dtensor_keep_their_own_tp_paths() {
    // `tp_comm_overlap` (userbuffers) fuses the collectives into the GEMMs: no async TP node.
    let ub = run(&["parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"]);
    assert_eq!(tp_streams(&ub).0, 0);
    // DTensor's TP collectives block either way.
    let dt = run(&["parallel.sequence_parallel=true", "parallel.tp_impl=dtensor"]);
    assert_eq!(tp_streams(&dt).0, 0);
}
