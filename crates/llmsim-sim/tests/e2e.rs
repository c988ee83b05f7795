//! End-to-end: scenario text in, report out.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, SimError, simulate};
use llmsim_workload::dag::{DagNodeKind, Group};
use llmsim_workload::ops;

fn scenario(yaml: &str, sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(yaml, &sets, Path::new(".")).expect("valid scenario")
}

fn run(s: &Scenario, opts: RunOptions) -> Outcome {
    simulate(s, &opts, &mut |_, _| {}).expect("simulates")
}

fn err(yaml: &str) -> SimError {
    let s = Scenario::from_yaml(yaml, &[], Path::new(".")).expect("parses");
    match simulate(&s, &RunOptions::default(), &mut |_, _| {}) {
        Ok(_) => panic!("expected an error for\n{yaml}"),
        Err(e) => e,
    }
}

/// A small dense model with a tiny vocabulary, so every pipeline stage does the same work.
const UNIFORM: &str = "
model: { hidden_size: 4096, num_hidden_layers: 8, num_attention_heads: 32, intermediate_size: 16384, vocab_size: 128, gated_mlp: false }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 4 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 4, topology: { kind: flat } }
output: { flows: false }
";

#[test]
fn one_f_one_b_bubble_matches_the_formula_with_free_communication() {
    for (pp, mb) in [(4u64, 8u64), (4, 4), (2, 8)] {
        let s = scenario(
            UNIFORM,
            &[
                &format!("parallel.pp={pp}"),
                &format!("cluster.gpus={pp}"),
                &format!("cluster.gpus_per_node={pp}"),
                &format!("training.global_batch_size={mb}"),
            ],
        );
        let o = run(
            &s,
            RunOptions {
                ideal_comm: true,
                ..Default::default()
            },
        );
        // Pipeline span = iteration minus the optimizer step (the same on every stage).
        let opt_s: f64 = o
            .ops
            .iter()
            .filter(|r| r.stage == 0 && r.segment.starts_with("optimizer"))
            .map(|r| r.time_us * r.count as f64 * 1e-6)
            .sum();
        let span = o.report.iteration_time_s - opt_s;
        let st = &o.report.stages[1].breakdown;
        let busy = st.compute_s - opt_s;
        let bubble = 1.0 - busy / span;
        let expected = (pp - 1) as f64 / (mb + pp - 1) as f64;
        assert!(
            (bubble - expected).abs() < 0.01,
            "pp={pp} m={mb}: bubble {bubble:.4}, formula (pp-1)/(m+pp-1) = {expected:.4}"
        );
    }
}

#[test]
fn interleaving_shrinks_the_bubble() {
    let base = scenario(UNIFORM, &[]);
    let inter = scenario(UNIFORM, &["parallel.vpp=2"]);
    let ideal = RunOptions {
        ideal_comm: true,
        ..Default::default()
    };
    let a = run(&base, ideal.clone()).report.iteration_time_s;
    let b = run(&inter, ideal).report.iteration_time_s;
    assert!(b < a, "interleaved {b} should beat 1F1B {a}");
}

const DP: &str = "
model: gpt3-6.7b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 64 }
parallel: { tp: 4, pp: 2, use_distributed_optimizer: true, overlap_grad_reduce: true, sequence_parallel: true }
cluster: { gpu: H100, gpus: 64, topology: { kind: spine-leaf, hosts_per_leaf: 16, oversubscription: 2.0 } }
";

#[test]
fn folding_replicas_on_the_analytical_backend_is_exact() {
    let s = scenario(DP, &["network.backend=analytical"]);
    let folded = run(&s, RunOptions::default());
    let full = run(
        &s,
        RunOptions {
            no_fold: true,
            ..Default::default()
        },
    );
    assert!(!folded.report.symmetry.is_empty());
    assert!(full.report.symmetry.is_empty());
    assert_eq!(folded.report.iteration_time_s, full.report.iteration_time_s);
    assert!(folded.report.nodes_executed * 4 < full.report.nodes_executed);
}

/// Folding stays exact when the DP group is one server and its overlapped collectives slow the
/// compute beside them (`compute.overlap_slowdown`): a folded group of one unit ends its
/// collective in closed form, and must leave the in-flight count then (it used to stay in
/// flight, slowing every later kernel: 3.92 s against 3.33 s on an 8-GPU Llama 2 7B).
#[test]
fn folding_is_exact_with_overlapped_dp_inside_a_server() {
    let yaml = "
model: { preset: llama3-8b, num_hidden_layers: 4 }
training: { seq_length: 4096, global_batch_size: 32 }
parallel: { tp: 1, use_distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 8 }
network: { backend: analytical }
output: { flows: false }
";
    let s = scenario(yaml, &[]);
    let folded = run(&s, RunOptions::default());
    let full = run(
        &s,
        RunOptions {
            no_fold: true,
            ..Default::default()
        },
    );
    assert!(!folded.report.symmetry.is_empty());
    assert_eq!(folded.report.iteration_time_s, full.report.iteration_time_s);
    let flow = run(&scenario(yaml, &["network.backend=flow"]), RunOptions::default());
    assert_eq!(folded.report.iteration_time_s, flow.report.iteration_time_s);
}

#[test]
fn contention_makes_flow_no_faster_than_analytical_and_runs_are_deterministic() {
    let a = run(&scenario(DP, &["network.backend=analytical"]), RunOptions::default());
    let f1 = run(&scenario(DP, &[]), RunOptions::default());
    let f2 = run(&scenario(DP, &[]), RunOptions::default());
    assert!(f1.report.iteration_time_s >= a.report.iteration_time_s * 0.999);
    assert_eq!(f1.report.iteration_time_s, f2.report.iteration_time_s);
    assert_eq!(f1.engine.flows.len(), f2.engine.flows.len());
    let j = |o: &Outcome| {
        let mut v = serde_json::to_value(&o.report).unwrap();
        v.as_object_mut().unwrap().remove("sim_wall_s");
        v
    };
    assert_eq!(j(&f1), j(&f2));
    // Every transfer the run recorded finished, bytes as submitted.
    assert_eq!(f1.report.net.submitted, f1.report.net.completed);
    let flow_bytes: u64 = f1.engine.flows.iter().map(|f| f.bytes).sum();
    assert_eq!(flow_bytes, f1.report.net.bytes_delivered);
    // flows.csv ids: one per transfer, in submission order (the network's transfer ids are
    // reused once a collective ends).
    let mut ids: Vec<u64> = f1.engine.flows.iter().map(|f| f.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..f1.engine.flows.len() as u64).collect::<Vec<_>>());
}

#[test]
fn dp_gradient_bytes_equal_the_stage_parameters() {
    let s = scenario(DP, &[]);
    let o = run(&s, RunOptions::default());
    let r = llmsim_sim::resolve(&s).unwrap();
    for (stage, prog) in o.workload.stages.iter().enumerate() {
        let reduced: u64 = prog
            .nodes
            .iter()
            .filter_map(|n| match n.kind {
                DagNodeKind::CommColl {
                    op: llmsim_ccl::CollectiveOp::ReduceScatter,
                    group: Group::Dp,
                    bytes,
                } => Some(bytes),
                _ => None,
            })
            .sum();
        let expected = ops::stage_params(&r.model, &r.parallel, stage as u64) * r.training.grad_dtype().bytes();
        assert_eq!(reduced, expected, "stage {stage}");
    }
}

#[test]
fn more_bandwidth_never_hurts_and_tp_traffic_shows() {
    let slow = run(&scenario(DP, &["cluster.topology.nic.bandwidth=100Gbps"]), RunOptions::default());
    let fast = run(&scenario(DP, &["cluster.topology.nic.bandwidth=800Gbps"]), RunOptions::default());
    assert!(fast.report.iteration_time_s <= slow.report.iteration_time_s);
    assert!(slow.report.mean.exposed_tp_s > 0.0);
    assert!(slow.report.mfu.is_some_and(|m| m > 0.05 && m < 1.0));
}

#[test]
fn moe_runs_with_expert_parallel_all_to_all() {
    let s = scenario(
        "
model: { preset: mixtral-8x7b, num_hidden_layers: 4 }
training: { seq_length: 2048, global_batch_size: 16 }
parallel: { tp: 2, pp: 2, ep: 4, sequence_parallel: true, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 32, gpus_per_node: 4 }
",
        &[],
    );
    let o = run(&s, RunOptions::default());
    assert!(o.report.mean.exposed_ep_s > 0.0, "EP all-to-all crosses servers and takes time");
    let a2a = o.workload.stages[0]
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Ep, .. }))
        .count();
    assert!(a2a > 0);
}

/// `parallel.etp: 1`: the expert-parallel all-to-all runs across the TP ranks (32 ranks over
/// 8 servers here), every transfer finishes with its bytes, the analytical fold stays exact, and
/// the expert gradients are reduced over the expert-DP group's bytes.
#[test]
fn moe_with_whole_experts_runs_across_tp_ranks() {
    let yaml = "
model: { preset: mixtral-8x7b, num_hidden_layers: 2 }
training: { seq_length: 2048, global_batch_size: 16 }
parallel: { tp: 2, pp: 2, ep: 8, etp: 1, sequence_parallel: true, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 32, gpus_per_node: 4 }
";
    let f = run(&scenario(yaml, &[]), RunOptions::default());
    assert!(f.report.mean.exposed_ep_s > 0.0);
    assert_eq!(f.report.net.submitted, f.report.net.completed);
    let flow_bytes: u64 = f.engine.flows.iter().map(|x| x.bytes).sum();
    assert_eq!(flow_bytes, f.report.net.bytes_delivered);
    // No TP gather around the experts.
    let tp_moe = f.workload.stages[0]
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Tp, .. }))
        .count();
    let s = scenario(yaml, &["parallel.etp=2", "parallel.ep=4"]);
    let g = run(&s, RunOptions::default());
    let tp_sharded = g.workload.stages[0]
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Tp, .. }))
        .count();
    assert!(tp_moe < tp_sharded, "{tp_moe} vs {tp_sharded}");
    // The analytical backend folds replicas exactly with spanning EP groups too.
    let s = scenario(yaml, &["network.backend=analytical"]);
    let folded = run(&s, RunOptions::default());
    let full = run(
        &s,
        RunOptions {
            no_fold: true,
            ..Default::default()
        },
    );
    assert_eq!(folded.report.iteration_time_s, full.report.iteration_time_s);
}

/// A 2-layer Llama 3 8B in FP8 on one 8-GPU B200 server (the MXFP8 tests below).
const LLAMA_FP8_B200: &str = "
model: { preset: llama3-8b, num_hidden_layers: 2 }
training: { seq_length: 4096, global_batch_size: 8, dtype: fp8 }
parallel: { tp: 1 }
cluster: { gpu: B200, gpus: 8, gpus_per_node: 8 }
network: { backend: analytical }
output: { flows: false }
";

/// MXFP8 runs on Blackwell (casts a little larger than delayed scaling's), and is refused on
/// Hopper with the field named.
#[test]
fn mxfp8_is_blackwell_only() {
    let yaml = LLAMA_FP8_B200;
    let delayed = run(&scenario(yaml, &[]), RunOptions::default());
    let mx = run(&scenario(yaml, &["training.fp8_recipe=mxfp8"]), RunOptions::default());
    assert!(mx.report.iteration_time_s > delayed.report.iteration_time_s);
    assert!(mx.report.iteration_time_s < delayed.report.iteration_time_s * 1.05);
    let s = scenario(yaml, &["training.fp8_recipe=mxfp8", "cluster.gpu=H100"]);
    let e = simulate(&s, &RunOptions::default(), &mut |_, _| {})
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("training.fp8_recipe") && e.contains("H100"), "{e}");
}

/// FP8 block scaling (`fp8_recipe: blockwise`) runs on Hopper and Blackwell, slower than
/// per-tensor delayed scaling on Hopper (block-scaled GEMMs, a cast for every GEMM input) and
/// faster than BF16; on Blackwell it is emulated with MXFP8, so it times as MXFP8 without
/// `cudnn_norm` (the norm writes BF16 in both). An A100 refuses it, naming the field.
#[test]
fn blockwise_fp8_runs_on_hopper_and_blackwell() {
    let yaml = LLAMA_FP8_B200;
    let h100 = "cluster.gpu=H100";
    let step = |sets: &[&str]| run(&scenario(yaml, sets), RunOptions::default()).report.iteration_time_s;
    let block = "training.fp8_recipe=blockwise";
    let (delayed, blockwise, bf16) = (step(&[h100]), step(&[h100, block]), step(&[h100, "training.dtype=bf16"]));
    assert!(delayed < blockwise && blockwise < bf16, "{delayed} {blockwise} {bf16}");
    assert_eq!(step(&[block]), step(&["training.fp8_recipe=mxfp8"]));
    let s = scenario(yaml, &[block, "cluster.gpu=A100"]);
    let e = simulate(&s, &RunOptions::default(), &mut |_, _| {})
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("training.fp8_recipe") && e.contains("A100"), "{e}");
}

/// Per-tensor FP8 (delayed or current scaling) needs FP8 tensor cores: on an A100 or a V100 it is
/// refused, naming `training.dtype` and the fix (Transformer Engine asserts compute capability
/// 8.9; it never falls back to BF16), where it once ran silently at the BF16 peak.
#[test]
fn fp8_is_refused_on_gpus_without_fp8_tensor_cores() {
    for gpu in ["A100", "A100-40GB", "V100"] {
        for recipe in ["delayed", "current"] {
            let g = format!("cluster.gpu={gpu}");
            let r = format!("training.fp8_recipe={recipe}");
            let s = scenario(LLAMA_FP8_B200, &[&g, &r]);
            let e = simulate(&s, &RunOptions::default(), &mut |_, _| {})
                .err()
                .expect("refused")
                .to_string();
            let fix = if gpu == "V100" { "use fp16" } else { "use bf16" };
            assert!(e.contains("training.dtype") && e.contains(gpu) && e.contains(fix), "{e}");
        }
    }
    // H100 runs it; BF16 on the A100 runs.
    run(&scenario(LLAMA_FP8_B200, &["cluster.gpu=H100"]), RunOptions::default());
    run(
        &scenario(LLAMA_FP8_B200, &["cluster.gpu=A100", "training.dtype=bf16"]),
        RunOptions::default(),
    );
}

/// BF16 needs BF16 tensor cores: on a V100 (compute capability 7.0) it used to run silently at
/// the FP16 peak; now it is refused, naming the field and the fix. FP16 runs there.
#[test]
fn bf16_is_refused_on_gpus_without_bf16_tensor_cores() {
    let s = scenario(LLAMA_FP8_B200, &["cluster.gpu=V100", "training.dtype=bf16"]);
    let e = simulate(&s, &RunOptions::default(), &mut |_, _| {})
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("training.dtype") && e.contains("V100") && e.contains("use fp16"), "{e}");
    for gpu in ["A100", "H100", "MI300X"] {
        let g = format!("cluster.gpu={gpu}");
        run(&scenario(LLAMA_FP8_B200, &[&g, "training.dtype=bf16"]), RunOptions::default());
    }
    run(
        &scenario(LLAMA_FP8_B200, &["cluster.gpu=V100", "training.dtype=fp16"]),
        RunOptions::default(),
    );
}

/// MXFP8 GEMMs are timed apart from per-tensor FP8: an efficiency table's `mxfp8` row slows
/// an mxfp8-recipe run and leaves a delayed-scaling one alone; without one, both recipes' GEMMs
/// take the `fp8` row. `dtype: mxfp8` itself is no training dtype: refused, naming the field.
#[test]
fn mxfp8_gemms_take_their_own_efficiency_row() {
    let yaml = LLAMA_FP8_B200;
    let dir = std::env::temp_dir().join(format!("llmsim-mxfp8-eff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let table = |name: &str, rows: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("gpu,class,compute_eff,memory_eff,launch_us,dtype\n{rows}")).unwrap();
        format!("compute.efficiency={}", path.display())
    };
    let fp8_only = table("fp8.csv", "B200,gemm,0.6,0.8,2.0,fp8\n");
    let with_mx = table("mx.csv", "B200,gemm,0.6,0.8,2.0,fp8\nB200,gemm,0.4,0.8,2.0,mxfp8\n");
    let step = |sets: &[&str]| run(&scenario(yaml, sets), RunOptions::default()).report.iteration_time_s;
    let mx = "training.fp8_recipe=mxfp8";
    // Without an mxfp8 row the mxfp8 run's GEMMs take the fp8 row: the shipped table and a user one.
    let (shipped, fp8_row, mx_row) = (step(&[mx]), step(&[mx, &fp8_only]), step(&[mx, &with_mx]));
    assert!(fp8_row > shipped, "{fp8_row} {shipped}");
    assert!(mx_row > fp8_row, "{mx_row} {fp8_row}");
    assert_eq!(step(&[&fp8_only]), step(&[&with_mx]));
    std::fs::remove_dir_all(&dir).unwrap();

    let Err(e) = Scenario::from_yaml(&yaml.replace("dtype: fp8", "dtype: mxfp8"), &[], Path::new(".")) else {
        panic!("dtype: mxfp8 accepted");
    };
    let e = e.to_string();
    assert!(e.contains("training.dtype") && e.contains("mxfp8"), "{e}");
}

#[test]
fn errors_name_the_field() {
    let cases = [
        ("model: gpt3-13b\nparallel: { tp: 3 }\ncluster: { gpus: 24 }\n", "parallel.tp"),
        ("model: gpt3-13b\nparallel: { pp: 3 }\ncluster: { gpus: 24 }\n", "parallel.pp"),
        ("model: gpt3-13b\nparallel: { tp: 8, dp: 4 }\ncluster: { gpus: 16 }\n", "gpus"),
        (
            "model: gpt3-13b\ntraining: { global_batch_size: 10 }\nparallel: { tp: 8 }\ncluster: { gpus: 32 }\n",
            "global_batch_size",
        ),
        ("model: mixtral-8x7b\nparallel: { tp: 8, ep: 3 }\ncluster: { gpus: 24 }\n", "ep"),
        ("model: gpt3-13b\ncluster: { gpus: 8, gpu: Z100 }\n", "Z100"),
        ("model: gpt3-175b\ncluster: { gpus: 8 }\n", "memory"),
    ];
    for (yaml, needle) in cases {
        let m = err(yaml).to_string();
        assert!(m.to_lowercase().contains(&needle.to_lowercase()), "{needle:?} not in {m:?}");
    }
}

/// Per-layer gradient buckets reduce every gradient byte once, as one bucket per MLP does: on a
/// ring (whose bytes are linear in the collective's size) the data-parallel flows carry the
/// same bytes.
#[test]
fn dlrm_per_layer_buckets_move_the_same_bytes_as_per_mlp_buckets() {
    let yaml = "dlrm: { batch_size_per_gpu: 256 }\ncluster: { gpus: 16, gpus_per_node: 1, topology: { kind: flat } }\ncollectives: { algo: ring }\n";
    let per_mlp = run(&scenario(yaml, &[]), RunOptions::default());
    let per_layer = run(&scenario(yaml, &["dlrm.grad_bucket_size=1"]), RunOptions::default());
    let dp = |o: &Outcome| o.engine.flows.iter().filter(|f| f.kind == "dp").map(|f| f.bytes).sum::<u64>();
    assert!(dp(&per_mlp) > 0);
    assert_eq!(dp(&per_layer), dp(&per_mlp));
    // More collectives: the per-layer run has more data-parallel flows.
    let n = |o: &Outcome| o.engine.flows.iter().filter(|f| f.kind == "dp").count();
    assert!(n(&per_layer) > n(&per_mlp), "{} vs {}", n(&per_layer), n(&per_mlp));
}

#[test]
fn dlrm_runs_and_its_all_to_all_crosses_the_network() {
    let s = scenario("dlrm: { batch_size_per_gpu: 256 }\ncluster: { gpus: 16 }\n", &[]);
    let o = run(&s, RunOptions::default());
    assert_eq!(o.report.sample_unit, "samples");
    assert_eq!(o.report.global_batch_size, Some(256 * 16));
    let d = llmsim_workload::dlrm::DlrmConfig {
        batch_size_per_gpu: 256,
        ..Default::default()
    };
    // Each all-to-all moves every rank's send buffer minus its own slice; two of them.
    let per_rank = d.all_to_all_bytes(16);
    let a2a: u64 = o.engine.flows.iter().filter(|f| f.kind == "dp").map(|f| f.bytes).sum();
    assert!(a2a >= 2 * 16 * (per_rank - per_rank / 16) * 99 / 100, "{a2a}");
    let both = Scenario::from_yaml("model: gpt3-13b\ndlrm: {}\ncluster: { gpus: 8 }\n", &[], Path::new("."));
    assert!(both.unwrap_err().to_string().contains("exactly one"));
}

#[test]
fn the_packet_backend_runs_scenarios_with_each_congestion_control() {
    let yaml = "
model: { hidden_size: 256, num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: 1024, vocab_size: 128, gated_mlp: false }
training: { seq_length: 512, micro_batch_size: 1, global_batch_size: 4 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 2, topology: { kind: rail-fat-tree, nic: { bandwidth: 100Gbps } } }
output: { flows: false }
";
    let ana = run(&scenario(yaml, &["network.backend=analytical"]), RunOptions::default());
    assert!(ana.engine.packet.is_none(), "no packet details without packets");
    let base = ana.report.iteration_time_s;
    for cc in ["dcqcn", "hpcc", "timely", "dctcp"] {
        let o = run(
            &scenario(yaml, &["network.backend=packet", &format!("network.cc={cc}")]),
            RunOptions::default(),
        );
        let it = o.report.iteration_time_s;
        assert_eq!(o.report.backend, "packet");
        // Packets, headers and ACKs only add time to the contention-free alpha-beta model.
        assert!(it >= base, "{cc}: packet {it} s < analytical {base} s");
        assert!(it < base * 2.0, "{cc}: packet {it} s is far off analytical {base} s");
        // Per-port details: every port that sent something, host NICs included; NVLink stays
        // analytical, so no NVLink port ever appears; the PFC log holds the pauses counted.
        let p = o.engine.packet.as_ref().expect("packet details");
        assert!(
            p.ports
                .iter()
                .all(|q| q.tx_bytes > 0 && q.max_bytes >= q.p99_bytes && q.p99_bytes >= q.p50_bytes)
        );
        assert!(p.ports.iter().all(|q| o.topo.link(q.link).kind != llmsim_topo::LinkKind::NvLink));
        assert!(
            p.ports.iter().any(|q| o.topo.link(q.link).src.0 < o.topo.num_hosts()),
            "{cc}: a host NIC sent"
        );
        assert_eq!(p.pfc.iter().filter(|e| e.pause).count() as u64, o.report.net.pfc_pauses);
    }
    let bad = Scenario::from_yaml("model: gpt3-13b\nnetwork: { backend: packet, cc: reno }\n", &[], Path::new("."));
    let m = bad.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(m.contains("network") && m.contains("dcqcn"), "{m}");
}

#[test]
fn the_packet_backend_runs_scenarios_with_each_load_balancing_policy() {
    let yaml = "
model: { hidden_size: 256, num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: 1024, vocab_size: 128, gated_mlp: false }
training: { seq_length: 512, micro_batch_size: 1, global_batch_size: 4 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 2, topology: { kind: rail-fat-tree, nic: { bandwidth: 100Gbps } } }
output: { flows: false }
";
    let base = run(&scenario(yaml, &["network.backend=analytical"]), RunOptions::default())
        .report
        .iteration_time_s;
    for lb in ["ecmp", "spray", "flowlet", "adaptive"] {
        let o = run(
            &scenario(yaml, &["network.backend=packet", &format!("network.load_balance={lb}")]),
            RunOptions::default(),
        );
        let it = o.report.iteration_time_s;
        assert!(it >= base && it < base * 2.0, "{lb}: packet {it} s against analytical {base} s");
    }
    let bad = Scenario::from_yaml(
        "model: gpt3-13b\nnetwork: { backend: packet, load_balance: random }\n",
        &[],
        Path::new("."),
    );
    let m = bad.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(m.contains("load_balance") && m.contains("spray"), "{m}");
}

/// A small tensor-parallel scenario on 8 GPUs of one node, for the custom GPU tests.
const CUSTOM_BASE: &str = "
model: { hidden_size: 4096, num_hidden_layers: 4, num_attention_heads: 32, intermediate_size: 16384, vocab_size: 32000 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 4 }
cluster: { gpus: 8, gpus_per_node: 8, topology: { kind: flat } }
network: { backend: analytical }
output: { flows: false }
";

#[test]
fn a_custom_gpu_equal_to_h100_gives_h100_times() {
    let h100 = run(&scenario(CUSTOM_BASE, &["cluster.gpu=H100"]), RunOptions::default());
    // Only a base, then every field spelled out with H100's figures. `base` stays in the second
    // so that the shipped H100 efficiency rows apply (without one a custom GPU takes the `*` rows).
    let full = "{ name: MyH100, base: H100, fp32_tflops: 66.9, tf32_tflops: 494.7, bf16_tflops: 989.4, \
                fp16_tflops: 989.4, fp8_tflops: 1978.9, hbm_bandwidth: 3.35TB/s, memory: 81559MiB, \
                nvlink_bandwidth: 450GB/s, sm_count: 132, arch: hopper }";
    for decl in ["{ name: MyH100, base: H100 }", full] {
        let s = scenario(CUSTOM_BASE, &[&format!("cluster.gpu={decl}")]);
        let o = run(&s, RunOptions::default());
        assert_eq!(o.report.iteration_time_s, h100.report.iteration_time_s, "{decl}");
        assert_eq!(o.report.gpu, "MyH100");
    }
    // A faster custom GPU is faster.
    let fast = scenario(
        CUSTOM_BASE,
        &["cluster.gpu={ name: H100x2, base: H100, bf16_tflops: 1978.8, fp16_tflops: 1978.8 }"],
    );
    assert!(run(&fast, RunOptions::default()).report.iteration_time_s < h100.report.iteration_time_s);
    // A power limit at the base's 700 W TDP changes nothing; below it the step is slower, and by
    // at most the compute rate's fraction (memory-bound ops and communication keep their times).
    let capped = |limit: &str| {
        let s = scenario(
            CUSTOM_BASE,
            &[&format!("cluster.gpu={{ name: H100-capped, base: H100, power_limit: {limit} }}")],
        );
        run(&s, RunOptions::default()).report
    };
    let at = |limit: &str| capped(limit).iteration_time_s;
    assert_eq!(at("700W"), h100.report.iteration_time_s);
    // The text report names a limit that slows the GPU, and only then.
    assert!(capped("500W").render().contains("x H100-capped (power limit 500W of its 700W TDP"));
    let at_tdp = capped("700W").render();
    assert!(at_tdp.contains("x H100-capped") && !at_tdp.contains("power limit"), "{at_tdp}");
    let (t500, t300) = (at("500W"), at("300W"));
    let f500 = llmsim_compute::power::compute_rate_fraction(llmsim_core::Power::from_watts(500), llmsim_core::Power::from_watts(700));
    assert!(t500 > h100.report.iteration_time_s && t500 <= h100.report.iteration_time_s / f500 * (1.0 + 1e-9));
    assert!(t300 > t500);
}

#[test]
fn a_custom_gpu_with_a_missing_field_names_it() {
    let no_sm = "{ name: X, fp32_tflops: 60, bf16_tflops: 1000, hbm_bandwidth: 4TB/s, memory: 96GiB, \
                 nvlink_bandwidth: 450GB/s, arch: hopper }";
    for (decl, needle) in [
        (no_sm, "cluster.gpu.sm_count: required for a custom GPU without `base`"),
        ("{ base: H100 }", "cluster.gpu.name: required"),
        ("{ name: H100, base: H100 }", "cluster.gpu.name:"),
        ("{ name: X, base: Z100 }", "cluster.gpu.base: unknown GPU `Z100`"),
        ("{ name: X, base: H100, arch: volta }", "cluster.gpu.arch:"),
        (
            "{ name: X, base: H100, power_limit: 0W }",
            "cluster.gpu.power_limit: must be above 0 W",
        ),
        (
            "{ name: X, base: H100, power_limit: 100W }",
            "cluster.gpu.power_limit: 100W is below a quarter",
        ),
        (
            "{ name: X, base: H20, power_limit: 300W }",
            "cluster.gpu.power_limit: needs the board's `tdp`",
        ),
        (
            "{ name: X, base: H100, tdp: 9kW }",
            "cluster.gpu.tdp: must be above 0 W and at most 3000W",
        ),
    ] {
        let s = scenario(CUSTOM_BASE, &[&format!("cluster.gpu={decl}")]);
        let m = match simulate(&s, &RunOptions::default(), &mut |_, _| {}) {
            Ok(_) => panic!("expected an error for {decl}"),
            Err(e) => e.to_string(),
        };
        assert!(m.contains(needle), "{needle:?} not in {m:?}");
    }
    // A typo in a key is a parse error that names the key.
    let e = Scenario::from_yaml(
        CUSTOM_BASE,
        &["cluster.gpu={ name: X, base: H100, sm_cout: 10 }".into()],
        Path::new("."),
    )
    .unwrap_err();
    assert!(e.to_string().contains("sm_cout"), "{e}");
}

/// `training.dtype: fp4` (NVFP4, also spelled `nvfp4`) needs FP4 tensor cores: Hopper is rejected
/// with an error naming the field; on GB300 the layers' GEMMs run at its dense FP4 peak.
#[test]
fn nvfp4_needs_blackwell_and_runs_its_gemms_at_the_fp4_peak() {
    let yaml = |gpu: &str, dtype: &str| {
        format!(
            "model: llama3-8b\ntraining: {{ seq_length: 2048, micro_batch_size: 1, global_batch_size: 8, dtype: {dtype} }}\n\
             parallel: {{ tp: 1 }}\ncluster: {{ gpu: {gpu}, gpus: 8, gpus_per_node: 8, topology: {{ kind: flat }} }}\n\
             output: {{ flows: false }}\n"
        )
    };
    for gpu in ["H100", "H200", "A100"] {
        match err(&yaml(gpu, "nvfp4")) {
            SimError::Scenario { field, message } => {
                assert_eq!(field, "training.dtype");
                assert!(message.contains("fp4") && message.contains(gpu), "{message}");
            }
            other => panic!("{gpu}: {other}"),
        }
    }
    let r = llmsim_sim::resolve(&scenario(&yaml("GB300", "fp4"), &[])).unwrap();
    assert_eq!(r.training.dtype, llmsim_compute::DType::Fp4);
    assert_eq!(r.gpu.peak_flops(llmsim_compute::DType::Fp4), 15000e12);
    // Faster than FP8 on the same GPU, slower than three times faster (attention, norms and the
    // quantize ops do not speed up).
    let step = |dtype: &str| {
        run(&scenario(&yaml("GB300", dtype), &[]), RunOptions::default())
            .report
            .iteration_time_s
    };
    let (t4, t8) = (step("fp4"), step("fp8"));
    assert!(t4 < t8 && t4 > t8 / 3.0, "fp4 {t4} fp8 {t8}");
}

#[test]
fn a_job_runs_at_its_slowest_boards_pace() {
    use llmsim_compute::variability::{DEFAULT_SCREEN, DEFAULT_SIGMA, slowest_of};
    let at = |gpus: u32, sets: &[&str]| {
        let mut all = vec![format!("cluster.gpus={gpus}")];
        all.extend(sets.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run(&scenario(CUSTOM_BASE, &refs), RunOptions::default()).report
    };
    let (on, off) = (at(8, &[]), at(8, &["compute.gpu_variability={sigma: 0}"]));
    // The report carries the expected slowest of the job's 8 boards, and the text report says so.
    assert_eq!(on.gpu_pace, slowest_of(8, DEFAULT_SIGMA, DEFAULT_SCREEN));
    assert!(on.gpu_pace > 1.0 && off.gpu_pace == 1.0);
    assert!(on.render().contains("(slowest of 8 boards: compute-bound kernels x1.023"));
    assert!(!off.render().contains("slowest of"));
    // Only compute-bound kernels slow: the step is slower, by at most the pace.
    assert!(on.iteration_time_s > off.iteration_time_s);
    assert!(on.iteration_time_s <= off.iteration_time_s * on.gpu_pace * (1.0 + 1e-9));
    // More boards, a slower expected slowest one (four TP-4 replicas against two).
    let sixteen = at(16, &[]);
    assert!(sixteen.gpu_pace > on.gpu_pace && sixteen.gpu_pace == slowest_of(16, DEFAULT_SIGMA, DEFAULT_SCREEN));
    // A wider spread slows more; out-of-range values name the field.
    assert!(at(8, &["compute.gpu_variability={sigma: 0.03, screen: 0.1}"]).gpu_pace > on.gpu_pace);
    for (set, needle) in [
        (
            "compute.gpu_variability={sigma: -0.01}",
            "compute.gpu_variability.sigma: -0.01 must be a fraction",
        ),
        (
            "compute.gpu_variability={sigma: 0.9}",
            "compute.gpu_variability.sigma: 0.9 must be a fraction",
        ),
        (
            "compute.gpu_variability={screen: 0}",
            "compute.gpu_variability.screen: 0 must be a fraction above 0",
        ),
    ] {
        let s = scenario(CUSTOM_BASE, &[set]);
        let m = match simulate(&s, &RunOptions::default(), &mut |_, _| {}) {
            Ok(_) => panic!("expected an error for {set}"),
            Err(e) => e.to_string(),
        };
        assert!(m.contains(needle), "{needle:?} not in {m:?}");
    }
}

/// The overlap slowdown (`compute.overlap_slowdown`) slows compute only while DP communication is
/// in flight: a layer's whole segment used to pay it when a short FSDP all-gather was in flight
/// at its start (TorchTitan's Llama 3.1 8B on 8 GPUs: 2.81 s against 2.37 s without the
/// slowdown, with the DP stream busy 6% of the iteration). The added time is now at most the
/// slowdown's share of the time the DP stream was busy.
#[test]
fn the_overlap_slowdown_costs_only_the_overlapped_time() {
    let yaml = "
model: { preset: llama3-8b, num_hidden_layers: 4 }
training: { seq_length: 4096, micro_batch_size: 2, global_batch_size: 16 }
parallel: { tp: 1, zero_stage: 3, reshard_after_forward: true, overlap_grad_reduce: true, overlap_param_gather: true }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 8 }
network: { backend: flow }
output: { trace: true, flows: false }
";
    let plain = run(&scenario(yaml, &["compute.overlap_slowdown=1.0"]), RunOptions::default());
    let slowed = run(&scenario(yaml, &[]), RunOptions::default());
    let s = llmsim_sim::scenario::DEFAULT_OVERLAP_SLOWDOWN;
    // The time unit 0's DP stream was busy (the union of its spans).
    let mut dp: Vec<(f64, f64)> = slowed
        .engine
        .spans
        .iter()
        .filter(|sp| sp.unit == 0 && sp.stream == llmsim_workload::dag::Stream::Dp)
        .map(|sp| (sp.start.as_secs_f64(), sp.end.as_secs_f64()))
        .collect();
    assert!(!dp.is_empty(), "the trace records the DP stream");
    dp.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut busy, mut cur) = (0.0, (f64::NEG_INFINITY, f64::NEG_INFINITY));
    for (a, b) in dp {
        if a > cur.1 {
            busy += (cur.1 - cur.0).max(0.0);
            cur = (a, b);
        } else {
            cur.1 = cur.1.max(b);
        }
    }
    busy += (cur.1 - cur.0).max(0.0);
    let (t0, t1) = (plain.report.iteration_time_s, slowed.report.iteration_time_s);
    assert!(t1 > t0, "overlapped compute still slows: {t1} vs {t0}");
    assert!(
        busy < 0.3 * t1,
        "the DP stream is busy a small part of the iteration: {busy} of {t1}"
    );
    assert!(
        t1 - t0 <= (s - 1.0) * busy * 1.05,
        "added {:.4} s, more than {s} x the {busy:.4} s of DP communication allows",
        t1 - t0
    );
}

#[test]
fn the_report_names_the_load_balancing_a_network_backend_uses() {
    let lb = |sets: &[&str]| run(&scenario(DP, sets), RunOptions::default()).report.topology;
    let adaptive = lb(&["network.load_balance=adaptive"]);
    assert!(adaptive.ends_with("; load balance: adaptive)"), "{adaptive}");
    // The analytical backend ignores it; unset, the line is the topology's own.
    let analytical = lb(&["network.load_balance=adaptive", "network.backend=analytical"]);
    let unset = lb(&[]);
    assert!(
        !analytical.contains("load balance") && !unset.contains("load balance"),
        "{analytical} / {unset}"
    );
    assert_eq!(analytical, unset);
}
