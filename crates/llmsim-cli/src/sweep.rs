//! `llmsim sweep`: expand a sweep file, run its points on this machine's cores in one process,
//! commit each result to `<out>/results.sqlite` as it finishes; a re-run skips finished points.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use llmsim_sweep::{METRICS, Store};

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Sweep file (YAML): `base` scenario, `grid` / `zip` / `random` axes, `filter`.
    pub spec: PathBuf,
    /// Results directory. Default: runs/<sweep name>/.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Experiments run at once (threads). Default: one per core.
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// List the points (and invalid ones with their error) without running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Scale out on a Ray cluster (`auto`, or an address). Needs the Python package:
    /// `pip install .[ray]`, then its `llmsim sweep ... --ray auto`.
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
    /// Experiments per Ray task (Python package only).
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Which engine runs the points. `auto`: the batch engine for the points that share
    /// structure and can run there (flow or analytical backend, pp = cp = ep = 1, TP inside a
    /// server), the thread pool for the rest. `batch`: every point on the batch engine; a point
    /// that cannot run there stops the sweep before it starts, naming the point and the field.
    /// `threads`: every point on the thread pool. `gpu`: not here (see the message).
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,
    /// Add this spec's points to a results directory that holds another spec's results (by
    /// default that is refused, so two specs are not mixed by mistake).
    #[arg(long)]
    pub merge: bool,
}

/// `--engine` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Auto,
    Batch,
    Threads,
    Gpu,
}

pub fn run(a: &SweepArgs) -> Result<()> {
    let engine = match a.engine {
        EngineArg::Auto => llmsim_sweep::SweepEngine::Auto,
        EngineArg::Batch => llmsim_sweep::SweepEngine::Batch,
        EngineArg::Threads => llmsim_sweep::SweepEngine::Threads,
        EngineArg::Gpu => bail!(
            "--engine gpu: the GPU engine runs packet-level CC sweeps of an ns-3 experiment (a sweep file with `ns3:`) in the Python package's `llmsim.batch` (pip install '.[batch]', then its `llmsim sweep SPEC --engine gpu`); flow-level sweeps of a scenario run on the CPU: --engine auto|batch|threads"
        ),
    };
    if is_ns3_spec(&a.spec) {
        bail!(
            "{}: a packet-level CC sweep of an ns-3 experiment (`ns3:`): it runs on the Python package's batch packet engine (`llmsim.batch`): pip install '.[batch]', then `llmsim sweep {} [--engine gpu|batch|threads]` with the package's console script",
            a.spec.display(),
            a.spec.display()
        );
    }
    if a.ray.is_some() {
        bail!(
            "--ray runs through the Python package: `pip install .[ray]`, then `llmsim sweep {} --ray auto`",
            a.spec.display()
        );
    }
    let plan = llmsim_sweep::plan_file(&a.spec)?;
    let invalid = plan.points.iter().filter(|p| p.scenario.is_err()).count();
    outln!(
        "sweep {}: {} points over {} axes ({} filtered out, {} duplicates dropped, {} invalid)",
        plan.name,
        plan.points.len(),
        plan.axes.len(),
        plan.filtered,
        plan.duplicates,
        invalid
    );
    if a.dry_run {
        let mut out = std::io::stdout().lock();
        let r = (|| -> std::io::Result<()> {
            for p in &plan.points {
                let axes: Vec<String> = p
                    .axes
                    .iter()
                    .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
                    .collect();
                match &p.scenario {
                    Ok(_) => writeln!(out, "  {:>5} {} {}", p.index, p.key, axes.join(" "))?,
                    Err(e) => writeln!(out, "  {:>5} {} {}  INVALID: {e}", p.index, p.key, axes.join(" "))?,
                }
            }
            Ok(())
        })();
        return match r {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
            _ => Ok(()),
        };
    }
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(&plan.name));
    let store = Store::open(&out)?;
    store.claim(&plan.fingerprint, a.merge)?;
    let bar = crate::Progress::with_note(
        "{spinner} {pos}/{len} experiments [{bar:40}] {elapsed} elapsed, ETA {eta} ({per_sec})",
        "sweeping",
        "experiments",
        "finished experiments are stored; the same command resumes the sweep",
    );
    let mut on_row = |_: &llmsim_sweep::Row, done: usize, todo: usize| bar.update(done as u64, todo as u64);
    let s = llmsim_sweep::run_plan_with(&plan, &store, a.jobs.unwrap_or(0), engine, &mut on_row);
    bar.finish();
    let s = s?;
    outln!(
        "ran {} ({} ok, {} failed), {} already done; {:.2} s wall, {:.1} experiments/s",
        s.ran,
        s.ok,
        s.failed,
        s.skipped,
        s.wall_s,
        s.ran as f64 / s.wall_s.max(1e-9)
    );
    let e = s.engine;
    outln!(
        "engine: {} groups on the batch engine, {} points batched, {} fell back to the thread pool",
        e.groups,
        e.batched,
        e.fallback
    );
    outln!(
        "shared: {} topologies built for {} experiments, {} workloads built",
        s.topology_builds,
        s.topology_builds + s.topology_hits,
        s.workload_builds
    );
    let it = METRICS.iter().position(|m| *m == "iteration_time_s").expect("a metric");
    let rows = store.rows()?;
    let mut ok: Vec<_> = rows.iter().filter(|r| r.status == "ok").collect();
    ok.sort_by(|x, y| x.metrics[it].partial_cmp(&y.metrics[it]).unwrap_or(std::cmp::Ordering::Equal));
    if !ok.is_empty() {
        outln!("best points (iteration time):");
        for r in ok.iter().take(5) {
            outln!(
                "  {:.4} s  {}  {}",
                r.metrics[it].unwrap_or(f64::NAN),
                r.parallel.as_deref().unwrap_or(""),
                r.axes
            );
        }
    }
    outln!("results: {}", store.path().display());
    Ok(())
}

/// Whether `spec` has a top-level `ns3:` key: a packet-level CC sweep (the Python package's
/// `llmsim.batch.sweep`), not a scenario sweep.
fn is_ns3_spec(spec: &std::path::Path) -> bool {
    std::fs::read_to_string(spec).is_ok_and(|t| {
        t.lines()
            .any(|l| l.strip_prefix("ns3").is_some_and(|r| r.trim_start().starts_with(':')))
    })
}
