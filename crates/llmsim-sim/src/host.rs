//! Host (CPU) dispatch costs of a workload (`compute.host`), for the engine's
//! [`HostDispatch`]: what each compute segment costs the host thread to issue, and where the host
//! waits for the GPU.

use llmsim_compute::{KernelShape, OpClass};
use llmsim_core::{CollectiveOp, SimTime};
use llmsim_workload::dag::{DagNodeKind, Phase, Stream, Workload};
use llmsim_workload::ops::{OpSpec, Pass};
use llmsim_workload::{FlexBackend, MoeDispatcher, MoeExperts, OpSpecKind, ParallelConfig};

use crate::SimError;
use crate::engine::{HostDispatch, HostSeg};
use crate::ops::OpTimes;
use crate::scenario::{GraphScope, HostSpec};

/// `v` if it is finite and >= 0, else an error naming `field` and its unit.
fn non_negative(field: &str, v: f64, unit: &str) -> Result<f64, SimError> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(SimError::Scenario {
            field: field.into(),
            message: format!("{v} must be a finite number of {unit} >= 0"),
        });
    }
    Ok(v)
}

fn micros(field: &str, us: f64) -> Result<SimTime, SimError> {
    non_negative(field, us, "microseconds").map(SimTime::from_us_f64)
}

/// The engine's host model for a run of plan `p` (see [`dispatch`]): none where `compute.host`
/// is off.
pub(crate) fn for_run(
    spec: Option<&HostSpec>,
    wl: &Workload,
    ops: &OpTimes,
    p: &ParallelConfig,
) -> Result<Option<std::sync::Arc<HostDispatch>>, SimError> {
    match spec {
        Some(h) => Ok(dispatch(h, wl, ops, p)?.map(std::sync::Arc::new)),
        None => Ok(None),
    }
}

/// Whether the host synchronizes after each blocking pipeline exchange under `p`:
/// Megatron's runtime with `batch_p2p_sync`.
pub(crate) fn p2p_sync_of(p: &ParallelConfig) -> bool {
    p.pp_impl == llmsim_workload::PpImpl::Megatron && p.batch_p2p_sync
}

/// Host ops of one graph replay (Transformer Engine's graphed callable: the copy of the input
/// into the graph's static buffer, the replay call, the outputs handed back). An estimate, not a
/// measurement of TE: a bare `cudaGraphLaunch` costs about 15 us plus 0.6 us per node on an
/// sm_120 laptop with CUDA 13.3 (ahrefs/ocannl issue #488), about 27 us for a 20-kernel
/// attention block, to which the Python wrapper and the input copy add.
pub const GRAPH_REPLAY_OPS: f64 = 3.0;

/// Python-level host ops of one Megatron-Core MoE layer pass, by region: router (with its
/// auxiliary loss), dispatcher preprocessing, permutation with the dispatch and the chunk sort,
/// and the combine side. Counted from the code (`bench/kernels.md`, "MoE host work by
/// dispatcher"); each tensor op, collective, host copy or custom-op call counts 1, views none.
struct MoeRegions {
    fwd: [f64; 4],
    bwd: [f64; 4],
    /// Forward host copies of the token counts that stay eager (move to the dispatch) when the
    /// preprocessing is captured in a graph.
    d2h_when_graphed: f64,
}

/// The measured path: the all-to-all dispatcher of core_v0.15.0 at EP 1, dropless, no fusions
/// (60 ops forward and 34 autograd nodes backward, checked op for op on a CPU run of the layer).
const MEASURED: MoeRegions = MoeRegions {
    fwd: [28.0, 8.0, 17.0, 7.0],
    bwd: [20.0, 0.0, 10.0, 4.0],
    d2h_when_graphed: 4.0,
};
/// The all-to-all dispatcher at EP > 1 with Transformer Engine's fused router and permutation
/// (`moe_router_fusion`, `moe_permute_fusion`: Megatron-Bridge's MoE providers): the token-count
/// all-gather, the host copies of the splits and the real all-to-alls run (core_v0.15.0
/// `token_dispatcher.py`; at EP 1 `mappings.py` returns early).
const ALLTOALL_EP: MoeRegions = MoeRegions {
    fwd: [17.0, 23.0, 22.0, 12.0],
    bwd: [16.0, 0.0, 16.0, 11.0],
    d2h_when_graphed: 14.0,
};
/// `MoEFlexTokenDispatcher` with HybridEP (core_v0.16.0): a compiled preprocess, the C++
/// dispatch with its permutation and one `cudaStreamSynchronize`, the combine with its
/// un-permutation; the router fused (with forced balancing's RNG-state calls).
const FLEX: MoeRegions = MoeRegions {
    fwd: [27.0, 1.0, 9.0, 2.0],
    bwd: [16.0, 1.0, 3.0, 2.0],
    d2h_when_graphed: 0.0,
};
/// `MoEFlexTokenDispatcher` with DeepEP (core_v0.16.0): the top-k in the compiled preprocess,
/// the multi-hot conversion with its implicit syncs, DeepEP's dispatch (the host spins on the
/// received counts) and the permutation by local expert, the un-permutation and the combine.
const DEEPEP: MoeRegions = MoeRegions {
    fwd: [27.0, 1.0, 31.0, 8.0],
    bwd: [16.0, 1.0, 14.0, 8.0],
    d2h_when_graphed: 0.0,
};
/// The measured op-equivalents of [`MEASURED`], forward and backward (`HostSpec::moe_ops_fwd`).
const MEASURED_OPS: f64 = 190.0;
/// Backward host ops of a graphed router (its gradients copied into the graph's static buffers).
const GRAPHED_ROUTER_BWD: f64 = 3.0;

/// Host op-equivalents of one MoE layer pass (forward, backward) under plan `p` and `spec`: the
/// measured 190 scaled by the path's counted ops over the measured path's, with the regions in
/// `spec.cuda_graph_scope` replaced by their graph's share. `spec.moe_ops_fwd` / `_bwd` override.
pub fn moe_host_ops(spec: &HostSpec, p: &ParallelConfig) -> (f64, f64) {
    let regions = match (p.moe_experts, p.moe_token_dispatcher) {
        // NeMo Automodel's MoE is not Megatron-Core's: the measured figure, uncounted.
        (MoeExperts::Automodel, _) => &MEASURED,
        (_, MoeDispatcher::Flex) if p.moe_flex_backend == FlexBackend::DeepEp => &DEEPEP,
        (_, MoeDispatcher::Flex) => &FLEX,
        (_, MoeDispatcher::AllToAll) if p.ep > 1 => &ALLTOALL_EP,
        (_, MoeDispatcher::AllToAll) => &MEASURED,
    };
    let router = spec.cuda_graph_scope.contains(&GraphScope::MoeRouter);
    let pre = spec.cuda_graph_scope.contains(&GraphScope::MoePreprocess);
    let [a, b, c, d] = regions.fwd;
    let fwd = if router { 0.0 } else { a } + if pre { regions.d2h_when_graphed } else { b } + c + d + if router || pre { 1.0 } else { 0.0 };
    let [ab, bb, cb, db] = regions.bwd;
    let bwd = if router { GRAPHED_ROUTER_BWD } else { ab } + if pre { 0.0 } else { bb } + cb + db;
    let measured = |regions: [f64; 4]| regions.iter().sum::<f64>();
    (
        spec.moe_ops_fwd.unwrap_or(MEASURED_OPS * fwd / measured(MEASURED.fwd)),
        spec.moe_ops_bwd.unwrap_or(MEASURED_OPS * bwd / measured(MEASURED.bwd)),
    )
}

/// Whether op `name` of an attention or MLP layer belongs to Megatron-Core's `attn` graph scope
/// (the input norm through the pre-MLP norm); `None` for a quantization cast, which belongs where
/// the GEMM after it does.
fn in_attn_scope(name: &str) -> Option<bool> {
    if llmsim_workload::ops::is_quantization_cast(name) {
        return None;
    }
    const PREFIXES: [&str; 7] = ["attn_", "core_attention", "rope", "mla_", "input_norm", "post_attn_norm", "cp_"];
    Some(PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// Whether op `name` is the router's, captured with `moe_router`.
fn in_router_scope(name: &str) -> bool {
    name.starts_with("moe_router")
}

/// The engine's host model for `wl` under `spec`; `ops` are the per-op GPU times of
/// [`crate::ops::time_segments`].
/// `None` when nothing costs anything (the engine then skips the host entirely).
pub(crate) fn dispatch(spec: &HostSpec, wl: &Workload, ops: &OpTimes, p: &ParallelConfig) -> Result<Option<HostDispatch>, SimError> {
    let p2p_sync = p2p_sync_of(p);
    spec.check_scope()?;
    let (moe_ops_fwd, moe_ops_bwd) = moe_host_ops(spec, p);
    let op = micros("compute.host.op_us", spec.op_us)?;
    let linear = micros("compute.host.linear_us", spec.linear_us)?;
    let expert = micros("compute.host.expert_gemm_us", spec.expert_gemm_us)?;
    let call = micros("compute.host.call_us", spec.call_us)?;
    let ops_of = |field: &str, n: f64| non_negative(field, n, "ops").map(|n| SimTime::from_us_f64(n * spec.op_us));
    let moe_fwd = ops_of("compute.host.moe_ops_fwd", moe_ops_fwd)?;
    let moe_bwd = ops_of("compute.host.moe_ops_bwd", moe_ops_bwd)?;
    let attn_graphed = spec.cuda_graph_scope.contains(&GraphScope::Attn);
    let router_graphed = spec.cuda_graph_scope.contains(&GraphScope::MoeRouter);
    let mamba_graphed = spec.cuda_graph_scope.contains(&GraphScope::Mamba);
    let replay = SimTime::from_us_f64(GRAPH_REPLAY_OPS * spec.op_us);
    if [op, linear, expert, call].iter().all(|c| *c == SimTime::ZERO) && !spec.moe_sync && !spec.blocking_copies {
        return Ok(None);
    }
    // Host cost of one op: a GEMM is a linear module's call (its forward, or its backward on
    // the dgrad op), plus one launch per expert of a grouped GEMM; an MoE layer's router and
    // un-permutation backward carry its dispatcher's measured host work; anything else one op.
    let cost = |o: &OpSpec| -> SimTime {
        match o.kind {
            // The MoE layer's router, dispatcher and combine, measured as a whole per pass; the
            // gating GEMM's backward is one plain call each (not a Transformer Engine module).
            _ if o.name == "moe_router" => moe_fwd,
            _ if o.name == "moe_unpermute_bwd" => moe_bwd,
            _ if o.name == "moe_router_dgrad" || o.name == "moe_router_wgrad" => op,
            OpSpecKind::Compute { class: OpClass::Gemm, .. } => {
                let module = if o.pass == Pass::BackwardWeight { SimTime::ZERO } else { linear };
                let experts = match o.kernel {
                    Some(KernelShape::Gemm(g)) if g.batch > 1 => g.batch,
                    _ => 0,
                };
                module + SimTime::from_ps(expert.as_ps().saturating_mul(experts))
            }
            _ => op,
        }
    };
    let seg = wl
        .segments
        .iter()
        .zip(ops)
        .map(|(s, times)| {
            // Ops the host issues (a segment holds no collectives; a host copy is one call).
            let graphed = graphed_ops(&s.name, &s.ops, attn_graphed, router_graphed, mamba_graphed);
            let mut first = None;
            let mut total = SimTime::ZERO;
            let mut last_gpu = SimTime::ZERO;
            let mut in_graph = false;
            for ((o, t), g) in s.ops.iter().zip(times).zip(graphed) {
                if matches!(o.kind, OpSpecKind::Comm { .. }) {
                    continue;
                }
                // A captured op is replayed with its graph: the first of a run pays the replay;
                // the MoE router keeps its layer's dispatcher work (`moe_host_ops` left out what
                // the graph holds).
                let start = if in_graph { SimTime::ZERO } else { replay };
                let c = match (g, o.name == "moe_router") {
                    (false, _) => cost(o),
                    (true, true) => cost(o) + start,
                    (true, false) => start,
                };
                in_graph = g;
                first.get_or_insert(c);
                total += c;
                last_gpu = t.as_ref().map_or(SimTime::ZERO, |t| t.time);
            }
            HostSeg {
                first: first.unwrap_or(op),
                total: if first.is_some() { total } else { op },
                // A measured duration (imported traces) has no per-op times: the segment's end
                // is bound by its issue alone.
                last_gpu: if s.duration.is_some() { SimTime::ZERO } else { last_gpu },
            }
        })
        .collect();
    let sync = wl
        .stages
        .iter()
        .map(|prog| {
            // The forward dispatch is the first forward EP all-to-all of each (micro-batch,
            // chunk, layer); the combine follows it. A recomputed layer runs its dispatcher's
            // forward again in backward, sync included (activation checkpointing re-executes
            // the forward code: Megatron-Core with full recompute or `recompute_modules: [moe]`,
            // DeepEP's non-cached dispatch under NeMo Automodel's checkpointing); the gradients'
            // all-to-alls reuse the forward's split sizes (Megatron-Core keeps them; DeepEP's
            // cached handle) and do not wait. A recomputed dispatch is the first EP all-to-all
            // of its layer's backward that follows recomputed forward kernels.
            let mut last = None;
            let mut after_recompute = false;
            let mut flags: Vec<bool> = prog
                .nodes
                .iter()
                .map(|n| {
                    // A segment that starts at a synchronizing op (`OpSpec::host_sync`).
                    if let DagNodeKind::Comp { segment } = n.kind {
                        let ops = &wl.segments[segment as usize].ops;
                        after_recompute = ops.last().is_some_and(|o| o.pass == Pass::Recompute);
                        return spec.blocking_copies && ops.first().is_some_and(|o| o.host_sync);
                    }
                    let ep_a2a = matches!(
                        n.kind,
                        DagNodeKind::CommColl {
                            op: CollectiveOp::AllToAll,
                            group,
                            ..
                        } if group.is_ep()
                    );
                    let dispatch = ep_a2a && (n.phase == Phase::Forward || (n.phase == Phase::Backward && after_recompute));
                    if !spec.moe_sync || !dispatch {
                        return false;
                    }
                    let key = (n.phase == Phase::Forward, n.microbatch, n.chunk, n.layer);
                    let first = last != Some(key);
                    last = Some(key);
                    first
                })
                .collect();
            // Blocking pipeline exchanges (sends on the compute stream) under Megatron's
            // `batch_p2p_sync`: the host waits for the device after each run of adjacent sends
            // and receives, so the first node after it is issued only once the GPU got there.
            if p2p_sync && prog.sends_block() {
                let mut after_p2p = false;
                for (flag, n) in flags.iter_mut().zip(&prog.nodes) {
                    if n.stream != Stream::Compute {
                        continue;
                    }
                    let p2p = matches!(n.kind, DagNodeKind::CommSend { .. } | DagNodeKind::CommRecv { .. });
                    if after_p2p && !p2p {
                        *flag = true;
                    }
                    after_p2p = p2p;
                }
            }
            // A dispatch on no stream (`parallel.moe_a2a_overlap`) is not issued from the
            // compute stream's order: the host waits before the next node it issues there.
            let mut pending = false;
            for (flag, n) in flags.iter_mut().zip(&prog.nodes) {
                if n.stream == Stream::Free {
                    pending |= std::mem::take(flag);
                } else if n.stream == Stream::Compute && pending {
                    *flag = true;
                    pending = false;
                }
            }
            flags
        })
        .collect();
    Ok(Some(HostDispatch { seg, call, sync }))
}

/// Which of a segment's ops run inside a CUDA graph: attention-block ops under `attn`, the
/// router's under `moe_router`, a Mamba layer's under `mamba`; a quantization cast goes with the
/// next op that is not one (or the previous, at the segment's end).
fn graphed_ops(segment: &str, ops: &[OpSpec], attn: bool, router: bool, mamba: bool) -> Vec<bool> {
    let own: Vec<Option<bool>> = ops
        .iter()
        .map(|o| {
            if router && in_router_scope(o.name) {
                return Some(true);
            }
            if segment.starts_with("mamba") {
                return Some(mamba);
            }
            in_attn_scope(o.name).map(|a| a && attn)
        })
        .collect();
    // Casts at the segment's end go with the last op decided before them.
    let mut next = own.iter().rev().find_map(|g| *g).unwrap_or(false);
    let mut out = vec![false; ops.len()];
    for (o, g) in out.iter_mut().zip(&own).rev() {
        next = g.unwrap_or(next);
        *o = next;
    }
    out
}
