//! Megatron's DDP passes over the gradient buffer (`parallel.grad_scaling`,
//! `parallel.check_for_nan_in_grad`): before each data-parallel bucket's collective the compute
//! stream takes the bucket's L2 norm (the NaN check) and scales it in place by `1 / dp`
//! (`param_and_grad_buffer.py` `start_grad_sync`); with per-token loss the whole buffer is
//! scaled once after the reduction instead (`finalize_model_grads.py`).

use std::path::Path;

use llmsim_ccl::CollectiveOp;
use llmsim_sim::{Outcome, RunOptions, Scenario, resolve, simulate};
use llmsim_workload::OpSpecKind;
use llmsim_workload::dag::{DagNodeKind, Group, Stream};
use llmsim_workload::ops::{stage_param_split, stage_params};

/// Two layers of Llama 3 8B over two 8-GPU servers, data parallel 16, gradients reduced in
/// buckets during the last backward.
const DP16: &str = "
model: { preset: llama3-8b, num_hidden_layers: 2 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 1, pp: 1, use_distributed_optimizer: true, overlap_grad_reduce: true, grad_bucket_size: 100000000 }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";

fn scenario(base: &str, sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(base, &sets, Path::new(".")).expect("valid scenario")
}

fn run(base: &str, sets: &[&str]) -> Outcome {
    simulate(&scenario(base, sets), &RunOptions::default(), &mut |_, _| {}).expect("runs")
}

/// Bytes of every op named `name` in the program of stage 0, counted once per node that runs it.
fn op_bytes(o: &Outcome, name: &str) -> f64 {
    let segs = &o.workload.segments;
    o.workload.stages[0]
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            DagNodeKind::Comp { segment } => Some(&segs[segment as usize]),
            _ => None,
        })
        .flat_map(|s| s.ops.iter())
        .filter(|op| op.name == name)
        .map(|op| match op.kind {
            OpSpecKind::Compute { bytes, .. } => bytes,
            _ => 0.0,
        })
        .sum()
}

/// Time in one iteration of stage 0's ops named `name`, in seconds.
fn op_time_s(o: &Outcome, name: &str) -> f64 {
    o.ops
        .iter()
        .filter(|r| r.stage == 0 && r.op == name)
        .map(|r| r.time_us * r.count as f64 * 1e-6)
        .sum()
}

#[test]
fn each_bucket_is_checked_and_scaled_before_its_collective() {
    let on = run(DP16, &[]);
    let r = resolve(&scenario(DP16, &[])).expect("resolves");
    let n = stage_params(&r.model, &r.parallel, 0) as f64;
    let g = r.training.grad_dtype().bytes() as f64;
    assert_eq!(g, 4.0, "Megatron reduces BF16 training's gradients in FP32");
    // Every gradient read once by the NaN check, read and written once by the scaling.
    assert_eq!(op_bytes(&on, "grad_nan_check"), n * g);
    assert_eq!(op_bytes(&on, "grad_scale"), 2.0 * n * g);
    // Each data-parallel reduce-scatter waits for a pass on the compute stream just before it.
    let prog = &on.workload.stages[0];
    let mut colls = 0;
    for (i, node) in prog.nodes.iter().enumerate() {
        if !matches!(
            node.kind,
            DagNodeKind::CommColl {
                group: Group::Dp,
                op: CollectiveOp::ReduceScatter,
                ..
            }
        ) {
            continue;
        }
        colls += 1;
        let deps = prog.deps(i as u32);
        assert_eq!(deps.len(), 1);
        let pass = &prog.nodes[deps[0] as usize];
        assert_eq!(pass.stream, Stream::Compute);
        let DagNodeKind::Comp { segment } = pass.kind else {
            panic!("a collective after {:?}", pass.kind)
        };
        let names: Vec<&str> = on.workload.segments[segment as usize].ops.iter().map(|o| o.name).collect();
        assert_eq!(names, ["grad_nan_check", "grad_scale"]);
        // The check reads the norm on the host.
        assert!(on.workload.segments[segment as usize].ops[0].host_sync);
    }
    assert!(colls > 1, "{colls} buckets");

    // Without either pass the iteration is shorter, by no more than the passes' own time. (With
    // the host model on, the check's host synchronization also exposes the issue of the ops after
    // it, which this bound does not count: compare with kernels issued for free.)
    let on = run(DP16, &["compute.host=null"]);
    let off = run(
        DP16,
        &[
            "compute.host=null",
            "parallel.grad_scaling=none",
            "parallel.check_for_nan_in_grad=false",
        ],
    );
    assert_eq!(op_bytes(&off, "grad_nan_check") + op_bytes(&off, "grad_scale"), 0.0);
    let passes = op_time_s(&on, "grad_nan_check") + op_time_s(&on, "grad_scale");
    assert!(passes > 0.0);
    let (i_on, i_off) = (on.report.iteration_time_s, off.report.iteration_time_s);
    assert!(i_on > i_off, "{i_on} s against {i_off} s");
    assert!(
        i_on - i_off <= passes * (1.0 + 1e-9),
        "{} s more for {passes} s of passes",
        i_on - i_off
    );
}

#[test]
fn averaging_in_the_collective_leaves_only_the_experts_scaled() {
    // A dense model: nothing to scale.
    let dense = run(DP16, &["parallel.grad_scaling=in_collective"]);
    assert_eq!(op_bytes(&dense, "grad_scale"), 0.0);
    assert!(op_bytes(&dense, "grad_nan_check") > 0.0);

    // MoE with EP 8 over DP 16: the routed experts reduce over an expert-DP group of 2, so their
    // buckets are scaled by 2 / 16 before the averaging collective; the dense parameters are not.
    let moe = "
model: { preset: mixtral-8x7b, num_hidden_layers: 2 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 1, pp: 1, ep: 8, use_distributed_optimizer: true, overlap_grad_reduce: true, grad_scaling: in_collective }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: flat } }
network: { backend: flow }
output: { flows: false }
";
    let o = run(moe, &[]);
    let r = resolve(&scenario(moe, &[])).expect("resolves");
    let (t, p) = (&r.training, &r.parallel);
    assert_eq!(p.expert_dp_group(), 2);
    let sp = stage_param_split(&r.model, p, 0);
    assert!(sp.expert > 0 && sp.dense > 0);
    let g = t.expert_grad_dtype().bytes() as f64;
    assert_eq!(op_bytes(&o, "grad_scale"), 2.0 * sp.expert as f64 * g);
    // The default scales both.
    let before = run(moe, &["parallel.grad_scaling=before_reduce"]);
    let gd = t.grad_dtype().bytes() as f64;
    assert_eq!(op_bytes(&before, "grad_scale"), 2.0 * (sp.expert as f64 * g + sp.dense as f64 * gd));
}

#[test]
fn per_token_loss_scales_the_whole_buffer_once_before_the_optimizer() {
    let o = run(DP16, &["parallel.grad_scaling=per_token"]);
    let r = resolve(&scenario(DP16, &[])).expect("resolves");
    let n = stage_params(&r.model, &r.parallel, 0) as f64;
    assert_eq!(op_bytes(&o, "grad_scale"), 0.0);
    assert_eq!(
        op_bytes(&o, "grad_scale_per_token"),
        2.0 * n * r.training.grad_dtype().bytes() as f64
    );
    let seg = o
        .workload
        .segments
        .iter()
        .find(|s| s.ops.iter().any(|op| op.name == "grad_scale_per_token"))
        .expect("an optimizer segment");
    assert_eq!(seg.ops[0].name, "grad_scale_per_token");
    assert!(seg.ops.iter().any(|op| op.name == "optimizer_step"));
}

#[test]
fn one_replica_and_fsdp_run_no_scaling() {
    // One data-parallel rank: the factor is 1, Megatron skips the multiply; the check still runs.
    let one = run(DP16, &["cluster.gpus=8", "parallel.tp=8", "training.global_batch_size=2"]);
    assert_eq!(op_bytes(&one, "grad_scale"), 0.0);
    assert!(op_bytes(&one, "grad_nan_check") > 0.0);
    // FSDP takes another path: neither pass.
    let fsdp = run(DP16, &["parallel.zero_stage=3"]);
    assert_eq!(op_bytes(&fsdp, "grad_scale") + op_bytes(&fsdp, "grad_nan_check"), 0.0);
    let fsdp = run(DP16, &["parallel.zero_stage=3", "parallel.grad_scaling=per_token"]);
    assert_eq!(op_bytes(&fsdp, "grad_scale_per_token"), 0.0);
}

#[test]
fn a_wrong_grad_scaling_names_the_field_and_the_choices() {
    let sets = vec!["parallel.grad_scaling=average".to_string()];
    let err = match Scenario::from_yaml(DP16, &sets, Path::new(".")) {
        Ok(_) => panic!("accepted grad_scaling=average"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("grad_scaling"), "{err}");
    assert!(err.contains("in_collective") && err.contains("per_token"), "{err}");
}
