//! `SweepEngine::Auto` puts the points that share structure on the batch engine and the rest on the
//! thread pool, and its rows equal the thread pool's, row by row; `SweepEngine::Batch` refuses a
//! sweep with points it cannot run, naming them.

use std::collections::BTreeMap;
use std::path::Path;

use llmsim_sim::Shared;
use llmsim_sweep::{EngineUse, METRICS, Row, SweepEngine, SweepError, SweepSpec, run_points_with};

/// A heterogeneous sweep: pp = 2 points cannot fold (their pipeline sends differ per replica),
/// tp = 3 points are plans that do not divide the heads (an error row from either engine).
const SPEC: &str = "base: { model: { preset: gpt3-13b, num_hidden_layers: 4 }, training: { global_batch_size: 32 },
        cluster: { gpus: 32, topology: { kind: rail-fat-tree, servers_per_segment: 2 } },
        network: { backend: flow },
        compute: { overlap_slowdown: 1.1 },
        parallel: { use_distributed_optimizer: true, overlap_grad_reduce: true } }
grid:
  parallel.tp: [2, 3, 4]
  parallel.pp: [1, 2]
  cluster.gpu: [H100, A100]
  collectives.algo: [auto, ring]
  cluster.topology.nic.bandwidth: [100Gbps, 400Gbps]
";

/// Rows by key, with the wall-time metric (the one value that differs between equal runs)
/// blanked.
fn run(spec: &str, engine: SweepEngine) -> Result<(BTreeMap<String, Row>, EngineUse), SweepError> {
    let plan = SweepSpec::from_yaml(spec).unwrap().expand(Path::new(".")).unwrap();
    let wall = METRICS.iter().position(|m| *m == "sim_wall_s").unwrap();
    let mut rows = BTreeMap::new();
    let used = run_points_with(&plan.points, 2, &Shared::default(), engine, |mut r| {
        r.metrics[wall] = None;
        rows.insert(r.key.clone(), r);
    })?;
    assert_eq!(rows.len(), plan.points.len());
    Ok((rows, used))
}

#[test]
fn auto_batches_what_it_can_and_its_rows_equal_the_thread_pools() {
    let (auto, used) = run(SPEC, SweepEngine::Auto).unwrap();
    let (threads, tused) = run(SPEC, SweepEngine::Threads).unwrap();
    // 48 points: the 16 with tp = 2 or 4 and pp = 2 fall back; the other 32 are batched in four
    // groups (tp 2, tp 4, and the tp = 3 points, which fail the plan check on the batch engine
    // with the single run's error, one group per pp).
    assert_eq!(
        used,
        EngineUse {
            groups: 4,
            batched: 32,
            fallback: 16
        },
        "{used:?}"
    );
    assert_eq!(
        tused,
        EngineUse {
            groups: 0,
            batched: 0,
            fallback: 48
        }
    );
    assert_eq!(
        auto.values().filter(|r| r.status == "error").count(),
        16,
        "tp = 3 does not divide the heads"
    );
    let ok = auto.values().filter(|r| r.status == "ok").count();
    assert_eq!(ok, 32, "every tp 2 / 4 point runs");
    assert_eq!(auto.keys().collect::<Vec<_>>(), threads.keys().collect::<Vec<_>>());
    for (k, a) in &auto {
        assert_eq!(a, &threads[k], "row {k}");
    }
}

#[test]
fn batch_refuses_points_it_cannot_run_and_names_them() {
    let e = run(SPEC, SweepEngine::Batch).unwrap_err().to_string();
    assert!(e.contains("16 of 48 points cannot run on the batch engine"), "{e}");
    assert!(e.contains("parallel.pp: pp=2"), "{e}");
    assert!(e.contains("--engine auto"), "{e}");
    // Without the pp = 2 points every point batches.
    let homogeneous = SPEC.replace("parallel.pp: [1, 2]", "parallel.pp: [1]");
    let (rows, used) = run(&homogeneous, SweepEngine::Batch).unwrap();
    assert_eq!((used.batched, used.fallback), (24, 0));
    assert_eq!(rows.len(), 24);
}
