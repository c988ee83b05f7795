//! Design-space sweeps: a sweep spec (base scenario + grid / zip / random axes + filter) is
//! expanded into points, the points run on the batch runner ([`llmsim_sim::batch`], many
//! experiments in one process sharing topologies and workloads), and each result is committed
//! to a results table as it finishes, keyed by the hash of its resolved scenario, so a killed
//! sweep resumes where it stopped. Used by `llmsim sweep` and by the Python package (which adds
//! Ray scale-out, plots and the parallelism search on top).

use std::path::{Path, PathBuf};
use std::time::Instant;

use llmsim_sim::batch::{self, Shared, SharedStats};
use llmsim_sim::batch_engine;
use llmsim_sim::{Outcome, Report, RunOptions, Scenario, SimError};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use thiserror::Error;

pub mod filter;
pub mod spec;
pub mod store;

pub use spec::{Plan, Point, SweepSpec, scenario_key};
pub use store::Store;

/// Why a sweep could not run or store its results.
#[derive(Debug, Error)]
pub enum SweepError {
    /// The sweep file is invalid at `field`.
    #[error("sweep spec {field}: {message}")]
    Spec {
        /// The dotted key of the sweep file at fault.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The results database at `path` failed.
    #[error("results {}: {message}", path.display())]
    Store {
        /// The results database.
        path: PathBuf,
        /// The database's error.
        message: String,
    },
    /// Another sweep holds the results directory.
    #[error(
        "results {}: another sweep is writing to this directory (it holds {}); wait for it to finish, or give this one another output directory",
        dir.display(), lock.display()
    )]
    Locked {
        /// The results directory.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// The results directory holds the results of another spec.
    #[error(
        "results {}: they come from a different sweep spec (fingerprint {stored}; this spec's is {this}); give this sweep another output directory, or pass --merge (Python: merge=True) to add its points to them",
        dir.display()
    )]
    OtherSpec {
        /// The results directory.
        dir: PathBuf,
        /// The fingerprint of the spec whose results it holds.
        stored: String,
        /// This spec's fingerprint.
        this: String,
    },
    /// A point sent to or from another process (a Ray worker) did not decode.
    #[error("point data: {0}")]
    Wire(String),
}

/// Where each metric stands in a report's JSON (`llmsim run --json`, Python's `Report`), as a
/// JSON pointer, and what its value is divided by: the one definition of the metrics, read by
/// [`metrics_of`] for sweep rows and by Python's `Report.metrics`.
const METRIC_SOURCES: [(&str, &str, f64); 21] = [
    ("iteration_time_s", "/iteration_time_s", 1.0),
    ("tokens_per_s", "/tokens_per_s", 1.0),
    ("tokens_per_s_per_gpu", "/tokens_per_s_per_gpu", 1.0),
    ("mfu", "/mfu", 1.0),
    ("hfu", "/hfu", 1.0),
    ("model_tflops_per_gpu", "/model_tflops_per_gpu", 1.0),
    ("memory_gib", "/memory/footprint/total", 1_073_741_824.0),
    ("memory_fraction", "/memory/fraction", 1.0),
    ("compute_s", "/mean/compute_s", 1.0),
    ("exposed_tp_s", "/mean/exposed_tp_s", 1.0),
    ("exposed_cp_s", "/mean/exposed_cp_s", 1.0),
    ("exposed_ep_s", "/mean/exposed_ep_s", 1.0),
    ("exposed_pp_s", "/mean/exposed_pp_s", 1.0),
    ("exposed_dp_s", "/mean/exposed_dp_s", 1.0),
    ("bubble_s", "/mean/bubble_s", 1.0),
    ("idle_s", "/mean/idle_s", 1.0),
    ("exposed_offload_s", "/mean/exposed_offload_s", 1.0),
    ("exposed_host_s", "/mean/exposed_host_s", 1.0),
    ("gpus", "/gpus", 1.0),
    ("microbatches", "/microbatches", 1.0),
    ("sim_wall_s", "/sim_wall_s", 1.0),
];

/// The numeric columns of a result row, in order.
pub const METRICS: [&str; 21] = {
    let mut names = [""; 21];
    let mut i = 0;
    while i < names.len() {
        names[i] = METRIC_SOURCES[i].0;
        i += 1;
    }
    names
};

/// One experiment's result. `status` is `ok`, `error` (the simulation refused it: out of memory,
/// a parallel plan that does not divide, ...) or `invalid` (the point is not a valid scenario).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Hash of the resolved scenario: the point's identity in the results.
    pub key: String,
    /// The point's index in the expanded sweep.
    pub idx: u64,
    /// The point's axis values, a JSON object.
    pub axes: String,
    /// `ok`, `error` or `invalid`.
    pub status: String,
    /// Why the point failed (`error` / `invalid`).
    pub error: Option<String>,
    /// The resolved parallel plan, e.g. `tp2 pp1 dp8 cp1 ep1`.
    pub parallel: Option<String>,
    /// Values of [`METRICS`], in order; none for a failed point.
    pub metrics: Vec<Option<f64>>,
    /// The whole report as JSON, without its wall time (so equal runs give equal text).
    pub report: Option<String>,
}

fn axes_json(p: &Point) -> String {
    let m: serde_json::Map<String, serde_json::Value> = p
        .axes
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or(serde_json::Value::Null)))
        .collect();
    serde_json::Value::Object(m).to_string()
}

/// The metric values of a report, in [`METRICS`] order.
pub fn metrics_of(r: &Report) -> Vec<Option<f64>> {
    metrics_of_json(&serde_json::to_value(r).unwrap_or(serde_json::Value::Null))
}

/// The metric values of a report given as its JSON, in [`METRICS`] order. A metric whose field
/// the JSON lacks, or holds as null (a non-finite number), is `None`: a sweep row's stored report
/// has no `sim_wall_s`.
pub fn metrics_of_json(report: &serde_json::Value) -> Vec<Option<f64>> {
    METRIC_SOURCES
        .iter()
        .map(|(_, at, divisor)| report.pointer(at).and_then(serde_json::Value::as_f64).map(|x| x / divisor))
        .collect()
}

/// The report as JSON without its wall time.
pub fn report_json(r: &Report) -> String {
    without_wall_time(serde_json::to_value(r).unwrap_or(serde_json::Value::Null))
}

fn without_wall_time(mut v: serde_json::Value) -> String {
    if let Some(o) = v.as_object_mut() {
        o.remove("sim_wall_s");
    }
    v.to_string()
}

/// The row of a point and its simulation result.
pub fn row_of(p: &Point, r: Result<Outcome, SimError>) -> Row {
    let mut row = Row {
        key: p.key.clone(),
        idx: p.index,
        axes: axes_json(p),
        status: "ok".into(),
        error: None,
        parallel: None,
        metrics: vec![None; METRICS.len()],
        report: None,
    };
    match r {
        Ok(o) => {
            row.parallel = Some(o.report.parallel.clone());
            // One serialisation for both: the metrics are read from the report's JSON.
            let v = serde_json::to_value(&o.report).unwrap_or(serde_json::Value::Null);
            row.metrics = metrics_of_json(&v);
            row.report = Some(without_wall_time(v));
        }
        Err(e) => {
            row.status = "error".into();
            row.error = Some(e.to_string());
        }
    }
    row
}

fn invalid_row(p: &Point, message: &str) -> Row {
    Row {
        key: p.key.clone(),
        idx: p.index,
        axes: axes_json(p),
        status: "invalid".into(),
        error: Some(message.to_string()),
        parallel: None,
        metrics: vec![None; METRICS.len()],
        report: None,
    }
}

/// Experiments are plain simulations: no trace or flow records are kept.
fn lean(s: &Scenario) -> Scenario {
    let mut s = s.clone();
    s.output.trace = false;
    s.output.flows = false;
    s
}

/// What experiments can share: points equal in these run one after another, so the batch's
/// small caches hit (a random sweep would otherwise rebuild most workloads).
fn share_key(s: &Scenario) -> String {
    serde_json::to_string(&(&s.model, &s.dlrm, &s.training, &s.parallel, &s.cluster, s.seed)).unwrap_or_default()
}

/// Which engine runs a sweep's points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepEngine {
    /// The batch engine for the points that can run on it ([`llmsim_sim::batch_engine`]), the
    /// thread pool for the rest. Default.
    #[default]
    Auto,
    /// Every point on the batch engine; a point that cannot run there is an error that names it
    /// and the fields that keep it off.
    Batch,
    /// Every point on the thread pool (one simulation per point, shared topologies and
    /// workloads).
    Threads,
}

/// How a sweep's points were split between the engines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EngineUse {
    /// Groups of points that share structure on the batch engine.
    pub groups: usize,
    /// Points run on the batch engine.
    pub batched: usize,
    /// Points run on the thread pool.
    pub fallback: usize,
}

/// Runs points on the batch runner (`jobs` threads, 0 = one per core) and hands each row to
/// `on_row` as it finishes, with [`SweepEngine::Auto`]. Invalid points become rows at once.
pub fn run_points(points: &[Point], jobs: usize, shared: &Shared, on_row: impl FnMut(Row)) -> EngineUse {
    run_points_with(points, jobs, shared, SweepEngine::Auto, on_row).expect("auto never refuses a point")
}

/// Most points a [`SweepEngine::Batch`] refusal lists.
const REFUSED_LISTED: usize = 5;

/// Runs points on `engine` (`jobs` threads, 0 = one per core) and hands each row to `on_row` as
/// it finishes. Invalid points become rows at once. Points that share a workload and topology
/// (batch-engine groups first) run next to each other.
///
/// # Errors
/// [`SweepError::Spec`] (field `engine`) with [`SweepEngine::Batch`] when some points cannot run on
/// the batch engine; nothing has run then.
pub fn run_points_with(
    points: &[Point],
    jobs: usize,
    shared: &Shared,
    engine: SweepEngine,
    mut on_row: impl FnMut(Row),
) -> Result<EngineUse, SweepError> {
    let opts = RunOptions::default();
    let mut runnable_idx = Vec::new();
    let mut runnable = Vec::new();
    for (i, p) in points.iter().enumerate() {
        if let Ok(s) = &p.scenario {
            runnable_idx.push(i);
            runnable.push(lean(s));
        }
    }
    let part = match engine {
        SweepEngine::Threads => batch_engine::Partition {
            group: vec![None; runnable.len()],
            groups: 0,
            blockers: vec![Vec::new(); runnable.len()],
        },
        _ => batch_engine::partition(&runnable, &opts),
    };
    if engine == SweepEngine::Batch && part.fallback() > 0 {
        let refused: Vec<String> = part
            .group
            .iter()
            .zip(&part.blockers)
            .enumerate()
            .filter(|(_, (g, _))| g.is_none())
            .take(REFUSED_LISTED)
            .map(|(k, (_, b))| {
                let p = &points[runnable_idx[k]];
                let why: Vec<String> = b.iter().map(ToString::to_string).collect();
                format!("point {} ({}): {}", p.index, axes_json(p), why.join("; "))
            })
            .collect();
        return Err(SweepError::Spec {
            field: "engine".into(),
            message: format!(
                "{} of {} points cannot run on the batch engine: {}{}; run them with --engine auto (the thread pool takes them) or remove them from the sweep",
                part.fallback(),
                runnable.len(),
                refused.join(", "),
                if part.fallback() > REFUSED_LISTED { ", ..." } else { "" }
            ),
        });
    }
    for p in points {
        if let Err(m) = &p.scenario {
            on_row(invalid_row(p, m));
        }
    }
    // Batch groups first (group by group), then the thread pool's points, each by what they
    // share so the caches hit.
    let mut order: Vec<(Option<usize>, String, usize)> = (0..runnable.len()).map(|k| (part.group[k], share_key(&runnable[k]), k)).collect();
    order.sort_by(|a, b| (a.0.is_none(), a.0, &a.1, a.2).cmp(&(b.0.is_none(), b.0, &b.1, b.2)));
    let which: Vec<usize> = order.iter().map(|(_, _, k)| *k).collect();
    let batched: Vec<bool> = which.iter().map(|k| part.group[*k].is_some()).collect();
    let scs: Vec<Scenario> = which.iter().map(|k| runnable[*k].clone()).collect();
    drop(runnable);
    batch::run_pool(
        &scs,
        jobs,
        |i, s| {
            if batched[i] {
                batch_engine::simulate_batched(s, &opts, shared)
            } else {
                llmsim_sim::simulate_shared(s, &opts, &mut |_, _| {}, shared)
            }
        },
        |i, r| row_of(&points[runnable_idx[which[i]]], r),
        |_, row| on_row(row),
    );
    Ok(EngineUse {
        groups: part.groups,
        batched: part.batched(),
        fallback: part.fallback(),
    })
}

/// What a sweep did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Points after filtering and de-duplication.
    pub points: usize,
    /// Already in the results (a resumed sweep).
    pub skipped: usize,
    /// Points simulated by this run.
    pub ran: usize,
    /// Of those, points that gave a report.
    pub ok: usize,
    /// Of those, points the simulator refused (out of memory, an invalid plan, ...).
    pub failed: usize,
    /// Points the spec's filter dropped.
    pub filtered: u64,
    /// Points whose resolved scenario equals an earlier one's.
    pub duplicates: u64,
    /// Wall time of the run, in seconds.
    pub wall_s: f64,
    /// Topologies built, and reused from an earlier point.
    pub topology_builds: u64,
    /// See `topology_builds`.
    pub topology_hits: u64,
    /// Workload programs generated, and reused from an earlier point.
    pub workload_builds: u64,
    /// See `workload_builds`.
    pub workload_hits: u64,
    /// How the points split between the batch engine and the thread pool.
    pub engine: EngineUse,
}

/// Runs the points of `plan` that `store` does not hold yet, committing each row as it
/// finishes; `on_row(row, done, todo)` follows progress. To add a different spec's points to
/// a store, [`Store::claim`] it with `merge` first.
///
/// # Errors
/// [`SweepError::OtherSpec`] when the store holds another spec's results; a results-store
/// error (the rows committed before it stay); [`SweepError::Spec`] when every point ran and
/// failed with one and the same error.
pub fn run_plan(plan: &Plan, store: &Store, jobs: usize, on_row: &mut dyn FnMut(&Row, usize, usize)) -> Result<Summary, SweepError> {
    run_plan_with(plan, store, jobs, SweepEngine::Auto, on_row)
}

/// [`run_plan`] on a chosen engine.
///
/// # Errors
/// As [`run_plan`]; with [`SweepEngine::Batch`], [`SweepError::Spec`] (field `engine`) naming the
/// points that cannot run on the batch engine, before any point runs.
pub fn run_plan_with(
    plan: &Plan,
    store: &Store,
    jobs: usize,
    engine: SweepEngine,
    on_row: &mut dyn FnMut(&Row, usize, usize),
) -> Result<Summary, SweepError> {
    let t0 = Instant::now();
    store.claim(&plan.fingerprint, false)?;
    let done = store.done_keys()?;
    let todo: Vec<Point> = plan.points.iter().filter(|p| !done.contains(&p.key)).cloned().collect();
    store.set_meta("name", &plan.name)?;
    store.set_meta("axes", &serde_json::to_string(&plan.axes).unwrap_or_default())?;
    let mut s = Summary {
        points: plan.points.len(),
        skipped: plan.points.len() - todo.len(),
        filtered: plan.filtered,
        duplicates: plan.duplicates,
        ..Summary::default()
    };
    let shared = Shared::default();
    let mut first_err = None;
    // The failure every failed row shares, if they all share one.
    let mut common_failure: Option<Option<String>> = None;
    let n = todo.len();
    s.engine = run_points_with(&todo, jobs, &shared, engine, |row| {
        if first_err.is_some() {
            return;
        }
        match store.insert(&row) {
            Ok(_) => {
                s.ran += 1;
                if row.status == "ok" {
                    s.ok += 1;
                } else {
                    s.failed += 1;
                    let e = row.error.clone().unwrap_or_default();
                    common_failure = match common_failure.take() {
                        None => Some(Some(e)),
                        Some(Some(c)) if c == e => Some(Some(c)),
                        Some(_) => Some(None),
                    };
                }
                on_row(&row, s.ran, n);
            }
            Err(e) => first_err = Some(e),
        }
    })?;
    if let Some(e) = first_err {
        return Err(e);
    }
    // Every point ran and failed alike (an unknown preset, a model that never fits): a spec
    // error, so the command exits non-zero (the rows stay in the store).
    if s.ran > 0
        && s.ok == 0
        && s.skipped == 0
        && let Some(Some(e)) = &common_failure
    {
        return Err(SweepError::Spec {
            field: "points".into(),
            message: format!(
                "all {} points failed for the same reason: {e}; fix the base, the axis or the filter it names (the failed rows are in {})",
                s.ran,
                store.path().display()
            ),
        });
    }
    let st: SharedStats = shared.stats();
    s.topology_builds = st.topology_builds;
    s.topology_hits = st.topology_hits;
    s.workload_builds = st.workload_builds;
    s.workload_hits = st.workload_hits;
    s.wall_s = t0.elapsed().as_secs_f64();
    Ok(s)
}

/// A point as shipped to another process (a Ray worker): everything needed to run it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WirePoint {
    /// The point's index in the expanded sweep.
    pub index: u64,
    /// Hash of the resolved scenario.
    pub key: String,
    /// The point's axis values.
    pub axes: Vec<(String, serde_json::Value)>,
    /// The scenario tree with the point's overrides.
    pub tree: serde_json::Value,
    /// Where the scenario's relative paths resolve.
    pub base_dir: PathBuf,
    /// The scenario's name (filled from the sweep's name where the base has none).
    pub name: String,
    /// Why the point is not a valid scenario, if it is not.
    pub invalid: Option<String>,
}

impl WirePoint {
    /// The wire form of `p`.
    pub fn of(p: &Point) -> WirePoint {
        WirePoint {
            index: p.index,
            key: p.key.clone(),
            axes: p
                .axes
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or_default()))
                .collect(),
            tree: serde_json::to_value(&p.tree).unwrap_or_default(),
            base_dir: p.base_dir.clone(),
            name: p.scenario.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
            invalid: p.scenario.as_ref().err().cloned(),
        }
    }

    /// Rebuilds the point (re-parsing its scenario).
    ///
    /// # Errors
    /// Malformed point data.
    pub fn point(&self) -> Result<Point, SweepError> {
        let w = |e: serde_yaml_ng::Error| SweepError::Wire(e.to_string());
        let tree: Value = serde_yaml_ng::to_value(&self.tree).map_err(w)?;
        let axes = self
            .axes
            .iter()
            .map(|(k, v)| Ok((k.clone(), serde_yaml_ng::to_value(v).map_err(w)?)))
            .collect::<Result<_, SweepError>>()?;
        let scenario = match &self.invalid {
            Some(m) => Err(m.clone()),
            None => Scenario::from_value(tree.clone(), &self.base_dir)
                .map(|mut s| {
                    s.name.clone_from(&self.name);
                    s
                })
                .map_err(|e| e.to_string()),
        };
        Ok(Point {
            index: self.index,
            key: self.key.clone(),
            axes,
            tree,
            base_dir: self.base_dir.clone(),
            scenario,
        })
    }
}

/// Loads and expands a sweep file.
///
/// # Errors
/// See [`SweepSpec::load`] and [`SweepSpec::expand`].
pub fn plan_file(path: &Path) -> Result<Plan, SweepError> {
    let (spec, dir) = SweepSpec::load(path)?;
    spec.expand(&dir)
}
