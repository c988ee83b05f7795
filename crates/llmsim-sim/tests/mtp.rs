//! Multi-token prediction in a whole run (`training.mtp_num_layers`): it takes time on the output
//! layer's stage, the embedding-group all-reduce appears for an untied model under pipelining,
//! and the report says what ran.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, SimError, simulate};

/// Four H100s, two pipeline stages of a 4-layer DeepSeek-V3-shaped model (MLA, one dense layer,
/// then MoE layers), untied embeddings, the checkpoint's one MTP module.
const DSV3: &str = "
model: { preset: deepseek-v3, num_hidden_layers: 4, first_k_dense_layers: 1, num_experts: 8, num_experts_per_tok: 2, num_nextn_predict_layers: 1 }
training: { seq_length: 1024, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 2, ep: 2 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 4, topology: { kind: flat } }
output: { flows: false }
";

fn run(sets: &[&str]) -> Result<llmsim_sim::Outcome, SimError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(DSV3, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {})
}

#[test]
fn mtp_takes_time_and_the_report_says_what_ran() {
    let off = run(&[]).unwrap();
    assert!(
        off.report.model.contains("without its 1 MTP module") && off.report.model.contains("training.mtp_num_layers"),
        "{}",
        off.report.model
    );
    let one = run(&["training.mtp_num_layers=1"]).unwrap();
    assert!(one.report.model.ends_with("+ MTP 1 depth"), "{}", one.report.model);
    assert!(
        one.report.iteration_time_s > off.report.iteration_time_s,
        "an MoE layer and a head more a micro-batch"
    );
    // The untied embedding's copy on the last stage is kept in step with stage 0's.
    let embd = |o: &llmsim_sim::Outcome| {
        o.report
            .collectives_by_group
            .iter()
            .find(|g| g.group == "embd")
            .map_or(0, |g| g.collectives)
    };
    assert_eq!(embd(&off), 0, "untied, no MTP: no embedding group");
    assert!(embd(&one) > 0);
    let two = run(&["training.mtp_num_layers=2", "training.mtp_repeated_layer=true"]).unwrap();
    assert!(two.report.model.ends_with("+ MTP 2 depths (one block)"), "{}", two.report.model);
    assert!(two.report.iteration_time_s > one.report.iteration_time_s);
}

#[test]
fn a_bad_mtp_setting_names_its_field() {
    let e = run(&["training.mtp_num_layers=100000"]).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("training.mtp_num_layers"), "{e}");
    let e = Scenario::from_yaml(DSV3, &["training.mtp_num_layers=x".to_string()], Path::new("."))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("mtp_num_layers"), "{e}");
}
