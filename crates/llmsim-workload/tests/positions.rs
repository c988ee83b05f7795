//! Rotary position embeddings and per-head q/k norms as kernels of the attention block, and how a
//! model's position embedding is chosen (preset, `config.json`, scenario override).

mod common;
use common::plan;

use llmsim_workload::model::{PositionEmbedding, from_hf_config_json, preset};
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{ModelConfig, ModelSpec, OpSpec, OpSpecKind, TrainingConfig};

fn bytes(op: &OpSpec) -> f64 {
    match op.kind {
        OpSpecKind::Compute { bytes, .. } => bytes,
        _ => panic!("{} is not a kernel", op.name),
    }
}

fn one<'a>(ops: &'a [OpSpec], name: &str) -> Option<&'a OpSpec> {
    let v: Vec<_> = ops.iter().filter(|o| o.name == name).collect();
    assert!(v.len() <= 1, "{name} more than once");
    v.first().copied()
}

fn training() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 2,
        global_batch_size: 64,
        ..TrainingConfig::default()
    }
}

#[test]
fn rope_reads_and_writes_every_local_query_and_key_element() {
    // Llama 3 70B with TP 8 and sequence parallelism: 64 query and 8 key heads of 128, so 8 and 1
    // per rank, over the gathered b·s tokens.
    let m = preset("llama3-70b").unwrap();
    assert_eq!(m.position_embedding_type, PositionEmbedding::Rope);
    let t = training();
    let p = plan(&m, &t, 8, "{ tp: 8, pp: 1, sequence_parallel: true }");
    let layer = transformer_layer(&m, &t, &p, 0);
    let elems = (t.micro_batch_size * t.seq_length * (64 / 8 + 8 / 8) * 128) as f64;
    let dt = t.dtype.bytes() as f64;
    let f = one(&layer.forward, "rope").expect("rope in forward");
    let b = one(&layer.backward, "rope_bwd").expect("rope_bwd in backward");
    assert_eq!(bytes(f), 2.0 * elems * dt);
    assert_eq!(bytes(b), 2.0 * elems * dt);
    // After the QKV projection, before core attention; no q/k norm in Llama.
    let pos = |n: &str| layer.forward.iter().position(|o| o.name == n).unwrap();
    assert!(pos("attn_qkv") < pos("rope") && pos("rope") < pos("core_attention"));
    assert!(one(&layer.forward, "attn_qk_norm").is_none());

    // GPT-3 keeps its learned table (part of the embedding): no rotary kernel.
    let g = preset("gpt3-13b").unwrap();
    assert_eq!(g.position_embedding_type, PositionEmbedding::LearnedAbsolute);
    let pg = plan(&g, &t, 8, "{ tp: 8, pp: 1 }");
    let lg = transformer_layer(&g, &t, &pg, 0);
    assert!(lg.forward.iter().chain(&lg.backward).all(|o| !o.name.starts_with("rope")));
}

#[test]
fn qk_norm_and_mla_rope_cover_their_own_elements() {
    // Qwen3-30B-A3B: 32 query and 4 key heads of 128 (head_dim set apart from h / heads = 64).
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = training();
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let layer = transformer_layer(&m, &t, &p, 0);
    let tok = t.micro_batch_size * t.seq_length;
    let dt = t.dtype.bytes() as f64;
    let norm = one(&layer.forward, "attn_qk_norm").expect("q/k norm");
    // Reads and writes every element, plus one 128-wide weight.
    assert_eq!(bytes(norm), (2 * tok * 36 * 128) as f64 * dt + 128.0 * dt);
    assert!(one(&layer.backward, "attn_qk_norm_bwd").is_some());
    let pos = |n: &str| layer.forward.iter().position(|o| o.name == n).unwrap();
    assert!(pos("attn_qk_norm") < pos("rope"));

    // DeepSeek-V3's MLA rotates the 64-wide RoPE part of each of its 128 query heads and of the
    // one key shared by all heads.
    let ds = preset("deepseek-v3").unwrap();
    let mla = ds.mla.clone().unwrap();
    let pd = plan(&ds, &t, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let ld = transformer_layer(&ds, &t, &pd, 0);
    let rope = one(&ld.forward, "rope").expect("MLA rope");
    assert_eq!(bytes(rope), 2.0 * (tok * (128 + 1) * mla.qk_rope_head_dim) as f64 * dt);

    // Nemotron-H's Mamba layers carry the positions: no rotary kernel anywhere.
    let nh = preset("nemotron-h-8b").unwrap();
    assert_eq!(nh.position_embedding_type, PositionEmbedding::None);
    let pn = plan(&nh, &t, 8, "{ tp: 1, pp: 1 }");
    for l in 0..nh.num_hidden_layers {
        let ops = transformer_layer(&nh, &t, &pn, l);
        assert!(ops.forward.iter().all(|o| o.name != "rope"), "layer {l}");
    }
}

#[test]
fn position_embedding_from_config_json_and_overrides() {
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000, "rope_theta": 10000.0}"#;
    let gpt2 = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new"}"#;
    assert_eq!(
        from_hf_config_json(llama, "l").unwrap().position_embedding_type,
        PositionEmbedding::Rope
    );
    assert_eq!(
        from_hf_config_json(gpt2, "g").unwrap().position_embedding_type,
        PositionEmbedding::LearnedAbsolute
    );
    let spec = |y: &str| -> ModelConfig {
        let s: ModelSpec = serde_yaml_ng::from_str(y).unwrap();
        s.resolve(std::path::Path::new(".")).unwrap()
    };
    // Without a base, Megatron's default; a preset's own choice can be overridden.
    let custom = "{ hidden_size: 1024, num_hidden_layers: 2, num_attention_heads: 8, intermediate_size: 4096, vocab_size: 1000 }";
    assert_eq!(spec(custom).position_embedding_type, PositionEmbedding::LearnedAbsolute);
    let with = custom.replace(" }", ", position_embedding_type: rope }");
    assert_eq!(spec(&with).position_embedding_type, PositionEmbedding::Rope);
    assert_eq!(
        spec("{ preset: llama3-8b, position_embedding_type: none }").position_embedding_type,
        PositionEmbedding::None
    );
    let bad: Result<ModelSpec, _> = serde_yaml_ng::from_str("{ preset: llama3-8b, position_embedding_type: alibi }");
    let msg = bad.unwrap_err().to_string();
    assert!(msg.contains("alibi") && msg.contains("rope"), "{msg}");
}

/// Sum of the bytes of the ops in `ops` named one of `names`, and their count.
fn traffic(ops: &[OpSpec], names: &[&str]) -> (f64, usize) {
    let v: Vec<&OpSpec> = ops.iter().filter(|o| names.contains(&o.name)).collect();
    (v.iter().map(|o| bytes(o)).sum(), v.len())
}

#[test]
fn eager_rope_counts_automodels_kernels() {
    // GPT-OSS-20B (64 query, 8 key heads of 64), TP 1: `rotate_half` RoPE on q and k, forward 7
    // kernels and 9 tensor sizes each, backward 8 kernels and 10 sizes; the fused kernel's 2.
    let m = preset("gpt-oss-20b").unwrap();
    let fused = training();
    let eager = TrainingConfig {
        rope_fusion: false,
        ..training()
    };
    let p = plan(&m, &fused, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let tok = fused.micro_batch_size * fused.seq_length;
    let dt = fused.dtype.bytes() as f64;
    let (q, k) = ((tok * 64 * 64) as f64 * dt, (tok * 8 * 64) as f64 * dt);
    let layer = transformer_layer(&m, &eager, &p, 0);
    assert!(one(&layer.forward, "rope").is_none() && one(&layer.backward, "rope_bwd").is_none());
    assert_eq!(traffic(&layer.forward, &["rope_q"]), (9.0 * q, 7));
    assert_eq!(traffic(&layer.forward, &["rope_k"]), (9.0 * k, 7));
    assert_eq!(traffic(&layer.backward, &["rope_q_bwd"]), (10.0 * q, 8));
    assert_eq!(traffic(&layer.backward, &["rope_k_bwd"]), (10.0 * k, 8));
    let f = transformer_layer(&m, &fused, &p, 0);
    assert_eq!(bytes(one(&f.forward, "rope").unwrap()), 2.0 * (q + k));
    // Between the projection and the attention kernel.
    let pos = |n: &str| layer.forward.iter().position(|o| o.name == n).unwrap();
    assert!(pos("attn_qkv") < pos("rope_q") && pos("rope_k") < pos("core_attention"));
}

#[test]
fn eager_mla_assembles_its_heads_in_copies() {
    // DeepSeek-V3, TP 1: 128 heads, RoPE 64, no-RoPE 128, v 128, latent 512 (bf16).
    let m = preset("deepseek-v3").unwrap();
    let mla = m.mla.clone().unwrap();
    assert_eq!(
        (mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim, mla.kv_lora_rank),
        (64, 128, 128, 512)
    );
    let eager = TrainingConfig {
        rope_fusion: false,
        ..training()
    };
    let p = plan(&m, &eager, 32, "{ tp: 1, pp: 1, ep: 32 }");
    let layer = transformer_layer(&m, &eager, &p, 3);
    let t = (eager.micro_batch_size * eager.seq_length) as f64;
    let th = t * 128.0;
    // Complex RoPE: 20 bytes an element (2 -> 4, 4 -> 4, 4 -> 2), 3 kernels each way.
    assert_eq!(traffic(&layer.forward, &["rope_q"]), (20.0 * th * 64.0, 3));
    assert_eq!(traffic(&layer.backward, &["rope_q_bwd"]), (20.0 * th * 64.0, 3));
    assert_eq!(traffic(&layer.forward, &["rope_k"]), (20.0 * t * 64.0, 3));
    // The copies, bytes read plus written per token and head (Automodel's MLA at 8d9bfb90e).
    let one_bytes = |ops: &[OpSpec], n: &str| bytes(one(ops, n).unwrap_or_else(|| panic!("{n}")));
    assert_eq!(one_bytes(&layer.forward, "mla_cat_q"), 768.0 * th);
    assert_eq!(one_bytes(&layer.forward, "mla_cat_k"), 640.0 * th);
    assert_eq!(one_bytes(&layer.forward, "mla_v_contiguous"), 512.0 * th);
    assert_eq!(one_bytes(&layer.forward, "mla_latent_contiguous"), 2048.0 * t);
    assert_eq!(one_bytes(&layer.backward, "mla_cat_q_bwd"), 768.0 * th);
    assert_eq!(one_bytes(&layer.backward, "mla_k_rope_sum_bwd"), 128.0 * th);
    assert_eq!(one_bytes(&layer.backward, "mla_cat_kv_bwd"), 1024.0 * th);
    assert_eq!(one_bytes(&layer.backward, "mla_cat_latent_bwd"), 4.0 * 576.0 * t);
    // Fused (the default): one RoPE kernel, none of the copies.
    let f = transformer_layer(&m, &training(), &p, 3);
    assert!(one(&f.forward, "rope").is_some());
    assert!(f.forward.iter().chain(&f.backward).all(|o| !o.name.starts_with("mla_")));
}
