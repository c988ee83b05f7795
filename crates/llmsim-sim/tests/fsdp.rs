//! ZeRO-3 / FSDP traffic and multi-iteration (steady-state) runs.

use std::path::Path;

use llmsim_ccl::CollectiveOp;
use llmsim_sim::{Outcome, RunOptions, Scenario, resolve, simulate};
use llmsim_workload::dag::{DagNodeKind, Group, Phase, Stream};
use llmsim_workload::megatron::param_bytes_per_param;
use llmsim_workload::ops;

/// A small dense model on 2 pipeline stages x 4 data-parallel ranks; DP groups span servers.
const BASE: &str = "
model: { hidden_size: 2048, num_hidden_layers: 8, num_attention_heads: 16, intermediate_size: 8192, vocab_size: 32000, gated_mlp: false }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 2, grad_bucket_size: 60000000 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 2, topology: { kind: flat } }
network: { backend: analytical }
output: { flows: false }
";

fn scenario(sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(BASE, &sets, Path::new(".")).expect("valid scenario")
}

fn run(s: &Scenario) -> Outcome {
    simulate(s, &RunOptions::default(), &mut |_, _| {}).expect("simulates")
}

/// Bytes of DP-group collectives of `op` in stage `st`'s program (dense and expert groups).
fn dp_bytes(o: &Outcome, st: usize, op: CollectiveOp) -> u64 {
    o.workload.stages[st]
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            DagNodeKind::CommColl { op: o2, group, bytes } if o2 == op && matches!(group, Group::Dp | Group::ExpertDp) => Some(bytes),
            _ => None,
        })
        .sum()
}

#[test]
fn zero3_gathers_params_and_scatters_grads_per_unit() {
    for (reshard, gbs) in [(true, 4u64), (true, 16), (false, 4), (false, 16)] {
        let s = scenario(&[
            "parallel.zero_stage=3",
            &format!("parallel.reshard_after_forward={reshard}"),
            &format!("training.global_batch_size={gbs}"),
        ]);
        let r = resolve(&s).unwrap();
        let mb = r.parallel.micro_batches(&r.training);
        let o = run(&s);
        let param_b = param_bytes_per_param(r.training.dtype);
        let grad_b = r.training.grad_dtype().bytes();
        // Reshard after forward: a gather before every forward and every backward, a
        // reduce-scatter after every backward. Without: one gather and one reduce-scatter a step.
        let (gathers, scatters) = if reshard { (2 * mb, mb) } else { (1, 1) };
        for st in 0..r.parallel.pp {
            let params = ops::stage_params(&r.model, &r.parallel, st);
            let what = format!("reshard={reshard} micro-batches={mb} stage {st}");
            assert_eq!(
                dp_bytes(&o, st as usize, CollectiveOp::AllGather),
                gathers * params * param_b,
                "{what}"
            );
            assert_eq!(
                dp_bytes(&o, st as usize, CollectiveOp::ReduceScatter),
                scatters * params * grad_b,
                "{what}"
            );
            assert_eq!(dp_bytes(&o, st as usize, CollectiveOp::AllReduce), 0, "{what}");
            // Every FSDP collective is asynchronous, on the DP stream.
            assert!(
                o.workload.stages[st as usize]
                    .nodes
                    .iter()
                    .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Dp, .. }))
                    .all(|n| n.stream == Stream::Dp)
            );
        }
        // Every node ran: every collective finished (a stall is an error).
        let total: u64 = o.workload.stages.iter().map(|p| p.len() as u64).sum();
        assert_eq!(o.report.nodes_executed, total);
        assert!(o.report.iteration_time_s > 0.0);
    }
}

/// FSDP2's defaults without `reshard_after_forward` (`fsdp_sync_every_microbatch`): every
/// backward reduce-scatters the unit's gradients and frees its parameters, so the next forward
/// gathers again; the compute stream waits for a backward's last reduce-scatter.
#[test]
fn fsdp2_without_no_sync_scatters_every_micro_batch() {
    let sets = |pp: u64, every: bool| {
        scenario(&[
            "parallel.zero_stage=3",
            "parallel.reshard_after_forward=false",
            &format!("parallel.fsdp_sync_every_microbatch={every}"),
            &format!("parallel.pp={pp}"),
            "training.global_batch_size=32",
        ])
    };
    for pp in [1u64, 2] {
        let s = sets(pp, true);
        let r = resolve(&s).unwrap();
        let mb = r.parallel.micro_batches(&r.training);
        assert!(mb >= 4);
        let o = run(&s);
        let param_b = param_bytes_per_param(r.training.dtype);
        let grad_b = r.training.grad_dtype().bytes();
        for st in 0..pp {
            let params = ops::stage_params(&r.model, &r.parallel, st);
            let gathered = dp_bytes(&o, st as usize, CollectiveOp::AllGather);
            assert_eq!(
                dp_bytes(&o, st as usize, CollectiveOp::ReduceScatter),
                mb * params * grad_b,
                "pp {pp} stage {st}"
            );
            if pp == 1 {
                // Forward, backward, forward...: a gather before every forward, none in backward.
                assert_eq!(gathered, mb * params * param_b, "stage {st}");
            } else {
                // With forwards in flight, a backward after another backward gathers again.
                assert!(
                    gathered >= mb * params * param_b && gathered <= 2 * mb * params * param_b,
                    "stage {st}"
                );
            }
            // Some forward or backward compute waits for a reduce-scatter (the end of a
            // backward; the optimizer step's wait does not count).
            let prog = &o.workload.stages[st as usize];
            let is_rs = |i: u32| {
                matches!(
                    prog.nodes[i as usize].kind,
                    DagNodeKind::CommColl {
                        op: CollectiveOp::ReduceScatter,
                        ..
                    }
                )
            };
            let waits = (0..prog.len() as u32)
                .filter(|&i| {
                    let n = &prog.nodes[i as usize];
                    n.stream == Stream::Compute && matches!(n.phase, Phase::Forward | Phase::Backward)
                })
                .filter(|&i| prog.deps(i).iter().any(|&d| is_rs(d)))
                .count();
            assert!(waits >= 1, "pp {pp} stage {st}: no compute waits for a reduce-scatter");
        }
        let total: u64 = o.workload.stages.iter().map(|p| p.len() as u64).sum();
        assert_eq!(o.report.nodes_executed, total);
        // More traffic and a wait: never faster than gathering once and scattering once.
        let once = run(&sets(pp, false));
        assert!(
            o.report.iteration_time_s >= once.report.iteration_time_s,
            "pp {pp}: {} < {}",
            o.report.iteration_time_s,
            once.report.iteration_time_s
        );
        assert!(o.report.collectives > once.report.collectives);
        // Memory: one unit's unsharded gradient at a time instead of the whole stage's.
        let grads = |every: bool| {
            let mut v = vec!["parallel.grad_bucket_size=1".to_string()];
            v.push(format!("parallel.pp={pp}"));
            v.extend(
                [
                    "parallel.zero_stage=3",
                    "parallel.reshard_after_forward=false",
                    "training.global_batch_size=32",
                ]
                .map(String::from),
            );
            v.push(format!("parallel.fsdp_sync_every_microbatch={every}"));
            let s = Scenario::from_yaml(BASE, &v, Path::new(".")).unwrap();
            resolve(&s).unwrap().memory.gradients
        };
        assert!(grads(true) < grads(false), "pp {pp}");
    }
}

/// `training.expert_grad_reduce_in_fp32: false` reduces the routed experts' gradients in the
/// weights' dtype (bf16) while the rest stays fp32.
#[test]
fn expert_gradients_can_reduce_in_bf16() {
    let moe = "
model: { hidden_size: 1024, num_hidden_layers: 4, num_attention_heads: 8, intermediate_size: 4096, vocab_size: 32000, num_experts: 8, moe_intermediate_size: 1024, num_experts_per_tok: 2 }
training: { seq_length: 1024, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 1, ep: 2, zero_stage: 3 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 4, topology: { kind: flat } }
network: { backend: analytical }
output: { flows: false }
";
    let bytes = |sets: &[&str], group: Group| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let s = Scenario::from_yaml(moe, &sets, Path::new(".")).unwrap();
        let o = run(&s);
        o.workload.stages[0]
            .nodes
            .iter()
            .filter_map(|n| match n.kind {
                DagNodeKind::CommColl {
                    op: CollectiveOp::ReduceScatter,
                    group: g,
                    bytes,
                } if g == group => Some(bytes),
                _ => None,
            })
            .sum::<u64>()
    };
    let fp32 = bytes(&[], Group::ExpertDp);
    let bf16 = bytes(&["training.expert_grad_reduce_in_fp32=false"], Group::ExpertDp);
    assert!(fp32 > 0);
    assert_eq!(bf16 * 2, fp32);
    assert_eq!(
        bytes(&["training.expert_grad_reduce_in_fp32=false"], Group::Dp),
        bytes(&[], Group::Dp)
    );
}

#[test]
fn zero3_costs_dp_time_that_zero2_does_not_have() {
    let z2 = run(&scenario(&["parallel.zero_stage=2", "parallel.overlap_grad_reduce=true"]));
    let z3 = run(&scenario(&["parallel.zero_stage=3"]));
    let keep = run(&scenario(&["parallel.zero_stage=3", "parallel.reshard_after_forward=false"]));
    assert!(z3.report.collectives > keep.report.collectives);
    assert!(keep.report.collectives >= z2.report.collectives);
    // Reshard after forward gathers every unit twice per micro-batch: it cannot be faster than
    // keeping the parameters gathered.
    assert!(z3.report.iteration_time_s >= keep.report.iteration_time_s);
    for o in [&z2, &z3, &keep] {
        let m = &o.report.mean;
        eprintln!(
            "{}: iteration {:.4} s, exposed DP {:.4} s, compute {:.4} s, params {} B",
            o.report.parallel,
            o.report.iteration_time_s,
            m.exposed_dp_s,
            m.compute_s,
            o.report.memory.as_ref().unwrap().footprint.parameters
        );
    }
    // Memory: ZeRO-3 shards the parameters, plus two gathered units (one layer each here);
    // without resharding the stage stays gathered.
    let unit = |sets: &[&str]| {
        let mut v = vec!["parallel.grad_bucket_size=1"];
        v.extend_from_slice(sets);
        llmsim_sim::resolve(&scenario(&v)).unwrap().memory.parameters
    };
    let z2 = unit(&["parallel.zero_stage=2"]);
    assert!(unit(&["parallel.zero_stage=3"]) < z2);
    assert_eq!(unit(&["parallel.zero_stage=3", "parallel.reshard_after_forward=false"]), z2);
}

#[test]
fn steady_state_is_deterministic_and_no_slower_than_the_first_iteration() {
    let sets = [
        "parallel.use_distributed_optimizer=true",
        "parallel.overlap_grad_reduce=true",
        "parallel.overlap_param_gather=true",
    ];
    let one = run(&scenario(&sets));
    let mut s3 = sets.to_vec();
    s3.push("training.iterations=3");
    let a = run(&scenario(&s3));
    let b = run(&scenario(&s3));
    let r = &a.report;
    assert_eq!(r.iterations, 3);
    assert_eq!(r.iteration_times_s.len(), 3);
    assert_eq!(r.iteration_times_s, b.report.iteration_times_s);
    assert_eq!(r.iteration_time_s, b.report.iteration_time_s);
    assert_eq!(r.nodes_executed, 3 * one.report.nodes_executed);
    // Iteration 1 of a longer run is the single-iteration run (no contention on this backend).
    assert_eq!(r.first_iteration_time_s, Some(one.report.iteration_time_s));
    let steady = (r.iteration_times_s[1] + r.iteration_times_s[2]) / 2.0;
    assert!((r.iteration_time_s - steady).abs() < 1e-9, "{} vs {steady}", r.iteration_time_s);

    assert!(r.iteration_time_s <= one.report.iteration_time_s);
    // The summary says which figure it is.
    assert!(r.render().contains("steady state"));
    // One iteration: the report's JSON carries no multi-iteration fields.
    let j = serde_json::to_value(&one.report).unwrap();
    assert!(j.get("iterations").is_none() && j.get("first_iteration_time_s").is_none());
}

#[test]
fn multi_iteration_runs_every_plan() {
    for sets in [
        vec!["parallel.zero_stage=3", "training.iterations=2"],
        vec![
            "parallel.zero_stage=3",
            "parallel.reshard_after_forward=false",
            "training.iterations=2",
        ],
        vec!["parallel.use_distributed_optimizer=true", "training.iterations=2"],
        vec!["training.iterations=2"],
        vec!["parallel.pp=2", "parallel.vpp=2", "parallel.zero_stage=3", "training.iterations=2"],
    ] {
        let o = run(&scenario(&sets));
        let total: u64 = o.workload.stages.iter().map(|p| p.len() as u64).sum();
        assert_eq!(o.report.nodes_executed, total, "{sets:?}");
        assert_eq!(o.report.iterations, 2, "{sets:?}");
        assert!(o.report.iteration_time_s > 0.0, "{sets:?}");
    }
}

#[test]
fn zero3_shards_over_the_context_parallel_ranks_too() {
    // dp 1, cp 4 on 4 GPUs: the data-parallel group (dp x cp) has 4 ranks, so ZeRO-3 gathers and
    // reduce-scatters per unit over it (Megatron-FSDP's dp_cp group, TorchTitan's dp_shard_cp),
    // as with dp 4, cp 1.
    let sets = [
        "parallel.zero_stage=3",
        "parallel.pp=1",
        "parallel.cp=4",
        "cluster.gpus=4",
        "training.global_batch_size=4",
    ];
    let s = scenario(&sets);
    let r = resolve(&s).unwrap();
    assert_eq!((r.parallel.dp, r.parallel.cp), (1, 4));
    assert!(r.parallel.fsdp());
    let o = run(&s);
    assert!(dp_bytes(&o, 0, CollectiveOp::AllGather) > 0, "FSDP gathers over the cp ranks");
    assert!(dp_bytes(&o, 0, CollectiveOp::ReduceScatter) > 0);
}

#[test]
fn per_micro_batch_sync_without_fsdp_is_refused_by_name() {
    let s = scenario(&["parallel.fsdp_sync_every_microbatch=true", "parallel.zero_stage=1"]);
    let e = resolve(&s).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("parallel.fsdp_sync_every_microbatch") && e.contains("zero_stage"), "{e}");
}

/// Copy-out nodes (`fsdp_copy_out`) of stage `st`: (count, bytes), each right after a gather.
fn copy_outs(o: &Outcome, st: usize) -> (usize, f64) {
    let prog = &o.workload.stages[st];
    let mut n = 0;
    let mut bytes = 0.0;
    for (i, node) in prog.nodes.iter().enumerate() {
        let DagNodeKind::Comp { segment } = node.kind else { continue };
        let seg = &o.workload.segments[segment as usize];
        if seg.ops.first().is_none_or(|op| op.name != "fsdp_copy_out") {
            continue;
        }
        assert_eq!(node.stream, Stream::Compute);
        // It waits for the all-gather of its unit, of the same size.
        let deps = prog.deps(i as u32);
        assert_eq!(deps.len(), 1);
        let DagNodeKind::CommColl { op, bytes: gathered, .. } = prog.nodes[deps[0] as usize].kind else {
            panic!("a copy-out after {:?}", prog.nodes[deps[0] as usize].kind)
        };
        assert_eq!(op, CollectiveOp::AllGather);
        let llmsim_workload::OpSpecKind::Compute { bytes: b, .. } = seg.ops[0].kind else {
            panic!()
        };
        // Read from the gather buffer and written into the unsharded parameters.
        assert_eq!(b, 2.0 * gathered as f64);
        n += 1;
        bytes += b;
    }
    (n, bytes)
}

#[test]
fn fsdp2_copies_each_gather_out_on_the_compute_stream() {
    for reshard in [true, false] {
        let sets = [
            "parallel.zero_stage=3",
            if reshard {
                "parallel.reshard_after_forward=true"
            } else {
                "parallel.reshard_after_forward=false"
            },
        ];
        let megatron = run(&scenario(&sets));
        let fsdp2 = run(&scenario(&[sets[0], sets[1], "parallel.fsdp_impl=fsdp2"]));
        for st in 0..2 {
            let gathers = fsdp2.workload.stages[st]
                .nodes
                .iter()
                .filter(|n| {
                    matches!(
                        n.kind,
                        DagNodeKind::CommColl {
                            op: CollectiveOp::AllGather,
                            ..
                        }
                    )
                })
                .count();
            let (n, bytes) = copy_outs(&fsdp2, st);
            assert_eq!(n, gathers, "reshard {reshard} stage {st}: one copy-out per gather");
            assert_eq!(bytes, 2.0 * dp_bytes(&fsdp2, st, CollectiveOp::AllGather) as f64);
            assert_eq!(copy_outs(&megatron, st).0, 0);
        }
        // The copies take compute-stream time: the iteration is longer.
        assert!(
            fsdp2.report.iteration_time_s > megatron.report.iteration_time_s,
            "reshard {reshard}: {} against {} s",
            fsdp2.report.iteration_time_s,
            megatron.report.iteration_time_s
        );
    }
}
