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

/// The report quotes the validation's record for the run's class: the 13B GPT example (H100,
/// dense, BF16) is in a class with published runs; the DLRM example and a workload file are not
/// classed at all; the text report says so in its `validated` line.
#[test]
fn the_report_quotes_the_validation_record_of_its_class() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let run = |f: &str| {
        let s = Scenario::load(&dir.join(f), &["network.backend=analytical".into()]).unwrap();
        simulate(&s, &RunOptions::default(), &mut |_, _| {}).unwrap().report
    };
    let gpt = run("gpt3-13b-128gpu.yaml");
    assert_eq!(gpt.fidelity_class.as_deref(), Some("Hopper, dense, BF16/FP16"));
    let f = gpt.fidelity.as_ref().expect("published runs of this class");
    assert_eq!(Some(f), llmsim_sim::fidelity::lookup("Hopper, dense, BF16/FP16").as_ref());
    assert!(f.rows > 0);
    assert!(gpt.render().contains(&format!("validated        {}", f.line())));
    let moe = run("qwen3-30b-a3b-64gpu.yaml");
    assert!(moe.fidelity_class.as_deref().is_some_and(|c| c.contains("MoE")));
    for f in ["dlrm-mlperf-64gpu.yaml", "workload-simai-gpt3-13b-128gpu.yaml"] {
        let r = run(f);
        assert!(r.fidelity_class.is_none() && r.fidelity.is_none(), "{f}");
        assert!(!r.render().contains("validated"), "{f}");
    }
}
