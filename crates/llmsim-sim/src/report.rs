//! The report: iteration time, throughput, MFU, where the time went per stage and per rank, and
//! the memory footprint.

use std::fmt::Write as _;

use llmsim_core::{Bytes, SimTime};
use llmsim_net::NetStats;
use llmsim_topo::Topology;
use llmsim_workload::MemoryFootprint;
use llmsim_workload::dag::Workload;
use serde::Serialize;

use crate::engine::{EngineRun, Layout, UnitAccount};
use crate::{OpRow, Scenario, iteration_flops};

/// Seconds per category of one unit's (or the average of a stage's) iteration.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Breakdown {
    /// Running kernels.
    pub compute_s: f64,
    /// Blocked in tensor-parallel collectives.
    pub exposed_tp_s: f64,
    /// Blocked in context-parallel collectives.
    pub exposed_cp_s: f64,
    /// Blocked in expert-parallel collectives.
    pub exposed_ep_s: f64,
    /// Waiting on a pipeline receive while the sender's data was on the wire.
    pub exposed_pp_s: f64,
    /// Waiting on data-parallel work: gradient reduction, parameter all-gathers.
    pub exposed_dp_s: f64,
    /// Waiting on a pipeline receive before the peer stage sent: the pipeline bubble.
    pub bubble_s: f64,
    /// Waiting on activation copies to or from host memory (`training.cpu_offload_layers`).
    pub exposed_offload_s: f64,
    /// Waiting on the host thread to issue kernels (`compute.host`).
    pub exposed_host_s: f64,
    /// The rest of the iteration: waiting for slower ranks, at the end for the last stage, ...
    pub idle_s: f64,
}

impl Breakdown {
    fn of(a: &UnitAccount, iter: SimTime) -> Self {
        let s = |t: SimTime| t.as_secs_f64();
        let busy = a.compute
            + a.exposed_tp
            + a.exposed_cp
            + a.exposed_ep
            + a.exposed_pp
            + a.exposed_dp
            + a.bubble
            + a.exposed_offload
            + a.exposed_host;
        Breakdown {
            compute_s: s(a.compute),
            exposed_tp_s: s(a.exposed_tp),
            exposed_cp_s: s(a.exposed_cp),
            exposed_ep_s: s(a.exposed_ep),
            exposed_pp_s: s(a.exposed_pp),
            exposed_dp_s: s(a.exposed_dp),
            bubble_s: s(a.bubble),
            exposed_offload_s: s(a.exposed_offload),
            exposed_host_s: s(a.exposed_host),
            idle_s: s(iter.saturating_sub(busy)),
        }
    }

    /// The mean of `parts`, each weighted `1/len` (zero for none).
    fn mean(parts: impl ExactSizeIterator<Item = Breakdown>) -> Breakdown {
        let w = 1.0 / parts.len().max(1) as f64;
        let mut m = Breakdown::default();
        for b in parts {
            m.add(&b, w);
        }
        m
    }

    pub(crate) fn add(&mut self, o: &Breakdown, w: f64) {
        self.compute_s += o.compute_s * w;
        self.exposed_tp_s += o.exposed_tp_s * w;
        self.exposed_cp_s += o.exposed_cp_s * w;
        self.exposed_ep_s += o.exposed_ep_s * w;
        self.exposed_pp_s += o.exposed_pp_s * w;
        self.exposed_dp_s += o.exposed_dp_s * w;
        self.bubble_s += o.bubble_s * w;
        self.exposed_offload_s += o.exposed_offload_s * w;
        self.exposed_host_s += o.exposed_host_s * w;
        self.idle_s += o.idle_s * w;
    }
}

/// One pipeline stage's share of the iteration.
#[derive(Clone, Debug, Serialize)]
pub struct StageReport {
    /// The stage's index, from 0.
    pub stage: u32,
    /// Transformer layers per stage (0 where the workload does not record them).
    pub layers: u64,
    /// Mean over the stage's ranks.
    pub breakdown: Breakdown,
}

/// One simulated unit's (tensor-parallel group's) iteration.
#[derive(Clone, Debug, Serialize)]
pub struct UnitReport {
    /// Ranks `first_rank .. first_rank + tp` (one tensor-parallel group) share this breakdown.
    pub first_rank: u32,
    /// The unit's context-parallel index.
    pub cp: u32,
    /// The unit's data-parallel index (its replica).
    pub dp: u32,
    /// The unit's pipeline stage.
    pub pp: u32,
    /// Where the unit's time went.
    pub breakdown: Breakdown,
}

/// The memory footprint of one GPU against its capacity.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    /// The footprint per GPU, in bytes per part.
    pub footprint: MemoryFootprint,
    /// The GPU's memory, in bytes.
    pub capacity: u64,
    /// The footprint's total over the capacity (above 1: does not fit).
    pub fraction: f64,
}

/// The result of one run: what the CLI prints and writes as report.json.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The `--set` overrides applied to the scenario file (empty: none).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub overrides: Vec<String>,
    /// The model's name.
    pub model: String,
    /// Model parameters; `None` (null) where an imported workload does not record them.
    pub params: Option<u64>,
    /// The GPU's name.
    pub gpu: String,
    /// For the text report: the GPU's power limit where it slows compute-bound kernels (empty
    /// otherwise). Not in the JSON, whose `gpu` is the name alone.
    #[serde(skip)]
    pub gpu_note: String,
    /// GPUs in the cluster.
    pub gpus: u32,
    /// How many times longer compute-bound kernels take than on the calibrated (median) board:
    /// the job's expected slowest GPU (`compute.gpu_variability`); 1 when off.
    pub gpu_pace: f64,
    /// The modules whose kernels the host replays as CUDA graphs
    /// (`compute.host.cuda_graph_scope`); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cuda_graph_scope: Vec<String>,
    /// The topology in one line (the first line of `llmsim topo`'s description).
    pub topology: String,
    /// The scale-out fabric in one line: switches per tier, NIC bandwidth per GPU,
    /// oversubscription and bisection (from `llmsim topo`'s description).
    #[serde(default)]
    pub fabric: String,
    /// Cost proxies of the scale-out fabric: switches, switch ports, cables, optics.
    pub fabric_cost: llmsim_topo::CostProxies,
    /// The network backend: analytical, flow or packet.
    pub backend: String,
    /// The parallel layout in one line.
    pub parallel: String,
    /// What tokens_per_s counts: "tokens" (transformers) or "samples" (DLRM).
    pub sample_unit: &'static str,
    /// Micro-batches per data-parallel replica per iteration.
    pub microbatches: u32,
    /// Samples per iteration and tokens per sample; `None` where an imported workload does not
    /// record them (then throughput is unknown too).
    pub global_batch_size: Option<u64>,
    /// Tokens per sample; `None` where an imported workload does not record it.
    pub seq_length: Option<u64>,
    /// The iteration time; with `training.iterations > 1` the steady-state figure, the mean of
    /// iterations 2..N (throughput, MFU and the breakdowns use the same).
    pub iteration_time_s: f64,
    /// Iterations simulated back to back (`training.iterations`); the three fields below are
    /// omitted for 1.
    #[serde(skip_serializing_if = "one")]
    pub iterations: u64,
    /// The first iteration's time (no previous optimizer step to overlap with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_iteration_time_s: Option<f64>,
    /// Every iteration's time, from the end of the one before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub iteration_times_s: Vec<f64>,
    /// Throughput in `sample_unit`s per second; `None` where the batch is unknown.
    pub tokens_per_s: Option<f64>,
    /// `tokens_per_s` over the GPU count.
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Model FLOPs (no recomputation, no optimizer) per GPU per second; `None` (and MFU, HFU)
    /// where the workload's operators carry no FLOP counts (imported workloads).
    pub model_tflops_per_gpu: Option<f64>,
    /// Model FLOPs utilization: model FLOPs per second over the GPUs' peak (0 to 1).
    pub mfu: Option<f64>,
    /// Hardware FLOPs utilization (recomputation counted).
    pub hfu: Option<f64>,
    /// Per pipeline stage: the mean breakdown of its ranks.
    pub stages: Vec<StageReport>,
    /// The mean breakdown over every simulated unit.
    pub mean: Breakdown,
    /// With several iterations: the first iteration's mean breakdown over every simulated unit
    /// (its shares of `first_iteration_time_s`); `mean` is that of iterations 2..N.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_iteration: Option<Breakdown>,
    /// Per simulated unit: its breakdown.
    pub ranks: Vec<UnitReport>,
    /// The memory footprint per GPU; `None` where an imported workload does not record it.
    pub memory: Option<MemoryReport>,
    /// Collectives run.
    pub collectives: u64,
    /// Collectives that crossed the network (the rest stayed inside a server).
    pub collectives_on_network: u64,
    /// Per process-group kind (`tp`, `cp`, `ep`, `ep_inter`, `ep_intra`, `dp`, `edp`, `embd`, `pg`):
    /// collectives run and how many crossed the network (the rest stayed inside a server's
    /// NVLink domain).
    pub collectives_by_group: Vec<crate::engine::GroupCount>,
    /// Distinct collective plans built (the rest were reused).
    pub plans_built: usize,
    /// The network backend's counters.
    pub net: NetStats,
    /// Program nodes run, over every simulated unit.
    pub nodes_executed: u64,
    /// How ranks were folded. Empty: every tensor-parallel group was simulated; the tp ranks of a
    /// group run the same program in lockstep (exact: their TP collectives synchronize them).
    pub symmetry: String,
    /// How a flow-level run folded its data-parallel replicas ([`crate::fold`]); absent where
    /// it did not try.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fold: Option<crate::fold::FoldReport>,
    /// The packet backend's engine: exact, or Wormhole fast-forward with its knobs and bound;
    /// absent on the other backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_engine: Option<String>,
    /// Wall time of the run, in seconds.
    pub sim_wall_s: f64,
    /// The run's class for the validation record (GPU generation, dense or MoE, precision);
    /// absent for workloads llmsim did not generate (DLRM, imported traces) and GPUs the
    /// validation has no runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity_class: Option<String>,
    /// How far llmsim has been from published runs of that class (`bench/validation.md`); absent
    /// where the validation has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<crate::fidelity::Fidelity>,
    /// A scenario with `jobs:`: each job's iteration time together and alone, its slowdown and
    /// its own report. Empty (omitted) for one job. The fields above then describe the whole
    /// run: the cluster, the shared network's counters, the longest job iteration
    /// (`iteration_time_s`), the mean breakdown over every job's units; per-job figures
    /// (throughput, MFU, memory, stages) are in the jobs' reports.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub jobs: Vec<crate::jobs::JobReport>,
}

/// What the report needs to know about the run besides the engine's result.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// The model's name.
    pub model: String,
    /// Model parameters (0: not recorded).
    pub params: u64,
    /// The GPU.
    pub gpu: &'static llmsim_compute::GpuSpec,
    /// GPUs in the cluster.
    pub gpus: u32,
    /// The training dtype, for the peak FLOP/s of MFU.
    pub dtype: llmsim_compute::DType,
    /// The parallel layout in one line.
    pub parallel: String,
    /// Samples per iteration.
    pub global_batch: u64,
    /// Tokens per sample (1 for DLRM).
    pub seq_length: u64,
    /// "tokens" or "samples".
    pub sample_unit: &'static str,
    /// The memory footprint per GPU (total 0: not recorded).
    pub memory: MemoryFootprint,
    /// Transformer layers per pipeline stage (0: not recorded).
    pub layers_per_stage: u64,
    /// Whether the model has routed experts; `None` for workloads llmsim did not generate
    /// (DLRM, imported traces), which the validation record does not cover.
    pub moe: Option<bool>,
}

/// The topology line: its name and routing rule, and the network's load balancing where the
/// scenario sets it and a network backend takes it (`network.load_balance`; the analytical
/// backend ignores it).
fn topology_line(t: &llmsim_topo::TopologySummary, s: &Scenario) -> String {
    match s.network.load_balance {
        Some(lb) if s.network.backend != crate::scenario::Backend::Analytical => {
            format!("{} (routing: {}; load balance: {})", t.name, t.routing, lb.name())
        }
        _ => format!("{} (routing: {})", t.name, t.routing),
    }
}

/// The cluster line's note on the slowest-board pace (empty when off).
pub(crate) fn pace_note(pace: f64, gpus: u32) -> String {
    if pace > 1.0 {
        format!(" (slowest of {gpus} boards: compute-bound kernels x{pace:.3}, compute.gpu_variability)")
    } else {
        String::new()
    }
}

/// The report of a run from the engine's result, the per-op table and the run's facts.
#[allow(clippy::too_many_arguments)]
pub fn build(
    s: &Scenario,
    r: &RunInfo,
    wl: &Workload,
    run: &EngineRun,
    ops: &[OpRow],
    layout: Layout,
    topo: &Topology,
    wall_s: f64,
    symmetry: &str,
) -> Report {
    let iter = run.iteration_time;
    let it_s = iter.as_secs_f64().max(1e-12);
    let gbs = r.global_batch;
    let tokens = (gbs * r.seq_length) as f64;
    let (model_flops, hw_flops) = iteration_flops(ops, layout, wl.explicit.is_some());
    let peak = r.gpu.peak_flops(r.dtype) * r.gpus as f64;
    let per_unit: Vec<(u32, Breakdown)> = run.units.iter().map(|(u, a)| (*u, Breakdown::of(a, iter))).collect();
    let mut stages = Vec::new();
    for st in 0..layout.pp {
        let mut b = Breakdown::default();
        let n = per_unit.iter().filter(|(u, _)| layout.stage(*u) == st).count().max(1) as f64;
        for (u, bd) in &per_unit {
            if layout.stage(*u) == st {
                b.add(bd, 1.0 / n);
            }
        }
        stages.push(StageReport {
            stage: st,
            layers: r.layers_per_stage,
            breakdown: b,
        });
    }
    let mean = Breakdown::mean(per_unit.iter().map(|(_, b)| b.clone()));
    let ranks = per_unit
        .iter()
        .map(|(u, b)| {
            let (c, d, pp) = layout.coords(*u);
            UnitReport {
                first_rank: layout.rank(*u, 0),
                cp: c,
                dp: d,
                pp,
                breakdown: b.clone(),
            }
        })
        .collect();
    let described = topo.describe();
    let pace = crate::setup::slowest_gpu_pace(s, u64::from(r.gpus)).unwrap_or(1.0);
    let fidelity_class = crate::fidelity::class_of(r.gpu, r.moe, r.dtype);
    Report {
        scenario: s.name.clone(),
        overrides: s.overrides.clone(),
        model: r.model.clone(),
        params: known(r.params),
        gpu: r.gpu.name.to_string(),
        gpu_note: match (r.gpu.power_limit, r.gpu.tdp) {
            (Some(limit), Some(tdp)) if r.gpu.compute_rate_fraction() < 1.0 => format!(
                " (power limit {limit} of its {tdp} TDP: compute-bound kernels at {:.3} of their rate)",
                r.gpu.compute_rate_fraction()
            ),
            _ => String::new(),
        } + &pace_note(pace, r.gpus),
        gpus: r.gpus,
        gpu_pace: pace,
        cuda_graph_scope: s
            .compute
            .host
            .iter()
            .flat_map(|h| h.cuda_graph_scope.iter().map(|g| g.as_str().to_string()))
            .collect(),
        topology: topology_line(&described, s),
        fabric: described.fabric_line(),
        fabric_cost: described.cost,
        backend: format!("{:?}", s.network.backend).to_lowercase(),
        parallel: r.parallel.clone(),
        sample_unit: r.sample_unit,
        microbatches: wl.microbatches,
        global_batch_size: known(gbs),
        seq_length: known(r.seq_length),
        iteration_time_s: iter.as_secs_f64(),
        iterations: run.iteration_ends.len().max(1) as u64,
        first_iteration_time_s: run.iteration_ends.first().map(|t| t.as_secs_f64()),
        iteration_times_s: run
            .iteration_ends
            .iter()
            .scan(SimTime::ZERO, |prev, &e| {
                let d = e - *prev;
                *prev = e;
                Some(d.as_secs_f64())
            })
            .collect(),
        tokens_per_s: (tokens > 0.0).then(|| tokens / it_s),
        tokens_per_s_per_gpu: (tokens > 0.0).then(|| tokens / it_s / r.gpus as f64),
        model_tflops_per_gpu: (model_flops > 0.0).then(|| model_flops / it_s / r.gpus as f64 / 1e12),
        mfu: (model_flops > 0.0).then(|| model_flops / it_s / peak),
        hfu: (hw_flops > 0.0).then(|| hw_flops / it_s / peak),
        stages,
        mean,
        first_iteration: run
            .iteration_ends
            .first()
            .map(|&first| Breakdown::mean(run.first_units.iter().map(|(_, a)| Breakdown::of(a, first)))),
        ranks,
        memory: (r.memory.total > 0).then(|| MemoryReport {
            footprint: r.memory.clone(),
            capacity: r.gpu.memory_bytes,
            fraction: r.memory.total as f64 / r.gpu.memory_bytes as f64,
        }),
        collectives: run.collectives,
        collectives_on_network: run.collectives_on_network,
        collectives_by_group: run.collectives_by_group.clone(),
        plans_built: run.plans_built,
        net: run.net,
        nodes_executed: run.nodes_executed,
        symmetry: symmetry.to_string(),
        fold: None,
        packet_engine: s.packet_engine(),
        sim_wall_s: wall_s,
        fidelity: fidelity_class.as_deref().and_then(crate::fidelity::lookup),
        fidelity_class,
        jobs: Vec::new(),
    }
}

/// `None` for the zero a source that does not record a value leaves in [`RunInfo`].
fn known(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

/// A value for the summary, or `unknown`.
fn or_unknown<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "unknown".to_string(), f)
}

fn one(n: &u64) -> bool {
    *n == 1
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn pct(x: f64, of: f64) -> f64 {
    if of > 0.0 { 100.0 * x / of } else { 0.0 }
}

impl Report {
    /// A run of several jobs: the cluster, then per job its iteration time together and alone,
    /// its slowdown and where its time went.
    fn render_jobs(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "llmsim run: {} ({} jobs on one fabric)", self.scenario, self.jobs.len());
        if !self.overrides.is_empty() {
            let _ = writeln!(o, "  --set      {}", self.overrides.join(", "));
        }
        let _ = writeln!(o, "  cluster    {} x {}{}, {}", self.gpus, self.gpu, self.gpu_note, self.topology);
        if !self.fabric.is_empty() {
            let _ = writeln!(o, "  fabric     {}", self.fabric);
        }
        let _ = writeln!(o, "  backend    {}", self.backend);
        if let Some(p) = &self.packet_engine {
            let _ = writeln!(o, "  engine     {p}");
        }
        let _ = writeln!(o);
        for j in &self.jobs {
            let r = &j.report;
            let servers = match (j.servers.first(), j.servers.last()) {
                (Some(a), Some(b)) if j.servers.windows(2).all(|w| w[1] == w[0] + 1) => format!("servers {a}-{b}"),
                _ => format!("servers {}", j.servers.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
            };
            let _ = writeln!(
                o,
                "  job {}: {} ({}), {} GPUs {}, {}",
                j.name,
                r.model,
                or_unknown(r.params, |p| format!("{:.2}B params", p as f64 / 1e9)),
                j.gpus,
                j.placement,
                servers
            );
            let _ = writeln!(
                o,
                "    parallel {}, global batch {}, seq {}",
                r.parallel,
                or_unknown(r.global_batch_size, |n| n.to_string()),
                or_unknown(r.seq_length, |n| n.to_string())
            );
            let _ = writeln!(
                o,
                "    iteration {:.4} s with the others, {:.4} s alone: slowdown {:.3}x{}",
                j.iteration_time_s,
                j.alone_iteration_time_s,
                j.slowdown,
                match r.mfu {
                    Some(m) => format!("; MFU {:.1}%", 100.0 * m),
                    None => String::new(),
                }
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "  where each job's time goes (% of its iteration with the others, mean over its ranks)\n  {:>12} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "job", "compute", "TP", "CP", "EP", "PP", "DP", "bubble", "idle"
        );
        for j in &self.jobs {
            let (b, it) = (&j.report.mean, j.iteration_time_s);
            let _ = writeln!(o, "  {:>12} {}", j.name, breakdown_cells(b, it));
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "  network          {} transfers, {} collectives ({} on the network)",
            self.net.completed, self.collectives, self.collectives_on_network
        );
        let _ = writeln!(
            o,
            "  simulated in     {:.2} s (every job together, then each alone)",
            self.sim_wall_s
        );
        o
    }

    /// The human-readable summary.
    pub fn render(&self) -> String {
        if !self.jobs.is_empty() {
            return self.render_jobs();
        }
        let mut o = String::new();
        let _ = writeln!(o, "llmsim run: {}", self.scenario);
        if !self.overrides.is_empty() {
            let _ = writeln!(o, "  --set      {}", self.overrides.join(", "));
        }
        let _ = writeln!(
            o,
            "  model      {} ({} params), seq {}, global batch {} ({} micro-batches per replica)",
            self.model,
            or_unknown(self.params, |p| format!("{:.2}B", p as f64 / 1e9)),
            or_unknown(self.seq_length, |n| n.to_string()),
            or_unknown(self.global_batch_size, |n| n.to_string()),
            self.microbatches
        );
        let _ = writeln!(o, "  cluster    {} x {}{}, {}", self.gpus, self.gpu, self.gpu_note, self.topology);
        if !self.fabric.is_empty() {
            let _ = writeln!(o, "  fabric     {}", self.fabric);
        }
        let _ = writeln!(o, "  parallel   {}   backend {}", self.parallel, self.backend);
        let _ = writeln!(o);
        match self.first_iteration_time_s {
            Some(first) => {
                let _ = writeln!(
                    o,
                    "  iteration time   {:.4} s steady state (mean of iterations 2..{}); first iteration {:.4} s",
                    self.iteration_time_s, self.iterations, first
                );
            }
            None => {
                let _ = writeln!(o, "  iteration time   {:.4} s", self.iteration_time_s);
            }
        }
        let u = self.sample_unit;
        let _ = writeln!(
            o,
            "  throughput       {}",
            match (self.tokens_per_s, self.tokens_per_s_per_gpu) {
                (Some(t), Some(g)) => format!("{t:.0} {u}/s ({g:.1} {u}/s/GPU)"),
                _ => "unknown (the workload does not record its batch or sequence length)".to_string(),
            }
        );
        let _ = writeln!(
            o,
            "  MFU              {}",
            match (self.mfu, self.model_tflops_per_gpu, self.hfu) {
                (Some(m), Some(t), Some(h)) => format!("{:.1}%  ({t:.0} model TFLOP/s per GPU; HFU {:.1}%)", 100.0 * m, 100.0 * h),
                _ => "unknown (the workload's operators carry no FLOP counts)".to_string(),
            }
        );
        match &self.memory {
            Some(m) => {
                let f = &m.footprint;
                let _ = writeln!(
                    o,
                    "  memory/GPU       {:.1} GiB of {:.0} GiB ({:.0}%): params {:.1}, grads {:.1}, optimizer {:.1}, activations {:.1}, workspace {:.1}",
                    gib(f.total),
                    gib(m.capacity),
                    100.0 * m.fraction,
                    gib(f.parameters),
                    gib(f.gradients),
                    gib(f.optimizer_states),
                    gib(f.activations),
                    gib(f.workspace)
                );
                if f.is_tight(m.capacity) {
                    let _ = writeln!(
                        o,
                        "  memory warning   tight: {:.1} GiB over capacity; fits only if the allocator fragments less than the {:.1} GiB allowed (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
                        gib(f.total - m.capacity),
                        gib(f.fragmentation)
                    );
                }
            }
            None => {
                let _ = writeln!(
                    o,
                    "  memory/GPU       unknown (the workload does not record its footprint; not checked)"
                );
            }
        }
        match (&self.fidelity, &self.fidelity_class) {
            (Some(f), _) => {
                let _ = writeln!(o, "  validated        {}", f.line());
            }
            (None, Some(c)) => {
                let _ = writeln!(o, "  validated        {c}: no published run of this class in bench/validation.md");
            }
            (None, None) => {}
        }
        let _ = writeln!(o);
        let it = self.iteration_time_s;
        let _ = writeln!(
            o,
            "  where the time goes (% of the iteration, mean over the stage's ranks)\n  {:>5} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "stage", "compute", "TP", "CP", "EP", "PP", "DP", "bubble", "idle"
        );
        let row = |o: &mut String, label: &str, b: &Breakdown| {
            let _ = writeln!(o, "  {label:>5} {}", breakdown_cells(b, it));
        };
        for s in &self.stages {
            row(&mut o, &s.stage.to_string(), &s.breakdown);
        }
        if self.stages.len() > 1 {
            row(&mut o, "all", &self.mean);
        }
        if self.mean.exposed_offload_s > 0.0 {
            let _ = writeln!(
                o,
                "  activation offload: {:.1}% of the iteration waits on host copies (training.cpu_offload_layers; a column of its own, so the table sums to 100% less this)",
                pct(self.mean.exposed_offload_s, it)
            );
        }
        if self.mean.exposed_host_s > 0.0 {
            let _ = writeln!(
                o,
                "  host dispatch: {:.1}% of the iteration waits on the host to issue kernels (compute.host{}; a column of its own, so the table sums to 100% less this)",
                pct(self.mean.exposed_host_s, it),
                if self.cuda_graph_scope.is_empty() {
                    String::new()
                } else {
                    format!(", CUDA graphs over {}", self.cuda_graph_scope.join(", "))
                }
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "  {} collectives ({} on the network, {} distinct plans), {} transfers, {} program nodes; simulated in {:.2} s",
            self.collectives, self.collectives_on_network, self.plans_built, self.net.completed, self.nodes_executed, self.sim_wall_s
        );
        if !self.collectives_by_group.is_empty() {
            let groups: Vec<String> = self
                .collectives_by_group
                .iter()
                .map(|g| format!("{} {} ({} on the network)", g.group, g.collectives, g.on_network))
                .collect();
            let _ = writeln!(o, "  by group: {}", groups.join(", "));
        }
        if let Some(ep) = self
            .collectives_by_group
            .iter()
            .find(|g| g.group == "ep" && g.collectives > 0 && g.on_network == 0)
        {
            let _ = writeln!(
                o,
                "  note: all {} expert-parallel collectives stayed inside a server (NVLink): the {} network carried no expert all-to-all; for EP across servers see examples/wormhole-moe-8x7b-64gpu.yaml",
                ep.collectives, self.backend
            );
        }
        if self.backend == "packet" {
            if let Some(e) = &self.packet_engine {
                let _ = writeln!(o, "  packet engine: {e}");
            }
            let n = &self.net;
            let _ = writeln!(
                o,
                "  packet network: {} events, {} ECN marks, {} PFC pauses, {} drops, {} NACKs, {} retransmitted",
                n.packet_events,
                n.ecn_marks,
                n.pfc_pauses,
                n.drops,
                n.nacks,
                Bytes(n.retransmitted_bytes)
            );
            if n.ff_freezes + n.memo_hits + n.memo_misses > 0 {
                let _ = writeln!(
                    o,
                    "  wormhole: {} of the {} the flows carried moved without packets ({:.1}%), {} freezes, memo {} hits / {} misses ({} entries)",
                    Bytes(n.ff_skipped_bytes),
                    Bytes(n.net_payload_bytes),
                    100.0 * n.ff_skipped_bytes as f64 / n.net_payload_bytes.max(1) as f64,
                    n.ff_freezes,
                    n.memo_hits,
                    n.memo_misses,
                    n.memo_entries
                );
            }
            if n.ff_watchdog_resumes > 0 {
                let _ = writeln!(
                    o,
                    "  WARNING: wormhole: {} frozen partitions waited for the watchdog's deadline (10 s simulated) with no event to end it: their flows finished late and the iteration time is too long; rerun with network.fast_forward: {{}} or --exact, and report it",
                    n.ff_watchdog_resumes
                );
            }
        }
        if !self.symmetry.is_empty() {
            let _ = writeln!(o, "  symmetry: {}", self.symmetry);
        }
        o
    }
}

/// A breakdown row's percentage cells (compute, exposed TP/CP/EP/PP/DP, bubble, idle) of an
/// iteration of `it` seconds, in the summary table's column widths.
fn breakdown_cells(b: &Breakdown, it: f64) -> String {
    format!(
        "{:>7.1}% {:>6.1}% {:>6.1}% {:>6.1}% {:>6.1}% {:>6.1}% {:>6.1}% {:>6.1}%",
        pct(b.compute_s, it),
        pct(b.exposed_tp_s, it),
        pct(b.exposed_cp_s, it),
        pct(b.exposed_ep_s, it),
        pct(b.exposed_pp_s, it),
        pct(b.exposed_dp_s, it),
        pct(b.bubble_s, it),
        pct(b.idle_s, it)
    )
}
