//! A scenario's run: generate (or take) the workload, time its segments, build the cluster and
//! network, run the engine and build the report.

use std::sync::Arc;
use std::time::Instant;

use llmsim_core::SimTime;
use llmsim_topo::Topology;
use llmsim_workload::dag::Workload;
use llmsim_workload::dlrm::{self, DlrmConfig};
use llmsim_workload::megatron;
use llmsim_workload::{TrainingConfig, memory};

use crate::fold::{self, FlowFold};
use crate::ops::{OpRow, op_rows, time_segments};
use crate::setup::{TpOverlapTimer, cluster_setup, compute_model, resolve, tp_overlap_timer, transformer_info};
use crate::{Backend, EngineRun, Layout, Report, Scenario, Shared, SimError, engine, estimate, report, scenario};

/// The flow backend's report line where it simulates every replica.
pub(crate) const FLOW_PLAIN: &str = "flow fast path: max-min filling over shared links and each flow's tightest own link; arrivals at the current time kept off the event heap (exact: bit-identical rates); every data-parallel replica simulated (their traffic can share links)";

/// Everything a run produced.
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// The engine's result, with the spans and flows the exporters write.
    pub engine: EngineRun,
    /// Shared with other experiments of a batch that generate the same workload.
    pub workload: Arc<Workload>,
    /// The per-op table.
    pub ops: Vec<OpRow>,
    /// The parallel layout: how ranks form units.
    pub layout: Layout,
    /// The topology the run used.
    pub topo: Arc<Topology>,
    /// What the run was estimated to cost before it started.
    pub estimate: estimate::Estimate,
}

/// Knobs that are not part of the scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Every communication takes zero time.
    pub ideal_comm: bool,
    /// Simulate every data-parallel replica even where folding them is exact.
    pub no_fold: bool,
    /// Run even when the estimated memory is above the machine's available memory.
    pub ignore_memory_estimate: bool,
    /// Called with the run's own estimate (memory, time, sizes) once it is known, before the
    /// simulation starts (the CLI prints it so a long run says what to expect).
    pub on_estimate: Option<fn(&estimate::Estimate)>,
    /// Where the run stands while it runs, for a progress line on another thread (the engine
    /// writes it; [`engine::LiveStatus`]). `None`: not recorded.
    pub live: Option<std::sync::Arc<engine::LiveStatus>>,
}

/// Runs a scenario.
///
/// # Errors
/// See [`SimError`].
pub fn simulate(s: &Scenario, opts: &RunOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<Outcome, SimError> {
    simulate_shared(s, opts, progress, &Shared::default())
}

/// Runs a scenario, reusing the topologies and workloads in `shared` (and adding its own), as
/// the experiments of one batch do.
///
/// # Errors
/// See [`SimError`].
pub fn simulate_shared(s: &Scenario, opts: &RunOptions, progress: &mut dyn FnMut(u64, u64), shared: &Shared) -> Result<Outcome, SimError> {
    if let Some(w) = &s.workload {
        let imp = w.read(&s.base_dir, s.cluster.gpus_per_node)?;
        return crate::simulate_imported(s, imp, opts, progress);
    }
    if !s.jobs.is_empty() {
        return crate::jobs::simulate_jobs(s, opts, progress, shared);
    }
    let wall = Instant::now();
    if let Some(d) = &s.dlrm {
        return simulate_dlrm(s, d, opts, progress, wall, shared);
    }
    let r = resolve(s)?;
    let wl = shared.workload(&(&r.model, &r.training, &r.parallel), || {
        megatron::generate(&r.model, &r.training, &r.parallel).map_err(SimError::from)
    })?;
    let layout = Layout::of(&r.parallel);
    let info = transformer_info(&r, &wl);
    let ub = tp_overlap_timer(s, &r.parallel, r.gpu, opts.ideal_comm)?;
    run_workload(
        Prepared {
            s,
            wl,
            layout,
            training: &r.training,
            info,
            ub,
            host_free: false,
        },
        RunContext {
            opts,
            progress,
            wall,
            shared,
        },
    )
}

fn simulate_dlrm(
    s: &Scenario,
    d: &DlrmConfig,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
    wall: Instant,
    shared: &Shared,
) -> Result<Outcome, SimError> {
    let gpus = s.gpus()?;
    let gpu = s.cluster.gpu.resolve()?;
    let wl = shared.workload(&(d, gpus), || dlrm::generate(d, gpus as u64).map_err(SimError::from))?;
    let mem = d.memory_footprint(gpus as u64);
    memory::check_fits(&mem, gpu.memory_bytes, gpu.name)?;
    let training = TrainingConfig {
        dtype: d.dtype,
        ..TrainingConfig::default()
    };
    let layout = Layout {
        tp: 1,
        cp: 1,
        dp: gpus,
        pp: 1,
        ep: 1,
        ep_spans_tp: false,
        ep_server_units: 0,
    };
    let info = report::RunInfo {
        model: "dlrm".into(),
        params: d.bottom_params() + d.top_params() + d.embedding_params(),
        gpu,
        gpus,
        dtype: d.dtype,
        parallel: format!("MLPs data parallel x{gpus}, {} tables model parallel", d.num_tables),
        global_batch: d.batch_size_per_gpu * gpus as u64,
        seq_length: 1,
        sample_unit: "samples",
        memory: mem,
        layers_per_stage: 0,
        moe: None,
    };
    run_workload(
        Prepared {
            s,
            wl,
            layout,
            training: &training,
            info,
            ub: None,
            // The ASTRA-sim paper's DLRM iterations have no host (CPU) dispatch: as in the paper.
            host_free: true,
        },
        RunContext {
            opts,
            progress,
            wall,
            shared,
        },
    )
}

/// A workload ready to run on a scenario's cluster: what [`run_workload`] runs.
pub(crate) struct Prepared<'a> {
    pub s: &'a Scenario,
    pub wl: Arc<Workload>,
    pub layout: Layout,
    pub training: &'a TrainingConfig,
    pub info: report::RunInfo,
    /// The TP-overlap timer, when `parallel.tp_comm_overlap` is on.
    pub ub: Option<TpOverlapTimer>,
    /// Run without host dispatch whatever `compute.host` says: a workload without llmsim's own
    /// op lists (an imported trace's recorded segments; the ASTRA-sim paper's DLRM, which has
    /// no host model).
    pub host_free: bool,
}

/// How a run goes, beside its scenario: the caller's knobs, progress callback, start time and
/// the batch's shared structures.
pub(crate) struct RunContext<'a, 'p> {
    pub opts: &'a RunOptions,
    pub progress: &'p mut dyn FnMut(u64, u64),
    pub wall: Instant,
    pub shared: &'a Shared,
}

pub(crate) fn run_workload(p: Prepared<'_>, cx: RunContext<'_, '_>) -> Result<Outcome, SimError> {
    let Prepared {
        s,
        wl,
        layout,
        training,
        info,
        ub,
        host_free,
    } = p;
    let RunContext {
        opts,
        progress,
        wall,
        shared,
    } = cx;
    let gpu = info.gpu;
    let cm = compute_model(s, gpu, u64::from(info.gpus))?;
    if !(s.compute.overlap_slowdown >= 1.0 && s.compute.overlap_slowdown.is_finite()) {
        return Err(SimError::Scenario {
            field: "compute.overlap_slowdown".into(),
            message: format!("{} must be a finite factor >= 1.0", s.compute.overlap_slowdown),
        });
    }
    // Data-parallel replicas run the same programs at the same times when the network has no
    // contention (analytical backend): simulating replica 0 is then exact. On the flow backend
    // the fold keeps every replica's traffic on the network ([`crate::fold`]).
    // Imported workloads have explicit groups: every unit runs.
    // Faults make replicas differ (a straggler in one, links down under some): no folding.
    let fold = s.network.backend == Backend::Analytical && !opts.no_fold && layout.dp > 1 && wl.explicit.is_none() && s.faults.is_empty();
    let flow_fold = if s.faults.is_empty() {
        fold::flow_fold(s, &wl, layout, opts).ok()
    } else {
        None
    };
    let active_dp = if fold || flow_fold.is_some() { 1 } else { layout.dp };
    let mirrored = matches!(flow_fold, Some(FlowFold::Mirrored { .. }));
    // Estimate before building anything large; refuse what would not fit.
    // `auto` may fall back to every replica: its refusal counts them all.
    let may_unfold = matches!(flow_fold, Some(FlowFold::Mirrored { stop_on_divergence: true }));
    let est_dp = if may_unfold { layout.dp } else { active_dp };
    let mut est = estimate::estimate(&wl, layout, est_dp, u64::from(info.gpus), s.network.backend).with_ep_transfers(
        &wl,
        layout,
        est_dp,
        s.cluster.gpus_per_node,
        s.network.backend,
    );
    if mirrored && !may_unfold {
        est = est.with_mirrored_p2p(layout.dp);
    }
    let est = check_estimate(est, s, opts)?;
    // Topology.
    let (topo, su, plan) = cluster_setup(s, gpu, info.gpus, shared)?;
    let su = crate::setup::with_flex(su, &s.parallel, gpu);
    let (seg_time, ops) = time_segments(&wl, &cm, training, ub.as_ref())?;
    let host = crate::host::for_run(s.compute.host.as_ref().filter(|_| !host_free), &wl, &ops, &s.parallel)?;
    let trace_units: Vec<u32> = if s.output.trace {
        match s.output.trace_ranks {
            scenario::TraceRanks::FirstReplica => (0..layout.pp).map(|st| layout.unit(0, 0, st)).collect(),
            scenario::TraceRanks::All => (0..layout.units()).collect(),
        }
    } else {
        Vec::new()
    };
    let mut symmetry = if fold {
        format!(
            "data-parallel replicas folded: replica 0 of {} simulated (exact: the analytical backend has no contention; collectives still span every replica's hosts)",
            layout.dp
        )
    } else if s.network.backend == Backend::Flow {
        // The report says which fast paths a run used (issue 29).
        FLOW_PLAIN.to_string()
    } else {
        String::new()
    };
    crate::faults::check_backend(&s.faults, s.network.backend)?;
    let compute_slowdown = crate::faults::unit_slowdowns(&s.faults, layout, info.gpus, s.cluster.gpus_per_node)?;
    let run_engine = |active_dp: u32, ff: Option<FlowFold>, progress: &mut dyn FnMut(u64, u64)| -> Result<EngineRun, SimError> {
        let mut net = s.run_network().build(topo.clone(), s.seed)?;
        crate::faults::schedule(&s.faults, &topo, net.as_mut())?;
        let eopts = engine::EngineOptions {
            plan: plan.clone(),
            scale_up: su.clone(),
            ideal_comm: opts.ideal_comm,
            overlap_slowdown: s.compute.overlap_slowdown,
            trace_units: trace_units.iter().copied().filter(|u| layout.coords(*u).1 < active_dp).collect(),
            record_flows: s.output.flows,
            active_dp,
            mirror_p2p: matches!(ff, Some(FlowFold::Mirrored { .. })),
            stop_on_divergence: matches!(ff, Some(FlowFold::Mirrored { stop_on_divergence: true })),
            compute_slowdown: compute_slowdown.clone(),
            host: host.clone(),
            hosts: None,
            traffic_classes: s.network.traffic_classes,
            live: opts.live.clone(),
            p2p_eager_bytes: s.p2p_eager_bytes(),
        };
        engine::SystemEngine::new(topo.clone(), net, &wl, layout, &seg_time, eopts).run(progress)
    };
    let mut run = run_engine(active_dp, flow_fold, progress)?;
    let mut fold_report = None;
    if flow_fold.is_some() {
        if run.fold.aborted {
            // A message's copies arrived apart: the fold is not exact; simulate every replica.
            let f = fold::FoldReport::new("fell back", 0, &run.fold);
            symmetry = f.line(layout.dp);
            fold_report = Some(f);
            run = run_engine(layout.dp, None, progress)?;
        } else {
            let outcome = if run.fold.diverged_messages == 0 { "exact" } else { "approximate" };
            let f = fold::FoldReport::new(outcome, layout.dp, &run.fold);
            symmetry = f.line(layout.dp);
            fold_report = Some(f);
            crate::batch_engine::unfold(&mut run, &wl, layout);
        }
    }
    crate::faults::check_times(&s.faults, run.iteration_ends.last().copied().unwrap_or(run.iteration_time))?;
    let ops_rows = op_rows(&wl, &ops);
    let report = report::build(
        s,
        &info,
        &wl,
        &run,
        &ops_rows,
        layout,
        &topo,
        wall.elapsed().as_secs_f64(),
        &symmetry,
    );
    let report = Report {
        fold: fold_report,
        ..report
    };
    Ok(Outcome {
        report,
        engine: run,
        workload: wl,
        ops: ops_rows,
        layout,
        topo,
        estimate: est,
    })
}

/// A generated workload with its layout and every segment's time, for exporters.
pub struct Generated {
    /// The generated workload.
    pub workload: Workload,
    /// The parallel layout: how ranks form units.
    pub layout: Layout,
    /// The time of each compute segment, indexed like `workload.segments`.
    pub seg_time: Vec<SimTime>,
    /// What the report says about the run, for exporters to carry along.
    pub info: llmsim_workload::chakra::TraceInfo,
}

/// Generates a transformer scenario's workload and times its segments, without running it.
///
/// # Errors
/// As [`simulate`]'s set-up.
pub fn generate(s: &Scenario) -> Result<Generated, SimError> {
    let r = resolve(s)?;
    let wl = megatron::generate(&r.model, &r.training, &r.parallel)?;
    let layout = Layout::of(&r.parallel);
    let cm = compute_model(s, r.gpu, r.parallel.world_size())?;
    let ub = tp_overlap_timer(s, &r.parallel, r.gpu, false)?;
    let (seg_time, _) = time_segments(&wl, &cm, &r.training, ub.as_ref())?;
    let ri = transformer_info(&r, &wl);
    let info = llmsim_workload::chakra::TraceInfo {
        model: ri.model,
        parallel: ri.parallel,
        params: ri.params,
        global_batch: ri.global_batch,
        seq_length: ri.seq_length,
        microbatches: wl.microbatches,
        layers_per_stage: ri.layers_per_stage,
        memory: ri.memory,
    };
    Ok(Generated {
        workload: wl,
        layout,
        seg_time,
        info,
    })
}

/// Finishes a run's estimate (flow records when `output.flows`), hands it to
/// `opts.on_estimate`, and refuses the run when it needs more memory than the machine has
/// (unless `opts.ignore_memory_estimate`). Returns the finished estimate.
///
/// # Errors
/// `SimError::TooLarge` with the estimate and the memory available.
pub(crate) fn check_estimate(mut est: estimate::Estimate, s: &Scenario, opts: &RunOptions) -> Result<estimate::Estimate, SimError> {
    if s.output.flows {
        est = est.with_flow_records();
    }
    if let Some(f) = opts.on_estimate {
        f(&est);
    }
    if !opts.ignore_memory_estimate
        && let Some(available) = estimate::available_memory()
        && est.memory_bytes > available
    {
        return Err(SimError::TooLarge { estimate: est, available });
    }
    Ok(est)
}
