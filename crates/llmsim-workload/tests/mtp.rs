//! Multi-token prediction (`training.mtp_num_layers`, Megatron-Core `MultiTokenPredictionBlock`):
//! what each depth runs, where, and what it holds.

mod common;
use common::plan;

use llmsim_compute::DType;
use llmsim_workload::memory::footprint;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{LayerOps, embedding, head, mtp, mtp_params, stage_param_split, transformer_layer};
use llmsim_workload::{ModelConfig, OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

fn flops(ops: &[OpSpec]) -> f64 {
    ops.iter()
        .map(|o| match o.kind {
            OpSpecKind::Compute { flops, .. } => flops,
            _ => 0.0,
        })
        .sum()
}

fn names(ops: &[OpSpec]) -> Vec<&str> {
    ops.iter().map(|o| o.name).collect()
}

/// A small DeepSeek-V3-like model: MLA, 1 dense layer then MoE layers, untied embeddings.
fn small_moe() -> ModelConfig {
    let mut m = preset("deepseek-v3").unwrap();
    m.num_hidden_layers = 4;
    m.first_k_dense_layers = 1;
    m.num_experts = 16;
    m.num_experts_per_tok = 2;
    m.num_nextn_predict_layers = 1;
    m
}

fn training(mtp: u64) -> TrainingConfig {
    TrainingConfig {
        seq_length: 1024,
        micro_batch_size: 1,
        global_batch_size: 16,
        mtp_num_layers: mtp,
        ..TrainingConfig::default()
    }
}

#[test]
fn no_mtp_by_default_and_nothing_runs() {
    let m = small_moe();
    let t = TrainingConfig::default();
    assert_eq!(t.mtp_num_layers, 0, "Megatron's default: no MTP, whatever the checkpoint holds");
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let o = mtp(&m, &t, &p);
    assert!(o.forward.is_empty() && o.backward.is_empty());
    assert_eq!(mtp_params(&m, &p).total(), 0);
}

#[test]
fn each_depth_is_an_embedding_a_projection_a_block_and_a_head() {
    let m = small_moe();
    for depths in [1u64, 2] {
        let t = training(depths);
        let p = plan(&m, &t, 8, "{ tp: 2, pp: 1, ep: 4, sequence_parallel: true }");
        let o = mtp(&m, &t, &p);
        let layer = transformer_layer(&m, &t, &p, m.num_hidden_layers);
        let last = transformer_layer(&m, &t, &p, m.num_hidden_layers - 1);
        // The block is a decoder layer like the last (MoE here).
        assert_eq!(names(&layer.forward), names(&last.forward));
        let (emb, out) = (embedding(&m, &t, &p), head(&m, &t, &p));
        let tok = (t.micro_batch_size * t.seq_length) as f64;
        let (h, tp) = (m.hidden_size as f64, p.tp as f64);
        // eh_proj: [tokens, 2h] x [2h, h/tp], forward; dgrad and wgrad the same each.
        let proj = 2.0 * tok * (2.0 * h) * (h / tp);
        let per_depth = flops(&emb.forward) + flops(&layer.forward) + flops(&out.forward) + proj;
        let fwd = flops(&o.forward);
        assert!(
            (fwd - depths as f64 * per_depth).abs() <= 1e-6 * fwd + 4.0 * depths as f64 * tok * h,
            "{depths} depths: forward {fwd} against {per_depth} a depth (norms and the copy aside)"
        );
        // The projection's TP collectives: the SP input gather (2h wide), the output gather.
        let fwd_names = names(&o.forward);
        for n in [
            "mtp_enorm",
            "mtp_hnorm",
            "mtp_concat",
            "mtp_eh_proj",
            "mtp_eh_proj_gather",
            "mtp_eh_proj_sp_allgather",
        ] {
            assert_eq!(fwd_names.iter().filter(|x| **x == n).count() as u64, depths, "{n}");
        }
        // Backward: the last depth's head first, the first depth's embedding gradient last.
        assert_eq!(o.backward.first().map(|x| x.name), out.backward.first().map(|x| x.name));
        assert_eq!(o.backward.last().map(|x| x.name), emb.backward.last().map(|x| x.name));
        let bwd_names = names(&o.backward);
        assert_eq!(bwd_names.iter().filter(|x| **x == "mtp_eh_proj_dgrad").count() as u64, depths);
        assert_eq!(bwd_names.iter().filter(|x| **x == "mtp_sp_scatter_bwd").count() as u64, depths);
    }
}

#[test]
fn a_repeated_block_holds_one_blocks_weights_and_runs_every_depth() {
    let m = small_moe();
    let one = training(1);
    let two = training(2);
    let rep = TrainingConfig {
        mtp_repeated_layer: true,
        ..training(2)
    };
    let p1 = plan(&m, &one, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let p2 = plan(&m, &two, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let pr = plan(&m, &rep, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let (w1, w2, wr) = (mtp_params(&m, &p1), mtp_params(&m, &p2), mtp_params(&m, &pr));
    assert!(w1.dense > 0 && w1.expert > 0, "a block of an MoE model has both");
    assert_eq!(w2.total(), 2 * w1.total());
    assert_eq!(wr, w1);
    // Unsharded (tp 1, ep 1 in the count), one block is the checkpoint's module count.
    let p_ep1 = plan(&m, &one, 1, "{ tp: 1, pp: 1, ep: 1 }");
    assert_eq!(mtp_params(&m, &p_ep1).total(), m.mtp_block_param_count());
    let f = |t: &TrainingConfig, p: &ParallelConfig| flops(&mtp(&m, t, p).forward);
    assert_eq!(f(&rep, &pr), f(&two, &p2), "the compute of every depth");
    assert!((f(&two, &p2) - 2.0 * f(&one, &p1)).abs() < 1e-6 * f(&two, &p2));
}

#[test]
fn mtp_lives_on_the_output_layers_stage_with_an_embedding_copy() {
    let m = small_moe();
    let (t0, t1) = (training(0), training(1));
    let yaml = "{ tp: 1, pp: 2, ep: 4, pipeline_layers: [2, 2] }";
    let (p0, p1) = (plan(&m, &t0, 8, yaml), plan(&m, &t1, 8, yaml));
    let first = |p: &ParallelConfig| stage_param_split(&m, p, 0);
    let last = |p: &ParallelConfig| stage_param_split(&m, p, 1);
    assert_eq!(first(&p0), first(&p1), "nothing on the first stage");
    let emb = llmsim_workload::ops::padded_vocab(&m, 1) * m.hidden_size;
    let w = mtp_params(&m, &p1);
    assert_eq!(
        last(&p1).dense,
        last(&p0).dense + w.dense + emb,
        "the blocks and an untied embedding copy"
    );
    assert_eq!(last(&p1).expert, last(&p0).expert + w.expert);
    // A tied model uses the copy its head stage already has.
    let mut tied = m.clone();
    tied.tie_word_embeddings = true;
    let (q0, q1) = (plan(&tied, &t0, 8, yaml), plan(&tied, &t1, 8, yaml));
    assert_eq!(
        stage_param_split(&tied, &q1, 1).dense,
        stage_param_split(&tied, &q0, 1).dense + mtp_params(&tied, &q1).dense
    );
}

#[test]
fn mtp_costs_memory_on_the_head_stage() {
    let m = small_moe();
    let (t0, t1) = (training(0), training(1));
    let (p0, p1) = (
        plan(&m, &t0, 8, "{ tp: 1, pp: 1, ep: 8 }"),
        plan(&m, &t1, 8, "{ tp: 1, pp: 1, ep: 8 }"),
    );
    let (a, b) = (footprint(&m, &t0, &p0), footprint(&m, &t1, &p1));
    assert!(b.activations > a.activations, "the block's activations and a second set of logits");
    assert!(b.parameters > a.parameters && b.optimizer_states > a.optimizer_states);
}

#[test]
fn mtp_bf16_keeps_the_blocks_out_of_fp8() {
    let m = small_moe();
    let fp8 = TrainingConfig {
        dtype: DType::Fp8,
        ..training(1)
    };
    let keep = TrainingConfig {
        mtp_bf16: true,
        ..fp8.clone()
    };
    let p = plan(&m, &fp8, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let casts = |o: &LayerOps| o.iter().filter(|x| x.name.starts_with("fp8_cast")).count();
    let gemm_dtypes =
        |o: &LayerOps| -> Vec<Option<DType>> { o.forward.iter().filter(|x| x.name == "mtp_eh_proj").map(|x| x.dtype).collect() };
    let (a, b) = (mtp(&m, &fp8, &p), mtp(&m, &keep, &p));
    assert!(casts(&a) > 0, "an FP8 block casts its GEMM inputs");
    assert_eq!(casts(&b), 0, "a BF16 block does not");
    assert_ne!(gemm_dtypes(&a), gemm_dtypes(&b));
}

#[test]
fn a_hybrid_models_block_follows_its_mtp_pattern() {
    let mut m = preset("nemotron-3-nano-30b-a3b").unwrap();
    m.num_nextn_predict_layers = 1;
    let t = TrainingConfig {
        mtp_repeated_layer: true,
        ..training(2)
    };
    // Without the pattern the plan is refused, naming the field.
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1, ep: 8 }").unwrap();
    let e = p.resolve(8, &m, &t).unwrap_err().to_string();
    assert!(e.contains("model.mtp_hybrid_override_pattern"), "{e}");
    m.mtp_hybrid_override_pattern = Some("*E".into());
    m.validate().unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    let o = mtp(&m, &t, &p);
    let l = m.num_hidden_layers;
    let (attn, moe) = (transformer_layer(&m, &t, &p, l), transformer_layer(&m, &t, &p, l + 1));
    assert!(names(&attn.forward).contains(&"core_attention") && !names(&attn.forward).iter().any(|n| n.starts_with("expert")));
    assert!(names(&moe.forward).iter().any(|n| n.starts_with("expert_fc1")));
    let expect = 2.0 * (flops(&attn.forward) + flops(&moe.forward));
    assert!(flops(&o.forward) > expect, "two depths of both layers, plus projections and heads");
    // The checkpoint's block: both layers' parameters, the projection, three norms.
    let h = m.hidden_size;
    let layers: u64 = [l, l + 1]
        .iter()
        .map(|&i| {
            let lp = llmsim_workload::ops::layer_params(&m, &plan(&m, &t, 1, "{ tp: 1, pp: 1, ep: 1 }"), i);
            lp.dense + lp.expert
        })
        .sum();
    assert_eq!(m.mtp_block_param_count(), layers + 2 * h * h + 3 * h);
    // A bad pattern character names the field.
    m.mtp_hybrid_override_pattern = Some("*X".into());
    assert!(m.validate().unwrap_err().to_string().contains("model.mtp_hybrid_override_pattern"));
}
