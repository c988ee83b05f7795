//! The ops of one micro-batch on one rank: per transformer layer, embedding, head, and the
//! optimizer step, in Megatron-LM's execution order, with FLOPs, bytes and communication sizes.
//!
//! Everything is per rank: FLOPs and bytes are already divided by tp (heads, FFN columns, vocab
//! shards), cp (the local `s/cp` query tokens) and ep (local experts, balanced routing).
//!
//! Conventions:
//! - **FLOPs** count a multiply-add as 2. A GEMM `[m,k]·[k,n]` is `2mkn`. Core attention counts the
//!   full `QKᵀ` and `AV`, `4·b·s_q·s_kv·h` per layer with no causal halving, the convention of
//!   Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters", §5.1),
//!   whose model FLOPs `72·B·s·l·h²·(1 + s/(6h) + V/(12hl))` the tests reproduce. Memory-bound ops
//!   (norms, element-wise, softmax) carry small nominal FLOPs; their time comes from their bytes.
//! - **Backward:** each GEMM has an input-gradient GEMM (`BackwardInput`) and a weight-gradient
//!   GEMM (`BackwardWeight`), each with the forward FLOPs. Unfused attention backward is 2× its
//!   forward; FlashAttention backward is 2.5× (it recomputes `QKᵀ`: 5 matmuls against 2;
//!   Dao 2023, "FlashAttention-2", §4.1 "the backward pass … 2.5× the forward FLOPs").
//! - **Bytes** (for the roofline) are HBM bytes read plus written: a GEMM moves
//!   `(mk + kn + mn)·dtype`; its weight-gradient GEMM moves `(mk + mn)·dtype + kn·4·2` because
//!   Megatron accumulates weight gradients into fp32 `main_grad` (gradient-accumulation fusion,
//!   read-modify-write). Element-wise ops move each input and output once, plus 1-byte dropout
//!   masks.
//! - **Communication sizes** follow the nccl-tests "size" convention: the all-reduce buffer, the
//!   all-gather *output*, the reduce-scatter *input*, the all-to-all per-rank send buffer.
//!   TP collectives carry `b·(s/cp)·h·dtype`: without sequence parallelism one all-reduce after
//!   each row-parallel GEMM in forward (2 per layer) and one after each column-parallel
//!   input-gradient GEMM in backward; with sequence parallelism an all-gather before each
//!   column-parallel GEMM and a reduce-scatter after each row-parallel one, and in backward the
//!   swapped pair plus the re-all-gather of the column-parallel input that Megatron issues for the
//!   weight gradient (`LinearWithGradAccumulationAndAsyncCommunication.backward`).
//! - **Positions and head norms**: with `position_embedding_type: rope` one fused rotary kernel
//!   over the local query and key heads after the QKV projection (MLA: over their RoPE parts),
//!   and its backward; with `qk_norm` an RMSNorm over each query and key head before it.
//! - **Context parallelism** is modelled as the ring traffic Megatron's CP attention sends: an
//!   all-gather over the CP group of the local heads' K and V for the whole sequence in forward,
//!   and in backward the same all-gather plus a reduce-scatter of dK/dV. The ring steps are not
//!   overlapped with the attention blocks here. The per-step merges of partial outputs and
//!   gradients (`cp_attn_merge`, `cp_attn_merge_bwd`) are memory-bound ops of their own.
//!   `parallel.cp_impl: torch_ring` models PyTorch's experimental ring attention instead (one
//!   SDPA call per ring step, an all-gather overlapped with the first, fp32 merges and a dK/dV
//!   exchange per backward step; `Builder::torch_ring_attention`).
//! - **MoE** (Megatron-Core all-to-all dispatcher, expert tensor parallelism = tp): router,
//!   permutation, EP all-to-all dispatch of `tokens·topk·h·dtype`, TP all-gather of the received
//!   tokens (tp > 1, sequence parallel), with several local experts the sort of the received
//!   chunks by local expert, grouped expert GEMMs over `b·(s/cp)·topk` tokens per rank (balanced
//!   routing), the unsort, TP reduce-scatter, EP all-to-all combine, un-permutation; shared
//!   experts run as a dense MLP. `moe_token_dispatcher: flex` drops the sort and unsort and, with
//!   the EP group over servers, runs each all-to-all as a network phase (one copy per token and
//!   destination server) and an NVLink phase.

use std::ops::Range;

use llmsim_compute::{AttentionKernel, AttentionShape, DType, GemmShape, KernelShape, OpClass, OpQuery, SsdShape};
use llmsim_core::CollectiveOp;
use llmsim_core::SimTime;
use serde::Serialize;

use crate::config::{
    AttentionSoftmax, CpImpl, Fp8Impl, Fp8Recipe, FsdpImpl, GradScaling, MambaGate, MoeDispatcher, MoeExperts, MoeRouting, ParallelConfig,
    Recompute, RecomputeModule, TpImpl, TrainingConfig,
};
use crate::model::{LayerKind, MlaConfig, ModelConfig, PositionEmbedding};

/// Which part of a training step an op belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// The forward pass.
    Forward,
    /// Forward ops re-run before backward (activation recomputation).
    Recompute,
    /// Input-gradient ops (and ops without weights).
    BackwardInput,
    /// Weight-gradient ops (and the optimizer step).
    BackwardWeight,
}

/// The process group a collective runs in (Megatron's groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommGroup {
    /// Tensor parallel.
    Tp,
    /// Context parallel.
    Cp,
    /// Expert parallel.
    Ep,
    /// The network phase of an expert-parallel all-to-all that spans servers: the EP ranks with
    /// the same local GPU index, one per server (`Group::EpInter`).
    EpInter,
    /// The NVLink phase of an expert-parallel all-to-all that spans servers: the EP ranks of one
    /// server (`Group::EpIntra`).
    EpIntra,
    /// Data parallel (with cp > 1, Megatron's data-parallel group with context parallelism).
    Dp,
    /// Pipeline parallel. Layer ops never use it: the schedule generates pipeline traffic.
    Pp,
}

/// What an op does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum OpSpecKind {
    /// A kernel on the GPU: FLOPs (multiply-add = 2) and HBM bytes read + written.
    Compute {
        /// Kernel class, for the compute model.
        class: OpClass,
        /// FLOPs, a multiply-add counted as 2.
        flops: f64,
        /// HBM bytes read plus written.
        bytes: f64,
    },
    /// A collective over `group`; `bytes` in the nccl-tests size convention (see the module doc).
    Comm {
        /// The collective.
        op: CollectiveOp,
        /// The process group it runs over.
        group: CommGroup,
        /// Size per rank, in bytes (nccl-tests convention).
        bytes: u64,
        /// 0: blocking, the compute stream waits for it (Megatron's TP/CP/EP collectives). `n > 0`:
        /// issued asynchronously on its own stream, the next `n` kernels run beside it and the
        /// compute stream waits for it before the kernel after them (PyTorch's async functional
        /// collectives waited on at first use, e.g. the `torch_ring` K/V all-gather).
        #[serde(skip_serializing_if = "is_zero")]
        beside: u32,
    },
    /// A copy of `bytes` between GPU and host memory on a copy engine, over the GPU's host link
    /// (activation CPU offloading: device-to-host in forward, host-to-device in backward).
    HostCopy {
        /// Bytes copied.
        bytes: u64,
    },
}

/// One op of a micro-batch on one rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpSpec {
    /// Op name, e.g. `attn_proj`.
    pub name: &'static str,
    /// The pass it belongs to.
    pub pass: Pass,
    /// What it does: compute, collective or host copy.
    pub kind: OpSpecKind,
    /// Op-database key, e.g. `b=1,s=2048,h=5120,tp=2,ffn=20480`.
    pub shape: String,
    /// A GEMM's or fused attention's dimensions, for the compute model's kernel models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelShape>,
    /// A TP collective this GEMM runs concurrently with (`parallel.tp_comm_overlap`); the system
    /// simulator times the pair ([`TpOverlap`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<TpOverlap>,
    /// The op's math dtype where it is not the training dtype: under FP8 training only
    /// Transformer Engine's linear layers run in FP8, so Megatron's own output layer (the
    /// logits GEMM, `tensor_parallel.ColumnParallelLinear`) stays BF16.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DType>,
    /// The host waits for the GPU to finish everything issued before this op, then issues it
    /// (a synchronizing call just before it in the framework's code, e.g. PyTorch's blocking
    /// host-to-device copy of a Python scalar: `torch.tensor(x, device=cuda)`). The workload's
    /// segments start at such an op, so the engine's host model can wait there.
    #[serde(skip_serializing_if = "crate::model::is_false")]
    pub host_sync: bool,
}

/// How Transformer Engine's userbuffers overlap a TP collective with a GEMM. The methods and the
/// SMs they take are those of NVIDIA's H100 TP-overlap configurations (NeMo / Megatron-Bridge
/// `userbuffers_*_h100_*` configs, e.g. `..._h16384_tp8_cp2_mbs1_seqlen8192`): all-gathers by
/// ring exchange (`qkv_fprop`, `fc1_fprop`, `proj_dgrad`, `fc2_dgrad`; copy engines, 1 SM),
/// forward reduce-scatters chunked in a pipeline (`proj_fprop`, `fc2_fprop`; 24 SMs taken from
/// the GEMM, 4 splits), the backward's re-gather and dgrad reduce-scatter as bulk transfers
/// beside an independent GEMM (`*_dgrad`, `*_wgrad`; 2 SMs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverlapMethod {
    /// All-gather by ring exchange on copy engines (1 SM).
    RingExchange,
    /// Reduce-scatter chunked in a pipeline with the GEMM (24 SMs, 4 splits).
    Pipeline,
    /// A bulk transfer beside an independent GEMM (2 SMs).
    Bulk,
    /// An NCCL collective issued asynchronously beside the next GEMM and waited for after it
    /// (`parallel.tp_backward_overlap`): its SMs are in `compute.overlap_slowdown`, as for every
    /// NCCL collective beside compute.
    Nccl,
}

impl OverlapMethod {
    /// SMs the communication takes from the GEMM.
    pub fn comm_sms(self) -> u32 {
        match self {
            OverlapMethod::RingExchange => 1,
            OverlapMethod::Pipeline => 24,
            OverlapMethod::Bulk => 2,
            OverlapMethod::Nccl => 0,
        }
    }

    /// Chunks the pair is pipelined in: the first (or last) chunk of the shorter of the two is
    /// exposed. A bulk transfer runs beside an independent GEMM: nothing to fill.
    pub fn chunks(self, tp: u64) -> u64 {
        match self {
            OverlapMethod::RingExchange => tp.max(1),
            OverlapMethod::Pipeline => 4,
            OverlapMethod::Bulk | OverlapMethod::Nccl => 0,
        }
    }

    /// Duration of a GEMM of `gemm` alone overlapped with a collective of `comm` alone on a GPU
    /// of `sms` SMs: the GEMM runs on the SMs left, the part of it that runs beside the
    /// collective is `slowdown` times slower (memory and SM contention; the system simulator's
    /// `compute.overlap_slowdown`), the longer of the two sets the pace, and the pipeline's first
    /// chunk of the shorter one is exposed.
    pub fn overlapped(self, gemm: SimTime, comm: SimTime, sms: u32, tp: u64, slowdown: f64) -> SimTime {
        if comm == SimTime::ZERO {
            return gemm;
        }
        let left = sms.saturating_sub(self.comm_sms()).max(1);
        let g = gemm.as_ps() as f64 * f64::from(sms.max(1)) / f64::from(left);
        let c = comm.as_ps() as f64;
        let s = if slowdown.is_finite() { slowdown.max(1.0) } else { 1.0 };
        let g = g * (1.0 + (s - 1.0) * (c / g).min(1.0));
        let g = SimTime::from_ps_f64(g);
        let (long, short) = if g >= comm { (g, comm) } else { (comm, g) };
        match self.chunks(tp) {
            0 => long,
            n => long + SimTime::from_ps(short.as_ps() / n),
        }
    }
}

/// A TP collective hidden behind a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TpOverlap {
    /// The collective.
    pub op: CollectiveOp,
    /// nccl-tests size convention, as for a standalone collective.
    pub bytes: u64,
    /// How it is overlapped.
    pub method: OverlapMethod,
}

impl OpSpec {
    /// A weight-gradient kernel (a compute op of the `BackwardWeight` pass), the part of a
    /// backward that `delay_wgrad_compute` and DualPipeV's zero bubble move.
    pub fn is_weight_gradient(&self) -> bool {
        self.pass == Pass::BackwardWeight && matches!(self.kind, OpSpecKind::Compute { .. })
    }

    /// The compute-model query for this op in a run whose GEMMs compute in `dtype`
    /// ([`TrainingConfig::gemm_compute_dtype`]: the training dtype, or MXFP8 for the `mxfp8`
    /// recipe); the op's own [`OpSpec::dtype`] where it has one; `None` for a collective or a
    /// host copy.
    pub fn query(&self, dtype: DType) -> Option<OpQuery> {
        // FP8 (MXFP8, NVFP4) training runs only Transformer Engine's GEMMs in FP8 (FP4); attention
        // (FlashAttention, unfused, the Mamba scan) and the memory-bound kernels compute in BF16
        // (TE's NVFP4BlockScaling: fp8_dpa = fp8_mha = False).
        let own = match self.kind {
            OpSpecKind::Compute { class, .. } if dtype.is_te_quantized() && class != OpClass::Gemm => DType::Bf16,
            _ => dtype,
        };
        match &self.kind {
            OpSpecKind::Compute { class, flops, bytes } => Some(OpQuery {
                name: self.name.to_string(),
                class: *class,
                dtype: self.dtype.unwrap_or(own),
                flops: *flops,
                bytes: *bytes,
                shape: self.shape.clone(),
                kernel: self.kernel,
            }),
            OpSpecKind::Comm { .. } | OpSpecKind::HostCopy { .. } => None,
        }
    }

    /// FLOPs of a compute op, 0 for a collective or a copy.
    pub fn flops(&self) -> f64 {
        match self.kind {
            OpSpecKind::Compute { flops, .. } => flops,
            OpSpecKind::Comm { .. } | OpSpecKind::HostCopy { .. } => 0.0,
        }
    }

    /// `(op, group, bytes)` of a collective.
    pub fn comm(&self) -> Option<(CollectiveOp, CommGroup, u64)> {
        match self.kind {
            OpSpecKind::Comm { op, group, bytes, .. } => Some((op, group, bytes)),
            OpSpecKind::Compute { .. } | OpSpecKind::HostCopy { .. } => None,
        }
    }

    fn with_pass(&self, pass: Pass) -> OpSpec {
        OpSpec { pass, ..self.clone() }
    }
}

/// The ops of one layer (or the embedding, or the head) for one micro-batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LayerOps {
    /// Forward, in execution order.
    pub forward: Vec<OpSpec>,
    /// Recomputed forward ops (pass `Recompute`), then the backward ops in execution order.
    pub backward: Vec<OpSpec>,
}

impl LayerOps {
    /// All ops, forward then backward.
    pub fn iter(&self) -> impl Iterator<Item = &OpSpec> {
        self.forward.iter().chain(self.backward.iter())
    }

    /// Marks the GEMMs that carry no dtype of their own as `dtype`'s: ops built as a BF16 run's
    /// inside a quantized one (BF16 layers, BF16 MTP blocks), which would otherwise be timed at
    /// the run's dtype.
    fn gemms_in(&mut self, dtype: DType) {
        for o in self.forward.iter_mut().chain(self.backward.iter_mut()) {
            if matches!(o.kind, OpSpecKind::Compute { class: OpClass::Gemm, .. }) && o.dtype.is_none() {
                o.dtype = Some(dtype);
            }
        }
    }

    /// Sum of the FLOPs of all ops.
    pub fn flops(&self) -> f64 {
        self.iter().map(OpSpec::flops).sum()
    }
}

/// Megatron pads the vocabulary to a multiple of `128 · tp` (`--make-vocab-size-divisible-by 128`).
pub fn padded_vocab(m: &ModelConfig, tp: u64) -> u64 {
    let q = 128 * tp.max(1);
    m.vocab_size.div_ceil(q) * q
}

/// Per-rank sizes of one micro-batch.
struct Dims {
    b: u64,
    /// Full sequence (the K/V length attention sees).
    s: u64,
    /// Local sequence, `s / cp`.
    sl: u64,
    h: u64,
    tp: u64,
    cp: u64,
    sp: bool,
    /// Activation bytes per element.
    dt: u64,
    /// Local query heads and kv heads.
    a_l: u64,
    kv_l: u64,
    d: u64,
    /// Query/key and value head dimensions of core attention (both `d` unless MLA).
    dqk: u64,
    dv: u64,
    /// Tokens in the GEMMs of this rank, `b · s/cp`.
    tok: u64,
    /// Tokens of norm / element-wise ops on this rank: `tok / tp` with SP.
    tok_sp: u64,
    /// `parallel.tp_comm_overlap` in effect (tp > 1 with sequence parallelism).
    ub: bool,
    /// `parallel.tp_impl: dtensor`: no backward re-gather of a column-parallel input; FP8
    /// forward gathers with FP8 current scaling.
    dtensor: bool,
    /// `parallel.tp_backward_overlap` in effect (not with DTensor or userbuffers; a TP group
    /// inside one server): a column-parallel backward's re-gather runs beside the dgrad GEMM,
    /// its reduce-scatter or all-reduce beside the wgrad GEMM ([`OverlapMethod::Nccl`]).
    tp_bwd_async: bool,
    /// FP8 training: GEMM inputs and output gradients are cast to FP8 by separate kernels.
    fp8: bool,
    /// FP8 with current scaling: every GEMM input needs its own amax pass and cast.
    fp8_current: bool,
    /// NVFP4 training: every GEMM input and output gradient is quantized with a per-tensor amax
    /// pass, as with current scaling, into NVFP4 row- and column-wise copies.
    nvfp4: bool,
    /// Bytes of one FP8 copy of an element with its scales (MXFP8, blockwise: 1 + 1/32).
    fp8_elem: f64,
    /// What a norm-fed column-parallel linear's input (QKV, dense fc1:
    /// `TELayerNormColumnParallelLinear`) needs before its FP8 GEMM. See
    /// [`TrainingConfig::cudnn_norm`].
    norm_fed: NormFed,
    /// Per-tensor FP8 scaling (delayed or current): one scale for the whole tensor, so
    /// Transformer Engine all-gathers only the row-wise FP8 data and transposes it locally.
    fp8_per_tensor: bool,
    /// The GEMMs' math dtype where it is not the training dtype (see [`OpSpec::dtype`]).
    gemm_dtype: Option<DType>,
    /// `parallel.cp_impl: torch_ring` (`Some(false)`) or `torch_ring_eager` (`Some(true)`) with
    /// cp > 1.
    torch_ring: Option<bool>,
    /// `training.attention_kernel`: the fused attention kernel, `None` for the GPU's default.
    attn_kernel: Option<AttentionKernel>,
    /// `training.attention_softmax`: the kernels of unfused attention's softmax.
    softmax: AttentionSoftmax,
    /// `training.mamba_gate`: where a Mamba-2 mixer's gate runs.
    mamba_gate: MambaGate,
    /// The sizes of the linear layers `training.module_dtype` puts in another dtype (by forward
    /// GEMM name): this micro-batch's, with that dtype's quantization and GEMM dtype.
    modules: Vec<(&'static str, Dims)>,
    /// Dropout on ([`TrainingConfig::dropout_on`]).
    dropout: bool,
    shape: String,
}

/// HBM bytes per element of one NVFP4 quantization of a BF16 GEMM input or output gradient in
/// Transformer Engine (NVIDIA/TransformerEngine at d0067d0da, `pytorch/csrc/quantizer.cpp`
/// `NVFP4Quantizer::quantize_impl`, lines 2508-2735): with the random Hadamard transform (inputs
/// and gradients, `common/recipe/__init__.py` lines 595-609, `fp4_quant_fwd_inp` /
/// `fp4_quant_bwd_grad`) one kernel, `nvte_hadamard_transform_amax` (line 2641), reads the tensor
/// (2 bytes) for the row-wise amax and the amax of its transformed transpose, the per-tensor
/// FP32 scales; a second, `nvte_quantize_with_hadamard_transform` (line 2709), reads it again (2)
/// and writes the row-wise copy and
/// the Hadamard-transformed column-wise copy for the weight gradient, each 0.5 + 1/16 bytes
/// (E2M1 plus an E4M3 scale per 16). The 16x16 transform runs on tensor cores inside that
/// kernel and stochastic rounding of gradients adds no traffic: both are memory-bound. The
/// weights' 2D-block quantization (once per step, cached across micro-batches) is not an op
/// here, as FP8's weight casts are not.
const NVFP4_QUANTIZE_BYTES_PER_ELEMENT: f64 = 2.0 + 2.0 + 2.0 * DType::NVFP4_BYTES_PER_ELEMENT;

/// How a norm-fed linear's input reaches its FP8 GEMM ([`Dims::norm_fed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NormFed {
    /// The norm kernel writes it quantized: no cast (delayed scaling; MXFP8 with `cudnn_norm`).
    Quantized,
    /// The same cast as any other GEMM input (blockwise; MXFP8 and current scaling under the
    /// cuDNN norm; every input under torchao).
    Cast,
    /// TE's norm hands over the amax (`FUSED_NORM_AMAX_FP8`, current scaling): the cast reads
    /// the BF16 output once and writes the FP8 copy and its transpose.
    CastAfterAmax,
}

/// HBM bytes per element of a current-scaling FP8 cast with its own amax pass: read the BF16
/// tensor for the amax (2), read it again (2) and write the FP8 copy and its transpose (1 + 1).
const FP8_CURRENT_CAST_BYTES_PER_ELEMENT: f64 = 6.0;

/// HBM bytes per element of a cast that reads BF16 once and writes a row-wise and a column-wise
/// copy of `elem` bytes each (delayed scaling's cast-transpose; MXFP8's and blockwise's
/// quantization, whose block amaxes are computed in the same kernel).
fn fp8_two_copies(elem: f64) -> f64 {
    2.0 + 2.0 * elem
}

impl Dims {
    fn new(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> Self {
        let tp = p.tp.max(1);
        let cp = p.cp.max(1);
        let sl = t.seq_length / cp;
        let tok = t.micro_batch_size * sl;
        let sp = p.sp();
        let mut shape = format!("b={},s={},h={},tp={}", t.micro_batch_size, sl, m.hidden_size, tp);
        if sp {
            shape.push_str(",sp=1");
        }
        Dims {
            b: t.micro_batch_size,
            s: t.seq_length,
            sl,
            h: m.hidden_size,
            tp,
            cp,
            sp,
            dt: t.activation_bytes(),
            a_l: m.num_attention_heads / tp,
            kv_l: m.num_key_value_heads / tp,
            d: m.head_dim(),
            dqk: m.attention_head_dims().0,
            dv: m.attention_head_dims().1,
            tok,
            tok_sp: if sp { tok / tp } else { tok },
            ub: p.tp_comm_overlap && sp,
            dtensor: p.tp_impl == TpImpl::Dtensor,
            tp_bwd_async: p.tp_backward_overlap_applies(),
            fp8: t.dtype.is_te_quantized(),
            fp8_current: t.dtype == DType::Fp8 && t.fp8_recipe == Fp8Recipe::Current,
            nvfp4: t.dtype == DType::Fp4,
            fp8_elem: t.fp8_recipe.bytes_per_element(),
            fp8_per_tensor: t.dtype == DType::Fp8 && matches!(t.fp8_recipe, Fp8Recipe::Delayed | Fp8Recipe::Current),
            norm_fed: match t.fp8_recipe {
                _ if t.fp8_impl == Fp8Impl::Torchao => NormFed::Cast,
                Fp8Recipe::Delayed => NormFed::Quantized,
                Fp8Recipe::Mxfp8 if t.cudnn_norm => NormFed::Quantized,
                Fp8Recipe::Current if !t.cudnn_norm => NormFed::CastAfterAmax,
                Fp8Recipe::Mxfp8 | Fp8Recipe::Blockwise | Fp8Recipe::Current => NormFed::Cast,
            },
            gemm_dtype: None,
            torch_ring: match p.cp_impl {
                _ if cp == 1 => None,
                CpImpl::Megatron => None,
                CpImpl::TorchRing => Some(false),
                CpImpl::TorchRingEager => Some(true),
            },
            attn_kernel: if t.fp8_dot_product_attention && t.dtype == DType::Fp8 {
                Some(if t.fp8_recipe == Fp8Recipe::Mxfp8 {
                    AttentionKernel::CudnnMxfp8
                } else {
                    AttentionKernel::CudnnFp8
                })
            } else {
                t.attention_kernel.kernel()
            },
            softmax: t.attention_softmax,
            mamba_gate: t.mamba_gate,
            dropout: t.dropout_on(m),
            modules: t
                .module_dtype
                .iter()
                .filter(|(_, dt)| t.dtype.is_te_quantized() && **dt != t.dtype)
                .map(|(module, &dt)| {
                    let tm = t.with_gemm_dtype(dt);
                    let mut d = Dims::new(m, &tm, p);
                    d.gemm_dtype = Some(tm.gemm_compute_dtype());
                    (module.op_name(), d)
                })
                .collect(),
            shape,
        }
    }

    /// The sizes a GEMM named `name` (forward) is built with: its `training.module_dtype`'s,
    /// else these.
    fn for_gemm(&self, name: &str) -> &Dims {
        self.modules.iter().find(|(n, _)| *n == name).map_or(self, |(_, d)| d)
    }

    fn shape_with(&self, extra: &str) -> String {
        format!("{},{extra}", self.shape)
    }

    /// Size of one `[tokens, h]` activation, the TP collective size.
    fn act_bytes(&self) -> u64 {
        self.tok * self.h * self.dt
    }
}

/// Accesses of each score by unfused attention's softmax kernels, forward and backward, in units
/// of the activation dtype (see [`Builder::unfused_attention`] for the other passes).
///
/// The fused softmax reads and writes the scores (2) forward; backward it reads the gradient
/// and its saved output and writes (3). `eager` runs the mask multiply and the subtraction
/// before PyTorch's softmax as their own kernels (4 more forward) and the mask multiply's
/// gradient (2 more backward): Megatron-LM at a54978bbf4 (see [`AttentionSoftmax::Eager`]).
///
/// With a causal mask the fused softmax is Megatron's upper-triangular kernel
/// (`megatron/fused_kernels/scaled_upper_triang_masked_softmax.h` at cbad126a84, lines 94-162
/// and 188-252): it reads only each row's elements up to the diagonal, half the scores, and
/// writes the whole row (zeros above it), forward; backward it reads the gradient and the
/// output up to the diagonal and writes the whole row. The GEMMs and dropout still see every
/// element.
fn softmax_passes(softmax: AttentionSoftmax, causal: bool) -> (f64, f64) {
    match (softmax, causal) {
        (AttentionSoftmax::Fused, true) => (1.5, 2.0),
        (AttentionSoftmax::Fused, false) => (2.0, 3.0),
        (AttentionSoftmax::Eager, _) => (2.0 + 4.0, 3.0 + 2.0),
    }
}

/// A compute op (every generator and importer builds them here).
pub(crate) fn compute(name: &'static str, pass: Pass, class: OpClass, flops: f64, bytes: f64, shape: &str) -> OpSpec {
    OpSpec {
        name,
        pass,
        kind: OpSpecKind::Compute { class, flops, bytes },
        shape: shape.to_string(),
        kernel: None,
        overlap: None,
        dtype: None,
        host_sync: false,
    }
}

/// The re-run (pass `Recompute`) of part `index` of a forward GEMM that fuses several `mm`s:
/// the `cols` of its `total` output columns one of the fused weights produces. FLOPs, weight
/// and output bytes scale with the columns; the input is read whole.
fn sub_gemm(op: &OpSpec, cols: u64, total: u64, index: usize) -> OpSpec {
    let frac = cols as f64 / total.max(1) as f64;
    let mut sub = op.with_pass(Pass::Recompute);
    if let (OpSpecKind::Compute { class, flops, bytes }, Some(KernelShape::Gemm(g))) = (&op.kind, op.kernel) {
        let (input, weights, output) = ((g.m * g.k) as f64, (g.k * g.n) as f64, (g.m * g.n) as f64);
        let input_bytes = bytes * input / (input + weights + output);
        sub.kind = OpSpecKind::Compute {
            class: *class,
            flops: flops * frac,
            bytes: input_bytes + (bytes - input_bytes) * frac,
        };
        sub.kernel = Some(KernelShape::Gemm(GemmShape { n: cols, ..g }));
    }
    sub.name = match (op.name, index) {
        ("attn_qkv", 0) => "attn_qkv_q",
        ("attn_qkv", 1) => "attn_qkv_k",
        ("attn_qkv", _) => "attn_qkv_v",
        ("mlp_fc1", 0) => "mlp_fc1_gate",
        ("mlp_fc1", _) => "mlp_fc1_up",
        (name, _) => name,
    };
    sub.shape = format!("{},cols={cols}", op.shape);
    sub
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A collective issued asynchronously with `beside` kernels running beside it (see
/// [`OpSpecKind::Comm`]).
fn comm_async(name: &'static str, pass: Pass, op: CollectiveOp, bytes: u64, beside: u32, shape: &str) -> OpSpec {
    let mut c = comm(name, pass, op, CommGroup::Cp, bytes, shape);
    if let OpSpecKind::Comm { beside: b, .. } = &mut c.kind {
        *b = beside;
    }
    c
}

fn comm(name: &'static str, pass: Pass, op: CollectiveOp, group: CommGroup, bytes: u64, shape: &str) -> OpSpec {
    OpSpec {
        name,
        pass,
        kind: OpSpecKind::Comm {
            op,
            group,
            bytes,
            beside: 0,
        },
        shape: shape.to_string(),
        kernel: None,
        overlap: None,
        dtype: None,
        host_sync: false,
    }
}

/// Names of a GEMM and of the TP collectives attached to it.
struct GemmNames {
    fwd: &'static str,
    dgrad: &'static str,
    wgrad: &'static str,
    allreduce: &'static str,
    allreduce_bwd: &'static str,
    allgather: &'static str,
    allgather_bwd: &'static str,
    reducescatter: &'static str,
    reducescatter_bwd: &'static str,
}

macro_rules! gemm_names {
    ($b:literal) => {
        GemmNames {
            fwd: $b,
            dgrad: concat!($b, "_dgrad"),
            wgrad: concat!($b, "_wgrad"),
            allreduce: concat!($b, "_tp_allreduce"),
            allreduce_bwd: concat!($b, "_tp_allreduce_bwd"),
            allgather: concat!($b, "_sp_allgather"),
            allgather_bwd: concat!($b, "_sp_allgather_bwd"),
            reducescatter: concat!($b, "_sp_reducescatter"),
            reducescatter_bwd: concat!($b, "_sp_reducescatter_bwd"),
        }
    };
}

/// How a GEMM is split over TP (Megatron's ColumnParallelLinear / RowParallelLinear).
#[derive(Clone, Copy, PartialEq)]
enum Split {
    /// Column-parallel: identity forward / all-reduce backward (no SP), or all-gather forward /
    /// re-all-gather + reduce-scatter backward (SP).
    Column,
    /// Row-parallel: all-reduce forward (no SP), or reduce-scatter forward / all-gather backward (SP).
    Row,
    /// No TP communication (tp = 1, or the collective is modelled elsewhere).
    Local,
}

/// A forward step and its backward, so the backward can be emitted in reverse step order.
struct Step {
    fwd: Vec<OpSpec>,
    bwd: Vec<OpSpec>,
    /// The recomputable submodules ([`RecomputeModule::bit`]s) this step belongs to: re-run
    /// before the backward when selective recomputation names one of them.
    modules: u8,
}

struct Builder<'a> {
    d: &'a Dims,
    steps: Vec<Step>,
    /// The submodules the steps pushed now belong to.
    cur: u8,
    /// Column-parallel GEMMs pushed now read a norm's output that no kernel of their own
    /// quantizes (an MoE layer's shared experts: Megatron-Core builds the MoE layer's
    /// `pre_mlp_layernorm` as a separate `TENorm`, `gpt_layer_specs.py`, and the shared experts'
    /// fc1 as a plain column-parallel linear), so FP8 casts their input in forward.
    unfused_column: bool,
}

impl<'a> Builder<'a> {
    fn new(d: &'a Dims) -> Self {
        Builder {
            d,
            steps: Vec::new(),
            cur: 0,
            unfused_column: false,
        }
    }

    fn push(&mut self, fwd: Vec<OpSpec>, bwd: Vec<OpSpec>) {
        self.steps.push(Step {
            fwd,
            bwd,
            modules: self.cur,
        });
    }

    /// Runs `f` with the steps it pushes tagged as part of `module` too.
    fn within(&mut self, module: RecomputeModule, f: impl FnOnce(&mut Self)) {
        let saved = self.cur;
        self.cur |= module.bit();
        f(self);
        self.cur = saved;
    }

    /// Removes the quantization casts (`fp8_cast*`, `nvfp4_quantize*`) of `pass` from the last
    /// step: a fused kernel before or after it writes that operand quantized.
    fn drop_last_casts(&mut self, pass: Pass) {
        if let Some(step) = self.steps.last_mut() {
            let ops = if pass == Pass::Forward { &mut step.fwd } else { &mut step.bwd };
            ops.retain(|o| !(o.pass == pass && is_quantization_cast(o.name)));
        }
    }

    /// GEMM `[m,k]·[k,n]` with `weights` weight elements (k·n, or more for grouped expert GEMMs).
    #[allow(clippy::too_many_arguments)]
    fn gemm(&mut self, names: GemmNames, split: Split, m: u64, k: u64, n: u64, weights: u64, shape: &str) {
        let ab = self.d.act_bytes();
        self.gemm_comm(names, split, m, k, n, weights, shape, ab);
    }

    /// [`Builder::gemm`] whose TP collectives carry `ab` bytes instead of a `[tokens, h]`
    /// activation (MLA's up-projections gather the low-rank latent, not the hidden state).
    #[allow(clippy::too_many_arguments)]
    fn gemm_comm(&mut self, names: GemmNames, split: Split, m: u64, k: u64, n: u64, weights: u64, shape: &str, ab: u64) {
        let d = self.d.for_gemm(names.fwd);
        let dt = d.dt as f64;
        let (mf, kf, nf, wf) = (m as f64, k as f64, n as f64, weights as f64);
        let flops = 2.0 * mf * kf * nf;
        let fwd_bytes = (mf * kf + wf + mf * nf) * dt;
        let wgrad_bytes = (mf * kf + mf * nf) * dt + wf * 4.0 * 2.0;
        // `weights` over `k·n` equal matrices: a grouped GEMM of one GEMM per local expert, the
        // tokens split evenly among them (balanced routing).
        let batch = (weights / (k * n).max(1)).max(1);
        let fwd_shape = GemmShape {
            m: m.div_ceil(batch),
            n,
            k,
            batch,
        };
        let mut g = compute(names.fwd, Pass::Forward, OpClass::Gemm, flops, fwd_bytes, shape);
        g.kernel = Some(KernelShape::Gemm(fwd_shape));
        let mut dg = compute(names.dgrad, Pass::BackwardInput, OpClass::Gemm, flops, fwd_bytes, shape);
        dg.kernel = Some(KernelShape::Gemm(fwd_shape.dgrad()));
        let mut wg = compute(names.wgrad, Pass::BackwardWeight, OpClass::Gemm, flops, wgrad_bytes, shape);
        wg.kernel = Some(KernelShape::Gemm(fwd_shape.wgrad()));
        for op in [&mut g, &mut dg, &mut wg] {
            op.dtype = d.gemm_dtype;
        }
        let tp = d.tp > 1;
        // DTensor with torchao's tensorwise Float8: the column-parallel input is cast to FP8
        // before its forward all-gather (one byte an element; the scale is one number).
        // Megatron-Core with Transformer Engine (a TE module: `d.fp8` is off for the output
        // layer): with sequence parallelism TE all-gathers the *quantized* GEMM operand
        // (TransformerEngine v2.11 `module/layernorm_linear.py` and `module/linear.py` forward:
        // `gather_along_first_dim(ln_out, tp_group, quantizer=...)` on the quantized norm
        // output, usage row-wise only; `module/base.py` `grad_output_preprocess` and the
        // backward re-gather of the input for the weight gradient likewise, through
        // `distributed.py` `_all_gather_fp8` / `_all_gather_mxfp8` / `_all_gather_nvfp4`).
        // Per-tensor FP8 gathers its row-wise data and transposes locally: one byte an element
        // everywhere. MXFP8 and NVFP4 gather the usages they need: the forward input row-wise,
        // the re-gathered input column-wise, and the output gradient both ways (one way under
        // userbuffers, which moves one usage at a time). Reduce-scatters stay in BF16.
        let quantized = |elem: f64| -> u64 { ((ab as f64) * elem / d.dt.max(1) as f64).round() as u64 };
        let te_elem = if d.dtensor || !d.fp8 {
            None
        } else if d.nvfp4 {
            Some(DType::NVFP4_BYTES_PER_ELEMENT)
        } else {
            Some(d.fp8_elem)
        };
        let ag_input = te_elem.map_or(ab, quantized);
        let ag_grad = match te_elem {
            None => ab,
            Some(e) if d.fp8_per_tensor || d.ub => quantized(e),
            Some(e) => quantized(2.0 * e).min(ab),
        };
        let ag_fwd = if d.dtensor && d.fp8_current { ab / d.dt.max(1) } else { ag_input };
        let ovb = |op: CollectiveOp, method: OverlapMethod, bytes: u64| Some(TpOverlap { op, bytes, method });
        let ov = |op: CollectiveOp, method: OverlapMethod| ovb(op, method, ab);
        let (mut fwd, mut bwd) = match split {
            Split::Column if tp && d.ub && d.dtensor => {
                // PyTorch async TP (symmetric memory): the gather fused with the forward GEMM,
                // the input gradient's reduce-scatter with the dgrad GEMM, each decomposed into
                // one chunk per rank moved by copy engines; the weight gradient uses the saved
                // input.
                g.overlap = ovb(CollectiveOp::AllGather, OverlapMethod::RingExchange, ag_fwd);
                dg.overlap = ov(CollectiveOp::ReduceScatter, OverlapMethod::RingExchange);
                (vec![g], vec![dg, wg])
            }
            Split::Column if tp && d.ub => {
                g.overlap = ovb(CollectiveOp::AllGather, OverlapMethod::RingExchange, ag_fwd);
                dg.overlap = ovb(CollectiveOp::AllGather, OverlapMethod::Bulk, ag_input);
                wg.overlap = ov(CollectiveOp::ReduceScatter, OverlapMethod::Bulk);
                (vec![g], vec![dg, wg])
            }
            Split::Row if tp && d.ub => {
                // Transformer Engine's pipelined reduce-scatter; PyTorch async TP's is one chunk
                // per rank on copy engines.
                let rs = if d.dtensor {
                    OverlapMethod::RingExchange
                } else {
                    OverlapMethod::Pipeline
                };
                g.overlap = ov(CollectiveOp::ReduceScatter, rs);
                dg.overlap = ovb(CollectiveOp::AllGather, OverlapMethod::RingExchange, ag_grad);
                (vec![g], vec![dg, wg])
            }
            Split::Column if tp && d.sp => {
                let ag = comm(
                    names.allgather,
                    Pass::Forward,
                    CollectiveOp::AllGather,
                    CommGroup::Tp,
                    ag_fwd,
                    shape,
                );
                if d.tp_bwd_async {
                    // Transformer Engine / Megatron-Core (`tp_backward_overlap`): the re-gather
                    // runs beside the dgrad GEMM and the reduce-scatter beside the wgrad GEMM,
                    // each waited for after it.
                    dg.overlap = ovb(CollectiveOp::AllGather, OverlapMethod::Nccl, ag_input);
                    wg.overlap = ov(CollectiveOp::ReduceScatter, OverlapMethod::Nccl);
                    (vec![ag, g], vec![dg, wg])
                } else {
                    let rs_bwd = comm(
                        names.reducescatter_bwd,
                        Pass::BackwardInput,
                        CollectiveOp::ReduceScatter,
                        CommGroup::Tp,
                        ab,
                        shape,
                    );
                    // Megatron keeps only its input's shard and gathers it again for the weight
                    // gradient; DTensor's autograd keeps the gathered input.
                    let regather = (!d.dtensor).then(|| {
                        comm(
                            names.allgather_bwd,
                            Pass::BackwardInput,
                            CollectiveOp::AllGather,
                            CommGroup::Tp,
                            ag_input,
                            shape,
                        )
                    });
                    let mut bwd: Vec<OpSpec> = regather.into_iter().collect();
                    bwd.extend([dg, rs_bwd, wg]);
                    (vec![ag, g], bwd)
                }
            }
            Split::Column if tp && d.tp_bwd_async => {
                // The input gradient's all-reduce beside the wgrad GEMM (see above).
                wg.overlap = ov(CollectiveOp::AllReduce, OverlapMethod::Nccl);
                (vec![g], vec![dg, wg])
            }
            Split::Column if tp => (
                vec![g],
                vec![
                    dg,
                    comm(
                        names.allreduce_bwd,
                        Pass::BackwardInput,
                        CollectiveOp::AllReduce,
                        CommGroup::Tp,
                        ab,
                        shape,
                    ),
                    wg,
                ],
            ),
            Split::Row if tp && d.sp => (
                vec![
                    g,
                    comm(
                        names.reducescatter,
                        Pass::Forward,
                        CollectiveOp::ReduceScatter,
                        CommGroup::Tp,
                        ab,
                        shape,
                    ),
                ],
                vec![
                    comm(
                        names.allgather_bwd,
                        Pass::BackwardInput,
                        CollectiveOp::AllGather,
                        CommGroup::Tp,
                        ag_grad,
                        shape,
                    ),
                    dg,
                    wg,
                ],
            ),
            Split::Row if tp => (
                vec![
                    g,
                    comm(names.allreduce, Pass::Forward, CollectiveOp::AllReduce, CommGroup::Tp, ab, shape),
                ],
                vec![dg, wg],
            ),
            _ => (vec![g], vec![dg, wg]),
        };
        if d.fp8 {
            // Transformer Engine FP8: the input of a linear layer that no norm or activation
            // kernel casts on its way out is cast, with its transpose for the weight gradient; in
            // backward each output gradient is cast and transposed. Read 2 bytes, write 1 + 1;
            // current scaling reads the tensor once more for its amax. Only a column-parallel
            // linear fused with its norm (`TELayerNormColumnParallelLinear`: QKV, dense fc1,
            // Mamba's in_proj, MLA's up-projections) can get its input quantized by the norm
            // kernel: always with delayed scaling, with MXFP8 under `cudnn_norm`, never with
            // blockwise; with current scaling TE's norm computes the amax, so only the cast
            // remains (`Dims::norm_fed`). The
            // row-parallel ones (attention output, fc2) cast theirs, and so do the unfused
            // `Local` ones: the grouped expert GEMMs (`GroupedLinear` quantizes the permuted
            // BF16 tokens and the activation's output, `split_quantize`; Megatron-Core's flex
            // dispatcher sends BF16, `fused_a2a.py`: "HybridEP dispatcher does not support fp8
            // dispatch"), MLA's down-projections and LatentMoE's projections, which read a
            // separate norm's or the un-permutation's output.
            let gshape = format!("{shape},gemm={}", names.fwd);
            let per_elem = if d.nvfp4 {
                NVFP4_QUANTIZE_BYTES_PER_ELEMENT
            } else if d.fp8_current {
                FP8_CURRENT_CAST_BYTES_PER_ELEMENT
            } else {
                fp8_two_copies(d.fp8_elem)
            };
            let cast = |name: &'static str, pass: Pass, elems: u64, per_elem: f64| {
                let e = elems as f64;
                compute(name, pass, OpClass::Elementwise, e, per_elem * e, &gshape)
            };
            let (fwd_name, bwd_name) = if d.nvfp4 {
                ("nvfp4_quantize_rht", "nvfp4_quantize_rht_bwd")
            } else {
                ("fp8_cast", "fp8_cast_transpose_bwd")
            };
            let unfused = match split {
                Split::Row | Split::Local => true,
                Split::Column => self.unfused_column,
            };
            let fwd_cast = match d.norm_fed {
                _ if unfused || d.nvfp4 => Some(per_elem),
                NormFed::Quantized => None,
                NormFed::Cast => Some(per_elem),
                NormFed::CastAfterAmax => Some(fp8_two_copies(d.fp8_elem)),
            };
            if let Some(b) = fwd_cast {
                fwd.insert(0, cast(fwd_name, Pass::Forward, m * k, b));
            }
            bwd.insert(0, cast(bwd_name, Pass::BackwardInput, m * n, per_elem));
        }
        self.push(fwd, bwd);
    }

    /// RMSNorm/LayerNorm over `tokens · h`: reads x, writes y (+ the weight); backward reads x and
    /// dy, writes dx.
    fn norm(&mut self, fwd: &'static str, bwd: &'static str, tokens: u64) {
        let (h, shape) = (self.d.h, self.d.shape.clone());
        self.norm_width(fwd, bwd, tokens, h, &shape);
    }

    /// [`Builder::norm`] over rows of `width` elements (MLA's latent norms, Mamba's gated norm).
    fn norm_width(&mut self, fwd: &'static str, bwd: &'static str, tokens: u64, width: u64, shape: &str) {
        self.norm_width_gated(fwd, bwd, tokens, width, shape, false);
    }

    /// [`Builder::norm_width`], with `gated` a gated norm `norm(y)·silu(z)` fused in one kernel
    /// (mamba_ssm's `_layer_norm_fwd` / `_layer_norm_bwd` with z and `recompute_output`): forward
    /// also reads z; backward also reads z, writes dz and re-writes the gated output.
    fn norm_width_gated(&mut self, fwd: &'static str, bwd: &'static str, tokens: u64, width: u64, shape: &str, gated: bool) {
        let d = self.d;
        let e = (tokens * width) as f64;
        let dt = d.dt as f64;
        let g = if gated { 1.0 } else { 0.0 };
        self.push(
            vec![compute(
                fwd,
                Pass::Forward,
                OpClass::Norm,
                (4.0 + 2.0 * g) * e,
                (2.0 + g) * e * dt + width as f64 * dt,
                shape,
            )],
            vec![compute(
                bwd,
                Pass::BackwardInput,
                OpClass::Norm,
                (8.0 + 4.0 * g) * e,
                (3.0 + 3.0 * g) * e * dt + width as f64 * 4.0,
                shape,
            )],
        );
    }

    /// Bias-dropout-residual-add over `tokens · h`: reads x and the residual, writes y and, with
    /// dropout on, a 1-byte mask; backward reads dy (and the mask), writes dx.
    fn residual(&mut self, fwd: &'static str, bwd: &'static str) {
        let d = self.d;
        let e = (d.tok_sp * d.h) as f64;
        let dt = d.dt as f64;
        let mask = if d.dropout { 1.0 } else { 0.0 };
        self.push(
            vec![compute(
                fwd,
                Pass::Forward,
                OpClass::Elementwise,
                3.0 * e,
                e * (3.0 * dt + mask),
                &d.shape,
            )],
            vec![compute(
                bwd,
                Pass::BackwardInput,
                OpClass::Elementwise,
                2.0 * e,
                e * (2.0 * dt + mask),
                &d.shape,
            )],
        );
    }

    /// Rotary position embedding over `elems` query and key elements: Transformer Engine's fused
    /// kernel (`fused_apply_rotary_pos_emb`, used by Megatron-Core with `apply_rope_fusion`, on by
    /// default) reads each element and writes the rotated one; backward does the same to the
    /// gradients. The cos/sin table (fp32, one row per position) is small beside them and left out.
    fn rope(&mut self, elems: u64, shape: &str) {
        let e = elems as f64;
        let dt = self.d.dt as f64;
        self.push(
            vec![compute("rope", Pass::Forward, OpClass::Elementwise, 3.0 * e, 2.0 * e * dt, shape)],
            vec![compute(
                "rope_bwd",
                Pass::BackwardInput,
                OpClass::Elementwise,
                3.0 * e,
                2.0 * e * dt,
                shape,
            )],
        );
    }

    /// Eager element-wise kernels, named `names` (forward, backward): one forward kernel per
    /// `(bytes read plus written, FLOPs)` entry of `fwd`, one backward kernel per entry of `bwd`.
    fn eager_kernels(&mut self, names: (&'static str, &'static str), fwd: &[(f64, f64)], bwd: &[(f64, f64)], shape: &str) {
        let k =
            |name: &'static str, pass: Pass, &(bytes, flops): &(f64, f64)| compute(name, pass, OpClass::Elementwise, flops, bytes, shape);
        self.push(
            fwd.iter().map(|x| k(names.0, Pass::Forward, x)).collect(),
            bwd.iter().map(|x| k(names.1, Pass::BackwardInput, x)).collect(),
        );
    }

    /// Eager `rotate_half` RoPE over `elems` elements of one query or key tensor (NeMo
    /// Automodel's GPT-OSS, `models/gpt_oss/layers.py` `_apply_rotary_emb`): forward four
    /// half-width products (each reads and writes half the tensor), their difference and sum,
    /// and the `cat` of the two halves, 9 tensor sizes of traffic in 7 kernels; backward the
    /// negation, four products, two sums and the `cat`, 10 sizes in 8 kernels.
    fn rope_eager(&mut self, names: (&'static str, &'static str), elems: u64, shape: &str) {
        let e = elems as f64;
        let b = e * self.d.dt as f64;
        let k = |sizes: f64| (sizes * b, 0.5 * e);
        let fwd = [k(1.0), k(1.0), k(1.0), k(1.0), k(1.5), k(1.5), k(2.0)];
        let bwd = [k(1.0), k(1.0), k(1.0), k(1.0), k(1.0), k(1.5), k(1.5), k(2.0)];
        self.eager_kernels(names, &fwd, &bwd, shape);
    }

    /// Eager complex RoPE over `elems` elements of one tensor (NeMo Automodel's MLA,
    /// `moe/rope_utils.py`): `.float()` (2 bytes in, 4 out), the complex product (4 in, 4 out)
    /// and the cast back (4 in, 2 out), 20 bytes an element in 3 kernels each way.
    fn rope_complex(&mut self, names: (&'static str, &'static str), elems: u64, shape: &str) {
        let e = elems as f64;
        let kernels = [(6.0 * e, 0.0), (8.0 * e, 3.0 * e), (6.0 * e, 0.0)];
        self.eager_kernels(names, &kernels, &kernels, shape);
    }

    /// MLP activation over `tokens · ffn_local` outputs: GeLU reads 1, writes 1; SwiGLU reads 2,
    /// writes 1 (backward: reads dy and the inputs, writes their gradients).
    fn activation(&mut self, fwd: &'static str, bwd: &'static str, tokens: u64, ffn_l: u64, gated: bool, shape: &str) {
        let e = (tokens * ffn_l) as f64;
        let dt = self.d.dt as f64;
        let (rf, rb) = if gated { (3.0, 5.0) } else { (2.0, 3.0) };
        self.push(
            vec![compute(fwd, Pass::Forward, OpClass::Elementwise, 8.0 * e, rf * e * dt, shape)],
            vec![compute(
                bwd,
                Pass::BackwardInput,
                OpClass::Elementwise,
                16.0 * e,
                rb * e * dt,
                shape,
            )],
        );
    }

    /// Megatron-Core's clamp of a gated activation's inputs (`activation_func_clamp_value`,
    /// GPT-OSS): with `bias_activation_fusion`, `weighted_bias_quick_geglu_impl` clamps the gate
    /// half and the linear half of the `[tokens, 2·ffn_l]` input in two eager kernels and
    /// concatenates them into a new tensor before its fused kernel (`fusions/fused_bias_geglu.py`,
    /// megatron-core 0.15.0 and 0.16.0). Backward: autograd's two clamp gradients (each reads the
    /// gradient and the clamped input, writes its gradient) and the gradient of `chunk`, which
    /// concatenates the two halves.
    fn glu_clamp(&mut self, tokens: u64, ffn_l: u64, shape: &str) {
        let e = (tokens * ffn_l) as f64;
        let dt = self.d.dt as f64;
        let op = |name, pass, flops, bytes| compute(name, pass, OpClass::Elementwise, flops, bytes, shape);
        let clamp = || op("expert_act_clamp", Pass::Forward, e, 2.0 * e * dt);
        let clamp_bwd = || op("expert_act_clamp_bwd", Pass::BackwardInput, e, 3.0 * e * dt);
        self.push(
            vec![clamp(), clamp(), op("expert_act_clamp_cat", Pass::Forward, 0.0, 4.0 * e * dt)],
            vec![
                clamp_bwd(),
                clamp_bwd(),
                op("expert_act_clamp_cat_bwd", Pass::BackwardInput, 0.0, 4.0 * e * dt),
            ],
        );
    }

    /// The host waits for the GPU before issuing the forward op of the step pushed last.
    fn host_sync_at_last_step(&mut self) {
        if let Some(op) = self.steps.last_mut().and_then(|s| s.fwd.first_mut()) {
            op.host_sync = true;
        }
    }

    fn collective(&mut self, fwd: (&'static str, CollectiveOp), bwd: Option<(&'static str, CollectiveOp)>, group: CommGroup, bytes: u64) {
        self.collective_sized(fwd, bwd, group, bytes, bytes);
    }

    /// [`Self::collective`] whose backward moves `bwd_bytes` (e.g. an FP8 forward dispatch whose
    /// gradient returns in BF16).
    fn collective_sized(
        &mut self,
        fwd: (&'static str, CollectiveOp),
        bwd: Option<(&'static str, CollectiveOp)>,
        group: CommGroup,
        bytes: u64,
        bwd_bytes: u64,
    ) {
        let d = self.d;
        let shape = &d.shape;
        self.push(
            vec![comm(fwd.0, Pass::Forward, fwd.1, group, bytes, shape)],
            bwd.map(|(n, op)| comm(n, Pass::BackwardInput, op, group, bwd_bytes, shape))
                .into_iter()
                .collect(),
        );
    }

    /// Dense MLP: fc1 (column), activation, fc2 (row).
    fn mlp(&mut self, names: (GemmNames, &'static str, &'static str, GemmNames), m: &ModelConfig, ffn: u64) {
        let d = self.d;
        let ffn_l = ffn / d.tp;
        let shape = d.shape_with(&format!("ffn={ffn}"));
        let fc1_n = ffn_l * if m.gated_mlp { 2 } else { 1 };
        self.gemm(names.0, Split::Column, d.tok, d.h, fc1_n, d.h * fc1_n, &shape);
        self.activation(names.1, names.2, d.tok, ffn_l, m.gated_mlp, &shape);
        self.gemm(names.3, Split::Row, d.tok, ffn_l, d.h, ffn_l * d.h, &shape);
    }

    /// Core attention over `keys` keys per query (`s`, or the window of a sliding layer):
    /// `QKᵀ` over `dqk` and `AV` over `dv`, `2·tok·a·keys·(dqk + dv)` FLOPs.
    fn core_attention(&mut self, flash: bool, keys: u64) {
        let d = self.d;
        if let Some(eager) = d.torch_ring
            && flash
            && keys == d.s
        {
            self.torch_ring_attention(eager);
            return;
        }
        let dt = d.dt as f64;
        let mut shape = if d.cp > 1 {
            d.shape_with(&format!("heads={},kv={},kv_s={}", d.a_l, d.kv_l, d.s))
        } else {
            d.shape_with(&format!("heads={},kv={}", d.a_l, d.kv_l))
        };
        if d.dqk != d.d || d.dv != d.d {
            shape.push_str(&format!(",dqk={},dv={}", d.dqk, d.dv));
        }
        if keys != d.s {
            shape.push_str(&format!(",window={keys}"));
        }
        // q and o elements; equal, and `2·(q + o)` = `4q`, without MLA.
        let q = (d.tok * d.a_l * d.dqk) as f64;
        let o = (d.tok * d.a_l * d.dv) as f64;
        let kv_full = d.b * d.s * d.kv_l * (d.dqk + d.dv);
        let flops = 2.0 * (q + o) * keys as f64;
        let qkvo = (q + o + kv_full as f64) * dt;
        let mut fwd = Vec::new();
        let mut bwd = Vec::new();
        if d.cp > 1 {
            let b = kv_full * d.dt;
            fwd.push(comm(
                "cp_kv_allgather",
                Pass::Forward,
                CollectiveOp::AllGather,
                CommGroup::Cp,
                b,
                &shape,
            ));
            bwd.push(comm(
                "cp_kv_allgather_bwd",
                Pass::BackwardInput,
                CollectiveOp::AllGather,
                CommGroup::Cp,
                b,
                &shape,
            ));
        }
        if flash {
            // Decoder LMs use a causal mask; the kernel tables and unfused attention's softmax
            // read this. A sliding window is modelled as a non-causal pass over the window's keys.
            let attn = AttentionShape {
                batch_heads: d.b * d.a_l,
                s_q: d.sl,
                s_kv: keys,
                head_dim: d.dqk,
                causal: keys == d.s,
                backward: false,
                kernel: d.attn_kernel,
            };
            let class = OpClass::FlashAttention;
            if d.attn_kernel.is_some_and(AttentionKernel::is_fp8) {
                // Transformer Engine's FP8 attention quantizes Q, K and V on the way in and
                // returns O in BF16; backward quantizes dO and returns dQ, dK, dV in BF16: each a
                // memory-bound pass, reading or writing 2 bytes and writing or reading one FP8
                // copy (with MXFP8 a scale byte per 32 elements).
                let qkv = q + kv_full as f64 / d.cp as f64;
                let bytes = (qkv + o) * (2.0 + d.fp8_elem);
                fwd.push(compute("fp8_dpa_quantize", Pass::Forward, OpClass::Elementwise, qkv, bytes, &shape));
                bwd.push(compute(
                    "fp8_dpa_quantize_bwd",
                    Pass::BackwardInput,
                    OpClass::Elementwise,
                    qkv,
                    bytes,
                    &shape,
                ));
            }
            let mut f = compute("core_attention", Pass::Forward, class, flops, qkvo, &shape);
            f.kernel = Some(KernelShape::Attention(attn));
            fwd.push(f);
            let mut b = compute("core_attention_bwd", Pass::BackwardInput, class, 2.5 * flops, 2.0 * qkvo, &shape);
            b.kernel = Some(KernelShape::Attention(AttentionShape { backward: true, ..attn }));
            bwd.push(b);
        } else {
            // Unfused attention is refused with context parallelism (`TrainingConfig::validate`),
            // so the merges below never follow it.
            debug_assert_eq!(d.cp, 1);
            let (f, b) = self.unfused_attention(keys, &shape);
            fwd.extend(f);
            bwd.extend(b);
        }
        if d.cp > 1 {
            let (merge_f, merge_b) = self.cp_merges(q, o, keys == d.s, &shape);
            fwd.push(merge_f);
            bwd.push(merge_b);
            let b = kv_full * d.dt;
            bwd.push(comm(
                "cp_dkv_reducescatter",
                Pass::BackwardInput,
                CollectiveOp::ReduceScatter,
                CommGroup::Cp,
                b,
                &shape,
            ));
        }
        self.steps.push(Step {
            fwd,
            bwd,
            modules: self.cur | RecomputeModule::CoreAttn.bit(),
        });
    }

    /// Unfused core attention as Megatron runs it without flash attention, one op per kernel:
    /// forward `baddbmm` (`QKᵀ` into a fresh scores buffer), the softmax, the attention dropout,
    /// `bmm` (`AV`); backward the two `bmm`s of `AV`'s gradient (`dP = dO·Vᵀ`, `dV = Pᵀ·dO`),
    /// dropout's and the softmax's backward, and the two of `QKᵀ`'s (`dQ = dS·K`, `dK = dSᵀ·Q`).
    /// With grouped K/V heads, K and V are first expanded to the query heads
    /// (`repeat_interleave`, a copy; backward the sum over each group). Megatron-LM
    /// `megatron/model/transformer.py` at cbad126a84 (`baddbmm` line 270,
    /// `FusedScaleMaskSoftmax` 301, `attention_dropout` 307, `bmm` 331); Megatron-Core
    /// `transformer/dot_product_attention.py` at d98e8a64 (`repeat_interleave` 170-173,
    /// `baddbmm` 194, softmax 210, dropout 218, `bmm` 239). They run one after another on the
    /// stream, so each is timed alone (its own roofline), not the chain as one
    /// `max(flops, bytes)`.
    ///
    /// A batched GEMM (`torch.bmm`, cuBLAS's strided-batched kernel) is one launch over every
    /// head's tiles: timed as one GEMM of `batch·m` rows, the same tiles when `m` is a multiple
    /// of the tile height (sequence lengths are). It computes in the activation dtype (BF16 under
    /// FP8 training: Transformer Engine quantizes only its linear layers). The score passes are
    /// per score: forward `QKᵀ`'s write (1), the softmax's ([`softmax_passes`]), dropout's read,
    /// write and 1-byte mask (2 + mask), `AV`'s read (1); backward `dP`'s write (1), `dV`'s read
    /// of the saved probabilities (1), dropout's backward (2 + mask), the softmax's, and the `dQ`
    /// and `dK` GEMMs' reads of the scores' gradient (2). Without dropout no dropout kernels run
    /// (PyTorch's dropout at `p = 0` returns its input: ATen `Dropout.cpp`).
    fn unfused_attention(&self, keys: u64, shape: &str) -> (Vec<OpSpec>, Vec<OpSpec>) {
        let d = self.d;
        let dt = d.dt as f64;
        let heads = d.b * d.a_l;
        let scores = (heads * d.sl * keys) as f64;
        // Q and O elements (local heads), and K and V at every local query head: the unfused path
        // expands grouped K/V heads to the query heads before its `bmm`s.
        let (q, o) = ((heads * d.sl * d.dqk) as f64, (heads * d.sl * d.dv) as f64);
        let (k, v) = ((heads * keys * d.dqk) as f64, (heads * keys * d.dv) as f64);
        let bmm = |name: &'static str, pass: Pass, m: u64, n: u64, kk: u64, bytes: f64| {
            let g = GemmShape {
                m: heads * m,
                n,
                k: kk,
                batch: 1,
            };
            let mut op = compute(name, pass, OpClass::Gemm, g.flops(), bytes * dt, shape);
            op.kernel = Some(KernelShape::Gemm(g));
            op.dtype = d.fp8.then_some(DType::Bf16);
            op
        };
        let (sm_fwd, sm_bwd) = softmax_passes(d.softmax, keys == d.s);
        let mask = if d.dropout { 2.0 * dt + 1.0 } else { 0.0 };
        let mut fwd = Vec::new();
        let mut expand_bwd = None;
        if d.a_l > d.kv_l {
            let expanded = k + v;
            let grouped = (d.b * d.kv_l * keys * (d.dqk + d.dv)) as f64;
            let copy = |name, pass| compute(name, pass, OpClass::Elementwise, 0.0, (expanded + grouped) * dt, shape);
            fwd.push(copy("core_attention_kv_expand", Pass::Forward));
            expand_bwd = Some(copy("core_attention_kv_expand_bwd", Pass::BackwardInput));
        }
        fwd.extend([
            bmm("core_attention_qk", Pass::Forward, d.sl, keys, d.dqk, q + k + scores),
            compute(
                "core_attention_softmax",
                Pass::Forward,
                OpClass::Softmax,
                0.0,
                scores * sm_fwd * dt,
                shape,
            ),
        ]);
        let mut bwd = vec![
            bmm("core_attention_av_dp", Pass::BackwardInput, d.sl, keys, d.dv, o + v + scores),
            bmm("core_attention_av_dv", Pass::BackwardInput, keys, d.dv, d.sl, scores + o + v),
        ];
        if d.dropout {
            fwd.push(compute(
                "core_attention_dropout",
                Pass::Forward,
                OpClass::Elementwise,
                0.0,
                scores * mask,
                shape,
            ));
            bwd.push(compute(
                "core_attention_dropout_bwd",
                Pass::BackwardInput,
                OpClass::Elementwise,
                0.0,
                scores * mask,
                shape,
            ));
        }
        fwd.push(bmm("core_attention_av", Pass::Forward, d.sl, d.dv, keys, scores + v + o));
        bwd.extend([
            compute(
                "core_attention_softmax_bwd",
                Pass::BackwardInput,
                OpClass::Softmax,
                0.0,
                scores * sm_bwd * dt,
                shape,
            ),
            bmm("core_attention_qk_dq", Pass::BackwardInput, d.sl, d.dqk, keys, scores + k + q),
            bmm("core_attention_qk_dk", Pass::BackwardInput, keys, d.dqk, d.sl, scores + q + k),
        ]);
        bwd.extend(expand_bwd);
        (fwd, bwd)
    }

    /// Core attention as PyTorch's experimental ring attention runs it under TorchTitan
    /// (`parallel.cp_impl: torch_ring` / `torch_ring_eager`; pytorch/pytorch
    /// `torch/distributed/tensor/experimental/_attention.py`, `_templated_ring_attention` and
    /// `_templated_ring_attention_backward`; rotate method `allgather`, TorchTitan's
    /// `context_parallel_rotate_method` default at 9dec370; causal load balancing,
    /// `enable_load_balance = True`). Per rank, with `sl` local queries in two chunks:
    /// - forward: the K/V packed into one send buffer (`torch.cat`), one all-gather of the K/V
    ///   that SDPA receives (`_AllGatherRotater`; TorchTitan's Llama repeats the K/V heads to the
    ///   query heads before SDPA, so `a_l` heads of `dqk + dv`), then one SDPA call per step:
    ///   step 0 over the local block with the causal mask, steps `1..cp` without a mask over half
    ///   the block (`i <= rank`: all queries, the first key chunk; `i > rank`: the second query
    ///   chunk, all keys). The last rank runs the first kind at every step, the smaller kernels
    ///   (`s_kv = sl/2`), and sets the pace: its shapes are the ones timed. After each step
    ///   `_SDPAMerger` folds the step's output and logsumexp into the running ones in fp32
    ///   (`convert_to_f32`).
    /// - backward: the same pack and all-gather, one SDPA backward call per step, and per step
    ///   the fp32 dK/dV accumulated (`_partial_update`: the received sum plus this step's half,
    ///   written whole) and sent on to the next rank (`_AllToAllRotater`, `permute_tensor`: an
    ///   all-to-all in which each rank sends its buffer to one peer); dQ accumulates in fp32.
    ///   At the end dQ, dK, dV are cast back.
    ///
    /// Compiled (`torch_ring`, TorchTitan's `apply_compile` with `fullgraph=True`): the ring is
    /// traced into the block's graph, where a functional collective's `wait_tensor` follows it
    /// at once (`_functional_collectives.py` `_maybe_wrap_tensor` while tracing) and Inductor
    /// moves no wait without `reorder_for_compute_comm_overlap` (default off, not set by
    /// TorchTitan at 9dec370): every exchange blocks. The element-wise work fuses: one merge
    /// kernel per step (read the running output, fp32, the first step's own in bf16; read the
    /// step's; write fp32, the last in bf16; the fp32 logsumexp read twice, written once), one
    /// accumulation kernel each for dK/dV and dQ; the `cat`s after the first feed nothing under
    /// the all-gather rotater and are dead code.
    /// Eager (`torch_ring_eager`): collectives return `AsyncCollectiveTensor`s, waited at first
    /// use, so the all-gather runs beside step 0 and each dK/dV exchange beside the next step's
    /// kernel; every tensor op is its own kernel: the merge is a cast and eight element-wise
    /// kernels per step, the `cat` of the K/V runs at every step, dQ/dK/dV start as fp32 zeros.
    ///
    /// Sliding-window layers (which PyTorch's ring does not support) keep the `megatron` model.
    fn torch_ring_attention(&mut self, eager: bool) {
        let d = self.d;
        let dt = d.dt as f64;
        let mut shape = d.shape_with(&format!("heads={},kv={},kv_s={},cp_impl=torch_ring", d.a_l, d.kv_l, d.s));
        if eager {
            shape.push_str(",eager=1");
        }
        if d.dqk != d.d || d.dv != d.d {
            shape.push_str(&format!(",dqk={},dv={}", d.dqk, d.dv));
        }
        let steps = d.cp - 1;
        let half = d.sl / 2;
        let q = (d.tok * d.a_l * d.dqk) as f64;
        let o = (d.tok * d.a_l * d.dv) as f64;
        let rows = (d.tok * d.a_l) as f64;
        // K/V elements of the local block as SDPA gets them (query heads).
        let kv = d.tok * d.a_l * (d.dqk + d.dv);
        let kvf = kv as f64;
        let gather_bytes = kv * d.cp * d.dt;
        // One rank's whole fp32 dK/dV to one peer, timed as an all-to-all moving those bytes off
        // the rank: an all-to-all keeps 1/cp of its per-rank buffer home, so the buffer is
        // cp/(cp-1) of them (rounded up).
        let permute_bytes = (4 * kv * d.cp).div_ceil(steps);
        // Kernels beside a collective before the stream waits for it (0: it blocks).
        let beside = |n: u32| if eager { n } else { 0 };
        let attn = |s_kv: u64, causal: bool, backward: bool| AttentionShape {
            batch_heads: d.b * d.a_l,
            s_q: d.sl,
            s_kv,
            head_dim: d.dqk,
            causal,
            backward,
            kernel: d.attn_kernel,
        };
        // One SDPA call over `s_kv` keys: FLOPs in the module's convention (the full QKᵀ and AV;
        // the causal step's kernel does half), bytes q, o and the keys' K/V once.
        let kernel = |name: &'static str, pass: Pass, s_kv: u64, causal: bool| {
            let flops = 2.0 * (q + o) * s_kv as f64;
            let bytes = (q + o + (d.b * s_kv * d.a_l * (d.dqk + d.dv)) as f64) * dt;
            let backward = pass != Pass::Forward;
            let (flops, bytes) = if backward { (2.5 * flops, 2.0 * bytes) } else { (flops, bytes) };
            let mut k = compute(name, pass, OpClass::FlashAttention, flops, bytes, &shape);
            k.kernel = Some(KernelShape::Attention(attn(s_kv, causal, backward)));
            k
        };
        let ew =
            |name: &'static str, pass: Pass, elems: f64, bytes: f64| compute(name, pass, OpClass::Elementwise, 2.0 * elems, bytes, &shape);
        // The all-gather's send buffer, `torch.cat` of the flattened K and V (read, written).
        // Eager first copies the transposed K and V contiguous (`key.contiguous()`).
        let pack = |pass: Pass, first: bool| {
            let copies = if eager && first { 2.0 } else { 1.0 };
            ew("cp_ring_kv_pack", pass, kvf, copies * 2.0 * kvf * dt)
        };
        // The cast of a step's bf16 output to fp32 (`convert_to_f32`).
        let cast_in = |pass: Pass| ew("cp_ring_merge_cast", pass, o, o * (dt + 4.0));

        let mut fwd = vec![
            pack(Pass::Forward, true),
            comm_async(
                "cp_kv_allgather",
                Pass::Forward,
                CollectiveOp::AllGather,
                gather_bytes,
                beside(2),
                &shape,
            ),
            kernel("core_attention", Pass::Forward, d.sl, true),
        ];
        if eager {
            fwd.push(cast_in(Pass::Forward));
        }
        for i in 1..=steps {
            if eager && i < steps {
                fwd.push(pack(Pass::Forward, false));
            }
            fwd.push(kernel("core_attention_ring", Pass::Forward, half, false));
            let merge = if eager {
                fwd.push(cast_in(Pass::Forward));
                // lse: block - running, sigmoid, running - block, logsigmoid, running - that
                // (12, 8, 12, 8, 12 bytes per row); out: running - block (12 per element), the
                // sigmoid times it (8, and the row's factor), running - that (12).
                o * 32.0 + rows * 56.0
            } else {
                let read_running = if i == 1 { dt } else { 4.0 };
                let write = if i == steps { dt } else { 4.0 };
                o * (read_running + dt + write) + 12.0 * rows
            };
            fwd.push(ew("cp_ring_merge", Pass::Forward, o, merge));
        }
        if eager {
            fwd.push(ew("cp_ring_merge_cast", Pass::Forward, o, o * (4.0 + dt)));
        }

        let bi = Pass::BackwardInput;
        let mut bwd = Vec::new();
        if eager {
            bwd.push(ew("cp_ring_grad_zeros", bi, q + kvf, 4.0 * (q + kvf)));
        }
        bwd.push(pack(bi, true));
        bwd.push(comm_async(
            "cp_kv_allgather_bwd",
            bi,
            CollectiveOp::AllGather,
            gather_bytes,
            beside(2),
            &shape,
        ));
        bwd.push(kernel("core_attention_bwd", bi, d.sl, true));
        for i in 0..=steps {
            if i > 0 {
                if eager && i < steps {
                    bwd.push(pack(bi, false));
                }
                bwd.push(kernel("core_attention_ring_bwd", bi, half, false));
            }
            // dK/dV in fp32: step 0 adds its own to zeros (compiled: casts them); later steps
            // add theirs (half the keys) to the received sum and write it whole (eager: the add
            // in place on the half, then `torch.cat` of the two halves); eager then packs dK
            // and dV into the send buffer (`torch.cat`, fp32).
            let dkv = match (eager, i) {
                (false, 0) => kvf * (dt + 4.0),
                (false, _) => kvf * (4.0 + dt / 2.0 + 4.0),
                (true, 0) => kvf * (4.0 + dt + 4.0) + kvf * 8.0,
                (true, _) => kvf / 2.0 * (4.0 + dt + 4.0) + kvf * 8.0 + kvf * 8.0,
            };
            bwd.push(ew("cp_ring_dkv_accum", bi, kvf, dkv));
            // Beside the exchange: this step's dQ accumulation and, but after the last step,
            // the next step's kernel (eager: and its K/V `cat`).
            let next = if i == steps {
                0
            } else if eager && i + 1 < steps {
                2
            } else {
                1
            };
            bwd.push(comm_async(
                "cp_dkv_permute",
                bi,
                CollectiveOp::AllToAll,
                permute_bytes,
                beside(1 + next),
                &shape,
            ));
            let dq = if i == 0 && !eager { q * (dt + 4.0) } else { q * (4.0 + dt + 4.0) };
            bwd.push(ew("cp_ring_dq_accum", bi, q, dq));
        }
        bwd.push(ew("cp_ring_grad_cast", bi, q + kvf, (q + kvf) * (4.0 + dt)));
        self.steps.push(Step {
            fwd,
            bwd,
            modules: self.cur | RecomputeModule::CoreAttn.bit(),
        });
    }

    /// The merges of Transformer Engine's context-parallel attention (`AttnFuncWithCPAndKVP2P`,
    /// Megatron's default `cp_comm_type: p2p`): the attention runs as `cp` kernels, one per ring
    /// step, and each step's partial result is merged into the running one. Forward: the running
    /// softmax statistics (fp32, one per query row and head: read both, write one) and the output
    /// (`flash_attn_fwd_out_correction`: read the step's output and the running output, write it;
    /// the first step writes a scaled copy). Backward: `dq` and `dk`/`dv` accumulate each step's
    /// partial gradients the same way (read both, write one; the first step copies). With a causal
    /// mask and the load-balanced chunk order, every step after the first covers half of the local
    /// queries or half of the received keys on half of the ranks, so steps `1..cp` merge 3/4 of
    /// the elements on average. The per-step kernels themselves are timed as the one kernel of
    /// [`Self::core_attention`] (same FLOPs); FP8 attention's fp32 buffers are not modelled.
    /// FLOPs: 2 per merged element (scale, add); the profiler reads the element count from them.
    fn cp_merges(&self, q: f64, o: f64, causal: bool, shape: &str) -> (OpSpec, OpSpec) {
        let d = self.d;
        let dt = d.dt as f64;
        let steps = (d.cp - 1) as f64;
        let part = if causal { 0.75 } else { 1.0 };
        // Elements merged over the cp steps, and bytes: a copy (2) then read-read-write (3).
        let merged = |e: f64| (e * (1.0 + part * steps), dt * e * (2.0 + 3.0 * part * steps));
        let rows = (d.tok * d.a_l) as f64;
        let (fe, fb) = merged(o);
        let fwd = compute(
            "cp_attn_merge",
            Pass::Forward,
            OpClass::Elementwise,
            2.0 * fe,
            fb + 12.0 * rows * steps,
            shape,
        );
        let kv_local = (d.tok * d.kv_l * (d.dqk + d.dv)) as f64;
        let (qe, qb) = merged(q);
        let (ke, kb) = merged(kv_local);
        let bwd = compute(
            "cp_attn_merge_bwd",
            Pass::BackwardInput,
            OpClass::Elementwise,
            2.0 * (qe + ke),
            qb + kb,
            shape,
        );
        (fwd, bwd)
    }

    /// What TorchTitan's op-level selective checkpointing ([`Recompute::SelectiveOp`]) re-runs
    /// of `forward`: every compute op but the fused attention kernels (SDPA's output is saved,
    /// and Transformer Engine's context-parallel merges belong to that kernel); TP all-gathers
    /// and all-reduces but not reduce-scatters (saved); and of the GEMMs, the `aten.mm` calls at
    /// even positions in the block's forward order. TorchTitan runs Q, K, V and the gated MLP's
    /// w1 and w3 as separate `mm`s where llmsim fuses them, so a fused GEMM contributes one
    /// sub-GEMM per `mm` (its columns split as the weights are), and a re-run part is a GEMM of
    /// that many columns. Under torchao's Float8 the same `mm`s are saved: the policy is a
    /// `TorchDispatchMode`, which sees `aten.mm` before the `Float8Tensor` subclass turns it into
    /// `_scaled_mm` (modes dispatch before subclasses; PyTorch `python_arg_parser.cpp`, note
    /// "[__torch_dispatch__ dispatching order]"), and TorchTitan's published memory is the same
    /// with and without Float8 (77.0 and 76.8 GiB, `docs/performance.md` at d4c86e3).
    fn op_policy_recompute(&self, forward: &[OpSpec], gated_mlp: bool) -> Vec<OpSpec> {
        let d = self.d;
        let mut mm_count = 0u64;
        let mut out = Vec::new();
        for op in forward {
            match op.kind {
                OpSpecKind::Comm { op: c, group, .. } => {
                    if group == CommGroup::Tp && c != CollectiveOp::ReduceScatter {
                        out.push(op.with_pass(Pass::Recompute));
                    }
                }
                OpSpecKind::HostCopy { .. } => {}
                OpSpecKind::Compute { class, .. } => match class {
                    OpClass::FlashAttention | OpClass::Attention => {}
                    _ if op.name == "cp_attn_merge" => {}
                    OpClass::Gemm => {
                        // The `mm`s this GEMM stands for, as column counts of its output.
                        let parts: Vec<u64> = match op.name {
                            "attn_qkv" => vec![d.a_l * d.d, d.kv_l * d.d, d.kv_l * d.d],
                            "mlp_fc1" if gated_mlp => {
                                let n = op.kernel.map_or(0, |k| match k {
                                    KernelShape::Gemm(g) => g.n / 2,
                                    _ => 0,
                                });
                                vec![n, n]
                            }
                            _ => vec![0],
                        };
                        for (i, &cols) in parts.iter().enumerate() {
                            mm_count += 1;
                            if !mm_count.is_multiple_of(2) {
                                continue;
                            }
                            if parts.len() == 1 {
                                out.push(op.with_pass(Pass::Recompute));
                            } else {
                                out.push(sub_gemm(op, cols, parts.iter().sum(), i));
                            }
                        }
                    }
                    _ => out.push(op.with_pass(Pass::Recompute)),
                },
            }
        }
        out
    }

    /// The layer's ops: forward, then backward in reverse step order with the recomputation of
    /// `recompute` / `mask`. Full recomputation (and TorchTitan's op policy) re-runs the layer's
    /// forward before its backward, as one checkpoint over the layer does. Selective
    /// recomputation re-runs each run of consecutive recomputed steps (one submodule, e.g. core
    /// attention, a norm, the experts' activation, or the whole MoE block) where Megatron-Core
    /// does: `tensor_parallel.checkpoint` inside the checkpointed function's backward (just
    /// before the run's own backward); `CheckpointWithoutOutput`
    /// ([`RecomputeModule::WITHOUT_OUTPUT`]) from a hook on the output of the module that reads
    /// it, so before the next step's backward (exact for the experts' activation, whose reader is
    /// fc2; a norm's reader spans several steps, of which this takes the last). Which kernels
    /// re-run is the same either way; where they run matters to what waits on the host (a
    /// recomputed host-synchronizing op such as GPT-OSS's activation).
    fn finish(self, recompute: Recompute, mask: u8, gated_mlp: bool) -> LayerOps {
        let forward: Vec<OpSpec> = self.steps.iter().flat_map(|s| s.fwd.iter().cloned()).collect();
        let mut backward: Vec<OpSpec> = match recompute {
            Recompute::Full => forward.iter().map(|o| o.with_pass(Pass::Recompute)).collect(),
            Recompute::SelectiveOp => self.op_policy_recompute(&forward, gated_mlp),
            Recompute::None | Recompute::Selective => Vec::new(),
        };
        let selective = matches!(recompute, Recompute::None | Recompute::Selective);
        let n = self.steps.len();
        let rec = |i: usize| selective && self.steps[i].modules & mask != 0;
        // A recomputed run ending at step `i` (its last in forward order) and where it re-runs:
        // before step `i`'s own backward, or, when every step of it is recomputed as a
        // `CheckpointWithoutOutput` module, before the backward of its consumer, step `i + 1`.
        let run_end = |i: usize| rec(i) && (i + 1 == n || !rec(i + 1));
        let early = |i: usize| {
            let start = (0..=i).rev().take_while(|&j| rec(j)).last().unwrap_or(i);
            let early = (start..=i).all(|j| self.steps[j].modules & mask & !RecomputeModule::WITHOUT_OUTPUT == 0);
            (start, early && i + 1 < n)
        };
        let rerun = |backward: &mut Vec<OpSpec>, start: usize, end: usize| {
            backward.extend(
                self.steps[start..=end]
                    .iter()
                    .flat_map(|s| s.fwd.iter().map(|o| o.with_pass(Pass::Recompute))),
            );
        };
        for i in (0..n).rev() {
            if i > 0
                && run_end(i - 1)
                && let (start, true) = early(i - 1)
            {
                rerun(&mut backward, start, i - 1);
            }
            if run_end(i)
                && let (start, false) = early(i)
            {
                rerun(&mut backward, start, i);
            }
            backward.extend(self.steps[i].bwd.iter().cloned());
        }
        LayerOps { forward, backward }
    }
}

/// One layer (Megatron GPT layer, pre-norm): input norm, QKV, core attention, output
/// projection, residual, post-attention norm, MLP (or router + experts + shared experts),
/// residual; and its backward, with recomputation per `t.recompute`. Hybrid models' layers hold
/// one block each (Megatron-Core `MambaStack`): a Mamba-2 mixer, attention, an MLP or an MoE
/// block, each pre-normed with its residual.
pub fn transformer_layer(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, layer: u64) -> LayerOps {
    if t.layer_in_bf16(layer, m.num_hidden_layers) {
        // Megatron-Core runs it outside the FP8/FP4 autocast: built as a BF16 run's layer.
        let mut ops = transformer_layer(m, &t.with_gemm_dtype(DType::Bf16), p, layer);
        ops.gemms_in(DType::Bf16);
        return ops;
    }
    let d = Dims::new(m, t, p);
    let mut bld = Builder::new(&d);
    match m.layer_kind(layer) {
        LayerKind::Dense | LayerKind::Moe => {
            input_norm(&mut bld, "input_norm", "input_norm_bwd");
            attention(&mut bld, m, t, layer);
            bld.residual("attn_residual", "attn_residual_bwd");
            input_norm(&mut bld, "post_attn_norm", "post_attn_norm_bwd");
            if m.is_moe(layer) {
                bld.within(RecomputeModule::Moe, |b| moe_mlp(b, m, p));
            } else {
                dense_mlp(&mut bld, m);
            }
            bld.residual("mlp_residual", "mlp_residual_bwd");
        }
        LayerKind::Attention => {
            input_norm(&mut bld, "input_norm", "input_norm_bwd");
            attention(&mut bld, m, t, layer);
            bld.residual("attn_residual", "attn_residual_bwd");
        }
        LayerKind::Mlp => {
            input_norm(&mut bld, "input_norm", "input_norm_bwd");
            dense_mlp(&mut bld, m);
            bld.residual("mlp_residual", "mlp_residual_bwd");
        }
        LayerKind::MoeMlp => {
            input_norm(&mut bld, "input_norm", "input_norm_bwd");
            bld.within(RecomputeModule::Moe, |b| moe_mlp(b, m, p));
            bld.residual("mlp_residual", "mlp_residual_bwd");
        }
        LayerKind::Mamba => {
            input_norm(&mut bld, "input_norm", "input_norm_bwd");
            mamba_mixer(&mut bld, m);
            bld.residual("mixer_residual", "mixer_residual_bwd");
        }
    }
    let mut ops = bld.finish(t.recompute, t.recompute_mask(), m.gated_mlp);
    if p.moe_a2a_overlap && p.delay_wgrad_compute && m.is_moe(layer) {
        delay_expert_wgrad(&mut ops.backward);
    }
    ops
}

/// `parallel.delay_wgrad_compute`: the weight-gradient kernels between an MoE layer's backward
/// combine all-to-all and its backward dispatch all-to-all (the experts' and what else sits
/// there) move to just after the dispatch, which no longer waits for them and runs beside them
/// (an asynchronous collective, `beside` = their count); what follows waits for it. In the
/// merged forward-backward step the other micro-batch's expert forward joins them.
fn delay_expert_wgrad(backward: &mut Vec<OpSpec>) {
    let is_ep = |o: &OpSpec| {
        matches!(
            o.kind,
            OpSpecKind::Comm {
                group: CommGroup::Ep | CommGroup::EpInter | CommGroup::EpIntra,
                ..
            }
        )
    };
    let Some(first) = backward.iter().position(is_ep) else { return };
    // The end of the first run of EP collectives (the combine's backward), and the start and
    // end of the last run (the dispatch's backward).
    let combine_end = first + backward[first..].iter().take_while(|o| is_ep(o)).count();
    let Some(last) = backward.iter().rposition(is_ep) else { return };
    if last < combine_end {
        return;
    }
    let mut dispatch_start = last;
    while dispatch_start > combine_end && is_ep(&backward[dispatch_start - 1]) {
        dispatch_start -= 1;
    }
    let (wgrad, rest): (Vec<OpSpec>, Vec<OpSpec>) = backward[combine_end..dispatch_start]
        .iter()
        .cloned()
        .partition(OpSpec::is_weight_gradient);
    if wgrad.is_empty() {
        return;
    }
    let mut dispatch: Vec<OpSpec> = backward[dispatch_start..=last].to_vec();
    // The dispatch runs beside the delayed kernels; what follows them waits for it.
    if let Some(OpSpecKind::Comm { beside, .. }) = dispatch.last_mut().map(|o| &mut o.kind) {
        *beside = wgrad.len() as u32;
    }
    let tail: Vec<OpSpec> = backward[last + 1..].to_vec();
    backward.truncate(combine_end);
    backward.extend(rest);
    backward.extend(dispatch);
    backward.extend(wgrad);
    backward.extend(tail);
}

/// A block's pre-norm (the `layernorm` recompute module).
fn input_norm(bld: &mut Builder, fwd: &'static str, bwd: &'static str) {
    let tok = bld.d.tok_sp;
    bld.within(RecomputeModule::Layernorm, |b| b.norm(fwd, bwd, tok));
}

fn dense_mlp(bld: &mut Builder, m: &ModelConfig) {
    bld.within(RecomputeModule::Mlp, |b| {
        b.mlp(
            (gemm_names!("mlp_fc1"), "mlp_act", "mlp_act_bwd", gemm_names!("mlp_fc2")),
            m,
            m.intermediate_size,
        );
    });
}

/// QKV (or MLA's projections), core attention over the layer's window, output projection.
fn attention(bld: &mut Builder, m: &ModelConfig, t: &TrainingConfig, layer: u64) {
    let d = bld.d;
    let attn_shape = d.shape_with(&format!("heads={},kv={}", d.a_l, d.kv_l));
    let keys = m.attended_keys(layer, d.s);
    let rope = m.position_embedding_type == PositionEmbedding::Rope;
    match &m.mla {
        None => {
            let qkv_n = (d.a_l + 2 * d.kv_l) * d.d;
            bld.gemm(gemm_names!("attn_qkv"), Split::Column, d.tok, d.h, qkv_n, d.h * qkv_n, &attn_shape);
            if m.qk_norm {
                // Megatron-Core's q_layernorm and k_layernorm: an RMSNorm over each head.
                bld.norm_width("attn_qk_norm", "attn_qk_norm_bwd", d.tok * (d.a_l + d.kv_l), d.d, &attn_shape);
            }
            if rope && t.rope_fusion {
                bld.rope(d.tok * (d.a_l + d.kv_l) * d.d, &attn_shape);
            } else if rope {
                bld.rope_eager(("rope_q", "rope_q_bwd"), d.tok * d.a_l * d.d, &attn_shape);
                bld.rope_eager(("rope_k", "rope_k_bwd"), d.tok * d.kv_l * d.d, &attn_shape);
            }
        }
        Some(mla) => {
            mla_projections(bld, mla, &attn_shape);
            if rope && t.rope_fusion {
                // MLA rotates only the RoPE part: each query head's and the one shared key's.
                bld.rope(d.tok * (d.a_l + 1) * mla.qk_rope_head_dim, &attn_shape);
            } else if rope {
                mla_eager_assembly(bld, mla, &attn_shape);
            }
        }
    }
    bld.core_attention(t.flash_attention, keys);
    let proj_k = d.a_l * d.dv;
    bld.gemm(gemm_names!("attn_proj"), Split::Row, d.tok, proj_k, d.h, proj_k * d.h, &attn_shape);
}

/// MLA's RoPE and head assembly in eager PyTorch (`training.rope_fusion: false`; NeMo
/// Automodel `models/deepseek_v3/layers.py` `MLA.forward` at 8d9bfb90e), bytes read plus written
/// per token and local head `H`: the complex RoPE of the query's RoPE parts (`H · 64` elements)
/// and of the one shared key; forward the `cat` of the query's parts (768 bytes at 128 + 64
/// bf16 dims), the key's (its no-RoPE part read and written, the shared part read once: 640),
/// `v.contiguous()` before Transformer Engine's attention (512), and the latent's contiguous
/// copy before its norm; backward the `cat`s the projections' splits make of their gradients
/// (the query's 768, the key-value up-projection's 1,024, the latent's) and the sum of the
/// shared key's gradient over heads (128).
fn mla_eager_assembly(bld: &mut Builder, mla: &MlaConfig, shape: &str) {
    let d = bld.d;
    let (rope, nope, v, dt) = (mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim, d.dt);
    let th = d.tok * d.a_l;
    bld.rope_complex(("rope_q", "rope_q_bwd"), th * rope, shape);
    bld.rope_complex(("rope_k", "rope_k_bwd"), d.tok * rope, shape);
    // One copy kernel each way per piece: (bytes read plus written forward, backward).
    let copy = |bld: &mut Builder, names, fwd: u64, bwd: u64| bld.eager_kernels(names, &[(fwd as f64, 0.0)], &[(bwd as f64, 0.0)], shape);
    let q = th * (nope + rope) * dt;
    copy(bld, ("mla_cat_q", "mla_cat_q_bwd"), 2 * q, 2 * q);
    let k = th * (2 * nope + rope) * dt;
    copy(bld, ("mla_cat_k", "mla_k_rope_sum_bwd"), k, th * rope * dt);
    let kv_up = th * (nope + v) * dt;
    copy(bld, ("mla_v_contiguous", "mla_cat_kv_bwd"), 2 * th * v * dt, 2 * kv_up);
    let latent = d.tok_sp * mla.kv_lora_rank * dt;
    let kv_down = d.tok_sp * (mla.kv_lora_rank + rope) * dt;
    copy(bld, ("mla_latent_contiguous", "mla_cat_latent_bwd"), 2 * latent, 2 * kv_down);
}

/// MLA's projections as Megatron-Core's `MLASelfAttention` runs them: the down-projections
/// (`linear_q_down_proj`, `linear_kv_down_proj`) are replicated over TP and run on this rank's
/// tokens (`tok/tp` with sequence parallelism, the all-gathered `tok` without); the up-projections
/// are column-parallel over heads, their TP collectives carrying the latent (`q_lora_rank`,
/// `kv_lora_rank + qk_rope_head_dim` per token) instead of the hidden state.
fn mla_projections(bld: &mut Builder, mla: &MlaConfig, shape: &str) {
    let d = bld.d;
    let tok_in = d.tok_sp;
    let latent_bytes = |w: u64| d.tok * w * d.dt;
    let q_n = d.a_l * mla.qk_head_dim();
    if mla.q_lora_rank > 0 {
        let r = mla.q_lora_rank;
        bld.gemm_comm(gemm_names!("attn_q_down"), Split::Local, tok_in, d.h, r, d.h * r, shape, 0);
        bld.norm_width("attn_q_norm", "attn_q_norm_bwd", tok_in, r, shape);
        bld.within(RecomputeModule::MlaUpProj, |b| {
            b.gemm_comm(
                gemm_names!("attn_q_up"),
                Split::Column,
                d.tok,
                r,
                q_n,
                r * q_n,
                shape,
                latent_bytes(r),
            );
        });
    } else {
        bld.gemm(gemm_names!("attn_q"), Split::Column, d.tok, d.h, q_n, d.h * q_n, shape);
    }
    let kv_in = mla.kv_lora_rank + mla.qk_rope_head_dim;
    bld.gemm_comm(gemm_names!("attn_kv_down"), Split::Local, tok_in, d.h, kv_in, d.h * kv_in, shape, 0);
    bld.norm_width("attn_kv_norm", "attn_kv_norm_bwd", tok_in, mla.kv_lora_rank, shape);
    let r = mla.kv_lora_rank;
    let kv_n = d.a_l * (mla.qk_nope_head_dim + mla.v_head_dim);
    bld.within(RecomputeModule::MlaUpProj, |b| {
        b.gemm_comm(
            gemm_names!("attn_kv_up"),
            Split::Column,
            d.tok,
            r,
            kv_n,
            r * kv_n,
            shape,
            latent_bytes(kv_in),
        );
    });
}

/// A Mamba-2 mixer (Megatron-Core `MambaMixer`, heads and groups sharded over TP): in_proj
/// (column-parallel), the depthwise causal conv1d over x, B, C, the SSD chunked scan, the group
/// RMSNorm, out_proj (row-parallel). The gate `y·silu(z)` runs where `training.mamba_gate` says:
/// in the scan (Megatron-Core: `mamba_split_conv1d_scan_combined` without `rmsnorm_weight`,
/// `llmsim_compute::ssd`; `ExtendedRMSNorm` then runs without z) or in the fused gated norm.
///
/// SSD FLOPs follow the four steps of the chunked algorithm (Dao & Gu 2024, "Transformers are
/// SSMs", §6, chunk length Q, state N, head dim P), per token: the intra-chunk `C·Bᵀ` per group
/// `2·Q·N` and its product with x per head `2·Q·P`; the chunk states `Bᵀ·x` per head `2·N·P`;
/// the state-to-output `C·state` per head `2·N·P`; the inter-chunk state recurrence (`2·N·P/Q` per
/// head) is negligible and left out. The scan is counted in full within a chunk, as attention is
/// counted without causal halving. Backward is 2× (each product has two gradient products);
/// HBM traffic and time are those of mamba_ssm's Triton kernels, summed over the kernels
/// (`llmsim_compute::ssd`).
fn mamba_mixer(bld: &mut Builder, m: &ModelConfig) {
    let Some(mb) = &m.mamba else { return };
    let d = bld.d;
    let dt = d.dt as f64;
    let nh_l = mb.num_heads / d.tp;
    let g_l = (mb.n_groups / d.tp).max(1);
    let di_l = nh_l * mb.head_dim;
    let n = mb.state_size;
    let conv_l = di_l + 2 * g_l * n;
    let in_n = 2 * di_l + 2 * g_l * n + nh_l;
    let shape = d.shape_with(&format!(
        "mamba_heads={nh_l},head_dim={},state={n},groups={g_l},chunk={}",
        mb.head_dim, mb.chunk_size
    ));
    bld.gemm(gemm_names!("mamba_in_proj"), Split::Column, d.tok, d.h, in_n, d.h * in_n, &shape);
    // Depthwise causal conv + SiLU: 2·K FLOPs per channel and token; reads and writes each once.
    let ce = (d.tok * conv_l) as f64;
    let k = mb.conv_kernel as f64;
    let conv_w = (conv_l * (mb.conv_kernel + 1)) as f64;
    bld.push(
        vec![compute(
            "mamba_conv1d",
            Pass::Forward,
            OpClass::Elementwise,
            2.0 * k * ce,
            2.0 * ce * dt + conv_w * dt,
            &shape,
        )],
        vec![compute(
            "mamba_conv1d_bwd",
            Pass::BackwardInput,
            OpClass::Elementwise,
            4.0 * k * ce,
            3.0 * ce * dt + conv_w * 8.0,
            &shape,
        )],
    );
    let (q, nf, pf) = (mb.chunk_size.min(d.sl) as f64, n as f64, mb.head_dim as f64);
    let tokf = d.tok as f64;
    let per_tok = g_l as f64 * 2.0 * q * nf + nh_l as f64 * (2.0 * q * pf + 4.0 * nf * pf);
    let flops = tokf * per_tok;
    let ssd = SsdShape {
        tokens: d.tok,
        heads: nh_l,
        head_dim: mb.head_dim,
        state: n,
        groups: g_l,
        chunk: mb.chunk_size.min(d.sl).max(1),
        backward: false,
        gated: d.mamba_gate == MambaGate::Scan,
    };
    let bwd = SsdShape { backward: true, ..ssd };
    let mut f = compute(
        "mamba_ssd_scan",
        Pass::Forward,
        OpClass::Attention,
        flops,
        llmsim_compute::ssd::hbm_bytes(&ssd),
        &shape,
    );
    f.kernel = Some(KernelShape::Ssd(ssd));
    let mut b = compute(
        "mamba_ssd_scan_bwd",
        Pass::BackwardInput,
        OpClass::Attention,
        2.0 * flops,
        llmsim_compute::ssd::hbm_bytes(&bwd),
        &shape,
    );
    b.kernel = Some(KernelShape::Ssd(bwd));
    bld.push(vec![f], vec![b]);
    // The group RMSNorm over d_inner/tp (Megatron-Core's `RMSNormGated` module; the op keeps
    // that name). Gated here (`mamba_gate: norm`): mamba_ssm's `_layer_norm_fwd` also reads z;
    // `_layer_norm_bwd` also reads z and writes dz, and re-writes the gated output that
    // out_proj's weight gradient reads (`recompute_output` with `outproj_weight`).
    let gated = d.mamba_gate == MambaGate::Norm;
    bld.norm_width_gated("mamba_gated_norm", "mamba_gated_norm_bwd", d.tok, di_l, &shape, gated);
    bld.gemm(gemm_names!("mamba_out_proj"), Split::Row, d.tok, di_l, d.h, di_l * d.h, &shape);
}

fn moe_mlp(bld: &mut Builder, m: &ModelConfig, p: &ParallelConfig) {
    let d = bld.d;
    let dt = d.dt as f64;
    let e = m.num_experts;
    let k = m.num_experts_per_tok;
    let ep = p.ep.max(1);
    let local = e / ep;
    // etp: 1 keeps experts whole: tokens go from their SP shard straight to the experts (no TP
    // gather), and each expert GEMM has the full FFN width.
    let whole = p.ep_spans_tp();
    let etp = p.expert_tp();
    let mut shape = d.shape_with(&format!("experts={local},topk={k},ffn={}", m.moe_intermediate_size));
    if whole {
        shape.push_str(",etp=1");
    }
    if m.moe_latent_size > 0 {
        shape.push_str(&format!(",latent={}", m.moe_latent_size));
    }
    // Router: [tok_sp, h]·[h, E] (replicated over TP), then top-k.
    let (ts, hf, ef) = (d.tok_sp as f64, d.h as f64, e as f64);
    if p.moe_routing == MoeRouting::RoundRobin {
        // NeMo Automodel's `FakeBalancedGate` (noise 0) has no weights: it writes each token's
        // k expert ids (int64) and weights (fp32) from an arange, with nothing to differentiate
        // (`components/moe/layers.py`, c0e4fe1bc).
        let kf = k as f64;
        bld.push(
            vec![compute("moe_router", Pass::Forward, OpClass::Router, 0.0, ts * kf * 12.0, &shape)],
            Vec::new(),
        );
    } else {
        // The gating GEMM runs on tensor cores. Megatron-Core 0.13+ (`moe_utils.py`
        // `RouterGatingLinearFunction`) calls Transformer Engine's `general_gemm` on the BF16
        // input and weight with an FP32 output (`moe_router_dtype: fp32`, as the Megatron-Bridge
        // recipes set it), outside FP8 autocast; its backward casts the weight, the FP32 logits'
        // gradient and the input to FP32, runs both GEMMs in FP32, which Transformer Engine
        // issues as TF32 (`cublaslt_gemm.cu`: `CUBLAS_COMPUTE_32F_FAST_TF32` for pure-FP32
        // GEMMs), and casts the gradients back. Before 0.13, `F.linear` on FP32 copies, which
        // NVIDIA's PyTorch containers also run as TF32 (`TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`).
        // With `moe_router_dtype` unset (GPT-OSS) the backward is BF16 instead: a small GEMM
        // either way, charged at TF32 here.
        let shape_f = GemmShape {
            m: d.tok_sp,
            n: e,
            k: d.h,
            batch: 1,
        };
        let flops = 2.0 * ts * hf * ef;
        let mut f = compute(
            "moe_router",
            Pass::Forward,
            OpClass::Gemm,
            flops,
            (ts * hf + hf * ef) * dt + ts * ef * 4.0,
            &shape,
        );
        f.kernel = Some(KernelShape::Gemm(shape_f));
        f.dtype = d.fp8.then_some(DType::Bf16);
        // Bytes: each GEMM's operands and output, the logits and their gradient in FP32; the FP32
        // path's casts of the input, weight and gradients are not counted separately.
        let mut dg = compute(
            "moe_router_dgrad",
            Pass::BackwardInput,
            OpClass::Gemm,
            flops,
            hf * ef * dt + ts * ef * 4.0 + ts * hf * dt,
            &shape,
        );
        dg.kernel = Some(KernelShape::Gemm(shape_f.dgrad()));
        let mut wg = compute(
            "moe_router_wgrad",
            Pass::BackwardWeight,
            OpClass::Gemm,
            flops,
            ts * hf * dt + ts * ef * 4.0 + hf * ef * 4.0,
            &shape,
        );
        wg.kernel = Some(KernelShape::Gemm(shape_f.wgrad()));
        for op in [&mut dg, &mut wg] {
            op.dtype = Some(DType::Tf32);
        }
        bld.push(vec![f], vec![dg, wg]);
    }
    // LatentMoE: tokens enter the experts' latent space before the permutation; everything up to
    // the un-permutation carries `w`-wide tokens.
    let w = m.expert_width();
    let latent = m.moe_latent_size > 0;
    if latent {
        bld.gemm(gemm_names!("moe_latent_down"), Split::Local, d.tok_sp, d.h, w, d.h * w, &shape);
    }
    let routed = d.tok_sp * k;
    let perm_bytes = 2.0 * (routed * w) as f64 * dt;
    bld.push(
        vec![compute("moe_permute", Pass::Forward, OpClass::Router, 0.0, perm_bytes, &shape)],
        vec![compute(
            "moe_permute_bwd",
            Pass::BackwardInput,
            OpClass::Router,
            0.0,
            perm_bytes,
            &shape,
        )],
    );
    // The all-to-all dispatcher sends a copy per (token, expert); the flex dispatcher one per
    // (token, destination rank) (see `MoeDispatcher::Flex`).
    let a2a = match p.moe_token_dispatcher {
        MoeDispatcher::AllToAll => routed * w * d.dt,
        MoeDispatcher::Flex => {
            let ranks = p
                .moe_routing
                .ranks_per_token_grouped(e, k, ep, m.moe_router_num_groups, m.moe_router_group_topk);
            (d.tok_sp as f64 * ranks * (w * d.dt) as f64).round() as u64
        }
    };
    // Over servers, flex sends a token once per destination server to the rank with its local
    // index there, which forwards it over NVLink (DeepEP internode normal kernels, HybridEP):
    // an all-to-all among the rails of `servers` ranks, in the all-to-all size convention
    // `tok · D · h · dt` for a token's `D` servers, of which `(servers - 1) / servers` leaves
    // the server; then an NVLink all-to-all of the per-rank copies (`a2a`). The combine runs
    // the reverse.
    let inter = match (p.moe_token_dispatcher, p.ep_servers()) {
        (MoeDispatcher::Flex, Some((_, servers))) if ep > 1 => {
            let d_srv = p
                .moe_routing
                .ranks_per_token_grouped(e, k, servers, m.moe_router_num_groups, m.moe_router_group_topk);
            Some((d.tok_sp as f64 * d_srv * (w * d.dt) as f64).round() as u64)
        }
        _ => None,
    };
    // `parallel.moe_fp8_dispatch` (DeepSeek-V3's recipe): what goes to the experts (the forward
    // dispatch, and in backward the combine's gradient) travels in FP8 with an FP32 scale per
    // 128 elements; what comes back stays in the activation dtype.
    let to_experts = |bytes: u64| -> u64 {
        if p.moe_fp8_dispatch {
            (bytes as f64 / d.dt as f64 * (1.0 + 4.0 / 128.0)).round() as u64
        } else {
            bytes
        }
    };
    match inter {
        Some(bytes) => {
            bld.collective_sized(
                ("ep_dispatch_inter", CollectiveOp::AllToAll),
                Some(("ep_dispatch_inter_bwd", CollectiveOp::AllToAll)),
                CommGroup::EpInter,
                to_experts(bytes),
                bytes,
            );
            bld.collective_sized(
                ("ep_dispatch_intra", CollectiveOp::AllToAll),
                Some(("ep_dispatch_intra_bwd", CollectiveOp::AllToAll)),
                CommGroup::EpIntra,
                to_experts(a2a),
                a2a,
            );
        }
        None if ep > 1 => bld.collective_sized(
            ("ep_dispatch", CollectiveOp::AllToAll),
            Some(("ep_dispatch_bwd", CollectiveOp::AllToAll)),
            CommGroup::Ep,
            to_experts(a2a),
            a2a,
        ),
        None => {}
    }
    if d.tp > 1 && !whole {
        bld.collective(
            ("moe_tp_allgather", CollectiveOp::AllGather),
            Some(("moe_tp_reducescatter_bwd", CollectiveOp::ReduceScatter)),
            CommGroup::Tp,
            a2a * d.tp,
        );
    }
    // Expert GEMMs over all tokens routed to this rank's experts with balanced routing:
    // b·(s/cp)·topk after the TP gather, or the SP shard's b·(s/cp)/tp·topk with etp: 1.
    let et = if whole { d.tok_sp * k } else { d.tok * k };
    // The all-to-all dispatcher's "permutation 2": with several local experts the received
    // chunks (one per source rank) are sorted by local expert before the expert GEMMs and
    // unsorted before the combine, each a gather-copy of the received tokens, forward and
    // backward (`sort_chunks_by_idxs`, fused in Transformer Engine with `moe_permute_fusion`).
    let sort = (p.moe_token_dispatcher == MoeDispatcher::AllToAll && local > 1).then(|| (2 * et * w) as f64 * dt);
    let sort_op = |name: &'static str, pass: Pass, bytes: f64| compute(name, pass, OpClass::Router, 0.0, bytes, &shape);
    if let Some(bytes) = sort {
        bld.push(
            vec![sort_op("moe_sort_chunks", Pass::Forward, bytes)],
            vec![sort_op("moe_sort_chunks_bwd", Pass::BackwardInput, bytes)],
        );
    }
    let mf_l = m.moe_intermediate_size / etp;
    let fc1_n = mf_l * if m.gated_mlp { 2 } else { 1 };
    bld.gemm(gemm_names!("expert_fc1"), Split::Local, et, w, fc1_n, local * w * fc1_n, &shape);
    let fused = p.moe_fused_grouped_mlp;
    if fused {
        // `parallel.moe_fused_grouped_mlp`: fc2's data-gradient kernel writes fc1's quantized
        // output gradient, so fc1's backward cast does not run.
        bld.drop_last_casts(Pass::BackwardInput);
    }
    let megatron = p.moe_experts == MoeExperts::Megatron;
    if m.mlp_bias && !megatron {
        fc1_bias_loop(bld, et, local, fc1_n, &shape);
    }
    // Megatron-Core's clamped activation (GPT-OSS); Automodel's is one compiled kernel.
    let clamp = m.swiglu_limit.is_some() && megatron;
    // Fused: the activation runs in fc1's epilogue and its gradient in fc2's dgrad epilogue.
    bld.within(RecomputeModule::MoeAct, |b| {
        if fused {
            return;
        }
        if clamp {
            b.glu_clamp(et, mf_l, &shape);
        }
        b.activation("expert_act", "expert_act_bwd", et, mf_l, m.gated_mlp, &shape);
        if clamp {
            // `weighted_bias_quick_geglu_impl` builds its `linear_offset` argument with
            // `torch.tensor(linear_offset, device=input.device)`: a blocking host-to-device copy,
            // which synchronizes the stream (ATen `copy_kernel_cuda`: `memcpy_and_sync`), before
            // the fused activation.
            b.host_sync_at_last_step();
        }
    });
    bld.gemm(gemm_names!("expert_fc2"), Split::Local, et, mf_l, w, local * mf_l * w, &shape);
    if fused {
        // fc1's epilogue writes fc2's quantized input; the biases are added in the GEMMs, and
        // Megatron's DDP hook still accumulates their gradients.
        bld.drop_last_casts(Pass::Forward);
        if m.mlp_bias {
            let dt = bld.d.dt as f64;
            bld.push(Vec::new(), expert_bias_grad_acc(dt, local, w, fc1_n, &shape));
        }
    } else if m.mlp_bias {
        fc2_biases(bld, p, et, local, w, fc1_n, &shape);
    }
    if let Some(bytes) = sort {
        bld.push(
            vec![sort_op("moe_unsort_chunks", Pass::Forward, bytes)],
            vec![sort_op("moe_unsort_chunks_bwd", Pass::BackwardInput, bytes)],
        );
    }
    if d.tp > 1 && !whole {
        bld.collective(
            ("moe_tp_reducescatter", CollectiveOp::ReduceScatter),
            Some(("moe_tp_allgather_bwd", CollectiveOp::AllGather)),
            CommGroup::Tp,
            a2a * d.tp,
        );
    }
    match inter {
        Some(bytes) => {
            bld.collective_sized(
                ("ep_combine_intra", CollectiveOp::AllToAll),
                Some(("ep_combine_intra_bwd", CollectiveOp::AllToAll)),
                CommGroup::EpIntra,
                a2a,
                to_experts(a2a),
            );
            bld.collective_sized(
                ("ep_combine_inter", CollectiveOp::AllToAll),
                Some(("ep_combine_inter_bwd", CollectiveOp::AllToAll)),
                CommGroup::EpInter,
                bytes,
                to_experts(bytes),
            );
        }
        None if ep > 1 => bld.collective_sized(
            ("ep_combine", CollectiveOp::AllToAll),
            Some(("ep_combine_bwd", CollectiveOp::AllToAll)),
            CommGroup::Ep,
            a2a,
            to_experts(a2a),
        ),
        None => {}
    }
    bld.push(
        vec![compute(
            "moe_unpermute",
            Pass::Forward,
            OpClass::Router,
            (routed * w) as f64,
            perm_bytes,
            &shape,
        )],
        vec![compute(
            "moe_unpermute_bwd",
            Pass::BackwardInput,
            OpClass::Router,
            (routed * w) as f64,
            perm_bytes,
            &shape,
        )],
    );
    if latent {
        bld.gemm(gemm_names!("moe_latent_up"), Split::Local, d.tok_sp, w, d.h, w * d.h, &shape);
    }
    if m.num_shared_experts > 0 {
        bld.within(RecomputeModule::SharedExperts, |b| {
            b.unfused_column = true;
            b.mlp(
                (gemm_names!("shared_fc1"), "shared_act", "shared_act_bwd", gemm_names!("shared_fc2")),
                m,
                m.shared_ffn(),
            );
            b.unfused_column = false;
        });
        // `MoELayer.combine` adds the shared experts' output to the routed one
        // (`output + shared_expert_output`, `transformer/moe/moe_layer.py`, megatron-core 0.15.0;
        // NeMo Automodel's MoE `y + z` the same): one add over the layer's output, read two,
        // write one; its gradient passes through to both.
        let e = (d.tok_sp * d.h) as f64;
        bld.push(
            vec![compute(
                "moe_shared_add",
                Pass::Forward,
                OpClass::Elementwise,
                e,
                3.0 * e * dt,
                &shape,
            )],
            Vec::new(),
        );
    }
}

/// fc2's expert bias, scaled by the router's probabilities and added per local expert by a
/// Python loop (`_apply_bias`: `t + b * p` on each expert's rows of the `[et, w]` output, then a
/// `cat`), as Megatron-Core's `TEGroupedMLP` (fc2 built with `skip_bias_add`;
/// `transformer/moe/experts.py`, megatron-core 0.15.0 and 0.16.0) and NeMo Automodel's
/// `GroupedExpertsDeepEP` (`nemo_automodel/components/moe/layers.py`, 8d9bfb90e) both do.
/// `p` is FP32 under DeepEP-style dispatch (Megatron's flex dispatcher upcasts it: "DeepEP only
/// supports float32 probs", `token_dispatcher.py`; Automodel's DeepEP dispatcher the same),
/// else in the activation dtype (`moe_router_dtype` unset, as Megatron-Bridge's GPT-OSS
/// provider leaves it): with FP32 `p` the products, the sum and the `cat` are FP32 and a cast
/// back follows. Backward: the cast's gradient (FP32 `p`), then per expert the cast of its
/// rows' gradient back to the activation dtype (FP32 `p`) and autograd's `b * p` gradients,
/// each a product over the expert's rows and a reduction to the broadcast operand (`b`'s `w`
/// elements, `p`'s one per row); the add and the `cat` pass gradients through as views, and
/// the `split` of the output concatenates its pieces' gradients.
fn fc2_bias_loop(d: &Dims, et: u64, local: u64, w: u64, fp32_probs: bool, shape: &str) -> (Vec<OpSpec>, Vec<OpSpec>) {
    let dt = d.dt as f64;
    let r = if fp32_probs { 4.0f64.max(dt) } else { dt };
    let n = et as f64 / local as f64;
    let (e, whole, wf) = (n * w as f64, et as f64 * w as f64, w as f64);
    let op = |name, pass, flops, bytes| compute(name, pass, OpClass::Elementwise, flops, bytes, shape);
    let cast = r != dt;
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    if cast {
        bwd.push(op("expert_fc2_bias_cast_bwd", Pass::BackwardInput, 0.0, (dt + r) * whole));
    }
    for _ in 0..local {
        fwd.push(op("expert_fc2_bias_scale", Pass::Forward, e, r * e + wf * dt + n * r));
        fwd.push(op("expert_fc2_bias_add", Pass::Forward, e, (dt + 2.0 * r) * e));
        if cast {
            bwd.push(op("expert_fc2_bias_dx_cast", Pass::BackwardInput, 0.0, (r + dt) * e));
        }
        bwd.extend([
            op("expert_fc2_bias_dbias_mul", Pass::BackwardWeight, e, 2.0 * r * e + n * r),
            op("expert_fc2_bias_dbias_sum", Pass::BackwardWeight, e, r * e + wf * r),
            op("expert_fc2_bias_dprob_mul", Pass::BackwardInput, e, 2.0 * r * e + wf * dt),
            op("expert_fc2_bias_dprob_sum", Pass::BackwardInput, e, r * e + n * r),
        ]);
    }
    fwd.push(op("expert_fc2_bias_cat", Pass::Forward, 0.0, 2.0 * r * whole));
    if cast {
        fwd.push(op("expert_fc2_bias_cast", Pass::Forward, 0.0, (r + dt) * whole));
    }
    bwd.push(op("expert_fc2_split_bwd", Pass::BackwardInput, 0.0, 2.0 * dt * whole));
    (fwd, bwd)
}

/// The expert biases after fc2 (`w` wide) over the `et` tokens routed to this rank's `local`
/// experts (balanced: `et / local` each): [`fc2_bias_loop`]. Megatron-Core: fc1's bias is added
/// inside Transformer Engine's grouped GEMM, and in backward Megatron's DDP hook adds each
/// bias's gradient into its FP32 `main_grad`, fc1's and fc2's of every expert (Transformer
/// Engine fuses only the weights' accumulation; `distributed/distributed_data_parallel.py`
/// `_make_backward_post_hook`).
fn fc2_biases(bld: &mut Builder, p: &ParallelConfig, et: u64, local: u64, w: u64, fc1_n: u64, shape: &str) {
    let d = bld.d;
    let dt = d.dt as f64;
    let local = local.max(1);
    let fp32_probs = p.moe_token_dispatcher == MoeDispatcher::Flex;
    let (fwd, mut bwd) = fc2_bias_loop(d, et, local, w, fp32_probs, shape);
    if p.moe_experts == MoeExperts::Megatron {
        bwd.extend(expert_bias_grad_acc(dt, local, w, fc1_n, shape));
    }
    bld.push(fwd, bwd);
}

/// Whether op `name` is one of the quantization casts the generator puts before a Transformer
/// Engine GEMM (`fp8_cast*`, `nvfp4_quantize*`).
pub fn is_quantization_cast(name: &str) -> bool {
    name.starts_with("fp8_cast") || name.starts_with("nvfp4_quantize")
}

/// Megatron's DDP hook adding each local expert's fc2 and fc1 bias gradients into their FP32
/// `main_grad` (see [`fc2_biases`]).
fn expert_bias_grad_acc(dt: f64, local: u64, w: u64, fc1_n: u64, shape: &str) -> Vec<OpSpec> {
    let mut ops = Vec::new();
    for _ in 0..local {
        for width in [w, fc1_n] {
            let x = width as f64;
            ops.push(compute(
                "expert_bias_grad_acc",
                Pass::BackwardWeight,
                OpClass::Elementwise,
                x,
                x * (8.0 + dt),
                shape,
            ));
        }
    }
    ops
}

/// NeMo Automodel's fc1 expert bias (`GroupedExpertsDeepEP._apply_bias` with no probabilities):
/// `t + b` on each local expert's rows of the `[et, fc1_n]` output, then a `cat`; backward, per
/// expert the bias gradient (a reduction over its rows), and the `split`'s concatenation of the
/// pieces' gradients (`nemo_automodel/components/moe/layers.py`, 8d9bfb90e).
fn fc1_bias_loop(bld: &mut Builder, et: u64, local: u64, fc1_n: u64, shape: &str) {
    let dt = bld.d.dt as f64;
    let local = local.max(1);
    let n = et as f64 / local as f64;
    let (e, whole) = (n * fc1_n as f64, et as f64 * fc1_n as f64);
    let op = |name, pass, flops, bytes| compute(name, pass, OpClass::Elementwise, flops, bytes, shape);
    let mut fwd: Vec<OpSpec> = (0..local)
        .map(|_| op("expert_fc1_bias_add", Pass::Forward, e, 2.0 * dt * e + fc1_n as f64 * dt))
        .collect();
    fwd.push(op("expert_fc1_bias_cat", Pass::Forward, 0.0, 2.0 * dt * whole));
    let mut bwd: Vec<OpSpec> = (0..local)
        .map(|_| op("expert_fc1_bias_dbias_sum", Pass::BackwardWeight, e, dt * e + fc1_n as f64 * dt))
        .collect();
    bwd.push(op("expert_fc1_split_bwd", Pass::BackwardInput, 0.0, 2.0 * dt * whole));
    bld.push(fwd, bwd);
}

/// The embedding of the first pipeline stage: vocab-parallel lookup, then the TP all-reduce of
/// its output (reduce-scatter with SP), as Megatron's VocabParallelEmbedding; dropout.
///
/// Backward (after an all-gather with SP): the lookup is `F.embedding`, whose gradient is a
/// dense `[V/tp, h]` tensor in the activations' dtype: PyTorch's `embedding_dense_backward_cuda`
/// zero-fills it (`at::zeros`) and scatter-adds the tokens' rows into it, every micro-batch. Then
/// Megatron's DDP backward hook adds that dense gradient into the parameter's `main_grad`
/// (`param.main_grad.add_(param.grad.data)`, `distributed_data_parallel.py`
/// `_make_backward_post_hook`, Megatron-LM's `megatron/model/distributed.py` before it): the
/// embedding is not a Transformer Engine linear, so no GEMM accumulates into `main_grad` for it.
/// PyTorch FSDP2 (`parallel.fsdp_impl: fsdp2`) reduce-scatters `param.grad` itself (its copy-in
/// is counted with the other gradients), so only the zero-fill and the scatter remain there.
pub fn embedding(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> LayerOps {
    let d = Dims::new(m, t, p);
    let dt = d.dt as f64;
    let v = padded_vocab(m, d.tp);
    let shape = d.shape_with(&format!("vocab={v}"));
    let e = (d.tok * d.h) as f64;
    let mut bld = Builder::new(&d);
    let ab = d.act_bytes();
    let mut fwd = vec![compute(
        "embedding",
        Pass::Forward,
        OpClass::Embedding,
        0.0,
        2.0 * e * dt + d.tok as f64 * 8.0,
        &shape,
    )];
    let mut bwd = Vec::new();
    if d.tp > 1 && d.sp {
        fwd.push(comm(
            "embedding_sp_reducescatter",
            Pass::Forward,
            CollectiveOp::ReduceScatter,
            CommGroup::Tp,
            ab,
            &shape,
        ));
        bwd.push(comm(
            "embedding_sp_allgather_bwd",
            Pass::BackwardInput,
            CollectiveOp::AllGather,
            CommGroup::Tp,
            ab,
            &shape,
        ));
    } else if d.tp > 1 {
        fwd.push(comm(
            "embedding_tp_allreduce",
            Pass::Forward,
            CollectiveOp::AllReduce,
            CommGroup::Tp,
            ab,
            &shape,
        ));
    }
    // The dense gradient of this rank's vocabulary shard, zero-filled, then the tokens' rows
    // (read from the output gradient) scatter-added into it, with the token ids.
    let dense = (v / d.tp * d.h) as f64;
    bwd.push(compute(
        "embedding_wgrad_zero",
        Pass::BackwardWeight,
        OpClass::Elementwise,
        0.0,
        dense * dt,
        &shape,
    ));
    bwd.push(compute(
        "embedding_wgrad",
        Pass::BackwardWeight,
        OpClass::Embedding,
        e,
        2.0 * e * dt + d.tok as f64 * 8.0,
        &shape,
    ));
    if p.fsdp_impl != FsdpImpl::Fsdp2 || p.zero_stage < 3 {
        // `main_grad.add_(grad)`: reads both, writes `main_grad` (fp32 unless
        // `grad_reduce_in_fp32: false`).
        let mg = t.grad_dtype().bytes() as f64;
        bwd.push(compute(
            "embedding_main_grad_add",
            Pass::BackwardWeight,
            OpClass::Elementwise,
            dense,
            dense * (dt + 2.0 * mg),
            &shape,
        ));
    }
    bld.push(fwd, bwd);
    let es = (d.tok_sp * d.h) as f64;
    // PyTorch's dropout at p = 0 returns its input (ATen `dropout`): no kernel.
    if d.dropout {
        bld.push(
            vec![compute(
                "embedding_dropout",
                Pass::Forward,
                OpClass::Elementwise,
                es,
                es * (2.0 * dt + 1.0),
                &d.shape,
            )],
            vec![compute(
                "embedding_dropout_bwd",
                Pass::BackwardInput,
                OpClass::Elementwise,
                es,
                es * (2.0 * dt + 1.0),
                &d.shape,
            )],
        );
    }
    bld.finish(Recompute::None, 0, false)
}

/// The head of the last pipeline stage: final norm, vocab-parallel logits GEMM (`V/tp` columns),
/// vocab-parallel cross-entropy with its three TP all-reduces of `b·(s/cp)·4` bytes (max, target
/// logit, sum of exponentials; Megatron's `_VocabParallelCrossEntropy`), and their backward.
pub fn head(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> LayerOps {
    // The output layer is Megatron's own `ColumnParallelLinear`, not a Transformer Engine
    // module, so FP8 (and NVFP4) training leaves it in BF16: no casts, BF16 GEMMs.
    let fp8 = t.dtype.is_te_quantized();
    let d = Dims {
        fp8: false,
        fp8_current: false,
        nvfp4: false,
        gemm_dtype: fp8.then_some(DType::Bf16),
        ..Dims::new(m, t, p)
    };
    let dt = d.dt as f64;
    let v = padded_vocab(m, d.tp);
    let vl = v / d.tp;
    let shape = d.shape_with(&format!("vocab={v}"));
    let mut bld = Builder::new(&d);
    bld.norm("final_norm", "final_norm_bwd", d.tok_sp);
    bld.gemm(gemm_names!("logits"), Split::Column, d.tok, d.h, vl, d.h * vl, &shape);
    let e = (d.tok * vl) as f64;
    let (fwd_b, bwd_b) = cross_entropy_bytes_per_logit(t.cross_entropy_fusion, dt);
    let mut fwd = vec![compute(
        "cross_entropy",
        Pass::Forward,
        OpClass::Softmax,
        5.0 * e,
        e * fwd_b,
        &shape,
    )];
    if d.tp > 1 {
        let b = d.tok * 4;
        for n in [
            "cross_entropy_max_allreduce",
            "cross_entropy_target_allreduce",
            "cross_entropy_sum_allreduce",
        ] {
            fwd.push(comm(n, Pass::Forward, CollectiveOp::AllReduce, CommGroup::Tp, b, &shape));
        }
    }
    let bwd = vec![compute(
        "cross_entropy_bwd",
        Pass::BackwardInput,
        OpClass::Softmax,
        2.0 * e,
        e * bwd_b,
        &shape,
    )];
    bld.push(fwd, bwd);
    bld.finish(Recompute::None, 0, false)
}

/// The multi-token-prediction depths of `t.mtp_num_layers` (Megatron-Core
/// `MultiTokenPredictionBlock`, `multi_token_prediction.py` and `gpt_model.py` `_postprocess`,
/// core_v0.16.0), run after the output head on its stage; empty without MTP. Each depth:
/// - the embedding of the tokens shifted by one more place ([`embedding`]: the lookup, its TP
///   reduction and dropout; `_get_embeddings`);
/// - `enorm` over that embedding and `hnorm` over the previous depth's hidden state, their
///   concatenation (`torch.cat`: a copy of both), and `eh_proj`, a column-parallel `2h -> h`
///   linear whose output is gathered over TP (`gather_from_tensor_model_parallel_region`; its
///   backward a split) and, with sequence parallelism, scattered back (a split; its backward an
///   all-gather);
/// - the block's layers ([`transformer_layer`] at layers `num_hidden_layers..`, so a block is a
///   decoder layer like the last, or `model.mtp_hybrid_override_pattern`'s layers), with the
///   run's recomputation;
/// - its output norm and the shared output layer's logits and cross-entropy ([`head`]).
///
/// Backward runs the depths in reverse, each in reverse. With `t.mtp_bf16` the blocks, the
/// projection and their casts are BF16 (Megatron-Bridge `keep_mtp_spec_in_bf16`).
pub fn mtp(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> LayerOps {
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    if t.mtp_num_layers == 0 {
        return LayerOps { forward, backward };
    }
    let bf16;
    let tb = if t.mtp_bf16 && t.dtype.is_te_quantized() {
        bf16 = t.with_gemm_dtype(DType::Bf16);
        &bf16
    } else {
        t
    };
    let d = Dims::new(m, tb, p);
    let emb = embedding(m, t, p);
    let h = d.h;
    let mut proj = {
        let mut bld = Builder::new(&d);
        bld.norm("mtp_enorm", "mtp_enorm_bwd", d.tok_sp);
        bld.norm("mtp_hnorm", "mtp_hnorm_bwd", d.tok_sp);
        // torch.cat of the two normed [tokens, h] tensors: read both, write [tokens, 2h]; its
        // backward splits the gradient (a strided copy of each half).
        let e = (2 * d.tok_sp * h) as f64;
        let dt = d.dt as f64;
        bld.push(
            vec![compute(
                "mtp_concat",
                Pass::Forward,
                OpClass::Elementwise,
                0.0,
                2.0 * e * dt,
                &d.shape,
            )],
            vec![compute(
                "mtp_concat_bwd",
                Pass::BackwardInput,
                OpClass::Elementwise,
                0.0,
                2.0 * e * dt,
                &d.shape,
            )],
        );
        let hl = h / d.tp;
        bld.gemm_comm(
            gemm_names!("mtp_eh_proj"),
            Split::Column,
            d.tok,
            2 * h,
            hl,
            2 * h * hl,
            &d.shape,
            2 * d.act_bytes(),
        );
        if d.tp > 1 {
            let sp_bwd = d.sp.then_some(("mtp_sp_scatter_bwd", CollectiveOp::AllGather));
            bld.collective(
                ("mtp_eh_proj_gather", CollectiveOp::AllGather),
                sp_bwd,
                CommGroup::Tp,
                d.act_bytes(),
            );
        }
        bld.finish(tb.recompute, tb.recompute_mask(), m.gated_mlp)
    };
    let l = m.num_hidden_layers;
    let mut block: Vec<LayerOps> = (l..l + m.mtp_block_layers()).map(|i| transformer_layer(m, tb, p, i)).collect();
    if tb.dtype != t.dtype {
        // Built as a BF16 run's: their GEMMs say so, or they would be timed at the run's dtype.
        for b in block.iter_mut().chain(std::iter::once(&mut proj)) {
            b.gemms_in(DType::Bf16);
        }
    }
    let out = head(m, t, p);
    for _ in 0..t.mtp_num_layers {
        forward.extend(emb.forward.iter().cloned());
        forward.extend(proj.forward.iter().cloned());
        for b in &block {
            forward.extend(b.forward.iter().cloned());
        }
        forward.extend(out.forward.iter().cloned());
        let mut back = out.backward.clone();
        for b in block.iter().rev() {
            back.extend(b.backward.iter().cloned());
        }
        back.extend(proj.backward.iter().cloned());
        back.extend(emb.backward.iter().cloned());
        // Depth k's backward runs before depth k-1's.
        back.append(&mut backward);
        backward = back;
    }
    LayerOps { forward, backward }
}

/// Parameters of the MTP blocks one TP rank of the output layer's stage holds (`p.mtp_blocks`
/// blocks, [`TrainingConfig::mtp_weight_blocks`]: each two norms, the `2h x h/tp` projection, its
/// layers and the output norm); the embedding copy the stage needs for them is in
/// [`stage_vocab_params`].
pub fn mtp_params(m: &ModelConfig, p: &ParallelConfig) -> StageParams {
    let blocks = p.mtp_blocks;
    if blocks == 0 {
        return StageParams::default();
    }
    let h = m.hidden_size;
    let l = m.num_hidden_layers;
    let mut one = StageParams {
        dense: 3 * h + 2 * h * h / p.tp.max(1),
        expert: 0,
    };
    for i in l..l + m.mtp_block_layers() {
        let lp = layer_params(m, p, i);
        one.dense += lp.dense;
        one.expert += lp.expert;
    }
    StageParams {
        dense: blocks * one.dense,
        expert: blocks * one.expert,
    }
}

/// HBM bytes per logit that the loss moves, forward and backward, counted kernel by kernel for
/// logits of `dt` bytes.
///
/// Unfused (Megatron-Core `_VocabParallelCrossEntropy`, `tensor_parallel/cross_entropy.py`, the
/// same passes since 2021): forward casts the logits to fp32 (`.float()`: read `dt`, write 4; no
/// copy when they already are fp32), takes the row max (read 4), subtracts it in place (read and
/// write 4), exponentiates in place (8), sums the rows (4) and divides in place (8), keeping the
/// fp32 softmax for backward; backward scales it by the incoming gradient in place (8) and casts
/// the fp32 gradient back to the logits' dtype (read 4, write `dt`).
///
/// Fused (`cross_entropy_fusion`, Transformer Engine's Triton kernels as the Megatron-Bridge
/// recipes select them, `transformer_engine/common/triton/cross_entropy.py`): an online-softmax
/// pass reads the logits, a second pass reads them again and writes the gradient in their place;
/// backward scales that gradient by the loss's incoming gradient (read and write).
fn cross_entropy_bytes_per_logit(fused: bool, dt: f64) -> (f64, f64) {
    if fused {
        return (3.0 * dt, 2.0 * dt);
    }
    let cast = if dt < 4.0 { dt + 4.0 } else { 0.0 };
    (cast + 4.0 + 8.0 + 8.0 + 4.0 + 8.0, 8.0 + cast)
}

/// Adam step over this rank's parameters `params`: with the distributed optimizer (ZeRO ≥ 1)
/// over its shard, the dense parameters over the dense DP group (`dp·cp`) and the routed experts'
/// over the expert DP group (Megatron-Core `DistributedOptimizer` shards each gradient buffer
/// over the group that reduces it: `distributed_data_parallel.py` builds the expert buffers on
/// `expt_dp`), all of them otherwise. Memory-bound: per parameter it reads the
/// gradient, the main parameter and the two moments and writes the main parameter, the moments
/// and the low-precision model parameter (30 bytes by default with bf16: 4 + 12 read, 12 + 2
/// written; with fp32 training there is no separate main copy: 28 bytes in all). The optimizer
/// states' bytes follow `training.*_dtype` ([`TrainingConfig::optimizer_bytes_per_param`]).
/// ~12 FLOPs per parameter. The op's pass is `BackwardWeight`.
pub fn optimizer_step(params: StageParams, t: &TrainingConfig, p: &ParallelConfig) -> Vec<OpSpec> {
    optimizer_ops(params, None, t, p)
}

/// The optimizer step of pipeline stage `stage` under `training.optimizer`: Adam's
/// ([`optimizer_step`]), or Muon's ([`muon_matrices`]: its Newton-Schulz GEMMs and update on the
/// weight matrices, Adam on the embedding and output layer).
pub fn stage_optimizer_step(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, stage: u64) -> Vec<OpSpec> {
    let params = stage_param_split(m, p, stage);
    if !t.optimizer.is_muon() {
        return optimizer_step(params, t, p);
    }
    let muon = MuonStage {
        matrices: muon_matrices(m, t, p, stage),
        adam: stage_vocab_params(m, p, stage),
    };
    optimizer_ops(params, Some(&muon), t, p)
}

/// One shape of weight matrix on a rank (its TP shard), for Muon's Newton-Schulz GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightMatrix {
    /// Rows (the forward GEMM's `k`).
    pub rows: u64,
    /// Columns (the forward GEMM's `n`).
    pub cols: u64,
    /// Matrices of this shape on the rank.
    pub count: u64,
    /// Routed experts' (sharded over the expert-DP group by `dist_muon`).
    pub expert: bool,
}

/// The weight matrices one TP rank of `stage` holds, by shape: every forward GEMM's weight of
/// the stage's decoder layers (a grouped expert GEMM holds one per local expert; the fused QKV
/// weight three, its query, key and value parts) and, on the
/// output layer's stage, of the MTP blocks with weights of their own; not the embedding or the
/// output layer (Megatron-Core's Muon leaves those, and every 1-D parameter, to Adam).
pub fn muon_matrices(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, stage: u64) -> Vec<WeightMatrix> {
    let mut out: Vec<WeightMatrix> = Vec::new();
    // The fused QKV weight is orthogonalized as its query, key and value parts (Megatron-Core
    // `muon_split_qkv`, default true: `TensorParallelMuon.orthogonalize` splits `linear_qkv` per
    // query group), each `[part columns, h]` on the rank.
    let tp = p.tp.max(1);
    let d = m.head_dim();
    let qkv_parts = [
        m.num_attention_heads / tp * d,
        m.num_key_value_heads / tp * d,
        m.num_key_value_heads / tp * d,
    ];
    let mut add = |ops: &LayerOps, times: u64| {
        for o in &ops.forward {
            let (OpSpecKind::Compute { class: OpClass::Gemm, .. }, Some(KernelShape::Gemm(g))) = (&o.kind, o.kernel) else {
                continue;
            };
            if o.name == "logits" {
                continue;
            }
            let split = o.name == "attn_qkv" && qkv_parts.iter().sum::<u64>() == g.n;
            let cols: &[u64] = if split { &qkv_parts } else { std::slice::from_ref(&g.n) };
            for &c in cols {
                let w = WeightMatrix {
                    rows: g.k,
                    cols: c,
                    count: g.batch.max(1) * times,
                    expert: o.name.starts_with("expert_"),
                };
                match out.iter_mut().find(|x| (x.rows, x.cols, x.expert) == (w.rows, w.cols, w.expert)) {
                    Some(x) => x.count += w.count,
                    None => out.push(w),
                }
            }
        }
    };
    for l in stage_layers(m, p, stage) {
        add(&transformer_layer(m, t, p, l), 1);
    }
    if stage == p.head_stage() && p.mtp_blocks > 0 {
        let l = m.num_hidden_layers;
        for i in l..l + m.mtp_block_layers() {
            add(&transformer_layer(m, t, p, i), p.mtp_blocks);
        }
        let h = m.hidden_size;
        out.push(WeightMatrix {
            rows: 2 * h,
            cols: h / p.tp.max(1),
            count: p.mtp_blocks,
            expert: false,
        });
    }
    out
}

/// What a Muon step works on: the weight matrices, and the parameters Adam keeps.
struct MuonStage {
    matrices: Vec<WeightMatrix>,
    adam: u64,
}

fn optimizer_ops(params: StageParams, muon: Option<&MuonStage>, t: &TrainingConfig, p: &ParallelConfig) -> Vec<OpSpec> {
    let params_on_rank = params.total();
    let layer_wise = t.optimizer == crate::config::OptimizerKind::DistMuon;
    let (dense_share, expert_share) = if p.zero_stage >= 1 || p.use_distributed_optimizer || layer_wise {
        (p.dense_dp_group().max(1), p.expert_dp_group().max(1))
    } else {
        (1, 1)
    };
    let n = params.dense.div_ceil(dense_share) + params.expert.div_ceil(expert_share);
    let states = t.optimizer_bytes_per_param() as f64;
    let per_param = match t.dtype {
        // Gradient and parameter read, parameter written, moments read and written.
        DType::Fp32 | DType::Tf32 => 4.0 + 2.0 * states + 4.0 + 4.0,
        // Gradient read; states read and written; the model copy written.
        _ => t.grad_dtype().bytes() as f64 + 2.0 * states + t.activation_bytes() as f64,
    };
    // Gradient clipping by the global norm (Megatron `--clip-grad`, default 1.0; TorchTitan's and
    // NeMo Automodel's max norm 1.0 too): one L2-norm pass over the optimizer's FP32 gradients
    // before the step (Megatron-Core `optimizer.py` `clip_grad_norm` -> `clip_grads.py`
    // `get_grad_norm_fp32`, `multi_tensor_l2norm`). The scaling pass after it runs only when the
    // norm is above the limit (older code) and is not counted.
    let shape = format!("params={n}");
    // The rank's whole gradient buffer (not the optimizer's shard): its bytes and shape.
    let buffer_bytes = params_on_rank as f64 * t.grad_dtype().bytes() as f64;
    let buffer_shape = format!("params={params_on_rank}");
    let mut ops = Vec::new();
    // Per-token loss: after the reduction the whole gradient buffer is scaled once by 1 / tokens
    // (`finalize_model_grads.py` `scale_gradients`: `grad_data *= factor`, read and write).
    if p.grad_scaling == GradScaling::PerToken && !p.fsdp() {
        ops.push(compute(
            "grad_scale_per_token",
            Pass::BackwardWeight,
            OpClass::Elementwise,
            params_on_rank as f64,
            2.0 * buffer_bytes,
            &buffer_shape,
        ));
    }
    ops.extend([compute(
        "grad_norm",
        Pass::BackwardWeight,
        OpClass::Elementwise,
        2.0 * n as f64,
        4.0 * n as f64,
        &shape,
    )]);
    match muon {
        None => ops.push(compute(
            "optimizer_step",
            Pass::BackwardWeight,
            OpClass::Optimizer,
            12.0 * n as f64,
            per_param * n as f64,
            &shape,
        )),
        Some(mu) => ops.extend(muon_ops(mu, n, dense_share, expert_share, t)),
    }
    // Megatron zeroes its whole gradient buffer (every parameter of the rank, not the optimizer's
    // shard) for the next iteration (`training.py` `train_step`: `zero_grad_buffer()`,
    // `param_and_grad_buffer.py` `grad_data.zero_()`). FSDP (ZeRO-3) frees its gradients instead.
    if p.zero_stage < 3 {
        ops.push(compute(
            "zero_grad",
            Pass::BackwardWeight,
            OpClass::Elementwise,
            0.0,
            buffer_bytes,
            &buffer_shape,
        ));
    }
    ops
}

/// A Muon step over this rank's share: Adam over the embedding and output layer's parameters
/// (`mu.adam`, dense), then per weight matrix the momentum update and the Newton-Schulz
/// orthogonalization (`t.muon_ns_steps` quintic iterations, emerging_optimizers
/// `newton_schulz`: `A = X Xᵀ`, `B = bA + cA²`, `X = aX + BX` on the matrix with its shorter side
/// first, three GEMMs; FP32 tensors, matmuls at PyTorch's `medium` precision, i.e. BF16 tensor
/// cores), then the scaled update of the main parameter and its BF16 copy. `n` parameters on the
/// rank in all; `dense_share` / `expert_share` ranks share the dense and the expert matrices
/// (`dist_muon`: whole matrices per rank, so the busiest rank's share is rounded up).
fn muon_ops(mu: &MuonStage, n: u64, dense_share: u64, expert_share: u64, t: &TrainingConfig) -> Vec<OpSpec> {
    let adam = mu.adam.div_ceil(dense_share).min(n);
    let muon_n = n - adam;
    let states = t.optimizer_bytes_per_param() as f64;
    let grad = t.grad_dtype().bytes() as f64;
    let act = t.activation_bytes() as f64;
    let mut ops = vec![compute(
        "optimizer_step",
        Pass::BackwardWeight,
        OpClass::Optimizer,
        12.0 * adam as f64,
        (grad + 2.0 * states + act) * adam as f64,
        &format!("params={adam}"),
    )];
    // Per matrix element: the gradient read, the momentum read and written, the Newton-Schulz
    // input written and its output read back (FP32), the main parameter read and written, the
    // model copy written.
    let momentum = t.exp_avg_dtype.bytes() as f64;
    let main = (t.muon_bytes_per_param() - t.exp_avg_dtype.bytes()) as f64;
    ops.push(compute(
        "muon_update",
        Pass::BackwardWeight,
        OpClass::Optimizer,
        8.0 * muon_n as f64,
        (grad + 2.0 * momentum + 8.0 + 2.0 * main + act) * muon_n as f64,
        &format!("params={muon_n}"),
    ));
    let steps = t.muon_ns_steps;
    for w in &mu.matrices {
        let share = if w.expert { expert_share } else { dense_share };
        let count = w.count.div_ceil(share);
        let (a, b) = (w.rows.min(w.cols), w.rows.max(w.cols));
        let shape = format!("matrix={}x{},count={count},steps={steps}", w.rows, w.cols);
        // (name, m, n, k): X Xᵀ, A·A, B·X.
        for (name, gm, gn, gk) in [("muon_ns_gram", a, a, b), ("muon_ns_square", a, a, a), ("muon_ns_apply", a, b, a)] {
            let batch = count * steps;
            let (mf, nf, kf, bf) = (gm as f64, gn as f64, gk as f64, batch as f64);
            let mut op = compute(
                name,
                Pass::BackwardWeight,
                OpClass::Gemm,
                2.0 * mf * nf * kf * bf,
                4.0 * (mf * kf + kf * nf + mf * nf) * bf,
                &shape,
            );
            op.kernel = Some(KernelShape::Gemm(GemmShape {
                m: gm,
                n: gn,
                k: gk,
                batch,
            }));
            op.dtype = Some(DType::Bf16);
            ops.push(op);
        }
    }
    ops
}

/// What Megatron's DDP runs on the compute stream over one data-parallel bucket's gradients
/// just before issuing its collective (`param_and_grad_buffer.py` `start_grad_sync`, Megatron-Core
/// 0.8 to 0.16): with `check_for_nan_in_grad`, the buffer's L2 norm (one read), checked on the
/// host (`assert not norm.isnan()`; 0.16: `check_grads` -> `validate_result`); then, where
/// [`GradScaling`] says so, the in-place scaling `grad_data *= factor` (one read, one write).
/// `dense` / `expert`: the bucket's parameters on the dense and the expert-DP group and their
/// gradients' bytes. Empty when nothing runs (FSDP takes another path).
pub fn grad_bucket_passes(dense: (u64, u64), expert: (u64, u64), p: &ParallelConfig) -> Vec<OpSpec> {
    let mut ops = Vec::new();
    if p.fsdp() {
        return ops;
    }
    let elems = (dense.0 + expert.0) as f64;
    let bytes = (dense.1 + expert.1) as f64;
    let shape = format!("params={}", dense.0 + expert.0);
    if p.check_for_nan_in_grad && elems > 0.0 {
        // A square and an add per gradient.
        let mut op = compute(
            "grad_nan_check",
            Pass::BackwardWeight,
            OpClass::Elementwise,
            2.0 * elems,
            bytes,
            &shape,
        );
        op.host_sync = true;
        ops.push(op);
    }
    let dp = p.dense_dp_group();
    let (n, b) = match p.grad_scaling {
        GradScaling::BeforeReduce if dp > 1 => (elems, bytes),
        GradScaling::InCollective if p.expert_dp_group() != dp => (expert.0 as f64, expert.1 as f64),
        _ => (0.0, 0.0),
    };
    if n > 0.0 {
        ops.push(compute(
            "grad_scale",
            Pass::BackwardWeight,
            OpClass::Elementwise,
            n,
            2.0 * b,
            &shape,
        ));
    }
    ops
}

/// Parameters one TP rank of a pipeline stage holds, split by how their gradients are reduced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StageParams {
    /// Reduced over the dense DP group (`dp·cp`): attention, dense MLPs, shared experts, router,
    /// norms, embedding and output layer.
    pub dense: u64,
    /// Routed-expert weights, reduced over the expert DP group (`dp·cp/ep`).
    pub expert: u64,
}

impl StageParams {
    /// All parameters, dense plus expert.
    pub fn total(&self) -> u64 {
        self.dense + self.expert
    }
}

/// Parameters of `layer` on one TP rank. Norm weights, the router and MLA's down-projections are
/// replicated over TP (see [`ModelConfig::attention_params_split`]); Mamba-2 mixers are sharded by
/// heads. MLP and expert biases are counted as sharded (the fc2 bias, `h` per MLP, is in fact
/// replicated; < 0.01 % of a layer).
pub fn layer_params(m: &ModelConfig, p: &ParallelConfig, layer: u64) -> StageParams {
    let tp = p.tp.max(1);
    let h = m.hidden_size;
    let (attn_sharded, attn_replicated) = m.attention_params_split();
    let attn = attn_sharded / tp + attn_replicated;
    let moe = || StageParams {
        // LatentMoE's projections act on each rank's own tokens: replicated over TP, as the router
        // (Megatron-Core `moe_layer.py`: `TELinear(..., parallel_mode="duplicated")`).
        dense: m.router_params() + m.latent_proj_params() + m.mlp_params(m.shared_ffn()) / tp,
        expert: m.num_experts / p.ep.max(1) * m.expert_params() / p.expert_tp(),
    };
    let dense = |dense: u64| StageParams { dense, expert: 0 };
    let (block, norms) = match m.layer_kind(layer) {
        LayerKind::Dense => (dense(attn + m.mlp_params(m.intermediate_size) / tp), 2),
        LayerKind::Moe => {
            let e = moe();
            (
                StageParams {
                    dense: attn + e.dense,
                    expert: e.expert,
                },
                2,
            )
        }
        LayerKind::Attention => (dense(attn), 1),
        LayerKind::Mlp => (dense(m.mlp_params(m.intermediate_size) / tp), 1),
        LayerKind::MoeMlp => (moe(), 1),
        LayerKind::Mamba => (dense(m.mamba_params() / tp), 1),
    };
    StageParams {
        dense: block.dense + norms * h,
        expert: block.expert,
    }
}

/// [`stage_params`], split into dense and expert parameters.
pub fn stage_param_split(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> StageParams {
    let mut s = StageParams::default();
    for l in stage_layers(m, p, stage) {
        let lp = layer_params(m, p, l);
        s.dense += lp.dense;
        s.expert += lp.expert;
    }
    s.dense += stage_vocab_params(m, p, stage);
    if stage == p.head_stage() {
        // The final norm, and the MTP blocks.
        let mtp = mtp_params(m, p);
        s.dense += m.hidden_size + mtp.dense;
        s.expert += mtp.expert;
    }
    s
}

/// Vocabulary-sized parameters one TP rank of `stage` holds: the (vocab-padded) embedding on
/// stage 0, and on the head's stage ([`ParallelConfig::head_stage`], the last) the output layer
/// when untied, or when tied and on another stage the copy of the embedding Megatron keeps there
/// (kept in sync by an embedding-group all-reduce of its gradient). Under DualPipeV the head is
/// on stage 0 too: a tied output layer is the embedding itself.
pub fn stage_vocab_params(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> u64 {
    let tp = p.tp.max(1);
    let emb = padded_vocab(m, tp) * m.hidden_size / tp;
    let head = p.head_stage();
    let mut copies = u64::from(stage == 0) + u64::from(stage == head && (!m.tie_word_embeddings || head != 0));
    if stage == head && mtp_embedding_copy(m, p) {
        copies += 1;
    }
    copies * emb
}

/// Whether MTP puts an embedding copy on the head's stage: it embeds tokens there, so an untied
/// model keeps a copy (Megatron-Core builds `embedding` where `pre_process or mtp_process`, tied
/// to stage 0's and kept in step by the embedding-group all-reduce); a tied one uses the copy it
/// already has, and under DualPipeV the head is on stage 0 with the embedding itself.
pub fn mtp_embedding_copy(m: &ModelConfig, p: &ParallelConfig) -> bool {
    p.mtp_blocks > 0 && p.head_stage() != 0 && !m.tie_word_embeddings
}

/// Parameters held by one TP rank of pipeline stage `stage`: its layers (routed experts divided by
/// ep), the (vocab-padded) embedding on stage 0, the final norm and the output layer on the last
/// stage (a copy of the embedding when tied and pp > 1). DP gradient bytes of the stage are
/// `stage_params · grad_dtype.bytes()` (fp32 for bf16 training, see
/// [`TrainingConfig::grad_dtype`]).
pub fn stage_params(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> u64 {
    stage_param_split(m, p, stage).total()
}

/// Layers of model chunk `chunk` (0..vpp) on pipeline stage `stage`: Megatron's interleaved
/// assignment, chunk `c` of stage `s` is virtual stage `c·pp + s` (DualPipeV's V:
/// [`ParallelConfig::virtual_stage`]), which holds
/// [`ParallelConfig::pipeline_layers`]`[c·pp + s]` layers (an even `L/(pp·vpp)` when that is empty).
pub fn layers_of_chunk(m: &ModelConfig, p: &ParallelConfig, stage: u64, chunk: u64) -> Range<u64> {
    let pp = p.pp.max(1);
    let vpp = p.vpp.max(1);
    let v = p.virtual_stage(stage, chunk);
    if p.pipeline_layers.is_empty() {
        let per = m.num_hidden_layers / (pp * vpp);
        let start = v * per;
        return start..start + per;
    }
    let v = (v as usize).min(p.pipeline_layers.len());
    let start: u64 = p.pipeline_layers[..v].iter().sum();
    start..start + p.pipeline_layers.get(v).copied().unwrap_or(0)
}

/// Layers of pipeline stage `stage` under 1F1B (vpp = 1): a contiguous split. With vpp > 1
/// this is chunk 0's range only; use [`layers_of_chunk`] or [`stage_layers`].
pub fn layers_of_stage(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> Range<u64> {
    layers_of_chunk(m, p, stage, 0)
}

/// All layers of pipeline stage `stage`, over its model chunks, in chunk order.
pub fn stage_layers(m: &ModelConfig, p: &ParallelConfig, stage: u64) -> Vec<u64> {
    (0..p.vpp.max(1)).flat_map(|c| layers_of_chunk(m, p, stage, c)).collect()
}
