//! GPT-OSS's expert MLP as the frameworks run it: the fc2 bias added by a Python loop over the
//! local experts, the clamp of the gated activation's inputs and the blocking host copy before
//! Megatron-Core's fused activation, and NeMo Automodel's own loops (`parallel.moe_experts`).
//! Counted from the code (megatron-core 0.15/0.16 `transformer/moe/experts.py`,
//! `fusions/fused_bias_geglu.py`; Automodel 8d9bfb90e `components/moe/layers.py`).

mod common;
use common::plan;

use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{ModelConfig, MoeExperts, OpSpec, OpSpecKind, Pass, Recompute, RecomputeModule, TrainingConfig, megatron};

fn bytes(op: &OpSpec) -> f64 {
    match op.kind {
        OpSpecKind::Compute { bytes, .. } => bytes,
        _ => panic!("{} is not a kernel", op.name),
    }
}

fn count(ops: &[OpSpec], name: &str) -> usize {
    ops.iter().filter(|o| o.name == name).count()
}

fn sum_bytes(ops: &[OpSpec], prefix: &str) -> f64 {
    ops.iter().filter(|o| o.name.starts_with(prefix)).map(bytes).sum()
}

fn training() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 64,
        ..TrainingConfig::default()
    }
}

/// Tokens routed to one rank's experts and the elements of fc2's output over them.
fn routed(m: &ModelConfig, t: &TrainingConfig) -> (f64, f64) {
    let et = (t.micro_batch_size * t.seq_length * m.num_experts_per_tok) as f64;
    (et, et * m.hidden_size as f64)
}

#[test]
fn megatron_gpt_oss_layer_loops_over_the_local_experts_and_syncs_once() {
    let m = preset("gpt-oss-120b").unwrap();
    assert_eq!(m.swiglu_limit, Some(7.0), "openai/gpt-oss-120b config.json swiglu_limit");
    let t = training();
    // EP 8: 128 experts, 16 on each rank.
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8, etp: 1 }");
    assert_eq!(p.moe_experts, MoeExperts::Megatron, "the default");
    let local = 16;
    let l = transformer_layer(&m, &t, &p, 0);
    let (f, b) = (&l.forward, &l.backward);
    // Forward: `b * p` and `t + ...` per expert, one `cat`; no cast (bf16 probabilities).
    assert_eq!(count(f, "expert_fc2_bias_scale"), local);
    assert_eq!(count(f, "expert_fc2_bias_add"), local);
    assert_eq!(count(f, "expert_fc2_bias_cat"), 1);
    assert_eq!(count(f, "expert_fc2_bias_cast"), 0);
    // Backward: two products and two reductions per expert, the split's concatenation, and the
    // DDP hook's main_grad add for fc1's and fc2's bias of each expert.
    for name in [
        "expert_fc2_bias_dbias_mul",
        "expert_fc2_bias_dbias_sum",
        "expert_fc2_bias_dprob_mul",
        "expert_fc2_bias_dprob_sum",
    ] {
        assert_eq!(count(b, name), local, "{name}");
    }
    assert_eq!(count(b, "expert_fc2_split_bwd"), 1);
    assert_eq!(count(b, "expert_bias_grad_acc"), 2 * local);
    // Bytes per element of fc2's [routed, h] output, bf16: b*p writes 2, the add reads 4 and
    // writes 2, the cat reads and writes 2 each: 12; the broadcast operands add a little.
    let (_, elems) = routed(&m, &t);
    let fwd = sum_bytes(f, "expert_fc2_bias") / elems;
    assert!((12.0..12.01).contains(&fwd), "{fwd} B per element forward");
    // Backward: two products (read 2, write 2) and two reductions (read 2), the split's cat
    // (read 2, write 2): 16.
    let bwd = (sum_bytes(b, "expert_fc2_bias") + sum_bytes(b, "expert_fc2_split_bwd")) / elems;
    assert!((16.0..16.01).contains(&bwd), "{bwd} B per element backward");

    // The clamp: two kernels and a concatenation before the fused activation, which the host
    // issues only after the GPU drained (the blocking scalar copy); the only syncing op.
    let pos = |n: &str| f.iter().position(|o| o.name == n).unwrap();
    assert_eq!(count(f, "expert_act_clamp"), 2);
    assert!(pos("expert_fc1") < pos("expert_act_clamp") && pos("expert_act_clamp_cat") < pos("expert_act"));
    assert!(pos("expert_act") < pos("expert_fc2") && pos("expert_fc2") < pos("expert_fc2_bias_scale"));
    let syncs: Vec<&str> = f.iter().chain(b).filter(|o| o.host_sync).map(|o| o.name).collect();
    assert_eq!(syncs, ["expert_act"]);
    assert_eq!(count(b, "expert_act_clamp_bwd"), 2);
    assert_eq!(count(b, "expert_act_clamp_cat_bwd"), 1);
    // Clamp traffic per element of one half ([routed, ffn]): 2 + 2 + 4 forward, 3 + 3 + 4
    // backward, in bytes per bf16 element pair.
    let half = routed(&m, &t).0 * m.moe_intermediate_size as f64;
    let clamp_f: f64 = f.iter().filter(|o| o.name.starts_with("expert_act_clamp")).map(bytes).sum::<f64>() / half;
    let clamp_b: f64 = b.iter().filter(|o| o.name.starts_with("expert_act_clamp")).map(bytes).sum::<f64>() / half;
    assert_eq!((clamp_f, clamp_b), (16.0, 20.0));

    // Recomputing the activation (`recompute_modules: [moe_act]`) repeats the clamp and the sync.
    let tr = TrainingConfig {
        recompute: Recompute::Selective,
        recompute_modules: vec![RecomputeModule::MoeAct],
        ..training()
    };
    let lr = transformer_layer(&m, &tr, &p, 0);
    let re: Vec<&OpSpec> = lr.backward.iter().filter(|o| o.pass == Pass::Recompute).collect();
    assert_eq!(re.iter().filter(|o| o.name == "expert_act_clamp").count(), 2);
    assert_eq!(
        re.iter().filter(|o| o.host_sync).map(|o| o.name).collect::<Vec<_>>(),
        ["expert_act"]
    );
}

#[test]
fn flex_dispatch_carries_fp32_probabilities_into_the_bias() {
    let m = preset("gpt-oss-120b").unwrap();
    let t = training();
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8, etp: 1, moe_token_dispatcher: flex }");
    let l = transformer_layer(&m, &t, &p, 0);
    let (_, elems) = routed(&m, &t);
    // FP32 b*p (write 4), add (read 2 + 4, write 4), cat (4 + 4), cast back (4 + 2): 28.
    let fwd = sum_bytes(&l.forward, "expert_fc2_bias") / elems;
    assert!((28.0..28.01).contains(&fwd), "{fwd}");
    assert_eq!(count(&l.forward, "expert_fc2_bias_cast"), 1);
    // The cast's gradient (2 + 4), per expert its rows' cast back (4 + 2), products (8 each),
    // reductions (4 each), the split's cat (2 + 2): 40.
    let bwd = (sum_bytes(&l.backward, "expert_fc2_bias") + sum_bytes(&l.backward, "expert_fc2_split_bwd")) / elems;
    assert!((40.0..40.01).contains(&bwd), "{bwd}");
}

#[test]
fn automodel_has_its_own_loops_and_no_clamp_or_sync() {
    let m = preset("gpt-oss-20b").unwrap();
    let t = training();
    // EP 8 over 32 experts: 4 local.
    let p = plan(
        &m,
        &t,
        8,
        "{ tp: 1, pp: 1, ep: 8, moe_token_dispatcher: flex, moe_routing: round_robin, moe_experts: automodel }",
    );
    let l = transformer_layer(&m, &t, &p, 0);
    let (f, b) = (&l.forward, &l.backward);
    assert!(f.iter().chain(b).all(|o| !o.host_sync && !o.name.starts_with("expert_act_clamp")));
    assert_eq!(count(f, "expert_fc1_bias_add"), 4);
    assert_eq!(count(f, "expert_fc1_bias_cat"), 1);
    assert_eq!(count(b, "expert_fc1_bias_dbias_sum"), 4);
    assert_eq!(count(f, "expert_fc2_bias_scale"), 4);
    assert_eq!(count(b, "expert_bias_grad_acc"), 0, "FSDP2: no Megatron DDP hook");
    // fc1's loop per element of its [routed, 2·ffn] output: add (2 + 2), cat (2 + 2).
    let fc1 = routed(&m, &t).0 * 2.0 * m.moe_intermediate_size as f64;
    let per = sum_bytes(f, "expert_fc1_bias") / fc1;
    assert!((8.0..8.01).contains(&per), "{per}");
}

#[test]
fn models_without_biases_or_clamp_are_unchanged() {
    let m = preset("qwen3-30b-a3b").unwrap();
    assert!(!m.mlp_bias && m.swiglu_limit.is_none());
    let t = training();
    for experts in ["megatron", "automodel"] {
        let p = plan(&m, &t, 8, &format!("{{ tp: 1, pp: 1, ep: 8, moe_experts: {experts} }}"));
        let l = transformer_layer(&m, &t, &p, 0);
        assert!(
            l.forward
                .iter()
                .chain(&l.backward)
                .all(|o| !o.host_sync && !o.name.contains("bias") && !o.name.contains("clamp"))
        );
    }
}

#[test]
fn a_syncing_op_starts_a_segment() {
    let m = ModelConfig {
        num_hidden_layers: 2,
        ..preset("gpt-oss-20b").unwrap()
    };
    let t = TrainingConfig {
        seq_length: 1024,
        micro_batch_size: 1,
        global_batch_size: 8,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8 }");
    let wl = megatron::generate(&m, &t, &p).unwrap();
    let mut starts = 0;
    for s in &wl.segments {
        for (i, o) in s.ops.iter().enumerate() {
            if o.host_sync {
                assert_eq!(i, 0, "segment {} has the syncing {} at {i}", s.name, o.name);
                starts += 1;
            }
        }
    }
    assert!(starts >= 1, "the activation's segment");
}

#[test]
fn shared_experts_output_is_added_to_the_routed_output_once() {
    // DeepSeek-V3: one shared expert; the layer's output [b·s, h] bf16: read two, write one.
    let m = preset("deepseek-v3").unwrap();
    let t = training();
    let p = plan(&m, &t, 64, "{ tp: 1, pp: 1, ep: 64 }");
    let l = transformer_layer(&m, &t, &p, m.first_k_dense_layers);
    assert_eq!(count(&l.forward, "moe_shared_add"), 1);
    let add = l.forward.iter().find(|o| o.name == "moe_shared_add").unwrap();
    let e = (t.micro_batch_size * t.seq_length * m.hidden_size) as f64;
    assert_eq!(bytes(add), 3.0 * e * 2.0);
    let pos = |n: &str| l.forward.iter().position(|o| o.name == n).unwrap();
    assert!(pos("moe_unpermute") < pos("moe_shared_add") && pos("shared_fc2") < pos("moe_shared_add"));
    // Without shared experts there is nothing to add.
    let q = preset("qwen3-30b-a3b").unwrap();
    let lq = transformer_layer(&q, &t, &plan(&q, &t, 8, "{ tp: 1, pp: 1, ep: 8 }"), 0);
    assert_eq!(count(&lq.forward, "moe_shared_add"), 0);
}
