//! The DLRM generator: one training iteration of a deep-learning recommendation model
//! (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
//! Recommendation Systems") with the hybrid parallelism of the ASTRA-sim + ns-3 DLRM study
//! (Rashidi et al., "Enabling Design Space Exploration of DLRM …", §II-B, Fig. 3): the MLPs are
//! data parallel, the embedding tables model parallel with a personalized all-to-all.
//!
//! Every GPU is one unit of a single data-parallel group (tp = pp = cp = 1), so every collective
//! runs over [`Group::Dp`], which the system simulator resolves to all units of the stage. All
//! units run the same program.
//!
//! # Placement
//! Table `t` lives on GPU `t mod gpus`. The program is that of the most loaded GPU, which holds
//! `L = ceil(num_tables / gpus)` tables; when `gpus` does not divide `num_tables` the other GPUs
//! wait for it at the all-to-alls (load imbalance, as in the real system). With
//! `num_tables < gpus` some GPUs hold no table and `L = 1`.
//!
//! # One iteration, in program order
//! With `b` the per-GPU batch, `B = b · gpus` the global batch, `d` the embedding dimension,
//! `P` the pooling factor (`lookups_per_table`), `T` tables, `F = T + 1` interaction features
//! and `e` the element bytes (dtype bytes, 2 for fp8: activations and embedding rows are kept in
//! 16 bits, as [`crate::TrainingConfig::activation_bytes`] does):
//!
//! - `embedding.fwd` (compute stream, [`OpClass::Embedding`]): each GPU pools its `L` tables for
//!   the **global** batch: FLOPs `B·L·P·d` (the sums), bytes `B·L·(P·d·e + P·8 + d·e)` (gathered
//!   rows, int64 indices, pooled output).
//! - all-to-all (dp stream, overlapped with the bottom MLP as in the study's Fig. 3):
//!   `bytes = L·B·d·e`, the nccl-tests size, i.e. the per-rank **send buffer** (the GPU sends
//!   `L·b·d·e` to each of the `gpus` ranks, itself included), after which every GPU holds all
//!   `T` pooled vectors of its local batch.
//! - `bottom_mlp.fwd`: per layer `in → out` a GEMM of `2·b·in·out` FLOPs and
//!   `(b·in + in·out + b·out)·e` bytes, then ReLU ([`OpClass::Elementwise`], `b·out` FLOPs,
//!   `2·b·out·e` bytes). The input of layer 0 is `dense_features`.
//! - `interaction.fwd` (after the all-to-all): the dot interaction `Z = X·Xᵀ` over the `F`
//!   feature vectors of each sample, one batched GEMM as DLRM runs it (`torch.bmm`, the full
//!   `F×F`, not only the `F(F-1)/2` kept): `2·b·F²·d` FLOPs, `b·(2·F·d + F²)·e` bytes; then the
//!   strictly-lower triangle is gathered and concatenated with the bottom MLP output into the
//!   top MLP input of [`DlrmConfig::top_input`] columns (element-wise, `b·(F² + d + top_in)·e`
//!   bytes).
//! - `top_mlp.fwd`: GEMMs as the bottom MLP over `top_in = d + F(F-1)/2` inputs, ReLU after
//!   every layer but the last, which has a sigmoid; then the binary cross-entropy loss.
//! - `top_mlp.bwd`: loss gradient, then per layer (last first) the activation gradient, the
//!   input-gradient GEMM and the weight-gradient GEMM (`2·b·in·out` FLOPs each; the weight
//!   gradient writes `in·out` gradient elements in the gradient dtype).
//! - `interaction.bwd`: `dX = dZ·X + dZᵀ·X`, two batched GEMMs (`4·b·F²·d` FLOPs).
//! - all-to-all of the embedding gradients back to the table owners (dp stream, same size as the
//!   forward one), then `embedding.bwd`: the sparse SGD update of the touched rows
//!   ([`OpClass::Embedding`]): FLOPs `2·B·L·P·d`, bytes `B·L·(d·e + P·8 + 2·P·d·e)` (pooled
//!   gradient, indices, read-modify-write of the rows). It depends on the all-to-all only, so the
//!   bottom MLP backward overlaps the all-to-all (the "embedding branch" and the "bottom MLP
//!   branch" of the study).
//! - `bottom_mlp.bwd`: as the top MLP; layer 0 has no input-gradient GEMM (the dense features
//!   need no gradient).
//! - Gradient reduction: by default one bucket per MLP, an all-reduce over [`Group::Dp`] on the dp stream of
//!   `params · grad_bytes` bytes, `params = Σ (in·out + out)` (weights and biases), started when
//!   that MLP's backward finished. Gradients are reduced in fp32 (4 bytes), or fp16 (2 bytes)
//!   when `dtype` is fp16: the rule of [`crate::TrainingConfig::grad_dtype`]. On the dp stream
//!   the backward all-to-all is issued before the top MLP's all-reduce: the all-to-all is on the
//!   critical path (the embedding update waits for it), the all-reduce only gates the optimizer.
//!   With [`DlrmConfig::grad_bucket_size`] each MLP's backward is split into buckets of layers
//!   (DDP's rule, in backward order), each bucket's all-reduce issued on the dp stream as soon as
//!   its last layer's weight gradient is done; the backward all-to-all then runs on no stream
//!   ([`Stream::Free`]) so that it does not queue behind the top MLP's all-reduces.
//! - `optimizer` ([`OpClass::Optimizer`]): plain SGD on the MLP parameters (the MLPerf reference
//!   DLRM trains with SGD), after both all-reduces: `2` FLOPs and `4 + grad_bytes + 4` bytes per
//!   parameter (read fp32 weight and gradient, write the weight). The embedding tables are
//!   updated by `embedding.bwd`.
//!
//! With one GPU there is no communication: no all-to-all, no all-reduce.
//!
//! # Several iterations, and the order of the data-parallel stream
//! [`DlrmConfig::iterations`] appends iterations back to back ([`Program::iteration_starts`]).
//! The first is the one-iteration program without its optimizer step. Each later one splits
//! each MLP's forward per gradient bucket (one bucket per MLP without
//! [`DlrmConfig::grad_bucket_size`]); before a bucket's layers it runs that bucket's SGD update
//! (`{mlp}.update.{k}`, the optimizer's FLOPs and bytes for its parameters), which waits for the
//! previous iteration's all-reduce of the bucket. The study's rule (its §III-A, footnote 3):
//! a layer's forward proceeds only once the previous iteration's weight update of that layer
//! finished. The last iteration ends with the optimizer step after all its reductions, so N
//! iterations compute and move exactly N times one.
//!
//! [`DlrmConfig::scheduling_policy`] sets the data-parallel stream's order
//! ([`Program::stream_order`]). With `lifo` the stream runs, whenever it is free, the last issued
//! of its ready collectives. The bottom MLP's all-reduces, issued last, then go before the top
//! MLP's, and iteration k+1's forward all-to-all goes before iteration k's queued all-reduces.
//! A running collective is never pre-empted, as in the study ("with the exception of the chunks
//! at the head of the queue which are already committed to execution").

use llmsim_compute::{DType, OpClass};
use llmsim_core::CollectiveOp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::WorkloadError;
use crate::dag::{DagNodeKind, Group, NONE, Node, Phase, Program, SchedulingPolicy, Segment, Stream, Workload};
use crate::memory::MemoryFootprint;
use crate::ops::{OpSpec, Pass};

/// Bytes of one embedding index (int64, as PyTorch's `EmbeddingBag` takes them).
pub const INDEX_BYTES: u64 = 8;

/// A DLRM model and its per-GPU batch.
///
/// The default is the MLPerf Training DLRM on Criteo Terabyte (the reference
/// `facebookresearch/dlrm` MLPerf run: `--arch-mlp-bot=13-512-256-128`,
/// `--arch-mlp-top=1024-1024-512-256-1`, `--arch-sparse-feature-size=128`, 26 tables capped at
/// `--max-ind-range=40000000` rows, one lookup per table, fp32, mini-batch 2048 per GPU). The
/// ASTRA-sim + ns-3 study's scaled model is [`DlrmConfig::astrasim_ns3`].
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DlrmConfig {
    /// Dense (continuous) input features: the bottom MLP's input width.
    pub dense_features: u64,
    /// Output widths of the bottom MLP layers; the last must equal `embedding_dim`.
    pub bottom_mlp: Vec<u64>,
    /// Output widths of the top MLP layers; the input width is [`DlrmConfig::top_input`].
    pub top_mlp: Vec<u64>,
    /// Embedding tables (sparse features).
    pub num_tables: u64,
    /// Rows of each table (uniform).
    pub rows_per_table: u64,
    /// Embedding vector width.
    pub embedding_dim: u64,
    /// Pooling factor: lookups per table per sample.
    pub lookups_per_table: u64,
    /// Samples per GPU per iteration (the global batch is `batch_size_per_gpu · gpus`).
    pub batch_size_per_gpu: u64,
    /// Math and storage dtype of MLPs, activations and embeddings.
    #[schemars(with = "crate::schema::DTypeSchema")]
    pub dtype: DType,
    /// Parameters per gradient bucket, as PyTorch DDP's `bucket_cap_mb` (in parameters, as
    /// Megatron's `grad_bucket_size`): each MLP's layers fill buckets in backward order (last
    /// layer first), a bucket closes once it holds at least this many parameters or at the
    /// MLP's first layer, and its all-reduce starts as soon as the weight gradient of its last
    /// layer is computed. `1` gives one all-reduce per layer, as ASTRA-sim's DLRM workload (the
    /// ASTRA-sim + ns-3 study's 19 per-layer all-reduces). The all-reduces run one at a time on
    /// the data-parallel stream, in `scheduling_policy`'s order; the backward all-to-all then
    /// bypasses that queue (the study gives the all-to-alls top priority). Default: none, one
    /// bucket per MLP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_bucket_size: Option<u64>,
    /// Training iterations to simulate back to back, as the study's two. From the second on,
    /// each gradient bucket's SGD update runs just before its layers' forward, once the
    /// previous iteration's all-reduce of that bucket finished (the study: "the forward pass for
    /// each layer is proceed ONLY after making sure that the weight update corresponding to the
    /// previous training iteration is finished"); the last iteration ends with one optimizer
    /// step after all its reductions. Default 1.
    #[serde(skip_serializing_if = "is_one")]
    pub iterations: u64,
    /// The order in which the data-parallel stream runs its collectives (ASTRA-sim's
    /// `scheduling-policy`): `fifo`, one at a time in issue order (a CUDA stream), or `lifo`,
    /// one at a time, the last issued of the ready ones first (the study's system layer: "all
    /// chunks of layer N-1 all-reduce take priority over all chunks of layer N"), so a forward
    /// all-to-all issued behind queued all-reduces goes next. Default fifo.
    #[serde(skip_serializing_if = "is_fifo")]
    pub scheduling_policy: SchedulingPolicy,
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn is_fifo(p: &SchedulingPolicy) -> bool {
    *p == SchedulingPolicy::Fifo
}

impl Default for DlrmConfig {
    fn default() -> Self {
        DlrmConfig {
            dense_features: 13,
            bottom_mlp: vec![512, 256, 128],
            top_mlp: vec![1024, 1024, 512, 256, 1],
            num_tables: 26,
            rows_per_table: 40_000_000,
            embedding_dim: 128,
            lookups_per_table: 1,
            batch_size_per_gpu: 2048,
            dtype: DType::Fp32,
            grad_bucket_size: None,
            iterations: 1,
            scheduling_policy: SchedulingPolicy::Fifo,
        }
    }
}

impl DlrmConfig {
    /// The scaled MLPerf DLRM of the ASTRA-sim + ns-3 study (Table V, with Table IV's batch):
    /// 1600 dense features, bottom MLP "5+2" layers of 1024 (read as 5 hidden layers of 1024
    /// plus the input and the output layer, the output being the embedding dimension 64), top MLP
    /// "10+2" layers of 2048 (10 hidden layers of 2048 and a 1-wide output), 64 sparse features
    /// (tables) of dimension 64, pooling factor 60, 16-bit embeddings, 512 samples per GPU. The
    /// table size is not given; 1M rows is used (it does not change the time of an iteration).
    pub fn astrasim_ns3() -> Self {
        let mut top = vec![2048; 10];
        top.push(1);
        let mut bottom = vec![1024; 5];
        bottom.push(64);
        DlrmConfig {
            dense_features: 1600,
            bottom_mlp: bottom,
            top_mlp: top,
            num_tables: 64,
            rows_per_table: 1_000_000,
            embedding_dim: 64,
            lookups_per_table: 60,
            batch_size_per_gpu: 512,
            dtype: DType::Fp16,
            grad_bucket_size: None,
            iterations: 1,
            scheduling_policy: SchedulingPolicy::Fifo,
        }
    }

    /// Feature vectors entering the interaction: one per table plus the bottom MLP output.
    pub fn interaction_features(&self) -> u64 {
        self.num_tables + 1
    }

    /// The top MLP's input width: the bottom MLP output concatenated with the `F(F-1)/2`
    /// pairwise dot products (DLRM's dot interaction without self-interaction).
    pub fn top_input(&self) -> u64 {
        let f = self.interaction_features();
        self.embedding_dim + f * (f - 1) / 2
    }

    /// `(in, out)` of each bottom MLP layer.
    pub fn bottom_layers(&self) -> Vec<(u64, u64)> {
        layers(self.dense_features, &self.bottom_mlp)
    }

    /// `(in, out)` of each top MLP layer.
    pub fn top_layers(&self) -> Vec<(u64, u64)> {
        layers(self.top_input(), &self.top_mlp)
    }

    /// Bottom MLP parameters (weights and biases).
    pub fn bottom_params(&self) -> u64 {
        self.bottom_layers().iter().map(|(i, o)| i * o + o).sum()
    }

    /// Top MLP parameters (weights and biases).
    pub fn top_params(&self) -> u64 {
        self.top_layers().iter().map(|(i, o)| i * o + o).sum()
    }

    /// Embedding parameters of the whole model.
    pub fn embedding_params(&self) -> u64 {
        self.num_tables * self.rows_per_table * self.embedding_dim
    }

    /// Tables on the most loaded of `gpus` GPUs (round-robin placement).
    pub fn local_tables(&self, gpus: u64) -> u64 {
        self.num_tables.div_ceil(gpus.max(1))
    }

    /// Bytes per activation / embedding element (fp8 keeps them in 16 bits).
    pub fn element_bytes(&self) -> u64 {
        self.dtype.activation_bytes()
    }

    /// Bytes per gradient element in the MLP all-reduce: fp16 for fp16, otherwise fp32.
    pub fn grad_bytes(&self) -> u64 {
        match self.dtype {
            DType::Fp16 => 2,
            _ => 4,
        }
    }

    /// Per-GPU memory on `gpus` GPUs: its tables, the MLPs with gradients and SGD, activations.
    pub fn memory_footprint(&self, gpus: u64) -> MemoryFootprint {
        let e = self.element_bytes();
        let mlp = self.bottom_params() + self.top_params();
        let tables = self.local_tables(gpus) * self.rows_per_table * self.embedding_dim * e;
        let parameters = tables + mlp * e;
        let gradients = mlp * self.grad_bytes();
        let widths: u64 = self
            .bottom_layers()
            .iter()
            .chain(self.top_layers().iter())
            .map(|(i, o)| i + o)
            .sum();
        let activations = 2 * self.batch_size_per_gpu * (widths + self.num_tables * self.embedding_dim) * e;
        MemoryFootprint::new(parameters, gradients, 0, activations)
    }

    /// Per-rank send buffer (nccl-tests size) of each embedding all-to-all on `gpus` GPUs:
    /// `L · B · d · e`.
    pub fn all_to_all_bytes(&self, gpus: u64) -> u64 {
        self.local_tables(gpus) * self.batch_size_per_gpu * gpus * self.embedding_dim * self.element_bytes()
    }

    /// Checks every field; errors name it (`dlrm.bottom_mlp`, ...).
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] for a zero size, an empty MLP, or a bottom MLP whose output is
    /// not `embedding_dim` wide (the dot interaction needs equal widths).
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let positive = [
            ("dlrm.dense_features", self.dense_features),
            ("dlrm.num_tables", self.num_tables),
            ("dlrm.rows_per_table", self.rows_per_table),
            ("dlrm.embedding_dim", self.embedding_dim),
            ("dlrm.lookups_per_table", self.lookups_per_table),
            ("dlrm.batch_size_per_gpu", self.batch_size_per_gpu),
            ("dlrm.iterations", self.iterations),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(WorkloadError::invalid(field, "must be at least 1"));
            }
        }
        for (field, mlp) in [("dlrm.bottom_mlp", &self.bottom_mlp), ("dlrm.top_mlp", &self.top_mlp)] {
            if mlp.is_empty() {
                return Err(WorkloadError::invalid(
                    field,
                    "needs at least one layer (output widths, e.g. [512, 256, 128])",
                ));
            }
            if let Some(i) = mlp.iter().position(|w| *w == 0) {
                return Err(WorkloadError::invalid(
                    field,
                    format!("layer {i} has width 0; widths must be at least 1"),
                ));
            }
        }
        if self.grad_bucket_size == Some(0) {
            return Err(WorkloadError::invalid(
                "dlrm.grad_bucket_size",
                "must be at least 1 parameter (1 = one all-reduce per layer; leave it out for one per MLP)",
            ));
        }
        let last = *self.bottom_mlp.last().unwrap_or(&0);
        if last != self.embedding_dim {
            return Err(WorkloadError::invalid(
                "dlrm.bottom_mlp",
                format!(
                    "the last layer is {last} wide but the dot interaction needs it to equal dlrm.embedding_dim = {}",
                    self.embedding_dim
                ),
            ));
        }
        Ok(())
    }
}

fn layers(input: u64, widths: &[u64]) -> Vec<(u64, u64)> {
    let mut prev = input;
    widths
        .iter()
        .map(|&w| {
            let l = (prev, w);
            prev = w;
            l
        })
        .collect()
}

fn compute(name: &'static str, pass: Pass, class: OpClass, flops: u64, bytes: u64, shape: String) -> OpSpec {
    crate::ops::compute(name, pass, class, flops as f64, bytes as f64, &shape)
}

/// Forward ops of one MLP: per layer a GEMM and its activation (ReLU, or sigmoid for the top
/// MLP's last layer).
fn mlp_forward(prefix: &str, layers: &[(u64, u64)], b: u64, e: u64, sigmoid_last: bool) -> Vec<OpSpec> {
    mlp_forward_range(prefix, layers, 0..layers.len(), b, e, sigmoid_last)
}

/// [`mlp_forward`] of the layers in `range` only.
fn mlp_forward_range(
    prefix: &str,
    layers: &[(u64, u64)],
    range: std::ops::Range<usize>,
    b: u64,
    e: u64,
    sigmoid_last: bool,
) -> Vec<OpSpec> {
    let mut ops = Vec::with_capacity(2 * range.len());
    for (l, &(i, o)) in layers.iter().enumerate().take(range.end).skip(range.start) {
        let shape = format!("{prefix}.{l},b={b},k={i},n={o}");
        ops.push(compute(
            "mlp_gemm",
            Pass::Forward,
            OpClass::Gemm,
            2 * b * i * o,
            (b * i + i * o + b * o) * e,
            shape.clone(),
        ));
        let act = if sigmoid_last && l + 1 == layers.len() {
            "mlp_sigmoid"
        } else {
            "mlp_relu"
        };
        ops.push(compute(act, Pass::Forward, OpClass::Elementwise, b * o, 2 * b * o * e, shape));
    }
    ops
}

/// Backward ops of one MLP, last layer first: activation gradient, input-gradient GEMM (not
/// for layer 0 when `first_needs_dx` is false), weight-gradient GEMM.
fn mlp_backward(prefix: &str, layers: &[(u64, u64)], b: u64, e: u64, g: u64, first_needs_dx: bool) -> Vec<OpSpec> {
    mlp_backward_range(prefix, layers, 0..layers.len(), b, e, g, first_needs_dx)
}

/// [`mlp_backward`] of the layers in `range` only (still last first).
fn mlp_backward_range(
    prefix: &str,
    layers: &[(u64, u64)],
    range: std::ops::Range<usize>,
    b: u64,
    e: u64,
    g: u64,
    first_needs_dx: bool,
) -> Vec<OpSpec> {
    let mut ops = Vec::with_capacity(3 * range.len());
    for (l, &(i, o)) in layers.iter().enumerate().take(range.end).skip(range.start).rev() {
        let shape = format!("{prefix}.{l},b={b},k={i},n={o}");
        ops.push(compute(
            "mlp_act_bwd",
            Pass::BackwardInput,
            OpClass::Elementwise,
            b * o,
            3 * b * o * e,
            shape.clone(),
        ));
        if l > 0 || first_needs_dx {
            ops.push(compute(
                "mlp_gemm_dgrad",
                Pass::BackwardInput,
                OpClass::Gemm,
                2 * b * i * o,
                (b * o + i * o + b * i) * e,
                shape.clone(),
            ));
        }
        ops.push(compute(
            "mlp_gemm_wgrad",
            Pass::BackwardWeight,
            OpClass::Gemm,
            2 * b * i * o,
            (b * i + b * o) * e + (i * o + o) * g,
            shape,
        ));
    }
    ops
}

/// The gradient buckets of one MLP for a bucket cap of `cap` parameters, in backward order:
/// each the range of layers it holds and its parameter count (weights and biases).
pub fn grad_buckets(layers: &[(u64, u64)], cap: u64) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut out = Vec::new();
    let (mut hi, mut acc) = (layers.len(), 0u64);
    for l in (0..layers.len()).rev() {
        let (i, o) = layers[l];
        acc += i * o + o;
        if acc >= cap || l == 0 {
            out.push((l..hi, acc));
            hi = l;
            acc = 0;
        }
    }
    out
}

struct Builder {
    prog: Program,
    segments: Vec<Segment>,
}

impl Builder {
    /// Pushes a compute segment as one node on the compute stream.
    fn comp(&mut self, name: &str, phase: Phase, ops: Vec<OpSpec>, deps: &[u32]) -> u32 {
        let seg = self.segments.len() as u32;
        self.segments.push(Segment {
            name: name.to_string(),
            pass: ops.first().map_or(Pass::Forward, |o| o.pass),
            ops,
            duration: None,
        });
        let microbatch = if phase == Phase::Optimizer { NONE } else { 0 };
        self.prog.push(
            Node {
                kind: DagNodeKind::Comp { segment: seg },
                stream: Stream::Compute,
                phase,
                microbatch,
                chunk: 0,
                layer: NONE,
            },
            deps,
        )
    }

    /// Pushes a collective over [`Group::Dp`] on the dp stream.
    fn coll(&mut self, op: CollectiveOp, bytes: u64, phase: Phase, deps: &[u32]) -> u32 {
        self.coll_on(Stream::Dp, op, bytes, phase, deps)
    }

    /// Pushes a collective over [`Group::Dp`] on `stream`.
    fn coll_on(&mut self, stream: Stream, op: CollectiveOp, bytes: u64, phase: Phase, deps: &[u32]) -> u32 {
        let microbatch = if phase == Phase::GradSync { NONE } else { 0 };
        self.prog.push(
            Node {
                kind: DagNodeKind::CommColl {
                    op,
                    group: Group::Dp,
                    bytes,
                },
                stream,
                phase,
                microbatch,
                chunk: 0,
                layer: NONE,
            },
            deps,
        )
    }
}

/// A gradient bucket of one iteration: its layers, its parameters and its all-reduce (none on
/// one GPU), in backward order.
struct Reduced {
    range: std::ops::Range<usize>,
    params: u64,
    reduce: Option<u32>,
}

/// What the next iteration's forward waits on: each MLP's buckets (bottom, top).
struct Carry {
    bottom: Vec<Reduced>,
    top: Vec<Reduced>,
}

/// Plain SGD on `n` parameters with `g`-byte gradients (see the module documentation).
fn sgd(n: u64, g: u64) -> OpSpec {
    compute(
        "optimizer_step",
        Pass::BackwardWeight,
        OpClass::Optimizer,
        2 * n,
        (8 + g) * n,
        format!("params={n}"),
    )
}

/// Generates `c.iterations` training iterations of `c` on `gpus` GPUs (see the module
/// documentation), back to back in one program ([`Program::iteration_starts`] marks them
/// when there are several); the data-parallel stream runs in `c.scheduling_policy`'s order.
///
/// # Errors
/// [`WorkloadError::Invalid`] for an invalid config ([`DlrmConfig::validate`]) or `gpus == 0`.
pub fn generate(c: &DlrmConfig, gpus: u64) -> Result<Workload, WorkloadError> {
    c.validate()?;
    if gpus == 0 {
        return Err(WorkloadError::invalid("gpus", "a DLRM workload needs at least 1 GPU"));
    }
    let mut w = Builder {
        prog: Program::new(),
        segments: Vec::new(),
    };
    w.prog.stream_order[Stream::Dp as usize] = c.scheduling_policy;
    let mut carry = None;
    for k in 0..c.iterations {
        if c.iterations > 1 {
            w.prog.iteration_starts.push(w.prog.len() as u32);
        }
        carry = Some(iteration(&mut w, c, gpus, carry.as_ref(), k + 1 == c.iterations));
    }
    Ok(Workload {
        stages: vec![w.prog],
        segments: w.segments,
        microbatches: 1,
        vpp: 1,
        explicit: None,
    })
}

/// The forward of one MLP: one segment, or after a previous iteration (`prev`) per bucket, in
/// forward order, that bucket's SGD update (after its all-reduce) then its layers. `tail` is
/// appended to the segment of the last layer.
#[allow(clippy::too_many_arguments)]
fn mlp_forward_nodes(
    w: &mut Builder,
    name: &str,
    prefix: &str,
    layers: &[(u64, u64)],
    (b, e, g): (u64, u64, u64),
    sigmoid_last: bool,
    prev: Option<&[Reduced]>,
    tail: Vec<OpSpec>,
) {
    let Some(prev) = prev else {
        let mut ops = mlp_forward(prefix, layers, b, e, sigmoid_last);
        ops.extend(tail);
        w.comp(&format!("{name}.fwd"), Phase::Forward, ops, &[]);
        return;
    };
    let mut tail = Some(tail);
    for (k, r) in prev.iter().enumerate().rev() {
        let deps: Vec<u32> = r.reduce.into_iter().collect();
        w.comp(&format!("{name}.update.{k}"), Phase::Optimizer, vec![sgd(r.params, g)], &deps);
        let mut ops = mlp_forward_range(prefix, layers, r.range.clone(), b, e, sigmoid_last);
        if r.range.end == layers.len() {
            ops.extend(tail.take().unwrap_or_default());
        }
        w.comp(&format!("{name}.fwd.{k}"), Phase::Forward, ops, &[]);
    }
}

/// Appends one iteration to `w`; `prev` is what the previous one left, `last` whether this
/// one ends with the optimizer step over all reductions.
fn iteration(w: &mut Builder, c: &DlrmConfig, gpus: u64, prev: Option<&Carry>, last: bool) -> Carry {
    let b = c.batch_size_per_gpu;
    let global = b * gpus;
    let d = c.embedding_dim;
    let p = c.lookups_per_table;
    let e = c.element_bytes();
    let g = c.grad_bytes();
    let lt = c.local_tables(gpus);
    let f = c.interaction_features();
    let top_in = c.top_input();
    let comm = gpus > 1;
    let a2a = c.all_to_all_bytes(gpus);
    let emb_shape = format!("tables={lt},B={global},d={d},pool={p}");
    let int_shape = format!("b={b},F={f},d={d}");
    let bottom = c.bottom_layers();
    let top = c.top_layers();

    // Forward.
    let emb_fwd = w.comp(
        "embedding.fwd",
        Phase::Forward,
        vec![compute(
            "embedding_lookup",
            Pass::Forward,
            OpClass::Embedding,
            global * lt * p * d,
            global * lt * (p * d * e + p * INDEX_BYTES + d * e),
            emb_shape.clone(),
        )],
        &[],
    );
    let a2a_fwd = comm.then(|| w.coll(CollectiveOp::AllToAll, a2a, Phase::Forward, &[emb_fwd]));
    mlp_forward_nodes(
        w,
        "bottom_mlp",
        "bottom",
        &bottom,
        (b, e, g),
        false,
        prev.map(|x| x.bottom.as_slice()),
        Vec::new(),
    );
    let int_fwd = vec![
        compute(
            "interaction_bmm",
            Pass::Forward,
            OpClass::Gemm,
            2 * b * f * f * d,
            b * (2 * f * d + f * f) * e,
            int_shape.clone(),
        ),
        compute(
            "interaction_concat",
            Pass::Forward,
            OpClass::Elementwise,
            b * top_in,
            b * (f * f + d + top_in) * e,
            int_shape.clone(),
        ),
    ];
    let deps: Vec<u32> = a2a_fwd.into_iter().collect();
    w.comp("interaction.fwd", Phase::Forward, int_fwd, &deps);
    let out = top.last().map_or(1, |l| l.1);
    let loss = vec![compute(
        "bce_loss",
        Pass::Forward,
        OpClass::Elementwise,
        4 * b * out,
        2 * b * out * e,
        format!("b={b},n={out}"),
    )];
    mlp_forward_nodes(w, "top_mlp", "top", &top, (b, e, g), true, prev.map(|x| x.top.as_slice()), loss);

    // Backward.
    let mut top_bwd = vec![compute(
        "bce_loss_bwd",
        Pass::BackwardInput,
        OpClass::Elementwise,
        2 * b * out,
        3 * b * out * e,
        format!("b={b},n={out}"),
    )];
    let mut reduced = Carry {
        bottom: Vec::new(),
        top: Vec::new(),
    };
    let top_done = match c.grad_bucket_size {
        None => {
            top_bwd.extend(mlp_backward("top", &top, b, e, g, true));
            w.comp("top_mlp.bwd", Phase::Backward, top_bwd, &[])
        }
        Some(cap) => {
            let mut first = Some(top_bwd);
            let mut last = 0;
            for (k, (range, params)) in grad_buckets(&top, cap).into_iter().enumerate() {
                let mut ops = first.take().unwrap_or_default();
                ops.extend(mlp_backward_range("top", &top, range.clone(), b, e, g, true));
                last = w.comp(&format!("top_mlp.bwd.{k}"), Phase::Backward, ops, &[]);
                let reduce = comm.then(|| w.coll(CollectiveOp::AllReduce, params * g, Phase::GradSync, &[last]));
                reduced.top.push(Reduced { range, params, reduce });
            }
            last
        }
    };
    let int_bwd = vec![
        compute(
            "interaction_scatter_bwd",
            Pass::BackwardInput,
            OpClass::Elementwise,
            b * top_in,
            b * (top_in + f * f + d) * e,
            int_shape.clone(),
        ),
        compute(
            "interaction_bmm_bwd",
            Pass::BackwardInput,
            OpClass::Gemm,
            4 * b * f * f * d,
            b * (2 * f * f + 4 * f * d) * e,
            int_shape,
        ),
    ];
    let int_done = w.comp("interaction.bwd", Phase::Backward, int_bwd, &[]);
    // Bucketed, the top MLP's all-reduces are already queued on the dp stream: the backward
    // all-to-all bypasses them (the study's top priority for the all-to-alls).
    let a2a_stream = if c.grad_bucket_size.is_some() { Stream::Free } else { Stream::Dp };
    let a2a_bwd = comm.then(|| w.coll_on(a2a_stream, CollectiveOp::AllToAll, a2a, Phase::Backward, &[int_done]));
    match c.grad_bucket_size {
        None => {
            let reduce = comm.then(|| w.coll(CollectiveOp::AllReduce, c.top_params() * g, Phase::GradSync, &[top_done]));
            reduced.top.push(Reduced {
                range: 0..top.len(),
                params: c.top_params(),
                reduce,
            });
            let bottom_done = w.comp(
                "bottom_mlp.bwd",
                Phase::Backward,
                mlp_backward("bottom", &bottom, b, e, g, false),
                &[],
            );
            let reduce = comm.then(|| w.coll(CollectiveOp::AllReduce, c.bottom_params() * g, Phase::GradSync, &[bottom_done]));
            reduced.bottom.push(Reduced {
                range: 0..bottom.len(),
                params: c.bottom_params(),
                reduce,
            });
        }
        Some(cap) => {
            for (k, (range, params)) in grad_buckets(&bottom, cap).into_iter().enumerate() {
                let ops = mlp_backward_range("bottom", &bottom, range.clone(), b, e, g, false);
                let done = w.comp(&format!("bottom_mlp.bwd.{k}"), Phase::Backward, ops, &[]);
                let reduce = comm.then(|| w.coll(CollectiveOp::AllReduce, params * g, Phase::GradSync, &[done]));
                reduced.bottom.push(Reduced { range, params, reduce });
            }
        }
    }
    let deps: Vec<u32> = a2a_bwd.into_iter().collect();
    let emb_done = w.comp(
        "embedding.bwd",
        Phase::Backward,
        vec![compute(
            "embedding_update",
            Pass::BackwardWeight,
            OpClass::Embedding,
            2 * global * lt * p * d,
            global * lt * (d * e + p * INDEX_BYTES + 2 * p * d * e),
            emb_shape,
        )],
        &deps,
    );

    // Optimizer (SGD on the MLPs) after both reductions; before the last iteration it is split
    // per bucket into the next iteration's forward.
    if last {
        let n = c.bottom_params() + c.top_params();
        let mut deps: Vec<u32> = reduced.top.iter().chain(&reduced.bottom).filter_map(|r| r.reduce).collect();
        deps.push(emb_done);
        w.comp("optimizer", Phase::Optimizer, vec![sgd(n, g)], &deps);
    }
    reduced
}
