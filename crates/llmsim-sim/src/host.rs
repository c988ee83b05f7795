//! Host (CPU) dispatch costs of a workload (`compute.host`), for the engine's
//! [`HostDispatch`]: what each compute segment costs the host thread to issue, and where the host
//! waits for the GPU.

use llmsim_compute::{KernelShape, OpClass};
use llmsim_core::{CollectiveOp, SimTime};
use llmsim_workload::OpSpecKind;
use llmsim_workload::dag::{DagNodeKind, Phase, Stream, Workload};
use llmsim_workload::ops::{OpSpec, Pass};

use crate::SimError;
use crate::engine::{HostDispatch, HostSeg};
use crate::ops::OpTimes;
use crate::scenario::HostSpec;

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

/// The engine's host model for a run (see [`dispatch`]): none where `compute.host` is off.
/// `p2p_sync`: the host synchronizes the device after each blocking pipeline exchange
/// (`parallel.batch_p2p_sync` under Megatron's runtime).
pub(crate) fn for_run(
    spec: Option<&HostSpec>,
    wl: &Workload,
    ops: &OpTimes,
    p2p_sync: bool,
) -> Result<Option<std::sync::Arc<HostDispatch>>, SimError> {
    match spec {
        Some(h) => Ok(dispatch(h, wl, ops, p2p_sync)?.map(std::sync::Arc::new)),
        None => Ok(None),
    }
}

/// Whether the host synchronizes after each blocking pipeline exchange under `p`:
/// Megatron's runtime with `batch_p2p_sync`.
pub(crate) fn p2p_sync_of(p: &llmsim_workload::ParallelConfig) -> bool {
    p.pp_impl == llmsim_workload::PpImpl::Megatron && p.batch_p2p_sync
}

/// The engine's host model for `wl` under `spec`; `ops` are the per-op GPU times of
/// [`crate::ops::time_segments`].
/// `None` when nothing costs anything (the engine then skips the host entirely).
pub(crate) fn dispatch(spec: &HostSpec, wl: &Workload, ops: &OpTimes, p2p_sync: bool) -> Result<Option<HostDispatch>, SimError> {
    let op = micros("compute.host.op_us", spec.op_us)?;
    let linear = micros("compute.host.linear_us", spec.linear_us)?;
    let expert = micros("compute.host.expert_gemm_us", spec.expert_gemm_us)?;
    let call = micros("compute.host.call_us", spec.call_us)?;
    let ops_of = |field: &str, n: f64| non_negative(field, n, "ops").map(|n| SimTime::from_us_f64(n * spec.op_us));
    let moe_fwd = ops_of("compute.host.moe_ops_fwd", spec.moe_ops_fwd)?;
    let moe_bwd = ops_of("compute.host.moe_ops_bwd", spec.moe_ops_bwd)?;
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
            let mut first = None;
            let mut total = SimTime::ZERO;
            let mut last_gpu = SimTime::ZERO;
            for (o, t) in s.ops.iter().zip(times) {
                if matches!(o.kind, OpSpecKind::Comm { .. }) {
                    continue;
                }
                let c = cost(o);
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
