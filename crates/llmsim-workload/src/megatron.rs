//! The Megatron-LM generator: from a model, training settings and a parallel plan to one
//! [`Program`] per pipeline stage, as SimAI's mocked framework produces its workload file
//! (SimAI §3.2, Figure 2):
//!
//! - per micro-batch and model chunk: receive activations, run each layer's forward (compute
//!   segments with the TP/CP/EP collectives between them), send activations; the backward the
//!   same way in reverse;
//! - the pipeline schedule: 1F1B (`forward_backward_pipelining_without_interleaving`) or
//!   interleaved with `vpp` chunks per stage (`..._with_interleaving`), with Megatron's warm-up
//!   counts and chunk order;
//! - data-parallel gradient reduction in buckets (Megatron DDP: buckets fill in backward order
//!   during the last micro-batch; with `overlap_grad_reduce` each is reduced as soon as it is
//!   full, otherwise all after the backward); all-reduce, or reduce-scatter + all-gather of
//!   the parameters with the distributed optimizer (`overlap_param_gather` prefetches the
//!   gathers at the start of the iteration, the steady-state behaviour);
//! - expert parameters reduce over the expert-data-parallel group; a tied embedding's gradient
//!   is all-reduced between the first and the last stage;
//! - the optimizer step after every reduction finished.
//!
//! Pipeline sends are asynchronous (their own stream); a receive blocks the compute stream until
//! the data arrived. Gradients are reduced in [`TrainingConfig::grad_dtype`] (fp32 for bf16).

use std::collections::HashMap;

use llmsim_ccl::CollectiveOp;
use llmsim_compute::DType;

use crate::dag::{Direction, Group, NONE, Node, NodeKind, P2pTag, Peer, Phase, Program, Segment, Stream, Workload};
use crate::model::{AttentionType, LayerKind};
use crate::ops::{self, CommGroup, OpSpec, OpSpecKind, Pass};
use crate::{ModelConfig, ParallelConfig, PipelineSchedule, TrainingConfig, WorkloadError};

/// One item of a layer template: a compute segment or a collective between segments.
#[derive(Clone, Copy, Debug)]
enum Item {
    Seg(u32),
    Coll { op: CollectiveOp, group: Group, bytes: u64 },
}

/// Bytes per parameter element in the distributed optimizer's parameter all-gather.
pub fn param_bytes_per_param(dtype: DType) -> u64 {
    match dtype {
        DType::Fp32 | DType::Tf32 => 4,
        _ => 2,
    }
}

/// Megatron DDP's default bucket size in parameters: max(40M, 1M x dp).
pub fn default_bucket_params(dp: u64) -> u64 {
    40_000_000u64.max(1_000_000 * dp)
}

/// Megatron's schedule for one stage: the (forward?, micro-batch, chunk) sequence.
pub fn schedule(stage: u64, pp: u64, microbatches: u64, vpp: u64, interleaved: bool) -> Vec<(bool, u64, u64)> {
    let m = microbatches;
    let mut out = Vec::with_capacity((2 * m * vpp) as usize);
    if !interleaved || vpp <= 1 {
        let warmup = (pp - stage - 1).min(m);
        for i in 0..warmup {
            out.push((true, i, 0));
        }
        for i in 0..m - warmup {
            out.push((true, warmup + i, 0));
            out.push((false, i, 0));
        }
        for i in m - warmup..m {
            out.push((false, i, 0));
        }
        return out;
    }
    let total = m * vpp;
    let group = pp * vpp;
    let mb_of = |k: u64| (k / group) * pp + k % pp;
    let fwd_chunk = |k: u64| (k % group) / pp;
    let bwd_chunk = |k: u64| vpp - 1 - (k % group) / pp;
    let warmup = if m == pp {
        total
    } else {
        ((pp - stage - 1) * 2 + (vpp - 1) * pp).min(total)
    };
    for k in 0..warmup {
        out.push((true, mb_of(k), fwd_chunk(k)));
    }
    for k in 0..total - warmup {
        out.push((true, mb_of(warmup + k), fwd_chunk(warmup + k)));
        out.push((false, mb_of(k), bwd_chunk(k)));
    }
    for k in total - warmup..total {
        out.push((false, mb_of(k), bwd_chunk(k)));
    }
    out
}

struct Builder<'a> {
    m: &'a ModelConfig,
    t: &'a TrainingConfig,
    p: &'a ParallelConfig,
    segments: Vec<Segment>,
    seg_index: HashMap<String, u32>,
}

impl Builder<'_> {
    /// Splits an op list at its collectives into segments (shared by name) and collectives.
    fn template(&mut self, prefix: &str, ops: &[OpSpec]) -> Result<Vec<Item>, WorkloadError> {
        let mut items = Vec::new();
        let mut cur: Vec<OpSpec> = Vec::new();
        let mut part = 0;
        let flush = |b: &mut Self, cur: &mut Vec<OpSpec>, items: &mut Vec<Item>, part: &mut u32| {
            if cur.is_empty() {
                return;
            }
            let name = format!("{prefix}.{part}");
            *part += 1;
            let next = b.segments.len() as u32;
            let id = *b.seg_index.entry(name.clone()).or_insert(next);
            if id == next {
                b.segments.push(Segment {
                    name,
                    pass: cur[0].pass,
                    ops: std::mem::take(cur),
                    duration: None,
                });
            } else {
                cur.clear();
            }
            items.push(Item::Seg(id));
        };
        for op in ops {
            match &op.kind {
                OpSpecKind::Compute { .. } => cur.push(op.clone()),
                OpSpecKind::Comm { op: coll, group, bytes } => {
                    flush(self, &mut cur, &mut items, &mut part);
                    let group = match group {
                        CommGroup::Tp => Group::Tp,
                        CommGroup::Cp => Group::Cp,
                        CommGroup::Ep => Group::Ep,
                        CommGroup::Dp => Group::Dp,
                        CommGroup::Pp => {
                            return Err(WorkloadError::Invalid {
                                field: format!("ops.{}", op.name),
                                message: "pipeline traffic is generated by the schedule, not by a layer".into(),
                            });
                        }
                    };
                    if *bytes > 0 {
                        items.push(Item::Coll {
                            op: *coll,
                            group,
                            bytes: *bytes,
                        });
                    }
                }
            }
        }
        flush(self, &mut cur, &mut items, &mut part);
        Ok(items)
    }
}

struct Templates {
    /// Forward and backward items of each layer class, and each layer's class.
    layer_fwd: Vec<Vec<Item>>,
    layer_bwd: Vec<Vec<Item>>,
    layer_class: Vec<usize>,
    emb_fwd: Vec<Item>,
    emb_bwd: Vec<Item>,
    head_fwd: Vec<Item>,
    head_bwd: Vec<Item>,
}

/// Emits a template's items into the program; returns the last node emitted (or `after`).
fn emit(prog: &mut Program, items: &[Item], base: Node, first_deps: &[u32]) -> Option<u32> {
    let mut last = None;
    for (i, it) in items.iter().enumerate() {
        let kind = match *it {
            Item::Seg(s) => NodeKind::Comp { segment: s },
            Item::Coll { op, group, bytes } => NodeKind::CommColl { op, group, bytes },
        };
        let deps: &[u32] = if i == 0 { first_deps } else { &[] };
        last = Some(prog.push(Node { kind, ..base }, deps));
    }
    last
}

/// A data-parallel bucket being filled in backward order.
struct Bucket {
    dense: u64,
    expert: u64,
}

/// Generates the per-stage programs. `p` must be resolved ([`ParallelConfig::resolve`]).
///
/// # Errors
/// A layer op list that names a group the generator cannot place.
pub fn generate(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> Result<Workload, WorkloadError> {
    let mut b = Builder {
        m,
        t,
        p,
        segments: Vec::new(),
        seg_index: HashMap::new(),
    };
    // One template per layer class (kind and attention type), built from the class's first
    // layer, in order of first appearance: a dense layer ("layer") and an MoE layer ("moe_layer")
    // for standard models; hybrid and sliding-window models have more.
    let mut classes: Vec<(LayerKind, AttentionType)> = Vec::new();
    let mut layer_class = Vec::with_capacity(m.num_hidden_layers as usize);
    let mut layer_fwd = Vec::new();
    let mut layer_bwd = Vec::new();
    for l in 0..m.num_hidden_layers {
        let key = (m.layer_kind(l), m.attention_type(l));
        let i = match classes.iter().position(|c| *c == key) {
            Some(i) => i,
            None => {
                let base = match key.0 {
                    LayerKind::Dense => "layer",
                    LayerKind::Moe => "moe_layer",
                    LayerKind::Mamba => "mamba_layer",
                    LayerKind::Attention => "attn_layer",
                    LayerKind::Mlp => "mlp_layer",
                    LayerKind::MoeMlp => "moe_mlp_layer",
                };
                let name = match key.1 {
                    AttentionType::SlidingAttention if key.0.has_attention() => format!("swa_{base}"),
                    _ => base.to_string(),
                };
                let lo = ops::transformer_layer(b.m, b.t, b.p, l);
                layer_fwd.push(b.template(&format!("{name}.fwd"), &lo.forward)?);
                layer_bwd.push(b.template(&format!("{name}.bwd"), &lo.backward)?);
                classes.push(key);
                classes.len() - 1
            }
        };
        layer_class.push(i);
    }
    let emb = ops::embedding(m, t, p);
    let head = ops::head(m, t, p);
    let tpl = Templates {
        layer_fwd,
        layer_bwd,
        layer_class,
        emb_fwd: b.template("embedding.fwd", &emb.forward)?,
        emb_bwd: b.template("embedding.bwd", &emb.backward)?,
        head_fwd: b.template("head.fwd", &head.forward)?,
        head_bwd: b.template("head.bwd", &head.backward)?,
    };
    let mb = p.micro_batches(t);
    let vpp = p.vpp.max(1);
    let interleaved = p.schedule == PipelineSchedule::Interleaved && vpp > 1;
    let vpp = if interleaved { vpp } else { 1 };
    let mut stages = Vec::with_capacity(p.pp as usize);
    for s in 0..p.pp {
        let opt_ops = ops::optimizer_step(ops::stage_params(m, p, s), t, p);
        let opt_items = b.template(&format!("optimizer.stage{s}"), &opt_ops)?;
        stages.push(stage_program(&mut b, &tpl, &opt_items, s, mb, vpp, interleaved));
    }
    Ok(Workload {
        stages,
        segments: b.segments,
        microbatches: mb as u32,
        vpp: vpp as u32,
        explicit: None,
    })
}

/// Layers of virtual stage (stage, chunk) under the plan's (possibly uneven) split.
fn chunk_layers(m: &ModelConfig, p: &ParallelConfig, stage: u64, chunk: u64) -> std::ops::Range<u64> {
    ops::layers_of_chunk(m, p, stage, chunk)
}

fn stage_program(b: &mut Builder<'_>, tpl: &Templates, opt: &[Item], s: u64, m: u64, vpp: u64, interleaved: bool) -> Program {
    let (mc, t, p) = (b.m, b.t, b.p);
    let pp = p.pp;
    let mut prog = Program::new();
    let act_bytes = {
        // Megatron sends b x s x h activations per micro-batch; with sequence parallelism each
        // tp rank sends its 1/tp slice (scatter-gather optimization), and CP splits the sequence.
        let full = t.micro_batch_size * t.seq_length / p.cp.max(1) * mc.hidden_size * t.dtype.bytes();
        if p.sequence_parallel && p.tp > 1 { full / p.tp } else { full }
    };
    let dist_opt = p.use_distributed_optimizer || p.zero_stage >= 1;
    let grad_b = t.grad_dtype().bytes();
    let param_b = param_bytes_per_param(t.dtype);
    let bucket_cap = if p.grad_bucket_size > 0 {
        p.grad_bucket_size
    } else {
        default_bucket_params(p.dp)
    };
    let base = |phase: Phase, mb: u64, chunk: u64, layer: u64| Node {
        kind: NodeKind::Comp { segment: 0 },
        stream: Stream::Compute,
        phase,
        microbatch: mb as u32,
        chunk: chunk as u32,
        layer: layer as u32,
    };
    let first_virtual = |c: u64| s == 0 && c == 0;
    let last_virtual = |c: u64| s == pp - 1 && c == vpp - 1;
    let tied_copy = mc.tie_word_embeddings && pp > 1;
    let emb_params = ops::padded_vocab(mc, p.tp) * mc.hidden_size / p.tp;

    // Buckets in backward order over the stage's chunks (last chunk first, last layer first).
    // Each entry: the layers (or -1 for head, -2 for embedding) it closes on.
    let mut order: Vec<(u64, i64)> = Vec::new(); // (chunk, layer or -1 head / -2 embedding)
    for c in (0..vpp).rev() {
        if last_virtual(c) {
            order.push((c, -1));
        }
        for l in chunk_layers(mc, p, s, c).rev() {
            order.push((c, l as i64));
        }
        if first_virtual(c) {
            order.push((c, -2));
        }
    }
    let params_of = |item: i64| -> (u64, u64) {
        match item {
            -1 => (
                if tied_copy || !mc.tie_word_embeddings { emb_params } else { 0 } + mc.hidden_size,
                0,
            ),
            -2 => (emb_params, 0),
            l => {
                let lp = ops::layer_params(mc, p, l as u64);
                (lp.dense, lp.expert)
            }
        }
    };
    // closes[(chunk, item)] = bucket index closed when that item's last backward finishes.
    let mut closes: HashMap<(u64, i64), usize> = HashMap::new();
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut item_bucket: HashMap<(u64, i64), usize> = HashMap::new();
    {
        let mut cur = Bucket { dense: 0, expert: 0 };
        for (i, &(c, it)) in order.iter().enumerate() {
            let (d, e) = params_of(it);
            cur.dense += d;
            cur.expert += e;
            item_bucket.insert((c, it), buckets.len());
            if cur.dense + cur.expert >= bucket_cap || i + 1 == order.len() {
                closes.insert((c, it), buckets.len());
                buckets.push(std::mem::replace(&mut cur, Bucket { dense: 0, expert: 0 }));
            }
        }
    }
    let dp_base = Node {
        stream: Stream::Dp,
        ..base(Phase::GradSync, NONE as u64, 0, NONE as u64)
    };
    // Parameter all-gathers prefetched at the start (distributed optimizer + overlap_param_gather),
    // in forward order.
    let mut gather_node: Vec<Option<u32>> = vec![None; buckets.len()];
    let prefetch = dist_opt && p.overlap_param_gather && p.dp > 1;
    if prefetch {
        for bi in (0..buckets.len()).rev() {
            let bk = &buckets[bi];
            gather_node[bi] = Some(push_bucket_colls(&mut prog, dp_base, bk, CollectiveOp::AllGather, param_b, &[]));
        }
    }
    let mut gathered: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut reduce_nodes: Vec<u32> = Vec::new();
    let mut pending_buckets: Vec<usize> = Vec::new();
    let mut last_compute: Option<u32> = None;

    for (fwd, mb, c) in schedule(s, pp, m, vpp, interleaved) {
        if fwd {
            let mut deps: Vec<u32> = Vec::new();
            if !first_virtual(c) {
                let tag = P2pTag {
                    dir: Direction::Forward,
                    microbatch: mb as u32,
                    chunk: c as u32,
                    seq: 0,
                };
                prog.push(
                    Node {
                        kind: NodeKind::CommRecv {
                            peer: Peer::Prev,
                            bytes: act_bytes,
                            tag,
                        },
                        ..base(Phase::Forward, mb, c, NONE as u64)
                    },
                    &[],
                );
            }
            if first_virtual(c) {
                if prefetch
                    && let Some(&bi) = item_bucket.get(&(c, -2))
                    && gathered.insert(bi)
                {
                    deps.extend(gather_node[bi]);
                }
                last_compute = emit(&mut prog, &tpl.emb_fwd, base(Phase::Forward, mb, c, NONE as u64), &deps).or(last_compute);
                deps.clear();
            }
            for l in chunk_layers(mc, p, s, c) {
                if prefetch
                    && let Some(&bi) = item_bucket.get(&(c, l as i64))
                    && gathered.insert(bi)
                {
                    deps.extend(gather_node[bi]);
                }
                let items = &tpl.layer_fwd[tpl.layer_class[l as usize]];
                last_compute = emit(&mut prog, items, base(Phase::Forward, mb, c, l), &deps).or(last_compute);
                deps.clear();
            }
            if last_virtual(c) {
                last_compute = emit(&mut prog, &tpl.head_fwd, base(Phase::Forward, mb, c, NONE as u64), &[]).or(last_compute);
            } else {
                let recv_chunk = if s == pp - 1 { c + 1 } else { c };
                let tag = P2pTag {
                    dir: Direction::Forward,
                    microbatch: mb as u32,
                    chunk: recv_chunk as u32,
                    seq: 0,
                };
                let dep: Vec<u32> = last_compute.into_iter().collect();
                prog.push(
                    Node {
                        kind: NodeKind::CommSend {
                            peer: Peer::Next,
                            bytes: act_bytes,
                            tag,
                        },
                        stream: Stream::PpSend,
                        ..base(Phase::Forward, mb, c, NONE as u64)
                    },
                    &dep,
                );
            }
        } else {
            let last_mb = mb == m - 1;
            if !last_virtual(c) {
                let tag = P2pTag {
                    dir: Direction::Backward,
                    microbatch: mb as u32,
                    chunk: c as u32,
                    seq: 0,
                };
                prog.push(
                    Node {
                        kind: NodeKind::CommRecv {
                            peer: Peer::Next,
                            bytes: act_bytes,
                            tag,
                        },
                        ..base(Phase::Backward, mb, c, NONE as u64)
                    },
                    &[],
                );
            }
            let close = |prog: &mut Program, item: i64, after: Option<u32>, pending: &mut Vec<usize>, reduce: &mut Vec<u32>| {
                if !last_mb {
                    return;
                }
                if let Some(&bi) = closes.get(&(c, item)) {
                    if p.overlap_grad_reduce {
                        let dep: Vec<u32> = after.into_iter().collect();
                        let op = if dist_opt {
                            CollectiveOp::ReduceScatter
                        } else {
                            CollectiveOp::AllReduce
                        };
                        reduce.push(push_bucket_colls(prog, dp_base, &buckets[bi], op, grad_b, &dep));
                    } else {
                        pending.push(bi);
                    }
                }
            };
            if last_virtual(c) {
                last_compute = emit(&mut prog, &tpl.head_bwd, base(Phase::Backward, mb, c, NONE as u64), &[]).or(last_compute);
                close(&mut prog, -1, last_compute, &mut pending_buckets, &mut reduce_nodes);
            }
            for l in chunk_layers(mc, p, s, c).rev() {
                let items = &tpl.layer_bwd[tpl.layer_class[l as usize]];
                last_compute = emit(&mut prog, items, base(Phase::Backward, mb, c, l), &[]).or(last_compute);
                close(&mut prog, l as i64, last_compute, &mut pending_buckets, &mut reduce_nodes);
            }
            if first_virtual(c) {
                last_compute = emit(&mut prog, &tpl.emb_bwd, base(Phase::Backward, mb, c, NONE as u64), &[]).or(last_compute);
                close(&mut prog, -2, last_compute, &mut pending_buckets, &mut reduce_nodes);
            } else {
                let recv_chunk = if s == 0 { c - 1 } else { c };
                let tag = P2pTag {
                    dir: Direction::Backward,
                    microbatch: mb as u32,
                    chunk: recv_chunk as u32,
                    seq: 0,
                };
                let dep: Vec<u32> = last_compute.into_iter().collect();
                prog.push(
                    Node {
                        kind: NodeKind::CommSend {
                            peer: Peer::Prev,
                            bytes: act_bytes,
                            tag,
                        },
                        stream: Stream::PpSend,
                        ..base(Phase::Backward, mb, c, NONE as u64)
                    },
                    &dep,
                );
            }
        }
    }
    // Reductions not overlapped: all after the backward.
    let op = if dist_opt {
        CollectiveOp::ReduceScatter
    } else {
        CollectiveOp::AllReduce
    };
    for bi in pending_buckets {
        let dep: Vec<u32> = last_compute.into_iter().collect();
        reduce_nodes.push(push_bucket_colls(&mut prog, dp_base, &buckets[bi], op, grad_b, &dep));
    }
    // Tied embedding: first and last stage all-reduce the embedding gradient.
    if tied_copy && (s == 0 || s == pp - 1) {
        let dep: Vec<u32> = last_compute.into_iter().collect();
        reduce_nodes.push(prog.push(
            Node {
                kind: NodeKind::CommColl {
                    op: CollectiveOp::AllReduce,
                    group: Group::Embedding,
                    bytes: emb_params * grad_b,
                },
                ..dp_base
            },
            &dep,
        ));
    }
    // Optimizer after every reduction.
    let mut deps = reduce_nodes.clone();
    deps.extend(last_compute);
    let opt_base = base(Phase::Optimizer, NONE as u64, 0, NONE as u64);
    let last_opt = emit(&mut prog, opt, opt_base, &deps);
    if dist_opt && !prefetch && p.dp > 1 {
        let dep: Vec<u32> = last_opt.into_iter().collect();
        for bk in buckets.iter().rev() {
            push_bucket_colls(&mut prog, dp_base, bk, CollectiveOp::AllGather, param_b, &dep);
        }
    }
    prog
}

/// Pushes the collectives of one bucket (dense part over Dp, expert part over ExpertDp);
/// returns the last node.
fn push_bucket_colls(prog: &mut Program, base: Node, bk: &Bucket, op: CollectiveOp, bytes_per: u64, deps: &[u32]) -> u32 {
    let mut last = None;
    if bk.dense > 0 || bk.expert == 0 {
        last = Some(prog.push(
            Node {
                kind: NodeKind::CommColl {
                    op,
                    group: Group::Dp,
                    bytes: bk.dense * bytes_per,
                },
                ..base
            },
            deps,
        ));
    }
    if bk.expert > 0 {
        last = Some(prog.push(
            Node {
                kind: NodeKind::CommColl {
                    op,
                    group: Group::ExpertDp,
                    bytes: bk.expert * bytes_per,
                },
                ..base
            },
            deps,
        ));
    }
    last.unwrap_or(0)
}

/// Per-micro-batch, per-stage pass used in reports.
pub fn pass_name(p: Pass) -> &'static str {
    match p {
        Pass::Forward => "fwd",
        Pass::Recompute => "recompute",
        Pass::BackwardInput => "bwd-input",
        Pass::BackwardWeight => "bwd-weight",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_order() {
        // Stage 0 of 4 with 6 micro-batches: 3 warm-up forwards, then alternate, then 3 backwards.
        let s = schedule(0, 4, 6, 1, false);
        let f: Vec<_> = s
            .iter()
            .map(|(f, m, _)| if *f { format!("F{m}") } else { format!("B{m}") })
            .collect();
        assert_eq!(f.join(" "), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
        // Last stage: no warm-up.
        let s = schedule(3, 4, 3, 1, false);
        let f: Vec<_> = s
            .iter()
            .map(|(f, m, _)| if *f { format!("F{m}") } else { format!("B{m}") })
            .collect();
        assert_eq!(f.join(" "), "F0 B0 F1 B1 F2 B2");
    }

    #[test]
    fn interleaved_covers_every_microbatch_chunk_once() {
        for stage in 0..4 {
            let s = schedule(stage, 4, 8, 2, true);
            assert_eq!(s.len(), 2 * 8 * 2);
            let mut fwd: Vec<_> = s.iter().filter(|x| x.0).map(|x| (x.1, x.2)).collect();
            let mut bwd: Vec<_> = s.iter().filter(|x| !x.0).map(|x| (x.1, x.2)).collect();
            fwd.sort_unstable();
            bwd.sort_unstable();
            let all: Vec<_> = (0..8).flat_map(|m| (0..2).map(move |c| (m, c))).collect();
            assert_eq!(fwd, all);
            assert_eq!(bwd, all);
            // A backward never precedes its forward.
            for (i, x) in s.iter().enumerate().filter(|(_, x)| !x.0) {
                let f = s.iter().position(|y| y.0 && y.1 == x.1 && y.2 == x.2).unwrap();
                assert!(f < i);
            }
        }
    }
}
