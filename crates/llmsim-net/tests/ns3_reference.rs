//! The packet engine against the 8 ns-3 reference runs (`../shared/reference/ns3/runs`): each
//! run's `fct.txt` and `pfc.txt` byte for byte, with ns-3's ECN/PFC random streams at counter 218
//! (as `bench/ns3_fidelity.sh`). Skipped where the reference files are not beside the checkout,
//! except under `CI=true`, where that fails.

mod common;

use llmsim_net::packet::ns3::{Ns3Experiment, fct_text, pfc_text};

const REF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/reference/ns3/runs/");

#[test]
fn every_reference_run_is_byte_identical_to_ns3() {
    let root = std::path::PathBuf::from(REF);
    let Ok(dirs) = std::fs::read_dir(&root) else {
        common::missing_reference(&root.display().to_string());
        return;
    };
    let mut runs: Vec<_> = dirs
        .filter_map(|d| d.ok().map(|d| d.path()))
        .filter(|d| d.join("config.txt").exists())
        .collect();
    runs.sort();
    assert!(!runs.is_empty(), "{} holds no run folder with a config.txt", root.display());
    let mut differ = Vec::new();
    for dir in &runs {
        let mut x = Ns3Experiment::load_with(&dir.join("config.txt"), 1, Some(218)).expect("loads");
        x.run();
        let mut order = Vec::new();
        x.engine.drain_completed(&mut order);
        let fct = fct_text(&x.engine, &order).expect("fct");
        let pfc = pfc_text(&x.engine);
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if fct != std::fs::read_to_string(dir.join("fct.txt")).expect("reference fct.txt") {
            differ.push(format!("{name}/fct.txt"));
        }
        if let Ok(want) = std::fs::read_to_string(dir.join("pfc.txt"))
            && pfc != want
        {
            differ.push(format!("{name}/pfc.txt"));
        }
    }
    println!("{} reference runs checked", runs.len());
    assert!(differ.is_empty(), "not byte-identical to ns-3: {differ:?}");
}
