//! SimAI / AICB workload files: read them as llmsim workloads, and write llmsim's transformer
//! workloads in that format. The format and its execution semantics are described, with
//! citations, in `docs/formats-simai.md`; in short:
//!
//! - Line 1, the header: `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <tp> ep: <ep>
//!   pp: <pp> vpp: <n> ga: <ga> all_gpus: <N> checkpoints: 0 checkpoint_initiates: 0
//!   pp_comm: <bytes>`, tokens separated by white space (SimAI reads it with `>>`).
//! - Line 2: the number of layer lines.
//! - Then one line per layer with 12 fields: name, dependency (-1), forward compute, forward
//!   comm type, forward comm bytes, input-gradient compute, comm type, bytes, weight-gradient
//!   compute, comm type, bytes, update time. Compute and update times are SimAI ticks, 1 ns.
//! - Comm types: ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, optionally suffixed `_EP` or
//!   `_DP_EP`, or NONE. Forward and input-gradient comms without a suffix run on the TP group,
//!   weight-gradient comms without a suffix on the DP group; `_EP` is the expert-parallel group
//!   and `_DP_EP` the expert-data-parallel group.
//!
//! Execution (SimAI `Workload::iterate_hybrid_parallel_Transformer_fwd_in_bckwd`): every line's
//! forward compute then its forward comm, blocking, first line to last; then from the last line
//! to the first: input-gradient compute, input-gradient comm (blocking), weight-gradient compute,
//! weight-gradient comm (non-blocking, in issue order on its own stream). The iteration ends
//! when every comm finished. A forward comm between 1 and 4095 bytes is raised to 4096 bytes
//! (as SimAI does). llmsim runs this on one program per tensor-parallel group with Megatron's
//! group layout (tp-ep-dp). Not modelled: the update time (SimAI adds it after each comm; AICB
//! writes 100 ns), activation checkpointing (`checkpoints:` > 0) and pipeline parallelism
//! (`pp:` > 1; SimAI's analytical backend does not simulate it either, it adds a formula).

use std::fmt::Write as _;

use llmsim_compute::{ComputeModel, OpClass};
use llmsim_core::CollectiveOp;
use llmsim_core::SimTime;

use crate::config::{ParallelConfig, TrainingConfig};
use crate::dag::{DagNodeKind, Group, Layout, Node, Phase, Program, Segment, Stream, Workload};
use crate::import::ImportError;
use crate::model::ModelConfig;
use crate::ops::{self, CommGroup, OpSpec, OpSpecKind, Pass};

const MAX_NS: u64 = 86_400 * 1_000_000_000;

/// The header's parallel layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The parallelism policy, the first token: `HYBRID_TRANSFORMER_FWD_IN_BCKWD` or `HYBRID_TRANSFORMER`.
    pub policy: String,
    /// `model_parallel_NPU_group`.
    pub tp: u32,
    /// `ep:`: expert-parallel degree.
    pub ep: u32,
    /// `pp:`: pipeline-parallel degree.
    pub pp: u32,
    /// AICB writes the layer count here.
    pub vpp: u32,
    /// Gradient-accumulation steps (micro-batches); AICB writes every micro-batch's lines out.
    pub ga: u32,
    /// `all_gpus:`: GPUs in the run.
    pub all_gpus: u32,
    /// `pp_comm:`: the pipeline message size, in bytes.
    pub pp_comm: u64,
}

impl Header {
    /// Data-parallel degree: all_gpus / (tp * pp), as SimAI's `Layer::report` computes it.
    pub fn dp(&self) -> u32 {
        (self.all_gpus as u64 / (self.tp as u64 * self.pp as u64).max(1)) as u32
    }
}

/// Which group a comm runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommScope {
    /// No suffix: TP for forward and input-gradient comms, DP for weight-gradient comms.
    Default,
    /// `_EP`.
    Ep,
    /// `_DP_EP`.
    DpEp,
}

/// One comm field pair: type and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm {
    /// The collective.
    pub op: CollectiveOp,
    /// The group it runs on.
    pub scope: CommScope,
    /// Size, in bytes (nccl-tests convention).
    pub bytes: u64,
}

/// One layer line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Layer name.
    pub name: String,
    /// Forward compute time, in nanoseconds (SimAI ticks).
    pub fwd_ns: u64,
    /// Forward comm, blocking; `None` for NONE.
    pub fwd: Option<Comm>,
    /// Input-gradient compute time, in nanoseconds.
    pub ig_ns: u64,
    /// Input-gradient comm, blocking; `None` for NONE.
    pub ig: Option<Comm>,
    /// Weight-gradient compute time, in nanoseconds.
    pub wg_ns: u64,
    /// Weight-gradient comm, non-blocking; `None` for NONE.
    pub wg: Option<Comm>,
    /// Update time, in nanoseconds. Read but not modelled.
    pub update_ns: u64,
}

/// A parsed workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimaiWorkload {
    /// Line 1: the parallel layout.
    pub header: Header,
    /// The layer lines, in file order.
    pub lines: Vec<Line>,
}

fn comm_type(s: &str) -> Result<Option<(CollectiveOp, CommScope)>, String> {
    if s == "NONE" {
        return Ok(None);
    }
    let (base, scope) = if let Some(b) = s.strip_suffix("_DP_EP") {
        (b, CommScope::DpEp)
    } else if let Some(b) = s.strip_suffix("_EP") {
        (b, CommScope::Ep)
    } else {
        (s, CommScope::Default)
    };
    let op = match base {
        "ALLREDUCE" => CollectiveOp::AllReduce,
        "ALLGATHER" => CollectiveOp::AllGather,
        "REDUCESCATTER" => CollectiveOp::ReduceScatter,
        "ALLTOALL" => CollectiveOp::AllToAll,
        "ALLREDUCEALLTOALL" => return Err(format!("comm type {s}: ALLREDUCEALLTOALL is not supported")),
        _ => {
            return Err(format!(
                "comm type {s:?}: valid ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL (optionally _EP or _DP_EP) or NONE"
            ));
        }
    };
    Ok(Some((op, scope)))
}

/// Parses a SimAI workload file's text. `file` names it in errors.
///
/// # Errors
/// [`ImportError::Line`] naming the line and the field.
pub fn parse(text: &str, file: &str) -> Result<SimaiWorkload, ImportError> {
    let err = |line: usize, message: String| ImportError::Line {
        file: file.into(),
        line,
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let (hl, first) = lines.next().ok_or_else(|| err(1, "empty file; expected a header line".into()))?;
    let tokens: Vec<&str> = first.split_whitespace().collect();
    let policy = tokens[0].to_string();
    if policy == "MICRO" {
        return Err(err(
            hl,
            "MICRO (collective micro-benchmark) workloads are not supported; llmsim collective runs one collective".into(),
        ));
    }
    if policy != "HYBRID_TRANSFORMER_FWD_IN_BCKWD" && policy != "HYBRID_TRANSFORMER" {
        return Err(err(
            hl,
            format!("parallelism {policy:?}: valid HYBRID_TRANSFORMER_FWD_IN_BCKWD (or HYBRID_TRANSFORMER)"),
        ));
    }
    let mut h = Header {
        policy,
        tp: 0,
        ep: 0,
        pp: 0,
        vpp: 0,
        ga: 0,
        all_gpus: 0,
        pp_comm: 0,
    };
    let num = |i: usize| -> Result<u64, ImportError> {
        let t = tokens.get(i + 1).ok_or_else(|| err(hl, format!("{} has no value", tokens[i])))?;
        t.parse::<u64>()
            .map_err(|_| err(hl, format!("{} {t:?}: expected a non-negative integer", tokens[i])))
    };
    let small =
        |v: u64, key: &str| -> Result<u32, ImportError> { u32::try_from(v).map_err(|_| err(hl, format!("{key} {v} is too large"))) };
    let mut i = 1;
    while i < tokens.len() {
        match tokens[i] {
            "model_parallel_NPU_group:" => h.tp = small(num(i)?, "model_parallel_NPU_group")?,
            "ep:" | "expert_parallel_npu_group:" => h.ep = small(num(i)?, "ep")?,
            "pp:" => h.pp = small(num(i)?, "pp")?,
            "vpp:" => h.vpp = small(num(i)?, "vpp")?,
            "ga:" => h.ga = small(num(i)?, "ga")?,
            "all_gpus:" => h.all_gpus = small(num(i)?, "all_gpus")?,
            "pp_comm" | "pp_comm:" => h.pp_comm = num(i)?,
            "checkpoints:" | "checkpoint_initiates:" => {
                if num(i)? != 0 {
                    return Err(err(
                        hl,
                        format!("{} > 0 (activation recomputation in backward) is not supported", tokens[i]),
                    ));
                }
            }
            other => return Err(err(hl, format!("unknown header key {other:?}"))),
        }
        i += 2;
    }
    for (v, key) in [
        (h.tp, "model_parallel_NPU_group"),
        (h.ep, "ep"),
        (h.pp, "pp"),
        (h.ga, "ga"),
        (h.all_gpus, "all_gpus"),
    ] {
        if v == 0 {
            return Err(err(hl, format!("{key}: missing or 0 (SimAI requires it)")));
        }
    }
    if h.pp > 1 {
        return Err(err(
            hl,
            format!(
                "pp: {} > 1 is not supported (pipeline stages are not in the file's layer lines)",
                h.pp
            ),
        ));
    }
    if !(h.all_gpus as u64).is_multiple_of(h.tp as u64 * h.pp as u64) {
        return Err(err(
            hl,
            format!(
                "all_gpus {} is not a multiple of tp x pp = {}",
                h.all_gpus,
                h.tp as u64 * h.pp as u64
            ),
        ));
    }
    if !h.dp().is_multiple_of(h.ep) {
        return Err(err(hl, format!("ep {} does not divide the data-parallel degree {}", h.ep, h.dp())));
    }
    let (cl, count) = lines.next().ok_or_else(|| err(hl + 1, "missing the layer count line".into()))?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| err(cl, format!("layer count {:?}: expected a non-negative integer", count.trim())))?;
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for (ln, l) in lines.by_ref() {
        if out.len() == count {
            return Err(err(ln, format!("more layer lines than the count {count} on line {cl}")));
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 12 {
            return Err(err(
                ln,
                format!(
                    "{} fields; a layer line has 12: name, dependency, then 3 x (compute, comm type, comm bytes), update time",
                    f.len()
                ),
            ));
        }
        let int = |k: usize, what: &str| -> Result<u64, ImportError> {
            let v = f[k]
                .parse::<u64>()
                .map_err(|_| err(ln, format!("field {} ({what}) {:?}: expected a non-negative integer", k + 1, f[k])))?;
            // Times are ns; a day is far beyond any layer and keeps picosecond sums in range.
            if k != 4 && k != 7 && k != 10 && v > MAX_NS {
                return Err(err(ln, format!("field {} ({what}) {v}: more than a day in ns", k + 1)));
            }
            if v > crate::import::MAX_COMM_BYTES {
                return Err(err(ln, format!("field {} ({what}) {v}: more than 2^50 bytes", k + 1)));
            }
            Ok(v)
        };
        if f[1].parse::<i64>().is_err() {
            return Err(err(
                ln,
                format!("field 2 (dependency) {:?}: expected an integer (AICB writes -1)", f[1]),
            ));
        }
        let comm = |k: usize, what: &str, floor: bool| -> Result<Option<Comm>, ImportError> {
            let t = comm_type(f[k]).map_err(|m| err(ln, format!("field {} ({what}): {m}", k + 1)))?;
            let mut bytes = int(k + 1, what)?;
            if floor && bytes > 0 && bytes < 4096 {
                bytes = 4096;
            }
            Ok(t.map(|(op, scope)| Comm { op, scope, bytes }))
        };
        out.push(Line {
            name: f[0].to_string(),
            fwd_ns: int(2, "forward compute")?,
            fwd: comm(3, "forward comm", true)?,
            ig_ns: int(5, "input-gradient compute")?,
            ig: comm(6, "input-gradient comm", false)?,
            wg_ns: int(8, "weight-gradient compute")?,
            wg: comm(9, "weight-gradient comm", false)?,
            update_ns: int(11, "update time")?,
        });
    }
    if out.len() != count {
        return Err(err(
            cl,
            format!("the count says {count} layer lines but the file has {}", out.len()),
        ));
    }
    Ok(SimaiWorkload { header: h, lines: out })
}

/// The `simai` workload format: `path` is a SimAI/AICB workload file.
pub struct Simai;

impl crate::formats::WorkloadFormat for Simai {
    fn name(&self) -> &'static str {
        "simai"
    }

    fn path_help(&self) -> &'static str {
        "a SimAI/AICB workload file"
    }

    fn read(&self, req: &crate::formats::ReadRequest<'_>) -> Result<crate::formats::ImportedWorkload, ImportError> {
        let text = std::fs::read_to_string(req.path).map_err(|e| crate::import::io(req.path, e))?;
        let w = parse(&text, &req.path.display().to_string())?;
        let imp = to_workload(&w)?;
        let h = &w.header;
        let mut parallel = format!("tp{} pp{} ep{} dp{} (SimAI header), ga {}", h.tp, h.pp, h.ep, h.dp(), h.ga);
        let mut out = crate::formats::ImportedWorkload::bare(imp.workload, imp.layout, req.label.to_string(), String::new());
        // The file does not record the batch or the sequence; AICB names its files with them.
        if let Some(n) = aicb_name(req.path) {
            let consistent = n.mbs.is_none_or(|mbs| mbs * u64::from(h.ga) * u64::from(h.dp()) == n.gbs);
            if consistent {
                out.global_batch = n.gbs;
                out.seq_length = n.seq;
                parallel.push_str("; batch and sequence from the AICB file name");
            }
        }
        out.parallel = parallel;
        Ok(out)
    }
}

/// What an AICB workload file's name records: `...-gbs1024-mbs1-seq2048.txt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AicbName {
    gbs: u64,
    mbs: Option<u64>,
    seq: u64,
}

/// The global batch, micro-batch and sequence length from an AICB file name, when it has both
/// `gbs<N>` and `seq<N>` fields (positive numbers).
fn aicb_name(path: &std::path::Path) -> Option<AicbName> {
    let stem = path.file_stem()?.to_str()?;
    let field = |key: &str| -> Option<u64> {
        stem.split('-')
            .find_map(|part| {
                part.strip_prefix(key)
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            })
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
    };
    Some(AicbName {
        gbs: field("gbs")?,
        mbs: field("mbs"),
        seq: field("seq")?,
    })
}

/// A SimAI workload as an llmsim workload.
pub struct Imported {
    /// One program for every tensor-parallel group, with symbolic groups.
    pub workload: Workload,
    /// The ranks' layout (tp-ep-dp; cp = pp = 1).
    pub layout: Layout,
}

/// Builds the program every tensor-parallel group runs (see the module doc for the semantics).
///
/// # Errors
/// None today beyond what [`parse`] checked; kept fallible for layouts to come.
pub fn to_workload(w: &SimaiWorkload) -> Result<Imported, ImportError> {
    let h = &w.header;
    let layout = Layout {
        tp: h.tp,
        cp: 1,
        dp: h.dp(),
        pp: 1,
        ep: h.ep,
        ep_spans_tp: false,
        ep_server_units: 0,
    };
    let mut segments: Vec<Segment> = Vec::new();
    let mut seg_index: std::collections::HashMap<(String, u64), u32> = std::collections::HashMap::new();
    let mut seg = |name: &str, pass: Pass, ns: u64| -> u32 {
        let key = (name.to_string(), ns);
        if let Some(s) = seg_index.get(&key) {
            return *s;
        }
        let id = segments.len() as u32;
        segments.push(Segment {
            name: name.to_string(),
            pass,
            ops: vec![crate::ops::compute("simai.compute", pass, OpClass::Gemm, 0.0, 0.0, "")],
            duration: Some(SimTime::from_ns(ns)),
        });
        seg_index.insert(key, id);
        id
    };
    let group = |c: &Comm, wg: bool| match (c.scope, wg) {
        (CommScope::Default, false) => Group::Tp,
        (CommScope::Default, true) => Group::Dp,
        (CommScope::Ep, _) => Group::Ep,
        (CommScope::DpEp, _) => Group::ExpertDp,
    };
    let mut prog = Program::new();
    let node = Node::imported;
    for (i, l) in w.lines.iter().enumerate() {
        let s = seg(&format!("{}.fwd", l.name), Pass::Forward, l.fwd_ns);
        prog.push(
            node(DagNodeKind::Comp { segment: s }, Stream::Compute, Phase::Forward, i as u32),
            &[],
        );
        if let Some(c) = &l.fwd {
            let k = DagNodeKind::CommColl {
                op: c.op,
                group: group(c, false),
                bytes: c.bytes,
            };
            prog.push(node(k, Stream::Compute, Phase::Forward, i as u32), &[]);
        }
    }
    for (i, l) in w.lines.iter().enumerate().rev() {
        let s = seg(&format!("{}.ig", l.name), Pass::BackwardInput, l.ig_ns);
        prog.push(
            node(DagNodeKind::Comp { segment: s }, Stream::Compute, Phase::Backward, i as u32),
            &[],
        );
        if let Some(c) = &l.ig {
            let k = DagNodeKind::CommColl {
                op: c.op,
                group: group(c, false),
                bytes: c.bytes,
            };
            prog.push(node(k, Stream::Compute, Phase::Backward, i as u32), &[]);
        }
        let s = seg(&format!("{}.wg", l.name), Pass::BackwardWeight, l.wg_ns);
        let wg = prog.push(
            node(DagNodeKind::Comp { segment: s }, Stream::Compute, Phase::Backward, i as u32),
            &[],
        );
        if let Some(c) = &l.wg {
            let k = DagNodeKind::CommColl {
                op: c.op,
                group: group(c, true),
                bytes: c.bytes,
            };
            prog.push(node(k, Stream::Dp, Phase::GradSync, i as u32), &[wg]);
        }
    }
    Ok(Imported {
        workload: Workload {
            stages: vec![prog],
            segments,
            microbatches: h.ga,
            vpp: 1,
            explicit: None,
        },
        layout,
    })
}

// ---------------------------------------------------------------------------------------------
// Writing

fn comm_name(op: CollectiveOp, group: CommGroup, wg: bool) -> String {
    let base = match op {
        CollectiveOp::AllReduce => "ALLREDUCE",
        CollectiveOp::AllGather => "ALLGATHER",
        CollectiveOp::ReduceScatter => "REDUCESCATTER",
        CollectiveOp::AllToAll => "ALLTOALL",
        // Not in SimAI's vocabulary; llmsim's transformer layers do not issue them.
        CollectiveOp::Broadcast | CollectiveOp::Reduce => "ALLREDUCE",
    };
    match (group, wg) {
        (CommGroup::Ep | CommGroup::EpInter | CommGroup::EpIntra, _) => format!("{base}_EP"),
        _ => base.to_string(),
    }
}

/// One layer's lines: the forward ops split at their comms (line k gets forward chunk k) and the
/// backward ops split at theirs, paired in reverse (SimAI walks the lines backwards in backward).
fn layer_lines(name: &str, lo: &ops::LayerOps, time: &dyn Fn(&OpSpec) -> u64, out: &mut Vec<Line>) {
    let chunks = |list: &[OpSpec]| -> Vec<(u64, u64, Option<Comm>)> {
        // (input-side ns, weight-gradient ns, comm that ends the chunk)
        let mut v = Vec::new();
        let (mut a, mut b) = (0u64, 0u64);
        for op in list {
            match op.kind {
                OpSpecKind::Compute { .. } => {
                    if op.pass == Pass::BackwardWeight {
                        b += time(op);
                    } else {
                        a += time(op);
                    }
                }
                OpSpecKind::Comm { op: c, group, bytes, .. } => {
                    let scope = if matches!(group, CommGroup::Ep | CommGroup::EpInter | CommGroup::EpIntra) {
                        CommScope::Ep
                    } else {
                        CommScope::Default
                    };
                    v.push((a, b, Some(Comm { op: c, scope, bytes })));
                    a = 0;
                    b = 0;
                }
                // SimAI's workload format has no host copies (layer op lists hold none).
                OpSpecKind::HostCopy { .. } => {}
            }
        }
        if a + b > 0 || v.is_empty() {
            v.push((a, b, None));
        }
        v
    };
    let fwd = chunks(&lo.forward);
    let bwd = chunks(&lo.backward);
    let n = fwd.len().max(bwd.len());
    for k in 0..n {
        let f = fwd.get(k).copied().unwrap_or((0, 0, None));
        // Backward chunk j runs at line n-1-j.
        let b = bwd.get(n - 1 - k).copied().unwrap_or((0, 0, None));
        out.push(Line {
            name: format!("{name}_{k}"),
            fwd_ns: f.0 + f.1,
            fwd: f.2,
            ig_ns: b.0,
            ig: b.2,
            wg_ns: b.1,
            wg: None,
            update_ns: 100,
        });
    }
}

/// Writes a Megatron transformer training iteration (pipeline parallelism 1, no context
/// parallelism) as a SimAI workload file, with llmsim's per-op compute times. Data-parallel
/// gradient traffic follows AICB's convention for the distributed optimizer (lines
/// `grad_gather` / `grad_param_comm` / `grad_param_compute` first, so that backward ends with
/// them), or one all-reduce of the gradients without it.
///
/// # Errors
/// pp > 1 or cp > 1.
pub fn export(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, cm: &ComputeModel) -> Result<String, ImportError> {
    // SimAI's lines have no collective beside one GEMM: the backward's TP collectives are lines
    // of their own, as SimAI times them.
    let p = &ParallelConfig {
        tp_backward_overlap: false,
        ..p.clone()
    };
    if p.pp != 1 || p.cp != 1 {
        return Err(ImportError::Invalid(format!(
            "SimAI export needs pp = 1 and cp = 1 (got pp {} cp {}); SimAI's file has no pipeline stages",
            p.pp, p.cp
        )));
    }
    let time = |op: &OpSpec| -> u64 {
        op.query(t.gemm_compute_dtype())
            .map_or(0, |q| cm.time(&q).time.as_ps().div_ceil(1000))
    };
    let ga = p.micro_batches(t);
    let split = ops::stage_param_split(m, p, 0);
    let params = split.total();
    let grad_b = t.grad_dtype().bytes();
    let param_b = crate::megatron::param_bytes_per_param(t.dtype);
    let opt_ns: u64 = ops::optimizer_step(split, t, p).iter().map(&time).sum();
    let mut lines: Vec<Line> = Vec::new();
    let none = |name: &str, wg: Option<Comm>, ig_ns: u64| Line {
        name: name.into(),
        fwd_ns: 1,
        fwd: None,
        ig_ns,
        ig: None,
        wg_ns: 1,
        wg,
        update_ns: 100,
    };
    if p.use_distributed_optimizer {
        let ag = Comm {
            op: CollectiveOp::AllGather,
            scope: CommScope::Default,
            bytes: params * param_b,
        };
        let rs = Comm {
            op: CollectiveOp::ReduceScatter,
            scope: CommScope::Default,
            bytes: params * grad_b,
        };
        lines.push(none("grad_gather", Some(ag), 1));
        lines.push(none("grad_param_comm", Some(rs), 1));
        lines.push(none("grad_param_compute", None, opt_ns));
    } else {
        let ar = Comm {
            op: CollectiveOp::AllReduce,
            scope: CommScope::Default,
            bytes: params * grad_b,
        };
        lines.push(none("grad_param_compute", None, opt_ns));
        lines.push(none("grad_allreduce", Some(ar), 1));
    }
    let emb = ops::embedding(m, t, p);
    let head = ops::head(m, t, p);
    let layers: Vec<ops::LayerOps> = (0..m.num_hidden_layers).map(|l| ops::transformer_layer(m, t, p, l)).collect();
    for _ in 0..ga {
        layer_lines("embedding_layer", &emb, &time, &mut lines);
        for (l, lo) in layers.iter().enumerate() {
            layer_lines(&format!("layer{l}"), lo, &time, &mut lines);
        }
        layer_lines("head", &head, &time, &mut lines);
    }
    let mut s = String::new();
    let dp = p.dp as u32;
    let _ = writeln!(
        s,
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {} ep: {} pp: 1 vpp: {} ga: {ga} all_gpus: {} checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0",
        p.tp,
        p.ep,
        m.num_hidden_layers,
        p.tp as u32 * dp
    );
    let _ = writeln!(s, "{}", lines.len());
    let c = |x: &Option<Comm>, wg: bool| match x {
        None => "NONE\t0".to_string(),
        Some(c) => format!(
            "{}\t{}",
            comm_name(c.op, if c.scope == CommScope::Ep { CommGroup::Ep } else { CommGroup::Tp }, wg),
            c.bytes
        ),
    };
    for l in &lines {
        let _ = writeln!(
            s,
            "{}\t-1\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            l.name,
            l.fwd_ns,
            c(&l.fwd, false),
            l.ig_ns,
            c(&l.ig, false),
            l.wg_ns,
            c(&l.wg, true),
            l.update_ns
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 40 ga: 32 all_gpus: 128 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0";

    fn file(lines: &[&str]) -> String {
        format!("{HEADER}\n{}\n{}\n", lines.len(), lines.join("\n"))
    }

    #[test]
    fn aicb_file_names_give_batch_and_sequence() {
        let p = |s: &str| aicb_name(std::path::Path::new(s));
        assert_eq!(
            p("dir/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt"),
            Some(AicbName {
                gbs: 1024,
                mbs: Some(1),
                seq: 2048
            })
        );
        assert_eq!(p("llama-gbs64-seq4096.txt").map(|n| (n.gbs, n.mbs, n.seq)), Some((64, None, 4096)));
        // Missing a field, a zero, or letters after the key: nothing is taken from the name.
        assert_eq!(p("gpt3-13b-gbs1024.txt"), None);
        assert_eq!(p("x-gbs0-seq2048.txt"), None);
        assert_eq!(p("x-gbs12a-seq2048.txt"), None);
        assert_eq!(p("x-sequence-gbs8-seq.txt"), None);
    }

    #[test]
    fn parses_the_issue_example() {
        let w = parse(
            &file(&["grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t1610088448\t100"]),
            "x.txt",
        )
        .unwrap();
        assert_eq!(
            w.header,
            Header {
                policy: "HYBRID_TRANSFORMER_FWD_IN_BCKWD".into(),
                tp: 2,
                ep: 1,
                pp: 1,
                vpp: 40,
                ga: 32,
                all_gpus: 128,
                pp_comm: 0
            }
        );
        assert_eq!(w.header.dp(), 64);
        assert_eq!(
            w.lines[0],
            Line {
                name: "grad_gather".into(),
                fwd_ns: 1,
                fwd: None,
                ig_ns: 1,
                ig: None,
                wg_ns: 1,
                wg: Some(Comm {
                    op: CollectiveOp::AllGather,
                    scope: CommScope::Default,
                    bytes: 1610088448
                }),
                update_ns: 100,
            }
        );
    }

    #[test]
    fn suffixes_pick_the_group_and_small_forward_comms_round_up() {
        let w = parse(
            &file(&["moe\t-1\t5\tALLTOALL_EP\t100\t6\tALLGATHER_DP_EP\t100\t7\tREDUCESCATTER_DP_EP\t64\t100"]),
            "x.txt",
        )
        .unwrap();
        let l = &w.lines[0];
        // SimAI raises forward comms of 1..4095 bytes to 4096 (Workload.cc, forward pass).
        assert_eq!(
            l.fwd.unwrap(),
            Comm {
                op: CollectiveOp::AllToAll,
                scope: CommScope::Ep,
                bytes: 4096
            }
        );
        assert_eq!(l.ig.unwrap().bytes, 100);
        assert_eq!(l.wg.unwrap().scope, CommScope::DpEp);
        let imp = to_workload(&w).unwrap();
        let groups: Vec<Group> = imp.workload.stages[0]
            .nodes
            .iter()
            .filter_map(|n| match n.kind {
                DagNodeKind::CommColl { group, .. } => Some(group),
                _ => None,
            })
            .collect();
        assert_eq!(groups, vec![Group::Ep, Group::ExpertDp, Group::ExpertDp]);
    }

    #[test]
    fn program_order_is_forward_then_backward_reversed() {
        let w = parse(
            &file(&[
                "a\t-1\t10\tALLREDUCE\t8192\t20\tNONE\t0\t30\tALLREDUCE\t4096\t100",
                "b\t-1\t11\tNONE\t0\t21\tALLGATHER\t8192\t31\tNONE\t0\t100",
            ]),
            "x.txt",
        )
        .unwrap();
        let imp = to_workload(&w).unwrap();
        let wl = &imp.workload;
        let seq: Vec<String> = wl.stages[0]
            .nodes
            .iter()
            .map(|n| match n.kind {
                DagNodeKind::Comp { segment } => format!(
                    "{}={}",
                    wl.segments[segment as usize].name,
                    wl.segments[segment as usize].duration.unwrap().as_ps() / 1000
                ),
                DagNodeKind::CommColl { op, group, .. } => format!("{op}@{}/{:?}", group.name(), n.stream),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            seq,
            [
                "a.fwd=10",
                "all-reduce@tp/Compute",
                "b.fwd=11",
                "b.ig=21",
                "all-gather@tp/Compute",
                "b.wg=31",
                "a.ig=20",
                "a.wg=30",
                "all-reduce@dp/Dp"
            ]
        );
        assert_eq!(
            imp.layout,
            Layout {
                tp: 2,
                cp: 1,
                dp: 64,
                pp: 1,
                ep: 1,
                ep_spans_tp: false,
                ep_server_units: 0,
            }
        );
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = parse(&file(&["a\t-1\t10\tALLREDUCE\t8192"]), "w.txt").unwrap_err().to_string();
        assert!(e.starts_with("w.txt:3: 5 fields; a layer line has 12"), "{e}");
        let e = parse(&file(&["a\t-1\t10\tALLREDUSE\t8192\t20\tNONE\t0\t30\tNONE\t0\t100"]), "w.txt")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("w.txt:3: field 4 (forward comm): comm type \"ALLREDUSE\": valid ALLREDUCE"),
            "{e}"
        );
        let e = parse(&format!("{HEADER}\n3\na\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100\n"), "w.txt")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "w.txt:2: the count says 3 layer lines but the file has 1");
        let e = parse(
            "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 7\n0\n",
            "w.txt",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("all_gpus 7 is not a multiple of tp x pp = 2"), "{e}");
        let e = parse("DATA\n0\n", "w.txt").unwrap_err().to_string();
        assert!(e.contains("valid HYBRID_TRANSFORMER_FWD_IN_BCKWD"), "{e}");
        let e = parse(&HEADER.replace("pp: 1", "pp: 2"), "w.txt").unwrap_err().to_string();
        assert!(e.contains("pp: 2 > 1 is not supported"), "{e}");
    }
}
