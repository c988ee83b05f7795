//! The results store and the sweep driver: rows are committed once per key, a re-run skips
//! finished points, and every row equals a single run of its scenario.

use std::path::Path;

use llmsim_sim::RunOptions;
use llmsim_sweep::{METRICS, Store, SweepSpec, run_plan};

const SPEC: &str = "base: { model: { preset: gpt3-13b, num_hidden_layers: 4 }, training: { global_batch_size: 16 },
        cluster: { gpus: 16, topology: { kind: rail-fat-tree } },
        output: { trace: false, flows: false } }
grid: { parallel.tp: [1, 2, 3, 4], parallel.pp: [1, 2] }
zip: { cluster.topology.nic.bandwidth: [200Gbps, 400Gbps] }
";

#[test]
fn resume_skips_finished_points_and_rows_match_single_runs() {
    let dir = tempfile::tempdir().unwrap();
    let plan = SweepSpec::from_yaml(SPEC).unwrap().expand(Path::new(".")).unwrap();
    assert_eq!(plan.points.len(), 16);
    let store = Store::open(dir.path()).unwrap();

    // A partial first run: only the first 5 points (as if killed).
    let mut first = plan.clone();
    first.points.truncate(5);
    let s = run_plan(&first, &store, 2, &mut |_, _, _| {}).unwrap();
    assert_eq!((s.ran, s.skipped), (5, 0));

    let mut seen = 0;
    let s = run_plan(&plan, &store, 2, &mut |_, done, todo| {
        seen = done;
        assert_eq!(todo, 11);
    })
    .unwrap();
    assert_eq!((s.ran, s.skipped, seen), (11, 5, 11));
    // One topology per NIC bandwidth, shared by the other points.
    assert!(s.topology_builds <= 4 && s.topology_hits > 0, "{s:?}");

    let rows = store.rows().unwrap();
    assert_eq!(rows.len(), 16);
    let mut keys: Vec<_> = rows.iter().map(|r| r.key.clone()).collect();
    keys.dedup();
    assert_eq!(keys.len(), 16);
    // Inserting a row again is refused (the key is the primary key).
    assert!(!store.insert(&rows[0]).unwrap());

    let it = METRICS.iter().position(|m| *m == "iteration_time_s").unwrap();
    for (r, p) in rows.iter().zip(&plan.points) {
        assert_eq!(r.key, p.key);
        let s = p.scenario.as_ref().unwrap();
        match llmsim_sim::simulate(s, &RunOptions::default(), &mut |_, _| {}) {
            Ok(o) => {
                assert_eq!(r.status, "ok");
                assert_eq!(r.metrics[it], Some(o.report.iteration_time_s));
            }
            Err(e) => {
                assert_eq!(r.status, "error");
                assert_eq!(r.error.as_deref(), Some(e.to_string().as_str()));
            }
        }
    }
    // tp = 3 does not divide 16 GPUs: error rows.
    assert_eq!(rows.iter().filter(|r| r.status == "error").count(), 4);
}

#[test]
fn bundled_sweep_files_expand_to_valid_points() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("sweep-")))
        .collect();
    files.push(root.join("bench/sweep-1000.yaml"));
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let plan = llmsim_sweep::plan_file(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!plan.points.is_empty(), "{}", f.display());
        for p in &plan.points {
            assert!(p.scenario.is_ok(), "{} point {}: {:?}", f.display(), p.index, p.scenario);
        }
    }
}

#[test]
fn a_second_sweep_on_one_directory_is_refused_while_the_first_runs() {
    let dir = tempfile::tempdir().unwrap();
    let first = Store::open(dir.path()).unwrap();
    let e = Store::open(dir.path()).err().expect("a second store is refused");
    assert!(matches!(e, llmsim_sweep::SweepError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("another sweep is writing"), "{e}");
    drop(first);
    // The lock goes with the store (and with its process, killed or not).
    Store::open(dir.path()).unwrap();
}

#[test]
fn a_different_spec_is_refused_unless_merged() {
    let dir = tempfile::tempdir().unwrap();
    let small = |extra: &str| {
        let mut p = SweepSpec::from_yaml(&format!("{SPEC}{extra}"))
            .unwrap()
            .expand(Path::new("."))
            .unwrap();
        p.points.truncate(1);
        p
    };
    let a = small("");
    let b = small("filter: 'parallel.tp <= 2'\n");
    assert_ne!(a.fingerprint, b.fingerprint);
    let store = Store::open(dir.path()).unwrap();
    run_plan(&a, &store, 1, &mut |_, _, _| {}).unwrap();
    // The same spec again: resumed.
    assert_eq!(run_plan(&a, &store, 1, &mut |_, _, _| {}).unwrap().skipped, 1);
    let e = run_plan(&b, &store, 1, &mut |_, _, _| {}).unwrap_err();
    assert!(matches!(e, llmsim_sweep::SweepError::OtherSpec { .. }), "{e}");
    assert!(e.to_string().contains("--merge"), "{e}");
    // Claimed with merge, it runs; the old fingerprint is kept.
    store.claim(&b.fingerprint, true).unwrap();
    run_plan(&b, &store, 1, &mut |_, _, _| {}).unwrap();
    assert_eq!(store.meta("fingerprint").unwrap(), Some(b.fingerprint.clone()));
    assert_eq!(store.meta("merged").unwrap(), Some(a.fingerprint.clone()));
}

/// A store written before a metric existed (here: before `exposed_offload_s`) is opened, its
/// table gains the column, and the sweep resumes into it: the old row reads back with the new
/// metric unknown, a new row stores every metric.
#[test]
fn a_store_from_before_a_metric_gains_its_column() {
    let dir = tempfile::tempdir().unwrap();
    let old: Vec<&str> = METRICS.iter().copied().filter(|m| *m != "exposed_offload_s").collect();
    assert_eq!(old.len(), METRICS.len() - 1, "exposed_offload_s is a metric");
    {
        let c = rusqlite::Connection::open(dir.path().join("results.sqlite")).unwrap();
        let cols: String = old.iter().map(|m| format!(", {m} REAL")).collect();
        c.execute_batch(&format!(
            "CREATE TABLE results (key TEXT PRIMARY KEY, idx INTEGER NOT NULL, axes TEXT NOT NULL,
               status TEXT NOT NULL, error TEXT, parallel TEXT{cols}, report TEXT);
             INSERT INTO results (key, idx, axes, status, iteration_time_s) VALUES ('old', 0, '{{}}', 'ok', 1.5);"
        ))
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let rows = store.rows().unwrap();
    assert_eq!(rows.len(), 1);
    let at = |name: &str| METRICS.iter().position(|m| *m == name).unwrap();
    assert_eq!(rows[0].metrics[at("iteration_time_s")], Some(1.5));
    assert_eq!(rows[0].metrics[at("exposed_offload_s")], None);
    // New points land in the migrated table with every metric.
    let plan = SweepSpec::from_yaml(SPEC).unwrap().expand(Path::new(".")).unwrap();
    let mut one = plan.clone();
    one.points.truncate(2);
    run_plan(&one, &store, 1, &mut |_, _, _| {}).unwrap();
    let rows = store.rows().unwrap();
    assert_eq!(rows.len(), 3);
    let ok: Vec<_> = rows.iter().filter(|r| r.key != "old" && r.status == "ok").collect();
    assert!(!ok.is_empty(), "{rows:?}");
    for r in ok {
        assert!(r.metrics.iter().all(Option::is_some), "{:?}", r.metrics);
    }
}
