//! The system simulator: a scenario in, a [`Report`] out.
//!
//! [`simulate`] resolves the model and parallel plan, checks memory, generates the Megatron
//! programs ([`llmsim_workload::megatron`]), times every compute segment on the GPU
//! ([`llmsim_compute`]), and runs all units on one shared network ([`engine`]).

use std::sync::Arc;
use std::time::Instant;

use llmsim_ccl::expand::Granularity;
use llmsim_ccl::plan::Expansion;
use llmsim_ccl::tuning::Proto;
use llmsim_ccl::{AlgoChoice, PlanOptions, ScaleUpModel};
use llmsim_compute::{ComputeModel, Efficiencies, GemmShape, GpuSpec, KernelShape, OpDatabase, OpQuery, OpTime, TimeSource};
use llmsim_core::{Bandwidth, SimTime};
use llmsim_net::Network;
use llmsim_topo::{LinkKind, ScaleUp, Topology};
use llmsim_workload::dag::{NodeKind, Workload};
use llmsim_workload::dlrm::{self, DlrmConfig};
use llmsim_workload::megatron;
use llmsim_workload::ops::Pass;
use llmsim_workload::{MemoryFootprint, ModelConfig, ParallelConfig, TrainingConfig, WorkloadError, memory};
use serde::Serialize;
use thiserror::Error;

pub mod astra;
pub mod batch;
pub mod engine;
pub mod estimate;
pub mod report;
pub mod scenario;
pub mod schema;
pub mod yaml;

/// Rate samples per steadiness test of an uncontended partition in `llmsim run` when
/// `network.fast_forward.uncontended_window` is not given. On the Wormhole benchmark's LLM
/// workloads (bench/README.md, 2026-11-24) 3 cut the MoE 8x7B cold-memo packet events from 22.0 M
/// to 9.7 M (HPCC) and 21.2 M to 7.9 M (DCQCN) at 0.26% / 0.022% mean transfer error; 2 put
/// the worst transfer 15-29% off.
const UNCONTENDED_WINDOW: usize = 3;

/// `network.fast_forward.window` (l) when not given: 4 samples under HPCC, 8 under the other
/// CCs, one every `sample_us` (default 10 us). Measured from empty memo databases on the MoE
/// 8x7B / 64-GPU workload on H100 and on A100 (bench/README.md, 2026-11-24): HPCC with 4 skips
/// a DP-step-and-all-to-all transient that 8 samples outlast (1.7 M against 2.6 M packet events
/// on H100, 1.0 M against 1.6 M on A100, the same error); DCQCN with 4 takes its timer-driven
/// transients for steady state (0.22% against 0.006-0.008% mean transfer error, and more events).
/// TIMELY and DCTCP were not measured on these workloads and keep 8. Each algorithm's value is
/// its `FF_WINDOW` in the packet engine's registry (`cc/<name>.rs`).
#[must_use]
pub fn default_window(cc: llmsim_net::packet::CcMode) -> usize {
    cc.fast_forward_window()
}

pub use batch::Shared;

pub use engine::{EngineRun, Layout};
pub use report::Report;
pub use scenario::{Backend, GpuChoice, Scenario};

/// Everything that can go wrong, each naming the field or the cause.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("{field}: {message}")]
    Scenario { field: String, message: String },
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("cluster.gpu: {0}")]
    Compute(#[from] llmsim_compute::ComputeError),
    /// A calibration file the scenario names (`compute.efficiency`, `compute.database`).
    /// (The error is printed in the message, not chained as a source, so it appears once.)
    #[error("{field}: {file}{error}")]
    ComputeFile {
        field: &'static str,
        /// `path: ` where the error does not name its file itself, else empty.
        file: String,
        error: llmsim_compute::ComputeError,
    },
    #[error("cluster.topology: {0}")]
    Topo(#[from] llmsim_topo::TopoError),
    #[error("network: {0}")]
    Net(#[from] llmsim_net::NetError),
    #[error("collectives: {0}")]
    Ccl(#[from] llmsim_ccl::CclError),
    #[error("simulation stalled after {executed} of {total} nodes: {stuck}")]
    Deadlock { executed: u64, total: u64, stuck: String },
    #[error("internal error: {0}")]
    Internal(String),
    /// The run would not fit in memory: refused before it starts.
    #[error(
        "this run needs about {:.1} GiB but {:.1} GiB of memory is available ({estimate}); use network.backend: analytical (it folds data-parallel replicas), fewer micro-batches (training.global_batch_size), fewer layers or GPUs, or pass --ignore-memory-estimate to run anyway",
        estimate.memory_bytes as f64 / (1u64 << 30) as f64,
        *available as f64 / (1u64 << 30) as f64
    )]
    TooLarge { estimate: estimate::Estimate, available: u64 },
    #[error(transparent)]
    Import(#[from] llmsim_workload::ImportError),
}

/// A compute segment's timing, for the per-op table.
#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    pub stage: u32,
    pub segment: String,
    pub op: String,
    pub pass: &'static str,
    pub class: String,
    pub shape: String,
    pub flops: f64,
    pub bytes: f64,
    pub time_us: f64,
    pub bound: String,
    pub source: String,
    /// Executions per iteration on one rank of the stage.
    pub count: u64,
}

/// Everything a run produced.
pub struct Outcome {
    pub report: Report,
    pub engine: EngineRun,
    /// Shared with other experiments of a batch that generate the same workload.
    pub workload: Arc<Workload>,
    pub ops: Vec<OpRow>,
    pub layout: Layout,
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
}

/// The fastest NIC of host 0: the scale-out bandwidth per GPU.
fn nic_bandwidth(topo: &Topology) -> Bandwidth {
    topo.ports(llmsim_core::NodeId(0))
        .iter()
        .map(|l| topo.link(*l))
        .filter(|l| l.kind == LinkKind::HostNic)
        .map(|l| l.bandwidth)
        .max_by_key(|b| b.bps())
        .unwrap_or(Bandwidth::from_gbps(400))
}

/// Resolved model, training and parallel settings of a scenario.
pub struct Resolved {
    pub model: ModelConfig,
    pub training: TrainingConfig,
    pub parallel: ParallelConfig,
    pub gpu: &'static GpuSpec,
    pub gpus: u32,
    pub memory: MemoryFootprint,
}

/// Resolves the scenario and checks that it fits in memory.
///
/// # Errors
/// Any invalid setting, or [`WorkloadError::OutOfMemory`].
pub fn resolve(s: &Scenario) -> Result<Resolved, SimError> {
    let gpus = s.gpus()?;
    let gpu = s.cluster.gpu.resolve()?;
    let Some(spec) = &s.model else {
        return Err(SimError::Scenario {
            field: "model".into(),
            message: "this scenario has no transformer `model`".into(),
        });
    };
    let model = spec.resolve(&s.base_dir)?;
    if s.training.dtype == llmsim_compute::DType::Fp8
        && s.training.fp8_recipe == llmsim_workload::Fp8Recipe::Mxfp8
        && gpu.arch != llmsim_ccl::tuning::GpuArch::Blackwell
    {
        return Err(SimError::Scenario {
            field: "training.fp8_recipe".into(),
            message: format!(
                "mxfp8 needs Blackwell tensor cores (block-scaled MMA); {} has none: use delayed or current",
                gpu.name
            ),
        });
    }
    let parallel = s.parallel.resolve(gpus as u64, &model, &s.training)?;
    let mem = memory::footprint_on(&model, &s.training, &parallel, gpu.arch);
    if mem.firm() > gpu.memory_bytes {
        // The suggestion names the first single change to this plan that fits.
        memory::check_config_fits_on(&model, &s.training, &parallel, gpu.memory_bytes, gpu.name, gpu.arch)?;
    }
    Ok(Resolved {
        model,
        training: s.training.clone(),
        parallel,
        gpu,
        gpus,
        memory: mem,
    })
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
    run_workload(s, wl, layout, &r.training, info, opts, progress, wall, shared, ub)
}

/// The report's description of a transformer run.
fn transformer_info(r: &Resolved, wl: &Workload) -> report::RunInfo {
    let p = &r.parallel;
    let gbs = p.micro_batches(&r.training) * r.training.micro_batch_size * p.dp;
    let vpp = if wl.vpp > 1 { format!(" vpp{}", wl.vpp) } else { String::new() };
    report::RunInfo {
        model: r.model.name.clone(),
        params: r.model.param_count(),
        gpu: r.gpu,
        gpus: r.gpus,
        dtype: r.training.dtype,
        parallel: format!(
            "tp{} pp{}{} dp{} cp{} ep{}{}{}{}",
            p.tp,
            p.pp,
            vpp,
            p.dp,
            p.cp,
            p.ep,
            if p.sp() { " +sp" } else { "" },
            if p.use_distributed_optimizer { " +distopt" } else { "" },
            match (p.fsdp(), p.reshard_after_forward) {
                (true, true) => " +zero3",
                (true, false) => " +zero3 (no reshard)",
                _ => "",
            }
        ),
        global_batch: gbs,
        seq_length: r.training.seq_length,
        sample_unit: "tokens",
        memory: r.memory.clone(),
        layers_per_stage: r.model.num_hidden_layers / p.pp,
    }
}

/// Per-GPU memory of a DLRM: its tables, the MLPs with gradients and SGD, activations.
fn dlrm_memory(d: &DlrmConfig, gpus: u64) -> MemoryFootprint {
    let e = d.element_bytes();
    let mlp = d.bottom_params() + d.top_params();
    let tables = d.local_tables(gpus) * d.rows_per_table * d.embedding_dim * e;
    let parameters = tables + mlp * e;
    let gradients = mlp * d.grad_bytes();
    let widths: u64 = d.bottom_layers().iter().chain(d.top_layers().iter()).map(|(i, o)| i + o).sum();
    let activations = 2 * d.batch_size_per_gpu * (widths + d.num_tables * d.embedding_dim) * e;
    MemoryFootprint::new(parameters, gradients, 0, activations)
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
    let mem = dlrm_memory(d, gpus as u64);
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
    };
    run_workload(s, wl, layout, &training, info, opts, progress, wall, shared, None)
}

#[allow(clippy::too_many_arguments)]
fn run_workload(
    s: &Scenario,
    wl: Arc<Workload>,
    layout: Layout,
    training: &TrainingConfig,
    info: report::RunInfo,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
    wall: Instant,
    shared: &Shared,
    ub: Option<TpOverlapTimer>,
) -> Result<Outcome, SimError> {
    let gpu = info.gpu;
    let cm = compute_model(s, gpu)?;
    if !(s.compute.overlap_slowdown >= 1.0 && s.compute.overlap_slowdown.is_finite()) {
        return Err(SimError::Scenario {
            field: "compute.overlap_slowdown".into(),
            message: format!("{} must be a finite factor >= 1.0", s.compute.overlap_slowdown),
        });
    }
    // Data-parallel replicas run the same programs at the same times when the network has no
    // contention (analytical backend): simulating replica 0 is then exact. With contention
    // (flow) every replica is simulated, so their traffic really shares the links.
    // Imported workloads have explicit groups: every unit runs.
    let fold = s.network.backend == Backend::Analytical && !opts.no_fold && layout.dp > 1 && wl.explicit.is_none();
    let active_dp = if fold { 1 } else { layout.dp };
    // Estimate before building anything large; refuse what would not fit.
    let est = estimate::estimate(&wl, layout, active_dp, u64::from(info.gpus), s.network.backend);
    if !opts.ignore_memory_estimate
        && let Some(available) = estimate::available_memory()
        && est.memory_bytes > available
    {
        return Err(SimError::TooLarge { estimate: est, available });
    }
    // Topology.
    let nvlink = nvlink_of(s, gpu);
    let scale_up = ScaleUp {
        gpus_per_server: s.cluster.gpus_per_node,
        bandwidth: nvlink,
        latency: s.cluster.nvlink_latency.unwrap_or(SimTime::from_ns(250)),
    };
    let topo = shared.topology(&(&s.cluster.topology, info.gpus, scale_up, s.seed), || {
        s.cluster.topology.build(info.gpus, scale_up, s.seed).map_err(SimError::from)
    })?;
    let su = scale_up_model(s, gpu);
    let proto: Option<Proto> = match &s.collectives.proto {
        Some(p) => Some(p.parse().map_err(|e| SimError::Scenario {
            field: "collectives.proto".into(),
            message: format!("{e}"),
        })?),
        None => None,
    };
    let plan = PlanOptions {
        arch: gpu.arch,
        nvlink_bw: nvlink,
        nic_bw: nic_bandwidth(&topo),
        algo: match s.collectives.algo {
            scenario::AlgoSpec::Auto => AlgoChoice::Auto,
            scenario::AlgoSpec::Ring => AlgoChoice::Ring,
            scenario::AlgoSpec::Tree => AlgoChoice::Tree,
            scenario::AlgoSpec::HalvingDoubling => AlgoChoice::Force(Expansion::HalvingDoubling),
            scenario::AlgoSpec::Hierarchical => AlgoChoice::Force(Expansion::Hierarchical),
        },
        proto,
        channels: s.collectives.channels,
        granularity: match s.collectives.granularity {
            scenario::GranularitySpec::Auto => Granularity::Auto,
            scenario::GranularitySpec::Step => Granularity::Step,
            scenario::GranularitySpec::Pipelined => Granularity::Pipelined,
        },
        pxn: s.collectives.pxn,
    };
    let (seg_time, ops) = time_segments(&wl, &cm, training, ub.as_ref());
    let trace_units: Vec<u32> = if s.output.trace {
        match s.output.trace_ranks {
            scenario::TraceRanks::FirstReplica => (0..layout.pp).map(|st| layout.unit(0, 0, st)).collect(),
            scenario::TraceRanks::All => (0..layout.units()).collect(),
        }
    } else {
        Vec::new()
    };
    let symmetry = if fold {
        format!(
            "data-parallel replicas folded: replica 0 of {} simulated (exact: the analytical backend has no contention; collectives still span every replica's hosts)",
            layout.dp
        )
    } else if s.network.backend == Backend::Flow {
        // The report says which fast paths a run used (issue 29).
        "flow fast path: max-min filling over shared links and each flow's tightest own link (exact: bit-identical rates); every data-parallel replica simulated (their traffic can share links)".to_string()
    } else {
        String::new()
    };
    let trace_units: Vec<u32> = trace_units.into_iter().filter(|u| layout.coords(*u).1 < active_dp).collect();
    let net: Box<dyn Network> = match s.network.backend {
        Backend::Analytical => Box::new(llmsim_net::analytical::AnalyticalNetwork::new(topo.clone())),
        Backend::Flow => Box::new(llmsim_net::flow::FlowNetwork::new(topo.clone())),
        Backend::Packet => {
            use llmsim_net::packet::{PacketConfig, PacketNetwork};
            let cc = s.network.cc.0;
            let mut cfg = PacketConfig {
                seed: s.seed,
                ..PacketConfig::ns3_defaults(cc)
            };
            cfg.load_balance = match s.network.load_balance.unwrap_or_default() {
                scenario::LoadBalanceSpec::Ecmp => llmsim_net::packet::LoadBalance::Ecmp,
                scenario::LoadBalanceSpec::Spray => llmsim_net::packet::LoadBalance::Spray,
                scenario::LoadBalanceSpec::Flowlet => llmsim_net::packet::LoadBalance::Flowlet {
                    gap: s.network.flowlet_gap.unwrap_or(SimTime::from_us(100)),
                },
                scenario::LoadBalanceSpec::Adaptive => llmsim_net::packet::LoadBalance::Adaptive,
            };
            let ff = s.network.fast_forward.as_ref();
            if let Some(ff) = ff {
                let window = ff.window.unwrap_or(default_window(cc));
                cfg.wormhole = llmsim_net::packet::WormholeConfig {
                    fast_forward: true,
                    theta: ff.theta,
                    window,
                    sample_interval: llmsim_core::SimTime::from_us(ff.sample_us),
                    memo: ff.memo || ff.memo_db.is_some(),
                    uncontended_window: ff.uncontended_window.unwrap_or(UNCONTENDED_WINDOW.min(window)),
                };
                cfg.wormhole.validate().map_err(|message| SimError::Scenario {
                    field: "network.fast_forward".into(),
                    message,
                })?;
            }
            let mut net = PacketNetwork::new(topo.clone(), cfg).map_err(|e| SimError::Scenario {
                field: "network.backend".into(),
                message: e.to_string(),
            })?;
            if let Some(path) = ff.and_then(|f| f.memo_db.as_ref()) {
                net = net.with_memo_file(path.into()).map_err(|e| SimError::Scenario {
                    field: "network.fast_forward.memo_db".into(),
                    message: format!("{e}; give a path to an SQLite file this run may create or a memo database an earlier run saved"),
                })?;
            }
            Box::new(net)
        }
    };
    let eopts = engine::EngineOptions {
        plan,
        scale_up: su,
        ideal_comm: opts.ideal_comm,
        overlap_slowdown: s.compute.overlap_slowdown,
        trace_units,
        record_flows: s.output.flows,
        active_dp,
    };
    let run = engine::Engine::new(topo.clone(), net, &wl, layout, &seg_time, eopts).run(progress)?;
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

/// The scenario's compute model: the GPU's roofline with the scenario's efficiency table and
/// op-time database.
///
/// # Errors
/// An unreadable efficiency table or op database.
pub fn compute_model(s: &Scenario, gpu: &'static GpuSpec) -> Result<ComputeModel, SimError> {
    let mut cm = ComputeModel::new(gpu);
    if let Some(p) = &s.compute.efficiency {
        let text = std::fs::read_to_string(s.base_dir.join(p)).map_err(|e| SimError::Scenario {
            field: "compute.efficiency".into(),
            message: format!("{}: {e}", p.display()),
        })?;
        let eff = Efficiencies::from_csv_str(&text).map_err(|error| SimError::ComputeFile {
            field: "compute.efficiency",
            file: format!("{}: ", p.display()),
            error,
        })?;
        cm = cm.with_efficiencies(eff);
    }
    if let Some(p) = &s.compute.database {
        let db = OpDatabase::load(s.base_dir.join(p)).map_err(|error| SimError::ComputeFile {
            field: "compute.database",
            file: String::new(),
            error,
        })?;
        cm = cm.with_database(db);
    }
    Ok(cm)
}

/// A generated workload with its layout and every segment's time, for exporters.
pub struct Generated {
    pub workload: Workload,
    pub layout: Layout,
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
    let cm = compute_model(s, r.gpu)?;
    let ub = tp_overlap_timer(s, &r.parallel, r.gpu, false)?;
    let (seg_time, _) = time_segments(&wl, &cm, &r.training, ub.as_ref());
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

/// An imported workload (Chakra traces, a SimAI file) to run on a scenario's cluster.
pub struct ImportedRun {
    pub workload: Workload,
    pub layout: Layout,
    /// What the report calls the workload, e.g. `chakra:et/gpt`.
    pub label: String,
    /// How the ranks were grouped, for the report's `parallel` line.
    pub parallel: String,
    /// Samples per iteration and tokens per sample, when the source says (else 0).
    pub global_batch: u64,
    pub seq_length: u64,
    /// Model parameters and the memory footprint per GPU, when the source says (else 0).
    pub params: u64,
    pub memory: MemoryFootprint,
    pub layers_per_stage: u64,
}

impl ImportedRun {
    /// A workload whose source records nothing beyond its ranks: no batch, sequence, model size,
    /// memory footprint or layer count (the report shows them as unknown).
    pub fn bare(workload: Workload, layout: Layout, label: String, parallel: String) -> Self {
        ImportedRun {
            workload,
            layout,
            label,
            parallel,
            global_batch: 0,
            seq_length: 0,
            params: 0,
            memory: MemoryFootprint::default(),
            layers_per_stage: 0,
        }
    }

    /// An imported Chakra workload, with what llmsim's own export recorded when present.
    pub fn from_chakra(imp: llmsim_workload::chakra::Imported, label: &str) -> Self {
        let l = imp.layout;
        match imp.info {
            Some(i) => ImportedRun {
                workload: imp.workload,
                layout: l,
                label: i.model,
                parallel: i.parallel,
                global_batch: i.global_batch,
                seq_length: i.seq_length,
                params: i.params,
                memory: i.memory,
                layers_per_stage: i.layers_per_stage,
            },
            None => {
                let parallel = format!("{} ranks: {} units of {} lockstep ranks", imp.ranks, l.units(), l.tp);
                ImportedRun::bare(imp.workload, l, label.to_string(), parallel)
            }
        }
    }
}

/// Runs an imported workload on the scenario's cluster (its `model`, `training` and `parallel`
/// sections must be absent). The cluster's GPU count defaults to the workload's ranks.
///
/// # Errors
/// A cluster whose GPU count differs from the workload's ranks, or any [`simulate`] error.
pub fn simulate_imported(
    s: &Scenario,
    imp: ImportedRun,
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Outcome, SimError> {
    let wall = Instant::now();
    if s.model.is_some() || s.dlrm.is_some() {
        return Err(SimError::Scenario {
            field: "model".into(),
            message: "an imported workload brings its own model; remove `model`/`dlrm` (a cluster file needs `cluster:` only)".into(),
        });
    }
    let ranks = imp.layout.units() * imp.layout.tp;
    let mut s = s.clone();
    if s.cluster.gpus.is_none() && s.cluster.nodes.is_none() {
        s.cluster.gpus = Some(ranks);
    }
    let gpus = s.gpus()?;
    if gpus != ranks {
        return Err(SimError::Scenario {
            field: "cluster.gpus".into(),
            message: format!("the cluster has {gpus} GPUs but the workload has {ranks} ranks; set cluster.gpus: {ranks} (or drop it)"),
        });
    }
    let gpu = s.cluster.gpu.resolve()?;
    let info = report::RunInfo {
        model: imp.label,
        params: imp.params,
        gpu,
        gpus,
        dtype: llmsim_compute::DType::Bf16,
        parallel: imp.parallel,
        global_batch: imp.global_batch,
        seq_length: imp.seq_length,
        sample_unit: "tokens",
        memory: imp.memory,
        layers_per_stage: imp.layers_per_stage,
    };
    let training = TrainingConfig::default();
    run_workload(
        &s,
        Arc::new(imp.workload),
        imp.layout,
        &training,
        info,
        opts,
        progress,
        wall,
        &Shared::default(),
        None,
    )
}

/// What timing a GEMM beside its overlapped TP collective needs: the scale-up (NVLink) model the
/// collective runs on, the TP degree and the GPU's SMs.
struct TpOverlapTimer {
    scale_up: ScaleUpModel,
    tp: u32,
    sms: u32,
    /// `--ideal-comm`: the collective takes no time.
    ideal: bool,
    /// `compute.overlap_slowdown`: the overlapped part of the GEMM runs this much slower.
    slowdown: f64,
}

/// Times every segment: the sum of its ops, or its measured duration. Returns the segment times and each op's timing.
/// A GEMM with an overlapped TP collective takes the pair's time ([`llmsim_workload::ops::OverlapMethod::overlapped`]).
fn time_segments(
    wl: &Workload,
    cm: &ComputeModel,
    t: &TrainingConfig,
    ub: Option<&TpOverlapTimer>,
) -> (Vec<SimTime>, Vec<Vec<Option<OpTime>>>) {
    let mut times = Vec::with_capacity(wl.segments.len());
    let mut per_op = Vec::with_capacity(wl.segments.len());
    for seg in &wl.segments {
        let mut total = SimTime::ZERO;
        let mut row = Vec::with_capacity(seg.ops.len());
        for op in &seg.ops {
            let q = op.query(t.dtype);
            let mut ot = q.as_ref().map(|q| cm.time(q));
            if let (Some(o), Some(ov), Some(ub), Some(q)) = (ot.as_mut(), op.overlap, ub, q) {
                let comm = if ub.ideal {
                    SimTime::ZERO
                } else {
                    ub.scale_up.time(ov.op, llmsim_core::Bytes(ov.bytes), ub.tp)
                };
                // A pipelined overlap runs the GEMM as `chunks` GEMMs over slices of its rows.
                let chunks = ov.method.chunks(u64::from(ub.tp));
                let gemm = match q.kernel {
                    Some(KernelShape::Gemm(g)) if chunks > 1 && !ub.ideal => {
                        let part = GemmShape {
                            m: g.m.div_ceil(chunks),
                            ..g
                        };
                        let f = 1.0 / chunks as f64;
                        let qp = OpQuery {
                            flops: q.flops * f,
                            bytes: q.bytes * f,
                            kernel: Some(KernelShape::Gemm(part)),
                            ..q
                        };
                        SimTime::from_ps(cm.time(&qp).time.as_ps().saturating_mul(chunks))
                    }
                    _ => o.time,
                };
                o.time = ov.method.overlapped(gemm, comm, ub.sms, u64::from(ub.tp), ub.slowdown);
            }
            if let Some(o) = &ot {
                total += o.time;
            }
            row.push(ot);
        }
        times.push(seg.duration.unwrap_or(total));
        per_op.push(row);
    }
    (times, per_op)
}

/// The scenario's NVLink bandwidth per GPU and direction: `cluster.nvlink_bandwidth`, else the
/// GPU's.
fn nvlink_of(s: &Scenario, gpu: &GpuSpec) -> Bandwidth {
    s.cluster.nvlink_bandwidth.unwrap_or(gpu.nvlink_bandwidth)
}

/// The alpha-beta model of collectives inside a server, for the scenario's GPU and NVLink.
fn scale_up_model(s: &Scenario, gpu: &GpuSpec) -> ScaleUpModel {
    ScaleUpModel::from_nvlink(gpu.name, nvlink_of(s, gpu), s.cluster.gpus_per_node)
}

/// The TP-overlap timer of a transformer scenario, when `parallel.tp_comm_overlap` is on.
///
/// # Errors
/// A TP group larger than a server: userbuffers overlap works over NVLink only.
fn tp_overlap_timer(s: &Scenario, p: &ParallelConfig, gpu: &GpuSpec, ideal: bool) -> Result<Option<TpOverlapTimer>, SimError> {
    if !(p.tp_comm_overlap && p.tp > 1) {
        return Ok(None);
    }
    if p.tp > u64::from(s.cluster.gpus_per_node) {
        return Err(SimError::Scenario {
            field: "parallel.tp_comm_overlap".into(),
            message: format!(
                "TP communication overlap (userbuffers) runs over NVLink inside one server, but tp={} spans more than gpus_per_node={}; turn it off or keep tp <= gpus_per_node",
                p.tp, s.cluster.gpus_per_node
            ),
        });
    }
    Ok(Some(TpOverlapTimer {
        scale_up: scale_up_model(s, gpu),
        tp: p.tp as u32,
        sms: gpu.sm_count,
        ideal,
        slowdown: s.compute.overlap_slowdown,
    }))
}

fn op_rows(wl: &Workload, timed: &[Vec<Option<OpTime>>]) -> Vec<OpRow> {
    let mut rows = Vec::new();
    for (si, prog) in wl.stages.iter().enumerate() {
        let mut count = vec![0u64; wl.segments.len()];
        for n in &prog.nodes {
            if let NodeKind::Comp { segment } = n.kind {
                count[segment as usize] += 1;
            }
        }
        for (seg_i, seg) in wl.segments.iter().enumerate() {
            if count[seg_i] == 0 {
                continue;
            }
            for (op, ot) in seg.ops.iter().zip(&timed[seg_i]) {
                let Some(ot) = ot else { continue };
                let (class, flops, bytes) = match &op.kind {
                    llmsim_workload::OpSpecKind::Compute { class, flops, bytes } => (format!("{class:?}"), *flops, *bytes),
                    llmsim_workload::OpSpecKind::Comm { .. } => continue,
                };
                rows.push(OpRow {
                    stage: si as u32,
                    segment: seg.name.clone(),
                    op: op.name.to_string(),
                    pass: megatron::pass_name(op.pass),
                    class,
                    shape: op.shape.clone(),
                    flops,
                    bytes,
                    time_us: ot.time.as_us_f64(),
                    bound: format!("{:?}", ot.bound).to_lowercase(),
                    source: match ot.source {
                        TimeSource::Database => "database".into(),
                        TimeSource::Roofline => "roofline".into(),
                    },
                    count: count[seg_i],
                });
            }
        }
    }
    rows
}

/// FLOPs of one iteration over all GPUs: (model FLOPs: no recomputation, no optimizer;
/// hardware FLOPs: everything executed).
pub fn iteration_flops(ops: &[OpRow], layout: Layout, explicit: bool) -> (f64, f64) {
    // Ranks that run each program: a stage's, or (imported workloads) one unit's.
    let ranks_per_stage = if explicit { layout.tp } else { layout.tp * layout.cp * layout.dp } as f64;
    let mut model = 0.0;
    let mut hw = 0.0;
    for r in ops {
        let f = r.flops * r.count as f64 * ranks_per_stage;
        hw += f;
        if r.pass != megatron::pass_name(Pass::Recompute) && r.class != "Optimizer" {
            model += f;
        }
    }
    (model, hw)
}
