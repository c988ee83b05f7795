//! `parallel.pipeline_flushes`: the step's micro-batches as several fill-and-drain pipeline
//! schedules (NeMo Automodel and TorchTitan run one per gradient-accumulation step).

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};

const PP: &str = "
model: { preset: llama3-8b, num_hidden_layers: 8, vocab_size: 1024 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 4 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 4, topology: { kind: flat } }
output: { flows: false }
";

fn run(yaml: &str, sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(yaml, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs")
}

#[test]
fn each_flush_pays_its_own_bubble() {
    // A near-balanced 4-stage pipeline (small vocabulary): 16 micro-batches in one schedule take
    // about 16 + 3 micro-batch times, in four schedules of 4 about 4 x (4 + 3) = 28.
    let one = run(PP, &[]).report;
    let four = run(PP, &["parallel.pipeline_flushes=4"]).report;
    let ideal = 28.0 / 19.0;
    let ratio = four.iteration_time_s / one.iteration_time_s;
    assert!(ratio > 0.9 * ideal && ratio < 1.05 * ideal, "ratio {ratio}, ideal {ideal}");
    assert!(
        four.iteration_time_s > one.iteration_time_s,
        "{} s vs {} s",
        four.iteration_time_s,
        one.iteration_time_s
    );
    assert!(
        four.mean.bubble_s > 2.0 * one.mean.bubble_s,
        "bubble {} s vs {} s",
        four.mean.bubble_s,
        one.mean.bubble_s
    );
}

#[test]
fn without_pipelining_flushes_change_nothing() {
    let sets = ["parallel.pp=1", "cluster.gpus=1", "cluster.gpus_per_node=1"];
    let one = run(PP, &sets).report.iteration_time_s;
    let with: Vec<&str> = sets.iter().copied().chain(["parallel.pipeline_flushes=4"]).collect();
    let four = run(PP, &with).report.iteration_time_s;
    assert_eq!(one.to_bits(), four.to_bits());
}

#[test]
fn a_flush_count_that_does_not_divide_is_refused_by_name() {
    let sets = vec!["parallel.pipeline_flushes=3".to_string()];
    let s = Scenario::from_yaml(PP, &sets, Path::new("."));
    let err = match s {
        Err(e) => e.to_string(),
        Ok(s) => simulate(&s, &RunOptions::default(), &mut |_, _| {})
            .err()
            .expect("refused")
            .to_string(),
    };
    assert!(err.contains("pipeline_flushes"), "{err}");
}
