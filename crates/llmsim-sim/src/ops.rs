//! The per-op table: every compute segment's timing ([`OpRow`]) and the iteration's FLOPs.

use llmsim_compute::{ComputeModel, GemmShape, KernelShape, OpQuery, OpTime, TimeSource};
use llmsim_core::SimTime;
use llmsim_workload::TrainingConfig;
use llmsim_workload::dag::{DagNodeKind, Workload};
use llmsim_workload::megatron;
use llmsim_workload::ops::Pass;
use serde::Serialize;

use crate::setup::TpOverlapTimer;
use crate::{Layout, SimError};

/// A compute segment's timing, for the per-op table.
#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    /// The pipeline stage whose program runs the segment.
    pub stage: u32,
    /// The compute segment's name.
    pub segment: String,
    /// The op's name.
    pub op: String,
    /// The pass: fwd, recompute, bwd-input or bwd-weight.
    pub pass: &'static str,
    /// The kernel class, as in `Gemm`, or `HostCopy`.
    pub class: String,
    /// The op's shape, as text.
    pub shape: String,
    /// FLOPs of one execution, a multiply-add counted as 2 (0 for a host copy).
    pub flops: f64,
    /// Bytes of one execution: HBM bytes read plus written, or bytes copied to the host.
    pub bytes: f64,
    /// Time of one execution, in microseconds.
    pub time_us: f64,
    /// What bounds the time: compute or memory.
    pub bound: String,
    /// Where the time comes from: database or roofline.
    pub source: String,
    /// Executions per iteration on one rank of the stage.
    pub count: u64,
}

/// Each segment's ops' times (`None` for a collective).
pub(crate) type OpTimes = Vec<Vec<Option<OpTime>>>;

/// Times every segment: the sum of its ops, or its measured duration. Returns the segment times and each op's timing.
/// A GEMM with an overlapped TP collective takes the pair's time ([`llmsim_workload::ops::OverlapMethod::overlapped`]).
///
/// # Errors
/// A host copy (activation CPU offloading) on a custom GPU that declares no `host_bandwidth`.
pub(crate) fn time_segments(
    wl: &Workload,
    cm: &ComputeModel,
    t: &TrainingConfig,
    ub: Option<&TpOverlapTimer>,
) -> Result<(Vec<SimTime>, OpTimes), SimError> {
    let mut times = Vec::with_capacity(wl.segments.len());
    let mut per_op = Vec::with_capacity(wl.segments.len());
    for seg in &wl.segments {
        let mut total = SimTime::ZERO;
        let mut row = Vec::with_capacity(seg.ops.len());
        for op in &seg.ops {
            if let llmsim_workload::OpSpecKind::HostCopy { bytes } = op.kind {
                // A copy engine at the host link's rate (PCIe / NVLink-C2C, per direction).
                let gpu = cm.gpu();
                let bw = gpu.host_bandwidth.filter(|b| !b.is_zero()).ok_or_else(|| SimError::Scenario {
                    field: "cluster.gpu.host_bandwidth".into(),
                    message: format!(
                        "training.cpu_offload_layers copies activations over the GPU's host link, but GPU {} declares no host bandwidth; add host_bandwidth (per direction, e.g. 64GB/s for PCIe Gen5 x16) to the custom GPU",
                        gpu.name
                    ),
                })?;
                let time = bw.time_to_send(llmsim_core::Bytes::new(bytes));
                total += time;
                row.push(Some(OpTime {
                    time,
                    source: TimeSource::Roofline,
                    bound: llmsim_compute::Bound::Memory,
                }));
                continue;
            }
            let q = op.query(t.gemm_compute_dtype());
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
    Ok((times, per_op))
}

pub(crate) fn op_rows(wl: &Workload, timed: &[Vec<Option<OpTime>>]) -> Vec<OpRow> {
    let mut rows = Vec::new();
    for (si, prog) in wl.stages.iter().enumerate() {
        let mut count = vec![0u64; wl.segments.len()];
        for n in &prog.nodes {
            if let DagNodeKind::Comp { segment } = n.kind {
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
                    llmsim_workload::OpSpecKind::HostCopy { bytes } => ("HostCopy".to_string(), 0.0, *bytes as f64),
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
