//! The batch engine gives the single run's report: bit-identical iteration time, every metric and
//! every other report field (all but the wall time), on random flow-level points; and it
//! refuses (names the field of) the points it cannot fold.

use std::path::Path;

use llmsim_sim::batch_engine::{blockers, partition, simulate_batched};
use llmsim_sim::{RunOptions, Scenario, Shared, simulate};
use proptest::prelude::*;

/// The report as JSON without its wall time (the one field that differs between equal runs).
fn report_json(r: &llmsim_sim::Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    v.as_object_mut().unwrap().remove("sim_wall_s");
    v
}

#[allow(clippy::too_many_arguments)]
fn point(
    gpus: u32,
    tp: u32,
    topo: &str,
    nic_gbps: u32,
    lat_ns: u32,
    algo: &str,
    gpu: &str,
    mbs: u32,
    k: u32,
    slowdown: f64,
    overlap: bool,
    distopt: bool,
    host_us: Option<f64>,
) -> Scenario {
    let dp = gpus / tp;
    let gbs = dp * mbs * k;
    let link = format!("{{ bandwidth: {nic_gbps}Gbps, latency: {lat_ns}ns }}");
    let topology = match topo {
        "fat-tree" => format!("{{ kind: fat-tree, host_link: {link} }}"),
        "spine-leaf" => format!("{{ kind: spine-leaf, hosts_per_leaf: 8, nic: {link} }}"),
        "flat" => format!("{{ kind: flat, nic: {link} }}"),
        _ => format!("{{ kind: rail-fat-tree, servers_per_segment: 2, nic: {link} }}"),
    };
    let y = format!(
        "model: {{ preset: gpt3-13b, num_hidden_layers: 4 }}
training: {{ global_batch_size: {gbs}, micro_batch_size: {mbs}, seq_length: 1024 }}
parallel: {{ tp: {tp}, sequence_parallel: {sp}, use_distributed_optimizer: {distopt}, overlap_grad_reduce: {overlap}, overlap_param_gather: {overlap} }}
cluster: {{ gpu: {gpu}, gpus: {gpus}, gpus_per_node: 8, topology: {topology} }}
network: {{ backend: flow }}
collectives: {{ algo: {algo} }}
compute: {{ overlap_slowdown: {slowdown}{host} }}
output: {{ trace: false, flows: false }}
",
        sp = tp > 1,
        overlap = overlap && distopt,
        // Host dispatch (`compute.host`): per-op and per-linear issue costs.
        host = host_us.map_or(String::new(), |us| format!(", host: {{ op_us: {us}, linear_us: {} }}", us * 10.0)),
    );
    Scenario::from_yaml(&y, &[], Path::new(".")).unwrap()
}

fn check_equal(s: &Scenario, shared: &Shared) -> Result<(), TestCaseError> {
    let opts = RunOptions::default();
    prop_assert!(blockers(s, &opts).is_empty(), "{:?}", blockers(s, &opts));
    let alone = simulate(s, &opts, &mut |_, _| {});
    let batched = simulate_batched(s, &opts, shared);
    match (alone, batched) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a.report.iteration_time_s.to_bits(), b.report.iteration_time_s.to_bits());
            prop_assert_eq!(report_json(&a.report), report_json(&b.report));
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        (a, b) => prop_assert!(false, "single run {:?} but batch {:?}", a.map(|_| ()), b.map(|_| ())),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn batch_engine_equals_single_runs(
        gpus in prop::sample::select(vec![16u32, 32, 64]),
        tp in prop::sample::select(vec![1u32, 2, 4, 8]),
        topo in prop::sample::select(vec!["rail-fat-tree", "fat-tree", "spine-leaf", "flat"]),
        nic in prop::sample::select(vec![100u32, 200, 400, 800]),
        lat in 100u32..3000,
        algo in prop::sample::select(vec!["auto", "ring", "tree", "halving-doubling", "hierarchical"]),
        gpu in prop::sample::select(vec!["H100", "A100", "H200", "B200"]),
        mbs in 1u32..3,
        k in 1u32..3,
        slowdown in 1.0f64..1.3,
        overlap in any::<bool>(),
        distopt in any::<bool>(),
        host_us in prop::option::of(0.0f64..300.0),
    ) {
        let s = point(gpus, tp, topo, nic, lat, algo, gpu, mbs, k, slowdown, overlap, distopt, host_us);
        check_equal(&s, &Shared::default())?;
    }
}

/// Points of one group share their workload and segment times: the second run of a GPU type
/// reuses them and still equals its single run.
#[test]
fn a_group_shares_structure_and_equals_single_runs() {
    let shared = Shared::default();
    let mut scs = Vec::new();
    // Other link bandwidths and latencies over one topology structure: the routes found for the
    // first point serve the others.
    for (nic, lat, algo, gpu) in [
        (100, 500, "ring", "H100"),
        (400, 1500, "auto", "H100"),
        (200, 100, "tree", "A100"),
        (800, 2500, "ring", "A100"),
        (800, 700, "hierarchical", "H200"),
    ] {
        scs.push(point(32, 2, "rail-fat-tree", nic, lat, algo, gpu, 1, 2, 1.1, true, true, None));
    }
    let part = partition(&scs, &RunOptions::default());
    assert_eq!(part.groups, 1);
    assert_eq!(part.batched(), 5);
    for s in &scs {
        check_equal(s, &shared).unwrap();
    }
    let st = shared.stats();
    assert_eq!(st.workload_builds, 1, "{st:?}");
    // The first point found the routes: the others found few new ones (other NCCL algorithms
    // route other transfers).
    assert!(st.route_hits > 4 * st.route_misses, "{st:?}");
}

/// The whole GPT-3 13B / 128-GPU example (64 replicas folded into one).
#[test]
fn the_128_gpu_example_is_bit_identical() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let text = std::fs::read_to_string(dir.join("gpt3-13b-128gpu.yaml")).unwrap();
    for sets in [
        vec![],
        vec![
            "cluster.topology.nic.bandwidth=100Gbps".to_string(),
            "collectives.algo=ring".to_string(),
        ],
    ] {
        let mut s = Scenario::from_yaml(&text, &sets, &dir).unwrap();
        s.output.trace = false;
        s.output.flows = false;
        check_equal(&s, &Shared::default()).unwrap();
    }
}

/// What cannot fold is named by its field.
#[test]
fn blockers_name_the_field() {
    let opts = RunOptions::default();
    let mut s = point(32, 2, "rail-fat-tree", 400, 500, "auto", "H100", 1, 1, 1.0, false, false, None);
    assert!(blockers(&s, &opts).is_empty());
    s.parallel.pp = 2;
    let b = blockers(&s, &opts);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].field, "parallel.pp");
    s.parallel.pp = 1;
    s.network.backend = llmsim_sim::Backend::Packet;
    assert_eq!(blockers(&s, &opts)[0].field, "network.backend");
    s.network.backend = llmsim_sim::Backend::Flow;
    s.output.trace = true;
    assert_eq!(blockers(&s, &opts)[0].field, "output.trace");
    s.output.trace = false;
    // tp=8 over servers of 4 GPUs: TP collectives would cross the network.
    s.parallel.tp = 8;
    s.cluster.gpus_per_node = 4;
    assert!(
        blockers(&s, &opts).iter().any(|b| b.field == "parallel.tp"),
        "{:?}",
        blockers(&s, &opts)
    );
}
