//! Per-layer and per-module precision in a whole run: BF16 layers and BF16 modules of an NVFP4
//! run take longer than their NVFP4 versions and less than a BF16 run, and bad settings name
//! their field. Muon in a whole run: the report names it.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, SimError, simulate};

/// Eight B200s, one data-parallel replica each, a Llama-3-8B-shaped model cut to 8 layers in NVFP4.
const RUN: &str = "
model: { preset: llama3-8b, num_hidden_layers: 8 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 8, dtype: fp4, fp8_recipe: mxfp8 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: B200, gpus: 8, gpus_per_node: 8, topology: { kind: flat } }
output: { flows: false }
";

fn run(sets: &[&str]) -> Result<f64, SimError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(RUN, &sets, Path::new("."))?;
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).map(|o| o.report.iteration_time_s)
}

#[test]
fn bf16_layers_and_modules_cost_between_nvfp4_and_bf16() {
    let fp4 = run(&[]).unwrap();
    let bf16 = run(&["training.dtype=bf16"]).unwrap();
    let two = run(&["training.bf16_layers_at_end=2"]).unwrap();
    let four = run(&["training.bf16_layers_at_start=2", "training.bf16_layers_at_end=2"]).unwrap();
    assert!(fp4 < two && two < four && four < bf16, "{fp4} {two} {four} {bf16}");
    // Every layer in BF16 is a BF16 run's decoder (the rest is BF16 in both).
    let all = run(&["training.bf16_layers_at_start=4", "training.bf16_layers_at_end=4"]).unwrap();
    assert!((all - bf16).abs() < 1e-9 * bf16, "{all} against {bf16}");
    // The attention projections in BF16, the MLP's down-projection in MXFP8.
    let modules = run(&["training.module_dtype={attn_qkv: bf16, attn_proj: bf16, mlp_fc2: fp8}"]).unwrap();
    assert!(fp4 < modules && modules < bf16, "{fp4} {modules} {bf16}");
}

#[test]
fn a_bad_precision_setting_names_its_field() {
    let e = run(&["training.bf16_layers_at_end=9"]).unwrap_err().to_string();
    assert!(e.contains("training.bf16_layers_at_end"), "{e}");
    let e = run(&["training.dtype=bf16", "training.module_dtype={attn_qkv: fp8}"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("training.module_dtype.attn_qkv"), "{e}");
    let e = run(&["training.module_dtype={qkv: bf16}"]).unwrap_err().to_string();
    assert!(e.contains("module_dtype") && e.contains("attn_qkv"), "{e}");
}

#[test]
fn a_muon_run_says_so_and_takes_longer() {
    let sets = |extra: &[&str]| -> Vec<String> { extra.iter().map(|s| s.to_string()).collect() };
    let run = |extra: &[&str]| {
        let s = Scenario::from_yaml(RUN, &sets(extra), Path::new(".")).unwrap();
        simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap().report
    };
    let adam = run(&[]);
    let muon = run(&["training.optimizer=dist_muon"]);
    assert!(!adam.parallel.contains("muon"), "{}", adam.parallel);
    assert!(muon.parallel.ends_with(" +dist_muon"), "{}", muon.parallel);
    assert!(
        muon.iteration_time_s > adam.iteration_time_s,
        "Newton-Schulz GEMMs and the all-gather"
    );
    let e = Scenario::from_yaml(
        RUN,
        &sets(&["training.optimizer=dist_muon", "parallel.use_distributed_optimizer=true"]),
        Path::new("."),
    )
    .map_err(|e| e.to_string())
    .and_then(|s| {
        simulate(&s, &RunOptions::default(), &mut |_, _| {})
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(e.contains("training.optimizer"), "{e}");
}
