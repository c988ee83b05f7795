//! `jobs:` (issue 32 §3): several jobs on one fabric. One job is the one-job run exactly; jobs
//! on disjoint, non-interfering hardware do not slow each other; jobs that share links do;
//! mistakes name their field.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, SimError, simulate};

/// A small GPT (4 layers) under TP2, PP2 and DP over the rest.
const MODEL: &str =
    "{ hidden_size: 1024, num_hidden_layers: 4, num_attention_heads: 16, intermediate_size: 4096, vocab_size: 1024, gated_mlp: false }";
const TRAINING: &str = "{ seq_length: 1024, micro_batch_size: 1, global_batch_size: 16 }";
const PARALLEL: &str = "{ tp: 2, pp: 2, use_distributed_optimizer: true, overlap_grad_reduce: true }";

/// 32 GPUs in 8 servers of 4, 2 servers under each of 4 leaves.
fn cluster(spines: u32) -> String {
    format!("cluster: {{ gpu: H100, gpus: 32, gpus_per_node: 4, topology: {{ kind: spine-leaf, hosts_per_leaf: 8, spines: {spines} }} }}\n")
}

fn run(s: &Scenario) -> Result<Outcome, SimError> {
    simulate(s, &RunOptions::default(), &mut |_, _| {})
}

fn job(name: &str, gpus: u32, placement: &str) -> String {
    format!("  - {{ name: {name}, gpus: {gpus}, placement: {placement}, model: {MODEL}, training: {TRAINING}, parallel: {PARALLEL} }}\n")
}

fn jobs_scenario(backend: &str, spines: u32, jobs: &[String]) -> Scenario {
    let text = format!("{}network: {{ backend: {backend} }}\njobs:\n{}", cluster(spines), jobs.concat());
    Scenario::from_yaml(&text, &[], Path::new(".")).expect("valid jobs scenario")
}

/// The report as JSON without what names the run or times the simulator.
fn numbers(r: &llmsim_sim::Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    let m = v.as_object_mut().unwrap();
    for k in ["scenario", "sim_wall_s", "symmetry", "fold"] {
        m.remove(k);
    }
    v
}

/// One job over the whole cluster, packed, gives the one-job scenario's report: the same
/// iteration time to the picosecond, breakdowns, collectives and network counters. Two code
/// paths: the one-job engine loop, and the jobs coordinator with placement and a shared network.
#[test]
fn one_job_is_the_single_job_run_exactly() {
    for backend in ["flow", "analytical", "packet"] {
        // The one-job run simulating every replica, as a jobs run does (the folds are exact too:
        // checked below on flow).
        let single = format!(
            "model: {MODEL}\ntraining: {TRAINING}\nparallel: {PARALLEL}\n{}network: {{ backend: {backend}, fold: off }}\n",
            cluster(4)
        );
        let single_text = single;
        let single = Scenario::from_yaml(&single_text, &[], Path::new(".")).unwrap();
        // The analytical backend folds replicas unless told not to (`--no-fold`).
        let unfolded = RunOptions {
            no_fold: true,
            ..RunOptions::default()
        };
        let s = simulate(&single, &unfolded, &mut |_, _| {}).expect("single job");
        let m = run(&jobs_scenario(backend, 4, &[job("only", 32, "packed")])).expect("one job of jobs");
        assert_eq!(m.report.jobs.len(), 1);
        let j = &m.report.jobs[0];
        assert_eq!(j.servers, (0..8).collect::<Vec<u32>>());
        assert_eq!(
            j.iteration_time_s.to_bits(),
            s.report.iteration_time_s.to_bits(),
            "{backend}: bit-identical iteration time"
        );
        assert_eq!(numbers(&j.report), numbers(&s.report), "{backend}: the same report");
        assert_eq!(j.slowdown, 1.0);
        assert_eq!(m.engine.net, s.engine.net, "{backend}: the same network counters");
        if backend == "flow" {
            // The default one-job run folds replicas where exact: the same iteration time.
            let folded = Scenario::from_yaml(&single_text.replace("fold: off", "fold: auto"), &[], Path::new(".")).unwrap();
            let folded = run(&folded).expect("folded");
            assert_eq!(folded.report.iteration_time_s.to_bits(), j.iteration_time_s.to_bits());
        }
    }
}

/// Issue 29: the one-job case on the packet backend (TP2 PP2 DP8 on the spine-leaf, 2:1 over
/// its uplinks; DCQCN, ECN, PFC), Wormhole (the default) against the exact engine. Its
/// iteration is 5.5-7 ms of pipeline sends and DP rings that collide on leaf uplinks under
/// ECMP. Wormhole froze those contended DCQCN partitions in fast recovery (rate below target,
/// raised at the next 300 us `RP_TIMER`), or below their fair shares between two such timers:
/// -5.1% of the exact engine at the default seed (5.4732 against 5.7677 ms), and from -7.9% to
/// +28.9% over ECMP seeds 1-12 (+127% without memo, seed 2). Such partitions now stay on
/// packets: -0.69% here, within 2.9% over seeds 1-12 (release runs, bench/README.md). The bound,
/// 3%, is that spread; a frozen cycle's error sign is not fixed, so the check is two-sided.
#[test]
fn the_packet_job_on_wormhole_is_within_3_percent_of_the_exact_engine() {
    let text = format!(
        "model: {MODEL}\ntraining: {TRAINING}\nparallel: {PARALLEL}\n{}network: {{ backend: packet, fold: off }}\n",
        cluster(4)
    );
    let at = |sets: &[String]| {
        let s = Scenario::from_yaml(&text, sets, Path::new(".")).unwrap();
        run(&s).expect("packet run").report.iteration_time_s
    };
    let wormhole = at(&[]);
    let exact = at(&["network.fast_forward=off".to_string()]);
    let err = wormhole / exact - 1.0;
    println!(
        "Wormhole {:.4} ms, exact {:.4} ms: {:+.2}%",
        wormhole * 1e3,
        exact * 1e3,
        err * 100.0
    );
    assert!(err.abs() < 0.03, "Wormhole {wormhole} s vs exact {exact} s: {:+.2}%", err * 100.0);
}

/// Two jobs, each packed under its own leaf (two servers of one leaf each, so their traffic
/// never leaves the leaf): nothing is shared, and each job's iteration time with the other
/// equals its time alone to the picosecond.
#[test]
fn jobs_on_disjoint_leaves_are_not_slowed() {
    // The packet backend's exact engine: Wormhole's memo database, shared by the jobs of one
    // run, may let one job's transients reuse the other's (within its error bound).
    for backend in ["flow", "packet, fast_forward: off"] {
        let s = jobs_scenario(backend, 4, &[job("a", 8, "packed"), job("b", 8, "packed")]);
        let o = run(&s).expect("two jobs");
        let [a, b] = &o.report.jobs[..] else { panic!("two jobs") };
        assert_eq!((a.servers.as_slice(), b.servers.as_slice()), (&[0, 1][..], &[2, 3][..]));
        for j in [a, b] {
            assert_eq!(
                j.slowdown, 1.0,
                "{backend} {}: {} vs {}",
                j.name, j.iteration_time_s, j.alone_iteration_time_s
            );
        }
        // Same programs on the same kind of hardware: the same time.
        assert_eq!(a.iteration_time_s.to_bits(), b.iteration_time_s.to_bits(), "{backend}");
        assert_eq!(o.engine.net.submitted, o.engine.net.completed, "every transfer completes");
    }
}

/// The same two jobs spread over the fabric (each on one server of every other leaf... the
/// servers interleave: a on 0,4 / b on 1,5 with 8 free): both cross a single spine, and their
/// gradient all-reduces and pipeline sends share its links. Neither gets faster; one slows.
#[test]
fn jobs_sharing_spine_links_slow_each_other() {
    let s = jobs_scenario("flow", 1, &[job("a", 8, "spread"), job("b", 8, "spread")]);
    let o = run(&s).expect("two jobs");
    let [a, b] = &o.report.jobs[..] else { panic!("two jobs") };
    assert_eq!((a.servers.as_slice(), b.servers.as_slice()), (&[0, 4][..], &[1, 5][..]));
    for j in [a, b] {
        assert!(j.slowdown >= 1.0, "{}: {}", j.name, j.slowdown);
        println!(
            "{}: {:.4} ms together, {:.4} ms alone",
            j.name,
            j.iteration_time_s * 1e3,
            j.alone_iteration_time_s * 1e3
        );
    }
    assert!(
        a.slowdown.max(b.slowdown) > 1.0,
        "sharing the spine costs something: {} {}",
        a.slowdown,
        b.slowdown
    );
    assert_eq!(o.report.iteration_time_s, a.iteration_time_s.max(b.iteration_time_s));
    // Every job's transfers are on the one network.
    let alone = jobs_scenario("flow", 1, &[job("a", 8, "spread")]);
    let alone = run(&alone).unwrap();
    assert!(o.engine.net.completed > alone.engine.net.completed);
}

fn err(text: &str) -> String {
    match Scenario::from_yaml(text, &[], Path::new(".")).and_then(|s| run(&s)) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn mistakes_name_their_field() {
    let base = format!("{}jobs:\n", cluster(4));
    // Too many GPUs together.
    let e = err(&format!("{base}{}{}", job("a", 24, "packed"), job("b", 16, "packed")));
    assert!(e.starts_with("jobs:") && e.contains("need 40 GPUs") && e.contains("has 32"), "{e}");
    // One job larger than the cluster.
    let e = err(&format!("{base}{}", job("a", 64, "packed")));
    assert!(e.contains("need 64 GPUs"), "{e}");
    // Not whole servers.
    let e = err(&format!("{base}{}", job("a", 6, "packed")));
    assert!(e.starts_with("jobs[0].gpus:") && e.contains("gpus_per_node=4"), "{e}");
    // A plan that does not divide the job's GPUs: tp2 x pp2 x cp3 on 8.
    let bad = format!("  - {{ name: a, gpus: 8, model: {MODEL}, training: {TRAINING}, parallel: {{ tp: 2, pp: 2, cp: 3 }} }}\n");
    let e = err(&format!("{base}{bad}"));
    assert!(e.starts_with("jobs[0]") && e.contains("8"), "{e}");
    // Duplicate names.
    let e = err(&format!("{base}{}{}", job("a", 8, "packed"), job("a", 8, "packed")));
    assert!(e.starts_with("jobs[1].name:") && e.contains("jobs[0]"), "{e}");
    // jobs with a top-level model or parallel.
    let e = err(&format!("model: gpt3-13b\n{base}{}", job("a", 8, "packed")));
    assert!(e.starts_with("model:") && e.contains("jobs"), "{e}");
    let e = err(&format!("parallel: {{ tp: 2 }}\n{base}{}", job("a", 8, "packed")));
    assert!(e.starts_with("parallel:"), "{e}");
    // A placement that is not one.
    let e = err(&format!("{base}{}", job("a", 8, "tight")));
    assert!(e.contains("packed, spread or {random: {seed: S}}"), "{e}");
    // An unknown key in a job.
    let e = err(&format!("{base}  - {{ name: a, gpus: 8, model: gpt3-13b, paralel: {{}} }}\n"));
    assert!(e.contains("paralel"), "{e}");
}

/// Placement: packed takes consecutive servers, spread interleaves, random is a seeded
/// shuffle; each job gets its own servers.
#[test]
fn placements() {
    use llmsim_sim::jobs::place;
    let n = std::cell::Cell::new(0);
    let j = |gpus: u32, placement: &str| -> llmsim_sim::scenario::JobSpec {
        n.set(n.get() + 1);
        let name = n.get();
        serde_yaml_ng::from_str(&format!(
            "{{ name: j{name}, gpus: {gpus}, placement: {placement}, model: gpt3-13b }}"
        ))
        .unwrap()
    };
    let p = place(&[j(16, "packed"), j(8, "packed")], 8, 4, 1).unwrap();
    assert_eq!(p, vec![vec![0, 1, 2, 3], vec![4, 5]]);
    let p = place(&[j(16, "spread"), j(16, "spread")], 8, 4, 1).unwrap();
    assert_eq!(p, vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
    let p = place(&[j(8, "packed"), j(8, "spread")], 8, 4, 1).unwrap();
    assert_eq!(p, vec![vec![0, 1], vec![2, 5]]);
    let r = |seed: u64| place(&[j(16, &format!("{{random: {{seed: {seed}}}}}")), j(16, "{random: {}}")], 8, 4, 9).unwrap();
    let (a, b) = (r(7), r(7));
    assert_eq!(a, b, "seeded: deterministic");
    let mut all: Vec<u32> = a.concat();
    all.sort_unstable();
    assert_eq!(all, (0..8).collect::<Vec<_>>(), "every server once");
    assert!((0..20).any(|s| r(s)[0] != a[0]), "the seed changes the shuffle");
}
