//! Model architecture: presets, Hugging Face `config.json`, and the `model:` scenario section.
//!
//! A model is a decoder-only transformer described with Hugging Face field names. Conventions
//! that the FLOPs, parameter and memory accounting rely on:
//! - attention is standard multi-head (or grouped-query) attention with `head_dim = hidden_size /
//!   num_attention_heads` unless `head_dim` is set (Qwen3, GPT-OSS), or multi-head latent
//!   attention (`mla`, DeepSeek-V2/V3); sliding-window layers (`sliding_window`, `layer_types`)
//!   attend to the window only;
//! - hybrid models (`hybrid_override_pattern`, Nemotron-H) hold one block per layer: a Mamba-2
//!   mixer (`mamba`), attention, an MLP or an MoE block, each with its own pre-norm;
//! - linear layers have no biases (unless `attention_bias` / `mlp_bias`, GPT-OSS) and norms have
//!   one weight vector of `hidden_size` (RMSNorm);
//!   GPT-3's biases and LayerNorm biases (~13·h per layer, < 0.01 % of the parameters) are left
//!   out, as are its learned position embeddings (2048·h);
//! - a gated MLP (SwiGLU) has three `h × ffn` matrices, a plain one (GeLU) two;
//! - an MoE layer has a router (`h × num_experts`), `num_experts` routed experts of FFN size
//!   `moe_intermediate_size`, and `num_shared_experts` shared experts modelled as one dense MLP of
//!   FFN size `num_shared_experts · moe_intermediate_size` (DeepSeek-MoE's definition).

use std::path::Path;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::WorkloadError;

/// Multi-head latent attention (DeepSeek-V2/V3; DeepSeek-AI 2024, "DeepSeek-V2", §2.1): queries
/// through a low-rank `q_lora_rank` bottleneck (0 = a plain `h × heads·qk_head_dim` projection),
/// keys and values through a shared `kv_lora_rank` latent plus one `qk_rope_head_dim` RoPE key
/// shared by all heads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlaConfig {
    /// Query latent rank; 0 = no query compression (DeepSeek-V2-Lite).
    #[serde(default)]
    pub q_lora_rank: u64,
    /// Rank of the latent shared by keys and values.
    pub kv_lora_rank: u64,
    /// Per-head query/key dimension without RoPE.
    pub qk_nope_head_dim: u64,
    /// Dimension of the RoPE key shared by all heads, and of each head's RoPE query part.
    pub qk_rope_head_dim: u64,
    /// Per-head value dimension.
    pub v_head_dim: u64,
}

impl MlaConfig {
    /// Per-head query/key dimension, `qk_nope_head_dim + qk_rope_head_dim`.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", §7; HF `NemotronHMamba2Mixer`):
/// `num_heads × head_dim` inner channels, `n_groups` groups of B/C of `state_size`, a depthwise
/// causal conv of `conv_kernel` taps over x, B and C, and the SSD scan in chunks of `chunk_size`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MambaConfig {
    /// Mamba heads.
    pub num_heads: u64,
    /// Channels per head.
    pub head_dim: u64,
    /// SSM state size: the width of B and C per group.
    pub state_size: u64,
    /// Default: 8 (Nemotron-H).
    #[serde(default = "default_mamba_groups")]
    pub n_groups: u64,
    /// Default: 4.
    #[serde(default = "default_conv_kernel")]
    pub conv_kernel: u64,
    /// SSD chunk length. Default: 128 (Nemotron-H `chunk_size`).
    #[serde(default = "default_chunk_size")]
    pub chunk_size: u64,
}

fn default_mamba_groups() -> u64 {
    8
}
fn default_conv_kernel() -> u64 {
    4
}
fn default_chunk_size() -> u64 {
    128
}

impl MambaConfig {
    /// Inner width `d_inner = num_heads · head_dim` (= `expand · hidden_size`).
    pub fn d_inner(&self) -> u64 {
        self.num_heads * self.head_dim
    }

    /// Channels of the causal conv: x, B and C, `d_inner + 2·n_groups·state_size`.
    pub fn conv_dim(&self) -> u64 {
        self.d_inner() + 2 * self.n_groups * self.state_size
    }

    /// Output columns of `in_proj`: z, x, B, C and dt, `2·d_inner + 2·n_groups·state_size + num_heads`.
    pub fn in_proj_dim(&self) -> u64 {
        2 * self.d_inner() + 2 * self.n_groups * self.state_size + self.num_heads
    }
}

/// Attention type of a layer (HF `layer_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttentionType {
    /// Each query attends to every earlier key.
    FullAttention,
    /// Each query attends to the last `sliding_window` keys.
    SlidingAttention,
}

/// How token positions enter the model (Megatron `--position-embedding-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PositionEmbedding {
    /// A learned position table added to the token embedding (GPT-3; Megatron's default). Its
    /// add is part of the embedding op.
    #[default]
    LearnedAbsolute,
    /// Rotary embeddings applied to every query and key head before attention (Llama, Mixtral,
    /// Qwen, DeepSeek's RoPE dimensions, GPT-OSS, Nemotron): one fused kernel over the queries and
    /// keys forward and one over their gradients backward (Megatron-Core `apply_rope_fusion`,
    /// Transformer Engine's `fused_apply_rotary_pos_emb`).
    Rope,
    /// None (Nemotron-H: its Mamba layers carry the positions).
    None,
}

impl PositionEmbedding {
    fn is_learned(&self) -> bool {
        *self == PositionEmbedding::LearnedAbsolute
    }
}

/// What one layer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Attention then a dense MLP, each pre-normed (a standard decoder layer).
    Dense,
    /// Attention then an MoE block.
    Moe,
    /// Hybrid models: a Mamba-2 mixer alone (pattern `M`).
    Mamba,
    /// Hybrid models: attention alone (pattern `*`).
    Attention,
    /// Hybrid models: a dense MLP alone (pattern `-`).
    Mlp,
    /// Hybrid models: an MoE block alone (pattern `E`).
    MoeMlp,
}

impl LayerKind {
    /// Whether the layer has an attention block.
    pub fn has_attention(self) -> bool {
        matches!(self, LayerKind::Dense | LayerKind::Moe | LayerKind::Attention)
    }
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Largest `hidden_size` accepted (see [`ModelConfig::validate`]).
pub const MAX_HIDDEN_SIZE: u64 = 1 << 20;
/// Largest `num_hidden_layers` accepted: 16384, a hundred times today's deepest models, and
/// small enough that a model's per-layer tables stay small.
pub const MAX_LAYERS: u64 = 1 << 14;
/// Largest `num_attention_heads` / `num_key_value_heads` accepted.
pub const MAX_HEADS: u64 = 1 << 16;
/// Largest `intermediate_size` / `moe_intermediate_size` accepted.
pub const MAX_FFN_SIZE: u64 = 1 << 22;
/// Largest `vocab_size` accepted.
pub const MAX_VOCAB_SIZE: u64 = 1 << 26;
/// Largest `num_experts` / `num_shared_experts` accepted.
pub const MAX_EXPERTS: u64 = 1 << 16;
/// Largest `num_nextn_predict_layers` accepted.
pub const MAX_MTP_LAYERS: u64 = 1 << 10;
/// Largest head dimension (and MLA rank, Mamba size) accepted.
pub const MAX_HEAD_DIM: u64 = 1 << 16;
/// Largest total parameter count accepted: 10^14 (100 trillion).
pub const MAX_PARAMS: u64 = 100_000_000_000_000;

/// A decoder-only transformer, in Hugging Face terms.
///
/// The fields after `first_k_dense_layers` describe newer architectures; at their defaults (absent
/// from serialized output) the model is the plain one above.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Name in reports.
    pub name: String,
    /// Model width: elements of a token's hidden state.
    pub hidden_size: u64,
    /// Transformer layers.
    pub num_hidden_layers: u64,
    /// Query heads per attention layer.
    pub num_attention_heads: u64,
    /// Grouped-query attention groups (= `num_attention_heads` for MHA).
    pub num_key_value_heads: u64,
    /// FFN size of dense layers.
    pub intermediate_size: u64,
    /// Vocabulary size, in tokens.
    pub vocab_size: u64,
    /// SwiGLU (3 matrices) instead of GeLU (2).
    pub gated_mlp: bool,
    /// Output layer shares the input embedding matrix.
    pub tie_word_embeddings: bool,
    /// Routed experts per MoE layer; 0 = dense model.
    pub num_experts: u64,
    /// Experts each token is routed to (top-k).
    pub num_experts_per_tok: u64,
    /// FFN size of one expert.
    pub moe_intermediate_size: u64,
    /// Shared (always active) experts per MoE layer, each of `moe_intermediate_size`.
    pub num_shared_experts: u64,
    /// The first k layers are dense (DeepSeek `first_k_dense_replace`).
    pub first_k_dense_layers: u64,
    /// Per-head dimension when the config sets it (Qwen3 128, GPT-OSS 64); `None` = `hidden_size /
    /// num_attention_heads`.
    #[serde(default, rename = "head_dim", skip_serializing_if = "Option::is_none")]
    pub explicit_head_dim: Option<u64>,
    /// Biases on the Q, K, V and output projections (GPT-OSS).
    #[serde(default, skip_serializing_if = "is_false")]
    pub attention_bias: bool,
    /// Biases on the MLP / expert projections and the router (GPT-OSS).
    #[serde(default, skip_serializing_if = "is_false")]
    pub mlp_bias: bool,
    /// A learned sink logit per head and layer (GPT-OSS).
    #[serde(default, skip_serializing_if = "is_false")]
    pub attention_sinks: bool,
    /// The gated activation's inputs are clamped to this value (GPT-OSS 7.0: config.json
    /// `swiglu_limit`; Megatron-Core `activation_func_clamp_value`). Only its presence costs time:
    /// Megatron-Core clamps the two halves in separate kernels before its fused activation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_limit: Option<f64>,
    /// RMSNorm over each query and key head (Qwen3): `2·head_dim` weights per layer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_norm: bool,
    /// Window of sliding-attention layers, in tokens (0 = none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sliding_window: u64,
    /// Attention type per layer; a shorter list repeats (GPT-OSS: `[sliding_attention,
    /// full_attention]`). Empty = all full.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_types: Vec<AttentionType>,
    /// Multi-head latent attention in place of GQA (DeepSeek-V2/V3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<MlaConfig>,
    /// Hybrid models: one character per layer, `M` Mamba-2, `*` attention, `-` MLP, `E` MoE
    /// (Nemotron-H `hybrid_override_pattern`). `None` = every layer is attention + MLP/MoE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid_override_pattern: Option<String>,
    /// The Mamba-2 mixer of the `M` layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<MambaConfig>,
    /// How token positions enter the model: `learned_absolute` (default), `rope` or `none`.
    #[serde(default, skip_serializing_if = "PositionEmbedding::is_learned")]
    pub position_embedding_type: PositionEmbedding,
    /// Multi-token-prediction modules of the checkpoint (DeepSeek-V3 `num_nextn_predict_layers`).
    /// Counted by [`ModelConfig::mtp_param_count`], not by [`ModelConfig::param_count`]. Training
    /// runs them only when `training.mtp_num_layers` says so (Megatron-Core `--mtp-num-layers`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub num_nextn_predict_layers: u64,
    /// Hybrid models: the layers of one multi-token-prediction block, in the characters of
    /// `hybrid_override_pattern` (Nemotron 3 Super `"*E"`: attention, then an MoE block; Hugging
    /// Face and Megatron-Core `mtp_hybrid_override_pattern`). `None`: a block is one decoder layer
    /// like the model's last (DeepSeek-V3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_hybrid_override_pattern: Option<String>,
    /// LatentMoE (Nemotron 3 Super): the routed experts work in a latent space of this width
    /// behind a `hidden -> latent` projection before the dispatch and a `latent -> hidden` one
    /// after the combine, so expert GEMMs, permutes and the EP all-to-all carry latent-wide
    /// tokens; the router and the shared experts keep the hidden size (NeMo Automodel
    /// `components/moe/layers.py` `fc1_latent_proj`/`fc2_latent_proj`). 0 = none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_latent_size: u64,
    /// Group-limited routing (DeepSeek-V3 `n_group`; Megatron-Core `--moe-router-num-groups`): the
    /// routed experts form this many groups of consecutive experts, and a token's experts come
    /// from [`ModelConfig::moe_router_group_topk`] of them. 0 = no groups. It changes only what a
    /// deduplicating (`flex`) dispatcher sends: fewer destination ranks and servers per token.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_router_num_groups: u64,
    /// Groups a token's experts come from (DeepSeek-V3 `topk_group`; Megatron-Core
    /// `--moe-router-group-topk`). Used with `moe_router_num_groups`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_router_group_topk: u64,
}

impl ModelConfig {
    /// Per-head dimension: `head_dim` when set, else `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> u64 {
        self.explicit_head_dim
            .unwrap_or_else(|| self.hidden_size / self.num_attention_heads.max(1))
    }

    /// What layer `layer` (0-based) holds.
    pub fn layer_kind(&self, layer: u64) -> LayerKind {
        // Multi-token-prediction blocks follow the decoder: layer `num_hidden_layers + i` is
        // their `i`-th layer (Megatron-Core numbers them after the decoder's too).
        if layer >= self.num_hidden_layers {
            return match &self.mtp_hybrid_override_pattern {
                Some(p) if !p.is_empty() => Self::pattern_kind(p.as_bytes()[((layer - self.num_hidden_layers) % p.len() as u64) as usize]),
                _ => self.layer_kind(self.num_hidden_layers.saturating_sub(1)),
            };
        }
        if let Some(p) = &self.hybrid_override_pattern {
            return p.as_bytes().get(layer as usize).map_or(LayerKind::Mlp, |&c| Self::pattern_kind(c));
        }
        if self.num_experts > 0 && layer >= self.first_k_dense_layers {
            LayerKind::Moe
        } else {
            LayerKind::Dense
        }
    }

    /// A hybrid pattern's characters are layer kinds, and MoE layers need experts.
    fn check_pattern(&self, field: &str, p: &str, what: &str) -> Result<(), WorkloadError> {
        if let Some(c) = p.chars().find(|c| !matches!(c, 'M' | '*' | '-' | 'E')) {
            return Err(WorkloadError::invalid(
                field,
                format!("unknown layer {c:?}; valid: M (Mamba-2), * (attention), - (MLP), E (MoE)"),
            ));
        }
        if p.contains('E') && self.num_experts == 0 {
            return Err(WorkloadError::invalid(
                "model.num_experts",
                format!("{what} has MoE layers (E); set num_experts"),
            ));
        }
        Ok(())
    }

    fn pattern_kind(c: u8) -> LayerKind {
        match c {
            b'M' => LayerKind::Mamba,
            b'*' => LayerKind::Attention,
            b'E' => LayerKind::MoeMlp,
            _ => LayerKind::Mlp,
        }
    }

    /// Layers of one multi-token-prediction block: the length of `mtp_hybrid_override_pattern`,
    /// else 1. The block's `i`-th layer is layer `num_hidden_layers + i` ([`Self::layer_kind`]).
    pub fn mtp_block_layers(&self) -> u64 {
        self.mtp_hybrid_override_pattern.as_ref().map_or(1, |p| p.len() as u64).max(1)
    }

    /// Attention type of `layer`.
    pub fn attention_type(&self, layer: u64) -> AttentionType {
        if self.sliding_window == 0 || self.layer_types.is_empty() {
            return AttentionType::FullAttention;
        }
        self.layer_types[(layer % self.layer_types.len() as u64) as usize]
    }

    /// Keys each query of `layer` attends to out of a sequence of `seq`: the window for sliding
    /// layers, else `seq`.
    pub fn attended_keys(&self, layer: u64, seq: u64) -> u64 {
        match self.attention_type(layer) {
            AttentionType::SlidingAttention => self.sliding_window.min(seq),
            AttentionType::FullAttention => seq,
        }
    }

    /// Whether `layer` (0-based) has an MoE block.
    pub fn is_moe(&self, layer: u64) -> bool {
        matches!(self.layer_kind(layer), LayerKind::Moe | LayerKind::MoeMlp)
    }

    /// Number of MoE layers.
    pub fn moe_layers(&self) -> u64 {
        if self.num_experts == 0 {
            0
        } else if self.hybrid_override_pattern.is_some() {
            (0..self.num_hidden_layers).filter(|&l| self.is_moe(l)).count() as u64
        } else {
            self.num_hidden_layers.saturating_sub(self.first_k_dense_layers)
        }
    }

    /// Weight matrices per MLP: 3 gated, 2 plain.
    pub fn mlp_matrices(&self) -> u64 {
        if self.gated_mlp { 3 } else { 2 }
    }

    /// Query/key and value head dimensions used by core attention: `(qk, v)`.
    pub fn attention_head_dims(&self) -> (u64, u64) {
        match &self.mla {
            Some(mla) => (mla.qk_head_dim(), mla.v_head_dim),
            None => (self.head_dim(), self.head_dim()),
        }
    }

    /// Attention parameters of one layer, split into those Megatron shards over TP (by heads) and
    /// those every TP rank holds. GQA: QKV `h × (a + 2·kv)·d` and output `a·d × h` sharded; the
    /// output bias and the q/k norms replicated. MLA: the down-projections `h × q_lora` and
    /// `h × (kv_lora + rope)` with their norms replicated (Megatron-Core `MLASelfAttention` builds
    /// them duplicated), the up-projections `q_lora × a·qk_d`, `kv_lora × a·(nope + v)` and the
    /// output `a·v × h` sharded.
    pub fn attention_params_split(&self) -> (u64, u64) {
        let h = self.hidden_size;
        let a = self.num_attention_heads;
        let sinks = if self.attention_sinks { a } else { 0 };
        if let Some(mla) = &self.mla {
            let q = if mla.q_lora_rank > 0 {
                (h * mla.q_lora_rank + mla.q_lora_rank, mla.q_lora_rank * a * mla.qk_head_dim())
            } else {
                (0, h * a * mla.qk_head_dim())
            };
            let kv_down = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank;
            let kv_up = mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim);
            let out = a * mla.v_head_dim * h;
            return (q.1 + kv_up + out + sinks, q.0 + kv_down);
        }
        let d = self.head_dim();
        let qkv_n = (a + 2 * self.num_key_value_heads) * d;
        let mut sharded = h * qkv_n + a * d * h + sinks;
        let mut replicated = 0;
        if self.attention_bias {
            sharded += qkv_n;
            replicated += h;
        }
        if self.qk_norm {
            replicated += 2 * d;
        }
        (sharded, replicated)
    }

    /// Attention parameters of one layer (see [`ModelConfig::attention_params_split`]).
    pub fn attention_params(&self) -> u64 {
        let (s, r) = self.attention_params_split();
        s + r
    }

    /// Parameters of one dense MLP with FFN size `ffn` (with `mlp_bias`, the fc1 and fc2 biases).
    pub fn mlp_params(&self, ffn: u64) -> u64 {
        self.mlp_params_over(self.hidden_size, ffn)
    }

    /// Parameters of an MLP of FFN size `ffn` taking and returning `width`-wide tokens.
    fn mlp_params_over(&self, width: u64, ffn: u64) -> u64 {
        if ffn == 0 {
            return 0;
        }
        let bias = if self.mlp_bias {
            ffn * (self.mlp_matrices() - 1) + width
        } else {
            0
        };
        self.mlp_matrices() * width * ffn + bias
    }

    /// Router parameters of one MoE layer: `h × E` (+ `E` biases).
    pub fn router_params(&self) -> u64 {
        self.hidden_size * self.num_experts + if self.mlp_bias { self.num_experts } else { 0 }
    }

    /// Parameters of one Mamba-2 mixer: in_proj, conv weights and biases, `A_log`, `D`,
    /// `dt_bias` (one per head each), the gated RMSNorm over `d_inner`, and out_proj. All are
    /// sharded over TP by heads (Megatron-Core `MambaMixer`). 0 without a Mamba config.
    pub fn mamba_params(&self) -> u64 {
        let Some(mb) = &self.mamba else { return 0 };
        let h = self.hidden_size;
        h * mb.in_proj_dim() + mb.conv_dim() * (mb.conv_kernel + 1) + 3 * mb.num_heads + mb.d_inner() + mb.d_inner() * h
    }

    /// FFN size of the shared-expert MLP (0 when there are none).
    pub fn shared_ffn(&self) -> u64 {
        self.num_shared_experts * self.moe_intermediate_size
    }

    /// Width of the tokens the routed experts take and return: `moe_latent_size` with LatentMoE,
    /// else the hidden size.
    pub fn expert_width(&self) -> u64 {
        if self.moe_latent_size > 0 {
            self.moe_latent_size
        } else {
            self.hidden_size
        }
    }

    /// Parameters of one routed expert: an MLP of FFN size `moe_intermediate_size` over
    /// [`ModelConfig::expert_width`] (with `mlp_bias`, its fc1 and fc2 biases).
    pub fn expert_params(&self) -> u64 {
        self.mlp_params_over(self.expert_width(), self.moe_intermediate_size)
    }

    /// Parameters of LatentMoE's two projections, `hidden -> latent` and `latent -> hidden`
    /// (with `mlp_bias`, their biases); 0 without a latent space.
    pub fn latent_proj_params(&self) -> u64 {
        let (h, l) = (self.hidden_size, self.moe_latent_size);
        if l == 0 {
            return 0;
        }
        2 * h * l + if self.mlp_bias { h + l } else { 0 }
    }

    /// Parameters of an MoE block with `experts` routed experts counted.
    fn moe_block_params(&self, experts: u64) -> u64 {
        self.router_params() + experts * self.expert_params() + self.mlp_params(self.shared_ffn()) + self.latent_proj_params()
    }

    /// Parameters of one layer with `experts` routed experts counted (all of them for the total,
    /// top-k for the active count). Includes the norm weight vectors (one per block).
    fn layer_params(&self, layer: u64, experts: u64) -> u64 {
        let h = self.hidden_size;
        match self.layer_kind(layer) {
            LayerKind::Dense => self.attention_params() + self.mlp_params(self.intermediate_size) + 2 * h,
            LayerKind::Moe => self.attention_params() + self.moe_block_params(experts) + 2 * h,
            LayerKind::Mamba => self.mamba_params() + h,
            LayerKind::Attention => self.attention_params() + h,
            LayerKind::Mlp => self.mlp_params(self.intermediate_size) + h,
            LayerKind::MoeMlp => self.moe_block_params(experts) + h,
        }
    }

    fn params(&self, experts: u64) -> u64 {
        let h = self.hidden_size;
        let embedding = self.vocab_size * h;
        let head = if self.tie_word_embeddings { 0 } else { self.vocab_size * h };
        let layers: u64 = (0..self.num_hidden_layers).map(|l| self.layer_params(l, experts)).sum();
        embedding + layers + h + head
    }

    /// Total parameters (embedding, layers, final norm, untied output layer), unpadded vocabulary.
    pub fn param_count(&self) -> u64 {
        self.params(self.num_experts)
    }

    /// Parameters one token touches: routed experts counted `num_experts_per_tok` times.
    pub fn active_param_count(&self) -> u64 {
        self.params(self.num_experts_per_tok)
    }

    /// Parameters of the checkpoint's multi-token-prediction modules
    /// (`num_nextn_predict_layers` of [`Self::mtp_block_param_count`]).
    pub fn mtp_param_count(&self) -> u64 {
        self.num_nextn_predict_layers * self.mtp_block_param_count()
    }

    /// Parameters of one multi-token-prediction module (DeepSeek-V3 §2.2, Megatron-Core
    /// `MultiTokenPredictionLayer`): two norms (`2·h`), the `2h × h` projection of the
    /// concatenated embedding and hidden state, its block's layers (one like the last decoder
    /// layer, or `mtp_hybrid_override_pattern`'s) and its output norm; the embedding and output
    /// head are shared with the model.
    pub fn mtp_block_param_count(&self) -> u64 {
        let h = self.hidden_size;
        let l = self.num_hidden_layers;
        let block: u64 = (l..l + self.mtp_block_layers())
            .map(|i| self.layer_params(i, self.num_experts))
            .sum();
        2 * h + 2 * h * h + block + h
    }

    /// Checks the architecture is self-consistent.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] naming the `model.*` field: a zero size, heads not dividing the
    /// hidden size (without an explicit `head_dim`), kv heads not dividing heads, top-k above the
    /// expert count, a hybrid pattern of the wrong length or with unknown characters, Mamba layers
    /// without a `mamba` section.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        for (field, v) in [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
        ] {
            if v == 0 {
                return Err(WorkloadError::invalid(format!("model.{field}"), "must be at least 1"));
            }
        }
        if self.explicit_head_dim == Some(0) {
            return Err(WorkloadError::invalid("model.head_dim", "must be at least 1"));
        }
        self.check_bounds()?;
        if self.explicit_head_dim.is_none() && self.mla.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(WorkloadError::invalid(
                "model.num_attention_heads",
                format!(
                    "num_attention_heads={} does not divide hidden_size={}; set model.head_dim if the model's heads are not hidden_size/heads wide",
                    self.num_attention_heads, self.hidden_size
                ),
            ));
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(WorkloadError::invalid(
                "model.num_key_value_heads",
                format!(
                    "num_key_value_heads={} does not divide num_attention_heads={}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if self.num_experts > 0 {
            if self.num_experts_per_tok == 0 || self.num_experts_per_tok > self.num_experts {
                return Err(WorkloadError::invalid(
                    "model.num_experts_per_tok",
                    format!(
                        "must be between 1 and num_experts={}, got {}",
                        self.num_experts, self.num_experts_per_tok
                    ),
                ));
            }
            if self.moe_intermediate_size == 0 {
                return Err(WorkloadError::invalid(
                    "model.moe_intermediate_size",
                    "must be at least 1 for an MoE model",
                ));
            }
            if self.first_k_dense_layers > self.num_hidden_layers {
                return Err(WorkloadError::invalid(
                    "model.first_k_dense_layers",
                    format!("must be at most num_hidden_layers={}", self.num_hidden_layers),
                ));
            }
        } else if self.moe_latent_size > 0 {
            return Err(WorkloadError::invalid(
                "model.moe_latent_size",
                "is a latent space of routed experts: set num_experts too, or remove moe_latent_size",
            ));
        }
        let (groups, gtopk) = (self.moe_router_num_groups, self.moe_router_group_topk);
        if groups > 0 || gtopk > 0 {
            if self.num_experts == 0 || groups == 0 || !self.num_experts.is_multiple_of(groups) {
                return Err(WorkloadError::invalid(
                    "model.moe_router_num_groups",
                    format!(
                        "must divide num_experts={} into groups (with moe_router_group_topk set), got {groups}",
                        self.num_experts
                    ),
                ));
            }
            if gtopk == 0 || gtopk > groups || gtopk * (self.num_experts / groups) < self.num_experts_per_tok {
                return Err(WorkloadError::invalid(
                    "model.moe_router_group_topk",
                    format!(
                        "must be 1..={groups} groups holding at least num_experts_per_tok={} experts, got {gtopk}",
                        self.num_experts_per_tok
                    ),
                ));
            }
        }
        if let Some(mla) = &self.mla {
            for (field, v) in [
                ("kv_lora_rank", mla.kv_lora_rank),
                ("qk_nope_head_dim", mla.qk_nope_head_dim),
                ("v_head_dim", mla.v_head_dim),
            ] {
                if v == 0 {
                    return Err(WorkloadError::invalid(format!("model.mla.{field}"), "must be at least 1"));
                }
            }
        }
        if let Some(limit) = self.swiglu_limit {
            if !(limit.is_finite() && limit > 0.0) {
                return Err(WorkloadError::invalid(
                    "model.swiglu_limit",
                    format!("{limit} must be a finite number > 0"),
                ));
            }
            if !self.gated_mlp {
                return Err(WorkloadError::invalid(
                    "model.swiglu_limit",
                    "clamps a gated activation's inputs: set gated_mlp: true, or remove swiglu_limit",
                ));
            }
        }
        if let Some(p) = &self.mtp_hybrid_override_pattern {
            if self.hybrid_override_pattern.is_none() {
                return Err(WorkloadError::invalid(
                    "model.mtp_hybrid_override_pattern",
                    "is for hybrid models; set hybrid_override_pattern, or remove it (an MTP block is then one layer like the last)",
                ));
            }
            if p.is_empty() || p.len() > 64 {
                return Err(WorkloadError::invalid(
                    "model.mtp_hybrid_override_pattern",
                    "give 1 to 64 layers, e.g. \"*E\"",
                ));
            }
            self.check_pattern("model.mtp_hybrid_override_pattern", p, "the MTP pattern")?;
            if p.contains('M') && self.mamba.is_none() {
                return Err(WorkloadError::invalid(
                    "model.mamba",
                    "the MTP pattern has Mamba layers (M); give mamba",
                ));
            }
        }
        if self.sliding_window > 0 && self.layer_types.is_empty() {
            return Err(WorkloadError::invalid(
                "model.layer_types",
                "sliding_window is set but no layer is sliding; give e.g. [sliding_attention, full_attention]",
            ));
        }
        if let Some(p) = &self.hybrid_override_pattern {
            if p.len() as u64 != self.num_hidden_layers {
                return Err(WorkloadError::invalid(
                    "model.hybrid_override_pattern",
                    format!("has {} characters, num_hidden_layers={}", p.len(), self.num_hidden_layers),
                ));
            }
            self.check_pattern("model.hybrid_override_pattern", p, "the pattern")?;
            match &self.mamba {
                None if p.contains('M') => {
                    return Err(WorkloadError::invalid(
                        "model.mamba",
                        "the pattern has Mamba layers (M); give mamba: { num_heads, head_dim, state_size }",
                    ));
                }
                Some(mb) => {
                    for (field, v) in [
                        ("num_heads", mb.num_heads),
                        ("head_dim", mb.head_dim),
                        ("state_size", mb.state_size),
                        ("n_groups", mb.n_groups),
                        ("chunk_size", mb.chunk_size),
                    ] {
                        if v == 0 {
                            return Err(WorkloadError::invalid(format!("model.mamba.{field}"), "must be at least 1"));
                        }
                    }
                    if !mb.num_heads.is_multiple_of(mb.n_groups) {
                        return Err(WorkloadError::invalid(
                            "model.mamba.n_groups",
                            format!("n_groups={} does not divide num_heads={}", mb.n_groups, mb.num_heads),
                        ));
                    }
                }
                None => {}
            }
        }
        let total = self.checked_param_count().filter(|&p| p <= MAX_PARAMS);
        if total.is_none() {
            return Err(WorkloadError::invalid(
                "model",
                format!(
                    "the model has more than {MAX_PARAMS} parameters (100 trillion); check hidden_size, num_hidden_layers, intermediate_size, vocab_size and num_experts"
                ),
            ));
        }
        Ok(())
    }

    /// Upper bounds on every size, so that the parameter, FLOP and memory arithmetic on them
    /// cannot overflow `u64` (release builds would wrap silently) and a huge layer count is
    /// refused before anything is built for it. Each bound is far above any published model.
    fn check_bounds(&self) -> Result<(), WorkloadError> {
        let mut fields = vec![
            ("hidden_size", self.hidden_size, MAX_HIDDEN_SIZE),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_key_value_heads, MAX_HEADS),
            ("intermediate_size", self.intermediate_size, MAX_FFN_SIZE),
            ("moe_intermediate_size", self.moe_intermediate_size, MAX_FFN_SIZE),
            ("vocab_size", self.vocab_size, MAX_VOCAB_SIZE),
            ("num_experts", self.num_experts, MAX_EXPERTS),
            ("num_shared_experts", self.num_shared_experts, MAX_EXPERTS),
            ("num_nextn_predict_layers", self.num_nextn_predict_layers, MAX_MTP_LAYERS),
            ("moe_latent_size", self.moe_latent_size, MAX_HIDDEN_SIZE),
            ("head_dim", self.explicit_head_dim.unwrap_or(1), MAX_HEAD_DIM),
        ];
        if let Some(m) = &self.mla {
            fields.extend([
                ("mla.q_lora_rank", m.q_lora_rank, MAX_HEAD_DIM),
                ("mla.kv_lora_rank", m.kv_lora_rank, MAX_HEAD_DIM),
                ("mla.qk_nope_head_dim", m.qk_nope_head_dim, MAX_HEAD_DIM),
                ("mla.qk_rope_head_dim", m.qk_rope_head_dim, MAX_HEAD_DIM),
                ("mla.v_head_dim", m.v_head_dim, MAX_HEAD_DIM),
            ]);
        }
        if let Some(m) = &self.mamba {
            fields.extend([
                ("mamba.num_heads", m.num_heads, MAX_HEAD_DIM),
                ("mamba.head_dim", m.head_dim, MAX_HEAD_DIM),
                ("mamba.state_size", m.state_size, MAX_HEAD_DIM),
                ("mamba.n_groups", m.n_groups, MAX_HEAD_DIM),
                ("mamba.conv_kernel", m.conv_kernel, MAX_HEAD_DIM),
                ("mamba.chunk_size", m.chunk_size, MAX_HEAD_DIM),
            ]);
        }
        for (field, v, max) in fields {
            if v > max {
                return Err(WorkloadError::invalid(
                    format!("model.{field}"),
                    format!("{v} is beyond what llmsim models; valid: at most {max}"),
                ));
            }
        }
        Ok(())
    }

    /// [`ModelConfig::param_count`] with checked sums; `None` on overflow. Within the bounds of
    /// `check_bounds` no single layer's count overflows, so only the sums need checking.
    fn checked_param_count(&self) -> Option<u64> {
        let h = self.hidden_size;
        let embedding = self.vocab_size.checked_mul(h)?;
        let head = if self.tie_word_embeddings { 0 } else { embedding };
        let mut total = embedding.checked_add(head)?.checked_add(h)?;
        for l in 0..self.num_hidden_layers {
            total = total.checked_add(self.layer_params(l, self.num_experts))?;
        }
        Some(total)
    }

    #[allow(clippy::too_many_arguments)]
    fn dense(name: &str, h: u64, layers: u64, heads: u64, kv: u64, ffn: u64, vocab: u64, gated: bool) -> Self {
        ModelConfig {
            name: name.to_string(),
            hidden_size: h,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            intermediate_size: ffn,
            vocab_size: vocab,
            gated_mlp: gated,
            tie_word_embeddings: false,
            num_experts: 0,
            num_experts_per_tok: 0,
            moe_intermediate_size: 0,
            num_shared_experts: 0,
            first_k_dense_layers: 0,
            explicit_head_dim: None,
            attention_bias: false,
            mlp_bias: false,
            attention_sinks: false,
            swiglu_limit: None,
            qk_norm: false,
            sliding_window: 0,
            layer_types: Vec::new(),
            mla: None,
            hybrid_override_pattern: None,
            mtp_hybrid_override_pattern: None,
            mamba: None,
            position_embedding_type: PositionEmbedding::Rope,
            num_nextn_predict_layers: 0,
            moe_latent_size: 0,
            moe_router_num_groups: 0,
            moe_router_group_topk: 0,
        }
    }
}

struct Preset {
    name: &'static str,
    aliases: &'static [&'static str],
    /// Published parameter count (total), for the documentation and the tests.
    published_params: f64,
    build: fn() -> ModelConfig,
}

/// GPT-3 (Brown et al. 2020, Table 2.1; SimAI Table 3): h, layers, heads, FFN = 4h, GPT-2 BPE vocab 50257, GeLU.
fn gpt3(name: &str, h: u64, layers: u64, heads: u64) -> ModelConfig {
    ModelConfig {
        position_embedding_type: PositionEmbedding::LearnedAbsolute,
        ..ModelConfig::dense(name, h, layers, heads, heads, 4 * h, 50257, false)
    }
}

const PRESETS: &[Preset] = &[
    Preset {
        name: "gpt3-6.7b",
        aliases: &["gpt-3 6.7b", "gpt3-7b"],
        published_params: 6.7e9,
        build: || gpt3("gpt3-6.7b", 4096, 32, 32),
    },
    Preset {
        name: "gpt3-13b",
        aliases: &["gpt-3 13b"],
        published_params: 13.0e9,
        build: || gpt3("gpt3-13b", 5120, 40, 40),
    },
    Preset {
        name: "gpt3-175b",
        aliases: &["gpt-3 175b", "gpt3"],
        published_params: 175.0e9,
        build: || gpt3("gpt3-175b", 12288, 96, 96),
    },
    // LLaMA (Touvron et al. 2023, Table 2; HF huggyllama/llama-7b config.json): SwiGLU, vocab 32000.
    Preset {
        name: "llama-7b",
        aliases: &["llama 7b", "llama1-7b"],
        published_params: 6.7e9,
        build: || ModelConfig::dense("llama-7b", 4096, 32, 32, 32, 11008, 32000, true),
    },
    // LLaMA 65B: FFN 22016 per huggyllama/llama-65b config.json. (SimAI Table 3 lists 28672, which is
    // Llama-3 70B's FFN size; the 65.2B parameter count in the same row matches 22016.)
    Preset {
        name: "llama-65b",
        aliases: &["llama 65b", "llama1-65b"],
        published_params: 65.2e9,
        build: || ModelConfig::dense("llama-65b", 8192, 80, 64, 64, 22016, 32000, true),
    },
    // Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3; meta-llama config.json):
    // GQA with 8 kv heads, vocab 128256, SwiGLU, untied embeddings.
    Preset {
        name: "llama3-8b",
        aliases: &["llama-3 8b", "llama3.1-8b", "llama-3.1 8b"],
        published_params: 8.03e9,
        build: || ModelConfig::dense("llama3-8b", 4096, 32, 32, 8, 14336, 128256, true),
    },
    Preset {
        name: "llama3-70b",
        aliases: &["llama-3 70b", "llama3.1-70b", "llama-3.1 70b"],
        published_params: 70.6e9,
        build: || ModelConfig::dense("llama3-70b", 8192, 80, 64, 8, 28672, 128256, true),
    },
    Preset {
        name: "llama3-405b",
        aliases: &["llama-3 405b", "llama3.1-405b", "llama-3.1 405b"],
        published_params: 405.8e9,
        build: || ModelConfig::dense("llama3-405b", 16384, 126, 128, 8, 53248, 128256, true),
    },
    // Llama 2 (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models",
    // Table 1; meta-llama/Llama-2-{7b,13b,70b}-hf config.json): SwiGLU, vocab 32000, untied; 70B
    // with GQA (8 kv heads). Published counts: the model pages' 6.74B, 13.0B and 69.0B.
    Preset {
        name: "llama2-7b",
        aliases: &["llama-2 7b", "llama-2-7b"],
        published_params: 6.74e9,
        build: || ModelConfig::dense("llama2-7b", 4096, 32, 32, 32, 11008, 32000, true),
    },
    Preset {
        name: "llama2-13b",
        aliases: &["llama-2 13b", "llama-2-13b"],
        published_params: 13.0e9,
        build: || ModelConfig::dense("llama2-13b", 5120, 40, 40, 40, 13824, 32000, true),
    },
    Preset {
        name: "llama2-70b",
        aliases: &["llama-2 70b", "llama-2-70b"],
        published_params: 69.0e9,
        build: || ModelConfig::dense("llama2-70b", 8192, 80, 64, 8, 28672, 32000, true),
    },
    // Llama 3.2 1B and 3B (meta-llama/Llama-3.2-1B and -3B config.json; model cards 1.23B and
    // 3.21B): Llama 3's vocabulary and GQA (8 kv heads), tied embeddings.
    Preset {
        name: "llama3.2-1b",
        aliases: &["llama-3.2 1b", "llama-3.2-1b"],
        published_params: 1.23e9,
        build: || ModelConfig {
            tie_word_embeddings: true,
            ..ModelConfig::dense("llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, true)
        },
    },
    Preset {
        name: "llama3.2-3b",
        aliases: &["llama-3.2 3b", "llama-3.2-3b"],
        published_params: 3.21e9,
        build: || ModelConfig {
            tie_word_embeddings: true,
            ..ModelConfig::dense("llama3.2-3b", 3072, 28, 24, 8, 8192, 128256, true)
        },
    },
    // Mistral 7B (Jiang et al. 2023, "Mistral 7B", Table 1; mistralai/Mistral-7B-v0.1 config.json):
    // GQA 8 kv heads, FFN 14336, vocab 32000, untied; 7.24B. (v0.1's 4,096-token sliding window
    // changes nothing at sequences up to 4,096 and is not set; v0.3 has none.)
    Preset {
        name: "mistral-7b",
        aliases: &["mistral 7b", "mistral-7b-v0.1", "mistral-7b-v0.3"],
        published_params: 7.24e9,
        build: || ModelConfig::dense("mistral-7b", 4096, 32, 32, 8, 14336, 32000, true),
    },
    // Mixtral 8x22B (Mistral AI 2024, "Cheaper, Better, Faster, Stronger": 141B total, 39B
    // active; mistralai/Mixtral-8x22B-v0.1 config.json): 56 layers, h 6144, 48 heads with 8 kv
    // heads, 8 experts top-2 of FFN 16384, vocab 32768.
    Preset {
        name: "mixtral-8x22b",
        aliases: &["mixtral 8x22b"],
        published_params: 141.0e9,
        build: || ModelConfig {
            num_experts: 8,
            num_experts_per_tok: 2,
            moe_intermediate_size: 16384,
            ..ModelConfig::dense("mixtral-8x22b", 6144, 56, 48, 8, 16384, 32768, true)
        },
    },
    // Qwen2.5 (Qwen Team 2024, "Qwen2.5 Technical Report", Table 1; Qwen/Qwen2.5-7B and -72B
    // config.json): GQA, biases on the q/k/v projections, untied, vocab 152064. 7.61B and 72.7B.
    Preset {
        name: "qwen2.5-7b",
        aliases: &["qwen2.5 7b", "qwen-2.5-7b"],
        published_params: 7.61e9,
        build: || ModelConfig {
            attention_bias: true,
            ..ModelConfig::dense("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, true)
        },
    },
    Preset {
        name: "qwen2.5-72b",
        aliases: &["qwen2.5 72b", "qwen-2.5-72b"],
        published_params: 72.7e9,
        build: || ModelConfig {
            attention_bias: true,
            ..ModelConfig::dense("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064, true)
        },
    },
    // Qwen3 dense (Qwen Team 2025, "Qwen3 Technical Report", Table 1; Qwen/Qwen3-8B and -32B
    // config.json): head dim 128 set explicitly, q/k RMSNorm, GQA 8 kv heads, untied, vocab
    // 151936. 8.2B and 32.8B.
    Preset {
        name: "qwen3-8b",
        aliases: &["qwen3 8b"],
        published_params: 8.2e9,
        build: || ModelConfig {
            explicit_head_dim: Some(128),
            qk_norm: true,
            ..ModelConfig::dense("qwen3-8b", 4096, 36, 32, 8, 12288, 151936, true)
        },
    },
    Preset {
        name: "qwen3-32b",
        aliases: &["qwen3 32b"],
        published_params: 32.8e9,
        build: || ModelConfig {
            explicit_head_dim: Some(128),
            qk_norm: true,
            ..ModelConfig::dense("qwen3-32b", 5120, 64, 64, 8, 25600, 151936, true)
        },
    },
    // Nemotron-4 340B (NVIDIA 2024, "Nemotron-4 340B Technical Report", Table 1): 96 layers,
    // h 18432, 96 heads with 8 kv heads, squared-ReLU MLP of 73728 (not gated), RoPE, vocab
    // 256000, untied.
    Preset {
        name: "nemotron-4-340b",
        aliases: &["nemotron4-340b", "nemotron-340b"],
        published_params: 340.0e9,
        build: || ModelConfig::dense("nemotron-4-340b", 18432, 96, 96, 8, 73728, 256000, false),
    },
    // Mixtral 8x7B (Jiang et al. 2024; mistralai/Mixtral-8x7B-v0.1 config.json): 8 experts, top-2,
    // expert FFN 14336, GQA 8 kv heads. 46.7B total, 12.9B active.
    Preset {
        name: "mixtral-8x7b",
        aliases: &["mixtral 8x7b", "mixtral"],
        published_params: 46.7e9,
        build: || ModelConfig {
            num_experts: 8,
            num_experts_per_tok: 2,
            moe_intermediate_size: 14336,
            ..ModelConfig::dense("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, true)
        },
    },
    // DeepSeek-MoE 16B (Dai et al. 2024, "DeepSeekMoE"; deepseek-ai/deepseek-moe-16b-base config.json):
    // standard MHA, 28 layers, 64 routed experts top-6, 2 shared, expert FFN 1408, first layer dense
    // (FFN 10944). 16.4B total, 2.8B active.
    Preset {
        name: "deepseek-moe-16b",
        aliases: &["deepseekmoe-16b", "deepseek moe 16b"],
        published_params: 16.4e9,
        build: || ModelConfig {
            num_experts: 64,
            num_experts_per_tok: 6,
            moe_intermediate_size: 1408,
            num_shared_experts: 2,
            first_k_dense_layers: 1,
            ..ModelConfig::dense("deepseek-moe-16b", 2048, 28, 16, 16, 10944, 102400, true)
        },
    },
    // DeepSeek-V2-Lite (DeepSeek-AI 2024, "DeepSeek-V2"; deepseek-ai/DeepSeek-V2-Lite config.json):
    // 27 layers, h 2048, 16 heads, 64 routed experts top-6, 2 shared, expert FFN 1408, first layer
    // dense (FFN 10944). Simplification: its multi-head latent attention (MLA, kv_lora_rank 512) is
    // modelled as standard MHA, which overcounts attention weights by ~3M per layer (~0.5 % of the
    // 15.7B total) and the KV activations; the MoE part, which dominates, is exact.
    Preset {
        name: "deepseek-v2-lite",
        aliases: &["deepseek v2 lite", "deepseek-v2-lite-16b"],
        published_params: 15.7e9,
        build: || ModelConfig {
            num_experts: 64,
            num_experts_per_tok: 6,
            moe_intermediate_size: 1408,
            num_shared_experts: 2,
            first_k_dense_layers: 1,
            ..ModelConfig::dense("deepseek-v2-lite", 2048, 27, 16, 16, 10944, 102400, true)
        },
    },
    // Qwen3-MoE (Qwen Team 2025, "Qwen3 Technical Report", Table 2; Qwen/Qwen3-30B-A3B and
    // Qwen/Qwen3-235B-A22B config.json): GQA with 4 kv heads and head_dim 128 set explicitly (not
    // h/heads), q/k RMSNorm, 128 routed experts top-8 (norm_topk_prob, which costs nothing here),
    // no shared experts, every layer MoE, untied embeddings, vocab 151936.
    Preset {
        name: "qwen3-30b-a3b",
        aliases: &["qwen3 30b a3b", "qwen3-30b", "qwen3-moe-30b"],
        published_params: 30.5e9,
        build: || qwen3_moe("qwen3-30b-a3b", 2048, 48, 32, 6144, 768),
    },
    Preset {
        name: "qwen3-235b-a22b",
        aliases: &["qwen3 235b a22b", "qwen3-235b", "qwen3-moe-235b"],
        published_params: 235.0e9,
        build: || qwen3_moe("qwen3-235b-a22b", 4096, 94, 64, 12288, 1536),
    },
    // GPT-OSS (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1; openai/gpt-oss-120b
    // and openai/gpt-oss-20b config.json): h 2880, 64 heads of 64 with 8 kv heads, biases on
    // attention and experts, attention sinks, layers alternating sliding (window 128, even layers)
    // and full attention, 128 (20B: 32) experts top-4 of SwiGLU FFN 2880, vocab 201088, untied.
    Preset {
        name: "gpt-oss-120b",
        aliases: &["gpt oss 120b", "gptoss-120b"],
        published_params: 116.83e9,
        build: || gpt_oss("gpt-oss-120b", 36, 128),
    },
    Preset {
        name: "gpt-oss-20b",
        aliases: &["gpt oss 20b", "gptoss-20b"],
        published_params: 20.91e9,
        build: || gpt_oss("gpt-oss-20b", 24, 32),
    },
    // DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §4.2; deepseek-ai/DeepSeek-V3
    // config.json): 61 layers, h 7168, MLA with 128 heads (q_lora 1536, kv_lora 512, nope 128,
    // rope 64, v 128), first 3 layers dense (FFN 18432), then 1 shared + 256 routed experts top-8
    // of FFN 2048, vocab 129280, untied. 671B without and 685B with its one MTP module.
    Preset {
        name: "deepseek-v3",
        aliases: &["deepseek v3", "deepseek-v3-671b", "deepseek-r1"],
        published_params: 671.0e9,
        build: || ModelConfig {
            num_experts: 256,
            num_experts_per_tok: 8,
            moe_intermediate_size: 2048,
            num_shared_experts: 1,
            first_k_dense_layers: 3,
            mla: Some(MlaConfig {
                q_lora_rank: 1536,
                kv_lora_rank: 512,
                qk_nope_head_dim: 128,
                qk_rope_head_dim: 64,
                v_head_dim: 128,
            }),
            num_nextn_predict_layers: 1,
            // config.json n_group 8, topk_group 4: a token's experts on at most 4 of 8 groups.
            moe_router_num_groups: 8,
            moe_router_group_topk: 4,
            ..ModelConfig::dense("deepseek-v3", 7168, 61, 128, 128, 18432, 129280, true)
        },
    },
    // Nemotron-H (NVIDIA 2025, "Nemotron-H: A Family of Accurate and Efficient Hybrid
    // Mamba-Transformer Models", arXiv:2504.03624, Table 1; nvidia/Nemotron-H-8B-Base-8K and
    // nvidia/Nemotron-H-56B-Base-8K config.json): Mamba-2 (M), self-attention (*) and squared-ReLU
    // MLP (-) layers per hybrid_override_pattern; GQA with 8 kv heads of 128; Mamba-2 with 8
    // groups, head dim 64, conv kernel 4; vocab 131072, untied. 8B: 24 M + 24 - + 4 *; 56B: 54 M
    // + 54 - + 10 *.
    Preset {
        name: "nemotron-h-8b",
        aliases: &["nemotron h 8b", "nemotron-h-8b-base"],
        published_params: 8.1e9,
        build: || {
            nemotron_h(
                "nemotron-h-8b",
                4096,
                32,
                21504,
                "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                128,
                128,
            )
        },
    },
    Preset {
        name: "nemotron-h-56b",
        aliases: &["nemotron h 56b", "nemotron-h-56b-base"],
        published_params: 56.0e9,
        build: || {
            nemotron_h(
                "nemotron-h-56b",
                8192,
                64,
                32768,
                concat!(
                    "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-",
                    "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
                ),
                256,
                256,
            )
        },
    },
    // Nemotron 3 Nano 30B-A3B (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json;
    // Megatron-Bridge v0.4.0 nemotron_h_provider.py Nemotron3NanoProvider): 52 layers per
    // hybrid_override_pattern, 23 Mamba-2 (M), 23 MoE (E), 6 attention (*); hidden 2688, 32 query
    // heads of 128 with 2 KV heads; Mamba-2 64 heads of 64, state 128, 8 groups, conv 4, chunk 128;
    // 128 routed experts top-6 of FFN 1856 plus one shared expert of 3712 (= 2 x 1856), squared
    // ReLU (not gated); no position embedding; vocab 131072, untied. The checkpoint holds 31.6B
    // parameters (the card rounds to "30B total, 3.5B active").
    Preset {
        name: "nemotron-3-nano-30b-a3b",
        aliases: &["nemotron-3-nano", "nemotron3-nano", "nemotron 3 nano 30b a3b"],
        published_params: 31.6e9,
        build: || {
            let pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
            ModelConfig {
                num_experts: 128,
                num_experts_per_tok: 6,
                moe_intermediate_size: 1856,
                num_shared_experts: 2,
                explicit_head_dim: Some(128),
                hybrid_override_pattern: Some(pattern.to_string()),
                mamba: Some(MambaConfig {
                    num_heads: 64,
                    head_dim: 64,
                    state_size: 128,
                    n_groups: 8,
                    conv_kernel: 4,
                    chunk_size: 128,
                }),
                position_embedding_type: PositionEmbedding::None,
                ..ModelConfig::dense("nemotron-3-nano-30b-a3b", 2688, pattern.len() as u64, 32, 2, 1856, 131072, false)
            }
        },
    },
];

fn qwen3_moe(name: &str, h: u64, layers: u64, heads: u64, ffn: u64, moe_ffn: u64) -> ModelConfig {
    ModelConfig {
        num_experts: 128,
        num_experts_per_tok: 8,
        moe_intermediate_size: moe_ffn,
        explicit_head_dim: Some(128),
        qk_norm: true,
        ..ModelConfig::dense(name, h, layers, heads, 4, ffn, 151936, true)
    }
}

fn gpt_oss(name: &str, layers: u64, experts: u64) -> ModelConfig {
    ModelConfig {
        num_experts: experts,
        num_experts_per_tok: 4,
        moe_intermediate_size: 2880,
        explicit_head_dim: Some(64),
        attention_bias: true,
        mlp_bias: true,
        attention_sinks: true,
        // openai/gpt-oss-120b and -20b config.json: "swiglu_limit": 7.0.
        swiglu_limit: Some(7.0),
        sliding_window: 128,
        layer_types: vec![AttentionType::SlidingAttention, AttentionType::FullAttention],
        ..ModelConfig::dense(name, 2880, layers, 64, 8, 2880, 201088, true)
    }
}

fn nemotron_h(name: &str, h: u64, heads: u64, ffn: u64, pattern: &str, mamba_heads: u64, state: u64) -> ModelConfig {
    ModelConfig {
        hybrid_override_pattern: Some(pattern.to_string()),
        mamba: Some(MambaConfig {
            num_heads: mamba_heads,
            head_dim: 64,
            state_size: state,
            n_groups: 8,
            conv_kernel: 4,
            chunk_size: 128,
        }),
        // Megatron-Core's `MambaModel` has no position embedding by default; Nemotron-H's
        // config.json carries no RoPE parameters.
        position_embedding_type: PositionEmbedding::None,
        ..ModelConfig::dense(name, h, pattern.len() as u64, heads, 8, ffn, 131072, false)
    }
}

const PRESET_NAMES: &[&str] = &[
    "gpt3-6.7b",
    "gpt3-13b",
    "gpt3-175b",
    "llama-7b",
    "llama-65b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3.2-1b",
    "llama3.2-3b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "nemotron-4-340b",
    "deepseek-moe-16b",
    "deepseek-v2-lite",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "deepseek-v3",
    "nemotron-h-8b",
    "nemotron-h-56b",
    "nemotron-3-nano-30b-a3b",
];

/// Canonical names of the presets.
pub fn preset_names() -> &'static [&'static str] {
    PRESET_NAMES
}

/// Published total parameter count of a preset (for checks and reports), if `name` is one.
pub fn published_param_count(name: &str) -> Option<f64> {
    find_preset(name).map(|p| p.published_params)
}

/// Lower-case alphanumerics plus '.', so "GPT-3 13B", "gpt3-13b" and "gpt3_13b" match.
fn normalize(name: &str) -> String {
    let k: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
        .collect::<String>()
        .to_ascii_lowercase();
    // "llama3.1" and "llama-3.1" both normalize to "llama3.1"; "6.7b" keeps its dot.
    k
}

fn find_preset(name: &str) -> Option<&'static Preset> {
    let k = normalize(name);
    PRESETS
        .iter()
        .find(|p| normalize(p.name) == k || p.aliases.iter().any(|a| normalize(a) == k))
}

/// A preset by name. Matching ignores case, spaces, dashes and underscores: "GPT-3 13B",
/// "gpt3-13b", "Llama-3 70B", "mixtral-8x7b", "deepseek-v2-lite".
///
/// # Errors
/// [`WorkloadError::UnknownPreset`] listing the valid names.
pub fn preset(name: &str) -> Result<ModelConfig, WorkloadError> {
    find_preset(name).map(|p| (p.build)()).ok_or_else(|| WorkloadError::UnknownPreset {
        name: name.to_string(),
        valid: PRESET_NAMES.iter().map(|s| s.to_string()).collect(),
    })
}

/// A field of `config.json` under its first present alias (JSON `null` counts as absent).
fn hf_u64(obj: &serde_json::Map<String, Value>, aliases: &[&str]) -> Result<Option<u64>, WorkloadError> {
    for key in aliases {
        match obj.get(*key) {
            None | Some(Value::Null) => continue,
            Some(v) => {
                return v.as_u64().map(Some).ok_or_else(|| WorkloadError::HfConfig {
                    message: format!("field {key:?} must be a non-negative integer, got {v}"),
                });
            }
        }
    }
    Ok(None)
}

fn hf_required(obj: &serde_json::Map<String, Value>, aliases: &[&str]) -> Result<u64, WorkloadError> {
    hf_u64(obj, aliases)?.ok_or_else(|| WorkloadError::HfConfig {
        message: match aliases {
            [one] => format!("missing field {one:?}"),
            _ => format!("missing field {:?} (also accepted: {})", aliases[0], aliases[1..].join(", ")),
        },
    })
}

/// Parses a Hugging Face `config.json`.
///
/// Field aliases (first present wins):
/// - `hidden_size` | `n_embd` | `d_model`; `num_hidden_layers` | `n_layer` | `num_layers`;
///   `num_attention_heads` | `n_head`; `num_key_value_heads` | `num_query_groups` (default: heads);
///   `intermediate_size` | `n_inner` | `ffn_hidden_size` (default: 4·h); `vocab_size`.
/// - experts: `num_local_experts` (Mixtral) | `num_experts` (Qwen-MoE) | `n_routed_experts`
///   (DeepSeek); `num_experts_per_tok` | `moe_topk`; `moe_intermediate_size` (default: the dense
///   `intermediate_size`, as in Mixtral); `n_shared_experts` (DeepSeek) or
///   `shared_expert_intermediate_size / moe_intermediate_size` (Qwen2-MoE, rounded up);
///   `first_k_dense_replace` (DeepSeek, default 0).
/// - `hidden_act` | `activation_function`: `silu`/`swiglu` ⇒ gated MLP; anything else (gelu) ⇒ plain.
///   Default: gated.
/// - `tie_word_embeddings`: default false (Llama/Mixtral/DeepSeek configs; GPT-2 configs set it).
/// - `head_dim` | `attention_head_dim`, kept only when it differs from `h / heads`.
/// - `layer_types` (`full_attention` / `sliding_attention`) with `sliding_window`, kept only when
///   some layer is sliding.
/// - MLA when `kv_lora_rank` is present: `q_lora_rank` (null = 0), `kv_lora_rank`,
///   `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`; `num_nextn_predict_layers` (MTP).
/// - `moe_latent_size` (LatentMoE, Nemotron 3 Super), with experts only.
/// - `n_group` and `topk_group` (group-limited routing, DeepSeek-V3), with experts and more than
///   one group.
/// - hybrid: `hybrid_override_pattern`; Mamba-2 `mamba_num_heads` (default `expand·h /
///   mamba_head_dim`), `mamba_head_dim` (64), `ssm_state_size` | `mamba_d_state`, `n_groups` (8),
///   `conv_kernel` | `mamba_d_conv` (4), `chunk_size` (128); `mlp_hidden_act` (`relu2` ⇒ plain).
/// - `attention_bias`, `mlp_bias`; `model_type: gpt_oss` implies both and attention sinks,
///   `qwen3`/`qwen3_moe` q/k norms.
/// - positions: no embedding for a hybrid model, a learned table for the GPT-2 family
///   (`n_positions`, `model_type` `gpt2`/`gpt_bigcode`/`opt`), RoPE otherwise.
///
/// # Errors
/// [`WorkloadError::HfConfig`] for invalid JSON or a missing required field, and the errors of
/// [`ModelConfig::validate`].
pub fn from_hf_config_json(text: &str, name: &str) -> Result<ModelConfig, WorkloadError> {
    let v: Value = serde_json::from_str(text).map_err(|e| WorkloadError::HfConfig {
        message: format!("not valid JSON: {e}"),
    })?;
    let obj = v.as_object().ok_or_else(|| WorkloadError::HfConfig {
        message: "top level must be a JSON object".into(),
    })?;
    let h = hf_required(obj, &["hidden_size", "n_embd", "d_model"])?;
    let layers = hf_required(obj, &["num_hidden_layers", "n_layer", "num_layers"])?;
    let heads = hf_required(obj, &["num_attention_heads", "n_head"])?;
    let kv = hf_u64(obj, &["num_key_value_heads", "num_query_groups"])?.unwrap_or(heads);
    let ffn = hf_u64(obj, &["intermediate_size", "n_inner", "ffn_hidden_size"])?.unwrap_or(4 * h);
    let vocab = hf_required(obj, &["vocab_size"])?;
    let act = ["mlp_hidden_act", "hidden_act", "activation_function"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
        .unwrap_or("silu")
        .to_ascii_lowercase();
    let gated = act.contains("silu") || act.contains("swiglu") || act.contains("swish") || act.contains("glu");
    let tie = obj.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);

    let experts = hf_u64(obj, &["num_local_experts", "num_experts", "n_routed_experts"])?.unwrap_or(0);
    let (topk, moe_ffn, shared, first_k) = if experts > 0 {
        let topk = hf_u64(obj, &["num_experts_per_tok", "moe_topk", "experts_per_token"])?.ok_or_else(|| WorkloadError::HfConfig {
            message: format!("MoE config ({experts} experts) lacks \"num_experts_per_tok\""),
        })?;
        let moe_ffn = hf_u64(obj, &["moe_intermediate_size"])?.unwrap_or(ffn);
        let shared = match hf_u64(obj, &["n_shared_experts"])? {
            Some(n) => n,
            None => hf_u64(obj, &["shared_expert_intermediate_size"])?
                .map(|s| s.div_ceil(moe_ffn.max(1)))
                .unwrap_or(0),
        };
        let first_k = hf_u64(obj, &["first_k_dense_replace"])?.unwrap_or(0);
        (topk, moe_ffn, shared, first_k)
    } else {
        (0, 0, 0, 0)
    };
    // Group-limited routing; one group is no limit (DeepSeek-V2-Lite, Kimi K2 spell out 1).
    let groups = match (hf_u64(obj, &["n_group"])?, hf_u64(obj, &["topk_group"])?) {
        (Some(g), t) if experts > 0 && g > 1 => (g, t.unwrap_or(0)),
        _ => (0, 0),
    };
    let model_type = obj.get("model_type").and_then(Value::as_str).unwrap_or("");
    let gpt_oss = model_type == "gpt_oss";
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
    // Set only when it differs from h/heads, so configs that spell out the default (Llama 3)
    // give the same model as before.
    let explicit_head_dim =
        hf_u64(obj, &["head_dim", "attention_head_dim"])?.filter(|&d| !h.is_multiple_of(heads.max(1)) || d != h / heads.max(1));
    let (sliding_window, layer_types) = hf_layer_types(obj)?;
    let mla = match hf_u64(obj, &["kv_lora_rank"])? {
        Some(kv_lora_rank) => Some(MlaConfig {
            q_lora_rank: hf_u64(obj, &["q_lora_rank"])?.unwrap_or(0),
            kv_lora_rank,
            qk_nope_head_dim: hf_required(obj, &["qk_nope_head_dim"])?,
            qk_rope_head_dim: hf_required(obj, &["qk_rope_head_dim"])?,
            v_head_dim: hf_required(obj, &["v_head_dim"])?,
        }),
        None => None,
    };
    let hybrid_override_pattern = obj.get("hybrid_override_pattern").and_then(Value::as_str).map(str::to_string);
    let mamba = if hybrid_override_pattern.as_deref().is_some_and(|p| p.contains('M')) {
        let head_dim = hf_u64(obj, &["mamba_head_dim"])?.unwrap_or(64);
        let num_heads = match hf_u64(obj, &["mamba_num_heads"])? {
            Some(n) => n,
            None => hf_u64(obj, &["expand", "mamba_expand"])?.unwrap_or(2).saturating_mul(h) / head_dim.max(1),
        };
        Some(MambaConfig {
            num_heads,
            head_dim,
            state_size: hf_required(obj, &["ssm_state_size", "mamba_d_state", "state_size"])?,
            n_groups: hf_u64(obj, &["n_groups", "mamba_n_groups"])?.unwrap_or(default_mamba_groups()),
            conv_kernel: hf_u64(obj, &["conv_kernel", "mamba_d_conv"])?.unwrap_or(default_conv_kernel()),
            chunk_size: hf_u64(obj, &["chunk_size", "mamba_chunk_size"])?.unwrap_or(default_chunk_size()),
        })
    } else {
        None
    };
    let m = ModelConfig {
        name: name.to_string(),
        hidden_size: h,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv,
        intermediate_size: ffn,
        vocab_size: vocab,
        gated_mlp: gated,
        tie_word_embeddings: tie,
        num_experts: experts,
        num_experts_per_tok: topk,
        moe_intermediate_size: moe_ffn,
        num_shared_experts: shared,
        first_k_dense_layers: first_k,
        explicit_head_dim,
        // GPT-OSS's config does not spell out its biases and sinks; its architecture has them.
        attention_bias: flag("attention_bias") || gpt_oss,
        mlp_bias: flag("mlp_bias") || gpt_oss,
        attention_sinks: gpt_oss,
        swiglu_limit: obj.get("swiglu_limit").and_then(Value::as_f64),
        qk_norm: matches!(model_type, "qwen3" | "qwen3_moe"),
        // A hybrid Mamba model has none; the GPT-2 family (`n_positions`, and OPT) a learned
        // table; every other decoder config here (Llama, Mistral, Qwen, DeepSeek, GPT-OSS) RoPE.
        position_embedding_type: if hybrid_override_pattern.is_some() {
            PositionEmbedding::None
        } else if obj.contains_key("n_positions") || matches!(model_type, "gpt2" | "gpt_bigcode" | "opt") {
            PositionEmbedding::LearnedAbsolute
        } else {
            PositionEmbedding::Rope
        },
        sliding_window,
        layer_types,
        mla,
        hybrid_override_pattern,
        mtp_hybrid_override_pattern: obj.get("mtp_hybrid_override_pattern").and_then(Value::as_str).map(str::to_string),
        mamba,
        num_nextn_predict_layers: hf_u64(obj, &["num_nextn_predict_layers"])?.unwrap_or(0),
        moe_latent_size: if experts > 0 {
            hf_u64(obj, &["moe_latent_size"])?.unwrap_or(0)
        } else {
            0
        },
        moe_router_num_groups: groups.0,
        moe_router_group_topk: groups.1,
    };
    m.validate()?;
    Ok(m)
}

/// `sliding_window` and `layer_types` of a config, kept only when some layer is sliding (Mistral
/// and Qwen2 configs carry a `sliding_window` that no layer uses, or that `use_sliding_window`
/// turns off).
fn hf_layer_types(obj: &serde_json::Map<String, Value>) -> Result<(u64, Vec<AttentionType>), WorkloadError> {
    let Some(list) = obj.get("layer_types").and_then(Value::as_array) else {
        return Ok((0, Vec::new()));
    };
    // The period search below is quadratic in the list's length.
    if list.len() as u64 > MAX_LAYERS {
        return Err(WorkloadError::HfConfig {
            message: format!(
                "layer_types has {} entries; valid: at most {MAX_LAYERS} (one per layer)",
                list.len()
            ),
        });
    }
    let mut types = Vec::with_capacity(list.len());
    for v in list {
        types.push(match v.as_str() {
            Some("full_attention") => AttentionType::FullAttention,
            Some("sliding_attention") => AttentionType::SlidingAttention,
            _ => {
                return Err(WorkloadError::HfConfig {
                    message: format!("layer_types: unsupported {v}; supported: \"full_attention\", \"sliding_attention\""),
                });
            }
        });
    }
    let window = hf_u64(obj, &["sliding_window"])?.unwrap_or(0);
    if window == 0 || !types.contains(&AttentionType::SlidingAttention) {
        return Ok((0, Vec::new()));
    }
    // Keep the shortest repeating period (GPT-OSS: [sliding, full]).
    let period = (1..=types.len())
        .find(|&n| types.iter().enumerate().all(|(i, t)| *t == types[i % n]))
        .unwrap_or(types.len());
    types.truncate(period);
    Ok((window, types))
}

fn read_hf_config(path: &str, base_dir: &Path) -> Result<ModelConfig, WorkloadError> {
    let p = base_dir.join(path);
    let text = std::fs::read_to_string(&p).map_err(|e| WorkloadError::Io {
        path: p.display().to_string(),
        message: e.to_string(),
    })?;
    // Name after the directory holding config.json (HF layout), else after the file.
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    let name = if stem == "config" {
        p.parent().and_then(|d| d.file_name()).and_then(|s| s.to_str()).unwrap_or(stem)
    } else {
        stem
    };
    from_hf_config_json(&text, name)
}

// serde's aliases, which schemars does not see (see `llmsim_core::schema`).
fn model_aliases(s: &mut schemars::Schema) {
    llmsim_core::schema::add_property_aliases(
        s,
        &[
            ("num_local_experts", "num_experts"),
            ("n_routed_experts", "num_experts"),
            ("n_shared_experts", "num_shared_experts"),
            ("first_k_dense_replace", "first_k_dense_layers"),
            ("n_group", "moe_router_num_groups"),
            ("topk_group", "moe_router_group_topk"),
        ],
    );
}

/// The map form of `model:`: a base (`preset` or `config`, at most one) and per-field overrides.
/// With neither base, every architecture field must be given.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = model_aliases)]
pub struct ModelOverrides {
    /// Preset name (see [`preset_names`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Path to a Hugging Face `config.json`, relative to the scenario file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// Name in reports. Default (no base): `custom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Model width: elements of a token's hidden state. Required without a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_size: Option<u64>,
    /// Transformer layers. Required without a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_hidden_layers: Option<u64>,
    /// Query heads per attention layer. Required without a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_attention_heads: Option<u64>,
    /// Default (no base): `num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<u64>,
    /// FFN size of dense layers. Required without a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate_size: Option<u64>,
    /// Vocabulary size, in tokens. Required without a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<u64>,
    /// Default (no base): true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated_mlp: Option<bool>,
    /// Default (no base): false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie_word_embeddings: Option<bool>,
    /// Default (no base): 0 (dense), and the expert fields below 0 too.
    #[serde(
        default,
        alias = "num_local_experts",
        alias = "n_routed_experts",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_experts: Option<u64>,
    /// Experts each token is routed to (top-k). Default (no base): 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<u64>,
    /// Default (no base): `intermediate_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<u64>,
    /// Shared (always active) experts per MoE layer. Default (no base): 0.
    #[serde(default, alias = "n_shared_experts", skip_serializing_if = "Option::is_none")]
    pub num_shared_experts: Option<u64>,
    /// The first k layers are dense (DeepSeek `first_k_dense_replace`). Default (no base): 0.
    #[serde(default, alias = "first_k_dense_replace", skip_serializing_if = "Option::is_none")]
    pub first_k_dense_layers: Option<u64>,
    /// Default (no base): `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    /// Biases on the Q, K, V and output projections (GPT-OSS). Default (no base): false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// Biases on the MLP and expert projections and the router (GPT-OSS). Default (no base): false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_bias: Option<bool>,
    /// A learned sink logit per head and layer (GPT-OSS). Default (no base): false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_sinks: Option<bool>,
    /// Clamp of the gated activation's inputs (GPT-OSS 7.0, config.json `swiglu_limit`;
    /// Megatron-Core `activation_func_clamp_value`). Default (no base): none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swiglu_limit: Option<f64>,
    /// RMSNorm over each query and key head (Qwen3). Default (no base): false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_norm: Option<bool>,
    /// Default (no base): 0 (no sliding window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// Attention type per layer; a shorter list repeats (GPT-OSS). Default (no base): all full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<AttentionType>>,
    /// Multi-head latent attention: `{ q_lora_rank, kv_lora_rank, qk_nope_head_dim,
    /// qk_rope_head_dim, v_head_dim }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<MlaConfig>,
    /// Hybrid models: one character per layer, `M` Mamba-2, `*` attention, `-` MLP, `E` MoE
    /// (Nemotron-H). Default (no base): none, every layer is attention + MLP or MoE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid_override_pattern: Option<String>,
    /// Mamba-2 mixer: `{ num_heads, head_dim, state_size, n_groups, conv_kernel, chunk_size }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<MambaConfig>,
    /// Multi-token-prediction modules of the checkpoint (DeepSeek-V3): their parameters. Training
    /// runs `training.mtp_num_layers` of them. Default (no base): 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nextn_predict_layers: Option<u64>,
    /// Hybrid models: one MTP block's layers, as `hybrid_override_pattern` characters (Nemotron 3
    /// Super `"*E"`). Default (no base): none, a block is one layer like the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_hybrid_override_pattern: Option<String>,
    /// LatentMoE (Nemotron 3 Super): the routed experts' width, behind a `hidden -> latent`
    /// projection before the dispatch and a `latent -> hidden` one after the combine. Default (no
    /// base): 0, experts take the hidden size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_latent_size: Option<u64>,
    /// Group-limited routing: groups of consecutive routed experts (DeepSeek-V3 `n_group` 8).
    /// Default (no base): 0, none.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "n_group")]
    pub moe_router_num_groups: Option<u64>,
    /// Groups a token's experts come from (DeepSeek-V3 `topk_group` 4). Default (no base): 0.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "topk_group")]
    pub moe_router_group_topk: Option<u64>,
    /// How token positions enter the model: `learned_absolute` (a learned table added to the
    /// embedding), `rope` (rotary embeddings on every query and key head: one fused kernel forward
    /// and one backward per attention layer) or `none`. Presets and `config.json` set it; default
    /// (no base): `learned_absolute`, Megatron's `--position-embedding-type` default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<PositionEmbedding>,
}

/// The `model:` section of a scenario: a string (a preset name, or a path ending in `.json` to a
/// Hugging Face `config.json`, relative to the scenario file), or a map [`ModelOverrides`].
///
/// ```yaml
/// model: gpt3-13b
/// model: models/llama3-8b/config.json
/// model: { preset: llama3-70b, num_hidden_layers: 40 }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    /// A preset name, or a path ending in `.json` to a Hugging Face `config.json`.
    Name(String),
    /// A base and per-field overrides.
    Fields(Box<ModelOverrides>),
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ModelSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a preset name, a path to config.json, or a map of model fields")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ModelSpec, E> {
                Ok(ModelSpec::Name(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ModelSpec, A::Error> {
                ModelOverrides::deserialize(de::value::MapAccessDeserializer::new(map)).map(|o| ModelSpec::Fields(Box::new(o)))
            }
        }
        d.deserialize_any(V)
    }
}

impl From<&str> for ModelSpec {
    fn from(s: &str) -> Self {
        ModelSpec::Name(s.to_string())
    }
}

impl ModelSpec {
    /// The model this spec describes; `.json` paths are read relative to `base_dir`.
    ///
    /// # Errors
    /// [`WorkloadError::UnknownPreset`], [`WorkloadError::Io`], [`WorkloadError::HfConfig`],
    /// [`WorkloadError::MissingField`] (no base and a field absent), [`WorkloadError::Invalid`]
    /// (both `preset` and `config`, or an inconsistent architecture).
    pub fn resolve(&self, base_dir: &Path) -> Result<ModelConfig, WorkloadError> {
        match self {
            ModelSpec::Name(s) if s.ends_with(".json") => read_hf_config(s, base_dir),
            ModelSpec::Name(s) => preset(s),
            ModelSpec::Fields(o) => o.resolve(base_dir),
        }
    }
}

impl ModelOverrides {
    fn resolve(&self, base_dir: &Path) -> Result<ModelConfig, WorkloadError> {
        let base = match (&self.preset, &self.config) {
            (Some(_), Some(_)) => {
                return Err(WorkloadError::invalid("model", "give either `preset` or `config`, not both"));
            }
            (Some(p), None) => Some(preset(p)?),
            (None, Some(c)) => Some(read_hf_config(c, base_dir)?),
            (None, None) => None,
        };
        let m = match base {
            Some(mut m) => {
                macro_rules! over {
                    ($($f:ident),*) => { $( if let Some(v) = &self.$f { m.$f = v.clone(); } )* };
                }
                over!(
                    name,
                    hidden_size,
                    num_hidden_layers,
                    num_attention_heads,
                    num_key_value_heads,
                    intermediate_size,
                    vocab_size,
                    gated_mlp,
                    tie_word_embeddings,
                    num_experts,
                    num_experts_per_tok,
                    moe_intermediate_size,
                    num_shared_experts,
                    first_k_dense_layers,
                    attention_bias,
                    mlp_bias,
                    attention_sinks,
                    qk_norm,
                    sliding_window,
                    layer_types,
                    num_nextn_predict_layers,
                    moe_latent_size,
                    moe_router_num_groups,
                    moe_router_group_topk
                );
                if let Some(x) = self.position_embedding_type {
                    m.position_embedding_type = x;
                }
                if let Some(x) = self.swiglu_limit {
                    m.swiglu_limit = Some(x);
                }
                if let Some(d) = self.head_dim {
                    m.explicit_head_dim = Some(d);
                }
                if let Some(x) = &self.mla {
                    m.mla = Some(x.clone());
                }
                if let Some(x) = &self.hybrid_override_pattern {
                    m.hybrid_override_pattern = Some(x.clone());
                }
                if let Some(x) = &self.mtp_hybrid_override_pattern {
                    m.mtp_hybrid_override_pattern = Some(x.clone());
                }
                if let Some(x) = &self.mamba {
                    m.mamba = Some(x.clone());
                }
                m
            }
            None => {
                let req = |v: Option<u64>, f: &str| {
                    v.ok_or_else(|| WorkloadError::MissingField {
                        field: format!("model.{f}"),
                    })
                };
                let heads = req(self.num_attention_heads, "num_attention_heads")?;
                let ffn = req(self.intermediate_size, "intermediate_size")?;
                ModelConfig {
                    name: self.name.clone().unwrap_or_else(|| "custom".into()),
                    hidden_size: req(self.hidden_size, "hidden_size")?,
                    num_hidden_layers: req(self.num_hidden_layers, "num_hidden_layers")?,
                    num_attention_heads: heads,
                    num_key_value_heads: self.num_key_value_heads.unwrap_or(heads),
                    intermediate_size: ffn,
                    vocab_size: req(self.vocab_size, "vocab_size")?,
                    gated_mlp: self.gated_mlp.unwrap_or(true),
                    tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
                    num_experts: self.num_experts.unwrap_or(0),
                    num_experts_per_tok: self.num_experts_per_tok.unwrap_or(0),
                    moe_intermediate_size: self.moe_intermediate_size.unwrap_or(ffn),
                    num_shared_experts: self.num_shared_experts.unwrap_or(0),
                    first_k_dense_layers: self.first_k_dense_layers.unwrap_or(0),
                    explicit_head_dim: self.head_dim,
                    attention_bias: self.attention_bias.unwrap_or(false),
                    mlp_bias: self.mlp_bias.unwrap_or(false),
                    attention_sinks: self.attention_sinks.unwrap_or(false),
                    swiglu_limit: self.swiglu_limit,
                    qk_norm: self.qk_norm.unwrap_or(false),
                    sliding_window: self.sliding_window.unwrap_or(0),
                    layer_types: self.layer_types.clone().unwrap_or_default(),
                    mla: self.mla.clone(),
                    hybrid_override_pattern: self.hybrid_override_pattern.clone(),
                    mtp_hybrid_override_pattern: self.mtp_hybrid_override_pattern.clone(),
                    mamba: self.mamba.clone(),
                    num_nextn_predict_layers: self.num_nextn_predict_layers.unwrap_or(0),
                    moe_latent_size: self.moe_latent_size.unwrap_or(0),
                    moe_router_num_groups: self.moe_router_num_groups.unwrap_or(0),
                    moe_router_group_topk: self.moe_router_group_topk.unwrap_or(0),
                    position_embedding_type: self.position_embedding_type.unwrap_or_default(),
                }
            }
        };
        m.validate()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_is_a_preset() {
        for n in preset_names() {
            let m = preset(n).unwrap();
            assert_eq!(&m.name, n);
            m.validate().unwrap();
        }
        assert_eq!(PRESETS.len(), PRESET_NAMES.len());
    }

    #[test]
    fn tolerant_names() {
        assert_eq!(preset("GPT-3 13B").unwrap().name, "gpt3-13b");
        assert_eq!(preset("gpt3_175b").unwrap().name, "gpt3-175b");
        assert_eq!(preset("Llama-3 70B").unwrap().name, "llama3-70b");
        assert_eq!(preset("Mixtral 8x7B").unwrap().name, "mixtral-8x7b");
        assert!(matches!(preset("gpt5"), Err(WorkloadError::UnknownPreset { .. })));
    }
}
