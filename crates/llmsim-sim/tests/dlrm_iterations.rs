//! DLRM over several iterations with the data-parallel stream in FIFO or LIFO order
//! (`dlrm.iterations`, `dlrm.scheduling_policy`): the order the engine starts the queued
//! collectives in, and what the report says about two iterations.

use std::collections::HashMap;
use std::path::Path;

use llmsim_core::SimTime;
use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::dag::Stream;

/// The study's scaled DLRM (per-layer all-reduces) on 8 GPUs, one 100 Gb/s NIC each: the top
/// MLP's 8 MB all-reduces take longer than a layer's backward, so they queue.
const DLRM: &str = "
dlrm:
  dense_features: 1600
  bottom_mlp: [1024, 1024, 1024, 1024, 1024, 64]
  top_mlp: [2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 1]
  num_tables: 64
  rows_per_table: 1000000
  embedding_dim: 64
  lookups_per_table: 60
  batch_size_per_gpu: 512
  dtype: fp16
  grad_bucket_size: 1
cluster: { gpu: V100, gpus: 8, gpus_per_node: 1, topology: { kind: flat, nic: { bandwidth: 100Gbps } } }
collectives: { algo: ring }
output: { trace: true, flows: false }
";

fn run(sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(DLRM, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("simulates")
}

/// Unit 0's data-parallel-stream nodes as (node, ready, start), by start time; `ready` is when
/// the last of its dependencies ended.
fn dp_stream(o: &Outcome) -> Vec<(u32, SimTime, SimTime)> {
    let prog = &o.workload.stages[0];
    let spans: HashMap<u32, (SimTime, SimTime)> = o
        .engine
        .spans
        .iter()
        .filter(|s| s.unit == 0)
        .map(|s| (s.node, (s.start, s.end)))
        .collect();
    assert_eq!(spans.len(), prog.len(), "unit 0 traced whole");
    let mut dp: Vec<(u32, SimTime, SimTime)> = (0..prog.len() as u32)
        .filter(|&i| prog.nodes[i as usize].stream == Stream::Dp)
        .map(|i| {
            let ready = prog.deps(i).iter().map(|d| spans[d].1).max().unwrap_or(SimTime::ZERO);
            (i, ready, spans[&i].0)
        })
        .collect();
    dp.sort_by_key(|&(i, _, start)| (start, i));
    dp
}

#[test]
fn fifo_starts_the_dp_stream_in_program_order() {
    for sets in [&[][..], &["dlrm.scheduling_policy=fifo"][..], &["dlrm.iterations=2"][..]] {
        let dp = dp_stream(&run(sets));
        assert!(dp.len() > 17, "{sets:?}");
        assert!(dp.windows(2).all(|w| w[0].0 < w[1].0), "{sets:?}: {dp:?}");
    }
    // Spelling fifo out is the default.
    let (a, b) = (run(&[]), run(&["dlrm.scheduling_policy=fifo"]));
    assert_eq!(a.report.iteration_time_s, b.report.iteration_time_s);
}

#[test]
fn lifo_starts_the_last_issued_ready_collective_first() {
    for iterations in ["1", "2"] {
        let dp = dp_stream(&run(&["dlrm.scheduling_policy=lifo", &format!("dlrm.iterations={iterations}")]));
        let mut reordered = 0;
        for (k, &(node, ready, start)) in dp.iter().enumerate() {
            assert!(ready <= start);
            // No collective issued later was ready, and still waiting, when this one started.
            for &(other, r, s) in &dp[k + 1..] {
                assert!(
                    !(other > node && r < start),
                    "{iterations}: node {other} (ready {r}) waited while {node} started at {start}"
                );
                if other < node {
                    reordered += 1;
                }
                assert!(s >= start);
            }
        }
        assert!(reordered > 0, "{iterations}: LIFO never changed the order: {dp:?}");
        // One at a time: each starts once the one before it ended or later.
        let o = run(&["dlrm.scheduling_policy=lifo", &format!("dlrm.iterations={iterations}")]);
        let mut spans: Vec<_> = o.engine.spans.iter().filter(|s| s.unit == 0 && s.stream == Stream::Dp).collect();
        spans.sort_by_key(|s| s.start);
        assert!(spans.windows(2).all(|w| w[1].start >= w[0].end));
    }
}

#[test]
fn two_iterations_report_the_first_and_account_for_the_whole_run() {
    let o = run(&["dlrm.scheduling_policy=lifo", "dlrm.iterations=2"]);
    let r = &o.report;
    assert_eq!(r.iterations, 2);
    assert_eq!(o.engine.iteration_ends.len(), 2);
    let total = o.engine.iteration_ends[1].as_secs_f64();
    let first = r.first_iteration.as_ref().expect("first iteration breakdown");
    let busy = |b: &llmsim_sim::report::Breakdown| {
        b.compute_s + b.exposed_tp_s + b.exposed_cp_s + b.exposed_ep_s + b.exposed_pp_s + b.exposed_dp_s + b.bubble_s + b.exposed_host_s
    };
    // The compute stream computes or waits from 0 to the last optimizer step, which ends the run
    // (DLRM runs host-free; the host column is summed all the same).
    let both = busy(first) + busy(&r.mean);
    assert!((both - total).abs() <= 1e-9 * total, "{both} vs {total}");
    // The second iteration's forward waits on the first's all-reduces: exposed time there.
    assert!(r.mean.exposed_dp_s > 0.0);
    assert!((r.iteration_time_s - (total - r.first_iteration_time_s.unwrap())).abs() <= 1e-9 * total);
    // One iteration has no first-iteration breakdown.
    assert!(run(&[]).report.first_iteration.is_none());
}
