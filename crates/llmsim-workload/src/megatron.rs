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
//! - ZeRO-3 / FSDP (`zero_stage: 3`, dp > 1): the buckets, closed at each model chunk's end,
//!   are the FSDP units. Each unit's parameters are all-gathered before its forward and again
//!   before its backward, and its gradients reduce-scattered after its backward, every
//!   micro-batch (Megatron-FSDP `optim_grads_params`, whose `no_sync` still reduce-scatters;
//!   PyTorch FSDP `FULL_SHARD`). With `reshard_after_forward: false` (Llama 3, TorchTitan with
//!   PP) a unit is gathered once, at its first forward of the step, and reduce-scattered once,
//!   after its last backward. Gathers are prefetched one unit ahead on the DP stream; the
//!   distributed optimizer's own reduce-scatter / all-gather are replaced, and
//!   `overlap_grad_reduce` / `overlap_param_gather` do not apply;
//! - the optimizer step after every reduction finished;
//! - `training.iterations: N` appends N iterations to each program back to back
//!   ([`Program::iteration_starts`]): iteration k+1's prefetched parameter all-gathers (and FSDP's
//!   first gathers) wait for iteration k's optimizer step, and without `overlap_param_gather` its
//!   first node waits for iteration k's parameter all-gathers (Megatron's synchronous gather).
//!   Iteration 1 is the one-iteration program unchanged.
//!
//! Pipeline sends are asynchronous (their own stream); a receive blocks the compute stream until
//! the data arrived. Gradients are reduced in [`TrainingConfig::grad_dtype`] (fp32 for bf16).

use std::collections::HashMap;

use llmsim_compute::DType;
use llmsim_core::CollectiveOp;

use crate::dag::{DagNodeKind, Direction, Group, NONE, Node, P2pTag, Peer, Phase, Program, Segment, Stream, Workload};
use crate::model::{AttentionType, LayerKind};
use crate::ops::{self, CommGroup, OpSpec, OpSpecKind, Pass};
use crate::{FsdpImpl, ModelConfig, ParallelConfig, PipelineSchedule, PpImpl, TrainingConfig, WorkloadError};
use llmsim_compute::OpClass;

/// One item of a layer template: a compute segment or a collective between segments.
#[derive(Clone, Copy, Debug)]
enum Item {
    Seg(u32),
    Coll {
        op: CollectiveOp,
        group: Group,
        bytes: u64,
    },
    /// A collective issued on its own stream ([`Stream::Free`]) after the compute stream's last
    /// node; the compute stream goes on until the [`Item::Wait`] that follows.
    AsyncColl {
        op: CollectiveOp,
        group: Group,
        bytes: u64,
    },
    /// The compute stream's next node waits for the last [`Item::AsyncColl`].
    Wait,
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

/// One step of a stage's pipeline schedule: a forward or backward pass of one micro-batch
/// through one model chunk (virtual stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleStep {
    /// Forward or backward.
    pub dir: Direction,
    /// The micro-batch, from 0.
    pub microbatch: u64,
    /// The model chunk (virtual pipeline stage), from 0.
    pub chunk: u64,
    /// A forward that runs merged with the backward step after it (`parallel.moe_a2a_overlap`,
    /// Megatron-Core's combined 1F1B steady state).
    pub merged: bool,
    /// A forward of the steady (one-forward-one-backward) phase, the backward after it its
    /// pair; not the warm-up's forwards, even where they too are followed by a backward (every
    /// micro-batch warming up).
    pub steady: bool,
    /// A backward that leaves its layers' weight gradients for a later `weight` step (zero
    /// bubble: DualPipe's `WeightGradStore`).
    pub defer_w: bool,
    /// The deferred weight gradients of (micro-batch, chunk)'s backward, run now.
    pub weight: bool,
}

impl ScheduleStep {
    fn forward(microbatch: u64, chunk: u64) -> Self {
        ScheduleStep {
            dir: Direction::Forward,
            microbatch,
            chunk,
            merged: false,
            steady: false,
            defer_w: false,
            weight: false,
        }
    }

    fn backward(microbatch: u64, chunk: u64) -> Self {
        ScheduleStep {
            dir: Direction::Backward,
            microbatch,
            chunk,
            merged: false,
            steady: false,
            defer_w: false,
            weight: false,
        }
    }

    /// A forward pass.
    pub fn is_forward(self) -> bool {
        self.dir == Direction::Forward
    }
}

/// Megatron's schedule for one stage: its passes in order.
pub fn schedule(stage: u64, pp: u64, microbatches: u64, vpp: u64, interleaved: bool) -> Vec<ScheduleStep> {
    schedule_with(stage, pp, microbatches, vpp, interleaved, false)
}

/// [`schedule`], with `merged` (`parallel.moe_a2a_overlap`): Megatron-Core's combined 1F1B,
/// which warms up one micro-batch more (`get_pp_rank_microbatches` in `schedules.py`; without
/// pipelining, `combined_1f1b_schedule_for_no_pipelining` runs the first forward alone) and
/// marks each steady-state forward as merged with the backward after it.
pub fn schedule_with(stage: u64, pp: u64, microbatches: u64, vpp: u64, interleaved: bool, merged: bool) -> Vec<ScheduleStep> {
    schedule_flushes(stage, pp, microbatches, vpp, interleaved, merged, 1)
}

/// [`schedule_with`] run as `flushes` consecutive schedules of `microbatches / flushes`
/// micro-batches each (`parallel.pipeline_flushes`), numbered on from one to the next.
pub fn schedule_flushes(
    stage: u64,
    pp: u64,
    microbatches: u64,
    vpp: u64,
    interleaved: bool,
    merged: bool,
    flushes: u64,
) -> Vec<ScheduleStep> {
    per_flush(microbatches, flushes, |m| schedule_one(stage, pp, m, vpp, interleaved, merged))
}

/// `one(m)`'s schedule of `m` micro-batches run as `flushes` consecutive schedules of
/// `microbatches / flushes` each, numbered on from one to the next (one schedule of all when
/// `flushes` does not divide them).
fn per_flush(microbatches: u64, flushes: u64, one: impl Fn(u64) -> Vec<ScheduleStep>) -> Vec<ScheduleStep> {
    let f = flushes.max(1);
    if f == 1 || !microbatches.is_multiple_of(f) {
        return one(microbatches);
    }
    let per = microbatches / f;
    (0..f)
        .flat_map(|i| {
            one(per).into_iter().map(move |s| ScheduleStep {
                microbatch: s.microbatch + i * per,
                ..s
            })
        })
        .collect()
}

fn schedule_one(stage: u64, pp: u64, microbatches: u64, vpp: u64, interleaved: bool, merged: bool) -> Vec<ScheduleStep> {
    let m = microbatches;
    let extra = u64::from(merged);
    let mut out = Vec::with_capacity((2 * m * vpp) as usize);
    let steady = |f: ScheduleStep| ScheduleStep { merged, steady: true, ..f };
    if !interleaved || vpp <= 1 {
        let warmup = (pp - stage - 1 + extra).min(m);
        for i in 0..warmup {
            out.push(ScheduleStep::forward(i, 0));
        }
        for i in 0..m - warmup {
            out.push(steady(ScheduleStep::forward(warmup + i, 0)));
            out.push(ScheduleStep::backward(i, 0));
        }
        for i in m - warmup..m {
            out.push(ScheduleStep::backward(i, 0));
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
        ((pp - stage - 1) * 2 + (vpp - 1) * pp + extra).min(total)
    };
    for k in 0..warmup {
        out.push(ScheduleStep::forward(mb_of(k), fwd_chunk(k)));
    }
    for k in 0..total - warmup {
        out.push(steady(ScheduleStep::forward(mb_of(warmup + k), fwd_chunk(warmup + k))));
        out.push(ScheduleStep::backward(mb_of(k), bwd_chunk(k)));
    }
    for k in total - warmup..total {
        out.push(ScheduleStep::backward(mb_of(k), bwd_chunk(k)));
    }
    out
}

/// The schedule stage `stage` of a resolved plan runs over `microbatches` micro-batches:
/// Megatron's 1F1B or interleaved order ([`schedule_flushes`]), or DualPipeV's
/// ([`dualpipev_schedule`]), each `parallel.pipeline_flushes` times.
pub fn stage_schedule(p: &ParallelConfig, stage: u64, microbatches: u64) -> Vec<ScheduleStep> {
    let pp = p.pp.max(1);
    let f = p.pipeline_flushes;
    if p.dual_pipe_v() {
        let zb = p.dualpipev_zero_bubble();
        return per_flush(microbatches, f, |m| dualpipev_schedule(stage, pp, m, p.moe_a2a_overlap, zb));
    }
    let interleaved = p.schedule == PipelineSchedule::Interleaved && p.vpp > 1;
    let vpp = if interleaved { p.vpp } else { 1 };
    schedule_flushes(stage, pp, microbatches, vpp, interleaved, p.moe_a2a_overlap, f)
}

/// DualPipeV's order of passes on rank `stage` of `pp` over `m` micro-batches (m >= 2·pp), as
/// deepseek-ai/DualPipe `dualpipe/dualpipev.py` (`DualPipeV.step`) runs them: chunk 0 is virtual
/// stage `stage`, chunk 1 virtual stage `2·pp-1-stage`, and `F0`/`F1`/`B0`/`B1` take the next
/// micro-batch of their chunk.
///
/// 1. `2(pp-stage-1)` x F0; 2. `stage+1` x (F0, F1); 3. `pp-stage-1` x (B1, F1);
/// 4. `m-2pp+stage+1` x (F0 & B1, F1 & B0); 5. `pp-stage-1` x (B1, F1 & B0);
/// 6. `stage+1` x (B1, B0); 7. `pp-stage-1` x B0.
///
/// `X & Y` is DualPipe's overlapped forward-backward, a merged step when `merged`
/// (`parallel.moe_a2a_overlap`), else X then Y; the last rank runs its first step-4 pair
/// unmerged, as the reference does. With `zb` the reference's zero bubble: the backwards of
/// phase 3, of the second half of phase 6 and of phase 7 leave their weight gradients (`W`) in a
/// first-in-first-out store, popped by phase 3 right after its backward, by phase 7 before each
/// backward and by phase 8 (`stage+1` x W); without it every backward includes them.
pub fn dualpipev_schedule(stage: u64, pp: u64, m: u64, merged: bool, zb: bool) -> Vec<ScheduleStep> {
    let r = stage;
    let mut out = Vec::with_capacity(4 * m as usize + 2 * pp as usize);
    let mut next = [[0u64; 2]; 2]; // [forward, backward][chunk]
    type Store = std::collections::VecDeque<(u64, u64)>;
    let mut store = Store::new();
    let mut pass = |out: &mut Vec<ScheduleStep>, store: &mut Store, dir: Direction, chunk: u64, merge: bool, defer: bool| {
        let d = usize::from(dir == Direction::Backward);
        let mb = next[d][chunk as usize];
        next[d][chunk as usize] += 1;
        let defer_w = defer && zb && dir == Direction::Backward;
        if defer_w {
            store.push_back((mb, chunk));
        }
        out.push(ScheduleStep {
            dir,
            microbatch: mb,
            chunk,
            merged: merge,
            steady: false,
            defer_w,
            weight: false,
        });
    };
    let weight = |out: &mut Vec<ScheduleStep>, store: &mut Store| {
        if let Some((mb, chunk)) = store.pop_front() {
            out.push(ScheduleStep {
                dir: Direction::Backward,
                microbatch: mb,
                chunk,
                merged: false,
                steady: false,
                defer_w: false,
                weight: true,
            });
        }
    };
    use Direction::{Backward as B, Forward as F};
    let rest = pp - r - 1;
    for _ in 0..2 * rest {
        pass(&mut out, &mut store, F, 0, false, false);
    }
    for _ in 0..=r {
        pass(&mut out, &mut store, F, 0, false, false);
        pass(&mut out, &mut store, F, 1, false, false);
    }
    for _ in 0..rest {
        pass(&mut out, &mut store, B, 1, false, true);
        weight(&mut out, &mut store);
        pass(&mut out, &mut store, F, 1, false, false);
    }
    for i in 0..(m + r + 1).saturating_sub(2 * pp) {
        pass(&mut out, &mut store, F, 0, merged && !(i == 0 && r == pp - 1), false);
        pass(&mut out, &mut store, B, 1, false, false);
        pass(&mut out, &mut store, F, 1, merged, false);
        pass(&mut out, &mut store, B, 0, false, false);
    }
    for _ in 0..rest {
        pass(&mut out, &mut store, B, 1, false, false);
        pass(&mut out, &mut store, F, 1, merged, false);
        pass(&mut out, &mut store, B, 0, false, false);
    }
    // Phase 6: the second half's backwards defer their W (from the middle, B1 first on odd
    // ranks, B0 first on even ones).
    let half = r.div_ceil(2); // the reference's step_6 // 2, step_6 = stage + 1
    for i in 0..=r {
        pass(&mut out, &mut store, B, 1, false, i > half || (i == half && r % 2 == 1));
        pass(&mut out, &mut store, B, 0, false, i >= half);
    }
    for _ in 0..rest {
        weight(&mut out, &mut store);
        pass(&mut out, &mut store, B, 0, false, true);
    }
    while !store.is_empty() {
        weight(&mut out, &mut store);
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
    /// The copy segments of offloaded layer `l`: its saved activations
    /// ([`crate::memory::layer_activation_bytes`]) to host memory after its forward, and back
    /// before its backward. Shared by layers of one size.
    fn offload_copies(&mut self, l: u64) -> (u32, u32) {
        let bytes = crate::memory::layer_activation_bytes(self.m, self.t, self.p, l);
        let mut seg = |name: &'static str, pass: Pass| -> u32 {
            let op = OpSpec {
                name,
                pass,
                kind: OpSpecKind::HostCopy { bytes },
                shape: format!("bytes={bytes}"),
                kernel: None,
                overlap: None,
                dtype: None,
                host_sync: false,
            };
            self.intern(format!("{name}.{bytes}"), vec![op])
        };
        (seg("cpu_offload_d2h", Pass::Forward), seg("cpu_offload_h2d", Pass::BackwardInput))
    }

    /// The id of segment `name`, added with `ops` (not empty) the first time: segments are
    /// shared by name.
    fn intern(&mut self, name: String, ops: Vec<OpSpec>) -> u32 {
        let next = self.segments.len() as u32;
        let id = *self.seg_index.entry(name.clone()).or_insert(next);
        if id == next {
            self.segments.push(Segment {
                name,
                pass: ops[0].pass,
                ops,
                duration: None,
            });
        }
        id
    }

    /// Splits an op list at its collectives into segments (shared by name) and collectives.
    fn template(&mut self, prefix: &str, ops: &[OpSpec]) -> Result<Vec<Item>, WorkloadError> {
        let mut items = Vec::new();
        let mut cur: Vec<OpSpec> = Vec::new();
        let mut part = 0;
        // Kernels still to run beside the last asynchronous collective before the stream waits.
        let mut beside_left = 0u32;
        let flush = |b: &mut Self, cur: &mut Vec<OpSpec>, items: &mut Vec<Item>, part: &mut u32| {
            if cur.is_empty() {
                return;
            }
            let name = format!("{prefix}.{part}");
            *part += 1;
            items.push(Item::Seg(b.intern(name, std::mem::take(cur))));
        };
        for op in ops {
            match &op.kind {
                OpSpecKind::Compute { .. } | OpSpecKind::HostCopy { .. } => {
                    // The host waits for the GPU before a syncing op: it starts a segment.
                    if op.host_sync && beside_left == 0 {
                        flush(self, &mut cur, &mut items, &mut part);
                    }
                    cur.push(op.clone());
                    if beside_left > 0 {
                        beside_left -= 1;
                        if beside_left == 0 {
                            flush(self, &mut cur, &mut items, &mut part);
                            items.push(Item::Wait);
                        }
                    }
                }
                OpSpecKind::Comm {
                    op: coll,
                    group,
                    bytes,
                    beside,
                } => {
                    flush(self, &mut cur, &mut items, &mut part);
                    if beside_left > 0 {
                        // A collective before the kernels it was to run beside: wait here.
                        items.push(Item::Wait);
                        beside_left = 0;
                    }
                    let group = match group {
                        CommGroup::Tp => Group::Tp,
                        CommGroup::Cp => Group::Cp,
                        CommGroup::Ep => Group::Ep,
                        CommGroup::EpInter => Group::EpInter,
                        CommGroup::EpIntra => Group::EpIntra,
                        CommGroup::Dp => Group::Dp,
                        CommGroup::Pp => {
                            return Err(WorkloadError::Invalid {
                                field: format!("ops.{}", op.name),
                                message: "pipeline traffic is generated by the schedule, not by a layer".into(),
                            });
                        }
                    };
                    if *bytes > 0 && *beside > 0 {
                        items.push(Item::AsyncColl {
                            op: *coll,
                            group,
                            bytes: *bytes,
                        });
                        beside_left = *beside;
                    } else if *bytes > 0 {
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
        if beside_left > 0 {
            items.push(Item::Wait);
        }
        Ok(items)
    }
}

struct Templates {
    /// Forward and backward items of each layer class, and each layer's class.
    layer_fwd: Vec<Vec<Item>>,
    layer_bwd: Vec<Vec<Item>>,
    /// DualPipeV's zero bubble: each class's backward without its weight-gradient kernels, and
    /// those kernels alone (empty otherwise).
    layer_bwd_input: Vec<Vec<Item>>,
    layer_bwd_weight: Vec<Vec<Item>>,
    layer_class: Vec<usize>,
    emb_fwd: Vec<Item>,
    emb_bwd: Vec<Item>,
    head_fwd: Vec<Item>,
    head_bwd: Vec<Item>,
    /// Activation CPU offloading: the (device-to-host, host-to-device) copy segments of each
    /// offloaded layer (`training.cpu_offload_layers`, pp = 1), by layer index.
    offload: Vec<(u32, u32)>,
}

/// Emits a template's items into the program; returns the last node emitted (or `after`).
/// An asynchronous collective's node is the template's last when its wait ends the template:
/// what comes next then waits for it.
fn emit(prog: &mut Program, items: &[Item], base: Node, first_deps: &[u32]) -> Option<u32> {
    let mut last: Option<u32> = None;
    // The asynchronous collective in flight, and the one the next compute-stream node waits for.
    let mut pending: Option<u32> = None;
    let mut wait: Option<u32> = None;
    for it in items {
        let kind = match *it {
            Item::Seg(s) => DagNodeKind::Comp { segment: s },
            Item::Coll { op, group, bytes } => DagNodeKind::CommColl { op, group, bytes },
            Item::AsyncColl { op, group, bytes } => {
                let node = Node {
                    kind: DagNodeKind::CommColl { op, group, bytes },
                    stream: Stream::Free,
                    ..base
                };
                // After the stream's last node (and what that node's successor would wait for).
                let n = match (last, wait) {
                    (None, None) => prog.push(node, first_deps),
                    (None, Some(w)) => prog.push(node, &[w]),
                    (Some(l), None) => prog.push(node, &[l]),
                    (Some(l), Some(w)) => prog.push(node, &[l, w]),
                };
                pending = Some(n);
                continue;
            }
            Item::Wait => {
                wait = pending.take().or(wait);
                continue;
            }
        };
        let node = Node { kind, ..base };
        // A waited-for collective already follows `first_deps`.
        last = Some(match (last, wait.take()) {
            (None, None) => prog.push(node, first_deps),
            (_, Some(w)) => prog.push(node, &[w]),
            (Some(_), None) => prog.push(node, &[]),
        });
    }
    // A wait with nothing after it in the template: the caller's next node waits instead.
    wait.or(last)
}

/// A data-parallel bucket being filled in backward order.
/// Pushes a pipeline message of `bytes`: a receive on `at`'s stream (the compute stream waits
/// for it) or, with `send` = `Some(stream)`, a send on that stream: the pipeline-send stream
/// when sends run asynchronously, the compute stream when it waits for each send to be
/// delivered ([`ParallelConfig::pp_sends_block`]). `tag` names the micro-batch and the chunk the
/// message is for. Returns the node.
#[allow(clippy::too_many_arguments)]
fn push_p2p(
    prog: &mut Program,
    at: Node,
    send: Option<Stream>,
    peer: Peer,
    dir: Direction,
    mb: u64,
    chunk: u64,
    bytes: u64,
    deps: &[u32],
) -> u32 {
    let tag = P2pTag {
        dir,
        microbatch: mb as u32,
        chunk: chunk as u32,
        seq: 0,
    };
    let (kind, stream) = match send {
        Some(stream) => (DagNodeKind::CommSend { peer, bytes, tag }, stream),
        None => (DagNodeKind::CommRecv { peer, bytes, tag }, at.stream),
    };
    prog.push(Node { kind, stream, ..at }, deps)
}

/// A layer's items cut at its expert-parallel collectives: the parts between them, and the
/// collectives, adjacent ones together (the `flex` dispatcher's network and NVLink phases over
/// servers run one after the other as one dispatch or combine).
fn ep_parts(items: &[Item]) -> (Vec<&[Item]>, Vec<&[Item]>) {
    let is_ep = |it: &Item| matches!(it, Item::Coll { group, .. } | Item::AsyncColl { group, .. } if group.is_ep());
    let mut parts = Vec::new();
    let mut colls = Vec::new();
    let (mut from, mut i) = (0, 0);
    while i < items.len() {
        if is_ep(&items[i]) {
            let start = i;
            while i < items.len() && is_ep(&items[i]) {
                i += 1;
            }
            parts.push(&items[from..start]);
            colls.push(&items[start..i]);
            from = i;
        } else {
            i += 1;
        }
    }
    parts.push(&items[from..]);
    (parts, colls)
}

/// One layer's forward (`f`) and another micro-batch's backward of a layer (`b`), merged as
/// Megatron-Core's combined 1F1B runs them (`TransformerLayerSchedulePlan.run`): the compute
/// stream alternates the two passes' parts between their expert-parallel all-to-alls,
/// backward first (combine-backward beside the forward's attention, the forward's dispatch
/// beside the expert backward, the backward's dispatch beside the forward's experts, the
/// forward's combine beside the attention backward), and each all-to-all runs on its own
/// stream ([`Stream::Free`]) after the part before it; the part after it waits for it.
/// `wait` holds what each pass's first node waits for (forward, backward); on return, what its
/// next node must wait for (an all-to-all that ended the layer). Returns the last node of each
/// pass.
/// With `send_first` (the chunk's last layer pair) the forward's last part goes before the
/// backward's, so the forward's output leaves for the next stage without waiting for the
/// attention backward (Megatron calls `post_forward` there, before `attn.backward`).
fn emit_merged(prog: &mut Program, f: (&[Item], Node), b: (&[Item], Node), wait: &mut [Vec<u32>; 2], send_first: bool) -> [Option<u32>; 2] {
    let (fp, fc) = ep_parts(f.0);
    let (bp, bc) = ep_parts(b.0);
    let mut last: [Option<u32>; 2] = [None, None];
    // An asynchronous all-to-all (`parallel.delay_wgrad_compute`: the backward dispatch) that the
    // next part's kernels up to its `Item::Wait` run beside, by side.
    let mut beside: [Option<u32>; 2] = [None, None];
    let passes = [(&fp, &fc, f.1), (&bp, &bc, b.1)];
    let n = fp.len().max(bp.len());
    for k in 0..n {
        // Backward (index 1) first, but for the forward's last part with `send_first`.
        let order = if send_first && k + 1 == fp.len() { [0, 1] } else { [1, 0] };
        for side in order {
            let (parts, colls, base) = passes[side];
            let Some(part) = parts.get(k) else { continue };
            // Emits `items` after what the side waits for; they become its last node.
            let mut put = |prog: &mut Program, items: &[Item], wait: &mut Vec<u32>| {
                if let Some(n) = emit(prog, items, base, wait) {
                    last[side] = Some(n);
                    wait.clear();
                }
            };
            if let Some(c) = beside[side].take() {
                // The kernels before the wait run beside the collective; the rest wait for it.
                let w = part.iter().position(|it| matches!(it, Item::Wait)).unwrap_or(part.len());
                put(prog, &part[..w], &mut wait[side]);
                wait[side].push(c);
                put(prog, part.get(w + 1..).unwrap_or_default(), &mut wait[side]);
            } else {
                put(prog, part, &mut wait[side]);
            }
            for (j, it) in colls.get(k).copied().unwrap_or_default().iter().enumerate() {
                let (op, group, bytes, is_async) = match *it {
                    Item::Coll { op, group, bytes } => (op, group, bytes, false),
                    Item::AsyncColl { op, group, bytes } => (op, group, bytes, true),
                    _ => continue,
                };
                let deps: Vec<u32> = if j == 0 && part.is_empty() {
                    std::mem::take(&mut wait[side])
                } else {
                    last[side].into_iter().collect()
                };
                let node = Node {
                    kind: DagNodeKind::CommColl { op, group, bytes },
                    stream: Stream::Free,
                    ..base
                };
                let n = prog.push(node, &deps);
                last[side] = Some(n);
                if is_async {
                    wait[side].clear();
                    beside[side] = Some(n);
                } else {
                    wait[side] = vec![n];
                }
            }
        }
    }
    // A collective whose beside-kernels never came (the layer ended): the next node waits.
    for side in 0..2 {
        if let Some(c) = beside[side] {
            wait[side].push(c);
        }
    }
    last
}

struct Bucket {
    dense: u64,
    expert: u64,
    /// Of `dense`: the embedding / output layer's parameters (never FP8 weights).
    vocab: u64,
}

/// Bytes per parameter of a bucket's collective, by kind of parameter.
#[derive(Clone, Copy)]
struct Width {
    vocab: u64,
    linear: u64,
    /// The routed experts' parameters (on the expert-data-parallel group).
    expert: u64,
}

impl Width {
    /// Bytes of bucket `bk` at these widths: its dense part (the vocab parameters at their own
    /// width) and its routed experts.
    fn bucket_bytes(&self, bk: &Bucket) -> (u64, u64) {
        (bk.vocab * self.vocab + (bk.dense - bk.vocab) * self.linear, bk.expert * self.expert)
    }

    /// The gradient reduction: [`TrainingConfig::grad_dtype`], the routed experts'
    /// [`TrainingConfig::expert_grad_dtype`].
    fn grads(t: &TrainingConfig) -> Self {
        let b = t.grad_dtype().bytes();
        Width {
            vocab: b,
            linear: b,
            expert: t.expert_grad_dtype().bytes(),
        }
    }

    /// The parameter all-gather: FP8 primary weights (`fp8_param`) travel as 1 byte, the vocab
    /// parameters (and everything without it) in the weights' dtype.
    fn params(t: &TrainingConfig) -> Self {
        let b = param_bytes_per_param(t.dtype);
        if t.dtype == DType::Fp8 && t.fp8_param {
            Width {
                vocab: b,
                linear: 1,
                expert: 1,
            }
        } else {
            Width {
                vocab: b,
                linear: b,
                expert: b,
            }
        }
    }
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
    // A layer's template depends on its kind, its attention and whether it runs in BF16 in a
    // quantized run (`training.bf16_layers_at_start` / `_at_end`).
    let mut classes: Vec<(LayerKind, AttentionType, bool)> = Vec::new();
    let mut layer_class = Vec::with_capacity(m.num_hidden_layers as usize);
    let mut layer_fwd = Vec::new();
    let mut layer_bwd = Vec::new();
    let mut layer_bwd_input = Vec::new();
    let mut layer_bwd_weight = Vec::new();
    for l in 0..m.num_hidden_layers {
        let key = (m.layer_kind(l), m.attention_type(l), t.layer_in_bf16(l, m.num_hidden_layers));
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
                let mut name = match key.1 {
                    AttentionType::SlidingAttention if key.0.has_attention() => format!("swa_{base}"),
                    _ => base.to_string(),
                };
                if key.2 {
                    name.insert_str(0, "bf16_");
                }
                let lo = ops::transformer_layer(b.m, b.t, b.p, l);
                layer_fwd.push(b.template(&format!("{name}.fwd"), &lo.forward)?);
                layer_bwd.push(b.template(&format!("{name}.bwd"), &lo.backward)?);
                if p.dualpipev_zero_bubble() {
                    let (weight, mut input): (Vec<OpSpec>, Vec<OpSpec>) = lo.backward.iter().cloned().partition(OpSpec::is_weight_gradient);
                    for o in &mut input {
                        // A collective that ran beside weight gradients no longer does.
                        if let OpSpecKind::Comm { beside, .. } = &mut o.kind {
                            *beside = 0;
                        }
                    }
                    layer_bwd_input.push(b.template(&format!("{name}.bwd_input"), &input)?);
                    layer_bwd_weight.push(b.template(&format!("{name}.bwd_weight"), &weight)?);
                }
                classes.push(key);
                classes.len() - 1
            }
        };
        layer_class.push(i);
    }
    let emb = ops::embedding(m, t, p);
    // The output head, then the MTP depths that share its output layer (none without MTP).
    let mut head = ops::head(m, t, p);
    let mtp = ops::mtp(m, t, p);
    head.forward.extend(mtp.forward);
    head.backward = mtp.backward.into_iter().chain(head.backward).collect();
    let tpl = Templates {
        layer_fwd,
        layer_bwd,
        layer_bwd_input,
        layer_bwd_weight,
        layer_class,
        emb_fwd: b.template("embedding.fwd", &emb.forward)?,
        emb_bwd: b.template("embedding.bwd", &emb.backward)?,
        head_fwd: b.template("head.fwd", &head.forward)?,
        head_bwd: b.template("head.bwd", &head.backward)?,
        offload: (0..t.cpu_offload_layers.min(m.num_hidden_layers))
            .map(|l| b.offload_copies(l))
            .collect(),
    };
    let mb = p.micro_batches(t);
    let interleaved = p.schedule == PipelineSchedule::Interleaved && p.vpp > 1;
    let vpp = p.chunks_per_stage();
    let mut stages = Vec::with_capacity(p.pp as usize);
    for s in 0..p.pp {
        let opt_ops = ops::stage_optimizer_step(m, t, p, s);
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

/// The data-parallel buckets of one stage, filled in backward order over its chunks (last chunk
/// first, last layer first).
struct Buckets {
    buckets: Vec<Bucket>,
    /// Bucket closed by an item: the bucket's last item in backward order, its first in forward.
    closes: HashMap<(u64, BucketItem), usize>,
    /// Bucket opened by an item: its first item in backward order, its last in forward.
    opens: HashMap<(u64, BucketItem), usize>,
    item_bucket: HashMap<(u64, BucketItem), usize>,
    /// Each chunk's buckets in backward order (FSDP only: its buckets never span chunks).
    chunk_buckets: Vec<Vec<usize>>,
}

/// What a data-parallel bucket holds the gradients of: a layer, the output head (with its
/// final norm) or the embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum BucketItem {
    Head,
    Layer(u64),
    Embedding,
}

/// Builds stage `s`'s buckets. With `per_chunk` a bucket closes at every chunk's end, as the
/// FSDP units of one model chunk do (Megatron wraps each chunk separately); without it, buckets
/// run across chunks (the generator's DDP model, unchanged).
fn stage_buckets(mc: &ModelConfig, p: &ParallelConfig, s: u64, vpp: u64, per_chunk: bool) -> Buckets {
    let first_virtual = |c: u64| s == 0 && c == 0;
    let last_virtual = |c: u64| p.holds_head(s, c);
    // A tied embedding has a copy on the head's stage, unless that is stage 0 (DualPipeV).
    let tied_copy = mc.tie_word_embeddings && p.head_stage() != 0;
    let emb_params = ops::padded_vocab(mc, p.tp) * mc.hidden_size / p.tp;
    let bucket_cap = if p.grad_bucket_size > 0 {
        p.grad_bucket_size
    } else {
        default_bucket_params(p.dp)
    };
    let mut order: Vec<(u64, BucketItem)> = Vec::new();
    for c in (0..vpp).rev() {
        if last_virtual(c) {
            order.push((c, BucketItem::Head));
        }
        for l in chunk_layers(mc, p, s, c).rev() {
            order.push((c, BucketItem::Layer(l)));
        }
        if first_virtual(c) {
            order.push((c, BucketItem::Embedding));
        }
    }
    // MTP on the head's stage: its blocks, and an untied model's embedding copy there.
    let mtp = ops::mtp_params(mc, p);
    let mtp_emb = if ops::mtp_embedding_copy(mc, p) { emb_params } else { 0 };
    // (dense, expert, the vocabulary-sized part of dense).
    let params_of = |item: BucketItem| -> (u64, u64, u64) {
        match item {
            BucketItem::Head => {
                let vocab = if tied_copy || !mc.tie_word_embeddings { emb_params } else { 0 } + mtp_emb;
                (vocab + mc.hidden_size + mtp.dense, mtp.expert, vocab + mc.hidden_size)
            }
            BucketItem::Embedding => (emb_params, 0, emb_params),
            BucketItem::Layer(l) => {
                let lp = ops::layer_params(mc, p, l);
                (lp.dense, lp.expert, 0)
            }
        }
    };
    let mut out = Buckets {
        buckets: Vec::new(),
        closes: HashMap::new(),
        opens: HashMap::new(),
        item_bucket: HashMap::new(),
        chunk_buckets: vec![Vec::new(); vpp as usize],
    };
    let mut cur = Bucket {
        dense: 0,
        expert: 0,
        vocab: 0,
    };
    let mut open = false;
    for (i, &(c, it)) in order.iter().enumerate() {
        if !open {
            out.opens.insert((c, it), out.buckets.len());
            open = true;
        }
        let (d, e, v) = params_of(it);
        cur.dense += d;
        cur.expert += e;
        cur.vocab += v;
        out.item_bucket.insert((c, it), out.buckets.len());
        let chunk_end = per_chunk && order.get(i + 1).is_none_or(|n| n.0 != c);
        if cur.dense + cur.expert >= bucket_cap || i + 1 == order.len() || chunk_end {
            out.closes.insert((c, it), out.buckets.len());
            out.chunk_buckets[c as usize].push(out.buckets.len());
            out.buckets.push(std::mem::replace(
                &mut cur,
                Bucket {
                    dense: 0,
                    expert: 0,
                    vocab: 0,
                },
            ));
            open = false;
        }
    }
    out
}

/// Parameters of the largest FSDP unit (bucket) of stage `stage` on one rank, dense plus
/// expert: what one gathered unit holds. `p` must be resolved.
pub fn fsdp_unit_params(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> u64 {
    let vpp = p.chunks_per_stage();
    stage_buckets(m, p, stage, vpp, true)
        .buckets
        .iter()
        .map(|b| b.dense + b.expert)
        .max()
        .unwrap_or(0)
}

/// What one iteration hands the next: the optimizer step's last node and, without
/// `overlap_param_gather`, the distributed optimizer's parameter all-gathers after it.
#[derive(Default)]
struct Carry {
    opt_end: Option<u32>,
    gathers: Vec<u32>,
}

/// One computation of an FSDP unit (a bucket) in program order.
struct UnitPass {
    bucket: usize,
    /// All-gather its parameters first.
    gather: bool,
    /// Reduce-scatter its gradients after (backward only).
    scatter: bool,
}

/// ZeRO-3 / FSDP parameter gathers, issued on the DP stream one unit ahead of compute: the
/// gather of unit computation `j + 1` is issued when computation `j` starts (i.e. when `j - 1`
/// ended), so at most two units are gathered at once, as PyTorch FSDP's forward/backward
/// prefetch with `limit_all_gathers` keeps it.
struct Fsdp {
    passes: Vec<UnitPass>,
    gather_node: Vec<Option<u32>>,
    /// Last compute node of each finished unit computation.
    ends: Vec<u32>,
    next: usize,
    gathered_to: usize,
}

impl Fsdp {
    /// Starts the next unit computation: issues the gathers through the one after it; returns
    /// the gather this one waits for.
    fn begin(&mut self, prog: &mut Program, buckets: &[Bucket], dp_base: Node, param_w: Width, opt_end: Option<u32>) -> Option<u32> {
        let j = self.next;
        self.next += 1;
        let upto = (j + 2).min(self.passes.len());
        for i in self.gathered_to..upto {
            if self.passes[i].gather {
                let dep: Vec<u32> = if i >= 2 {
                    vec![self.ends[i - 2]]
                } else {
                    opt_end.into_iter().collect()
                };
                let bk = &buckets[self.passes[i].bucket];
                self.gather_node[i] = Some(push_bucket_colls(prog, dp_base, bk, CollectiveOp::AllGather, param_w, &dep));
            }
        }
        self.gathered_to = self.gathered_to.max(upto);
        self.gather_node[j]
    }

    /// The bucket (unit) of the computation [`Fsdp::begin`] started last.
    fn current_bucket(&self) -> usize {
        self.passes[self.next - 1].bucket
    }

    /// Ends the current unit computation at `last`; returns its pass.
    fn end(&mut self, last: u32) -> &UnitPass {
        self.ends.push(last);
        &self.passes[self.ends.len() - 1]
    }
}

fn stage_program(b: &mut Builder<'_>, tpl: &Templates, opt: &[Item], s: u64, m: u64, vpp: u64, interleaved: bool) -> Program {
    let mut prog = Program::new();
    let iterations = b.t.iterations.max(1);
    let mut carry = Carry::default();
    for _ in 0..iterations {
        if iterations > 1 {
            prog.iteration_starts.push(prog.len() as u32);
        }
        carry = stage_iteration(b, tpl, opt, s, m, vpp, interleaved, &mut prog, &carry);
    }
    prog
}

/// Appends one iteration of stage `s` to `prog`. Iteration 2+ waits for the previous one's
/// parameters: its prefetched gathers (`overlap_param_gather`), FSDP gathers or first node
/// depend on the previous optimizer step and its parameter all-gathers.
#[allow(clippy::too_many_arguments)]
fn stage_iteration(
    b: &mut Builder<'_>,
    tpl: &Templates,
    opt: &[Item],
    s: u64,
    m: u64,
    vpp: u64,
    interleaved: bool,
    prog: &mut Program,
    carry: &Carry,
) -> Carry {
    let (mc, t, p) = (b.m, b.t, b.p);
    let pp = p.pp;
    let act_bytes = {
        // Megatron sends b x s x h activations per micro-batch; with sequence parallelism each
        // tp rank sends its 1/tp slice (scatter-gather optimization), and CP splits the sequence.
        // In `pipeline_dtype`, which Megatron sets to `params_dtype` (`training.py`,
        // `core_transformer_config_from_args`): 16 bits under FP8 and FP4 training too, whose
        // low-precision tensors live inside the GEMMs only.
        let full = t.micro_batch_size * t.seq_length / p.cp.max(1) * mc.hidden_size * t.activation_bytes();
        if p.sequence_parallel && p.tp > 1 { full / p.tp } else { full }
    };
    // Where pipeline sends run: beside the computation, or on the compute stream, which then
    // waits for each one to be delivered.
    let send_stream = if p.pp_sends_block(interleaved) {
        Stream::Compute
    } else {
        Stream::PpSend
    };
    // A pipeline send after `deps`: this stage's output forward to the next stage, or its input
    // gradient backward to the previous one; `chunk` is the receiver's.
    let send = |prog: &mut Program, at: Node, dir: Direction, peer: Peer, mb: u64, chunk: u64, deps: &[u32]| {
        push_p2p(prog, at, Some(send_stream), peer, dir, mb, chunk, act_bytes, deps)
    };
    let dist_opt = p.use_distributed_optimizer || p.zero_stage >= 1;
    // The DDP gradient reduction: a reduce-scatter into the distributed optimizer's shards, else an
    // all-reduce.
    let grad_op = if dist_opt {
        CollectiveOp::ReduceScatter
    } else {
        CollectiveOp::AllReduce
    };
    let fsdp = p.fsdp();
    let grad_b = t.grad_dtype().bytes();
    let param_w = Width::params(t);
    let base = |phase: Phase, mb: u64, chunk: u64, layer: u64| Node {
        kind: DagNodeKind::Comp { segment: 0 },
        stream: Stream::Compute,
        phase,
        microbatch: mb as u32,
        chunk: chunk as u32,
        layer: layer as u32,
    };
    let first_virtual = |c: u64| s == 0 && c == 0;
    let last_virtual = |c: u64| p.holds_head(s, c);
    // A tied embedding has a copy on the head's stage, unless that is stage 0 (DualPipeV).
    let tied_copy = mc.tie_word_embeddings && p.head_stage() != 0;
    let emb_params = ops::padded_vocab(mc, p.tp) * mc.hidden_size / p.tp;
    // Where a chunk's activations come from and go, and its gradients (the peer, and for a send
    // the receiver's chunk); `None` at the embedding and the head, and at DualPipeV's turn on the
    // last rank, where chunk 0 hands over to chunk 1 on the same GPU (the compute stream's order
    // carries it). Megatron's interleaving wraps from the last stage's chunk c to stage 0's c + 1.
    let v_shape = p.dual_pipe_v();
    let turn = |c: u64, at_chunk: u64| v_shape && s == pp - 1 && c == at_chunk;
    // Upstream: where a chunk's activations come from and its gradients go; downstream: the
    // other way.
    let upstream = |c: u64| -> Option<Peer> {
        if first_virtual(c) || turn(c, 1) {
            None
        } else if v_shape && c == 1 {
            Some(Peer::Next)
        } else {
            Some(Peer::Prev)
        }
    };
    let downstream = |c: u64| -> Option<Peer> {
        if last_virtual(c) || turn(c, 0) {
            None
        } else if v_shape && c == 1 {
            Some(Peer::Prev)
        } else {
            Some(Peer::Next)
        }
    };
    // The receiver's chunk of a send from chunk `c` to `peer`.
    let their_chunk = |c: u64, peer: Peer| match peer {
        Peer::Next if !v_shape && s == pp - 1 => c + 1,
        Peer::Prev if !v_shape && s == 0 => c - 1,
        _ => c,
    };
    let fwd_src = upstream;
    let bwd_src = downstream;
    let fwd_dst = |c: u64| downstream(c).map(|peer| (peer, their_chunk(c, peer)));
    let bwd_dst = |c: u64| upstream(c).map(|peer| (peer, their_chunk(c, peer)));

    let Buckets {
        buckets,
        closes,
        opens,
        item_bucket,
        chunk_buckets,
    } = stage_buckets(mc, p, s, vpp, fsdp);
    let dp_base = Node {
        stream: Stream::Dp,
        ..base(Phase::GradSync, NONE as u64, 0, NONE as u64)
    };
    let sched = stage_schedule(p, s, m);
    // FSDP: every unit computation of the iteration, in program order. With reshard after
    // forward, each micro-batch gathers a unit before its forward and its backward and
    // reduce-scatters its gradients after the backward (Megatron-FSDP reduce-scatters every
    // micro-batch in its gradient-sharding modes, `no_sync` or not; PyTorch FSDP `FULL_SHARD`
    // without `no_sync`). Without, the first forward of the step gathers and the last backward
    // reduce-scatters (TorchTitan's pipeline schedules skip gradient sync and resharding for the
    // other micro-batches), unless `fsdp_sync_every_microbatch`: then every backward
    // reduce-scatters and frees the unit, and whichever computation of it comes next gathers it
    // again (FSDP2's defaults, `reshard_after_backward` and `requires_gradient_sync`).
    let mut fs = Fsdp {
        passes: Vec::new(),
        gather_node: Vec::new(),
        ends: Vec::new(),
        next: 0,
        gathered_to: 0,
    };
    if fsdp {
        let reshard = p.reshard_after_forward;
        let every = reshard || p.fsdp_sync_every_microbatch;
        // Whether each unit (bucket) holds its gathered parameters now.
        let mut held = vec![false; buckets.len()];
        for &ScheduleStep {
            dir,
            microbatch: mb,
            chunk: c,
            ..
        } in &sched
        {
            let bks = &chunk_buckets[c as usize];
            if dir == Direction::Forward {
                for &bi in bks.iter().rev() {
                    fs.passes.push(UnitPass {
                        bucket: bi,
                        gather: !held[bi],
                        scatter: false,
                    });
                    held[bi] = !reshard;
                }
            } else {
                for &bi in bks {
                    let scatter = every || mb == m - 1;
                    fs.passes.push(UnitPass {
                        bucket: bi,
                        gather: !held[bi],
                        scatter,
                    });
                    held[bi] = !scatter;
                }
            }
        }
        fs.gather_node = vec![None; fs.passes.len()];
    }
    // Parameter all-gathers prefetched at the start (distributed optimizer + overlap_param_gather),
    // in forward order.
    let mut gather_node: Vec<Option<u32>> = vec![None; buckets.len()];
    let prefetch = dist_opt && !fsdp && p.overlap_param_gather && p.dp > 1;
    if prefetch {
        let dep: Vec<u32> = carry.opt_end.into_iter().collect();
        for bi in (0..buckets.len()).rev() {
            let bk = &buckets[bi];
            gather_node[bi] = Some(push_bucket_colls(prog, dp_base, bk, CollectiveOp::AllGather, param_w, &dep));
        }
    }
    // Without the prefetch, the previous step's parameter all-gathers finish before this one.
    let mut entry_deps: Vec<u32> = carry.gathers.clone();
    let mut gathered: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut reduce_nodes: Vec<u32> = Vec::new();
    let mut pending_buckets: Vec<usize> = Vec::new();
    let mut last_compute: Option<u32> = None;
    // Activation CPU offloading (pp = 1): the copy nodes of the micro-batch in flight.
    let n_off = tpl.offload.len() as u64;
    let n_layers = mc.num_hidden_layers;
    let mut d2h: Vec<u32> = vec![NONE; n_off as usize];
    let mut h2d: Vec<u32> = vec![NONE; n_off as usize];

    // What the compute stream runs over each DDP bucket's gradients before its collective (the
    // NaN check and the scaling, `ops::grad_bucket_passes`): a segment shared by buckets of one
    // size, or none.
    let gw = Width::grads(t);
    let bucket_pass: Vec<Option<u32>> = if fsdp {
        Vec::new()
    } else {
        buckets
            .iter()
            .map(|bk| {
                let (dense, expert) = gw.bucket_bytes(bk);
                let ops = ops::grad_bucket_passes((bk.dense, dense), (bk.expert, expert), p);
                (!ops.is_empty()).then(|| b.intern(format!("grad_sync.{}.{}", bk.dense, bk.expert), ops))
            })
            .collect()
    };
    // FSDP2: each unshard's copy-out of the gathered parameters on the compute stream, per
    // bucket (unit): read and write of the unit's gathered parameters, a segment per pass.
    let copy_out: Vec<[u32; 2]> = if fsdp && p.fsdp_impl == FsdpImpl::Fsdp2 {
        buckets
            .iter()
            .map(|bk| {
                let (dense, expert) = param_w.bucket_bytes(bk);
                let bytes = dense + expert;
                let shape = format!("params={}", bk.dense + bk.expert);
                [(Pass::Forward, "fwd"), (Pass::BackwardInput, "bwd")].map(|(pass, tag)| {
                    let op = ops::compute("fsdp_copy_out", pass, OpClass::Elementwise, 0.0, 2.0 * bytes as f64, &shape);
                    b.intern(format!("fsdp_copy_out.{tag}.{}.{}", bk.dense, bk.expert), vec![op])
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    // What a unit's computation waits for after `fs.begin` returned its gather `g`: the gather,
    // or (FSDP2) the copy-out after it.
    let unshard = |prog: &mut Program, g: Option<u32>, bi: usize, at: Node, backward: bool| -> Option<u32> {
        let (g, segs) = (g?, copy_out.get(bi));
        Some(match segs {
            Some(seg) => prog.push(
                Node {
                    kind: DagNodeKind::Comp {
                        segment: seg[backward as usize],
                    },
                    stream: Stream::Compute,
                    ..at
                },
                &[g],
            ),
            None => g,
        })
    };
    // The DDP gradient reduction of bucket `bi`, after `after`: the bucket's passes on the compute
    // stream, then its collectives.
    let issue_reduce = |prog: &mut Program, bi: usize, after: &[u32]| {
        let pass = bucket_pass.get(bi).copied().flatten().map(|seg| {
            let node = Node {
                kind: DagNodeKind::Comp { segment: seg },
                ..base(Phase::Backward, m - 1, 0, NONE as u64)
            };
            prog.push(node, after)
        });
        match pass {
            Some(n) => push_bucket_colls(prog, dp_base, &buckets[bi], grad_op, gw, &[n]),
            None => push_bucket_colls(prog, dp_base, &buckets[bi], grad_op, gw, after),
        }
    };
    // The reduction of bucket `bi` after the last micro-batch's backward of it: issued at once
    // with `overlap_grad_reduce`, else left for after the whole backward.
    let ddp_reduce = |prog: &mut Program, bi: usize, after: &[u32], reduce_nodes: &mut Vec<u32>, pending: &mut Vec<usize>| {
        if p.overlap_grad_reduce {
            reduce_nodes.push(issue_reduce(prog, bi, after));
        } else {
            pending.push(bi);
        }
    };
    // Megatron's interleaved schedule without `overlap_p2p_comm` runs each steady-state forward
    // and the backward after it, then exchanges in one batch (`schedules.py`
    // `forward_backward_pipelining_with_interleaving`: `forward_step`, `backward_step`, then
    // `send_forward_backward_recv_forward_backward`): the forward's send waits for the backward,
    // and the backward's receive is posted with the forward's.
    let paired = interleaved && vpp > 1 && send_stream == Stream::Compute && p.pp_impl == PpImpl::Megatron;
    // The forward's send held back for the backward of its pair, and whether that backward's
    // receive was posted already.
    let mut deferred_send: Option<(Node, Peer, u64, u64, Vec<u32>)> = None;
    let mut b_recv_posted = false;
    let mut steps = sched.into_iter().peekable();
    while let Some(ScheduleStep {
        dir,
        microbatch: mb,
        chunk: c,
        merged,
        steady,
        defer_w,
        weight,
    }) = steps.next()
    {
        if weight {
            // DualPipeV's zero bubble: the deferred weight gradients of (mb, c)'s layers, each
            // layer's DDP bucket closing after them in the last micro-batch.
            for l in chunk_layers(mc, p, s, c).rev() {
                let items = &tpl.layer_bwd_weight[tpl.layer_class[l as usize]];
                let deps = std::mem::take(&mut entry_deps);
                last_compute = emit(prog, items, base(Phase::Backward, mb, c, l), &deps).or(last_compute);
                if mb == m - 1
                    && let Some(&bi) = closes.get(&(c, BucketItem::Layer(l)))
                {
                    let after: Vec<u32> = last_compute.into_iter().collect();
                    ddp_reduce(prog, bi, &after, &mut reduce_nodes, &mut pending_buckets);
                }
            }
            continue;
        }
        if merged {
            // Combined 1F1B (`parallel.moe_a2a_overlap`; no FSDP, no offloading): this forward
            // and the backward after it run as one step.
            let Some(ScheduleStep {
                microbatch: bm, chunk: bc, ..
            }) = steps.next()
            else {
                break;
            };
            let (fm, fc) = (mb, c);
            // Both passes' receives first (the forward's input, the backward's gradient).
            let mut fdeps: Vec<u32> = std::mem::take(&mut entry_deps);
            if let Some(peer) = fwd_src(fc) {
                let at = base(Phase::Forward, fm, fc, NONE as u64);
                push_p2p(prog, at, None, peer, Direction::Forward, fm, fc, act_bytes, &fdeps);
                fdeps.clear();
            }
            if let Some(peer) = bwd_src(bc) {
                let at = base(Phase::Backward, bm, bc, NONE as u64);
                push_p2p(prog, at, None, peer, Direction::Backward, bm, bc, act_bytes, &[]);
            }
            // A backward item's bucket: the DDP gradient reduction of the last micro-batch.
            let mut close = |prog: &mut Program, item: BucketItem, after: Option<u32>| {
                let Some(&bi) = closes.get(&(bc, item)) else { return };
                if bm == m - 1 {
                    let after: Vec<u32> = after.into_iter().collect();
                    ddp_reduce(prog, bi, &after, &mut reduce_nodes, &mut pending_buckets);
                }
            };
            let mut flast: Option<u32> = None;
            let mut blast: Option<u32> = None;
            if last_virtual(bc) {
                blast = emit(prog, &tpl.head_bwd, base(Phase::Backward, bm, bc, NONE as u64), &[]);
                close(prog, BucketItem::Head, blast);
            }
            if first_virtual(fc) {
                if prefetch
                    && let Some(&bi) = item_bucket.get(&(fc, BucketItem::Embedding))
                    && gathered.insert(bi)
                {
                    fdeps.extend(gather_node[bi]);
                }
                flast = emit(prog, &tpl.emb_fwd, base(Phase::Forward, fm, fc, NONE as u64), &fdeps).or(flast);
                fdeps.clear();
            }
            let f_layers: Vec<u64> = chunk_layers(mc, p, s, fc).collect();
            let b_layers: Vec<u64> = chunk_layers(mc, p, s, bc).rev().collect();
            let mut wait: [Vec<u32>; 2] = [fdeps, Vec::new()];
            for k in 0..f_layers.len().max(b_layers.len()) {
                let fl = f_layers.get(k).copied();
                let bl = b_layers.get(k).copied();
                if let Some(l) = fl
                    && prefetch
                    && let Some(&bi) = item_bucket.get(&(fc, BucketItem::Layer(l)))
                    && gathered.insert(bi)
                {
                    wait[0].extend(gather_node[bi]);
                }
                let none: &[Item] = &[];
                let f_items = fl.map_or(none, |l| &tpl.layer_fwd[tpl.layer_class[l as usize]]);
                let b_items = bl.map_or(none, |l| &tpl.layer_bwd[tpl.layer_class[l as usize]]);
                let fb = base(Phase::Forward, fm, fc, fl.unwrap_or(NONE as u64));
                let bb = base(Phase::Backward, bm, bc, bl.unwrap_or(NONE as u64));
                let send_first = k + 1 == f_layers.len();
                let [f_end, b_end] = emit_merged(prog, (f_items, fb), (b_items, bb), &mut wait, send_first);
                flast = f_end.or(flast);
                blast = b_end.or(blast);
                if let Some(l) = bl {
                    close(prog, BucketItem::Layer(l), blast);
                }
            }
            let [fwait, bwait] = wait;
            if last_virtual(fc) {
                flast = emit(prog, &tpl.head_fwd, base(Phase::Forward, fm, fc, NONE as u64), &fwait).or(flast);
            } else if let Some((peer, recv_chunk)) = fwd_dst(fc) {
                let mut dep: Vec<u32> = flast.into_iter().collect();
                dep.extend(fwait);
                let at = base(Phase::Forward, fm, fc, NONE as u64);
                send(prog, at, Direction::Forward, peer, fm, recv_chunk, &dep);
            } else {
                // DualPipeV's turn: the next chunk's compute waits for what this one left open.
                entry_deps.extend(fwait);
            }
            if first_virtual(bc) {
                blast = emit(prog, &tpl.emb_bwd, base(Phase::Backward, bm, bc, NONE as u64), &bwait).or(blast);
                close(prog, BucketItem::Embedding, blast);
            } else if let Some((peer, recv_chunk)) = bwd_dst(bc) {
                let mut dep: Vec<u32> = blast.into_iter().collect();
                dep.extend(bwait);
                let at = base(Phase::Backward, bm, bc, NONE as u64);
                send(prog, at, Direction::Backward, peer, bm, recv_chunk, &dep);
            } else {
                entry_deps.extend(bwait);
            }
            // The compute stream's last node, for what follows the step.
            last_compute = flast.max(blast).or(last_compute);
            continue;
        }
        if dir == Direction::Forward {
            let mut deps: Vec<u32> = std::mem::take(&mut entry_deps);
            if let Some(peer) = fwd_src(c) {
                let at = base(Phase::Forward, mb, c, NONE as u64);
                push_p2p(prog, at, None, peer, Direction::Forward, mb, c, act_bytes, &deps);
                deps.clear();
            }
            // A steady-state pair: the backward's receive joins this batch.
            let pair = match steps.peek() {
                Some(next) if paired && steady && next.dir == Direction::Backward => Some((next.microbatch, next.chunk)),
                _ => None,
            };
            if let Some((bm, bc)) = pair
                && let Some(peer) = bwd_src(bc)
            {
                let at = base(Phase::Backward, bm, bc, NONE as u64);
                push_p2p(prog, at, None, peer, Direction::Backward, bm, bc, act_bytes, &[]);
                b_recv_posted = true;
            }
            // Forward of one item; FSDP gathers at a unit's first item (in forward order).
            let mut fwd_item = |prog: &mut Program, deps: &mut Vec<u32>, item: BucketItem, items: &[Item], layer: u64| {
                if fsdp && closes.contains_key(&(c, item)) {
                    let g = fs.begin(prog, &buckets, dp_base, param_w, carry.opt_end);
                    deps.extend(unshard(prog, g, fs.current_bucket(), base(Phase::Forward, mb, c, layer), false));
                }
                // Offloading: layer L - N + i starts after layer i's copy to the host finished.
                if let Some(i) = (layer + n_off).checked_sub(n_layers)
                    && let Some(&d) = d2h.get(i as usize)
                    && d != NONE
                {
                    deps.push(d);
                }
                last_compute = emit(prog, items, base(Phase::Forward, mb, c, layer), deps).or(last_compute);
                deps.clear();
                // ... and an offloaded layer's activations leave once its forward is done.
                if let Some(&(seg, _)) = tpl.offload.get(layer as usize) {
                    let after: Vec<u32> = last_compute.into_iter().collect();
                    let node = Node {
                        kind: DagNodeKind::Comp { segment: seg },
                        stream: Stream::Offload,
                        ..base(Phase::Forward, mb, c, layer)
                    };
                    d2h[layer as usize] = prog.push(node, &after);
                }
                if fsdp && opens.contains_key(&(c, item)) {
                    fs.end(last_compute.expect("a unit computes"));
                }
            };
            if first_virtual(c) {
                if prefetch
                    && let Some(&bi) = item_bucket.get(&(c, BucketItem::Embedding))
                    && gathered.insert(bi)
                {
                    deps.extend(gather_node[bi]);
                }
                fwd_item(prog, &mut deps, BucketItem::Embedding, &tpl.emb_fwd, NONE as u64);
            }
            for l in chunk_layers(mc, p, s, c) {
                if prefetch
                    && let Some(&bi) = item_bucket.get(&(c, BucketItem::Layer(l)))
                    && gathered.insert(bi)
                {
                    deps.extend(gather_node[bi]);
                }
                let items = &tpl.layer_fwd[tpl.layer_class[l as usize]];
                fwd_item(prog, &mut deps, BucketItem::Layer(l), items, l);
            }
            if last_virtual(c) {
                fwd_item(prog, &mut deps, BucketItem::Head, &tpl.head_fwd, NONE as u64);
            } else if let Some((peer, recv_chunk)) = fwd_dst(c) {
                let dep: Vec<u32> = last_compute.into_iter().collect();
                let at = base(Phase::Forward, mb, c, NONE as u64);
                if pair.is_some() {
                    deferred_send = Some((at, peer, mb, recv_chunk, dep));
                } else {
                    send(prog, at, Direction::Forward, peer, mb, recv_chunk, &dep);
                }
            }
        } else {
            let last_mb = mb == m - 1;
            if let Some(peer) = bwd_src(c)
                && !std::mem::take(&mut b_recv_posted)
            {
                let at = base(Phase::Backward, mb, c, NONE as u64);
                push_p2p(prog, at, None, peer, Direction::Backward, mb, c, act_bytes, &[]);
            }
            let scattered = reduce_nodes.len();
            // Backward of one item, then its bucket's gradient reduction: FSDP's reduce-scatter
            // after the unit's last item, or the DDP bucket's in the last micro-batch.
            let mut bwd_item = |prog: &mut Program, item: BucketItem, items: &[Item], layer: u64, close: bool| {
                // Offloading: the backward step of layer L - 1 - N + i starts layer i's reload,
                // and layer i's backward waits for it.
                if let Some(i) = (layer + n_off + 1).checked_sub(n_layers)
                    && let Some(&(_, seg)) = tpl.offload.get(i as usize)
                {
                    let after: Vec<u32> = last_compute.into_iter().collect();
                    let node = Node {
                        kind: DagNodeKind::Comp { segment: seg },
                        stream: Stream::Offload,
                        ..base(Phase::Backward, mb, c, i)
                    };
                    h2d[i as usize] = prog.push(node, &after);
                }
                let mut deps: Vec<u32> = h2d.get(layer as usize).copied().filter(|&h| h != NONE).into_iter().collect();
                deps.append(&mut entry_deps);
                if fsdp && opens.contains_key(&(c, item)) {
                    let g = fs.begin(prog, &buckets, dp_base, param_w, carry.opt_end);
                    deps.extend(unshard(prog, g, fs.current_bucket(), base(Phase::Backward, mb, c, layer), true));
                }
                last_compute = emit(prog, items, base(Phase::Backward, mb, c, layer), &deps).or(last_compute);
                if !close {
                    return;
                }
                let Some(&bi) = closes.get(&(c, item)) else { return };
                let after: Vec<u32> = last_compute.into_iter().collect();
                if fsdp {
                    if fs.end(last_compute.expect("a unit computes")).scatter {
                        let rs = push_bucket_colls(prog, dp_base, &buckets[bi], CollectiveOp::ReduceScatter, Width::grads(t), &after);
                        reduce_nodes.push(rs);
                    }
                } else if last_mb {
                    ddp_reduce(prog, bi, &after, &mut reduce_nodes, &mut pending_buckets);
                }
            };
            if last_virtual(c) {
                bwd_item(prog, BucketItem::Head, &tpl.head_bwd, NONE as u64, true);
            }
            for l in chunk_layers(mc, p, s, c).rev() {
                // A zero-bubble backward leaves its layers' weight gradients (and their buckets'
                // reduction) to its later `weight` step.
                let items = if defer_w {
                    &tpl.layer_bwd_input[tpl.layer_class[l as usize]]
                } else {
                    &tpl.layer_bwd[tpl.layer_class[l as usize]]
                };
                bwd_item(prog, BucketItem::Layer(l), items, l, !defer_w);
            }
            if first_virtual(c) {
                bwd_item(prog, BucketItem::Embedding, &tpl.emb_bwd, NONE as u64, true);
            }
            // FSDP2's root post-backward callback: the compute stream waits for the step's last
            // reduce-scatter before anything after this backward runs.
            if fsdp && p.fsdp_sync_every_microbatch && reduce_nodes.len() > scattered {
                entry_deps.extend(reduce_nodes.last().copied());
            }
            // The pair's forward send, then the backward's (one batch).
            if let Some((at, peer, fm, chunk, dep)) = deferred_send.take() {
                send(prog, at, Direction::Forward, peer, fm, chunk, &dep);
            }
            if let Some((peer, recv_chunk)) = bwd_dst(c) {
                // The gradient's send is issued after the backward returns, behind that wait.
                let dep: Vec<u32> = last_compute.into_iter().chain(entry_deps.iter().copied()).collect();
                let at = base(Phase::Backward, mb, c, NONE as u64);
                send(prog, at, Direction::Backward, peer, mb, recv_chunk, &dep);
            }
        }
    }
    // Reductions not overlapped: all after the backward.
    for bi in pending_buckets {
        let dep: Vec<u32> = last_compute.into_iter().collect();
        reduce_nodes.push(issue_reduce(prog, bi, &dep));
    }
    // Tied embedding, or MTP's embedding copy on the head's stage: first and last stage
    // all-reduce the embedding gradient (Megatron-Core `finalize_model_grads.py`
    // `_allreduce_word_embedding_grads`: shared embeddings or `mtp_num_layers`).
    let emb_copy = tied_copy || ops::mtp_embedding_copy(mc, p);
    if emb_copy && (s == 0 || s == p.head_stage()) {
        let dep: Vec<u32> = last_compute.into_iter().collect();
        reduce_nodes.push(prog.push(
            Node {
                kind: DagNodeKind::CommColl {
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
    let last_opt = emit(prog, opt, opt_base, &deps);
    let mut gathers = Vec::new();
    // The distributed optimizer's parameter all-gathers, or Muon's layer-wise ones
    // (`LayerWiseDistributedOptimizer.allgather_params`, synchronous after the step), in bucket
    // order.
    let layer_wise = t.optimizer == crate::OptimizerKind::DistMuon;
    if (dist_opt || layer_wise) && !fsdp && !prefetch && p.dp > 1 {
        let dep: Vec<u32> = last_opt.into_iter().collect();
        for bk in buckets.iter().rev() {
            gathers.push(push_bucket_colls(prog, dp_base, bk, CollectiveOp::AllGather, param_w, &dep));
        }
    }
    Carry {
        opt_end: last_opt.or(last_compute),
        gathers,
    }
}

/// Pushes the collectives of one bucket (dense part over Dp, expert part over ExpertDp);
/// returns the last node.
fn push_bucket_colls(prog: &mut Program, base: Node, bk: &Bucket, op: CollectiveOp, w: Width, deps: &[u32]) -> u32 {
    let (dense_bytes, expert_bytes) = w.bucket_bytes(bk);
    let mut last = None;
    if bk.dense > 0 || bk.expert == 0 {
        last = Some(prog.push(
            Node {
                kind: DagNodeKind::CommColl {
                    op,
                    group: Group::Dp,
                    bytes: dense_bytes,
                },
                ..base
            },
            deps,
        ));
    }
    if bk.expert > 0 {
        last = Some(prog.push(
            Node {
                kind: DagNodeKind::CommColl {
                    op,
                    group: Group::ExpertDp,
                    bytes: expert_bytes,
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
            .map(|x| {
                if x.is_forward() {
                    format!("F{}", x.microbatch)
                } else {
                    format!("B{}", x.microbatch)
                }
            })
            .collect();
        assert_eq!(f.join(" "), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
        // Last stage: no warm-up.
        let s = schedule(3, 4, 3, 1, false);
        let f: Vec<_> = s
            .iter()
            .map(|x| {
                if x.is_forward() {
                    format!("F{}", x.microbatch)
                } else {
                    format!("B{}", x.microbatch)
                }
            })
            .collect();
        assert_eq!(f.join(" "), "F0 B0 F1 B1 F2 B2");
    }

    #[test]
    fn interleaved_covers_every_microbatch_chunk_once() {
        for stage in 0..4 {
            let s = schedule(stage, 4, 8, 2, true);
            assert_eq!(s.len(), 2 * 8 * 2);
            let mut fwd: Vec<_> = s.iter().filter(|x| x.is_forward()).map(|x| (x.microbatch, x.chunk)).collect();
            let mut bwd: Vec<_> = s.iter().filter(|x| !x.is_forward()).map(|x| (x.microbatch, x.chunk)).collect();
            fwd.sort_unstable();
            bwd.sort_unstable();
            let all: Vec<_> = (0..8).flat_map(|m| (0..2).map(move |c| (m, c))).collect();
            assert_eq!(fwd, all);
            assert_eq!(bwd, all);
            // A backward never precedes its forward.
            for (i, x) in s.iter().enumerate().filter(|(_, x)| !x.is_forward()) {
                let f = s
                    .iter()
                    .position(|y| y.is_forward() && (y.microbatch, y.chunk) == (x.microbatch, x.chunk))
                    .unwrap();
                assert!(f < i);
            }
        }
    }

    #[test]
    fn pipeline_flushes_run_whole_schedules_back_to_back() {
        for (stage, pp, m, vpp, il, f) in [(0, 4, 16, 1, false, 4), (2, 4, 16, 2, true, 2), (0, 1, 6, 1, false, 3)] {
            let s = schedule_flushes(stage, pp, m, vpp, il, false, f);
            let per = m / f;
            let one = schedule(stage, pp, per, vpp, il);
            assert_eq!(s.len(), one.len() * f as usize);
            for (i, chunk) in s.chunks(one.len()).enumerate() {
                // Each flush is the one-schedule order over its own micro-batches.
                let shifted: Vec<ScheduleStep> = one
                    .iter()
                    .map(|x| ScheduleStep {
                        microbatch: x.microbatch + i as u64 * per,
                        ..*x
                    })
                    .collect();
                assert_eq!(chunk, &shifted[..]);
            }
        }
        // One flush is the plain schedule.
        assert_eq!(schedule_flushes(1, 4, 8, 2, true, false, 1), schedule(1, 4, 8, 2, true));
    }

    #[test]
    fn combined_1f1b_merges_each_steady_forward_with_the_next_backward() {
        // (stage, pp, micro-batches, vpp, interleaved): interleaved stages, and no pipelining.
        for (stage, pp, m, vpp, il) in [(0, 4, 8, 2, true), (3, 4, 8, 2, true), (1, 2, 6, 3, true), (0, 1, 5, 1, false)] {
            let plain = schedule(stage, pp, m, vpp, il);
            let merged = schedule_with(stage, pp, m, vpp, il, true);
            // The same passes, each once; the first warms up one more forward.
            assert_eq!(plain.len(), merged.len());
            let key = |x: &ScheduleStep| (x.dir == Direction::Forward, x.microbatch, x.chunk);
            let mut a: Vec<_> = plain.iter().map(key).collect();
            let mut b: Vec<_> = merged.iter().map(key).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
            let warm = |s: &[ScheduleStep]| s.iter().take_while(|x| x.is_forward()).count();
            assert_eq!(warm(&merged), (warm(&plain) + 1).min(plain.len() / 2), "stage {stage} pp {pp}");
            assert!(plain.iter().all(|x| !x.merged));
            // Every merged forward is followed by a backward of another micro-batch; every
            // forward between the warm-up and the last one is merged.
            let forwards = merged.iter().filter(|x| x.is_forward()).count();
            for (i, x) in merged.iter().enumerate().filter(|(_, x)| x.merged) {
                assert!(x.is_forward());
                let next = merged[i + 1];
                assert_eq!(next.dir, Direction::Backward);
                assert_ne!((next.microbatch, next.chunk), (x.microbatch, x.chunk));
            }
            // ... that is, each forward followed by a backward, unless every forward comes first.
            let fb = merged.windows(2).filter(|w| w[0].is_forward() && !w[1].is_forward()).count();
            let all_first = warm(&merged) == forwards;
            assert_eq!(merged.iter().filter(|x| x.merged).count(), fb - usize::from(all_first));
        }
    }

    /// Runs every rank's DualPipeV order with unit pass times (a forward 1, a backward 2, a
    /// merged pair 3; with zero bubble a deferring backward 1 and its weight step 1) and
    /// DualPipeV's data dependencies; returns the makespan, or `None` on a deadlock.
    fn dualpipev_makespan(pp: u64, m: u64, merged: bool, zb: bool) -> Option<u64> {
        use std::collections::HashMap;
        let scheds: Vec<Vec<ScheduleStep>> = (0..pp).map(|r| dualpipev_schedule(r, pp, m, merged, zb)).collect();
        // (dir is backward, chunk, micro-batch, rank) -> finish time of its input-gradient part
        let mut done: HashMap<(bool, u64, u64, u64), u64> = HashMap::new();
        let key = |x: &ScheduleStep, r: u64| (!x.is_forward(), x.chunk, x.microbatch, r);
        // What a pass needs: the same pass upstream, or the turn / the loss on this rank.
        let need = |x: &ScheduleStep, r: u64| -> Option<(bool, u64, u64, u64)> {
            let mb = x.microbatch;
            if x.weight {
                return None; // its backward ran earlier on this rank
            }
            match (x.is_forward(), x.chunk) {
                (true, 0) => (r > 0).then(|| (false, 0, mb, r - 1)),
                (true, _) => Some(if r + 1 < pp { (false, 1, mb, r + 1) } else { (false, 0, mb, r) }),
                (false, 1) => Some(if r > 0 { (true, 1, mb, r - 1) } else { (false, 1, mb, r) }),
                (false, _) => Some(if r + 1 < pp { (true, 0, mb, r + 1) } else { (true, 1, mb, r) }),
            }
        };
        let cost = |x: &ScheduleStep| -> u64 { if x.is_forward() || x.weight || x.defer_w { 1 } else { 2 } };
        let mut pos = vec![0usize; pp as usize];
        let mut clock = vec![0u64; pp as usize];
        loop {
            let mut moved = false;
            for r in 0..pp {
                let s = &scheds[r as usize];
                let i = pos[r as usize];
                if i >= s.len() {
                    continue;
                }
                let group: &[ScheduleStep] = if s[i].merged { &s[i..i + 2] } else { &s[i..i + 1] };
                let ready: Option<u64> = group.iter().try_fold(clock[r as usize], |t, x| match need(x, r) {
                    None => Some(t),
                    Some(k) => done.get(&k).map(|&f| t.max(f)),
                });
                let Some(start) = ready else { continue };
                let end = start + group.iter().map(cost).sum::<u64>();
                for x in group.iter().filter(|x| !x.weight) {
                    done.insert(key(x, r), end);
                }
                clock[r as usize] = end;
                pos[r as usize] += group.len();
                moved = true;
            }
            if pos.iter().zip(&scheds).all(|(p, s)| *p >= s.len()) {
                return clock.into_iter().max();
            }
            if !moved {
                return None;
            }
        }
    }

    #[test]
    fn dualpipev_runs_every_pass_once_in_a_feasible_order() {
        for (pp, m) in [(2, 4), (4, 8), (4, 9), (4, 20), (8, 16), (8, 40)] {
            for merged in [false, true] {
                for zb in [false, true] {
                    for r in 0..pp {
                        let s = dualpipev_schedule(r, pp, m, merged, zb);
                        let passes: Vec<&ScheduleStep> = s.iter().filter(|x| !x.weight).collect();
                        let mut keys: Vec<_> = passes.iter().map(|x| (x.is_forward(), x.chunk, x.microbatch)).collect();
                        keys.sort_unstable();
                        let mut want: Vec<_> = (0..m)
                            .flat_map(|mb| [(true, 0, mb), (true, 1, mb), (false, 0, mb), (false, 1, mb)])
                            .collect();
                        want.sort_unstable();
                        assert_eq!(keys, want, "rank {r} of {pp}, {m} micro-batches");
                        let at = |f: bool, c: u64, mb: u64| {
                            s.iter()
                                .position(|x| !x.weight && (x.is_forward(), x.chunk, x.microbatch) == (f, c, mb))
                                .unwrap()
                        };
                        for mb in 0..m {
                            for c in 0..2 {
                                assert!(at(true, c, mb) < at(false, c, mb), "forward before backward");
                            }
                            if r == pp - 1 {
                                // The V's turn stays on this rank: the compute stream's order carries it.
                                assert!(at(true, 0, mb) < at(true, 1, mb));
                                assert!(at(false, 1, mb) < at(false, 0, mb));
                            }
                            if r == 0 {
                                assert!(at(true, 1, mb) < at(false, 1, mb), "the loss before its backward");
                            }
                        }
                        // A merged forward is followed by a backward of the other chunk.
                        for (i, x) in s.iter().enumerate().filter(|(_, x)| x.merged) {
                            assert!(x.is_forward() && !s[i + 1].is_forward() && s[i + 1].chunk != x.chunk);
                        }
                        assert_eq!(merged, s.iter().any(|x| x.merged));
                        // Zero bubble: every deferring backward has exactly one later weight
                        // step, in first-in-first-out order: phase 3's pp - r - 1, then pp
                        // from phases 6 and 7.
                        let deferred: Vec<(u64, u64)> = s.iter().filter(|x| x.defer_w).map(|x| (x.microbatch, x.chunk)).collect();
                        let weights: Vec<(u64, u64)> = s.iter().filter(|x| x.weight).map(|x| (x.microbatch, x.chunk)).collect();
                        assert_eq!(deferred, weights, "rank {r}");
                        assert_eq!(weights.len() as u64, if zb { 2 * pp - r - 1 } else { 0 }, "rank {r}");
                        for (i, x) in s.iter().enumerate().filter(|(_, x)| x.weight) {
                            let b = s
                                .iter()
                                .position(|y| y.defer_w && (y.microbatch, y.chunk) == (x.microbatch, x.chunk))
                                .unwrap();
                            assert!(b < i);
                        }
                        // DualPipe's README: a rank holds PP + 1 stages' activations, PP = 2 pp
                        // stages here (chunk-micro-batches in flight; a deferring backward frees
                        // them at its weight step).
                        let (mut cur, mut peak) = (0i64, 0i64);
                        for x in &s {
                            if x.is_forward() {
                                cur += 1;
                            } else if !x.defer_w {
                                cur -= 1;
                            }
                            peak = peak.max(cur);
                        }
                        assert_eq!(cur, 0);
                        assert!(peak <= 2 * pp as i64 + 1, "rank {r}: {peak} chunk activations in flight");
                    }
                    assert!(
                        dualpipev_makespan(pp, m, merged, zb).is_some(),
                        "pp {pp} m {m} merged {merged}: deadlock"
                    );
                }
            }
        }
    }

    #[test]
    fn dualpipev_bubble_is_the_reference_formula() {
        // deepseek-ai/DualPipe README: DualPipeV's bubble is (PP/2 - 1)(F&B + B - 3W) for PP
        // stages on PP/2 ranks, i.e. (pp - 1)(F&B + B - 3W) here. Unit times F = 1, B = 2 (W = 1
        // of it), a merged pair F&B = 3: 5 (pp - 1) without the zero-bubble split (less the last
        // rank's first pair, which the reference runs unmerged), exactly 2 (pp - 1) with it,
        // beside a rank's 6 m of work. Unmerged, the passes wait less for each other.
        for (pp, m) in [(2, 4), (4, 8), (4, 20), (8, 16), (8, 40)] {
            let merged = dualpipev_makespan(pp, m, true, false).unwrap();
            assert_eq!(merged, 6 * m + 5 * (pp - 1) - 1, "pp {pp} m {m}");
            let plain = dualpipev_makespan(pp, m, false, false).unwrap();
            assert_eq!(plain, 6 * m + 4 * (pp - 1) - 1, "pp {pp} m {m}");
            let zb = dualpipev_makespan(pp, m, true, true).unwrap();
            assert_eq!(zb, 6 * m + 2 * (pp - 1), "pp {pp} m {m}");
        }
    }
}
