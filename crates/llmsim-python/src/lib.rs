//! The `llmsim._native` extension module: scenario loading, single runs, the batch runner and
//! sweep driver, the results store, and the command-line tool itself. The pure-Python package
//! `llmsim` (python/llmsim) is the public API on top. Long calls release the GIL.
//!
//! Data crosses the boundary as JSON text (reports, points, rows): one copy, parsed by Python's
//! C json module; a results table is read by Python straight from SQLite.

use std::path::{Path, PathBuf};

use llmsim_core::SimTime;
use llmsim_net::packet::ns3::{Ns3Experiment, flow_paths};
use llmsim_net::packet::{FlowSpec, PacketEngine};
use llmsim_sim::{RunOptions, Scenario as SimScenario, SimError};
use llmsim_sweep::{Row, Store, SweepError as SwError, SweepSpec, WirePoint};
use llmsim_workload::WorkloadError as WlError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use serde_yaml_ng::Value;

create_exception!(_native, LlmsimError, PyException, "Base class of every llmsim error.");
create_exception!(
    _native,
    ScenarioError,
    LlmsimError,
    "A scenario file or value is invalid (names the field)."
);
create_exception!(
    _native,
    WorkloadError,
    LlmsimError,
    "Model, training or parallel settings are invalid."
);
create_exception!(_native, OutOfMemoryError, WorkloadError, "The model does not fit in GPU memory.");
create_exception!(
    _native,
    ComputeError,
    LlmsimError,
    "GPU catalog, efficiency table or op database problem."
);
create_exception!(_native, TopologyError, LlmsimError, "The topology cannot be built as specified.");
create_exception!(_native, NetworkError, LlmsimError, "A network backend error.");
create_exception!(_native, CollectiveError, LlmsimError, "A collective (NCCL model) error.");
create_exception!(
    _native,
    SimulationError,
    LlmsimError,
    "The simulation itself failed (a bug: please report)."
);
create_exception!(_native, SweepError, LlmsimError, "A sweep spec or results store error.");

fn sim_err(e: SimError) -> PyErr {
    let m = e.to_string();
    match e {
        SimError::Scenario { .. } => ScenarioError::new_err(m),
        SimError::Workload(WlError::OutOfMemory { .. }) | SimError::TooLarge { .. } => OutOfMemoryError::new_err(m),
        SimError::Workload(_) | SimError::Import(_) => WorkloadError::new_err(m),
        SimError::Compute(_) | SimError::ComputeFile { .. } => ComputeError::new_err(m),
        SimError::Topo(_) => TopologyError::new_err(m),
        SimError::Net(_) => NetworkError::new_err(m),
        SimError::Ccl(_) => CollectiveError::new_err(m),
        SimError::Deadlock { .. } | SimError::Internal(_) => SimulationError::new_err(m),
    }
}

fn sweep_err(e: SwError) -> PyErr {
    SweepError::new_err(e.to_string())
}

fn json_err(e: impl std::fmt::Display) -> PyErr {
    SweepError::new_err(format!("point data: {e}"))
}

/// A scenario: its YAML tree (with overrides applied), the directory its relative paths resolve
/// against, and the parsed, validated form.
#[pyclass(module = "llmsim._native", frozen)]
#[derive(Clone)]
struct Scenario {
    tree: Value,
    base_dir: PathBuf,
    inner: SimScenario,
}

impl Scenario {
    fn build(tree: Value, base_dir: PathBuf, name: &str) -> PyResult<Scenario> {
        let mut inner = SimScenario::from_value(tree.clone(), &base_dir).map_err(sim_err)?;
        if inner.name.is_empty() {
            inner.name = name.to_string();
        }
        Ok(Scenario { tree, base_dir, inner })
    }
}

fn parse_sets(tree: &mut Value, sets: &[String]) -> PyResult<()> {
    llmsim_sim::scenario::apply_sets(tree, sets).map_err(sim_err)
}

#[pymethods]
impl Scenario {
    /// Reads a scenario file and applies `key.path=value` overrides (as `--set`).
    #[staticmethod]
    #[pyo3(signature = (path, sets = Vec::new()))]
    fn from_yaml(path: PathBuf, sets: Vec<String>) -> PyResult<Scenario> {
        let text = std::fs::read_to_string(&path).map_err(|e| ScenarioError::new_err(format!("{}: {e}", path.display())))?;
        let mut tree: Value = llmsim_sim::yaml::parse(&text).map_err(|e| ScenarioError::new_err(format!("{}: {e}", path.display())))?;
        parse_sets(&mut tree, &sets)?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
        let mut s = Scenario::build(tree, path.parent().map(Path::to_path_buf).unwrap_or_default(), &name)?;
        // The report's header lists them, as `llmsim run --set` does.
        s.inner.overrides = sets;
        Ok(s)
    }

    /// Parses scenario YAML (or JSON) text; relative paths resolve against `base_dir`.
    #[staticmethod]
    #[pyo3(signature = (text, base_dir = PathBuf::from(".")))]
    fn from_str(text: &str, base_dir: PathBuf) -> PyResult<Scenario> {
        let tree: Value = llmsim_sim::yaml::parse(text).map_err(|e| ScenarioError::new_err(e.to_string()))?;
        Scenario::build(tree, base_dir, "scenario")
    }

    /// A copy with `key.path=value` overrides applied.
    fn with_sets(&self, sets: Vec<String>) -> PyResult<Scenario> {
        let mut tree = self.tree.clone();
        parse_sets(&mut tree, &sets)?;
        let mut s = Scenario::build(tree, self.base_dir.clone(), &self.inner.name)?;
        s.inner.name.clone_from(&self.inner.name);
        s.inner.overrides = self.inner.overrides.iter().cloned().chain(sets).collect();
        Ok(s)
    }

    /// The scenario tree as given (with overrides), as JSON.
    fn tree_json(&self) -> String {
        serde_json::to_string(&self.tree).unwrap_or_default()
    }

    /// The resolved scenario (every default filled in), as JSON.
    fn resolved_json(&self) -> String {
        serde_json::to_string(&self.inner).unwrap_or_default()
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn base_dir(&self) -> PathBuf {
        self.base_dir.clone()
    }

    /// Hash of the resolved scenario: its key in sweep results.
    #[getter]
    fn key(&self) -> String {
        llmsim_sweep::scenario_key(&self.inner)
    }

    /// Validates the parallel plan against the model and checks memory; returns the per-GPU
    /// memory footprint as JSON. Raises what `run` would raise for these reasons.
    fn check(&self, py: Python<'_>) -> PyResult<String> {
        let s = self.inner.clone();
        let r = py.detach(move || llmsim_sim::resolve(&s).map(|r| serde_json::to_string(&r.memory).unwrap_or_default()));
        r.map_err(sim_err)
    }

    fn __repr__(&self) -> String {
        format!("Scenario({:?}, key={})", self.inner.name, self.key())
    }
}

/// The metrics of a report (its JSON), in `METRICS` order: what a sweep row holds, from the one
/// definition in llmsim-sweep.
#[pyfunction]
fn report_metrics(report: &str) -> PyResult<Vec<Option<f64>>> {
    let v: serde_json::Value = serde_json::from_str(report).map_err(json_err)?;
    Ok(llmsim_sweep::metrics_of_json(&v))
}

/// Simulates one training iteration; returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (scenario, ideal_comm = false, no_fold = false))]
fn run(py: Python<'_>, scenario: &Scenario, ideal_comm: bool, no_fold: bool) -> PyResult<String> {
    let mut s = scenario.inner.clone();
    s.output.trace = false;
    s.output.flows = false;
    let opts = RunOptions {
        ideal_comm,
        no_fold,
        ..RunOptions::default()
    };
    let r =
        py.detach(move || llmsim_sim::simulate(&s, &opts, &mut |_, _| {}).map(|o| serde_json::to_string(&o.report).unwrap_or_default()));
    r.map_err(sim_err)
}

/// A sweep spec from its text, named `name` where it names itself nothing.
fn named_spec(spec: &str, name: String) -> Result<SweepSpec, SwError> {
    let mut sp = SweepSpec::from_yaml(spec)?;
    if sp.name.is_empty() {
        sp.name = name;
    }
    Ok(sp)
}

/// Expands a sweep spec (YAML/JSON text; relative paths against `dir`). Returns JSON:
/// `{name, axes, filtered, duplicates, points: [wire point]}`.
/// `name` is used where the spec has none.
#[pyfunction]
#[pyo3(signature = (spec, dir, name = "sweep"))]
fn plan_sweep(py: Python<'_>, spec: &str, dir: PathBuf, name: &str) -> PyResult<String> {
    let (spec, name) = (spec.to_string(), name.to_string());
    py.detach(move || {
        let plan = named_spec(&spec, name)?.expand(&dir)?;
        let points: Vec<WirePoint> = plan.points.iter().map(WirePoint::of).collect();
        Ok(serde_json::json!({
            "name": plan.name, "axes": plan.axes, "filtered": plan.filtered,
            "duplicates": plan.duplicates, "points": points,
        })
        .to_string())
    })
    .map_err(sweep_err)
}

/// Runs wire points (a JSON list, as `plan_sweep` gives) on `jobs` threads (0: one per core);
/// returns their rows as a JSON list, in completion order. What a Ray task calls.
#[pyfunction]
fn run_points(py: Python<'_>, points: &str, jobs: usize) -> PyResult<String> {
    let wire: Vec<WirePoint> = serde_json::from_str(points).map_err(json_err)?;
    py.detach(move || {
        let pts = wire.iter().map(WirePoint::point).collect::<Result<Vec<_>, _>>()?;
        let mut rows = Vec::with_capacity(pts.len());
        llmsim_sweep::run_points(&pts, jobs, &llmsim_sim::Shared::default(), |r| rows.push(r));
        Ok(serde_json::to_string(&rows).unwrap_or_default())
    })
    .map_err(sweep_err)
}

/// Runs a sweep into the results directory `out` (resuming: finished points are skipped), with
/// a progress bar on stderr if `progress`. Returns the summary as JSON. A directory that holds
/// another spec's results is refused unless `merge`.
#[pyfunction]
#[pyo3(signature = (spec, dir, out, jobs = 0, progress = true, name = "sweep", merge = false))]
#[allow(clippy::too_many_arguments)]
fn run_sweep(
    py: Python<'_>,
    spec: &str,
    dir: PathBuf,
    out: PathBuf,
    jobs: usize,
    progress: bool,
    name: &str,
    merge: bool,
) -> PyResult<String> {
    let (spec, name) = (spec.to_string(), name.to_string());
    py.detach(move || {
        let plan = named_spec(&spec, name)?.expand(&dir)?;
        let store = Store::open(&out)?;
        store.claim(&plan.fingerprint, merge)?;
        let bar = if progress {
            indicatif::ProgressBar::new(0)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} experiments [{bar:40}] {elapsed} elapsed, ETA {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        let s = llmsim_sweep::run_plan(&plan, &store, jobs, &mut |_, done, todo| {
            bar.set_length(todo as u64);
            bar.set_position(done as u64);
        });
        bar.finish_and_clear();
        Ok(serde_json::to_string(&s?).unwrap_or_default())
    })
    .map_err(sweep_err)
}

/// Keys already in the results directory `out`.
#[pyfunction]
fn store_done_keys(out: PathBuf) -> PyResult<Vec<String>> {
    let st = Store::open(&out).map_err(sweep_err)?;
    Ok(st.done_keys().map_err(sweep_err)?.into_iter().collect())
}

/// Commits rows (a JSON list, as `run_points` gives) to the results in `out`, each in its own
/// transaction; returns how many were new.
#[pyfunction]
fn store_insert(out: PathBuf, rows: &str, name: &str, axes: Vec<String>) -> PyResult<usize> {
    let rows: Vec<Row> = serde_json::from_str(rows).map_err(json_err)?;
    let st = Store::open(&out).map_err(sweep_err)?;
    st.set_meta("name", name).map_err(sweep_err)?;
    st.set_meta("axes", &serde_json::to_string(&axes).unwrap_or_default())
        .map_err(sweep_err)?;
    let mut n = 0;
    for r in &rows {
        n += usize::from(st.insert(r).map_err(sweep_err)?);
    }
    Ok(n)
}

/// Runs the `llmsim` command-line tool in this process (argv includes the program name);
/// returns its exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(move || llmsim_cli::main_with(argv))
}

fn ns3_load(config: &Path, seed: u64) -> PyResult<Ns3Experiment> {
    Ns3Experiment::load(config, seed).map_err(|e| NetworkError::new_err(e.to_string()))
}

/// What the time-stepped batch engine (python/llmsim/batch) needs of an ns-3 experiment, as JSON:
/// its directed links (ns-3 node ids, bit/s, ps), each flow's data path as link indices and the
/// links its ACKs take (the exact engine's ECMP choices), and the parsed parameters of
/// `config.txt`.
#[pyfunction]
fn ns3_batch_inputs(py: Python<'_>, config: PathBuf) -> PyResult<String> {
    py.detach(move || {
        let x = ns3_load(&config, 1)?;
        let e = &x.engine;
        let topo = e.topology();
        let id = |n: llmsim_core::NodeId| e.ns3_id(n.0).unwrap_or(u32::MAX);
        let mut index = std::collections::HashMap::new();
        let links: Vec<serde_json::Value> = topo
            .links()
            .iter()
            .enumerate()
            .map(|(i, l)| {
                index.insert((id(l.src), id(l.dst)), i);
                serde_json::json!({
                    "src": id(l.src),
                    "dst": id(l.dst),
                    "src_is_host": topo.is_host(l.src),
                    "bandwidth_bps": l.bandwidth.bps(),
                    "delay_ps": l.latency.as_ps(),
                })
            })
            .collect();
        let paths = flow_paths(e);
        let ack_links = ack_links(&x)?;
        let mut flows = Vec::with_capacity(paths.len());
        for (f, nodes) in paths.iter().enumerate() {
            let r = e
                .flow_result(f as u32)
                .ok_or_else(|| SimulationError::new_err(format!("flow {f} missing")))?;
            let path: Vec<usize> = nodes
                .windows(2)
                .map(|w| index.get(&(w[0], w[1])).copied())
                .collect::<Option<_>>()
                .ok_or_else(|| SimulationError::new_err(format!("flow {f}: a path hop is not a link")))?;
            flows.push(serde_json::json!({
                "src": id(r.src),
                "dst": id(r.dst),
                "size_bytes": r.size,
                "start_ps": r.start.as_ps(),
                "standalone_fct_ns": r.standalone_fct.as_ns(),
                "path": path,
                "ack_links": ack_links[f].iter().filter(|l| !path.contains(l)).collect::<Vec<_>>(),
            }));
        }
        let c = e.config();
        let ecn: Vec<serde_json::Value> = c
            .ecn_map
            .iter()
            .map(|t| serde_json::json!({"rate_bps": t.rate_bps, "kmin_bytes": t.kmin_bytes, "kmax_bytes": t.kmax_bytes, "pmax": t.pmax}))
            .collect();
        let cfg = serde_json::json!({
            "cc": c.cc.name(),
            "mtu_bytes": c.mtu,
            "data_packet_bytes": c.data_packet_bytes(c.mtu),
            "ack_packet_bytes": c.ack_packet_bytes(),
            "has_win": c.has_win,
            "var_win": c.var_win,
            "global_t": c.global_t,
            "rate_bound": c.rate_bound,
            "ecn": c.ecn,
            "ecn_map": ecn,
            "buffer_bytes": c.buffer_bytes,
            "reserve_bytes": c.reserve_bytes,
            "resume_offset_bytes": c.resume_offset_bytes,
            "pfc_shift": c.pfc_shift,
            "alpha_resume_interval_ps": c.alpha_resume_interval.as_ps(),
            "rate_decrease_interval_ps": c.rate_decrease_interval.as_ps(),
            "rp_timer_ps": c.rp_timer.as_ps(),
            "clamp_target_rate": c.clamp_target_rate,
            "ewma_gain": c.ewma_gain,
            "fast_recovery_times": c.fast_recovery_times,
            "rate_on_first_cnp": c.rate_on_first_cnp,
            "rate_ai_bps": c.rate_ai_bps,
            "rate_hai_bps": c.rate_hai_bps,
            "min_rate_bps": c.min_rate_bps,
            "fast_react": c.fast_react,
            "u_target": c.u_target,
            "mi_thresh": c.mi_thresh,
            "stop_time_ps": x.config.stop_time.as_ps(),
        });
        let out = serde_json::json!({"links": links, "flows": flows, "config": cfg, "num_hosts": topo.num_hosts()});
        Ok(out.to_string())
    })
}

/// The links each flow's packets touch when it is sent alone as one byte on a fresh engine over the
/// same topology, flows added in the same order (so each gets the same source port and hash): its
/// data path and its ACKs' path (their own ECMP hash, which the engine does not expose).
fn ack_links(x: &Ns3Experiment) -> PyResult<Vec<Vec<usize>>> {
    let net = |e: llmsim_net::packet::PacketError| NetworkError::new_err(e.to_string());
    let name = x.topology_path.display().to_string();
    let text = std::fs::read_to_string(&x.topology_path).map_err(|e| NetworkError::new_err(format!("{name}: {e}")))?;
    let imp = llmsim_topo::ns3::parse_ns3(&text, &name, 1).map_err(|e| NetworkError::new_err(e.to_string()))?;
    let nl = imp.topology.num_links();
    let mut g = PacketEngine::new(std::sync::Arc::new(imp.topology), Some(imp.file_ids), x.config.packet.clone()).map_err(net)?;
    let e = &x.engine;
    let gap = SimTime::from_us(100);
    for f in 0..e.num_flows() as u32 {
        let r = e
            .flow_result(f)
            .ok_or_else(|| SimulationError::new_err(format!("flow {f} missing")))?;
        g.add_flow(FlowSpec {
            src: r.src,
            dst: r.dst,
            size: 1,
            start: SimTime::from_ps(gap.as_ps() * u64::from(f)),
            pg: 3,
            dport: r.dport,
            tag: u64::from(f),
            flow_hash: u64::from(f),
        })
        .map_err(net)?;
    }
    let mut before = vec![0u64; nl];
    let mut out = Vec::with_capacity(e.num_flows());
    for f in 0..e.num_flows() as u64 {
        g.run_until(SimTime::from_ps(gap.as_ps() * (f + 1) - 1));
        let mut links = Vec::new();
        for (l, b) in before.iter_mut().enumerate() {
            let now = g.link_tx_bytes(l as u32).unwrap_or(0);
            if now > *b {
                links.push(l);
            }
            *b = now;
        }
        out.push(links);
    }
    Ok(out)
}

/// Runs an ns-3 experiment on the exact (event-driven) packet engine; returns each flow's FCT
/// in ns, in the flow file's order (0 for a flow unfinished at the stop time).
#[pyfunction]
#[pyo3(signature = (config, seed = 1))]
fn ns3_exact_fct_ns(py: Python<'_>, config: PathBuf, seed: u64) -> PyResult<Vec<u64>> {
    py.detach(move || {
        let mut x = ns3_load(&config, seed)?;
        x.run();
        let e = &x.engine;
        Ok((0..e.num_flows() as u32)
            .map(|f| e.flow_result(f).filter(|r| r.finish.as_ps() > 0).map_or(0, |r| r.fct().as_ns()))
            .collect())
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Scenario>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(report_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(plan_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(run_points, m)?)?;
    m.add_function(wrap_pyfunction!(run_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(store_done_keys, m)?)?;
    m.add_function(wrap_pyfunction!(store_insert, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(ns3_batch_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(ns3_exact_fct_ns, m)?)?;
    m.add("METRICS", llmsim_sweep::METRICS.to_vec())?;
    m.add("RESULTS_FILE", llmsim_sweep::store::FILE)?;
    m.add("LlmsimError", py.get_type::<LlmsimError>())?;
    m.add("ScenarioError", py.get_type::<ScenarioError>())?;
    m.add("WorkloadError", py.get_type::<WorkloadError>())?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    m.add("ComputeError", py.get_type::<ComputeError>())?;
    m.add("TopologyError", py.get_type::<TopologyError>())?;
    m.add("NetworkError", py.get_type::<NetworkError>())?;
    m.add("CollectiveError", py.get_type::<CollectiveError>())?;
    m.add("SimulationError", py.get_type::<SimulationError>())?;
    m.add("SweepError", py.get_type::<SweepError>())?;
    Ok(())
}
