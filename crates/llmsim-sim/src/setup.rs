//! Scenario to model: the resolved model and plan, the compute model, the NVLink and TP-overlap
//! models, and what the report says about a transformer run.

use llmsim_ccl::ScaleUpModel;
use llmsim_compute::{ComputeModel, Efficiencies, GpuSpec, OpDatabase};
use llmsim_core::Bandwidth;
use llmsim_topo::{LinkKind, Topology};
use llmsim_workload::dag::Workload;
use llmsim_workload::{MemoryFootprint, ModelConfig, ParallelConfig, TrainingConfig, memory};

use crate::{Scenario, SimError, report};

/// The fastest NIC of host 0: the scale-out bandwidth per GPU.
pub(crate) fn nic_bandwidth(topo: &Topology) -> Bandwidth {
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
    /// The model, from its preset or fields.
    pub model: ModelConfig,
    /// The training settings.
    pub training: TrainingConfig,
    /// The parallel settings, with dp derived from the GPU count.
    pub parallel: ParallelConfig,
    /// The GPU.
    pub gpu: &'static GpuSpec,
    /// GPUs in the cluster.
    pub gpus: u32,
    /// The memory footprint per GPU.
    pub memory: MemoryFootprint,
}

/// Resolves the scenario and checks that it fits in memory.
///
/// # Errors
/// Any invalid setting, or [`llmsim_workload::WorkloadError::OutOfMemory`].
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
    // Precisions the GPU has no tensor cores for, as Transformer Engine refuses them: (refused,
    // field, what it needs, the fix). Per-tensor FP8 (delayed or current scaling): TE's
    // `fp8_autocast` asserts FP8 support ("Device compute capability 8.9 or higher required for
    // FP8 execution", `pytorch/fp8.py` `check_fp8_support`); it does not fall back to BF16.
    // BF16 (V100): PyTorch emulates BF16 below compute capability 8.0 without tensor cores and
    // `torch.cuda.is_bf16_supported()` is false there; such a run is not what llmsim times.
    use llmsim_compute::DType;
    use llmsim_workload::Fp8Recipe;
    let (dtype, recipe) = (s.training.dtype, s.training.fp8_recipe);
    let fp8 = dtype == DType::Fp8;
    let half = if gpu.supports(DType::Bf16) {
        "use bf16 (or fp16)"
    } else {
        "use fp16"
    };
    for (refused, field, needs, fix) in [
        (
            dtype == DType::Bf16 && !gpu.supports(DType::Bf16),
            "training.dtype",
            "bf16 needs BF16 tensor cores (Ampere or newer: compute capability 8.0)",
            "use fp16",
        ),
        (
            fp8 && recipe == Fp8Recipe::Mxfp8 && gpu.arch != llmsim_ccl::tuning::GpuArch::Blackwell,
            "training.fp8_recipe",
            "mxfp8 needs Blackwell tensor cores (block-scaled MMA)",
            "use delayed or current",
        ),
        (
            fp8 && recipe == Fp8Recipe::Blockwise && !gpu.supports(DType::Fp8Block),
            "training.fp8_recipe",
            "blockwise FP8 needs FP8 tensor cores (Hopper or Blackwell; Transformer Engine requires compute capability 9.0)",
            "use dtype bf16",
        ),
        (
            fp8 && !gpu.supports(DType::Fp8),
            "training.dtype",
            "fp8 needs FP8 tensor cores (Ada, Hopper or Blackwell; Transformer Engine requires compute capability 8.9)",
            half,
        ),
        (
            dtype == DType::Fp4 && !gpu.supports(DType::Fp4),
            "training.dtype",
            "fp4 (NVFP4) needs FP4 tensor cores (Blackwell: B200, GB200, B300, GB300)",
            "use fp8 or bf16",
        ),
    ] {
        if refused {
            return Err(SimError::Scenario {
                field: field.into(),
                message: format!("{needs}; {} has none: {fix}", gpu.name),
            });
        }
    }
    let mut parallel = s.parallel.resolve(gpus as u64, &model, &s.training)?;
    parallel.gpus_per_node = u64::from(s.cluster.gpus_per_node);
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

/// The report's description of a transformer run.
pub(crate) fn transformer_info(r: &Resolved, wl: &Workload) -> report::RunInfo {
    let p = &r.parallel;
    let gbs = p.micro_batches(&r.training) * r.training.micro_batch_size * p.dp;
    let vpp = if p.dual_pipe_v() {
        " dualpipev".to_string()
    } else if wl.vpp > 1 {
        format!(" vpp{}", wl.vpp)
    } else {
        String::new()
    };
    let t = &r.training;
    let model = match t.mtp_num_layers {
        // A checkpoint with MTP modules trained without them: say so, since Megatron-Bridge's
        // recipes for such models (DeepSeek-V3) train them and llmsim's default does not.
        0 if r.model.num_nextn_predict_layers > 0 => format!(
            "{} without its {} MTP module{} (training.mtp_num_layers: 0)",
            r.model.name,
            r.model.num_nextn_predict_layers,
            if r.model.num_nextn_predict_layers == 1 { "" } else { "s" }
        ),
        0 => r.model.name.clone(),
        n => format!(
            "{} + MTP {n} depth{}{}",
            r.model.name,
            if n == 1 { "" } else { "s" },
            if t.mtp_repeated_layer && n > 1 { " (one block)" } else { "" }
        ),
    };
    report::RunInfo {
        model,
        params: r.model.param_count(),
        gpu: r.gpu,
        gpus: r.gpus,
        dtype: r.training.dtype,
        parallel: format!(
            "tp{} pp{}{} dp{} cp{} ep{}{}{}{}{}",
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
            },
            match t.optimizer {
                llmsim_workload::OptimizerKind::Adam => "",
                llmsim_workload::OptimizerKind::Muon => " +muon",
                llmsim_workload::OptimizerKind::DistMuon => " +dist_muon",
            }
        ),
        global_batch: gbs,
        seq_length: r.training.seq_length,
        sample_unit: "tokens",
        memory: r.memory.clone(),
        layers_per_stage: r.model.num_hidden_layers / p.pp,
        moe: Some(r.model.num_experts > 0),
    }
}

/// How many times longer a job of `gpus` GPUs' compute-bound kernels take than the calibrated
/// board's, from `compute.gpu_variability` (`llmsim_compute::variability::slowest_of`).
///
/// # Errors
/// A `sigma` or `screen` out of range, naming the field.
pub fn slowest_gpu_pace(s: &Scenario, gpus: u64) -> Result<f64, SimError> {
    let v = &s.compute.gpu_variability;
    let max_sigma = llmsim_compute::variability::MAX_SIGMA;
    if !(v.sigma.is_finite() && (0.0..=max_sigma).contains(&v.sigma)) {
        return Err(SimError::Scenario {
            field: "compute.gpu_variability.sigma".into(),
            message: format!("{} must be a fraction from 0 (off) to {max_sigma}, e.g. 0.016", v.sigma),
        });
    }
    if !(v.screen.is_finite() && v.screen > 0.0 && v.screen <= 1.0) {
        return Err(SimError::Scenario {
            field: "compute.gpu_variability.screen".into(),
            message: format!("{} must be a fraction above 0 and at most 1, e.g. 0.05", v.screen),
        });
    }
    Ok(llmsim_compute::variability::slowest_of(gpus, v.sigma, v.screen))
}

/// The scenario's compute model for a job of `gpus` GPUs: the GPU's roofline with the
/// scenario's efficiency table and op-time database, paced by the job's slowest board.
///
/// # Errors
/// An unreadable efficiency table or op database; `compute.gpu_variability` out of range.
pub fn compute_model(s: &Scenario, gpu: &'static GpuSpec, gpus: u64) -> Result<ComputeModel, SimError> {
    let mut cm = ComputeModel::new(gpu).with_pace(slowest_gpu_pace(s, gpus)?);
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

/// What timing a GEMM beside its overlapped TP collective needs: the scale-up (NVLink) model the
/// collective runs on, the TP degree and the GPU's SMs.
pub(crate) struct TpOverlapTimer {
    pub scale_up: ScaleUpModel,
    pub tp: u32,
    pub sms: u32,
    /// `--ideal-comm`: the collective takes no time.
    pub ideal: bool,
    /// `compute.overlap_slowdown`: the overlapped part of the GEMM runs this much slower.
    pub slowdown: f64,
}

/// The scenario's NVLink bandwidth per GPU and direction: `cluster.nvlink_bandwidth`, else the
/// GPU's.
pub(crate) fn nvlink_of(s: &Scenario, gpu: &GpuSpec) -> Bandwidth {
    s.cluster.nvlink_bandwidth.unwrap_or(gpu.nvlink_bandwidth)
}

/// The alpha-beta model of collectives inside a server, for the scenario's GPU and NVLink.
pub(crate) fn scale_up_model(s: &Scenario, gpu: &GpuSpec) -> ScaleUpModel {
    ScaleUpModel::from_nvlink(gpu.name, nvlink_of(s, gpu), s.cluster.gpus_per_node)
}

/// `su` with the `flex` token dispatcher's measured all-to-all inside the NVLink domain
/// ([`llmsim_ccl::scaleup::HybridEp`]) when `p` uses that dispatcher with its HybridEP backend on
/// a GPU (or a custom GPU's base) where HybridEP was measured; `su` unchanged otherwise (DeepEP
/// takes NCCL's model).
pub(crate) fn with_flex(mut su: ScaleUpModel, p: &ParallelConfig, gpu: &GpuSpec) -> ScaleUpModel {
    if p.moe_token_dispatcher == llmsim_workload::MoeDispatcher::Flex
        && p.moe_flex_backend == llmsim_workload::FlexBackend::HybridEp
        && p.ep > 1
    {
        let h = llmsim_ccl::scaleup::HybridEp::for_gpu;
        su.flex_all_to_all = h(gpu.name, su.nvlink).or_else(|| gpu.base.and_then(|b| h(b, su.nvlink)));
    }
    su
}

/// The TP-overlap timer of a transformer scenario, when a GEMM may carry a TP collective beside
/// it: `parallel.tp_comm_overlap` (userbuffers) or `parallel.tp_backward_overlap` (NCCL
/// collectives of a column-parallel backward) with the TP group inside one server.
///
/// # Errors
/// A TP group larger than a server under `tp_comm_overlap`: userbuffers overlap works over NVLink
/// only.
pub(crate) fn tp_overlap_timer(s: &Scenario, p: &ParallelConfig, gpu: &GpuSpec, ideal: bool) -> Result<Option<TpOverlapTimer>, SimError> {
    if !(p.tp > 1 && (p.tp_comm_overlap || p.tp_backward_overlap_applies())) {
        return Ok(None);
    }
    if p.tp_comm_overlap && p.tp > u64::from(s.cluster.gpus_per_node) {
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

/// The cluster a run needs before its engine: the topology (shared between runs through
/// `shared`), the scale-up (NVLink) collective model, and the collective planning options from
/// `collectives.*`.
///
/// # Errors
/// The topology's build errors; an unknown `collectives.proto`.
pub(crate) fn cluster_setup(
    s: &Scenario,
    gpu: &GpuSpec,
    gpus: u32,
    shared: &crate::Shared,
) -> Result<(std::sync::Arc<Topology>, ScaleUpModel, llmsim_ccl::PlanOptions), SimError> {
    let nvlink = nvlink_of(s, gpu);
    let scale_up = llmsim_topo::ScaleUp {
        gpus_per_server: s.cluster.gpus_per_node,
        bandwidth: nvlink,
        latency: s.cluster.nvlink_latency.unwrap_or(llmsim_core::SimTime::from_ns(250)),
    };
    let topo = shared.topology(&(&s.cluster.topology, gpus, scale_up, s.seed, &s.faults), || {
        let mut t = s.cluster.topology.build(gpus, scale_up, s.seed).map_err(SimError::from)?;
        crate::faults::apply_to_topology(&s.faults, &mut t)?;
        Ok(t)
    })?;
    let su = scale_up_model(s, gpu);
    let proto: Option<llmsim_ccl::tuning::Proto> = match &s.collectives.proto {
        Some(p) => Some(p.parse().map_err(|e| SimError::Scenario {
            field: "collectives.proto".into(),
            message: format!("{e}"),
        })?),
        None => None,
    };
    let plan = llmsim_ccl::PlanOptions {
        arch: gpu.arch,
        nvlink_bw: nvlink,
        nic_bw: nic_bandwidth(&topo),
        algo: s.collectives.algo,
        proto,
        channels: s.collectives.channels,
        granularity: s.collectives.granularity,
        pxn: s.collectives.pxn,
        chunks: s.collectives.chunks,
        all_to_all_chunks: s.collectives.all_to_all_chunks,
        chunks_in_flight: s.collectives.chunks_in_flight,
        injection_latency: s.collectives.injection_latency,
        // Without contention, an all-to-all sent to every peer at once would give each transfer
        // a whole NIC: the analytical backend runs NCCL's rounds instead.
        all_to_all_rounds: s.network.backend == crate::scenario::Backend::Analytical,
    };
    plan.check_chunks().map_err(|e| match e {
        llmsim_ccl::CclError::Invalid { field, message } => SimError::Scenario {
            field: format!("collectives.{field}"),
            message,
        },
        e => SimError::Ccl(e),
    })?;
    Ok((topo, su, plan))
}
