//! The flex (DeepEP / HybridEP) dispatcher sends a token once per EP rank holding one of its
//! experts: the expected number of such ranks per token, by routing, against brute force.

use llmsim_workload::MoeRouting;

/// Average over every k-subset of e experts of the ranks it touches (e / ep experts per rank).
fn brute_random(e: u64, k: u64, ep: u64) -> f64 {
    let local = e / ep;
    let (mut sum, mut n) = (0u64, 0u64);
    for mask in 0u64..(1 << e) {
        if mask.count_ones() as u64 != k {
            continue;
        }
        let ranks: std::collections::BTreeSet<u64> = (0..e).filter(|i| mask >> i & 1 == 1).map(|i| i / local).collect();
        sum += ranks.len() as u64;
        n += 1;
    }
    sum as f64 / n as f64
}

/// Automodel's `FakeBalancedGate` (noise 0): token t's experts are (t·k + j) mod e, j < k.
fn brute_round_robin(e: u64, k: u64, ep: u64, tokens: u64) -> f64 {
    let local = e / ep;
    let sum: u64 = (0..tokens)
        .map(|t| {
            let ranks: std::collections::BTreeSet<u64> = (0..k).map(|j| ((t * k + j) % e) / local).collect();
            ranks.len() as u64
        })
        .sum();
    sum as f64 / tokens as f64
}

#[test]
fn random_routing_matches_enumeration() {
    for (e, k, ep) in [(8, 2, 4), (12, 3, 4), (16, 4, 8), (16, 2, 2), (12, 12, 3), (10, 1, 5)] {
        let got = MoeRouting::Random.ranks_per_token(e, k, ep);
        let want = brute_random(e, k, ep);
        assert!((got - want).abs() < 1e-9, "e {e} k {k} ep {ep}: {got} vs {want}");
    }
}

#[test]
fn round_robin_routing_matches_the_gate() {
    // Qwen3-30B on EP8 (one rank per token), DeepSeek-V3 on EP64 (two), GPT-OSS-120B on EP64,
    // and shapes whose windows straddle ranks unevenly.
    for (e, k, ep) in [(128, 8, 8), (256, 8, 64), (128, 4, 64), (32, 3, 8), (24, 5, 6), (60, 4, 12)] {
        let got = MoeRouting::RoundRobin.ranks_per_token(e, k, ep);
        // Over a whole number of periods (e tokens cover every start).
        let want = brute_round_robin(e, k, ep, e * 7);
        assert!((got - want).abs() < 1e-9, "e {e} k {k} ep {ep}: {got} vs {want}");
    }
    assert_eq!(MoeRouting::RoundRobin.ranks_per_token(128, 8, 8), 1.0);
    assert_eq!(MoeRouting::RoundRobin.ranks_per_token(256, 8, 64), 2.0);
}

#[test]
fn a_token_reaches_at_least_one_and_at_most_min_k_ep_ranks() {
    for routing in [MoeRouting::Random, MoeRouting::RoundRobin] {
        for (e, k, ep) in [(128, 8, 8), (256, 8, 64), (64, 6, 64), (8, 2, 1), (160, 6, 16)] {
            let r = routing.ranks_per_token(e, k, ep);
            assert!(
                r >= 1.0 - 1e-12 && r <= k.min(ep) as f64 + 1e-12,
                "{routing:?} e {e} k {k} ep {ep}: {r}"
            );
        }
    }
}

/// Layer 0 of Qwen3-30B-A3B on 8 GPUs (128 experts, top-8; 4,096 tokens a micro-batch) under the
/// `parallel` section `yaml`.
fn qwen3_layer(yaml: &str) -> llmsim_workload::LayerOps {
    use llmsim_workload::model::preset;
    use llmsim_workload::ops::transformer_layer;
    use llmsim_workload::{ParallelConfig, TrainingConfig};
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    transformer_layer(&m, &t, &p, 0)
}

#[test]
fn the_flex_dispatcher_moves_one_copy_per_destination_rank() {
    use llmsim_workload::OpSpecKind;
    // Qwen3-30B-A3B on 8 GPUs with EP 8: 128 experts, 16 per rank, top-8.
    let dispatch = |yaml: &str| -> u64 {
        let layer = qwen3_layer(yaml);
        let op = layer.forward.iter().find(|o| o.name == "ep_dispatch").expect("a dispatch");
        match op.kind {
            OpSpecKind::Comm { bytes, .. } => bytes,
            _ => unreachable!(),
        }
    };
    let copies = dispatch("{ ep: 8, etp: 1 }");
    let random = dispatch("{ ep: 8, etp: 1, moe_token_dispatcher: flex }");
    let rr = dispatch("{ ep: 8, etp: 1, moe_token_dispatcher: flex, moe_routing: round_robin }");
    // b·s·k·h·2 bytes with one copy per expert.
    assert_eq!(copies, 4096 * 8 * 2048 * 2);
    let per_rank = MoeRouting::Random.ranks_per_token(128, 8, 8);
    assert_eq!(random, (4096.0 * per_rank * 2048.0 * 2.0_f64).round() as u64);
    assert!(random < copies);
    // Round robin: a token's 8 experts sit on one rank.
    assert_eq!(rr, 4096 * 2048 * 2);
}

/// `round_robin` is NeMo Automodel's `FakeBalancedGate`: no router weights, so no router GEMM
/// forward or backward, only the write of each token's expert ids and weights; the learned
/// router (`random`, Megatron-Core's forced balancing, which still runs the gating GEMM) keeps
/// its `[tokens, h]·[h, E]` GEMM and both backward ops.
#[test]
fn the_fake_balanced_gate_runs_no_router_gemm() {
    use llmsim_workload::OpSpecKind;
    let router = |yaml: &str| {
        let layer = qwen3_layer(yaml);
        let fwd: Vec<_> = layer.forward.iter().filter(|o| o.name.starts_with("moe_router")).cloned().collect();
        let bwd = layer.backward.iter().filter(|o| o.name.starts_with("moe_router")).count();
        (fwd, bwd)
    };
    let (fwd, bwd) = router("{ ep: 8, etp: 1, moe_token_dispatcher: flex }");
    assert_eq!((fwd.len(), bwd), (1, 2));
    assert_eq!(fwd[0].flops(), 2.0 * 4096.0 * 2048.0 * 128.0);
    let (fwd, bwd) = router("{ ep: 8, etp: 1, moe_token_dispatcher: flex, moe_routing: round_robin }");
    assert_eq!((fwd.len(), bwd), (1, 0));
    assert_eq!(fwd[0].flops(), 0.0);
    // int64 ids and fp32 weights of 4096 tokens x top-8.
    assert!(matches!(fwd[0].kind, OpSpecKind::Compute { bytes, .. } if bytes == 4096.0 * 8.0 * 12.0));
}

/// Group-limited routing by enumeration: every `gtopk`-subset of the `groups` groups, then every
/// `k`-subset of the chosen groups' experts, equally likely; the ranks touched averaged.
fn brute_grouped(e: u64, k: u64, ep: u64, groups: u64, gtopk: u64) -> f64 {
    let (local, size) = (e / ep, e / groups);
    let (mut sum, mut n) = (0f64, 0f64);
    for gmask in 0u64..(1 << groups) {
        if gmask.count_ones() as u64 != gtopk {
            continue;
        }
        let experts: Vec<u64> = (0..e).filter(|x| gmask >> (x / size) & 1 == 1).collect();
        let c = experts.len();
        for mask in 0u64..(1 << c) {
            if mask.count_ones() as u64 != k {
                continue;
            }
            let ranks: std::collections::BTreeSet<u64> = (0..c).filter(|i| mask >> i & 1 == 1).map(|i| experts[i] / local).collect();
            sum += ranks.len() as f64;
            n += 1.0;
        }
    }
    sum / n
}

/// DeepSeek-V3's group-limited routing (`n_group` 8, `topk_group` 4) as the flex dispatcher's
/// bytes see it, against enumeration on small shapes: ranks nested in groups, groups nested in
/// ranks, and ranks straddling groups. Fewer ranks than without groups; no groups (0 or 1) or
/// all groups chosen is the plain formula.
#[test]
fn group_limited_random_routing_matches_enumeration() {
    for (e, k, ep, g, t) in [
        (16, 4, 8, 4, 2),
        (16, 3, 2, 8, 3),
        (12, 3, 4, 6, 2),
        (12, 2, 3, 4, 1),
        (16, 4, 16, 4, 3),
    ] {
        let got = MoeRouting::Random.ranks_per_token_grouped(e, k, ep, g, t);
        let want = brute_grouped(e, k, ep, g, t);
        assert!((got - want).abs() < 1e-9, "e {e} k {k} ep {ep} groups {g}/{t}: {got} vs {want}");
        assert!(got <= MoeRouting::Random.ranks_per_token(e, k, ep) + 1e-12);
    }
    for (g, t) in [(0, 0), (1, 1), (4, 4)] {
        assert_eq!(
            MoeRouting::Random.ranks_per_token_grouped(16, 4, 8, g, t),
            MoeRouting::Random.ranks_per_token(16, 4, 8)
        );
    }
    // DeepSeek-V3 over 8 servers: about 3.6 destination servers a token, against 5.3 unlimited.
    let (limited, free) = (
        MoeRouting::Random.ranks_per_token_grouped(256, 8, 8, 8, 4),
        MoeRouting::Random.ranks_per_token(256, 8, 8),
    );
    assert!((3.5..3.7).contains(&limited) && (5.2..5.4).contains(&free), "{limited} {free}");
}
