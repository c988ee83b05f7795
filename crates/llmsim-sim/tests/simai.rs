//! SimAI/AICB workload files: the bundled GPT-3 13B / 128-GPU fixture is what llmsim's writer
//! produces from examples/gpt3-13b-128gpu.yaml, and it runs with the compute time the file says.

use std::path::{Path, PathBuf};

use llmsim_sim::{ImportedRun, RunOptions, Scenario, simulate_imported};
use llmsim_workload::simai;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const FIXTURE: &str = "examples/interop/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt";

#[test]
fn fixture_is_llmsims_own_export_of_the_13b_example() {
    let sc = Scenario::load(&root().join("examples/gpt3-13b-128gpu.yaml"), &[]).unwrap();
    let r = llmsim_sim::resolve(&sc).unwrap();
    let cm = llmsim_sim::compute_model(&sc, r.gpu, r.parallel.world_size()).unwrap();
    let text = simai::export(&r.model, &r.training, &r.parallel, &cm).unwrap();
    let committed = std::fs::read_to_string(root().join(FIXTURE)).unwrap();
    assert!(
        text == committed,
        "regenerate with: llmsim workload export examples/gpt3-13b-128gpu.yaml --format simai --out examples/interop/ --prefix gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048"
    );
}

#[test]
fn fixture_runs_with_the_files_compute_time() {
    let path = root().join(FIXTURE);
    let w = simai::parse(&std::fs::read_to_string(&path).unwrap(), FIXTURE).unwrap();
    assert_eq!((w.header.tp, w.header.all_gpus, w.header.ga), (2, 128, 16));
    let compute_ns: u64 = w.lines.iter().map(|l| l.fwd_ns + l.ig_ns + l.wg_ns).sum();
    let comms = w
        .lines
        .iter()
        .map(|l| [l.fwd, l.ig, l.wg].iter().filter(|c| c.is_some()).count() as u64)
        .sum::<u64>();
    let imp = simai::to_workload(&w).unwrap();
    let sc = Scenario::load_cluster(
        &root().join("examples/interop/cluster-128xh100.yaml"),
        &["network.backend=analytical".into()],
    )
    .unwrap();
    let run = ImportedRun::bare(imp.workload, imp.layout, "simai".into(), String::new());
    let o = simulate_imported(&sc, run, &RunOptions::default(), &mut |_, _| {}).unwrap();
    let r = &o.report;
    // Every rank runs every line's compute once.
    assert!(
        (r.mean.compute_s - compute_ns as f64 * 1e-9).abs() < 1e-9,
        "{} vs {compute_ns} ns",
        r.mean.compute_s
    );
    // One simulated replica (analytical folding), each of its two tensor-parallel ranks' comms.
    assert_eq!(r.collectives, comms);
    let exposed = r.mean.exposed_tp_s + r.mean.exposed_dp_s;
    assert!(
        (r.iteration_time_s - r.mean.compute_s - exposed).abs() < 1e-9,
        "compute and exposed comm fill the iteration"
    );
}
