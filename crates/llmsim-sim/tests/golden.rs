//! Golden end-to-end reports of four small scenarios (dense TP/PP/DP on an oversubscribed
//! leaf-spine with the flow backend; MoE with expert parallelism; interleaved pipeline with
//! context parallelism on the analytical backend; the Llama-3 405B 16k-GPU plan's shape on a
//! rail-optimized fat-tree with the flow backend).
//!
//! These are regression goldens: the files were produced by llmsim itself and pin its current
//! behaviour, so any change in timing shows up in review. After an intended model change,
//! regenerate with `LLMSIM_UPDATE_GOLDEN=1 cargo test -p llmsim-sim --test golden` and explain
//! the diff in the commit.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};
use serde_json::{Value, json};

fn check(name: &str) -> llmsim_sim::Report {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let s = Scenario::load(&dir.join(format!("{name}.yaml")), &[]).expect("scenario");
    let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs");
    let r = &o.report;
    let round = |x: f64| (x * 1e9).round() / 1e9;
    let stages: Vec<Value> = r
        .stages
        .iter()
        .map(|s| {
            let b = &s.breakdown;
            json!([
                round(b.compute_s),
                round(b.exposed_tp_s),
                round(b.exposed_cp_s),
                round(b.exposed_ep_s),
                round(b.exposed_pp_s),
                round(b.exposed_dp_s),
                round(b.bubble_s),
                round(b.idle_s)
            ])
        })
        .collect();
    let got = json!({
        "parallel": r.parallel,
        "iteration_time_s": round(r.iteration_time_s),
        "mfu": round(r.mfu.expect("a model run knows its MFU")),
        "memory_total": r.memory.as_ref().expect("a model run knows its memory").footprint.total,
        "collectives": r.collectives,
        "collectives_on_network": r.collectives_on_network,
        "transfers": r.net.completed,
        "nodes": r.nodes_executed,
        "stages [compute, tp, cp, ep, pp, dp, bubble, idle]": stages,
    });
    let path = dir.join(format!("{name}.json"));
    if std::env::var_os("LLMSIM_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
        return o.report;
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("golden file; see module docs")).unwrap();
    assert_eq!(got, want, "{name}: report differs from {}", path.display());
    o.report
}

#[test]
fn dense_tp_pp_dp() {
    check("dense-tp-pp-dp");
}

#[test]
fn moe_ep() {
    check("moe-ep");
}

#[test]
fn interleaved_cp() {
    check("interleaved-cp");
}

/// The 405B plan's shape (issue 29): the golden pins the run that the engine's and the flow
/// network's cache-friendly tables (branch `flow16k`) must not change (its figures were checked
/// against main's binary at 2ba596a: the whole `--json` summary equal but for wall time), and
/// the default path (`network.fold: auto`, which falls back here) gives the plain run's
/// iteration time to the bit.
#[test]
fn rail_tp_pp_vpp_dp_flow() {
    let auto = check("rail-tp-pp-vpp-dp-flow");
    assert_eq!(auto.fold.as_ref().map(|f| f.outcome), Some("fell back"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let s = Scenario::load(&dir.join("rail-tp-pp-vpp-dp-flow.yaml"), &[]).expect("scenario");
    let opts = RunOptions {
        no_fold: true,
        ..RunOptions::default()
    };
    let plain = simulate(&s, &opts, &mut |_, _| {}).expect("runs").report;
    assert_eq!(auto.iteration_time_s.to_bits(), plain.iteration_time_s.to_bits());
    assert_eq!(auto.net.completed, plain.net.completed);
}
