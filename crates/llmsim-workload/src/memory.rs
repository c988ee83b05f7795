//! Per-GPU memory footprint of a training plan, and the out-of-memory check.
//!
//! Model states follow Megatron-LM's mixed-precision accounting (Megatron-LM
//! `docs/source/api-guide/dist_optimizer.md`): per parameter, the bf16 weight (2 bytes), the fp32
//! gradient buffer (4; Megatron accumulates and reduces bf16 gradients in fp32), the fp32 main
//! weight (4) and Adam's two fp32 moments (8): 18 bytes, or `6 + 12/d` with the distributed
//! optimizer (ZeRO-1) over `d = dp·cp` ranks (expert weights over `dp·cp/ep`). ZeRO-2 also shards
//! the gradients, ZeRO-3 the weights too (Rajbhandari et al. 2020, "ZeRO", Figure 1).
//!
//! Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", §4): per layer and micro-batch, `s·b·h·(10 + 24/t + 5·a·s/(h·t))` bytes
//! with tensor parallelism, `s·b·h/t·(34 + 5·a·s/h)` with sequence parallelism. The terms are
//! generalised here to GQA, gated MLPs, MoE and the activation dtype, from the paper's
//! per-tensor breakdown (attention 11·sbh + 5·as²b, MLP 19·sbh, norms 4·sbh):
//! - replicated over TP unless SP: both norm inputs, the QKV and fc1 inputs, the two dropout masks;
//! - sharded over TP: Q, K, V, the projection input, the MLP intermediates;
//! - the attention-score term `5·as²b/t` disappears with FlashAttention (which keeps only the
//!   fp32 log-sum-exp, `4·a·s·b/t`) and with selective recomputation;
//! - full recomputation keeps each layer's input only (`2·sbh`, `/t` with SP), plus one layer's
//!   activations, live while it is recomputed.
//!
//! Pipeline: stage `i` of 1F1B holds `min(pp − i, m)` micro-batches in flight. Interleaved holds
//! Megatron's warm-up count plus one, `min(2·(pp − i − 1) + (vpp − 1)·pp + 1, m·vpp)` model-chunk
//! micro-batches of `L/(pp·vpp)` layers each; for stage 0 that is `pp·(1 + (pp − 1)/(pp·vpp))`
//! stages' worth, Korthikanti et al.'s figure. The footprint is the worst stage's (stage 0 as a
//! rule; the last stage adds the logits).

use llmsim_compute::DType;
use llmsim_core::GpuArch;
use serde::Serialize;

use crate::config::{Fp8Recipe, ParallelConfig, Recompute, RecomputeModule, TrainingConfig};
use crate::error::WorkloadError;
use crate::model::{LayerKind, ModelConfig};
use crate::ops::{layer_params, layers_of_chunk, padded_vocab, stage_layers, stage_param_split, stage_vocab_params};

/// Fixed per-GPU overhead outside PyTorch's tensors: CUDA context and kernels (~0.5 GiB), cuBLAS
/// workspaces, NCCL communicator buffers (a few hundred MiB across the TP/DP/PP/EP communicators).
pub const WORKSPACE_FIXED_BYTES: u64 = 3 << 29; // 1.5 GiB

/// Caching-allocator fragmentation, as a fraction of the tensors' bytes, added to the workspace.
pub const FRAGMENTATION: f64 = 0.05;

/// Bytes per GPU, by category, of the worst pipeline stage.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemoryFootprint {
    /// Model weights in the training dtype.
    pub parameters: u64,
    /// Gradient buffers (fp32 for bf16 training).
    pub gradients: u64,
    /// Adam moments and fp32 main weights.
    pub optimizer_states: u64,
    /// Stored activations of the in-flight micro-batches.
    pub activations: u64,
    /// [`WORKSPACE_FIXED_BYTES`] plus [`FRAGMENTATION`] of the rest.
    pub workspace: u64,
    /// The part of `workspace` that is the caching allocator's fragmentation allowance: an
    /// estimate, not a requirement (with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` it is
    /// close to zero). A plan that fits without it is accepted as tight, not rejected.
    #[serde(default)]
    pub fragmentation: u64,
    /// Parameters, gradients, optimizer states, activations and workspace together.
    pub total: u64,
}

impl MemoryFootprint {
    /// A footprint from its tensors, with the fixed workspace and the fragmentation allowance.
    pub fn new(parameters: u64, gradients: u64, optimizer_states: u64, activations: u64) -> Self {
        let tensors = parameters + gradients + optimizer_states + activations;
        let fragmentation = (tensors as f64 * FRAGMENTATION) as u64;
        let workspace = WORKSPACE_FIXED_BYTES + fragmentation;
        MemoryFootprint {
            parameters,
            gradients,
            optimizer_states,
            activations,
            workspace,
            fragmentation,
            total: tensors + workspace,
        }
    }

    /// What the plan needs for certain: the total less the fragmentation allowance.
    pub fn firm(&self) -> u64 {
        self.total.saturating_sub(self.fragmentation)
    }

    /// True when the plan fits only if the allocator fragments less than the allowance.
    pub fn is_tight(&self, capacity_bytes: u64) -> bool {
        self.total > capacity_bytes && self.firm() <= capacity_bytes
    }
}

/// One dense layer's saved activations per micro-batch under TorchTitan's op-level selective
/// checkpointing ([`Recompute::SelectiveOp`]): the block's input (the checkpoint's), SDPA's
/// output and log-sum-exp, the reduce-scatter outputs (TP with sequence parallelism), and the
/// outputs of the `mm`s at odd positions in forward order (wq, wv, w1, w2 of a gated MLP; wq,
/// wv, fc1 otherwise; the same under torchao's Float8, whose `mm`s the policy sees before they
/// become `_scaled_mm`s, each output in the activation dtype). Everything else is
/// rebuilt from these before the block's backward. A row-parallel `mm`'s output is the full
/// `[tokens, h]` partial sum before its reduce-scatter.
fn op_policy_activation_bytes(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> u64 {
    let tp = p.tp.max(1);
    let dt = t.activation_bytes();
    let tok = t.micro_batch_size * t.seq_length / p.cp.max(1);
    let h = m.hidden_size;
    let (a, kv, d, ffn) = (m.num_attention_heads, m.num_key_value_heads, m.head_dim(), m.intermediate_size);
    let seq_sharded = if p.sp() { tok * h / tp } else { tok * h };
    let mut bytes = dt * seq_sharded + dt * tok * a * d / tp + 4 * a * tok / tp;
    if p.sp() {
        bytes += 2 * dt * seq_sharded;
    }
    // Output columns per rank of each `mm` in forward order; the odd ones are saved.
    let mut mms = vec![a * d / tp, kv * d / tp, kv * d / tp, h];
    if m.gated_mlp {
        mms.extend([ffn / tp, ffn / tp, h]);
    } else {
        mms.extend([ffn / tp, h]);
    }
    bytes += mms.iter().step_by(2).map(|&cols| dt * tok * cols).sum::<u64>();
    bytes
}

/// Activation bytes one transformer layer stores for one micro-batch on one rank, before any
/// recomputation (`recompute: none`), per the module doc. Each block (attention, MLP, MoE, Mamba)
/// stores its norm input, its first GEMM's input and a 1-byte dropout mask (replicated over TP
/// unless SP), plus its TP-sharded intermediates:
/// - attention: Q, K, V and the projection input (MLA: Q and K of `qk_head_dim`, V and the
///   projection input of `v_head_dim`, plus the replicated latents: the q and kv down-projection
///   outputs and their normed copies); the scores (or FlashAttention's log-sum-exp) over the
///   layer's window;
/// - Mamba-2 (Megatron-Core `MambaMixer` with the `mamba_chunk_scan_combined` kernel, which keeps
///   its inputs and recomputes the chunk states): the in_proj output, the conv output, dt in fp32,
///   the scan output and the gated-norm output.
pub fn layer_activation_bytes(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, layer: u64) -> u64 {
    if t.recompute == Recompute::SelectiveOp {
        return op_policy_activation_bytes(m, t, p);
    }
    let tp = p.tp.max(1);
    let cp = p.cp.max(1);
    let sp = p.sp();
    let dt = t.activation_bytes();
    let tok = t.micro_batch_size * t.seq_length / cp;
    let h = m.hidden_size;
    let d = m.head_dim();
    let (a, kv) = (m.num_attention_heads, m.num_key_value_heads);
    let sbh = tok * h;
    let kind = m.layer_kind(layer);
    // Dropout masks (1 byte) only with dropout on; a linear layer's saved input in its own dtype
    // (FP8 under Transformer Engine FP8 training).
    let drop = u64::from(t.dropout_on(m));
    let lin = t.saved_linear_input_bytes();
    let mut replicated = 0;
    let mut sharded = 0;
    let mut scores = 0;
    // Selective recomputation of submodules (`training.recompute_modules`): a recomputed
    // module's outputs are freed after use and rebuilt before its backward.
    let rc = |x: RecomputeModule| t.recomputes(x);
    // A pre-norm's output, the next linear layer's saved input, unless the norm is recomputed.
    let norm_out = if rc(RecomputeModule::Layernorm) { 0 } else { lin * sbh };
    if kind.has_attention() {
        // Norm input, QKV input, dropout mask.
        replicated += dt * sbh + norm_out + drop * sbh;
        // FP8: the projection also keeps an FP8 copy of its input (the attention output).
        let proj_fp8 = if lin < dt { lin * tok * a * d / tp } else { 0 };
        match &m.mla {
            None => sharded += dt * tok * (a * d + 2 * kv * d + a * d) / tp + proj_fp8,
            Some(mla) => {
                let (qk, v) = (mla.qk_head_dim(), mla.v_head_dim);
                // Q, K, V from the up-projections (rebuilt under `mla_up_proj`), and the output
                // projection's input.
                let qkv = if rc(RecomputeModule::MlaUpProj) { 0 } else { 2 * a * qk + a * v };
                sharded += dt * tok * (qkv + a * v) / tp;
                replicated += dt * tok * (2 * mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim + mla.kv_lora_rank);
            }
        }
        let keys = m.attended_keys(layer, t.seq_length);
        scores = if t.flash_attention || rc(RecomputeModule::CoreAttn) {
            if t.flash_attention { 4 * a * tok / tp } else { 0 }
        } else {
            // The softmax's output (its backward and AV's read it); with dropout on, also the
            // dropped probabilities AV saves and the 1-byte mask (Korthikanti et al. 2022's
            // `5as/h`). Without dropout AV saves the softmax's output itself.
            (dt + drop * (dt + 1)) * a * tok * keys / tp
        };
    }
    // fc1's output (two halves if gated) for the activation's backward, and fc2's input.
    let mlp = |ffn: u64, tokens: u64| -> u64 {
        let fc1_out = if m.gated_mlp { 2 * ffn } else { ffn };
        tokens * (dt * fc1_out + lin * ffn) / tp
    };
    match kind {
        LayerKind::Moe | LayerKind::MoeMlp => {
            let k = m.num_experts_per_tok;
            // Norm input, router input, dropout mask; expert inputs (gathered over TP) and
            // intermediates; router logits. A recomputed MoE block keeps only its input.
            replicated += dt * sbh + norm_out + drop * sbh;
            if !rc(RecomputeModule::Moe) {
                // With etp: 1 the experts see the SP shard's tokens only (no TP gather), whole
                // experts over a tp-th of the tokens: the same intermediates.
                // LatentMoE: the experts take latent-wide tokens, and the up-projection keeps its
                // (latent) input.
                let w = m.expert_width();
                let expert_in = if p.ep_spans_tp() {
                    lin * tok * k * w / tp
                } else {
                    lin * tok * k * w
                };
                replicated += lin * tok * m.moe_latent_size;
                // `moe_act` rebuilds the experts' fc2 input.
                let act_out = if rc(RecomputeModule::MoeAct) {
                    tok * k * lin * m.moe_intermediate_size / tp
                } else {
                    0
                };
                sharded += expert_in + mlp(m.moe_intermediate_size, tok * k) - act_out + 4 * tok * m.num_experts / tp;
            }
            if m.num_shared_experts > 0 && !rc(RecomputeModule::SharedExperts) && !rc(RecomputeModule::Moe) {
                sharded += mlp(m.shared_ffn(), tok);
            }
        }
        LayerKind::Dense | LayerKind::Mlp => {
            // Norm input, fc1 input, dropout mask; a recomputed MLP keeps only its input.
            replicated += dt * sbh + norm_out + drop * sbh;
            if !rc(RecomputeModule::Mlp) {
                sharded += mlp(m.intermediate_size, tok);
            }
        }
        LayerKind::Mamba => {
            if let Some(mb) = &m.mamba {
                // Norm input, in_proj input, dropout mask.
                replicated += dt * sbh + lin * sbh + drop * sbh;
                sharded += dt * tok * (mb.in_proj_dim() + mb.conv_dim() + 2 * mb.d_inner()) / tp + 4 * tok * mb.num_heads / tp;
            }
        }
        LayerKind::Attention => {}
    }
    let replicated = if sp { replicated / tp } else { replicated };
    replicated + sharded + scores
}

/// Peak of the activations a stage holds, walking its schedule (Megatron's 1F1B or interleaved
/// order, [`crate::megatron::schedule`]): a forward of (micro-batch, chunk) adds the bytes of
/// `per_layer[chunk]` (what each of the chunk's layers keeps, in forward order), its backward frees
/// them. Exact for uneven chunks (an embedding-only chunk holds nothing) and for Megatron's
/// all-forward-first case (exactly `pp` micro-batches, interleaved). A merged step
/// (`parallel.moe_a2a_overlap`: Megatron-Core's combined 1F1B, `TransformerLayerSchedulePlan`)
/// runs the forward's layer `k` beside the backward's `k`-th layer from the end, which releases
/// that layer's saved tensors: layer by layer, so the step holds the stash it started with plus
/// at most one layer more than the forward has added and the backward released, not both
/// micro-batches whole.
fn schedule_peak(t: &TrainingConfig, p: &ParallelConfig, stage: u64, per_layer: &[Vec<u64>]) -> u64 {
    let mb = p.micro_batches(t).max(1);
    let (mut cur, mut peak) = (0u64, 0u64);
    let none: &[u64] = &[];
    let layers = |c: u64| per_layer.get(c as usize).map_or(none, |l| l.as_slice());
    let mut steps = crate::megatron::stage_schedule(p, stage, mb).into_iter();
    while let Some(step) = steps.next() {
        let f = layers(step.chunk);
        if step.is_forward() && step.merged {
            // The backward step it runs with: its layers release in reverse order.
            let b = steps.next().map_or(none, |s| layers(s.chunk));
            for k in 0..f.len().max(b.len()) {
                if let Some(&x) = f.get(k) {
                    cur += x;
                    peak = peak.max(cur);
                }
                if k < b.len() {
                    cur = cur.saturating_sub(b[b.len() - 1 - k]);
                }
            }
        } else if step.is_forward() {
            cur += f.iter().sum::<u64>();
            peak = peak.max(cur);
        } else if !step.defer_w {
            // A zero-bubble backward keeps the layers' inputs for its deferred weight gradients,
            // which free them (`weight`).
            cur = cur.saturating_sub(f.iter().sum::<u64>());
        }
    }
    peak
}

/// Micro-batches (1F1B) or model-chunk micro-batches (interleaved) in flight at the peak,
/// counting every unit alike (for the embedding's per-micro-batch tensors).
fn in_flight_units(t: &TrainingConfig, p: &ParallelConfig, stage: u64) -> u64 {
    schedule_peak(t, p, stage, &vec![vec![1]; p.chunks_per_stage() as usize])
}

fn stage_footprint(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, stage: u64, arch: GpuArch) -> MemoryFootprint {
    let tp = p.tp.max(1);
    let cp = p.cp.max(1);
    let dt = t.activation_bytes();
    let sp = p.sp();

    // Model states.
    let params = stage_param_split(m, p, stage);
    let dense_shard = p.dense_dp_group().max(1);
    let expert_shard = p.expert_dp_group().max(1);
    let zero = if p.use_distributed_optimizer {
        p.zero_stage.max(1)
    } else {
        p.zero_stage
    };
    let sharded = |bytes_per_param: u64, on: bool| -> u64 {
        if on {
            (params.dense * bytes_per_param).div_ceil(dense_shard) + (params.expert * bytes_per_param).div_ceil(expert_shard)
        } else {
            params.total() * bytes_per_param
        }
    };
    // FP8 training: Transformer Engine caches each linear weight's FP8 cast for the micro-batches
    // after the first (the embedding and norms are not TE linear layers): row-wise for forward,
    // and on Hopper, whose FP8 tensor cores take only the TN layout, also a column-wise
    // (transposed) copy for the input gradient, 2 bytes per weight. Blackwell runs FP8 GEMMs in
    // any layout (TE's `is_non_tn_fp8_gemm_supported`), so one copy, 1 byte. Under ZeRO-3 / FSDP
    // that resharded its weights after forward, only the gathered units have a cast (below).
    // MXFP8 keeps both copies everywhere (its block scales run along the reduction dimension),
    // each with a scale byte per 32 elements.
    // NVFP4 keeps a row-wise and a column-wise copy of each weight too (16x16-block scaled;
    // TE `NVFP4Tensor`), each half a byte plus an E4M3 scale per 16: 2 x 9/16 bytes.
    // Blockwise FP8 keeps both copies of its 128x128-block weights (an FP32 scale per 16,384
    // elements, left out) on Hopper; Blackwell runs the recipe as MXFP8, so as MXFP8.
    let nvfp4 = t.dtype == DType::Fp4;
    let mx = !nvfp4 && (t.fp8_recipe == Fp8Recipe::Mxfp8 || (t.fp8_recipe == Fp8Recipe::Blockwise && arch == GpuArch::Blackwell));
    let fp8_copies: u64 = match arch {
        GpuArch::Blackwell if !mx && !nvfp4 => 1,
        _ => 2,
    };
    let cast_bytes = |weights: u64| -> u64 {
        let b = fp8_copies * weights;
        if nvfp4 {
            (9 * b).div_ceil(16)
        } else if mx {
            b + b.div_ceil(32)
        } else {
            b
        }
    };
    let fp8 = t.dtype.is_te_quantized();
    // FP8 primary weights (`fp8_param`): the linear layers' weights *are* their FP8 copies (no
    // bf16 copy): the FP8 bytes below stay, the activation-dtype bytes of those weights go.
    // The embedding, output layer (the vocab parameters) and, approximately, the norms keep dt.
    let fp8_param = fp8 && t.fp8_param;
    let vocab = stage_vocab_params(m, p, stage);
    let linear = params.total().saturating_sub(vocab);
    let fp8_cache = if fp8 && !(p.fsdp() && p.reshard_after_forward) {
        cast_bytes(linear)
    } else {
        0
    };
    // ZeRO-3 / FSDP: the gathered units on top of the shards. With reshard after forward, two
    // units' parameters (the one computing and the one prefetched, megatron.rs) and one unit's
    // unsharded gradient before its reduce-scatter; without, the whole stage stays gathered
    // for the step (at worst: every unit of the stage between a forward and its backward) and
    // its gradients accumulate unsharded until the last micro-batch, or, reduce-scattered every
    // micro-batch (`fsdp_sync_every_microbatch`), one unit's at a time.
    let grad_b = t.grad_dtype().bytes();
    let (gathered_params, unsharded_grads) = match (p.fsdp(), p.reshard_after_forward) {
        (false, _) => (0, 0),
        (true, true) if fp8 => {
            // Megatron-FSDP's double-buffer pool holds two decoder-layer units, each with its
            // FP8 weights (and their bf16 copy unless `fp8_param`); the embedding and output
            // layer, which have no FP8 cast, pass through a temporary buffer, one at a time
            // (megatron_fsdp `param_and_grad_buffer.py`, `fsdp_units_to_double_buffer`, 0d8e0714).
            let layer = stage_layers(m, p, stage)
                .iter()
                .map(|&l| {
                    let lp = layer_params(m, p, l);
                    lp.dense + lp.expert
                })
                .max()
                .unwrap_or(0);
            let one_vocab = if vocab > 0 {
                padded_vocab(m, p.tp.max(1)) * m.hidden_size / p.tp.max(1)
            } else {
                0
            };
            let layer_bytes = if fp8_param { 0 } else { layer * dt } + cast_bytes(layer);
            let unit = crate::megatron::fsdp_unit_params(m, p, stage);
            (2 * layer_bytes + one_vocab * dt, unit * grad_b)
        }
        (true, true) => {
            let unit = crate::megatron::fsdp_unit_params(m, p, stage);
            (2 * unit * dt, unit * grad_b)
        }
        (true, false) => {
            // With `fp8_param` the gathered linear weights are `fp8_cache`; only the vocab's rest.
            let gathered = if fp8_param {
                vocab * dt - (vocab * dt).div_ceil(dense_shard).min(vocab * dt)
            } else {
                sharded(dt, false) - sharded(dt, true)
            };
            // Reduce-scattered every micro-batch, one unit's gradient is unsharded at a time.
            let grads = if p.fsdp_sync_every_microbatch {
                crate::megatron::fsdp_unit_params(m, p, stage) * grad_b
            } else {
                sharded(grad_b, false) - sharded(grad_b, true)
            };
            (gathered, grads)
        }
    };
    // The model-dtype weights: with `fp8_param` only the vocab parameters (and their shards
    // under ZeRO-3) keep dt bytes; the linear weights' FP8 bytes are `fp8_cache` (or, resharded,
    // their FP8 shards at 1 byte, Megatron-FSDP's uint8 buffer without a transpose cache).
    let weights = if fp8_param {
        let vocab_b = if zero >= 3 {
            (vocab * dt).div_ceil(dense_shard)
        } else {
            vocab * dt
        };
        let lin_shards = if p.fsdp() && p.reshard_after_forward {
            sharded(1, true).saturating_sub(vocab.div_ceil(dense_shard))
        } else {
            0
        };
        vocab_b + lin_shards
    } else {
        sharded(dt, zero >= 3)
    };
    let parameters = weights + gathered_params + fp8_cache;
    let gradients = sharded(grad_b, zero >= 2) + unsharded_grads;
    let optimizer_states = if t.optimizer.is_muon() {
        // Muon's matrices keep a momentum and the main copy; the embedding and output layer
        // Adam's two moments and the main copy. `dist_muon` shards both layer-wise (whole
        // tensors, counted here as an even split) over the groups that reduce them.
        let on = t.optimizer == crate::OptimizerKind::DistMuon;
        let adam_extra = vocab * (t.optimizer_bytes_per_param() - t.muon_bytes_per_param());
        sharded(t.muon_bytes_per_param(), on) + if on { adam_extra.div_ceil(dense_shard) } else { adam_extra }
    } else {
        sharded(t.optimizer_bytes_per_param(), zero >= 1)
    };

    // Activations.
    let layers = stage_layers(m, p, stage);
    let tok = t.micro_batch_size * t.seq_length / cp;
    let sbh = tok * m.hidden_size;
    let chunks = p.chunks_per_stage();
    let input = if sp { dt * sbh / tp } else { dt * sbh };
    // What one micro-batch of each chunk keeps until its backward, layer by layer.
    let per_layer: Vec<Vec<u64>> = (0..chunks)
        .map(|c| {
            let mut v: Vec<u64> = layers_of_chunk(m, p, stage, c)
                .map(|l| match t.recompute {
                    Recompute::Full => input,
                    // Activation CPU offloading (pp = 1): Transformer Engine's default schedule
                    // offloads layers 0..N and finishes layer i's copy before layer L - N + i
                    // runs, so at the end of forward the GPU holds the last L - N layers'
                    // activations.
                    _ if l < t.cpu_offload_layers => 0,
                    _ => layer_activation_bytes(m, t, p, l),
                })
                .collect();
            if p.holds_head(stage, c) {
                // Each MTP depth after the chunk's layers: its block's layers, and what its
                // projection keeps (the shifted embedding and the previous hidden state for the
                // two norms, their concatenation for `eh_proj`: four [tokens, h] tensors).
                let l = m.num_hidden_layers;
                let depth: u64 = match t.recompute {
                    Recompute::Full => input,
                    _ => {
                        (l..l + m.mtp_block_layers())
                            .map(|i| layer_activation_bytes(m, t, p, i))
                            .sum::<u64>()
                            + 4 * input
                    }
                };
                v.extend(std::iter::repeat_n(depth, t.mtp_num_layers as usize));
            }
            v
        })
        .collect();
    let mut activations = schedule_peak(t, p, stage, &per_layer);
    if t.recompute == Recompute::Full {
        // One layer's full activations, live while it is recomputed.
        activations += layers.iter().map(|&l| layer_activation_bytes(m, t, p, l)).max().unwrap_or(0);
    }
    if stage == 0 && t.dropout_on(m) {
        // Embedding dropout mask per in-flight micro-batch.
        let held = in_flight_units(t, p, stage);
        activations += held.min(p.micro_batches(t)) * if sp { sbh / tp } else { sbh };
    }
    if stage == p.head_stage() {
        // Final norm input, logits and fp32 softmax of the one micro-batch in its backward
        // (Megatron's vocab-parallel cross-entropy keeps the exp'd logits in fp32).
        let vl = padded_vocab(m, tp) / tp;
        // Fused cross-entropy (TE) writes the gradient into the logits: no fp32 softmax beside.
        let per_logit = if t.cross_entropy_fusion { dt } else { dt + 4 };
        // Every MTP depth's logits and loss are live with the main ones until backward.
        activations += (1 + t.mtp_num_layers) * (dt * if sp { sbh / tp } else { sbh } + per_logit * tok * vl);
    }
    MemoryFootprint::new(parameters, gradients, optimizer_states, activations)
}

/// The per-GPU footprint of the worst pipeline stage of a resolved plan (see
/// [`ParallelConfig::resolve`]) on a Hopper GPU; [`footprint_on`] for another architecture.
pub fn footprint(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig) -> MemoryFootprint {
    footprint_on(m, t, p, GpuArch::Hopper)
}

/// [`footprint`] on a GPU of architecture `arch` (it sets how many FP8 weight copies Transformer
/// Engine keeps).
pub fn footprint_on(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, arch: GpuArch) -> MemoryFootprint {
    (0..p.pp.max(1))
        .map(|s| stage_footprint(m, t, p, s, arch))
        .max_by_key(|f| f.total)
        .unwrap_or_default()
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn generic_suggestion(f: &MemoryFootprint) -> &'static str {
    generic_suggestion_for(f, None)
}

/// The generic suggestion, leaving out what the plan `p` already does.
fn generic_suggestion_for(f: &MemoryFootprint, p: Option<&ParallelConfig>) -> &'static str {
    if f.parameters + f.gradients + f.optimizer_states >= f.activations {
        match p.map(|p| (p.use_distributed_optimizer || p.zero_stage >= 1, p.zero_stage)) {
            Some((true, z)) if z >= 3 => "model states dominate: raise parallel.tp / parallel.pp",
            Some((true, _)) => "model states dominate: set parallel.zero_stage: 2 or 3, or raise parallel.tp / parallel.pp",
            _ => {
                "model states dominate: set parallel.use_distributed_optimizer: true (or zero_stage: 2/3), or raise parallel.tp / parallel.pp"
            }
        }
    } else {
        "activations dominate: set training.recompute: selective or full, lower training.micro_batch_size, or raise parallel.tp (with sequence_parallel: true) / parallel.pp"
    }
}

/// Checks a footprint against a GPU's capacity. The suggestion is generic, from the largest
/// categories; [`check_config_fits`] gives one tested against the plan.
///
/// # Errors
/// [`WorkloadError::OutOfMemory`] when even the firm part of the footprint
/// ([`MemoryFootprint::firm`], without the fragmentation allowance) exceeds `capacity_bytes`. A
/// plan that fits only without the allowance passes; [`MemoryFootprint::is_tight`] tells.
pub fn check_fits(f: &MemoryFootprint, capacity_bytes: u64, gpu_name: &str) -> Result<(), WorkloadError> {
    if f.firm() <= capacity_bytes {
        return Ok(());
    }
    Err(WorkloadError::OutOfMemory {
        gpu: gpu_name.to_string(),
        capacity: capacity_bytes,
        footprint: f.clone(),
        suggestion: format!("suggestion: {}", generic_suggestion(f)),
    })
}

/// Checks a resolved plan's footprint against a GPU's capacity; on failure the suggestion names
/// the first single change that fits (distributed optimizer, selective then full recomputation,
/// micro-batch 1, sequence parallelism, doubling tp or pp at the same GPU count), with its total.
///
/// # Errors
/// [`WorkloadError::OutOfMemory`] when the plan does not fit.
pub fn check_config_fits(
    m: &ModelConfig,
    t: &TrainingConfig,
    p: &ParallelConfig,
    capacity_bytes: u64,
    gpu_name: &str,
) -> Result<(), WorkloadError> {
    check_config_fits_on(m, t, p, capacity_bytes, gpu_name, GpuArch::Hopper)
}

/// [`check_config_fits`] on a GPU of architecture `arch`.
///
/// # Errors
/// [`WorkloadError::OutOfMemory`] when the plan does not fit.
pub fn check_config_fits_on(
    m: &ModelConfig,
    t: &TrainingConfig,
    p: &ParallelConfig,
    capacity_bytes: u64,
    gpu_name: &str,
    arch: GpuArch,
) -> Result<(), WorkloadError> {
    let f = footprint_on(m, t, p, arch);
    let Err(WorkloadError::OutOfMemory {
        gpu,
        capacity,
        footprint: worst,
        ..
    }) = check_fits(&f, capacity_bytes, gpu_name)
    else {
        return Ok(());
    };
    let gpus = p.world_size();
    let mut tries: Vec<(String, TrainingConfig, ParallelConfig)> = Vec::new();
    if p.zero_stage == 0 && !p.use_distributed_optimizer && p.dense_dp_group() > 1 {
        tries.push((
            "parallel.use_distributed_optimizer: true".into(),
            t.clone(),
            ParallelConfig {
                use_distributed_optimizer: true,
                ..p.clone()
            },
        ));
    }
    for r in [Recompute::Selective, Recompute::Full] {
        if t.recompute != r && !(r == Recompute::Selective && (t.flash_attention || t.recompute == Recompute::Full)) {
            tries.push((
                format!(
                    "training.recompute: {}{}",
                    if r == Recompute::Full { "full" } else { "selective" },
                    if t.cpu_offload_layers > 0 {
                        " with training.cpu_offload_layers: 0"
                    } else {
                        ""
                    }
                ),
                TrainingConfig {
                    recompute: r,
                    cpu_offload_layers: 0,
                    ..t.clone()
                },
                p.clone(),
            ));
        }
    }
    if t.micro_batch_size > 1 {
        tries.push((
            "training.micro_batch_size: 1".into(),
            TrainingConfig {
                micro_batch_size: 1,
                global_batch_size: t.global_batch_size,
                ..t.clone()
            },
            p.clone(),
        ));
    }
    if p.tp > 1 && !p.sequence_parallel {
        tries.push((
            "parallel.sequence_parallel: true".into(),
            t.clone(),
            ParallelConfig {
                sequence_parallel: true,
                ..p.clone()
            },
        ));
    }
    for (what, q) in [
        (
            format!("parallel.tp: {}", p.tp * 2),
            ParallelConfig {
                tp: p.tp * 2,
                dp: 0,
                ..p.clone()
            },
        ),
        (
            format!("parallel.pp: {}", p.pp * 2),
            ParallelConfig {
                pp: p.pp * 2,
                dp: 0,
                ..p.clone()
            },
        ),
    ] {
        tries.push((what, t.clone(), q));
    }
    let mut found = None;
    for (what, t2, p2) in tries {
        let Ok(p2) = p2.resolve(gpus, m, &t2) else { continue };
        let f2 = footprint_on(m, &t2, &p2, arch);
        if f2.total <= capacity_bytes {
            found = Some(format!("suggestion: {what} (needs {:.1} GiB)", gib(f2.total)));
            break;
        }
    }
    let suggestion = match found {
        Some(s) => s,
        None => format!(
            "suggestion: no single change fits; {}, combined",
            generic_suggestion_for(&f, Some(p))
        ),
    };
    Err(WorkloadError::OutOfMemory {
        gpu,
        capacity,
        footprint: worst,
        suggestion,
    })
}
