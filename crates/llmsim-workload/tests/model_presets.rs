//! Presets, Hugging Face config.json parsing and the `model:` scenario section.

use std::path::Path;

use llmsim_workload::model::{from_hf_config_json, preset, preset_names, published_param_count};
use llmsim_workload::{ModelSpec, WorkloadError};

#[test]
fn preset_param_counts_match_their_published_counts() {
    for name in preset_names() {
        let m = preset(name).unwrap();
        let published = published_param_count(name).unwrap();
        let ours = m.param_count() as f64;
        let err = (ours - published).abs() / published;
        // GPT-3's published sizes are rounded names (Brown et al. 2020, Table 2.1: "6.7B" is
        // 6.66B with its tied embedding, 6.85B untied as the SimAI-compatible preset is): 3%.
        // Every other preset is held to the issue's 1%.
        let bound = if name.starts_with("gpt3-") { 0.03 } else { 0.01 };
        assert!(
            err < bound,
            "{name}: {ours:.4e} vs published {published:.4e} ({:.2} %)",
            err * 100.0
        );
    }
}

#[test]
fn gpt3_param_count_follows_narayanan_formula() {
    // Narayanan et al. 2021: P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12lh)); we leave out biases and
    // LayerNorm biases (13h → 2h per layer) and position embeddings (s·h), and the output layer
    // is a separate matrix (GPT-3 presets are untied), so P = 12lh² + 2lh + h + 2Vh.
    for name in ["gpt3-6.7b", "gpt3-13b", "gpt3-175b"] {
        let m = preset(name).unwrap();
        let (l, h, v) = (m.num_hidden_layers, m.hidden_size, m.vocab_size);
        assert_eq!(m.param_count(), 12 * l * h * h + 2 * l * h + h + 2 * v * h, "{name}");
        assert_eq!(m.active_param_count(), m.param_count());
    }
}

#[test]
fn gpt3_presets_match_simai_table3() {
    // SimAI (NSDI'25) Table 3: hidden size, layers, FFN size.
    for (name, h, l, ffn) in [
        ("GPT-3 6.7B", 4096, 32, 16384),
        ("GPT-3 13B", 5120, 40, 20480),
        ("GPT-3 175B", 12288, 96, 49152),
    ] {
        let m = preset(name).unwrap();
        assert_eq!((m.hidden_size, m.num_hidden_layers, m.intermediate_size), (h, l, ffn), "{name}");
        assert!(!m.gated_mlp);
    }
    let m = preset("Llama3 405B").unwrap();
    assert_eq!((m.hidden_size, m.num_hidden_layers, m.intermediate_size), (16384, 126, 53248));
}

#[test]
fn moe_active_params() {
    let mix = preset("mixtral-8x7b").unwrap();
    assert!(mix.is_moe(0));
    let rel = (mix.active_param_count() as f64 - 12.9e9).abs() / 12.9e9;
    assert!(rel < 0.03, "mixtral active {}", mix.active_param_count());
    // Total - active = the (experts - topk) unused experts of every layer.
    let per_expert = 3 * mix.hidden_size * mix.moe_intermediate_size;
    assert_eq!(
        mix.param_count() - mix.active_param_count(),
        mix.num_hidden_layers * (mix.num_experts - mix.num_experts_per_tok) * per_expert
    );

    let ds = preset("deepseek-moe-16b").unwrap();
    assert!(!ds.is_moe(0) && ds.is_moe(1));
    let rel = (ds.active_param_count() as f64 - 2.8e9).abs() / 2.8e9;
    assert!(rel < 0.03, "deepseek active {}", ds.active_param_count());
}

#[test]
fn unknown_preset_lists_valid_names() {
    let e = preset("gpt-4").unwrap_err();
    let WorkloadError::UnknownPreset { valid, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(valid.len(), preset_names().len());
    assert!(e.to_string().contains("gpt3-175b"), "{e}");
}

const MIXTRAL_JSON: &str = r#"{
  "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000
}"#;

const DEEPSEEK_JSON: &str = r#"{
  "architectures": ["DeepseekForCausalLM"], "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
  "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
  "moe_layer_freq": 1, "num_attention_heads": 16, "num_key_value_heads": 16,
  "num_hidden_layers": 28, "vocab_size": 102400, "tie_word_embeddings": false
}"#;

#[test]
fn hf_mixtral_like() {
    let m = from_hf_config_json(MIXTRAL_JSON, "mixtral").unwrap();
    let mut p = preset("mixtral-8x7b").unwrap();
    p.name = "mixtral".into();
    assert_eq!(m, p);
}

#[test]
fn hf_deepseek_like() {
    let m = from_hf_config_json(DEEPSEEK_JSON, "ds").unwrap();
    assert_eq!(
        (
            m.num_experts,
            m.num_experts_per_tok,
            m.num_shared_experts,
            m.moe_intermediate_size,
            m.first_k_dense_layers
        ),
        (64, 6, 2, 1408, 1)
    );
    assert!(m.gated_mlp);
    let mut p = preset("deepseek-moe-16b").unwrap();
    p.name = "ds".into();
    assert_eq!(m, p);
}

#[test]
fn hf_qwen_moe_and_defaults() {
    let qwen = r#"{"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "hidden_act": "silu"}"#;
    let m = from_hf_config_json(qwen, "qwen").unwrap();
    assert_eq!(m.num_key_value_heads, 16, "missing num_key_value_heads defaults to the heads");
    assert_eq!(m.num_shared_experts, 5632 / 1408);
    assert_eq!(m.num_experts, 60);

    let gpt2 = r#"{"n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": null, "vocab_size": 50257,
        "activation_function": "gelu_new", "tie_word_embeddings": true}"#;
    let g = from_hf_config_json(gpt2, "gpt2").unwrap();
    assert_eq!(
        (g.hidden_size, g.intermediate_size, g.gated_mlp, g.tie_word_embeddings),
        (768, 3072, false, true)
    );
}

#[test]
fn hf_errors() {
    assert!(matches!(from_hf_config_json("{", "x"), Err(WorkloadError::HfConfig { .. })));
    let e = from_hf_config_json(r#"{"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}"#, "x").unwrap_err();
    assert!(e.to_string().contains("num_hidden_layers"), "{e}");
    let e = from_hf_config_json(
        r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 5, "vocab_size": 10}"#,
        "x",
    )
    .unwrap_err();
    assert_eq!(e.field(), Some("model.num_attention_heads"), "{e}");
}

fn spec(yaml: &str) -> Result<ModelSpec, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str(yaml)
}

#[test]
fn model_section_forms() {
    let base = Path::new(".");
    assert_eq!(spec("GPT-3 13B").unwrap().resolve(base).unwrap(), preset("gpt3-13b").unwrap());

    let m = spec("{ preset: llama3-70b, num_hidden_layers: 40 }")
        .unwrap()
        .resolve(base)
        .unwrap();
    assert_eq!(m.num_hidden_layers, 40);
    assert_eq!(m.hidden_size, 8192);

    let m = spec("{ hidden_size: 1024, num_hidden_layers: 4, num_attention_heads: 16, intermediate_size: 4096, vocab_size: 32000 }")
        .unwrap()
        .resolve(base)
        .unwrap();
    assert_eq!((m.num_key_value_heads, m.gated_mlp, m.num_experts), (16, true, 0));

    let e = spec("{ hidden_size: 1024, num_hidden_layers: 4 }")
        .unwrap()
        .resolve(base)
        .unwrap_err();
    assert_eq!(e.field(), Some("model.num_attention_heads"), "{e}");

    let e = spec("{ preset: gpt3-13b, hiden_size: 5 }").unwrap_err();
    assert!(e.to_string().contains("hiden_size"), "{e}");

    let e = spec("{ preset: gpt3-13b, config: x.json }").unwrap().resolve(base).unwrap_err();
    assert_eq!(e.field(), Some("model"));
}

#[test]
fn model_section_json_path() {
    let dir = std::env::temp_dir().join(format!("llmsim-workload-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("mixtral")).unwrap();
    std::fs::write(dir.join("mixtral/config.json"), MIXTRAL_JSON).unwrap();
    let m = spec("mixtral/config.json").unwrap().resolve(&dir).unwrap();
    assert_eq!(m.name, "mixtral");
    assert_eq!(m.num_experts, 8);
    let m = spec("{ config: mixtral/config.json, num_experts_per_tok: 1 }")
        .unwrap()
        .resolve(&dir)
        .unwrap();
    assert_eq!(m.num_experts_per_tok, 1);
    let e = spec("missing.json").unwrap().resolve(&dir).unwrap_err();
    assert!(matches!(e, WorkloadError::Io { .. }), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
