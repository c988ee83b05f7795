//! Several training jobs on one fabric (`jobs:`).
//!
//! - Each job's workload is generated for its own ranks `0..gpus`, exactly as a one-job
//!   scenario of `gpus` GPUs would be ([`crate::setup::resolve`], Megatron's generator).
//! - The job is placed on whole servers of the shared cluster ([`place`]); its rank `r` runs on
//!   host `servers[r / gpus_per_node] * gpus_per_node + r % gpus_per_node` (the engine's
//!   [`crate::engine::EngineOptions::hosts`]).
//! - One network carries every job's traffic: each job's engine submits through a
//!   [`JobNet`] view and [`run_jobs`] interleaves the engines' events in time. Compute is per
//!   GPU, so jobs interact through the network only.
//! - Each job then runs alone on the same servers (same network, same hashes), and its slowdown
//!   is its iteration time with the others over that.
//!
//! Every data-parallel replica of every job is simulated: another job's traffic makes replicas
//! differ, so the folds of a one-job run ([`crate::fold`]) do not apply.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use llmsim_core::{SimRng, SimTime};
use llmsim_topo::Topology;
use llmsim_workload::dag::{Layout, Workload};
use llmsim_workload::megatron;
use serde::Serialize;

use crate::engine::{self, EngineRun, JobNet, run_jobs};
use crate::ops::{OpRow, op_rows, time_segments};
use crate::report::{self, Breakdown, Report};
use crate::run::{Outcome, RunOptions};
use crate::scenario::{JobSpec, Placement, Scenario};
use crate::setup::{TpOverlapTimer, cluster_setup, compute_model, resolve, tp_overlap_timer, transformer_info};
use crate::{Shared, SimError, estimate};

/// One job of a `jobs:` run in the report.
#[derive(Clone, Debug, Serialize)]
pub struct JobReport {
    /// The job's name.
    pub name: String,
    /// GPUs the job ran on.
    pub gpus: u32,
    /// How its servers were chosen: packed, spread, or random with its seed.
    pub placement: String,
    /// Its servers, in rank order (server `s` holds hosts `s * gpus_per_node ..`).
    pub servers: Vec<u32>,
    /// Its iteration time with every job on the fabric.
    pub iteration_time_s: f64,
    /// Its iteration time alone on the same servers and network.
    pub alone_iteration_time_s: f64,
    /// `iteration_time_s / alone_iteration_time_s`: what sharing the fabric cost it.
    pub slowdown: f64,
    /// The job's own report (run with the others): breakdown per stage and rank, throughput,
    /// MFU, memory.
    pub report: Report,
}

/// A job ready to run: its scenario (the shared sections with the job's model, training and
/// parallel settings), workload, segment times and placement.
struct Job {
    scenario: Scenario,
    wl: Arc<Workload>,
    layout: Layout,
    info: report::RunInfo,
    seg_time: Vec<SimTime>,
    ops: Vec<OpRow>,
    host: Option<Arc<engine::HostDispatch>>,
    servers: Vec<u32>,
    hosts: Arc<[u32]>,
}

/// The field of a job's error: `jobs[i].<field>` (its `gpus` for the scenario's cluster size).
fn in_job(i: usize, name: &str, e: SimError) -> SimError {
    match e {
        SimError::Scenario { field, message } => SimError::Scenario {
            field: match field.as_str() {
                "cluster.gpus" | "cluster.nodes" => format!("jobs[{i}].gpus"),
                f => format!("jobs[{i}].{f}"),
            },
            message,
        },
        other => SimError::Scenario {
            field: format!("jobs[{i}] ({name})"),
            message: other.to_string(),
        },
    }
}

/// Checks the jobs against the cluster and places them: per job, its servers in rank order.
///
/// # Errors
/// More than [`engine::MAX_JOBS`] jobs, a duplicate or empty name, a GPU count that is not a positive multiple of the server size,
/// jobs that together need more servers than the cluster has.
pub fn place(jobs: &[JobSpec], servers: u32, gpus_per_node: u32, seed: u64) -> Result<Vec<Vec<u32>>, SimError> {
    let bad = |field: String, message: String| SimError::Scenario { field, message };
    if jobs.len() > engine::MAX_JOBS {
        return Err(bad(
            "jobs".into(),
            format!("{} jobs: at most {} share one network", jobs.len(), engine::MAX_JOBS),
        ));
    }
    for (i, j) in jobs.iter().enumerate() {
        if j.name.trim().is_empty() {
            return Err(bad(format!("jobs[{i}].name"), "give the job a name (the report's label)".into()));
        }
        if let Some(k) = jobs[..i].iter().position(|o| o.name == j.name) {
            return Err(bad(
                format!("jobs[{i}].name"),
                format!("{:?} is also jobs[{k}]'s name; give each job its own", j.name),
            ));
        }
        if j.gpus == 0 || j.gpus % gpus_per_node != 0 {
            return Err(bad(
                format!("jobs[{i}].gpus"),
                format!(
                    "{} is not a positive multiple of cluster.gpus_per_node={gpus_per_node}: jobs take whole servers; valid: {}, {}, ...",
                    j.gpus,
                    gpus_per_node,
                    2 * gpus_per_node
                ),
            ));
        }
    }
    let need: u64 = jobs.iter().map(|j| u64::from(j.gpus)).sum();
    let have = u64::from(servers) * u64::from(gpus_per_node);
    if need > have {
        let list: Vec<String> = jobs.iter().map(|j| format!("{} {}", j.name, j.gpus)).collect();
        return Err(bad(
            "jobs".into(),
            format!(
                "the jobs need {need} GPUs ({}) but the cluster has {have}; shrink a job's gpus or grow cluster.gpus / cluster.nodes to at least {need}",
                list.join(" + ")
            ),
        ));
    }
    let mut free: Vec<u32> = (0..servers).collect();
    let mut out = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let k = (j.gpus / gpus_per_node) as usize;
        let taken: Vec<u32> = match j.placement {
            Placement::Packed => free[..k].to_vec(),
            // Every (free/k)-th free server, from the first.
            Placement::Spread => (0..k).map(|x| free[x * free.len() / k]).collect(),
            Placement::Random(r) => {
                // One stream per job: a job's servers do not depend on how many draws another took.
                let mut rng = SimRng::derive(r.seed.unwrap_or(seed), i as u64);
                let mut order = free.clone();
                rng.shuffle(&mut order);
                order.truncate(k);
                order
            }
        };
        free.retain(|s| !taken.contains(s));
        out.push(taken);
    }
    Ok(out)
}

/// The placement's words for the report.
fn placement_name(p: Placement, seed: u64) -> String {
    match p {
        Placement::Packed => "packed".into(),
        Placement::Spread => "spread".into(),
        Placement::Random(r) => format!("random (seed {})", r.seed.unwrap_or(seed)),
    }
}

/// The scenario of job `j` alone: the shared sections with its model, training and parallel
/// settings and its GPU count.
fn job_scenario(s: &Scenario, j: &JobSpec) -> Scenario {
    let mut js = s.clone();
    js.name = j.name.clone();
    js.jobs = Vec::new();
    js.model = Some(j.model.clone());
    js.training = j.training.clone();
    js.parallel = j.parallel.clone();
    js.cluster.gpus = Some(j.gpus);
    js.cluster.nodes = None;
    js
}

/// Builds job `i`: resolves and generates its workload, times its segments.
fn prepare(s: &Scenario, j: &JobSpec, servers: Vec<u32>, opts: &RunOptions, shared: &Shared) -> Result<Job, SimError> {
    let js = job_scenario(s, j);
    let r = resolve(&js)?;
    let wl = shared.workload(&(&r.model, &r.training, &r.parallel), || {
        megatron::generate(&r.model, &r.training, &r.parallel).map_err(SimError::from)
    })?;
    let layout = Layout::of(&r.parallel);
    let info = transformer_info(&r, &wl);
    let ub: Option<TpOverlapTimer> = tp_overlap_timer(&js, &r.parallel, r.gpu, opts.ideal_comm)?;
    let cm = compute_model(&js, r.gpu, r.parallel.world_size())?;
    let (seg_time, timed) = time_segments(&wl, &cm, &js.training, ub.as_ref())?;
    let host = crate::host::for_run(js.compute.host.as_ref(), &wl, &timed, &r.parallel)?;
    let ops = op_rows(&wl, &timed);
    let gpn = s.cluster.gpus_per_node;
    let hosts: Arc<[u32]> = (0..j.gpus).map(|rank| servers[(rank / gpn) as usize] * gpn + rank % gpn).collect();
    Ok(Job {
        scenario: js,
        wl,
        layout,
        info,
        seg_time,
        ops,
        host,
        servers,
        hosts,
    })
}

/// Runs `which` jobs together on a fresh network (`cluster`: each job's scale-up model, then the
/// plan options); their engine runs, in that order.
fn run_set(
    s: &Scenario,
    jobs: &[Job],
    which: &[usize],
    topo: &Arc<Topology>,
    cluster: &(Vec<llmsim_ccl::ScaleUpModel>, llmsim_ccl::PlanOptions),
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<EngineRun>, SimError> {
    let mut net = s.run_network().build(topo.clone(), s.seed)?;
    crate::faults::schedule(&s.faults, topo, net.as_mut())?;
    let shared = Rc::new(RefCell::new(net));
    let gpus = topo.num_hosts();
    let mut engines = Vec::with_capacity(which.len());
    for &i in which {
        let j = &jobs[i];
        let slowdown = crate::faults::unit_slowdowns_on(&s.faults, j.layout, gpus, s.cluster.gpus_per_node, Some(&j.hosts))?;
        let eopts = engine::EngineOptions {
            plan: cluster.1.clone(),
            scale_up: cluster.0[i].clone(),
            ideal_comm: opts.ideal_comm,
            overlap_slowdown: s.compute.overlap_slowdown,
            trace_units: Vec::new(),
            record_flows: s.output.flows,
            active_dp: j.layout.dp,
            mirror_p2p: false,
            stop_on_divergence: false,
            compute_slowdown: slowdown,
            host: j.host.clone(),
            hosts: Some(j.hosts.clone()),
            traffic_classes: s.network.traffic_classes,
            live: opts.live.clone(),
            p2p_eager_bytes: j.scenario.p2p_eager_bytes(),
        };
        let net = Box::new(JobNet::new(shared.clone(), topo.clone(), i));
        engines.push((i, engine::SystemEngine::new(topo.clone(), net, &j.wl, j.layout, &j.seg_time, eopts)));
    }
    run_jobs(engines, &shared, progress)
}

/// Runs a scenario with `jobs:`.
///
/// # Errors
/// A job that does not fit the cluster or whose plan does not fit its GPUs (naming
/// `jobs[i].<field>`), and whatever a one-job run can fail with.
pub(crate) fn simulate_jobs(
    s: &Scenario,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
    shared: &Shared,
) -> Result<Outcome, SimError> {
    let wall = Instant::now();
    let total = s.gpus()?;
    let gpn = s.cluster.gpus_per_node;
    let placed = place(&s.jobs, total / gpn, gpn, s.seed)?;
    let gpu = s.cluster.gpu.resolve()?;
    if !(s.compute.overlap_slowdown >= 1.0 && s.compute.overlap_slowdown.is_finite()) {
        return Err(SimError::Scenario {
            field: "compute.overlap_slowdown".into(),
            message: format!("{} must be a finite factor >= 1.0", s.compute.overlap_slowdown),
        });
    }
    let jobs: Vec<Job> = s
        .jobs
        .iter()
        .zip(placed)
        .enumerate()
        .map(|(i, (j, servers))| prepare(s, j, servers, opts, shared).map_err(|e| in_job(i, &j.name, e)))
        .collect::<Result<_, _>>()?;
    // Every job simulated unfolded, run twice (together, then alone) one after the other.
    let mut est: Option<estimate::Estimate> = None;
    for j in &jobs {
        let e = estimate::estimate(&j.wl, j.layout, j.layout.dp, u64::from(j.info.gpus), s.network.backend);
        est = Some(match est {
            None => e,
            Some(a) => estimate::Estimate {
                gpus: a.gpus + e.gpus,
                units: a.units + e.units,
                program_nodes: a.program_nodes + e.program_nodes,
                p2p_transfers: a.p2p_transfers + e.p2p_transfers,
                collectives: a.collectives + e.collectives,
                memory_bytes: a.memory_bytes + e.memory_bytes,
                seconds: a.seconds + e.seconds,
            },
        });
    }
    let mut est = est.ok_or_else(|| SimError::Internal("no jobs".into()))?;
    if jobs.len() > 1 {
        est.seconds *= 2.0;
    }
    let est = crate::run::check_estimate(est, s, opts)?;
    let (topo, su, plan) = cluster_setup(s, gpu, total, shared)?;
    // Each job's scale-up model: the cluster's, with its own MoE dispatcher's all-to-all.
    let per_job = jobs
        .iter()
        .map(|j| crate::setup::with_flex(su.clone(), &j.scenario.parallel, gpu))
        .collect();
    let cluster = (per_job, plan);
    let all: Vec<usize> = (0..jobs.len()).collect();
    let together = run_set(s, &jobs, &all, &topo, &cluster, opts, progress)?;
    let end = together
        .iter()
        .map(|r| r.iteration_ends.last().copied().unwrap_or(r.iteration_time))
        .max();
    crate::faults::check_times(&s.faults, end.unwrap_or(SimTime::ZERO))?;
    let alone: Vec<SimTime> = if jobs.len() == 1 {
        vec![together[0].iteration_time]
    } else {
        (0..jobs.len())
            .map(|i| run_set(s, &jobs, &[i], &topo, &cluster, opts, &mut |_, _| {}).map(|r| r[0].iteration_time))
            .collect::<Result<_, _>>()?
    };
    let symmetry =
        "several jobs on one fabric: every data-parallel replica of every job simulated (other jobs' traffic makes replicas differ)";
    let wall_s = wall.elapsed().as_secs_f64();
    let mut reports = Vec::with_capacity(jobs.len());
    for ((j, spec), (run, alone)) in jobs.iter().zip(&s.jobs).zip(together.iter().zip(&alone)) {
        let r = report::build(&j.scenario, &j.info, &j.wl, run, &j.ops, j.layout, &topo, wall_s, symmetry);
        let it = run.iteration_time.as_secs_f64();
        let a = alone.as_secs_f64();
        reports.push(JobReport {
            name: spec.name.clone(),
            gpus: spec.gpus,
            placement: placement_name(spec.placement, s.seed),
            servers: j.servers.clone(),
            iteration_time_s: it,
            alone_iteration_time_s: a,
            slowdown: if a > 0.0 { it / a } else { 1.0 },
            report: r,
        });
    }
    let report = combined(s, &reports, &together, wall_s, symmetry);
    // The outcome's engine run: every job's flows (ids renumbered in submission order per job,
    // then job by job), the shared network's counters.
    let mut merged = together[0].clone();
    merged.spans = Vec::new();
    merged.flows = Vec::new();
    let mut next = 0u64;
    for r in &together {
        for f in &r.flows {
            let mut f = f.clone();
            f.id += next;
            merged.flows.push(f);
        }
        next += r.flows.len() as u64;
    }
    let j0 = &jobs[0];
    Ok(Outcome {
        report,
        engine: merged,
        workload: j0.wl.clone(),
        ops: Vec::new(),
        layout: j0.layout,
        topo,
        estimate: est,
    })
}

/// The report of the whole run: the cluster and network, the makespan, every job's report.
fn combined(s: &Scenario, jobs: &[JobReport], runs: &[EngineRun], wall_s: f64, symmetry: &str) -> Report {
    let first = &jobs[0].report;
    let units: usize = runs.iter().map(|r| r.units.len()).sum();
    let mut mean = Breakdown::default();
    for (j, r) in jobs.iter().zip(runs) {
        mean.add(&j.report.mean, r.units.len() as f64 / units.max(1) as f64);
    }
    let mut by_group: Vec<crate::engine::GroupCount> = Vec::new();
    for r in runs {
        for g in &r.collectives_by_group {
            match by_group.iter_mut().find(|x| x.group == g.group) {
                Some(x) => {
                    x.collectives += g.collectives;
                    x.on_network += g.on_network;
                }
                None => by_group.push(g.clone()),
            }
        }
    }
    let params: u64 = jobs.iter().filter_map(|j| j.report.params).sum();
    Report {
        scenario: s.name.clone(),
        overrides: s.overrides.clone(),
        model: jobs.iter().map(|j| j.report.model.as_str()).collect::<Vec<_>>().join(" + "),
        params: (params > 0).then_some(params),
        gpus: s.gpus().unwrap_or(first.gpus),
        parallel: jobs
            .iter()
            .map(|j| format!("{}: {}", j.name, j.report.parallel))
            .collect::<Vec<_>>()
            .join("; "),
        microbatches: 0,
        global_batch_size: None,
        seq_length: None,
        iteration_time_s: jobs.iter().map(|j| j.iteration_time_s).fold(0.0, f64::max),
        iterations: 1,
        first_iteration_time_s: None,
        iteration_times_s: Vec::new(),
        tokens_per_s: None,
        tokens_per_s_per_gpu: None,
        model_tflops_per_gpu: None,
        mfu: None,
        hfu: None,
        stages: Vec::new(),
        mean,
        first_iteration: None,
        ranks: Vec::new(),
        memory: None,
        collectives: runs.iter().map(|r| r.collectives).sum(),
        collectives_on_network: runs.iter().map(|r| r.collectives_on_network).sum(),
        collectives_by_group: by_group,
        plans_built: runs.iter().map(|r| r.plans_built).sum(),
        net: runs[0].net,
        nodes_executed: runs.iter().map(|r| r.nodes_executed).sum(),
        symmetry: symmetry.to_string(),
        fold: None,
        packet_engine: s.packet_engine(),
        sim_wall_s: wall_s,
        jobs: jobs.to_vec(),
        ..first.clone()
    }
}
