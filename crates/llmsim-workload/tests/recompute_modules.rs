//! Selective recomputation of submodules (`training.recompute_modules`, Megatron-Core
//! `--recompute-modules`): each module's forward ops re-run before the backward, and each frees
//! its saved activations.

use llmsim_workload::memory::layer_activation_bytes;
use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{ModelConfig, ParallelConfig, Pass, Recompute, RecomputeModule, TrainingConfig};

fn plan(m: &ModelConfig, t: &TrainingConfig, gpus: u64, yaml: &str) -> Result<ParallelConfig, llmsim_workload::WorkloadError> {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    p.resolve(gpus, m, t)
}

fn with(modules: &[RecomputeModule]) -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        global_batch_size: 64,
        recompute: Recompute::Selective,
        recompute_modules: modules.to_vec(),
        ..TrainingConfig::default()
    }
}

/// Names of the ops re-run before the backward.
fn recomputed(m: &ModelConfig, t: &TrainingConfig, p: &ParallelConfig, layer: u64) -> Vec<&'static str> {
    transformer_layer(m, t, p, layer)
        .backward
        .iter()
        .filter(|o| o.pass == Pass::Recompute)
        .map(|o| o.name)
        .collect()
}

#[test]
fn each_module_reruns_its_own_ops() {
    use RecomputeModule::*;
    let dense = preset("llama3-8b").unwrap();
    let moe = preset("deepseek-v3").unwrap();
    let base = with(&[]);
    let pd = plan(&dense, &base, 8, "{ tp: 1 }").unwrap();
    let pm = plan(&moe, &base, 64, "{ tp: 1, ep: 64 }").unwrap();
    let moe_layer = (0..moe.num_hidden_layers).find(|l| moe.is_moe(*l)).unwrap();
    // `selective` alone is core attention; `[core_attn]` is the same.
    assert_eq!(recomputed(&dense, &base, &pd, 0), vec!["core_attention"]);
    assert_eq!(recomputed(&dense, &with(&[CoreAttn]), &pd, 0), vec!["core_attention"]);
    // In backward order: the pre-MLP norm's re-run comes first.
    assert_eq!(
        recomputed(&dense, &with(&[Layernorm]), &pd, 0),
        vec!["post_attn_norm", "input_norm"]
    );
    let mlp = recomputed(&dense, &with(&[Mlp]), &pd, 0);
    assert!(
        mlp.contains(&"mlp_fc1") && mlp.contains(&"mlp_act") && mlp.contains(&"mlp_fc2"),
        "{mlp:?}"
    );
    assert!(!mlp.iter().any(|n| n.starts_with("attn") || n.starts_with("core")), "{mlp:?}");
    assert_eq!(recomputed(&moe, &with(&[MoeAct]), &pm, moe_layer), vec!["expert_act"]);
    let up = recomputed(&moe, &with(&[MlaUpProj]), &pm, moe_layer);
    assert_eq!(up, vec!["attn_kv_up", "attn_q_up"], "each before its own backward");
    let shared = recomputed(&moe, &with(&[SharedExperts]), &pm, moe_layer);
    assert!(shared.iter().all(|n| n.starts_with("shared_")) && shared.len() == 3, "{shared:?}");
    // The whole MoE block: router, dispatch, experts, combine, shared experts.
    let block = recomputed(&moe, &with(&[Moe]), &pm, moe_layer);
    for op in ["moe_router", "ep_dispatch", "expert_fc1", "expert_act", "ep_combine", "shared_fc1"] {
        assert!(block.contains(&op), "{op} not in {block:?}");
    }
    // Modules that a layer lacks re-run nothing.
    assert!(recomputed(&dense, &with(&[MoeAct, MlaUpProj]), &pd, 0).is_empty());
    // Recomputing adds FLOPs and never removes any.
    let f = |t: &TrainingConfig| transformer_layer(&dense, t, &pd, 0).flops();
    assert!(f(&with(&[Mlp])) > f(&with(&[CoreAttn])));
}

/// Megatron-Core re-runs a selectively recomputed submodule when the backward reaches it, not at
/// the start of the layer's backward: under `tensor_parallel.checkpoint` (core attention, the
/// MLP) just before its own backward; under `CheckpointWithoutOutput` (norms, the experts'
/// activation) from a hook on its reader's output, before the reader's backward. Full
/// recomputation re-runs the whole layer first.
#[test]
fn a_module_reruns_where_the_backward_reaches_it() {
    use RecomputeModule::*;
    let dense = preset("llama3-8b").unwrap();
    let base = with(&[]);
    let pd = plan(&dense, &base, 8, "{ tp: 1 }").unwrap();
    let names = |t: &TrainingConfig| -> Vec<(&'static str, Pass)> {
        transformer_layer(&dense, t, &pd, 0)
            .backward
            .iter()
            .map(|o| (o.name, o.pass))
            .collect()
    };
    let at = |v: &[(&str, Pass)], name: &str, pass: Pass| v.iter().position(|x| *x == (name, pass)).unwrap();
    for (modules, op, next) in [
        (vec![CoreAttn], "core_attention", "core_attention_bwd"),
        (vec![Layernorm], "post_attn_norm", "mlp_fc1_dgrad"),
        (vec![Layernorm], "input_norm", "attn_qkv_dgrad"),
    ] {
        let v = names(&with(&modules));
        let r = at(&v, op, Pass::Recompute);
        assert_eq!(v[r + 1].0, next, "{op}: {v:?}");
    }
    // The experts' activation re-runs before fc2's backward (its hook is on fc2's output).
    let moe = preset("deepseek-v3").unwrap();
    let pm = plan(&moe, &base, 64, "{ tp: 1, ep: 64 }").unwrap();
    let l = (0..moe.num_hidden_layers).find(|l| moe.is_moe(*l)).unwrap();
    let v: Vec<(&str, Pass)> = transformer_layer(&moe, &with(&[MoeAct]), &pm, l)
        .backward
        .iter()
        .map(|o| (o.name, o.pass))
        .collect();
    let act = at(&v, "expert_act", Pass::Recompute);
    assert!(act < at(&v, "expert_fc2_dgrad", Pass::BackwardInput) && act > at(&v, "moe_unpermute_bwd", Pass::BackwardInput));
    // Core attention re-runs after the MLP's backward.
    let v = names(&with(&[CoreAttn]));
    assert!(at(&v, "core_attention", Pass::Recompute) > at(&v, "mlp_fc1_dgrad", Pass::BackwardInput));
    // A run of recomputed submodules (the MLP's GEMMs and activation) re-runs in forward order
    // before the backward of its last one.
    let v = names(&with(&[Mlp]));
    let (fc1, fc2) = (at(&v, "mlp_fc1", Pass::Recompute), at(&v, "mlp_fc2", Pass::Recompute));
    assert!(fc1 < fc2 && fc2 < at(&v, "mlp_fc2_dgrad", Pass::BackwardInput));
    // Full recomputation: the whole forward first.
    let full = TrainingConfig {
        recompute: Recompute::Full,
        recompute_modules: vec![],
        ..base.clone()
    };
    let v = names(&full);
    let first_bwd = v.iter().position(|x| x.1 != Pass::Recompute).unwrap();
    assert!(v[first_bwd..].iter().all(|x| x.1 != Pass::Recompute));
}

#[test]
fn each_module_frees_activations() {
    use RecomputeModule::*;
    let moe = preset("deepseek-v3").unwrap();
    let dense = preset("llama3-70b").unwrap();
    let none = TrainingConfig {
        recompute: Recompute::None,
        ..with(&[])
    };
    let pm = plan(&moe, &none, 64, "{ tp: 1, ep: 64 }").unwrap();
    let pd = plan(&dense, &none, 8, "{ tp: 8, sequence_parallel: true }").unwrap();
    let moe_layer = (0..moe.num_hidden_layers).find(|l| moe.is_moe(*l)).unwrap();
    let am = |t: &TrainingConfig| layer_activation_bytes(&moe, t, &pm, moe_layer);
    let ad = |t: &TrainingConfig| layer_activation_bytes(&dense, t, &pd, 0);
    for module in [Layernorm, MlaUpProj, MoeAct, SharedExperts, Moe] {
        assert!(am(&with(&[module])) < am(&none), "{module:?}");
    }
    assert!(am(&with(&[Moe])) < am(&with(&[MoeAct, SharedExperts])));
    for module in [Layernorm, Mlp] {
        assert!(ad(&with(&[module])) < ad(&none), "{module:?}");
    }
    // More modules, less memory.
    assert!(am(&with(&[MlaUpProj, MoeAct])) < am(&with(&[MlaUpProj])));
    // Full recomputation with a module list is a contradiction, named.
    let bad = TrainingConfig {
        recompute: Recompute::Full,
        ..with(&[Mlp])
    };
    let e = plan(&dense, &bad, 8, "{ tp: 8, sequence_parallel: true }").unwrap_err().to_string();
    assert!(e.contains("training.recompute_modules"), "{e}");
}
