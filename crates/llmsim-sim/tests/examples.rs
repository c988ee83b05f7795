//! Every bundled example parses, fits in memory and runs (on the analytical backend, which
//! folds data-parallel replicas, to keep the suite fast).

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario, simulate};

#[test]
fn every_example_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir).expect("examples/").map(|e| e.unwrap().path()).collect();
    entries.sort();
    // sweep-*.yaml are sweep files (llmsim-sweep's tests check them).
    let is_scenario =
        |p: &Path| p.extension().is_some_and(|e| e == "yaml") && !p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("sweep-"));
    for p in entries.into_iter().filter(|p| is_scenario(p)) {
        let s = Scenario::load(&p, &["network.backend=analytical".into(), "output.flows=false".into()])
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let o = simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        // A workload file (`workload:`) may carry no FLOPs (SimAI files do not): its MFU is
        // unknown, never a made-up 0.
        // A scenario with `jobs:` has no one MFU: each job's report has its own.
        let in_range = |m: Option<f64>| m.is_some_and(|m| m > 0.0 && m < 1.0);
        let mfu_ok = match o.report.mfu {
            Some(m) => m > 0.0 && m < 1.0,
            None if !s.jobs.is_empty() => o.report.jobs.iter().all(|j| in_range(j.report.mfu)),
            None => s.workload.is_some(),
        };
        assert!(o.report.iteration_time_s > 0.0 && mfu_ok, "{}: mfu {:?}", p.display(), o.report.mfu);
        n += 1;
    }
    assert!(n >= 3, "expected the bundled examples, found {n}");
}
