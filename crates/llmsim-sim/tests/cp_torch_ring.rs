//! `parallel.cp_impl` and `training.attention_kernel` from scenario text: typos name their
//! field, `torch_ring` leaves CP 1 alone, compiled exchanges block and eager ones overlap.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};

const BASE: &str = "
model: { hidden_size: 2048, num_hidden_layers: 4, num_attention_heads: 16, num_key_value_heads: 4, intermediate_size: 8192, vocab_size: 1024 }
training: { seq_length: 16384, micro_batch_size: 1, global_batch_size: 2, recompute: full }
parallel: { tp: 1, pp: 1, cp: 4 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 8, topology: { kind: rail-fat-tree } }
";

fn scenario(sets: &[&str]) -> Result<Scenario, String> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(BASE, &sets, Path::new(".")).map_err(|e| e.to_string())
}

fn report(sets: &[&str]) -> llmsim_sim::Report {
    let s = scenario(sets).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("simulates").report
}

fn iteration_s(sets: &[&str]) -> f64 {
    report(sets).iteration_time_s
}

#[test]
fn unknown_values_name_their_field_and_the_valid_ones() {
    let e = scenario(&["parallel.cp_impl=ring"]).unwrap_err();
    assert!(e.contains("cp_impl") && e.contains("megatron") && e.contains("torch_ring"), "{e}");
    let e = scenario(&["training.attention_kernel=fa4"]).unwrap_err();
    assert!(e.contains("attention_kernel") && e.contains("fa2") && e.contains("cudnn"), "{e}");
}

#[test]
fn torch_ring_changes_nothing_at_cp_1() {
    let one = ["parallel.cp=1", "training.global_batch_size=8"];
    let ring = ["parallel.cp=1", "training.global_batch_size=8", "parallel.cp_impl=torch_ring"];
    let eager = ["parallel.cp=1", "training.global_batch_size=8", "parallel.cp_impl=torch_ring_eager"];
    assert_eq!(iteration_s(&one), iteration_s(&ring));
    assert_eq!(iteration_s(&one), iteration_s(&eager));
}

#[test]
fn compiled_exchanges_block_and_eager_ones_overlap() {
    let compiled = report(&["parallel.cp_impl=torch_ring"]).mean.exposed_cp_s;
    let eager = report(&["parallel.cp_impl=torch_ring_eager"]).mean.exposed_cp_s;
    assert!(compiled > 0.0 && eager < compiled, "{eager} {compiled}");
}

#[test]
fn torch_ring_runs_and_fa2_is_slower_than_cudnn_on_hopper() {
    let meg = iteration_s(&[]);
    let ring = iteration_s(&["parallel.cp_impl=torch_ring"]);
    let ring_fa2 = iteration_s(&["parallel.cp_impl=torch_ring", "training.attention_kernel=fa2"]);
    assert!(meg > 0.0 && ring > 0.0);
    assert!(ring_fa2 > ring, "{ring_fa2} {ring}");
}
