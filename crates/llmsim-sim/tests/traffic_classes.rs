//! `network.traffic_classes` (issue 32 §4): with pipeline traffic in a class above data-parallel
//! traffic, a DP all-reduce that shares a NIC link with a pipeline send no longer slows it (flow
//! backend: strict priority).

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};

/// PP2 x DP4 on 8 GPUs, one per server, under one leaf (400 Gb/s NICs, 500 ns per hop): every
/// transfer crosses two links, and a stage's NIC carries both its pipeline sends and its
/// gradient all-reduce (overlapped with the backward pass).
const PP_DP: &str = "
model: { hidden_size: 2048, num_hidden_layers: 4, num_attention_heads: 16, intermediate_size: 8192, vocab_size: 1024, gated_mlp: false }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 1, pp: 2, overlap_grad_reduce: true, use_distributed_optimizer: false }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 1, topology: { kind: spine-leaf, hosts_per_leaf: 8, nic: { bandwidth: 400Gbps, latency: 500ns } } }
network: { backend: flow, fold: off }
";

/// The slowest pipeline transfer over its time alone on its path (bytes at 400 Gb/s + 2 x 500 ns).
fn worst_pp_stretch(sets: &[&str]) -> (f64, u64) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(PP_DP, &sets, Path::new(".")).unwrap();
    let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap();
    let pp: Vec<_> = o.engine.flows.iter().filter(|f| f.kind == "pp").collect();
    assert!(!pp.is_empty() && o.engine.flows.iter().any(|f| f.kind == "dp"));
    let worst = pp
        .iter()
        .map(|f| {
            let alone_ps = (u128::from(f.bytes) * 8 * 1_000_000_000_000).div_ceil(400_000_000_000) as u64 + 1_000_000;
            (f.finish - f.start).as_ps() as f64 / alone_ps as f64
        })
        .fold(0.0, f64::max);
    (worst, pp.len() as u64)
}

#[test]
fn pipeline_above_data_parallel_is_not_slowed_by_it() {
    let (shared, n) = worst_pp_stretch(&[]);
    assert!(shared > 1.01, "without classes the all-reduce slows some pipeline send: {shared}");
    let (first, m) = worst_pp_stretch(&["network.traffic_classes={pp: 1}"]);
    assert_eq!(n, m);
    assert!(
        (first - 1.0).abs() < 1e-9,
        "with pp above dp every pipeline send runs as if alone: {first}"
    );
    println!("worst pipeline send: {shared:.3}x its time alone in one class, {first:.6}x with pp in class 1");
}

#[test]
fn classes_are_checked() {
    let s = Scenario::from_yaml(PP_DP, &["network.traffic_classes={pp: 9}".into()], Path::new(".")).unwrap();
    let e = simulate(&s, &RunOptions::default(), &mut |_, _| {}).err().unwrap().to_string();
    assert!(e.starts_with("network.traffic_classes.pp:") && e.contains("0..=6"), "{e}");
    let e = Scenario::from_yaml(PP_DP, &["network.traffic_classes={bulk: 1}".into()], Path::new("."))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("bulk"), "{e}");
}

/// The packet backend puts each class in its own priority group (queues served round robin):
/// the run completes every transfer and delivers the same bytes, some at other times.
#[test]
fn packet_backend_runs_classes_in_their_own_priority_groups() {
    let sets = ["network.backend=packet".to_string(), "network.traffic_classes={pp: 1}".to_string()];
    let s = Scenario::from_yaml(PP_DP, &sets, Path::new(".")).unwrap();
    let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert!(o.engine.net.completed > 0 && o.engine.net.completed == o.engine.net.submitted);
    let plain = Scenario::from_yaml(PP_DP, &sets[..1], Path::new(".")).unwrap();
    let p = simulate(&plain, &RunOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(o.engine.net.bytes_delivered, p.engine.net.bytes_delivered);
    let differ = o
        .engine
        .flows
        .iter()
        .zip(&p.engine.flows)
        .filter(|(a, b)| a.finish != b.finish)
        .count();
    // The classes reach the switches: some transfers end at other times (7 of 69 here).
    assert!(differ > 0, "a class of its own changes how the queues are served");
    println!("packet: {differ} of {} transfers end at another time", o.engine.flows.len());
    println!(
        "packet: {:.6} s with pp in class 1, {:.6} s in one class",
        o.report.iteration_time_s, p.report.iteration_time_s
    );
}
