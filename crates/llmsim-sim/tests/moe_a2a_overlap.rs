//! `parallel.moe_a2a_overlap` (Megatron-Core `--overlap-moe-expert-parallel-comm`): the combined
//! 1F1B schedule runs each steady-state forward merged with the next backward, layer by layer,
//! with each pass's expert-parallel all-to-alls beside the other pass's computation.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, SimError, simulate};

/// A 4-layer Mixtral-shaped model on two single-GPU servers, its experts over both (EP 2): the
/// all-to-alls cross the network.
const MOE: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 4 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 1, ep: 2 }
cluster: { gpu: H100, gpus: 2, gpus_per_node: 1, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";

/// The same model over an interleaved pipeline (pp 2, vpp 2) of EP-2 stages.
const MOE_PP: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 8 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 2, vpp: 2, ep: 2 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 1, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";

fn run_with(yaml: &str, sets: &[&str], opts: &RunOptions) -> Result<Outcome, SimError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(yaml, &sets, Path::new(".")).map_err(|e| SimError::Scenario {
        field: "scenario".into(),
        message: e.to_string(),
    })?;
    simulate(&s, opts, &mut |_, _| {})
}

fn run(yaml: &str, sets: &[&str]) -> Outcome {
    run_with(yaml, sets, &RunOptions::default()).expect("runs")
}

const ON: &str = "parallel.moe_a2a_overlap=true";

#[test]
fn overlap_hides_the_all_to_alls_behind_the_other_micro_batch() {
    for yaml in [MOE, MOE_PP] {
        let off = run(yaml, &[]);
        let on = run(yaml, &[ON]);
        let (e_off, e_on) = (off.report.mean.exposed_ep_s, on.report.mean.exposed_ep_s);
        assert!(e_off > 0.0, "the all-to-alls cross the network");
        assert!(e_on < 0.6 * e_off, "exposed EP {e_on} s with overlap, {e_off} s without");
        assert!(
            on.report.iteration_time_s < off.report.iteration_time_s,
            "{} s with overlap, {} s without",
            on.report.iteration_time_s,
            off.report.iteration_time_s
        );
        // The same kernels run, as often.
        let count = |o: &Outcome| {
            let mut v: Vec<(String, &str, u64)> = o.ops.iter().map(|r| (r.op.clone(), r.pass, r.count)).collect();
            v.sort();
            v
        };
        assert_eq!(count(&off), count(&on));
    }
}

#[test]
fn with_free_communication_the_merged_order_costs_nothing() {
    // Without pipelining the compute stream runs the same kernels back to back in either
    // order: the iteration is the same, to rounding (on the GPU: a host that waits at each
    // dispatch waits at other kernels in the merged order).
    let opts = RunOptions {
        ideal_comm: true,
        ..RunOptions::default()
    };
    let free = "compute.host=null";
    let off = run_with(MOE, &[free], &opts).unwrap().report.iteration_time_s;
    let on = run_with(MOE, &[ON, free], &opts).unwrap().report.iteration_time_s;
    assert!(((on - off) / off).abs() < 1e-9, "{on} s with overlap, {off} s without");
}

#[test]
fn overlap_keeps_one_more_micro_batch_in_flight() {
    // Megatron-Core's interleaved schedule warms up one forward more with the overlap.
    let act = |o: Outcome| o.report.memory.expect("recorded").footprint.activations;
    let off = act(run(MOE_PP, &[]));
    let on = act(run(MOE_PP, &[ON]));
    assert!(on > off, "activations {on} B with overlap, {off} B without");
}

#[test]
fn a_merged_step_frees_the_backward_layer_by_layer() {
    // Without a pipeline every forward after the first runs merged with the previous micro-batch's
    // backward, which releases one layer's saved tensors as the forward adds one: the peak is one
    // micro-batch plus one layer (4 equal layers here), not two whole micro-batches.
    let act = |o: Outcome| o.report.memory.expect("recorded").footprint.activations;
    let off = act(run(MOE, &[]));
    let on = act(run(MOE, &[ON]));
    assert!(on > off, "activations {on} B with overlap, {off} B without");
    assert!(on - off < off / 4, "one layer more at most: {on} B with overlap, {off} B without");
}

#[test]
fn overlapped_all_to_alls_slow_the_compute_beside_them() {
    // The all-to-alls' kernels take SMs from the other micro-batch's computation, as the DP
    // stream's do (compute.overlap_slowdown, 1.189 by default): the overlapped run is slower
    // than with the slowdown off, by at most 18.9% of its compute. Without the overlap an
    // all-to-all runs alone on the compute stream and the slowdown does not touch this model (no
    // DP communication overlaps its backward).
    let t = |sets: &[&str]| run(MOE, sets).report.iteration_time_s;
    let (slow, fast) = (t(&[ON]), t(&[ON, "compute.overlap_slowdown=1.0"]));
    assert!(slow > fast, "{slow} s with the slowdown, {fast} s without");
    assert!(slow < fast * 1.189, "{slow} s with the slowdown, {fast} s without");
    assert_eq!(t(&[]).to_bits(), t(&["compute.overlap_slowdown=1.0"]).to_bits());
}

#[test]
fn what_megatron_refuses_is_refused_by_name() {
    let cases: [(&str, &[&str]); 3] = [
        // No expert parallelism: nothing to overlap.
        (MOE, &["parallel.ep=1"]),
        // Pipelining without the interleaved schedule.
        (MOE_PP, &["parallel.vpp=1"]),
        // Full recomputation.
        (MOE, &["training.recompute=full"]),
    ];
    for (yaml, sets) in cases {
        let sets: Vec<&str> = sets.iter().copied().chain([ON]).collect();
        let err = run_with(yaml, &sets, &RunOptions::default()).err().expect("refused");
        let msg = err.to_string();
        assert!(msg.contains("moe_a2a_overlap"), "{sets:?}: {msg}");
    }
}

#[test]
fn the_dispatch_sync_still_holds_the_host_under_overlap() {
    // The dispatcher's host read of the token counts (`compute.host.moe_sync`) makes the host
    // wait for the GPU before each forward dispatch, also when the dispatch runs beside the
    // other micro-batch's backward: the host time it exposes grows with the merged forwards
    // (all but the first), not only with the one forward that runs alone.
    let host = ["compute.host.op_us=1", "compute.host.linear_us=1", "compute.host.expert_gemm_us=0"];
    let cost = |gbs: &str| {
        let with = |sync: &str| {
            let sets: Vec<&str> = host.iter().copied().chain([ON, sync, gbs]).collect();
            run(MOE, &sets).report.mean.exposed_host_s
        };
        with("compute.host.moe_sync=true") - with("compute.host.moe_sync=false")
    };
    // 4 and 16 micro-batches per rank: 3 and 15 merged forwards.
    let (few, many) = (cost("training.global_batch_size=8"), cost("training.global_batch_size=32"));
    assert!(few > 0.0, "the sync exposes host time: {few} s");
    assert!(
        many > 1.5 * few,
        "exposed by the sync: {many} s with 16 micro-batches, {few} s with 4"
    );
}

const DELAY: &str = "parallel.delay_wgrad_compute=true";

#[test]
fn delayed_weight_gradients_let_the_backward_dispatch_start_earlier() {
    // `delay_wgrad_compute`: the experts' weight gradients run after the backward dispatch is
    // issued, beside it. Same kernels, as often; less all-to-all exposed; and with free
    // communication only the order changes.
    for yaml in [MOE, MOE_PP] {
        let on = run(yaml, &[ON]);
        let delayed = run(yaml, &[ON, DELAY]);
        let count = |o: &Outcome| {
            let mut v: Vec<(String, &str, u64)> = o.ops.iter().map(|r| (r.op.clone(), r.pass, r.count)).collect();
            v.sort();
            v
        };
        assert_eq!(count(&on), count(&delayed));
        let (e_on, e_delayed) = (on.report.mean.exposed_ep_s, delayed.report.mean.exposed_ep_s);
        assert!(e_delayed < e_on, "exposed EP {e_delayed} s delayed, {e_on} s not");
    }
    let opts = RunOptions {
        ideal_comm: true,
        ..RunOptions::default()
    };
    let free = "compute.host=null";
    let a = run_with(MOE, &[ON, free], &opts).unwrap().report.iteration_time_s;
    let b = run_with(MOE, &[ON, DELAY, free], &opts).unwrap().report.iteration_time_s;
    assert!(((a - b) / a).abs() < 1e-9, "{b} s delayed, {a} s not, with free communication");
}

#[test]
fn delayed_weight_gradients_need_the_overlap() {
    let err = run_with(MOE, &[DELAY], &RunOptions::default()).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("parallel.delay_wgrad_compute") && msg.contains("moe_a2a_overlap"),
        "{msg}"
    );
}
