//! Host (CPU) dispatch in time (`compute.host`): the host thread issues each rank's kernels in
//! program order, the GPU cannot start a kernel before it was issued, and the MoE all-to-all
//! dispatcher makes the host wait for the GPU before each forward dispatch. On by default with
//! the measured and cited costs; `compute.host: null` turns it off.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, SimError, simulate};

/// One H100 running a 4-layer Llama-3-8B-shaped model, four micro-batches.
const ONE_GPU: &str = "
model: { preset: llama3-8b, num_hidden_layers: 4 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 4 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 1, gpus_per_node: 1, topology: { kind: flat } }
output: { flows: false }
";

/// Two H100s in one server, a 4-layer Mixtral-shaped model with its experts over both (EP 2).
const MOE: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 4 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 1, ep: 2 }
cluster: { gpu: H100, gpus: 2, gpus_per_node: 2, topology: { kind: flat } }
output: { flows: false }
";

/// Two H100s in one server, a 2-layer GPT-OSS-20B (16 experts on each, biases, the clamped
/// activation with Megatron-Core's blocking scalar copy before it).
const GPT_OSS: &str = "
model: { preset: gpt-oss-20b, num_hidden_layers: 2 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 1, ep: 2 }
cluster: { gpu: H100, gpus: 2, gpus_per_node: 2, topology: { kind: flat } }
output: { flows: false }
";

fn run(yaml: &str, sets: &[&str]) -> Result<llmsim_sim::Outcome, SimError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(yaml, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {})
}

#[test]
fn a_free_host_changes_nothing() {
    for yaml in [ONE_GPU, MOE, GPT_OSS] {
        let base = run(yaml, &["compute.host=null"]).unwrap();
        let zero = ["op_us", "linear_us", "expert_gemm_us", "call_us"].map(|k| format!("compute.host.{k}=0"));
        let zero: Vec<&str> = zero.iter().map(String::as_str).collect();
        let h = run(yaml, &[&zero[..], &["compute.host.moe_sync=true"]].concat()).unwrap();
        assert_eq!(h.report.iteration_time_s.to_bits(), base.report.iteration_time_s.to_bits());
        assert_eq!(h.report.mean.exposed_host_s, 0.0);
    }
}

/// Runs `yaml` with a 2 ms-per-op host (`sets`) and checks that the host sets the pace: the
/// iteration takes at least the issue time of the ops, each weighted by `ops_of` (ops of 2 ms),
/// and at most that plus the GPU-only run. Returns the slow-host outcome.
fn paced_by_the_host(yaml: &str, sets: &[&str], ops_of: impl Fn(&llmsim_sim::OpRow) -> f64) -> llmsim_sim::Outcome {
    let base = run(yaml, &["compute.host=null"]).unwrap();
    let h = run(yaml, sets).unwrap();
    let ops: f64 = h.ops.iter().map(|r| ops_of(r) * r.count as f64).sum();
    let host_s = ops * 2000.0 * 1e-6;
    let it = h.report.iteration_time_s;
    assert!(it >= host_s * (1.0 - 1e-9), "iteration {it} s, host issue alone {host_s} s");
    assert!(it <= host_s + base.report.iteration_time_s, "iteration {it} s, host {host_s} s");
    // Nearly all the GPU's waiting is on the host.
    let exposed = h.report.mean.exposed_host_s;
    assert!(exposed >= it - base.report.iteration_time_s - 1e-9, "exposed {exposed} s of {it} s");
    h
}

#[test]
fn a_slow_host_sets_the_pace() {
    // 2 ms per op dwarfs every kernel of this model: the iteration takes at least the host's
    // issue time (every op of ops.csv once per execution, a GEMM's weight-gradient op free as its
    // module's backward is charged to the dgrad op), and at most that plus the GPU-only run.
    let sets = [
        "compute.host.op_us=2000",
        "compute.host.linear_us=2000",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=0",
    ];
    paced_by_the_host(
        ONE_GPU,
        &sets,
        |r| {
            if r.class == "Gemm" && r.pass == "bwd-weight" { 0.0 } else { 1.0 }
        },
    );
}

#[test]
fn an_moe_layer_costs_its_measured_dispatcher_work() {
    // A slow host (2 ms per op, nothing else) paces the MoE model: each MoE layer's router
    // carries `moe_ops_fwd` ops and its un-permutation backward `moe_ops_bwd`, every other op
    // one.
    let sets = [
        "compute.host.op_us=2000",
        "compute.host.linear_us=0",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=0",
        "compute.host.moe_sync=false",
        "compute.host.moe_ops_fwd=40",
        "compute.host.moe_ops_bwd=25",
    ];
    // The router's gating GEMM is not a Transformer Engine module: its backward GEMMs are one op
    // each, where a module's GEMMs cost `linear_us` (0 here).
    let h = paced_by_the_host(MOE, &sets, |r| match (r.class.as_str(), r.op.as_str()) {
        (_, "moe_router") => 40.0,
        (_, "moe_unpermute_bwd") => 25.0,
        (_, "moe_router_dgrad" | "moe_router_wgrad") => 1.0,
        ("Gemm" | "HostCopy", _) => 0.0,
        _ => 1.0,
    });
    assert!(h.ops.iter().any(|r| r.op == "moe_unpermute_bwd" && r.count > 0));
    let it = h.report.iteration_time_s;
    // Without the measured dispatcher work the same host is faster by about that much.
    let plain = run(
        MOE,
        &[&sets[..5], &["compute.host.moe_ops_fwd=1", "compute.host.moe_ops_bwd=1"]].concat(),
    )
    .unwrap();
    assert!(plain.report.iteration_time_s < it, "{} against {it}", plain.report.iteration_time_s);
}

#[test]
fn the_moe_dispatch_sync_stops_the_host_running_ahead() {
    // A cheap host (1 us per op, 50 us per call) runs ahead of this GPU work, except at each
    // forward token dispatch, where it waits for the GPU and then needs `call_us` to issue the
    // all-to-all: at least that much exposed host time per MoE layer and micro-batch.
    let sets = [
        "compute.host.op_us=1",
        "compute.host.linear_us=1",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=50",
    ];
    let free = run(MOE, &[&sets[..], &["compute.host.moe_sync=false"]].concat()).unwrap();
    let synced = run(MOE, &[&sets[..], &["compute.host.moe_sync=true"]].concat()).unwrap();
    let syncs = 4.0 * synced.report.microbatches as f64;
    let floor = syncs * 50e-6;
    assert!(
        synced.report.mean.exposed_host_s >= floor * (1.0 - 1e-9),
        "exposed {} s, {syncs} syncs x 50 us = {floor} s",
        synced.report.mean.exposed_host_s
    );
    assert!(synced.report.mean.exposed_host_s > free.report.mean.exposed_host_s);
    assert!(synced.report.iteration_time_s > free.report.iteration_time_s);
}

#[test]
fn a_recomputed_dispatch_syncs_again() {
    // Full recompute re-runs each MoE layer's forward in backward, its token dispatch and the
    // host's wait included; the gradients' all-to-alls do not wait. The cheap host of the test
    // above: at least one `call_us` exposed per dispatch, now two a layer and micro-batch.
    let sets = [
        "compute.host.op_us=1",
        "compute.host.linear_us=1",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=50",
        "training.recompute=full",
    ];
    let synced = run(MOE, &sets).unwrap();
    let syncs = 2.0 * 4.0 * synced.report.microbatches as f64;
    let floor = syncs * 50e-6;
    let exposed = synced.report.mean.exposed_host_s;
    assert!(
        exposed >= floor * (1.0 - 1e-9),
        "exposed {exposed} s, {syncs} syncs x 50 us = {floor} s"
    );
    // Without recompute, half the syncs: less exposed host time.
    let plain = run(MOE, &sets[..4]).unwrap();
    assert!(plain.report.mean.exposed_host_s < exposed);
}

#[test]
fn a_blocking_copy_before_an_op_stops_the_host_running_ahead() {
    // A cheap host (1 us per op) runs ahead of this GPU work; before each expert activation
    // (forward only: no recompute) it waits for the GPU and then needs 1 us to issue it: at
    // least that much more exposed host time per MoE layer and micro-batch than without the
    // copy's synchronization.
    let sets = [
        "compute.host.op_us=1",
        "compute.host.linear_us=1",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=0",
        "compute.host.moe_sync=false",
        "compute.host.moe_ops_fwd=1",
        "compute.host.moe_ops_bwd=1",
    ];
    let free = run(GPT_OSS, &[&sets[..], &["compute.host.blocking_copies=false"]].concat()).unwrap();
    let synced = run(GPT_OSS, &sets).unwrap();
    assert!(synced.ops.iter().any(|r| r.op == "expert_act_clamp" && r.count > 0));
    let syncs = 2.0 * synced.report.microbatches as f64;
    let (e_free, e_sync) = (free.report.mean.exposed_host_s, synced.report.mean.exposed_host_s);
    assert!(
        e_sync >= e_free + syncs * 1e-6 * (1.0 - 1e-9),
        "exposed {e_sync} s against {e_free} s, {syncs} syncs"
    );
    assert!(synced.report.iteration_time_s > free.report.iteration_time_s);
}

#[test]
fn negative_costs_name_the_field() {
    let err = |sets: &[&str]| match run(ONE_GPU, sets) {
        Ok(_) => panic!("{sets:?} was accepted"),
        Err(e) => e.to_string(),
    };
    let e = err(&["compute.host.op_us=-1"]);
    assert!(e.contains("compute.host.op_us"), "{e}");
    let e = err(&["compute.host.expert_gemm_us=-3"]);
    assert!(e.contains("compute.host.expert_gemm_us"), "{e}");
    let e = err(&["compute.host.moe_ops_bwd=-2"]);
    assert!(e.contains("compute.host.moe_ops_bwd"), "{e}");
}

#[test]
fn an_empty_host_section_takes_the_default_costs() {
    let s = Scenario::from_yaml(&format!("{ONE_GPU}compute: {{ host: {{}} }}\n"), &[], Path::new(".")).unwrap();
    let h = s.compute.host.clone().expect("host section");
    assert_eq!(
        (h.op_us, h.linear_us, h.expert_gemm_us, h.call_us, h.moe_sync),
        (20.8, 115.0, 16.0, 20.8, true)
    );
    assert_eq!((h.moe_ops_fwd, h.moe_ops_bwd), (None, None));
    assert!(h.cuda_graph_scope.is_empty());
    // A kernel is issued before it runs: the host's first issue is exposed at least.
    let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert!(o.report.mean.exposed_host_s >= 20.8e-6 * (1.0 - 1e-9));
    // No section is the same as an empty one; `null` turns the host off.
    let default = Scenario::from_yaml(ONE_GPU, &[], Path::new(".")).unwrap();
    assert_eq!(default.compute.host.as_ref(), Some(&h));
    let off = Scenario::from_yaml(&format!("{ONE_GPU}compute: {{ host: null }}\n"), &[], Path::new(".")).unwrap();
    assert!(off.compute.host.is_none());
    let o = simulate(&off, &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(o.report.mean.exposed_host_s, 0.0);
}

fn parallel(yaml: &str, sets: &[&str]) -> (llmsim_sim::scenario::HostSpec, llmsim_workload::ParallelConfig) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(yaml, &sets, Path::new(".")).expect("valid scenario");
    (s.compute.host.clone().expect("host on"), s.parallel.clone())
}

#[test]
fn moe_host_work_follows_the_dispatcher_path() {
    use llmsim_sim::host::moe_host_ops;
    // The measured path (the all-to-all dispatcher at EP 1) keeps the measured 190 each way.
    let (h, p) = parallel(MOE, &["parallel.ep=1"]);
    assert_eq!(moe_host_ops(&h, &p), (190.0, 190.0));
    // Counted per region (router, preprocess, permute + dispatch, combine side), forward /
    // backward: measured 28+8+17+7 = 60 / 20+0+10+4 = 34; all-to-all at EP > 1 with the fused
    // router and permutation 17+23+22+12 = 74 / 16+0+16+11 = 43; flex (HybridEP)
    // 27+1+9+2 = 39 / 16+1+3+2 = 22.
    let (h, p) = parallel(MOE, &[]);
    let (f, b) = moe_host_ops(&h, &p);
    assert!(
        (f - 190.0 * 74.0 / 60.0).abs() < 1e-9 && (b - 190.0 * 43.0 / 34.0).abs() < 1e-9,
        "{f} {b}"
    );
    let (h, p) = parallel(MOE, &["parallel.moe_token_dispatcher=flex"]);
    let (ff, fb) = moe_host_ops(&h, &p);
    assert!(
        (ff - 190.0 * 39.0 / 60.0).abs() < 1e-9 && (fb - 190.0 * 22.0 / 34.0).abs() < 1e-9,
        "{ff} {fb}"
    );
    // Router and preprocessing in a graph: what stays eager is the dispatch and the combine, one
    // op of graph outputs, and the router gradients' copies into the graph (3) backward;
    // the all-to-all dispatcher's 14 host copies of the token counts move to the dispatch.
    let (h, p) = parallel(
        MOE,
        &[
            "parallel.moe_token_dispatcher=flex",
            "compute.host.cuda_graph_scope=[moe_router,moe_preprocess]",
        ],
    );
    let (gf, gb) = moe_host_ops(&h, &p);
    assert!(
        (gf - 190.0 * 12.0 / 60.0).abs() < 1e-9 && (gb - 190.0 * 8.0 / 34.0).abs() < 1e-9,
        "{gf} {gb}"
    );
    let (h, p) = parallel(MOE, &["compute.host.cuda_graph_scope=[moe_router,moe_preprocess]"]);
    let (af, ab) = moe_host_ops(&h, &p);
    assert!(
        (af - 190.0 * 49.0 / 60.0).abs() < 1e-9 && (ab - 190.0 * 30.0 / 34.0).abs() < 1e-9,
        "{af} {ab}"
    );
    // DeepEP's backend: 27+1+31+8 = 67 / 16+1+14+8 = 39; graphed 31+8+1 = 40 / 3+14+8 = 25.
    let (h, p) = parallel(
        MOE,
        &["parallel.moe_token_dispatcher=flex", "parallel.moe_flex_dispatcher_backend=deepep"],
    );
    let (df, db) = moe_host_ops(&h, &p);
    assert!(
        (df - 190.0 * 67.0 / 60.0).abs() < 1e-9 && (db - 190.0 * 39.0 / 34.0).abs() < 1e-9,
        "{df} {db}"
    );
    let (h, p) = parallel(
        MOE,
        &[
            "parallel.moe_token_dispatcher=flex",
            "parallel.moe_flex_backend=deepep",
            "compute.host.cuda_graph_scope=[moe_router,moe_preprocess]",
        ],
    );
    let (dgf, dgb) = moe_host_ops(&h, &p);
    assert!(
        (dgf - 190.0 * 40.0 / 60.0).abs() < 1e-9 && (dgb - 190.0 * 25.0 / 34.0).abs() < 1e-9,
        "{dgf} {dgb}"
    );
    // A number in the scenario wins; NeMo Automodel's MoE keeps the measured figure.
    let (h, p) = parallel(MOE, &["compute.host.moe_ops_fwd=7"]);
    assert_eq!(moe_host_ops(&h, &p).0, 7.0);
    let (h, p) = parallel(MOE, &["parallel.moe_experts=automodel"]);
    assert_eq!(moe_host_ops(&h, &p), (190.0, 190.0));
    // In time: the flex path and the graphs each leave the host less to do.
    let host = |sets: &[&str]| run(MOE, sets).unwrap().report.mean.exposed_host_s;
    let a2a = host(&[]);
    let flex = host(&["parallel.moe_token_dispatcher=flex"]);
    let graphed = host(&[
        "parallel.moe_token_dispatcher=flex",
        "compute.host.cuda_graph_scope=[attn,moe_router,moe_preprocess]",
    ]);
    assert!(graphed < flex && flex < a2a, "{graphed} {flex} {a2a}");
}

#[test]
fn a_graphed_attention_block_costs_one_replay() {
    // 2 ms per op and per linear module: with `attn` captured, each layer pass's attention
    // block (input norm to pre-MLP norm) costs one replay of GRAPH_REPLAY_OPS ops instead of
    // its ops; the MLP's ops and the head stay eager.
    let sets = [
        "compute.host.op_us=2000",
        "compute.host.linear_us=2000",
        "compute.host.expert_gemm_us=0",
        "compute.host.call_us=0",
        "compute.host.cuda_graph_scope=[attn]",
    ];
    let attn = |op: &str| {
        ["attn_", "core_attention", "rope", "input_norm", "post_attn_norm"]
            .iter()
            .any(|p| op.starts_with(p))
    };
    let replay = llmsim_sim::host::GRAPH_REPLAY_OPS;
    let h = paced_by_the_host(ONE_GPU, &sets, |r| {
        if r.op == "input_norm" || r.op == "post_attn_norm_bwd" {
            replay
        } else if attn(&r.op) || (r.class == "Gemm" && r.pass == "bwd-weight") {
            0.0
        } else {
            1.0
        }
    });
    let eager = run(ONE_GPU, &sets[..4]).unwrap();
    assert!(h.report.iteration_time_s < eager.report.iteration_time_s);
    // The report says which modules were replayed as graphs.
    assert_eq!(h.report.cuda_graph_scope, vec!["attn".to_string()]);
    assert!(h.report.render().contains("CUDA graphs over attn"), "{}", h.report.render());
    assert!(eager.report.cuda_graph_scope.is_empty());
}

#[test]
fn a_preprocess_graph_without_the_router_names_the_field() {
    // Refused when the scenario loads, before any estimate or run, naming the override.
    let e = Scenario::from_yaml(MOE, &["compute.host.cuda_graph_scope=[moe_preprocess]".to_string()], Path::new("."))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compute.host.cuda_graph_scope") && e.contains("moe_router") && e.contains("--set"),
        "{e}"
    );
    let e = Scenario::from_yaml(MOE, &["compute.host.cuda_graph_scope=[everything]".to_string()], Path::new("."))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda_graph_scope"), "{e}");
}
