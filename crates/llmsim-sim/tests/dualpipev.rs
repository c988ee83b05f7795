//! `parallel.schedule: dualpipev`: DualPipeV (deepseek-ai/DualPipe `dualpipev.py`), two chunks
//! per rank in a V, the embedding and the loss both on rank 0.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::ops;

const DENSE: &str = "
model: { preset: llama3-8b, num_hidden_layers: 16, vocab_size: 32000 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 2, pp: 4, schedule: dualpipev, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: rail-fat-tree } }
output: { flows: false }
";

const MOE: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 16 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 128 }
parallel: { tp: 1, pp: 4, ep: 8, schedule: dualpipev, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 64, gpus_per_node: 8, topology: { kind: rail-fat-tree } }
output: { flows: false }
";

fn scenario(yaml: &str, sets: &[&str]) -> Result<Scenario, String> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(yaml, &sets, Path::new(".")).map_err(|e| e.to_string())
}

fn run(yaml: &str, sets: &[&str]) -> Outcome {
    let s = scenario(yaml, sets).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs")
}

fn error(yaml: &str, sets: &[&str]) -> String {
    match scenario(yaml, sets) {
        Err(e) => e,
        Ok(s) => match simulate(&s, &RunOptions::default(), &mut |_, _| {}) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{sets:?} should be refused"),
        },
    }
}

#[test]
fn every_pass_runs_on_every_backend() {
    // Every pipeline send has its receive (a missing one would leave the run unfinished), on
    // both backends, dense with TP and DP, and MoE with its all-to-alls merged into the
    // overlapped forward-backward steps.
    for backend in ["analytical", "flow"] {
        let b = format!("network.backend={backend}");
        for (yaml, sets) in [(DENSE, vec![b.as_str()]), (MOE, vec![b.as_str(), "parallel.moe_a2a_overlap=true"])] {
            let r = run(yaml, &sets).report;
            assert!(r.iteration_time_s > 0.0, "{backend}");
            assert_eq!(r.stages.len(), 4);
            let sum: f64 = r.stages.iter().map(|s| s.layers as f64).sum();
            assert_eq!(sum, 16.0, "{backend}: every layer on one rank");
            assert!(r.parallel.contains("pp4 dualpipev"), "{backend}: {}", r.parallel);
        }
    }
}

#[test]
fn the_v_has_a_smaller_bubble_than_1f1b_over_the_same_ranks() {
    // Free communication isolates the schedule: DualPipeV over 4 ranks (8 half-size stages)
    // idles less than 1F1B over the same 4 ranks, and no more than its reference bound allows.
    let ideal = RunOptions {
        ideal_comm: true,
        ..RunOptions::default()
    };
    let go = |sets: &[&str]| {
        let s = scenario(DENSE, sets).unwrap();
        simulate(&s, &ideal, &mut |_, _| {}).unwrap().report
    };
    let v = go(&["network.backend=analytical"]);
    let f = go(&["network.backend=analytical", "parallel.schedule=1f1b"]);
    assert!(
        v.iteration_time_s < f.iteration_time_s,
        "dualpipev {} s, 1f1b {} s",
        v.iteration_time_s,
        f.iteration_time_s
    );
    assert!(
        v.mean.bubble_s < f.mean.bubble_s,
        "bubble {} vs {}",
        v.mean.bubble_s,
        f.mean.bubble_s
    );
}

#[test]
fn zero_bubble_runs_every_kernel_as_often_as_1f1b() {
    // With tp = 1 DualPipeV defers the layers' weight gradients of its warm-down backwards to
    // later weight steps: every kernel still runs once per micro-batch, as under 1F1B, and the
    // DP buckets still reduce every gradient (the same collectives).
    let count = |o: &Outcome| {
        let mut m: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for r in &o.ops {
            *m.entry((r.op.clone(), r.pass.to_string())).or_default() += r.count;
        }
        m
    };
    let v = run(MOE, &["network.backend=analytical", "parallel.moe_a2a_overlap=true"]);
    let f = run(MOE, &["network.backend=analytical", "parallel.schedule=1f1b"]);
    assert_eq!(count(&v), count(&f));
    assert_eq!(v.report.collectives, f.report.collectives);
}

#[test]
fn rank_0_holds_the_embedding_and_the_head() {
    let r = llmsim_sim::resolve(&scenario(DENSE, &[]).unwrap()).unwrap();
    let (m, p) = (&r.model, &r.parallel);
    let v: Vec<u64> = (0..4).map(|st| ops::stage_vocab_params(m, p, st)).collect();
    let emb = ops::padded_vocab(m, 2) * m.hidden_size / 2;
    assert_eq!(v, vec![2 * emb, 0, 0, 0], "untied: the embedding and the output layer on rank 0");
    // Rank s holds virtual stages s and 7 - s: the first and the last layers on rank 0.
    assert_eq!(ops::layers_of_chunk(m, p, 0, 0), 0..2);
    assert_eq!(ops::layers_of_chunk(m, p, 0, 1), 14..16);
    assert_eq!(ops::layers_of_chunk(m, p, 3, 0), 6..8);
    assert_eq!(ops::layers_of_chunk(m, p, 3, 1), 8..10);
    // Parameters are conserved: the same total as 1F1B's split.
    let f = llmsim_sim::resolve(&scenario(DENSE, &["parallel.schedule=1f1b"]).unwrap()).unwrap();
    let total = |p: &llmsim_workload::ParallelConfig| (0..4).map(|st| ops::stage_params(m, p, st)).sum::<u64>();
    assert_eq!(total(p), total(&f.parallel));
}

#[test]
fn bad_plans_are_refused_by_field() {
    let e = error(DENSE, &["parallel.vpp=3"]);
    assert!(e.contains("parallel.vpp"), "{e}");
    let e = error(DENSE, &["training.global_batch_size=8"]);
    assert!(e.contains("training.global_batch_size") && e.contains("at least"), "{e}");
    let e = error(DENSE, &["parallel.first_stage_layers=2"]);
    assert!(e.contains("parallel.first_stage_layers") && e.contains("pipeline_layers"), "{e}");
    let e = error(DENSE, &["parallel.pp=1", "parallel.tp=8"]);
    assert!(e.contains("parallel.pp"), "{e}");
    // 12 layers do not split over the V's 8 stages: the error names pp and the way out.
    let e = error(DENSE, &["model.num_hidden_layers=12"]);
    assert!(
        e.contains("parallel.pp") && e.contains("2*pp") && e.contains("pipeline_layers"),
        "{e}"
    );
    assert!(!e.contains("first_stage_layers"), "{e}");
}
