//! Model architecture: presets, Hugging Face `config.json`, and the `model:` scenario section.
//!
//! A model is a decoder-only transformer described with Hugging Face field names. Conventions
//! that the FLOPs, parameter and memory accounting rely on:
//! - attention is standard multi-head (or grouped-query) attention with `head_dim = hidden_size /
//!   num_attention_heads`;
//! - linear layers have no biases and norms have one weight vector of `hidden_size` (RMSNorm);
//!   GPT-3's biases and LayerNorm biases (~13·h per layer, < 0.01 % of the parameters) are left
//!   out, as are its learned position embeddings (2048·h);
//! - a gated MLP (SwiGLU) has three `h × ffn` matrices, a plain one (GeLU) two;
//! - an MoE layer has a router (`h × num_experts`), `num_experts` routed experts of FFN size
//!   `moe_intermediate_size`, and `num_shared_experts` shared experts modelled as one dense MLP of
//!   FFN size `num_shared_experts · moe_intermediate_size` (DeepSeek-MoE's definition).

use std::path::Path;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::WorkloadError;

/// A decoder-only transformer, in Hugging Face terms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub name: String,
    pub hidden_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    /// Grouped-query attention groups (= `num_attention_heads` for MHA).
    pub num_key_value_heads: u64,
    /// FFN size of dense layers.
    pub intermediate_size: u64,
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
}

impl ModelConfig {
    /// Per-head dimension, `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> u64 {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Whether `layer` (0-based) is an MoE layer.
    pub fn is_moe(&self, layer: u64) -> bool {
        self.num_experts > 0 && layer >= self.first_k_dense_layers
    }

    /// Number of MoE layers.
    pub fn moe_layers(&self) -> u64 {
        if self.num_experts == 0 {
            0
        } else {
            self.num_hidden_layers.saturating_sub(self.first_k_dense_layers)
        }
    }

    /// Weight matrices per MLP: 3 gated, 2 plain.
    pub fn mlp_matrices(&self) -> u64 {
        if self.gated_mlp { 3 } else { 2 }
    }

    /// Attention parameters of one layer: QKV (`h × (a + 2·kv)·d`) and output projection (`a·d × h`).
    pub fn attention_params(&self) -> u64 {
        let d = self.head_dim();
        let h = self.hidden_size;
        h * (self.num_attention_heads + 2 * self.num_key_value_heads) * d + self.num_attention_heads * d * h
    }

    /// Parameters of one dense MLP with FFN size `ffn`.
    pub fn mlp_params(&self, ffn: u64) -> u64 {
        self.mlp_matrices() * self.hidden_size * ffn
    }

    /// FFN size of the shared-expert MLP (0 when there are none).
    pub fn shared_ffn(&self) -> u64 {
        self.num_shared_experts * self.moe_intermediate_size
    }

    /// Parameters of one layer with `experts` routed experts counted (all of them for the total,
    /// top-k for the active count). Includes the two norm weight vectors.
    fn layer_params(&self, layer: u64, experts: u64) -> u64 {
        let h = self.hidden_size;
        let mlp = if self.is_moe(layer) {
            h * self.num_experts + experts * self.mlp_params(self.moe_intermediate_size) + self.mlp_params(self.shared_ffn())
        } else {
            self.mlp_params(self.intermediate_size)
        };
        self.attention_params() + mlp + 2 * h
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

    /// Checks the architecture is self-consistent.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] naming the `model.*` field: a zero size, heads not dividing the
    /// hidden size, kv heads not dividing heads, top-k above the expert count.
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
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(WorkloadError::invalid(
                "model.num_attention_heads",
                format!(
                    "num_attention_heads={} does not divide hidden_size={}",
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
        }
        Ok(())
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
    ModelConfig::dense(name, h, layers, heads, heads, 4 * h, 50257, false)
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
];

const PRESET_NAMES: &[&str] = &[
    "gpt3-6.7b",
    "gpt3-13b",
    "gpt3-175b",
    "llama-7b",
    "llama-65b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
    "deepseek-moe-16b",
    "deepseek-v2-lite",
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
        message: format!("missing field {:?} (also accepted: {})", aliases[0], aliases[1..].join(", ")),
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
    let act = ["hidden_act", "activation_function"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
        .unwrap_or("silu")
        .to_ascii_lowercase();
    let gated = act.contains("silu") || act.contains("swiglu") || act.contains("swish") || act.contains("glu");
    let tie = obj.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);

    let experts = hf_u64(obj, &["num_local_experts", "num_experts", "n_routed_experts"])?.unwrap_or(0);
    let (topk, moe_ffn, shared, first_k) = if experts > 0 {
        let topk = hf_u64(obj, &["num_experts_per_tok", "moe_topk"])?.ok_or_else(|| WorkloadError::HfConfig {
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
    };
    m.validate()?;
    Ok(m)
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

/// The map form of `model:`: a base (`preset` or `config`, at most one) and per-field overrides.
/// With neither base, every architecture field must be given.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOverrides {
    /// Preset name (see [`preset_names`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Path to a Hugging Face `config.json`, relative to the scenario file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_hidden_layers: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_attention_heads: Option<u64>,
    /// Default (no base): `num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate_size: Option<u64>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<u64>,
    /// Default (no base): `intermediate_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<u64>,
    #[serde(default, alias = "n_shared_experts", skip_serializing_if = "Option::is_none")]
    pub num_shared_experts: Option<u64>,
    #[serde(default, alias = "first_k_dense_replace", skip_serializing_if = "Option::is_none")]
    pub first_k_dense_layers: Option<u64>,
}

/// The `model:` section of a scenario: a string (a preset name, or a path ending in `.json` to a
/// Hugging Face `config.json`, relative to the scenario file), or a map [`ModelOverrides`].
///
/// ```yaml
/// model: gpt3-13b
/// model: models/llama3-8b/config.json
/// model: { preset: llama3-70b, num_hidden_layers: 40 }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ModelSpec {
    Name(String),
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
                    first_k_dense_layers
                );
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
