//! The `training:` and `parallel:` sections of a scenario, with Megatron-LM's names and defaults,
//! and their validation against a model and a GPU count.
//!
//! Rank order is Megatron's tp-cp-ep-dp-pp: `gpus = tp · cp · dp · pp`, and expert parallelism is
//! carved out of the `dp · cp` ranks (expert tensor parallelism = tp, Megatron-Core's default), or
//! with `etp: 1` out of the `tp · dp · cp` ranks of a stage (Megatron-Core's expert order
//! etp-ep-edp-pp).

use llmsim_compute::DType;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::WorkloadError;
use crate::model::ModelConfig;

/// Activation recomputation (Megatron `--recompute-granularity`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Store all activations (default).
    #[default]
    None,
    /// Recompute core attention only (Korthikanti et al. 2022, §4.2).
    Selective,
    /// TorchTitan's op-level selective activation checkpointing
    /// (`activation_checkpoint.mode: selective`, `selective_ac_option: op`; torchtitan
    /// `parallelize_llama.py`, `_save_list` and `_custom_policy`): per block, the outputs of
    /// `aten.mm`, of SDPA and of reduce-scatters are saved, except every second `mm` (counted in
    /// forward order: wq, wk, wv, wo, w1, w3, w2, so wk, wo and w3 are re-run); every other op
    /// (norms, RoPE, the activation, residual adds, the FP8 casts, TP all-gathers) is re-run.
    /// Under FP8 training (torchao `Float8Linear`, whose GEMMs are `_scaled_mm`, not in the
    /// list) every linear layer is re-run. Dense Llama-style blocks only.
    #[serde(rename = "selective_op")]
    SelectiveOp,
    /// Store each layer's input only; re-run the whole layer forward before its backward.
    Full,
}

/// A submodule Megatron-Core's selective recomputation can re-run in backward instead of
/// keeping its activations (`--recompute-modules`, with `--recompute-granularity selective`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecomputeModule {
    /// Core attention (Korthikanti et al.'s selective recomputation; Megatron-Core's default).
    CoreAttn,
    /// The input and pre-MLP norms: their outputs, the next linear layer's saved input.
    Layernorm,
    /// MLA's up-projections (and RoPE): the per-head Q, K, V; the latents stay.
    MlaUpProj,
    /// The dense MLP: only its input stays.
    Mlp,
    /// The experts' activation function: the expert fc2 input.
    MoeAct,
    /// The whole MoE block (router, dispatch, experts, combine): only its input stays.
    Moe,
    /// The shared experts' MLP.
    SharedExperts,
}

impl RecomputeModule {
    /// This module's bit in a recomputation mask.
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The modules Megatron-Core recomputes with `CheckpointWithoutOutput`: the output is
    /// dropped after forward and re-computed from a hook on the output of the module that reads
    /// it, so when the backward reaches that consumer (`transformer_layer.py`: the norms, hooked
    /// on the attention and MLP outputs; `experts.py`: the activation, hooked on fc2's output;
    /// `multi_latent_attention.py`: the up-projections, hooked on core attention's output). The
    /// others run under `tensor_parallel.checkpoint`, re-run inside their own backward.
    pub const WITHOUT_OUTPUT: u8 = RecomputeModule::Layernorm.bit() | RecomputeModule::MoeAct.bit() | RecomputeModule::MlaUpProj.bit();
}

/// `training:` — what one iteration computes.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(transform = training_aliases)]
pub struct TrainingConfig {
    /// Tokens per sample. Default 2048. Megatron `--seq-length`.
    #[serde(alias = "seq_len")]
    pub seq_length: u64,
    /// Samples per micro-batch per model replica. Default 1. Megatron `--micro-batch-size`.
    pub micro_batch_size: u64,
    /// Samples per iteration over all replicas. Default 0, meaning `micro_batch_size · dp`
    /// (one micro-batch per DP rank). Megatron `--global-batch-size`.
    pub global_batch_size: u64,
    /// Math and activation dtype. Default bf16 (Ampere or newer: on a V100, which has no BF16
    /// tensor cores, it is refused; use fp16 there). `fp8` (Ada, Hopper or Blackwell: a GPU without
    /// FP8 tensor cores, such as A100 or V100, is refused, as Transformer Engine refuses it) and
    /// `fp4` (NVFP4, Transformer Engine's `NVFP4BlockScaling`, Blackwell only) run the linear
    /// layers' GEMMs in that format and keep activations, attention and the memory-bound ops in
    /// bf16.
    #[schemars(with = "crate::schema::DTypeSchema")]
    pub dtype: DType,
    /// Activation recomputation. Default none.
    pub recompute: Recompute,
    /// Fused (Flash) attention. Default true.
    pub flash_attention: bool,
    /// How unfused attention (`flash_attention: false`) scales, masks and normalizes the
    /// materialized scores. Default `fused`: Megatron-LM's fused scale-mask-softmax kernel (one
    /// read and one write of the scores). `eager`: separate PyTorch kernels, as Megatron-LM of
    /// 2019 ran them.
    pub attention_softmax: AttentionSoftmax,
    /// Rotary embeddings as one fused kernel (Megatron-Core `apply_rope_fusion`, Transformer
    /// Engine's `fused_apply_rotary_pos_emb`; MLA: its fused q/kv RoPE kernels). Default true.
    /// `false`: eager PyTorch, as NeMo Automodel's models run it (counted from its code at
    /// 8d9bfb90e): the `rotate_half` form (`models/gpt_oss/layers.py`: per query and key tensor
    /// four products, a difference, a sum and a `cat` forward, eight kernels backward) and, for
    /// MLA, the complex form (`moe/rope_utils.py`: cast to fp32, complex product, cast back,
    /// each way) plus the eager assembly of the heads (`models/deepseek_v3/layers.py`: `cat` of
    /// the query's and the key's no-RoPE and RoPE parts, `v.contiguous()`, the latent's
    /// contiguous copy before its norm; backward, the `cat`s of the split projections' gradients
    /// and the sum of the shared RoPE key's gradient over heads).
    pub rope_fusion: bool,
    /// Where a Mamba-2 mixer's gate `y·silu(z)` is applied (mamba_ssm's
    /// `mamba_split_conv1d_scan_combined`, the function every trainer here calls). Default `scan`:
    /// Megatron-Core calls it without `rmsnorm_weight`, so z gates the output inside the SSD scan
    /// and its `RMSNormGated` then runs without z. `norm`: called with `rmsnorm_weight` and
    /// `outproj_weight`, as NeMo Automodel's Nemotron V3 mixer does (`models/nemotron_v3/
    /// layers.py` at bb0c0bfb0): the scan is ungated and the fused gated RMSNorm reads z, and in
    /// the backward writes dz and re-computes its output for out_proj's weight gradient.
    pub mamba_gate: MambaGate,
    /// Which fused attention kernel runs (with `flash_attention`). Default `auto`: Transformer
    /// Engine's choice, cuDNN fused attention on Hopper and later, FlashAttention-2 on Ampere.
    /// `fa2` is also what PyTorch's `scaled_dot_product_attention` runs on its flash backend
    /// (the first in its default priority order, and the one TorchTitan's context parallelism
    /// selects).
    pub attention_kernel: AttentionKernelChoice,
    /// Iterations to simulate. Default 1.
    pub iterations: u64,
    /// Hidden and attention dropout probability (Megatron `--hidden-dropout` /
    /// `--attention-dropout`): with dropout on, each dropout stores a 1-byte mask for backward.
    /// Default: 0.1 (Megatron's default, GPT-style) for models with a plain GeLU MLP, 0 for
    /// gated-MLP (Llama-style) models, which train without dropout.
    pub dropout: Option<f64>,
    /// Accumulate and reduce gradients in fp32 (Megatron-Core `grad_reduce_in_fp32`). Default:
    /// true for bf16/fp8/fp32 (Megatron-LM forces it for bf16), false for fp16. NeMo's and
    /// MLPerf's benchmark recipes set it false (bf16 gradient buffers and reduction).
    pub grad_reduce_in_fp32: Option<bool>,
    /// Reduce the routed experts' gradients in fp32. Default: as `grad_reduce_in_fp32`. PyTorch
    /// FSDP2 units given no `MixedPrecisionPolicy` reduce in the parameters' own dtype: NeMo
    /// Automodel shards grouped experts over `ep_shard` with a bare `fully_shard` (bf16
    /// parameters, so bf16 reduce-scatters) while the other units reduce in fp32
    /// (`components/moe/parallelizer.py` `apply_fsdp`). Only the traffic changes, not memory.
    pub expert_grad_reduce_in_fp32: Option<bool>,
    /// How FP8 training scales tensors (Transformer Engine recipes), when `dtype: fp8`. Default
    /// delayed.
    pub fp8_recipe: Fp8Recipe,
    /// Submodules selective recomputation re-runs (Megatron-Core `--recompute-modules`):
    /// `core_attn`, `layernorm`, `mla_up_proj`, `mlp`, `moe_act`, `moe`, `shared_experts`.
    /// Default empty: `[core_attn]` under `recompute: selective`. Setting it implies selective
    /// recomputation.
    pub recompute_modules: Vec<RecomputeModule>,
    /// The optimizer (Megatron-Core `--optimizer`). `adam` (default; Megatron's is AdamW).
    /// `muon` / `dist_muon`: Muon (Megatron-Core `optimizer/muon.py`, `TensorParallelMuon` with
    /// NVIDIA's emerging_optimizers) on every 2-D weight matrix but the embedding and output
    /// layer, Adam on those and the norms: per matrix a momentum update, `muon_ns_steps`
    /// Newton-Schulz iterations (three GEMMs each, on each TP shard alone: `muon_tp_mode:
    /// blockwise`, Megatron-Bridge's default; FP32 matmuls at `medium` precision, timed at the
    /// BF16 rate) and the update. `dist_muon` is Megatron-Core's `LayerWiseDistributedOptimizer`:
    /// gradients all-reduced, each data-parallel rank updating its share of the matrices (dense
    /// over `dp·cp`, experts over the expert-DP group, whole tensors), then the updated
    /// parameters all-gathered; `muon` updates every parameter on every rank. Both refuse the
    /// distributed optimizer (Megatron-Core: "muon with dist optimizer is not supported").
    pub optimizer: OptimizerKind,
    /// Newton-Schulz iterations of a Muon step (Megatron-Core `--muon-num-ns-steps`). Default 5.
    pub muon_ns_steps: u64,
    /// Adam's moments (Megatron-Core `--exp-avg-dtype` / `--exp-avg-sq-dtype` with
    /// `--use-precision-aware-optimizer`): fp32 (default), bf16 or fp16.
    #[schemars(with = "crate::schema::DTypeSchema")]
    pub exp_avg_dtype: DType,
    /// Adam's second moment: fp32 (default), bf16 or fp16.
    #[schemars(with = "crate::schema::DTypeSchema")]
    pub exp_avg_sq_dtype: DType,
    /// The optimizer's main (master) copy of the parameters, when training below fp32
    /// (`--main-params-dtype`): fp32 (default), bf16 or fp16.
    #[schemars(with = "crate::schema::DTypeSchema")]
    pub main_params_dtype: DType,
    /// Keep only the low 16 bits of each fp32 main parameter beside its bf16 model copy (NeMo's
    /// distributed fused Adam `store_param_remainders`): a 2-byte main copy. Default false.
    pub store_param_remainders: bool,
    /// Keep a main (master) copy of the parameters in the optimizer. Default true. NeMo 1.0's
    /// Apex distributed fused Adam runs with `store_params: false` when the optimizer dtype equals
    /// the model dtype (`optim.dtype: bf16` with bf16 weights): its state is then the two moments
    /// only (NeMo `megatron_base_model.py`, r2.0.0rc1, lines 784-806; Apex
    /// `distributed_fused_adam.py` `store_params`).
    pub store_params: bool,
    /// FP8 primary weights (Megatron-Core `--fp8-param-gather`, which turns on `fp8_param`):
    /// Transformer Engine builds the linear layers' weights as FP8 tensors with no bf16 copy
    /// (1 byte, plus the transposed copy Hopper's FP8 GEMMs need), and the distributed optimizer
    /// or FSDP all-gathers them in FP8. The embedding, output layer and norms stay in the
    /// activation dtype; the fp32 main copy stays in the optimizer. Requires `dtype: fp8`.
    /// Default false. Every Megatron-Bridge FP8 current-scaling recipe sets it
    /// (`bf16_with_fp8_current_scaling_mixed`: `fp8_param_gather = True`).
    #[serde(alias = "fp8_param_gather")]
    pub fp8_param: bool,
    /// Transformer Engine's cuDNN normalization kernels (`NVTE_NORM_FWD_USE_CUDNN=1`). What it
    /// changes is how a norm's output reaches the FP8 linear after it (QKV, fc1): with the
    /// `mxfp8` recipe the cuDNN norm writes MXFP8 itself, while TE's own norm (the default) writes
    /// BF16 and a separate kernel quantizes it; with `current` scaling TE's own norm computes the
    /// amax on the way (TE 2.8 and newer), so only the cast is separate, while the cuDNN norm
    /// leaves the amax pass to do as well. `delayed` always fuses the cast into the norm and
    /// `blockwise` never does (NVIDIA/TransformerEngine
    /// `pytorch/csrc/extensions/normalization.cpp`, v2.8-v2.18). Default false (TE's default).
    /// Megatron-Bridge's performance scripts set it for some runs only.
    pub cudnn_norm: bool,
    /// The library that runs the FP8 linear layers: `transformer_engine` (default: Megatron-Core,
    /// NeMo, Megatron-Bridge) or `torchao` (TorchTitan's `Float8Linear`). torchao's norms are
    /// separate modules that hand no quantized output or amax to the linear after them, so every
    /// GEMM input has its own full cast (with current scaling an amax pass too); `cudnn_norm`
    /// does not apply.
    pub fp8_impl: Fp8Impl,
    /// Fused cross-entropy (Megatron-Core `--cross-entropy-loss-fusion` with
    /// `--cross-entropy-fusion-impl te`): Transformer Engine's kernel writes the gradient into
    /// the logits buffer in place, so the loss keeps only the logits (2 bytes per logit) instead
    /// of Megatron's fp32 softmax beside them. Default false (Megatron-LM's default); the
    /// Megatron-Bridge recipes turn it on.
    pub cross_entropy_fusion: bool,
    /// Activation CPU offloading (Megatron-Core `--cpu-offloading` with
    /// `--cpu-offloading-num-layers`, Transformer Engine's offload context): the activations of
    /// the first N transformer layers are copied to host memory during forward and back before
    /// their backward, so the GPU holds `num_layers - N` layers' activations at the peak.
    /// Default 0 (off). Megatron-Core allows it with `pp: 1` only, without recomputation, and
    /// below the layer count.
    #[serde(alias = "cpu_offloading_num_layers")]
    pub cpu_offload_layers: u64,
    /// Multi-token prediction (Megatron-Core `--mtp-num-layers`, DeepSeek-V3 §2.2): after the
    /// decoder, each of these depths embeds the tokens shifted by one more place, normalizes that
    /// embedding and the previous depth's hidden state, projects their concatenation (`2h -> h`),
    /// runs one MTP block (a decoder layer like the last, or `model.mtp_hybrid_override_pattern`'s
    /// layers) and its output norm, and computes logits and a loss with the shared output layer;
    /// all on the pipeline stage of the output layer, as Megatron-Core places MTP without a custom
    /// layout. Default 0 (none, Megatron's default). The model's `num_nextn_predict_layers` only
    /// counts the checkpoint's modules.
    #[serde(alias = "mtp_layers")]
    pub mtp_num_layers: u64,
    /// One MTP block's weights serve every depth (Megatron-Core `mtp_use_repeated_layer`;
    /// Nemotron 3 Super runs its one block twice): the parameters, gradients and optimizer states
    /// of one block, the compute and activations of every depth. Default false: a block per depth.
    #[serde(alias = "mtp_use_repeated_layer")]
    pub mtp_repeated_layer: bool,
    /// The MTP blocks run in BF16 in an FP8 or FP4 run (Megatron-Bridge `keep_mtp_spec_in_bf16`,
    /// set by the Nemotron 3 Super recipes): no quantization, BF16 GEMMs. Default false.
    #[serde(alias = "keep_mtp_spec_in_bf16")]
    pub mtp_bf16: bool,
    /// FP8 attention (Megatron-Core `--fp8-dot-product-attention`, Transformer Engine `fp8_dpa`):
    /// with `dtype: fp8`, the fused attention quantizes Q, K and V (and the output gradient in
    /// backward) and runs cuDNN's FP8 kernel, timed from its measured rows (MXFP8 with
    /// `fp8_recipe: mxfp8`, per-tensor FP8 otherwise; GB200/GB300 and their dies; BF16 cuDNN's
    /// rates where none were measured, `llmsim-compute` `data/attention.csv`). Default false.
    #[serde(alias = "fp8_dpa")]
    pub fp8_dot_product_attention: bool,
    /// In an FP8 or FP4 run, this many decoder layers at the start of the model run entirely in
    /// BF16: no quantization, BF16 GEMMs (Megatron-Core `--first-last-layers-bf16` with
    /// `--num-layers-at-start-in-bf16`, `fp8_utils.get_fp8_context` / `fp4_utils.get_fp4_context`:
    /// no autocast for those layer numbers; a hybrid model counts its Mamba, attention and MLP
    /// layers alike). Megatron's flag alone means 1 and 1; Megatron-Bridge's precision configs set
    /// their own counts (`bf16_with_fp8_current_scaling_mixed`: 1 and 1, which its performance
    /// scripts turn off; `nemotron_3_super_bf16_with_nvfp4_mixed`: 0 and 14). MTP blocks do not
    /// count (see `mtp_bf16`). Default 0.
    #[serde(alias = "num_layers_at_start_in_bf16")]
    pub bf16_layers_at_start: u64,
    /// As `bf16_layers_at_start`, for the last decoder layers (`--num-layers-at-end-in-bf16`).
    /// Default 0.
    #[serde(alias = "num_layers_at_end_in_bf16")]
    pub bf16_layers_at_end: u64,
    /// Per-module precision in an FP8 or FP4 run: each named linear layer's GEMMs (and their input
    /// quantization) run in the given dtype instead of `dtype`, in every layer that has it; `fp8`
    /// takes `fp8_recipe`. Keys are llmsim's GEMM names (the `ops.csv` names): `attn_qkv`,
    /// `attn_proj`, `attn_q`, `attn_q_down`, `attn_q_up`, `attn_kv_down`, `attn_kv_up`, `mlp_fc1`,
    /// `mlp_fc2`, `expert_fc1`, `expert_fc2`, `shared_fc1`, `shared_fc2`, `moe_latent_down`,
    /// `moe_latent_up`, `mamba_in_proj`, `mamba_out_proj`, `mtp_eh_proj`. Megatron-Core's
    /// `quant_recipe` (Transformer Engine quantization matchers by module name; Megatron-Bridge's
    /// Nemotron 3 Super NVFP4 recipe, `scripts/performance/configs/nemotronh/te_quant.cfg`:
    /// `linear_qkv`, `linear_proj` and the LatentMoE `fc1/fc2_latent_proj` in BF16, Mamba's
    /// `out_proj` in MXFP8). BF16 layers (`bf16_layers_at_*`) stay BF16 whatever this says.
    /// Default: none.
    #[schemars(with = "std::collections::BTreeMap<GemmModule, crate::schema::DTypeSchema>")]
    pub module_dtype: std::collections::BTreeMap<GemmModule, DType>,
}

/// `training.optimizer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(transform = optimizer_aliases)]
pub enum OptimizerKind {
    /// Adam (AdamW), Megatron's default.
    #[default]
    #[serde(alias = "adamw")]
    Adam,
    /// Muon on every rank's whole parameters.
    Muon,
    /// Muon with Megatron-Core's layer-wise distributed optimizer.
    DistMuon,
}

impl OptimizerKind {
    /// Whether the weight matrices take Muon's update.
    pub fn is_muon(self) -> bool {
        matches!(self, OptimizerKind::Muon | OptimizerKind::DistMuon)
    }
}

/// A linear layer whose precision `training.module_dtype` can set: llmsim's GEMM (and `ops.csv`)
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GemmModule {
    /// Attention's fused QKV projection (Megatron-Core `linear_qkv`).
    AttnQkv,
    /// Attention's output projection (`linear_proj`).
    AttnProj,
    /// MLA's query projection without a low-rank query (`linear_q_proj`).
    AttnQ,
    /// MLA's query down-projection (`linear_q_down_proj`).
    AttnQDown,
    /// MLA's query up-projection (`linear_q_up_proj`).
    AttnQUp,
    /// MLA's key-value down-projection (`linear_kv_down_proj`).
    AttnKvDown,
    /// MLA's key-value up-projection (`linear_kv_up_proj`).
    AttnKvUp,
    /// A dense MLP's first linear layer (`mlp.linear_fc1`).
    MlpFc1,
    /// A dense MLP's second linear layer (`mlp.linear_fc2`).
    MlpFc2,
    /// The routed experts' first grouped GEMM (`experts.linear_fc1`).
    ExpertFc1,
    /// The routed experts' second grouped GEMM (`experts.linear_fc2`).
    ExpertFc2,
    /// The shared experts' first linear layer.
    SharedFc1,
    /// The shared experts' second linear layer.
    SharedFc2,
    /// LatentMoE's down-projection into the latent space (`fc1_latent_proj`).
    MoeLatentDown,
    /// LatentMoE's up-projection out of it (`fc2_latent_proj`).
    MoeLatentUp,
    /// A Mamba layer's input projection (`mixer.in_proj`).
    MambaInProj,
    /// A Mamba layer's output projection (`mixer.out_proj`).
    MambaOutProj,
    /// The MTP block's `eh_proj`.
    MtpEhProj,
}

impl GemmModule {
    /// The forward GEMM op's name in the workload (`ops.csv`).
    pub const fn op_name(self) -> &'static str {
        match self {
            GemmModule::AttnQkv => "attn_qkv",
            GemmModule::AttnProj => "attn_proj",
            GemmModule::AttnQ => "attn_q",
            GemmModule::AttnQDown => "attn_q_down",
            GemmModule::AttnQUp => "attn_q_up",
            GemmModule::AttnKvDown => "attn_kv_down",
            GemmModule::AttnKvUp => "attn_kv_up",
            GemmModule::MlpFc1 => "mlp_fc1",
            GemmModule::MlpFc2 => "mlp_fc2",
            GemmModule::ExpertFc1 => "expert_fc1",
            GemmModule::ExpertFc2 => "expert_fc2",
            GemmModule::SharedFc1 => "shared_fc1",
            GemmModule::SharedFc2 => "shared_fc2",
            GemmModule::MoeLatentDown => "moe_latent_down",
            GemmModule::MoeLatentUp => "moe_latent_up",
            GemmModule::MambaInProj => "mamba_in_proj",
            GemmModule::MambaOutProj => "mamba_out_proj",
            GemmModule::MtpEhProj => "mtp_eh_proj",
        }
    }
}

/// The library that runs FP8 training's linear layers (`training.fp8_impl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fp8Impl {
    /// NVIDIA Transformer Engine (Megatron-Core's FP8 path).
    #[default]
    TransformerEngine,
    /// PyTorch torchao `Float8Linear` (TorchTitan).
    Torchao,
}

/// Transformer Engine FP8 scaling recipe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fp8Recipe {
    /// `DelayedScaling`: scales from an amax history, so a norm or activation kernel can write
    /// its output in FP8 directly (MLPerf GPT-3 submissions).
    #[default]
    Delayed,
    /// `Float8CurrentScaling` ("FP8-CS" in NeMo's tables): each tensor's amax is computed before
    /// it is cast, an extra pass over it, and no producer kernel can fuse the cast.
    Current,
    /// `MXFP8BlockScaling` ("FP8-MX" / MXFP8, Blackwell only): an E8M0 scale per 32 elements,
    /// computed locally (no amax pass), so norms and activations can write it directly as with
    /// delayed scaling. Each tensor is quantized row-wise and column-wise (the block runs along
    /// the reduction dimension, which differs between a GEMM and its transpose): 1 + 1/32 bytes
    /// per element per copy, and two weight copies on every architecture.
    Mxfp8,
    /// `Float8BlockScaling` (DeepSeek-V3's recipe; Megatron-Core `--fp8-recipe blockwise`): an
    /// FP32 scale per 1x128 block of activations and gradients and per 128x128 block of weights,
    /// computed locally. Each activation or gradient is quantized row-wise and column-wise from
    /// BF16 in one kernel (the blocks run along the reduction dimension), and no norm kernel
    /// writes it, so every GEMM input has its own cast. Hopper runs block-scaled GEMMs (Transformer
    /// Engine, compute capability 9.0 or newer); Blackwell emulates the recipe with MXFP8.
    Blockwise,
}

impl Fp8Recipe {
    /// Bytes of one FP8 copy of an element, with its share of the scales.
    pub fn bytes_per_element(self) -> f64 {
        match self {
            // MXFP8: one E8M0 byte per 32; blockwise: one FP32 scale per 128, the same 1/32.
            Fp8Recipe::Mxfp8 | Fp8Recipe::Blockwise => 1.0 + 1.0 / 32.0,
            Fp8Recipe::Delayed | Fp8Recipe::Current => 1.0,
        }
    }
}

/// Gradient reduction dtype for training `dtype` with `*_reduce_in_fp32` = `in_fp32`
/// ([`TrainingConfig::grad_dtype`]'s rules).
fn reduce_dtype(dtype: DType, in_fp32: Option<bool>) -> DType {
    match (dtype, in_fp32) {
        (_, Some(true)) => DType::Fp32,
        (DType::Fp16, _) => DType::Fp16,
        (DType::Fp32 | DType::Tf32, _) => DType::Fp32,
        (_, Some(false)) => DType::Bf16,
        _ => DType::Fp32,
    }
}

impl Default for TrainingConfig {
    fn default() -> Self {
        TrainingConfig {
            seq_length: 2048,
            micro_batch_size: 1,
            global_batch_size: 0,
            dtype: DType::Bf16,
            recompute: Recompute::None,
            flash_attention: true,
            attention_softmax: AttentionSoftmax::Fused,
            rope_fusion: true,
            mamba_gate: MambaGate::Scan,
            attention_kernel: AttentionKernelChoice::Auto,
            iterations: 1,
            dropout: None,
            grad_reduce_in_fp32: None,
            expert_grad_reduce_in_fp32: None,
            fp8_recipe: Fp8Recipe::Delayed,
            recompute_modules: Vec::new(),
            exp_avg_dtype: DType::Fp32,
            exp_avg_sq_dtype: DType::Fp32,
            main_params_dtype: DType::Fp32,
            store_param_remainders: false,
            store_params: true,
            fp8_param: false,
            cudnn_norm: false,
            fp8_impl: Fp8Impl::TransformerEngine,
            cross_entropy_fusion: false,
            cpu_offload_layers: 0,
            mtp_num_layers: 0,
            mtp_repeated_layer: false,
            mtp_bf16: false,
            fp8_dot_product_attention: false,
            optimizer: OptimizerKind::Adam,
            muon_ns_steps: 5,
            bf16_layers_at_start: 0,
            bf16_layers_at_end: 0,
            module_dtype: std::collections::BTreeMap::new(),
        }
    }
}

impl TrainingConfig {
    /// Whether decoder layer `layer` (0-based; `num_layers` in the model, MTP blocks beyond it)
    /// runs in BF16 under `bf16_layers_at_start` / `_at_end` in a quantized run.
    pub fn layer_in_bf16(&self, layer: u64, num_layers: u64) -> bool {
        self.dtype.is_te_quantized()
            && layer < num_layers
            && (layer < self.bf16_layers_at_start || layer >= num_layers.saturating_sub(self.bf16_layers_at_end))
    }

    /// This run with every linear layer in `dtype` and no per-module precision: what a BF16 layer
    /// of a quantized run, or a module of `module_dtype`, is built from.
    pub fn with_gemm_dtype(&self, dtype: DType) -> TrainingConfig {
        TrainingConfig {
            dtype,
            module_dtype: std::collections::BTreeMap::new(),
            fp8_dot_product_attention: self.fp8_dot_product_attention && dtype == DType::Fp8,
            ..self.clone()
        }
    }

    /// MTP blocks with weights of their own: one when `mtp_repeated_layer`, else one per depth.
    pub fn mtp_weight_blocks(&self) -> u64 {
        if self.mtp_repeated_layer {
            self.mtp_num_layers.min(1)
        } else {
            self.mtp_num_layers
        }
    }

    /// The submodules recomputed in backward, as [`RecomputeModule::bit`]s: `recompute_modules`,
    /// or core attention alone for `recompute: selective`; 0 for none (and for full, which
    /// re-runs whole layers).
    pub fn recompute_mask(&self) -> u8 {
        match self.recompute {
            Recompute::Full => 0,
            _ if !self.recompute_modules.is_empty() => self.recompute_modules.iter().fold(0, |m, r| m | r.bit()),
            Recompute::Selective => RecomputeModule::CoreAttn.bit(),
            Recompute::None | Recompute::SelectiveOp => 0,
        }
    }

    /// Whether `module` is re-run in backward by selective recomputation.
    pub fn recomputes(&self, module: RecomputeModule) -> bool {
        self.recompute_mask() & module.bit() != 0
    }

    /// The dtype the compute model times this run's GEMMs in (the `dtype` argument of
    /// [`crate::OpSpec::query`]): `dtype`, except that FP8 training with the `mxfp8` recipe runs
    /// Blackwell's block-scaled GEMMs, [`DType::Mxfp8`], which the efficiency table may calibrate
    /// apart from per-tensor FP8 (without an `mxfp8` row they take the `fp8` one). The ops with a
    /// dtype of their own (the BF16 logits GEMM) and the non-GEMM ops (BF16 under FP8) are
    /// unaffected; memory accounting keeps `dtype` and `fp8_recipe`.
    pub fn gemm_compute_dtype(&self) -> DType {
        match (self.dtype, self.fp8_recipe) {
            (DType::Fp8, Fp8Recipe::Mxfp8) => DType::Mxfp8,
            (DType::Fp8, Fp8Recipe::Blockwise) => DType::Fp8Block,
            (d, _) => d,
        }
    }

    /// Bytes per element of the weights and activations. FP8 training keeps bf16 weights and
    /// activations between layers (Transformer Engine), so fp8 counts 2.
    pub fn activation_bytes(&self) -> u64 {
        self.dtype.activation_bytes()
    }

    /// The dtype of gradients as accumulated and reduced across DP. Megatron-LM turns on
    /// `--accumulate-allreduce-grads-in-fp32` for bf16 (arguments.py: "bfloat16 requires gradient
    /// accumulation and all-reduce to be done in fp32"), so bf16/fp8/fp32/tf32 reduce in fp32 (4
    /// bytes); fp16 reduces in fp16 (2 bytes), Megatron's fp16 default.
    pub fn grad_dtype(&self) -> DType {
        reduce_dtype(self.dtype, self.grad_reduce_in_fp32)
    }

    /// The routed experts' gradient reduction dtype: [`TrainingConfig::grad_dtype`] unless
    /// `expert_grad_reduce_in_fp32` says otherwise (false: the weights' dtype, bf16 below fp32).
    pub fn expert_grad_dtype(&self) -> DType {
        reduce_dtype(self.dtype, self.expert_grad_reduce_in_fp32.or(self.grad_reduce_in_fp32))
    }

    /// Bytes per parameter of Muon's state: the momentum (in `exp_avg_dtype`) and the main
    /// parameter (as [`TrainingConfig::optimizer_bytes_per_param`] counts it).
    pub fn muon_bytes_per_param(&self) -> u64 {
        self.optimizer_bytes_per_param() - self.exp_avg_sq_dtype.bytes()
    }

    /// Optimizer-state bytes per parameter: the two moments and, when training below fp32, the
    /// main copy (`main_params_dtype`, or a 2-byte remainder with `store_param_remainders`).
    /// 12 by default (Megatron's 4 + 4 + 4).
    pub fn optimizer_bytes_per_param(&self) -> u64 {
        let main = match self.dtype {
            DType::Fp32 | DType::Tf32 => 0,
            _ if !self.store_params => 0,
            _ if self.store_param_remainders => 2,
            _ => self.main_params_dtype.bytes(),
        };
        self.exp_avg_dtype.bytes() + self.exp_avg_sq_dtype.bytes() + main
    }

    /// Whether dropout masks are stored, for `m` (see [`TrainingConfig::dropout`]).
    pub fn dropout_on(&self, m: &ModelConfig) -> bool {
        match self.dropout {
            Some(p) => p > 0.0,
            None => !m.gated_mlp,
        }
    }

    /// Bytes per element of the inputs a linear layer saves for its weight gradient: 1 in FP8
    /// training (Transformer Engine keeps the FP8 cast), else the activation dtype. NVFP4 keeps
    /// its column-wise FP4 copy, [`DType::NVFP4_BYTES_PER_ELEMENT`] (0.5625), counted here as 1
    /// (whole bytes: an upper bound).
    pub fn saved_linear_input_bytes(&self) -> u64 {
        match self.dtype {
            DType::Fp8 | DType::Fp4 => 1,
            d => d.bytes(),
        }
    }
}

/// The softmax of unfused attention (`training.attention_softmax`): which kernels pass over the
/// `[b, heads, s, s]` scores between the two batched GEMMs. With dropout on, both add PyTorch's
/// dropout (read, write, 1-byte mask; backward: read the gradient and the mask, write).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttentionSoftmax {
    /// Megatron-LM's `FusedScaleMaskSoftmax` (its `scaled_upper_triang_masked_softmax` CUDA
    /// kernel, in Megatron-LM since 2020): one read and one write of the scores forward; backward
    /// reads the gradient and the saved probabilities and writes the scores' gradient. Under a
    /// causal mask it reads only up to the diagonal (half the scores) and writes whole rows.
    /// Default.
    #[default]
    Fused,
    /// Separate PyTorch kernels, as Megatron-LM's 2019 `mpu/transformer.py` (at a54978bbf4,
    /// `GPT2ParallelSelfAttention.forward`, lines 122-141): `torch.mul(scores, mask)`, the
    /// subtraction of `10000 * (1 - mask)` and `torch.nn.Softmax`, each reading and writing
    /// the scores; backward adds the multiply's gradient (the subtraction passes its own
    /// through).
    Eager,
}

/// Where a Mamba-2 mixer applies its gate (`training.mamba_gate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MambaGate {
    /// Inside the SSD scan (Megatron-Core). Default.
    #[default]
    Scan,
    /// In the fused gated RMSNorm after an ungated scan (NeMo Automodel).
    Norm,
}

/// The fused attention kernel (`training.attention_kernel`), timed from its published
/// benchmarks (`llmsim-compute` `data/attention.csv`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKernelChoice {
    /// Transformer Engine's default for the GPU: cuDNN fused attention on Hopper and later,
    /// FlashAttention-2 on Ampere. Default.
    #[default]
    Auto,
    /// cuDNN 9 fused attention (Transformer Engine `FusedAttention`).
    Cudnn,
    /// FlashAttention-2: the `flash-attn` package, and the kernels of PyTorch's SDPA flash
    /// backend (`aten/src/ATen/native/transformers/cuda/flash_attn`).
    Fa2,
    /// FlashAttention-3 (Hopper only; elsewhere the roofline of class `flash_attention`).
    Fa3,
}

impl AttentionKernelChoice {
    /// The kernel the compute model times, `None` for the GPU's default.
    pub fn kernel(self) -> Option<llmsim_compute::AttentionKernel> {
        use llmsim_compute::AttentionKernel as K;
        match self {
            AttentionKernelChoice::Auto => None,
            AttentionKernelChoice::Cudnn => Some(K::Cudnn),
            AttentionKernelChoice::Fa2 => Some(K::Fa2),
            AttentionKernelChoice::Fa3 => Some(K::Fa3),
        }
    }
}

/// Which FSDP implementation shards parameters under ZeRO-3 (`parallel.fsdp_impl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FsdpImpl {
    /// Megatron-FSDP: parameters are used in place in the gathered buffer. Default.
    #[default]
    Megatron,
    /// PyTorch FSDP2 (`fully_shard`): each unshard copies the gathered parameters out of the
    /// all-gather buffer on the compute stream.
    Fsdp2,
}

/// How data-parallel gradients are averaged (`parallel.grad_scaling`): Megatron's DDP multiplies
/// its gradient buffer in place (`grad_data *= factor`: one read and one write of every gradient
/// in the buffer, on the compute stream) wherever the collective itself does not average.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GradScaling {
    /// Each bucket is scaled by `1 / (dp·cp)` just before its collective, which then sums
    /// (Megatron-Core `average_in_collective: false`, its default and Megatron-LM's; Megatron-LM
    /// before Megatron-Core divided its buffer the same way, `buffer_.data /= dp`). No pass when
    /// the group is one rank. Default.
    #[default]
    BeforeReduce,
    /// The collective averages (`average_in_collective: true`, Megatron-Bridge's recipes and
    /// NeMo 2's default): no pass over dense gradients; routed-expert buckets are still scaled by
    /// `expert-DP / (dp·cp)` when their group differs (`distributed_data_parallel.py`).
    InCollective,
    /// Per-token loss (`calculate_per_token_loss: true`): the collectives sum unscaled and, after
    /// the whole reduction, the rank's entire gradient buffer is scaled once by `1 / tokens`
    /// before the optimizer (`finalize_model_grads.py` `scale_gradients`).
    PerToken,
    /// No pass: the collective averages everything (FSDP2 and other frameworks).
    None,
}

/// Which pipeline runtime issues the pipeline sends and receives (`parallel.pp_impl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PpImpl {
    /// Megatron's schedules (`schedules.py`, `p2p_communication.py`). Without
    /// `overlap_p2p_comm`, the interleaved schedule runs each steady-state forward and the
    /// backward after it, then one batch of both sends and both receives. Default.
    #[default]
    Megatron,
    /// `torch.distributed.pipelining` (TorchTitan, NeMo Automodel): one action per time step,
    /// each followed by its batch of sends and receives (`PipelineScheduleMulti`).
    Torch,
}

/// How tensor parallelism runs its collectives (`parallel.tp_impl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TpImpl {
    /// Megatron-Core: with sequence parallelism a column-parallel linear keeps only its input's
    /// shard and all-gathers it again in backward for the weight gradient
    /// (`LinearWithGradAccumulationAndAsyncCommunication`); activations travel in the
    /// activation dtype. Default.
    #[default]
    Megatron,
    /// PyTorch DTensor tensor parallelism as TorchTitan applies it (`PrepareModuleInput`,
    /// `ColwiseParallel`, `RowwiseParallel`): autograd keeps the gathered input of a
    /// column-parallel linear for its weight gradient, so backward has no second all-gather
    /// (the gradient of the gather is one reduce-scatter; under async TP it is fused with the
    /// input-gradient GEMM). With FP8 (`dtype: fp8`, current scaling = torchao's tensorwise
    /// Float8) the forward all-gathers of the attention and MLP inputs carry FP8
    /// (`PrepareFloat8ModuleInput` casts before the gather; TorchTitan `apply_tp` with
    /// `enable_float8`); gradients stay in the activation dtype. Async TP
    /// (`tp_comm_overlap`) fuses each collective with its GEMM in one chunk per rank moved by
    /// copy engines (`torch.distributed._symmetric_memory` `_pipelined_produce_and_all2all`).
    /// Memory is counted as for `megatron` (the gathered input autograd keeps is not added;
    /// under full recompute, as in TorchTitan's TP runs, only block inputs are kept anyway).
    Dtensor,
}

/// How context-parallel attention runs (`parallel.cp_impl`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CpImpl {
    /// Megatron-Core / Transformer Engine's p2p ring (`AttnFuncWithCPAndKVP2P`) with
    /// load-balanced chunks, timed as one attention kernel over the local queries and the whole
    /// sequence's keys, the K/V all-gather and dK/dV reduce-scatter it amounts to, and the
    /// per-step merges. Default.
    #[default]
    Megatron,
    /// PyTorch's experimental ring attention (`torch.distributed.tensor.experimental`
    /// `context_parallel`, `_attention.py`) as TorchTitan runs it, compiled (`torch.compile` of
    /// each block): rotate method `allgather` (TorchTitan's default), causal load balancing on.
    /// Forward: one all-gather of the K/V the SDPA call receives (TorchTitan's Llama repeats the
    /// K/V heads to the query heads first), then one SDPA call per ring step (the local causal
    /// block, then `cp - 1` non-causal calls over half the local keys, the slowest rank's
    /// share), each merged into the running fp32 output by one fused element-wise kernel.
    /// Backward: the all-gather again, one SDPA backward call per step, and after every step the
    /// fp32 dK/dV passed to the next rank (`permute_tensor`, an all-to-all in which each rank
    /// sends to one peer) with fused fp32 accumulations. Traced, each collective is waited for
    /// right after it is issued, so none overlaps the kernels. Needs
    /// `training.flash_attention`; sliding-window layers (which PyTorch's ring does not
    /// support) keep the `megatron` model. The kernel is `training.attention_kernel` (PyTorch's
    /// flash backend: `fa2`).
    TorchRing,
    /// As `torch_ring`, without torch.compile: each collective is waited for at first use, so
    /// the all-gather runs beside the first step's kernel and each dK/dV exchange beside the
    /// next step's; the merges and accumulations run as PyTorch's separate element-wise kernels
    /// (fp32 casts, eight kernels per forward merge, fp32 zeros, the K/V `cat` at every step).
    TorchRingEager,
}

/// MoE token dispatcher (Megatron-Core `--moe-token-dispatcher-type`). Both move the tokens as
/// an all-to-all over the expert-parallel group; they differ in the token permutations around it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum MoeDispatcher {
    /// `MoEAlltoAllTokenDispatcher`: permute the tokens by expert before the all-to-all, then,
    /// with more than one local expert, sort the received chunks by local expert
    /// ("permutation 2", `sort_chunks_by_idxs`) and unsort them before the combine, and
    /// unpermute after it (Megatron-Core `token_dispatcher.py`, core_v0.9 to HEAD). Default.
    #[default]
    #[serde(rename = "alltoall")]
    AllToAll,
    /// `MoEFlexTokenDispatcher` (DeepEP / HybridEP): the dispatch kernel lays the tokens out by
    /// destination, so one permutation by local expert after it and one unpermutation before the
    /// combine remain. It sends a token once to each EP rank holding one of its experts (DeepEP
    /// `get_dispatch_layout`'s `is_token_in_rank`; the combine reduces a token's outputs on each
    /// rank before sending them back), where `alltoall` sends one copy per expert: the bytes
    /// follow [`ParallelConfig::moe_routing`]. Inside one server llmsim times the dispatch and
    /// combine as all-to-alls of those bytes, at HybridEP's measured bandwidth through its torch
    /// API on GB200/GB300 and B200/B300 (about 0.69x NCCL's all-to-all model on GB200 at 8
    /// ranks; `llmsim_ccl::scaleup::HybridEp`) and at NCCL's elsewhere. When the EP group spans servers, a token crosses
    /// the network once per destination server, to the GPU with the same local index there,
    /// which forwards it over NVLink (DeepEP's internode kernels, `get_dispatch_layout`'s
    /// `num_tokens_per_rdma_rank`; HybridEP): the dispatch runs as an all-to-all among those
    /// GPUs (one per server) of a copy per (token, destination server), then an NVLink
    /// all-to-all of the per-rank copies; the combine in reverse. The two phases run one after
    /// the other (DeepEP pipelines them in one kernel).
    #[serde(rename = "flex")]
    Flex,
}

/// The `flex` token dispatcher's communication library (Megatron-Core
/// `--moe-flex-dispatcher-backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum FlexBackend {
    /// NVIDIA's HybridEP (DeepEP's `hybrid-ep` branch): dispatch and combine with the
    /// permutations fused, one `cudaStreamSynchronize` a forward dispatch. Default.
    #[default]
    #[serde(rename = "hybridep")]
    HybridEp,
    /// DeepSeek's DeepEP: the host spins on the received counts in the dispatch, and
    /// Megatron-Core's multi-hot conversion syncs three more times (`_indices_to_multihot`).
    #[serde(rename = "deepep")]
    DeepEp,
}

/// Which experts a token goes to, for the bytes of a deduplicating dispatcher (`flex`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum MoeRouting {
    /// A uniformly random set of `num_experts_per_tok` experts per token: Megatron-Core's
    /// benchmark routing (`--moe-router-force-load-balancing`: random router logits,
    /// `RandomSTE`), and the balanced limit of a learned router. Default.
    #[default]
    #[serde(rename = "random")]
    Random,
    /// Token `t` goes to experts `t·k .. t·k + k - 1` (mod the expert count): NeMo Automodel's
    /// `FakeBalancedGate` with `noise: 0`, which its benchmark recipes use; a token's experts
    /// then sit on one or two EP ranks. That gate has no weights: no router GEMM runs, forward
    /// or backward.
    #[serde(rename = "round_robin")]
    RoundRobin,
}

/// Which implementation runs the experts' MLP: the code decides the kernels around the expert
/// GEMMs (bias handling, the gated activation's clamp) and the host synchronizations there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
pub enum MoeExperts {
    /// Megatron-Core's `TEGroupedMLP` (Megatron-LM, NeMo, Megatron-Bridge): with biases, fc2's is
    /// added by a Python loop over the local experts and accumulated into `main_grad` by the DDP
    /// hook; a clamped activation (GPT-OSS) adds two clamp kernels, a concatenation and a
    /// blocking host-to-device copy before the fused activation (megatron-core 0.15/0.16
    /// `transformer/moe/experts.py`, `fusions/fused_bias_geglu.py`). Default.
    #[default]
    #[serde(rename = "megatron")]
    Megatron,
    /// NeMo Automodel's `GroupedExpertsDeepEP` (its GPT-OSS, Qwen3-MoE and DeepSeek benchmark
    /// recipes): the clamped activation is one `torch.compile`d kernel with no host copy; both
    /// biases are added by Python loops over the local experts (`_apply_bias`; fc2's scaled by
    /// the DeepEP dispatcher's FP32 probabilities), each loop followed by a concatenation
    /// (`nemo_automodel/components/moe/layers.py`, Automodel 8d9bfb90e).
    #[serde(rename = "automodel")]
    Automodel,
}

impl MoeRouting {
    /// Expected number of EP ranks a token's `k` of `e` experts are on, with `e / ep` experts per
    /// rank (consecutive expert ids per rank, as Megatron-Core and Automodel place them).
    pub fn ranks_per_token(self, e: u64, k: u64, ep: u64) -> f64 {
        self.ranks_per_token_grouped(e, k, ep, 0, 0)
    }

    /// [`MoeRouting::ranks_per_token`] under group-limited routing
    /// ([`crate::ModelConfig::moe_router_num_groups`]): the `e` experts form `groups` groups of
    /// consecutive experts and a token's `k` experts come from `gtopk` of them. For random
    /// routing the chosen groups are a uniform `gtopk`-subset and the `k` experts a uniform
    /// subset of those groups' experts (router scores are exchangeable within the chosen groups:
    /// the balanced limit). `groups` 0 or 1: no limit. Round-robin routing has no groups.
    pub fn ranks_per_token_grouped(self, e: u64, k: u64, ep: u64, groups: u64, gtopk: u64) -> f64 {
        let (e, ep) = (e.max(1), ep.max(1));
        if self == MoeRouting::Random && groups > 1 && e.is_multiple_of(groups) && (1..groups).contains(&gtopk) {
            return grouped_ranks_per_token(e, k, ep, groups, gtopk);
        }
        let k = k.clamp(1, e);
        let local = (e / ep).max(1);
        match self {
            MoeRouting::Random => {
                // ep · (1 - C(e - local, k) / C(e, k)): the chance a rank holds none of the k.
                ep as f64 * (1.0 - miss_all(e, local, k))
            }
            MoeRouting::RoundRobin => {
                // The windows start at multiples of k (mod e); average the ranks each touches.
                let starts = e / gcd(e, k);
                let total: u64 = (0..starts)
                    .map(|t| {
                        let s = (t * k) % e;
                        let mut ranks: Vec<u64> = (0..k).map(|j| ((s + j) % e) / local).collect();
                        ranks.sort_unstable();
                        ranks.dedup();
                        ranks.len() as u64
                    })
                    .sum();
                total as f64 / starts as f64
            }
        }
    }
}

impl MoeRouting {
    /// Expected number of servers other than its own that a token's `k` of `e` experts are on,
    /// with the `ep` ranks on `servers` servers (`ep / servers` consecutive ranks each), averaged
    /// over the source servers: the tokens a deduplicating dispatcher sends once per destination
    /// server over the network (DeepEP's internode kernels, HybridEP). A server holds
    /// consecutive experts as a rank does, so it counts as a rank of `e / servers` experts
    /// ([`MoeRouting::ranks_per_token`]); each server is as likely to be the source, so the own
    /// server is among a token's `D` servers `D / servers` of the time.
    pub fn other_servers_per_token(self, e: u64, k: u64, servers: u64) -> f64 {
        self.other_servers_per_token_grouped(e, k, servers, 0, 0)
    }

    /// [`MoeRouting::other_servers_per_token`] under group-limited routing
    /// ([`MoeRouting::ranks_per_token_grouped`]).
    pub fn other_servers_per_token_grouped(self, e: u64, k: u64, servers: u64, groups: u64, gtopk: u64) -> f64 {
        let servers = servers.max(1);
        let d = self.ranks_per_token_grouped(e, k, servers, groups, gtopk);
        d * (servers - 1) as f64 / servers as f64
    }
}

/// `C(n - m, k) / C(n, k)`: the chance that a uniform `k`-subset of `n` items misses `m` given ones.
fn miss_all(n: u64, m: u64, k: u64) -> f64 {
    (0..k).fold(1.0, |p, i| {
        p * n.saturating_sub(m).saturating_sub(i) as f64 / n.saturating_sub(i).max(1) as f64
    })
}

/// Expected EP ranks a token touches under random group-limited routing
/// ([`MoeRouting::ranks_per_token_grouped`]): for each rank, the chance it is missed, summed over
/// which of the groups it overlaps are chosen (a rank of consecutive experts overlaps few groups;
/// past 16 the chosen ones are counted by their number, each overlap taken at its mean).
fn grouped_ranks_per_token(e: u64, k: u64, ep: u64, groups: u64, gtopk: u64) -> f64 {
    let (size, local) = (e / groups, (e / ep).max(1));
    let chosen = gtopk * size;
    let k = k.min(chosen);
    // C(a, b) as f64, for the group choices.
    let choose = |a: u64, b: u64| -> f64 {
        if b > a {
            return 0.0;
        }
        (0..b).fold(1.0, |c, i| c * (a - i) as f64 / (i + 1) as f64)
    };
    let all = choose(groups, gtopk);
    let mut touched = 0.0;
    for r in 0..ep {
        let (lo, hi) = ((r * local).min(e), ((r + 1) * local).min(e));
        // The rank's experts in each group it overlaps.
        let overlap: Vec<u64> = (lo / size..hi.div_ceil(size))
            .map(|g| hi.min((g + 1) * size) - lo.max(g * size))
            .collect();
        let c = overlap.len() as u64;
        let mut missed = 0.0;
        if c <= 16 {
            for mask in 0u32..(1 << c) {
                let j = u64::from(mask.count_ones());
                if j > gtopk {
                    continue;
                }
                let m: u64 = (0..c as usize).filter(|i| mask & (1 << i) != 0).map(|i| overlap[i]).sum();
                missed += choose(groups - c, gtopk - j) / all * miss_all(chosen, m, k);
            }
        } else {
            let mean = overlap.iter().sum::<u64>() as f64 / c as f64;
            for j in 0..=c.min(gtopk) {
                let m = (j as f64 * mean).round() as u64;
                missed += choose(c, j) * choose(groups - c, gtopk - j) / all * miss_all(chosen, m, k);
            }
        }
        touched += 1.0 - missed;
    }
    touched
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Pipeline schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize, JsonSchema)]
#[schemars(transform = schedule_aliases)]
pub enum PipelineSchedule {
    /// PipeDream-flush 1F1B (Narayanan et al. 2021). Default.
    #[default]
    #[serde(rename = "1f1b", alias = "1F1B", alias = "one_f_one_b")]
    OneFOneB,
    /// Interleaved 1F1B with `vpp` model chunks per stage.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// DualPipeV (deepseek-ai/DualPipe `dualpipev.py`, the "cut-in-half" DualPipe of the
    /// DeepSeek-V3 report): each rank holds two chunks in a V, virtual stage `s` and `2·pp-1-s`
    /// (`vpp` is 2), micro-batches go down the ranks through chunk 0 and back up through
    /// chunk 1, so rank 0 holds both the embedding and the loss. With `moe_a2a_overlap` each
    /// steady-state forward runs merged with another micro-batch's backward (DualPipe's
    /// overlapped forward-backward). With tp = 1 the reference's zero bubble runs too: the
    /// transformer layers' weight gradients of the warm-down backwards are deferred to fill the
    /// bubble (the README's (PP/2-1)(F&B + B - 3W)); with tp > 1 each backward keeps them.
    /// Needs at least `2·pp` micro-batches.
    #[serde(rename = "dualpipev", alias = "dualpipe_v")]
    DualPipeV,
}

/// `Ok` when `t` is an FP8 or FP4 run on Transformer Engine; else an error naming `field`, saying
/// `what` needs one.
fn te_quantized_run(t: &TrainingConfig, field: &str, what: &str) -> Result<(), WorkloadError> {
    if t.dtype.is_te_quantized() && t.fp8_impl == Fp8Impl::TransformerEngine {
        return Ok(());
    }
    Err(WorkloadError::invalid(
        field,
        format!(
            "{what}: it needs dtype fp8 or fp4 with fp8_impl: transformer_engine (dtype is {})",
            t.dtype
        ),
    ))
}

// serde's aliases, which schemars does not see (`llmsim schema`; llmsim-cli's schema test checks
// that every `alias = ` of the scenario types is in the schema).
fn training_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_property_aliases(
        s,
        &[
            ("seq_len", "seq_length"),
            ("cpu_offloading_num_layers", "cpu_offload_layers"),
            ("fp8_param_gather", "fp8_param"),
            ("mtp_layers", "mtp_num_layers"),
            ("mtp_use_repeated_layer", "mtp_repeated_layer"),
            ("keep_mtp_spec_in_bf16", "mtp_bf16"),
            ("fp8_dpa", "fp8_dot_product_attention"),
            ("num_layers_at_start_in_bf16", "bf16_layers_at_start"),
            ("num_layers_at_end_in_bf16", "bf16_layers_at_end"),
        ],
    );
}

fn optimizer_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_variant_aliases(s, &[("adamw", "adam")]);
}

fn schedule_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_variant_aliases(s, &[("1F1B", "1f1b"), ("one_f_one_b", "1f1b"), ("dualpipe_v", "dualpipev")]);
}

fn parallel_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_property_aliases(
        s,
        &[
            ("tensor_model_parallel_size", "tp"),
            ("pipeline_model_parallel_size", "pp"),
            ("data_parallel_size", "dp"),
            ("expert_model_parallel_size", "ep"),
            ("expert_tensor_parallel_size", "etp"),
            ("moe_token_dispatcher_type", "moe_token_dispatcher"),
            ("moe_flex_dispatcher_backend", "moe_flex_backend"),
            ("context_parallel_size", "cp"),
            ("virtual_pipeline_model_parallel_size", "vpp"),
            ("decoder_first_pipeline_num_layers", "first_stage_layers"),
            ("decoder_last_pipeline_num_layers", "last_stage_layers"),
            ("overlap_moe_expert_parallel_comm", "moe_a2a_overlap"),
            ("cutedsl_fused_grouped_mlp", "moe_fused_grouped_mlp"),
        ],
    );
}

/// `parallel:` — the parallelism plan. Megatron's long flag names are accepted as aliases.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(transform = parallel_aliases)]
pub struct ParallelConfig {
    /// Tensor parallel degree. Default 1.
    #[serde(alias = "tensor_model_parallel_size")]
    pub tp: u64,
    /// Pipeline parallel degree. Default 1.
    #[serde(alias = "pipeline_model_parallel_size")]
    pub pp: u64,
    /// Data parallel degree. Default 0: derived as `gpus / (tp · cp · pp)`.
    #[serde(alias = "data_parallel_size")]
    pub dp: u64,
    /// Expert parallel degree, carved out of `dp · cp` (with `etp: 1`, out of `tp · dp · cp`).
    /// Default 1.
    #[serde(alias = "expert_model_parallel_size")]
    pub ep: u64,
    /// Expert tensor parallel degree (Megatron-Core `--expert-tensor-parallel-size`): how many
    /// ranks shard each expert's weights. Default 0 = `tp` (Megatron-Core's default). `1`, as
    /// the MoE recipes of Megatron-Bridge set it, keeps experts whole: the expert-parallel group
    /// then runs across the tensor-parallel ranks (Megatron-Core's expert rank order
    /// etp-ep-edp-pp), the tokens go to the experts straight from their sequence-parallel shard
    /// and the expert layer needs no TP all-gather / reduce-scatter.
    #[serde(alias = "expert_tensor_parallel_size")]
    pub etp: u64,
    /// MoE token dispatcher. Default `alltoall` (the Megatron-Bridge MoE recipes' choice;
    /// Megatron-Core's own command-line default is `allgather`, which llmsim does not model).
    #[serde(alias = "moe_token_dispatcher_type")]
    pub moe_token_dispatcher: MoeDispatcher,
    /// Which experts each token goes to, for the `flex` dispatcher's bytes (it sends a token
    /// once per EP rank holding one of its experts). Default `random`.
    pub moe_routing: MoeRouting,
    /// The `flex` dispatcher's backend (Megatron-Core `--moe-flex-dispatcher-backend`):
    /// `hybridep` (default, Megatron-Bridge's choice) or `deepep`. It sets the dispatcher's host
    /// work and, inside the NVLink domain, its bandwidth (HybridEP's measured figures where they
    /// exist; NCCL's model for DeepEP). No effect with another dispatcher.
    #[serde(alias = "moe_flex_dispatcher_backend")]
    pub moe_flex_backend: FlexBackend,
    /// Which implementation runs the experts' MLP (`megatron`, the default, or `automodel`):
    /// the kernels around the expert GEMMs and the host synchronizations there.
    pub moe_experts: MoeExperts,
    /// How tensor parallelism runs its collectives: `megatron` (default) or `dtensor`
    /// (PyTorch DTensor as TorchTitan applies it). No effect with `tp: 1`.
    pub tp_impl: TpImpl,
    /// Context parallel degree. Default 1.
    #[serde(alias = "context_parallel_size")]
    pub cp: u64,
    /// How context-parallel attention runs: `megatron` (default), `torch_ring` (PyTorch's
    /// experimental ring attention as TorchTitan runs it, compiled) or `torch_ring_eager`. No
    /// effect with `cp: 1`.
    pub cp_impl: CpImpl,
    /// Virtual pipeline stages (model chunks) per pipeline rank. Default 1. `vpp > 1` implies the
    /// interleaved schedule, as in Megatron.
    #[serde(alias = "virtual_pipeline_model_parallel_size")]
    pub vpp: u64,
    /// Default 1F1B (interleaved when `vpp > 1`).
    pub schedule: PipelineSchedule,
    /// Megatron `--sequence-parallel`. Default false; forced off when tp = 1 (as Megatron does).
    /// Required for MoE with tp > 1 (Megatron asserts it).
    pub sequence_parallel: bool,
    /// Megatron `--use-distributed-optimizer` (≡ ZeRO-1). Default false.
    pub use_distributed_optimizer: bool,
    /// ZeRO stage 0–3. Default 0. 1 ≡ distributed optimizer; 2 also shards gradients; 3 also
    /// parameters. After [`ParallelConfig::resolve`], `zero_stage >= 1` ⇔ `use_distributed_optimizer`.
    pub zero_stage: u8,
    /// ZeRO-3 / FSDP only: free the gathered parameters of an FSDP unit after its forward and
    /// gather them again before its backward (PyTorch FSDP `FULL_SHARD`, FSDP2
    /// `reshard_after_forward=True`, Megatron-FSDP `optim_grads_params`). Default true. `false`
    /// keeps each unit's parameters gathered from its first forward to the end of the step and
    /// reduce-scatters its gradients once, in the last micro-batch: Llama 3's FSDP (Dubey et al.
    /// 2024, §3.3.2, "we do not reshard after forward") and TorchTitan with pipeline parallelism.
    pub reshard_after_forward: bool,
    /// Which FSDP runs ZeRO-3 (`zero_stage: 3`): `megatron` (Megatron-FSDP, and FSDP whose
    /// gathered buffer holds the parameters in place) or `fsdp2` (PyTorch's `fully_shard`, as
    /// TorchTitan and NeMo Automodel use it), whose every unshard then copies the gathered
    /// parameters out of the all-gather buffer into the unit's unsharded parameters on the
    /// compute stream: one read and one write of them (`FSDPParamGroup.wait_for_unshard` ->
    /// `foreach_all_gather_copy_out`, before each unit's forward and backward). Default `megatron`.
    pub fsdp_impl: FsdpImpl,
    /// ZeRO-3 / FSDP with `reshard_after_forward: false`: reduce-scatter each unit's gradients
    /// and free its gathered parameters after *every* micro-batch's backward, gathering the unit
    /// again at its next forward or backward, instead of once per step. This is PyTorch FSDP2's
    /// default (`requires_gradient_sync` and `reshard_after_backward` both true) whenever nothing
    /// turns it off between micro-batches: e.g. `torch.distributed.pipelining` skips gradient
    /// sync only when a stage's `submod` is itself an FSDP module ("Non-DP submodule, regular
    /// backward" otherwise, `pipelining/stage.py` `backward_maybe_with_nosync`), which NeMo
    /// Automodel's stages (the whole `...ForCausalLM`, with `fully_shard` on its inner modules)
    /// are not. At the end of each stage's backward the compute stream waits for the last
    /// reduce-scatter (FSDP2's root post-backward callback). Default false. With
    /// `reshard_after_forward: true` gradients are already reduce-scattered every micro-batch.
    pub fsdp_sync_every_microbatch: bool,
    /// Overlap the DP gradient reduction with backward. Default false (Megatron's default).
    pub overlap_grad_reduce: bool,
    /// Overlap the distributed optimizer's parameter all-gather with the next forward.
    /// Default false (Megatron's default).
    pub overlap_param_gather: bool,
    /// How the data-parallel gradients are divided by the number of replicas, and with it which
    /// in-place pass over the gradient buffer each step runs on the compute stream. Default
    /// `before_reduce` (Megatron-LM's default). Not used with FSDP (ZeRO-3 over more than one
    /// rank), whose gradients take another path.
    pub grad_scaling: GradScaling,
    /// Megatron's NaN check of the gradients before each data-parallel bucket's collective:
    /// the L2 norm of the bucket's gradient buffer on the compute stream, read on the host
    /// (Megatron-Core `param_and_grad_buffer.py` `start_grad_sync` -> `check_grads`; Megatron-LM
    /// `--check-for-nan-in-loss-and-grad`, on by default; Megatron-Bridge's and NeMo 2's
    /// performance settings turn it off). Default true. Not used with FSDP.
    pub check_for_nan_in_grad: bool,
    /// Parameters per DP gradient bucket. Default 0 = Megatron's `max(40_000_000, 1_000_000 · dp)`,
    /// filled in by [`ParallelConfig::resolve`].
    pub grad_bucket_size: u64,
    /// Layers of each virtual pipeline stage, in model order: Megatron's `chunk·pp + stage`
    /// (`pp·vpp` entries summing to `num_hidden_layers`; a stage may hold 0, e.g. a chunk with
    /// the embedding only), or for `schedule: dualpipev` the V's `2·pp` stages (rank 0's first
    /// chunk, ..., rank pp-1's two chunks, ..., rank 0's second chunk). Default empty: an even split, or the one the options below ask for;
    /// [`ParallelConfig::resolve`] fills it in whenever the split is uneven.
    pub pipeline_layers: Vec<u64>,
    /// Layers on the first pipeline stage (over its `vpp` chunks); the others split the rest
    /// evenly. Megatron-Core `--decoder-first-pipeline-num-layers`. Default 0: even.
    #[serde(alias = "decoder_first_pipeline_num_layers")]
    pub first_stage_layers: u64,
    /// Layers on the last pipeline stage. Megatron-Core `--decoder-last-pipeline-num-layers`.
    /// Default 0: even.
    #[serde(alias = "decoder_last_pipeline_num_layers")]
    pub last_stage_layers: u64,
    /// Count the embedding as one layer in the split, so the first virtual stage holds one layer
    /// fewer. Megatron-Core `--account-for-embedding-in-pipeline-split`. Default false.
    pub account_for_embedding_in_pipeline_split: bool,
    /// Count the output layer and loss as one layer, so the last virtual stage holds one fewer.
    /// Megatron-Core `--account-for-loss-in-pipeline-split`. Default false.
    pub account_for_loss_in_pipeline_split: bool,
    /// Overlap the sequence-parallel TP collectives with the GEMMs beside them (Megatron
    /// `--tp-comm-overlap`, Transformer Engine userbuffers): needs sequence parallelism and a TP
    /// group inside one server. Default false.
    pub tp_comm_overlap: bool,
    /// Without `tp_comm_overlap`, a column-parallel layer's backward runs its TP collectives
    /// beside the next GEMM: the re-gather of its input (sequence parallelism) beside the
    /// input-gradient GEMM, and the input gradient's reduce-scatter (all-reduce without sequence
    /// parallelism) beside the weight-gradient GEMM. Transformer Engine's `Linear`,
    /// `LayerNormLinear` and `LayerNormMLP` backward (`async_op=True`, v2.9-v2.11) and
    /// Megatron's `LinearWithGradAccumulationAndAsyncCommunication` (the all-reduce since
    /// Megatron-LM `16c9044`, 2021-09; the sequence-parallel pair since `02bb1f5`, 2022-03) do
    /// this. Default true; false for code before them (Megatron-LM of 2019-21 and its
    /// Megatron-DeepSpeed forks), whose backward collectives block. `tp_impl: dtensor` keeps its
    /// collectives blocking either way.
    pub tp_backward_overlap: bool,
    /// Hide the MoE token all-to-alls behind another micro-batch's computation (Megatron-Core
    /// `--overlap-moe-expert-parallel-comm`, Megatron-Bridge `moe_a2a_overlap`): each steady-state
    /// forward runs merged with the backward that follows it, layer by layer, and each pass's
    /// dispatch and combine all-to-alls run on a communication stream beside the other pass's
    /// attention and expert computation (the combined 1F1B schedule,
    /// `pipeline_parallel/combined_1f1b.py`; per layer pair the order of
    /// `TransformerLayerSchedulePlan.run`). The interleaved schedule warms up one micro-batch
    /// more. Needs `ep > 1`, the `alltoall` or `flex` dispatcher, no full recomputation and,
    /// with `pp > 1`, `vpp > 1` (as Megatron asserts). Default false.
    #[serde(alias = "overlap_moe_expert_parallel_comm")]
    pub moe_a2a_overlap: bool,
    /// With `moe_a2a_overlap`, compute the experts' weight gradients after the backward
    /// dispatch all-to-all is issued, so it runs beside them (Megatron-Core
    /// `--delay-wgrad-compute`: Transformer Engine's grouped linear returns after the data
    /// gradients, `TransformerLayerSchedulePlan.run` calls `mlp.backward_dw()` on the compute
    /// stream without recording the event the dispatch's backward waits for). Megatron-Bridge's
    /// performance scripts set it whenever they set the all-to-all overlap
    /// (`set_moe_a2a_overlap_overrides`). Needs `moe_a2a_overlap` (Megatron asserts it).
    /// Default false.
    pub delay_wgrad_compute: bool,
    /// Send the tokens to the experts in FP8: the forward dispatch all-to-all and, in backward,
    /// the combine's gradient move one byte an element plus an FP32 scale per 128 (tile-wise
    /// quantization); the combine and the dispatch's gradient stay in the activation dtype
    /// (DeepSeek-V3 report, arXiv 2412.19437 section 3.3: the activation before the MoE
    /// up-projections, and the activation gradient before the down-projections, are quantized
    /// to FP8 before dispatch; the combine stays BF16; DeepEP's FP8 dispatch). Needs
    /// `training.dtype: fp8` and `ep > 1`. Default false.
    pub moe_fp8_dispatch: bool,
    /// Run each pass of the routed experts' MLP as Transformer Engine's fused grouped kernels
    /// (the CuTe DSL fused grouped MLP: Megatron-Core `use_transformer_engine_op_fuser` with
    /// `NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`, Megatron-Bridge's `cutedsl_fused_grouped_mlp`, the
    /// 26.06 and 26.08 GB200 / GB300 MoE recipes). Forward, the fc1 grouped GEMM's epilogue
    /// applies the activation (with the router's probabilities and any clamp) and writes fc2's
    /// quantized input; backward, fc2's data-gradient GEMM applies the activation's gradient and
    /// writes fc1's quantized output gradient; the experts' biases are added in the GEMMs. So the
    /// separate activation kernels, those two casts and Megatron-Core's per-expert bias loop (with
    /// the clamp's blocking copy) do not run. The GEMMs keep their rate: the `mxfp8` GEMM rows of
    /// GB200 and GB300 are measured on these fused kernels. Needs experts (Megatron-Core's, not
    /// `moe_experts: automodel`), expert TP 1 (`etp`) and an MXFP8 (`fp8_recipe: mxfp8`) or NVFP4
    /// (`dtype: fp4`) run, as Megatron-Core and Transformer Engine require (Blackwell). Default
    /// false.
    #[serde(alias = "cutedsl_fused_grouped_mlp")]
    pub moe_fused_grouped_mlp: bool,
    /// With the interleaved schedule, let the pipeline sends run beside the computation, each
    /// waited for only where its buffer is reused (Megatron `--overlap-p2p-communication`, on by
    /// default in Megatron-LM since core 0.4, `f9283c5a8a` / `4eeff55d1f`; Megatron-Bridge and
    /// NeMo's launcher set it whenever VP > 1). `false`, and always with the non-interleaved
    /// schedules: the compute stream waits for each send to be delivered before it goes on, as
    /// Megatron-Core's `_communicate(wait_on_reqs=True)` does (`p2p_communication.py`;
    /// Megatron-LM before Megatron-Core waited on every request and synchronized the device),
    /// and as `torch.distributed.pipelining` does (each time step's batched sends and receives
    /// are waited on). The interleaved schedule without the overlap then runs each steady-state
    /// forward and the backward after it before one exchange of both sends and both receives
    /// (Megatron's `send_forward_backward_recv_forward_backward`; not with `pp_impl: torch`):
    /// the forward's output leaves after the backward. Sends and receives adjacent on the compute stream are one batch, and
    /// a blocking send moves what exceeds `collectives.p2p_eager` only once its receiver reached
    /// the batch with the receive (NCCL's rendezvous). Default true.
    pub overlap_p2p_comm: bool,
    /// Which pipeline runtime issues the sends and receives: `megatron` (default) or `torch`
    /// (`torch.distributed.pipelining`, as TorchTitan and NeMo Automodel use it). They differ in
    /// the interleaved schedule without `overlap_p2p_comm` (see there).
    pub pp_impl: PpImpl,
    /// With blocking pipeline sends and `pp_impl: megatron`, the host synchronizes the device
    /// after each exchange of sends and receives (Megatron-Core `ModelParallelConfig.batch_p2p_sync`,
    /// default true with `batch_p2p_comm`; `p2p_communication.py` `_communicate` calls
    /// `torch.cuda.synchronize()` "to protect against race condition when using
    /// batch_isend_irecv()"; Megatron-LM before Megatron-Core did the same): the host then
    /// issues the next computation only once the exchange is done, so its first kernel waits
    /// for the host's issue time (`compute.host`). Default true.
    pub batch_p2p_sync: bool,
    /// Pipeline schedules per training step: the step's micro-batches run as this many
    /// consecutive fill-and-drain schedules of `micro-batches / pipeline_flushes` each, with one
    /// gradient reduction and optimizer step after the last. NeMo Automodel (and TorchTitan)
    /// with pipeline parallelism run the whole schedule once per gradient-accumulation step
    /// (`local_batch_size / micro_batch_size` micro-batches each), so each pays its own bubble;
    /// Megatron runs one schedule over all micro-batches. Must divide the micro-batch count.
    /// Default 1.
    pub pipeline_flushes: u64,
    /// Set by [`ParallelConfig::resolve`] when it derived `pipeline_layers` from the options above
    /// (not read from a scenario): resolving again (another GPU count, another pp) derives them
    /// anew instead of taking them for a layout the user gave.
    #[serde(skip)]
    pub pipeline_layers_derived: bool,
    /// MTP blocks with weights of their own on the output layer's stage
    /// ([`TrainingConfig::mtp_weight_blocks`]), set by [`ParallelConfig::resolve`] so that the
    /// stage's parameter counts see them; not read from a scenario.
    #[serde(skip)]
    pub mtp_blocks: u64,
    /// GPUs per server of the cluster the plan runs on (`cluster.gpus_per_node`), set by the
    /// simulator, not read from a scenario. 0: unknown, and an expert-parallel group counts as
    /// one server (see [`ParallelConfig::ep_servers`]).
    #[serde(skip)]
    pub gpus_per_node: u64,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        ParallelConfig {
            tp: 1,
            pp: 1,
            dp: 0,
            ep: 1,
            etp: 0,
            moe_token_dispatcher: MoeDispatcher::AllToAll,
            moe_routing: MoeRouting::Random,
            moe_flex_backend: FlexBackend::HybridEp,
            moe_experts: MoeExperts::Megatron,
            tp_impl: TpImpl::Megatron,
            cp: 1,
            cp_impl: CpImpl::Megatron,
            vpp: 1,
            schedule: PipelineSchedule::OneFOneB,
            sequence_parallel: false,
            use_distributed_optimizer: false,
            zero_stage: 0,
            reshard_after_forward: true,
            fsdp_impl: FsdpImpl::Megatron,
            fsdp_sync_every_microbatch: false,
            overlap_grad_reduce: false,
            overlap_param_gather: false,
            grad_scaling: GradScaling::BeforeReduce,
            check_for_nan_in_grad: true,
            grad_bucket_size: 0,
            pipeline_layers: Vec::new(),
            first_stage_layers: 0,
            last_stage_layers: 0,
            account_for_embedding_in_pipeline_split: false,
            account_for_loss_in_pipeline_split: false,
            tp_comm_overlap: false,
            tp_backward_overlap: true,
            moe_a2a_overlap: false,
            delay_wgrad_compute: false,
            moe_fp8_dispatch: false,
            moe_fused_grouped_mlp: false,
            overlap_p2p_comm: true,
            pp_impl: PpImpl::Megatron,
            batch_p2p_sync: true,
            pipeline_flushes: 1,
            pipeline_layers_derived: false,
            mtp_blocks: 0,
            gpus_per_node: 0,
        }
    }
}

/// Layers per virtual stage for `layers` over `pp · vpp` virtual stages, from the plan's uneven
/// options (see [`ParallelConfig::pipeline_layers`]); `Ok(None)` for the even split.
fn pipeline_layout(p: &ParallelConfig, layers: u64) -> Result<Option<Vec<u64>>, WorkloadError> {
    let (pp, vpp) = (p.pp.max(1), p.vpp.max(1));
    let n = pp * vpp;
    let uneven_opts = p.first_stage_layers > 0 || p.last_stage_layers > 0;
    let account = p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
    if !p.pipeline_layers.is_empty() && !p.pipeline_layers_derived {
        if uneven_opts || account {
            return Err(WorkloadError::invalid(
                "parallel.pipeline_layers",
                "give either pipeline_layers or first/last_stage_layers / account_for_*_in_pipeline_split, not both",
            ));
        }
        let sum: u64 = p.pipeline_layers.iter().sum();
        if p.pipeline_layers.len() as u64 != n || sum != layers {
            return Err(WorkloadError::invalid(
                "parallel.pipeline_layers",
                format!(
                    "needs pp*vpp = {n} entries (virtual stage chunk*pp + stage) summing to num_hidden_layers={layers}; got {} entries summing to {sum}",
                    p.pipeline_layers.len()
                ),
            ));
        }
        return Ok(Some(p.pipeline_layers.clone()));
    }
    if uneven_opts && account {
        return Err(WorkloadError::invalid(
            "parallel.first_stage_layers",
            "first/last_stage_layers and account_for_*_in_pipeline_split cannot be combined (as in Megatron-Core)",
        ));
    }
    if account {
        let (e, l) = (
            u64::from(p.account_for_embedding_in_pipeline_split),
            u64::from(p.account_for_loss_in_pipeline_split),
        );
        let total = layers + e + l;
        if !total.is_multiple_of(n) || total / n < e.max(l) {
            return Err(WorkloadError::divisibility(
                "parallel.account_for_embedding_in_pipeline_split",
                format!(
                    "num_hidden_layers={layers} plus the embedding/loss slots ({}) must divide into pp*vpp = {n} virtual stages",
                    e + l
                ),
            ));
        }
        let per = total / n;
        let mut v = vec![per; n as usize];
        v[0] -= e;
        v[n as usize - 1] -= l;
        return Ok(Some(v));
    }
    if !uneven_opts {
        return Ok(None);
    }
    if pp < 2 {
        return Err(WorkloadError::invalid(
            "parallel.first_stage_layers",
            "uneven first/last stages need pp >= 2",
        ));
    }
    let mut middle_stages = pp;
    let mut rest = layers;
    for (field, k) in [
        ("parallel.first_stage_layers", p.first_stage_layers),
        ("parallel.last_stage_layers", p.last_stage_layers),
    ] {
        if k > 0 {
            if !k.is_multiple_of(vpp) || k > rest {
                return Err(WorkloadError::divisibility(
                    field,
                    format!("{k} layers must be a multiple of vpp={vpp} and at most num_hidden_layers={layers}"),
                ));
            }
            middle_stages -= 1;
            rest -= k;
        }
    }
    if middle_stages > 0 && !rest.is_multiple_of(middle_stages * vpp) {
        return Err(WorkloadError::divisibility(
            "parallel.first_stage_layers",
            format!(
                "the other {middle_stages} stages' {rest} layers do not split evenly over {middle_stages}*vpp = {} chunks",
                middle_stages * vpp
            ),
        ));
    }
    if middle_stages == 0 && rest > 0 {
        return Err(WorkloadError::invalid(
            "parallel.last_stage_layers",
            format!("first + last stage layers must equal num_hidden_layers={layers} when pp = 2"),
        ));
    }
    let per_mid = if middle_stages > 0 { rest / (middle_stages * vpp) } else { 0 };
    let mut v = Vec::with_capacity(n as usize);
    for _chunk in 0..vpp {
        for stage in 0..pp {
            v.push(if stage == 0 && p.first_stage_layers > 0 {
                p.first_stage_layers / vpp
            } else if stage == pp - 1 && p.last_stage_layers > 0 {
                p.last_stage_layers / vpp
            } else {
                per_mid
            });
        }
    }
    Ok(Some(v))
}

/// Divisors of `n`, ascending.
pub fn divisors(n: u64) -> Vec<u64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut i = 1;
    while i * i <= n {
        if n.is_multiple_of(i) {
            small.push(i);
            if i * i != n {
                large.push(n / i);
            }
        }
        i += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

impl ParallelConfig {
    /// Ranks of one model replica: `tp · cp · pp`.
    pub fn model_parallel(&self) -> u64 {
        self.tp * self.cp * self.pp
    }

    /// GPUs of the plan, `tp · cp · dp · pp`.
    pub fn world_size(&self) -> u64 {
        self.tp * self.cp * self.dp * self.pp
    }

    /// Ranks the dense parameters' gradients are reduced over (and the distributed optimizer
    /// shards over): `dp · cp` (Megatron's data-parallel group with context parallelism).
    pub fn dense_dp_group(&self) -> u64 {
        self.dp * self.cp
    }

    /// Whether parameters are sharded and gathered per FSDP unit during forward and backward
    /// (ZeRO-3 / FSDP over more than one rank of the data-parallel group, which spans the
    /// context-parallel ranks too: Megatron-FSDP's `dp_cp` group, TorchTitan's `dp_shard_cp`
    /// mesh, and the group the memory model shards over). Call on a resolved config.
    pub fn fsdp(&self) -> bool {
        self.zero_stage >= 3 && self.dense_dp_group() > 1
    }

    /// Whether `tp_backward_overlap` applies: not to DTensor's TP (its collectives block), and
    /// only for a TP group inside one server of [`ParallelConfig::gpus_per_node`] (0: unknown,
    /// taken as inside), where the collective is timed beside its GEMM over NVLink. The
    /// workload generator and the simulator's overlap timer both ask this, so a GEMM never
    /// carries a collective the simulator cannot time.
    pub fn tp_backward_overlap_applies(&self) -> bool {
        self.tp_backward_overlap && self.tp_impl != TpImpl::Dtensor && (self.gpus_per_node == 0 || self.tp <= self.gpus_per_node)
    }

    /// Whether the compute stream waits for each pipeline send to be delivered: with the
    /// non-interleaved schedules always, with the interleaved one unless `overlap_p2p_comm`.
    pub fn pp_sends_block(&self, interleaved: bool) -> bool {
        !(interleaved && self.overlap_p2p_comm) && self.schedule != PipelineSchedule::DualPipeV
    }

    /// Whether the plan runs the DualPipeV schedule ([`PipelineSchedule::DualPipeV`]).
    pub fn dual_pipe_v(&self) -> bool {
        self.schedule == PipelineSchedule::DualPipeV
    }

    /// Whether DualPipeV defers weight gradients (zero bubble): with tensor parallelism 1, where
    /// no TP collective is timed together with a weight-gradient GEMM (with tp > 1 each backward
    /// keeps its weight gradients).
    pub fn dualpipev_zero_bubble(&self) -> bool {
        self.dual_pipe_v() && self.tp <= 1
    }

    /// Model chunks per pipeline rank in the schedule that runs: `vpp` interleaved, 2 for
    /// DualPipeV, else 1.
    pub fn chunks_per_stage(&self) -> u64 {
        match self.schedule {
            PipelineSchedule::Interleaved => self.vpp.max(1),
            PipelineSchedule::DualPipeV => 2,
            PipelineSchedule::OneFOneB => 1,
        }
    }

    /// The virtual stage (position along the model, from 0) of chunk `chunk` of pipeline rank
    /// `stage`: `chunk·pp + stage` (Megatron's interleaving), or DualPipeV's V, where chunk 1 of
    /// rank `s` is virtual stage `2·pp-1-s`.
    pub fn virtual_stage(&self, stage: u64, chunk: u64) -> u64 {
        let pp = self.pp.max(1);
        if self.dual_pipe_v() && chunk == 1 {
            2 * pp - 1 - stage
        } else {
            chunk * pp + stage
        }
    }

    /// Whether chunk `chunk` of pipeline rank `stage` is the last virtual stage: the one that
    /// holds the output layer, the final norm, the loss (and MTP).
    pub fn holds_head(&self, stage: u64, chunk: u64) -> bool {
        self.virtual_stage(stage, chunk) == self.pp.max(1) * self.chunks_per_stage() - 1
    }

    /// The pipeline rank that holds the output layer, the final norm and the loss: the last,
    /// or rank 0 under DualPipeV (the V comes back to it).
    pub fn head_stage(&self) -> u64 {
        if self.dual_pipe_v() { 0 } else { self.pp.max(1) - 1 }
    }

    /// Ranks the expert parameters' gradients are reduced over: `tp · dp · cp / (etp · ep)`
    /// (`dp · cp / ep` when `etp = tp`).
    pub fn expert_dp_group(&self) -> u64 {
        (self.tp.max(1) * self.dp * self.cp / (self.expert_tp() * self.ep.max(1))).max(1)
    }

    /// The expert tensor parallel degree in effect: `etp`, or `tp` when unset.
    pub fn expert_tp(&self) -> u64 {
        if self.etp == 0 { self.tp.max(1) } else { self.etp }
    }

    /// Whether experts are kept whole across a TP group (`etp = 1`, `tp > 1`): the
    /// expert-parallel group spans the tensor-parallel ranks.
    pub fn ep_spans_tp(&self) -> bool {
        self.expert_tp() == 1 && self.tp > 1
    }

    /// How an expert-parallel group spreads over servers of [`ParallelConfig::gpus_per_node`]
    /// GPUs: `(units per server, servers)`, a unit being a TP group. `None` when the group sits
    /// in one server, the server size is unknown, or the group does not split evenly (it then
    /// runs as one all-to-all). An EP group's ranks are `ep` consecutive ranks with `etp: 1`,
    /// else `ep` ranks `tp` apart (one lane of `ep` consecutive units), so a server holds
    /// `gpus_per_node / tp` of its units either way.
    pub fn ep_servers(&self) -> Option<(u64, u64)> {
        let (gpn, tp, ep) = (self.gpus_per_node, self.tp.max(1), self.ep.max(1));
        if gpn == 0 || !gpn.is_multiple_of(tp) {
            return None;
        }
        let units_per_server = gpn / tp;
        let group_units = if self.ep_spans_tp() { ep / tp } else { ep };
        (group_units > units_per_server && group_units.is_multiple_of(units_per_server))
            .then(|| (units_per_server, group_units / units_per_server))
    }

    /// Whether sequence parallelism is in effect (requested and tp > 1).
    pub fn sp(&self) -> bool {
        self.sequence_parallel && self.tp > 1
    }

    /// Micro-batches per iteration per pipeline: `global_batch_size / (micro_batch_size · dp)`,
    /// 1 when the global batch is left at 0. Call on a resolved config (dp > 0).
    pub fn micro_batches(&self, training: &TrainingConfig) -> u64 {
        let per = training.micro_batch_size.max(1) * self.dp.max(1);
        if training.global_batch_size == 0 {
            1
        } else {
            (training.global_batch_size / per).max(1)
        }
    }

    /// Fills `dp` from the GPU count (and the Megatron defaults: bucket size, schedule from `vpp`,
    /// ZeRO stage ⇔ distributed optimizer, sequence parallelism off at tp = 1) and checks the plan
    /// against the model and the training settings.
    ///
    /// # Errors
    /// - [`WorkloadError::GpuCount`]: `gpus ≠ tp·cp·dp·pp`, or `tp·cp·pp` does not divide `gpus`.
    /// - [`WorkloadError::Divisibility`] naming `parallel.tp` (heads, kv heads, FFN sizes),
    ///   `parallel.pp` (layers; with vpp, `pp·vpp`), `parallel.ep` (experts; `dp·cp`),
    ///   `parallel.cp` (`seq_length` by `2·cp`), `training.global_batch_size` (by
    ///   `micro_batch_size·dp`), `parallel.vpp` (interleaved needs micro-batches % pp = 0).
    /// - [`WorkloadError::Invalid`]: a zero degree, `zero_stage > 3`, interleaved without
    ///   `vpp > 1`/`pp > 1`, MoE with tp > 1 and no sequence parallelism, ep without experts.
    pub fn resolve(&self, gpus: u64, model: &ModelConfig, training: &TrainingConfig) -> Result<ParallelConfig, WorkloadError> {
        let mut p = self.clone();
        for (f, v) in [("tp", p.tp), ("pp", p.pp), ("ep", p.ep), ("cp", p.cp), ("vpp", p.vpp)] {
            if v == 0 {
                return Err(WorkloadError::invalid(format!("parallel.{f}"), "must be at least 1"));
            }
        }
        for (f, v) in [
            ("seq_length", training.seq_length),
            ("micro_batch_size", training.micro_batch_size),
            ("iterations", training.iterations),
        ] {
            if v == 0 {
                return Err(WorkloadError::invalid(format!("training.{f}"), "must be at least 1"));
            }
        }
        model.validate()?;
        if !DType::SCENARIO.contains(&training.dtype) {
            // Only code can build one (serde rejects it): MXFP8 is fp8 with its recipe.
            return Err(WorkloadError::invalid(
                "training.dtype",
                format!(
                    "{} is a GEMM compute format, not a training dtype; use dtype: fp8 with fp8_recipe: mxfp8",
                    training.dtype
                ),
            ));
        }
        for (f, d) in [
            ("exp_avg_dtype", training.exp_avg_dtype),
            ("exp_avg_sq_dtype", training.exp_avg_sq_dtype),
            ("main_params_dtype", training.main_params_dtype),
        ] {
            if !matches!(d, DType::Fp32 | DType::Bf16 | DType::Fp16) {
                return Err(WorkloadError::invalid(
                    format!("training.{f}"),
                    format!("{d} is not an optimizer-state dtype; use fp32, bf16 or fp16"),
                ));
            }
        }
        if training.store_param_remainders && !matches!(training.dtype, DType::Bf16 | DType::Fp8 | DType::Fp4) {
            return Err(WorkloadError::invalid(
                "training.store_param_remainders",
                "keeps the low 16 bits of fp32 main parameters beside bf16 model weights; it needs dtype bf16 (or fp8/fp4, whose weights are bf16)",
            ));
        }
        if training.fp8_param && training.dtype != DType::Fp8 {
            return Err(WorkloadError::invalid(
                "training.fp8_param",
                format!(
                    "keeps the linear layers' weights in FP8, which needs dtype: fp8 (dtype is {}); remove fp8_param or set training.dtype: fp8",
                    training.dtype
                ),
            ));
        }
        if !training.store_params && training.store_param_remainders {
            return Err(WorkloadError::invalid(
                "training.store_param_remainders",
                "keeps part of a main copy, but store_params: false keeps none; remove one of the two",
            ));
        }
        if training.cudnn_norm && training.fp8_impl == Fp8Impl::Torchao {
            return Err(WorkloadError::invalid(
                "training.cudnn_norm",
                "selects Transformer Engine's cuDNN norm kernels (NVTE_NORM_FWD_USE_CUDNN), but fp8_impl: torchao runs no TE norm: remove cudnn_norm",
            ));
        }
        if training.recompute == Recompute::SelectiveOp {
            let why = if !training.recompute_modules.is_empty() {
                Some("is TorchTitan's op-level policy, which names no modules: remove training.recompute_modules".to_string())
            } else if model.num_experts > 0 || model.mla.is_some() || model.mamba.is_some() {
                Some(format!(
                    "selective_op models TorchTitan's op-level checkpointing of dense Llama-style blocks; {} has MoE, MLA or Mamba layers: use recompute: selective (with recompute_modules) or full",
                    model.name
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(WorkloadError::invalid("training.recompute", why));
            }
        }
        if training.recompute == Recompute::Full && !training.recompute_modules.is_empty() {
            return Err(WorkloadError::invalid(
                "training.recompute_modules",
                "applies to selective recomputation; with recompute: full every module is recomputed: remove one of the two",
            ));
        }

        if p.pipeline_flushes == 0 {
            return Err(WorkloadError::invalid("parallel.pipeline_flushes", "must be at least 1"));
        }
        if p.fsdp_sync_every_microbatch && p.zero_stage < 3 {
            return Err(WorkloadError::invalid(
                "parallel.fsdp_sync_every_microbatch",
                format!(
                    "applies to ZeRO-3 / FSDP (its per-micro-batch parameter gathers and gradient reduce-scatters), but zero_stage is {}; set parallel.zero_stage: 3 or remove fsdp_sync_every_microbatch",
                    p.zero_stage
                ),
            ));
        }
        if p.moe_fp8_dispatch && (p.ep <= 1 || training.dtype != DType::Fp8) {
            return Err(WorkloadError::invalid(
                "parallel.moe_fp8_dispatch",
                format!(
                    "sends FP8 tokens to the experts of an FP8 run, but ep is {} and training.dtype is {}; set parallel.ep > 1 and training.dtype: fp8, or remove moe_fp8_dispatch",
                    p.ep, training.dtype
                ),
            ));
        }
        if p.moe_fused_grouped_mlp {
            let quantized = (training.dtype == DType::Fp8 && training.fp8_recipe == Fp8Recipe::Mxfp8) || training.dtype == DType::Fp4;
            let why = if model.num_experts == 0 {
                Some(format!(
                    "fuses the routed experts' MLP, but {} has no experts; remove moe_fused_grouped_mlp",
                    model.name
                ))
            } else if p.moe_experts != MoeExperts::Megatron {
                Some("is Megatron-Core's fused expert path; remove it with moe_experts: automodel".to_string())
            } else if p.expert_tp() > 1 {
                Some(format!(
                    "has no tensor parallelism inside the experts (Megatron-Core falls back to the unfused path), but expert TP is {}; set parallel.etp: 1 or remove moe_fused_grouped_mlp",
                    p.expert_tp()
                ))
            } else if !quantized || training.fp8_impl != Fp8Impl::TransformerEngine {
                Some(format!(
                    "needs Transformer Engine's MXFP8 or NVFP4 grouped kernels (Blackwell), but training.dtype is {}; set training.dtype: fp8 with fp8_recipe: mxfp8, or dtype: fp4, or remove moe_fused_grouped_mlp",
                    training.dtype
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(WorkloadError::invalid("parallel.moe_fused_grouped_mlp", why));
            }
        }
        if p.delay_wgrad_compute && !p.moe_a2a_overlap {
            return Err(WorkloadError::invalid(
                "parallel.delay_wgrad_compute",
                "delays the experts' weight gradients behind the overlapped all-to-all, so it needs parallel.moe_a2a_overlap: true (Megatron asserts it); set both or remove delay_wgrad_compute",
            ));
        }
        if p.moe_a2a_overlap {
            let field = "parallel.moe_a2a_overlap";
            let why = if p.ep <= 1 {
                Some("overlaps the expert-parallel all-to-alls, but ep is 1; set parallel.ep > 1 or remove moe_a2a_overlap".to_string())
            } else if model.num_experts == 0 {
                Some(format!(
                    "overlaps MoE all-to-alls, but {} has no experts; remove moe_a2a_overlap",
                    model.name
                ))
            } else if training.recompute == Recompute::Full {
                Some("cannot run with full recomputation (Megatron asserts it); use recompute: selective or none".to_string())
            } else if p.pp > 1 && p.vpp <= 1 && !p.dual_pipe_v() {
                Some(format!(
                    "with pp={} needs the interleaved schedule (Megatron asserts vpp or dualpipev); set parallel.vpp > 1 or parallel.schedule: dualpipev",
                    p.pp
                ))
            } else if p.zero_stage >= 3 {
                Some("is not modelled together with ZeRO-3/FSDP in llmsim; remove one of the two".to_string())
            } else if training.cpu_offload_layers > 0 {
                Some("is not modelled together with activation offloading in llmsim; remove one of the two".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                return Err(WorkloadError::invalid(field, why));
            }
        }
        if training.cpu_offload_layers > 0 {
            let n = training.cpu_offload_layers;
            let field = "training.cpu_offload_layers";
            if n >= model.num_hidden_layers {
                return Err(WorkloadError::invalid(
                    field,
                    format!(
                        "{n} layers offloaded, but the model has {} (Megatron-Core offloads fewer than num_layers); use at most {}",
                        model.num_hidden_layers,
                        model.num_hidden_layers.saturating_sub(1)
                    ),
                ));
            }
            if p.pp > 1 {
                return Err(WorkloadError::invalid(
                    field,
                    format!(
                        "activation CPU offloading needs pp: 1 (Megatron-Core has no support for it with pipeline parallelism); pp is {}",
                        p.pp
                    ),
                ));
            }
            if training.recompute != Recompute::None || !training.recompute_modules.is_empty() {
                return Err(WorkloadError::invalid(
                    field,
                    "activation CPU offloading does not work with activation recomputation (Megatron-Core refuses it): set recompute: none and no recompute_modules, or offload 0 layers",
                ));
            }
        }

        if training.fp8_dot_product_attention {
            let field = "training.fp8_dot_product_attention";
            if training.dtype != DType::Fp8 {
                return Err(WorkloadError::invalid(
                    field,
                    format!(
                        "FP8 attention needs dtype: fp8 (Transformer Engine's fp8_dpa); dtype is {}",
                        training.dtype
                    ),
                ));
            }
            if !training.flash_attention
                || training.fp8_impl != Fp8Impl::TransformerEngine
                || training.attention_kernel != AttentionKernelChoice::Auto
            {
                return Err(WorkloadError::invalid(
                    field,
                    "FP8 attention is Transformer Engine's fused (cuDNN) attention: needs flash_attention: true, fp8_impl: transformer_engine and attention_kernel: auto",
                ));
            }
        }
        if training.optimizer.is_muon() {
            let field = "training.optimizer";
            if p.use_distributed_optimizer || p.zero_stage > 0 {
                return Err(WorkloadError::invalid(
                    field,
                    "Muon does not run with the distributed optimizer or ZeRO (Megatron-Core: \"muon with dist optimizer is not supported\"): set parallel.use_distributed_optimizer: false and zero_stage: 0, or optimizer: dist_muon for Muon's own layer-wise sharding",
                ));
            }
            if training.dtype == DType::Fp16 {
                return Err(WorkloadError::invalid(
                    field,
                    "Muon does not run with fp16 (Megatron-Core refuses it): use bf16",
                ));
            }
            if training.muon_ns_steps == 0 {
                return Err(WorkloadError::invalid(
                    "training.muon_ns_steps",
                    "at least 1 Newton-Schulz step (Megatron-Core refuses 0); its default is 5",
                ));
            }
        }
        for (field, n) in [
            ("training.bf16_layers_at_start", training.bf16_layers_at_start),
            ("training.bf16_layers_at_end", training.bf16_layers_at_end),
        ] {
            if n == 0 {
                continue;
            }
            te_quantized_run(training, field, "BF16 layers are Megatron-Core's exception to an FP8 or FP4 run")?;
            if training.dtype == DType::Fp8 && training.fp8_recipe == Fp8Recipe::Delayed {
                return Err(WorkloadError::invalid(
                    field,
                    "delayed scaling does not support BF16 layers (Megatron-Core refuses it): use fp8_recipe current, mxfp8 or blockwise",
                ));
            }
            let per_stage = model.num_hidden_layers / p.pp.max(1);
            if n > per_stage {
                return Err(WorkloadError::invalid(
                    field,
                    format!(
                        "{n} layers; Megatron-Core allows at most the layers per pipeline stage, num_layers / pp = {} / {} = {per_stage}",
                        model.num_hidden_layers,
                        p.pp.max(1)
                    ),
                ));
            }
        }
        for (module, dt) in &training.module_dtype {
            let field = format!("training.module_dtype.{}", module.op_name());
            te_quantized_run(training, &field, "per-module precision is Transformer Engine's quantization recipe")?;
            if !matches!(dt, DType::Bf16 | DType::Fp8) {
                return Err(WorkloadError::invalid(
                    field,
                    format!("{dt}: a module runs in bf16 or fp8 (for fp4 modules set dtype: fp4 and put the others in bf16 or fp8)"),
                ));
            }
        }
        if training.mtp_num_layers > crate::model::MAX_MTP_LAYERS {
            return Err(WorkloadError::invalid(
                "training.mtp_num_layers",
                format!("{} depths; at most {}", training.mtp_num_layers, crate::model::MAX_MTP_LAYERS),
            ));
        }
        if training.mtp_num_layers > 0 && model.hybrid_override_pattern.is_some() && model.mtp_hybrid_override_pattern.is_none() {
            return Err(WorkloadError::invalid(
                "model.mtp_hybrid_override_pattern",
                "a hybrid model's MTP block needs its layers: give them as pattern characters (Nemotron 3 Super: \"*E\"), or set training.mtp_num_layers: 0",
            ));
        }

        // GPU count.
        if gpus == 0 {
            return Err(WorkloadError::GpuCount {
                gpus,
                product: 0,
                message: "the cluster has no GPUs".into(),
            });
        }
        // Each degree is at most the GPU count, so the products below fit in u128 and cannot wrap.
        for (f, v) in [("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("dp", p.dp), ("ep", p.ep)] {
            if v > gpus {
                return Err(WorkloadError::invalid(
                    format!("parallel.{f}"),
                    format!("{f}={v} is more than the cluster's {gpus} GPUs"),
                ));
            }
        }
        let mp_wide = u128::from(p.tp) * u128::from(p.cp) * u128::from(p.pp);
        if mp_wide > u128::from(gpus) {
            return Err(WorkloadError::GpuCount {
                gpus,
                product: u64::try_from(mp_wide).unwrap_or(u64::MAX),
                message: format!(
                    "tp*cp*pp = {}*{}*{} = {mp_wide} is more than the GPU count; lower parallel.tp, parallel.cp or parallel.pp",
                    p.tp, p.cp, p.pp
                ),
            });
        }
        let mp = mp_wide as u64;
        if p.dp == 0 {
            if !gpus.is_multiple_of(mp) {
                return Err(WorkloadError::GpuCount {
                    gpus,
                    product: mp,
                    message: format!(
                        "tp*cp*pp = {}*{}*{} = {mp} does not divide the GPU count, so dp cannot be derived; use a GPU count that is a multiple of {mp}",
                        p.tp, p.cp, p.pp
                    ),
                });
            }
            p.dp = gpus / mp;
        } else if u128::from(mp) * u128::from(p.dp) != u128::from(gpus) {
            return Err(WorkloadError::GpuCount {
                gpus,
                product: mp.saturating_mul(p.dp),
                message: format!(
                    "tp*cp*dp*pp = {}*{}*{}*{} must equal the GPU count; set parallel.dp: {} or leave dp out to derive it",
                    p.tp,
                    p.cp,
                    p.dp,
                    p.pp,
                    if gpus.is_multiple_of(mp) {
                        (gpus / mp).to_string()
                    } else {
                        "(none fits)".into()
                    }
                ),
            });
        }

        // Tensor parallelism: Megatron requires tp | heads and tp | num_query_groups.
        let (a, kv) = (model.num_attention_heads, model.num_key_value_heads);
        if !a.is_multiple_of(p.tp) || !kv.is_multiple_of(p.tp) {
            let valid: Vec<u64> = divisors(a).into_iter().filter(|d| kv.is_multiple_of(*d)).collect();
            let what = if !a.is_multiple_of(p.tp) {
                format!("num_attention_heads={a}")
            } else {
                format!("num_key_value_heads={kv}")
            };
            return Err(WorkloadError::divisibility(
                "parallel.tp",
                format!("tp={} does not divide {what}; valid tp: {}", p.tp, list(&valid)),
            ));
        }
        let mut ffns = vec![("intermediate_size", model.intermediate_size)];
        if model.num_experts > 0 {
            ffns.push(("moe_intermediate_size", model.moe_intermediate_size));
            if model.num_shared_experts > 0 {
                ffns.push(("num_shared_experts*moe_intermediate_size", model.shared_ffn()));
            }
        }
        for (name, ffn) in ffns {
            if !ffn.is_multiple_of(p.tp) {
                return Err(WorkloadError::divisibility(
                    "parallel.tp",
                    format!("tp={} does not divide {name}={ffn}; valid tp: {}", p.tp, list(&divisors(ffn))),
                ));
            }
        }

        // Pipeline.
        if p.dual_pipe_v() {
            if p.vpp > 2 {
                return Err(WorkloadError::invalid(
                    "parallel.vpp",
                    format!(
                        "vpp={}: the dualpipev schedule holds two chunks per rank (its V); leave vpp unset or set 2",
                        p.vpp
                    ),
                ));
            }
            if p.pp < 2 {
                return Err(WorkloadError::invalid("parallel.pp", "the dualpipev schedule needs pp >= 2"));
            }
            for (field, on) in [
                ("parallel.first_stage_layers", p.first_stage_layers > 0),
                ("parallel.last_stage_layers", p.last_stage_layers > 0),
                (
                    "parallel.account_for_embedding_in_pipeline_split",
                    p.account_for_embedding_in_pipeline_split,
                ),
                ("parallel.account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split),
            ] {
                if on {
                    return Err(WorkloadError::invalid(
                        field,
                        "is not modelled with the dualpipev schedule; give parallel.pipeline_layers instead: 2*pp layer counts in the V's order (rank 0's first chunk, rank 1's, ..., rank pp-1's two chunks, ..., rank 0's second chunk)",
                    ));
                }
            }
            if p.zero_stage >= 3 {
                return Err(WorkloadError::invalid(
                    "parallel.zero_stage",
                    "ZeRO-3/FSDP is not modelled with the dualpipev schedule; use zero_stage 1 (the distributed optimizer) or 2",
                ));
            }
            if training.cpu_offload_layers > 0 {
                return Err(WorkloadError::invalid(
                    "training.cpu_offload_layers",
                    "activation offloading is not modelled with the dualpipev schedule; remove it",
                ));
            }
            p.vpp = 2;
        } else if p.vpp > 1 {
            p.schedule = PipelineSchedule::Interleaved;
        }
        p.mtp_blocks = training.mtp_weight_blocks();
        let layers = model.num_hidden_layers;
        if let Some(v) = pipeline_layout(&p, layers)? {
            // Derived exactly when an uneven option asked for it (a given layout is kept as is).
            p.pipeline_layers_derived = p.first_stage_layers > 0
                || p.last_stage_layers > 0
                || p.account_for_embedding_in_pipeline_split
                || p.account_for_loss_in_pipeline_split;
            p.pipeline_layers = v;
        } else if !layers.is_multiple_of(p.pp * p.vpp) {
            /// Megatron-Core's uneven split, the other way to run this `pp` (`vpp`).
            const UNEVEN_HINT: &str = "; or split the layers unevenly: parallel.first_stage_layers / \
                 last_stage_layers (the rest spread evenly), or parallel.pipeline_layers (one count per stage)";
            let (field, msg) = if p.dual_pipe_v() {
                let valid: Vec<u64> = divisors(layers).into_iter().filter(|d| d % 2 == 0).map(|d| d / 2).collect();
                (
                    "parallel.pp",
                    format!(
                        "the dualpipev schedule splits the layers over 2*pp = {} stages, which does not divide num_hidden_layers={layers}; valid pp: {}; or give parallel.pipeline_layers (2*pp counts in the V's order)",
                        2 * p.pp,
                        if valid.is_empty() {
                            "none (an odd layer count)".to_string()
                        } else {
                            list(&valid)
                        }
                    ),
                )
            } else if p.vpp > 1 {
                (
                    "parallel.vpp",
                    format!(
                        "pp*vpp = {}*{} does not divide num_hidden_layers={layers}; valid pp*vpp: {}{UNEVEN_HINT}",
                        p.pp,
                        p.vpp,
                        list(&divisors(layers))
                    ),
                )
            } else {
                (
                    "parallel.pp",
                    format!(
                        "pp={} does not divide num_hidden_layers={layers}; valid pp: {}{UNEVEN_HINT}",
                        p.pp,
                        list(&divisors(layers))
                    ),
                )
            };
            return Err(WorkloadError::divisibility(field, msg));
        }

        // Experts.
        if p.ep > 1 && model.num_experts == 0 {
            return Err(WorkloadError::invalid(
                "parallel.ep",
                format!("ep={} but model {} is dense (num_experts=0); use ep: 1", p.ep, model.name),
            ));
        }
        if model.num_experts > 0 && !model.num_experts.is_multiple_of(p.ep) {
            return Err(WorkloadError::divisibility(
                "parallel.ep",
                format!(
                    "ep={} does not divide num_experts={}; valid ep: {}",
                    p.ep,
                    model.num_experts,
                    list(&divisors(model.num_experts))
                ),
            ));
        }
        if p.etp != 0 && p.etp != p.tp && p.etp != 1 {
            return Err(WorkloadError::invalid(
                "parallel.etp",
                format!(
                    "etp={} with tp={}: llmsim models expert tensor parallelism equal to tp (the default) or 1; valid etp: 1, {}",
                    p.etp, p.tp, p.tp
                ),
            ));
        }
        if p.ep_spans_tp() {
            // Megatron-Core's expert order etp-ep-edp: an EP group of `ep` consecutive ranks of a
            // stage. llmsim takes whole TP groups into it.
            let ranks = p.tp * p.dp * p.cp;
            if !p.ep.is_multiple_of(p.tp) || !ranks.is_multiple_of(p.ep) {
                let valid: Vec<u64> = divisors(ranks)
                    .into_iter()
                    .filter(|d| d.is_multiple_of(p.tp) && model.num_experts.is_multiple_of(*d))
                    .collect();
                return Err(WorkloadError::divisibility(
                    "parallel.ep",
                    format!(
                        "ep={} with etp: 1 must be a multiple of tp={} dividing tp*dp*cp = {}; valid ep: {}",
                        p.ep,
                        p.tp,
                        ranks,
                        list(&valid)
                    ),
                ));
            }
        } else if !(p.dp * p.cp).is_multiple_of(p.ep) {
            let valid: Vec<u64> = divisors(p.dp * p.cp)
                .into_iter()
                .filter(|d| model.num_experts.is_multiple_of(*d))
                .collect();
            return Err(WorkloadError::divisibility(
                "parallel.ep",
                format!(
                    "ep={} does not divide dp*cp = {}*{} (expert parallelism is carved out of the data-parallel ranks); valid ep: {}",
                    p.ep,
                    p.dp,
                    p.cp,
                    list(&valid)
                ),
            ));
        }
        if p.tp == 1 {
            p.sequence_parallel = false;
            p.tp_comm_overlap = false;
        }
        if p.tp_comm_overlap && !p.sequence_parallel {
            return Err(WorkloadError::invalid(
                "parallel.tp_comm_overlap",
                "TP communication overlap needs sequence parallelism (as Megatron asserts); set sequence_parallel: true",
            ));
        }
        if model.num_experts > 0 && p.tp > 1 && !p.sequence_parallel {
            return Err(WorkloadError::invalid(
                "parallel.sequence_parallel",
                format!(
                    "MoE model {} with tp={} needs sequence parallelism (Megatron asserts it); set sequence_parallel: true",
                    model.name, p.tp
                ),
            ));
        }

        // Context parallelism: each rank holds 2 chunks of s/(2·cp) for causal load balancing.
        if p.cp > 1 && !training.seq_length.is_multiple_of(2 * p.cp) {
            return Err(WorkloadError::divisibility(
                "parallel.cp",
                format!(
                    "2*cp = {} does not divide seq_length={} (context parallelism splits the sequence into 2*cp chunks)",
                    2 * p.cp,
                    training.seq_length
                ),
            ));
        }
        if training.flash_attention && training.attention_softmax != AttentionSoftmax::Fused {
            return Err(WorkloadError::invalid(
                "training.attention_softmax",
                "applies to unfused attention, which materializes the scores: set training.flash_attention: false, or remove attention_softmax",
            ));
        }
        if p.cp > 1 && !training.flash_attention {
            // Context parallelism runs fused attention only. Megatron-Core's unfused
            // `DotProductAttention` asserts `context_parallel_size == 1` ("Context parallelism is
            // only supported by TEDotProductAttention!", `transformer/dot_product_attention.py`
            // at core_v0.15.0, line 57); PyTorch's ring runs SDPA's flash or efficient kernels.
            return Err(match p.cp_impl {
                CpImpl::Megatron => WorkloadError::invalid(
                    "training.flash_attention",
                    "false (unfused attention) cannot run with context parallelism: Megatron-Core supports cp > 1 only with Transformer Engine's fused attention; set flash_attention: true or cp: 1",
                ),
                CpImpl::TorchRing | CpImpl::TorchRingEager => WorkloadError::invalid(
                    "parallel.cp_impl",
                    "torch_ring and torch_ring_eager run PyTorch's SDPA flash or efficient kernels, fused attention: set training.flash_attention: true or cp: 1",
                ),
            });
        }
        if p.sp() && !(training.seq_length / p.cp).is_multiple_of(p.tp) {
            return Err(WorkloadError::divisibility(
                "parallel.tp",
                format!(
                    "with sequence parallelism tp={} must divide the local sequence seq_length/cp = {}",
                    p.tp,
                    training.seq_length / p.cp
                ),
            ));
        }

        // Batch.
        let per = training.micro_batch_size * p.dp;
        if training.global_batch_size != 0 && !training.global_batch_size.is_multiple_of(per) {
            let lo = training.global_batch_size / per * per;
            // Below the first multiple only `per` itself is valid: name it once.
            let nearest = if lo == 0 { format!("{per}") } else { format!("{lo}, {}", lo + per) };
            return Err(WorkloadError::divisibility(
                "training.global_batch_size",
                format!(
                    "global_batch_size={} is not a multiple of micro_batch_size*dp = {}*{} = {per}; nearest valid: {nearest}",
                    training.global_batch_size, training.micro_batch_size, p.dp,
                ),
            ));
        }

        let flushes = p.pipeline_flushes;
        let m_all = p.micro_batches(training);
        if !m_all.is_multiple_of(flushes) {
            return Err(WorkloadError::divisibility(
                "parallel.pipeline_flushes",
                format!("{flushes} schedules per step must divide the {m_all} micro-batches per step; use a divisor of {m_all}"),
            ));
        }
        // DualPipeV: every rank runs at least two micro-batches per rank of the pipeline
        // (`dualpipev.py` asserts num_chunks >= num_ranks * 2).
        if p.dual_pipe_v() {
            let m = p.micro_batches(training) / flushes;
            if m < 2 * p.pp {
                return Err(WorkloadError::invalid(
                    "training.global_batch_size",
                    format!(
                        "the dualpipev schedule needs at least 2*pp = {} micro-batches per schedule, got {m}; raise training.global_batch_size to at least {}",
                        2 * p.pp,
                        2 * p.pp * flushes * training.micro_batch_size.max(1) * p.dp.max(1)
                    ),
                ));
            }
        }
        // Interleaving.
        if p.schedule == PipelineSchedule::Interleaved {
            if p.vpp < 2 {
                return Err(WorkloadError::invalid("parallel.vpp", "the interleaved schedule needs vpp >= 2"));
            }
            if p.pp < 2 {
                return Err(WorkloadError::invalid("parallel.pp", "the interleaved schedule needs pp >= 2"));
            }
            let m = p.micro_batches(training) / flushes;
            if !m.is_multiple_of(p.pp) {
                return Err(WorkloadError::divisibility(
                    "parallel.vpp",
                    format!(
                        "the interleaved schedule needs the micro-batch count per schedule ({m}) to be a multiple of pp={}; raise training.global_batch_size to a multiple of {}",
                        p.pp,
                        per * p.pp * flushes
                    ),
                ));
            }
        }

        // Optimizer sharding.
        if p.zero_stage > 3 {
            return Err(WorkloadError::invalid(
                "parallel.zero_stage",
                format!("zero_stage={} is not one of 0, 1, 2, 3", p.zero_stage),
            ));
        }
        if p.use_distributed_optimizer {
            p.zero_stage = p.zero_stage.max(1);
        }
        p.use_distributed_optimizer = p.zero_stage >= 1;

        if p.grad_bucket_size == 0 {
            p.grad_bucket_size = 40_000_000u64.max(1_000_000 * p.dp);
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_ascending() {
        assert_eq!(divisors(40), vec![1, 2, 4, 5, 8, 10, 20, 40]);
        assert_eq!(divisors(1), vec![1]);
        assert_eq!(divisors(16), vec![1, 2, 4, 8, 16]);
    }
}
