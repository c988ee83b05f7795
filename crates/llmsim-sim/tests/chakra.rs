//! Chakra round trip: a generated workload, exported as per-rank Chakra traces, read back and run
//! on the same cluster, gives the same report (iteration time, every rank's breakdown, every
//! count). The three golden scenarios cover TP/PP/DP on the flow backend, MoE with EP, and an
//! interleaved pipeline with CP.

use std::path::Path;

use llmsim_sim::{ImportedRun, Outcome, RunOptions, Scenario, generate, simulate, simulate_imported};
use llmsim_workload::chakra::{self, ImportOptions};
use serde_json::{Value, json};

fn timing(o: &Outcome) -> Value {
    let r = &o.report;
    json!({
        "iteration_time_s": r.iteration_time_s,
        "stages": r.stages.iter().map(|s| serde_json::to_value(&s.breakdown).unwrap()).collect::<Vec<_>>(),
        "ranks": serde_json::to_value(&r.ranks).unwrap(),
        "collectives": r.collectives,
        "collectives_on_network": r.collectives_on_network,
        "transfers": r.net.completed,
        "nodes": r.nodes_executed,
        "net": serde_json::to_value(r.net).unwrap(),
    })
}

fn round_trip(name: &str, no_fold: bool) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let s = Scenario::load(&dir.join(format!("{name}.yaml")), &[]).expect("scenario");
    let opts = RunOptions {
        no_fold,
        ..RunOptions::default()
    };
    let original = simulate(&s, &opts, &mut |_, _| {}).expect("runs");

    let g = generate(&s).expect("generates");
    let e = chakra::export(&g.workload, g.layout, &g.seg_time).expect("exports");
    assert_eq!(e.ranks.len() as u32, g.layout.units() * g.layout.tp);
    let traces: Vec<_> = e
        .ranks
        .iter()
        .enumerate()
        .map(|(r, b)| chakra::decode(b, &format!("{name}.{r}.et"), r as u32).expect("decodes"))
        .collect();
    // The groups go through their JSON text, as on disk.
    let groups = chakra::parse_comm_groups(&serde_json::to_string(&e.groups).unwrap(), "groups.json").expect("groups");
    let imp = chakra::import(&traces, &groups, &ImportOptions::default()).expect("imports");
    assert_eq!(imp.layout, g.layout, "{name}: the ranks fold back into the same tensor-parallel units");

    let mut cluster = s.clone();
    cluster.model = None;
    let run = ImportedRun {
        workload: imp.workload,
        layout: imp.layout,
        label: name.into(),
        parallel: String::new(),
        global_batch: 0,
        seq_length: 0,
    };
    let back = simulate_imported(&cluster, run, &opts, &mut |_, _| {}).expect("imported trace runs");
    assert_eq!(timing(&original), timing(&back), "{name}: the imported trace's report differs");
}

#[test]
fn dense_tp_pp_dp_flow() {
    round_trip("dense-tp-pp-dp", false);
}

#[test]
fn moe_ep_flow() {
    round_trip("moe-ep", false);
}

#[test]
fn interleaved_cp_analytical_unfolded() {
    // Imported workloads never fold data-parallel replicas: compare with the unfolded run.
    round_trip("interleaved-cp", true);
}
