//! The flex (DeepEP / HybridEP) dispatcher over servers: a token crosses the network once per
//! destination server (to the rank with its local index there), then NVLink carries one copy per
//! destination rank inside the server. Expected servers per token against brute force, the two
//! phases' groups against the rank layout, and their bytes against the mechanism.

mod common;

use std::collections::BTreeSet;

use common::rank_sets;
use llmsim_core::CollectiveOp;
use llmsim_workload::dag::{Group, Layout};
use llmsim_workload::model::preset;
use llmsim_workload::ops::{LayerOps, transformer_layer};
use llmsim_workload::{CommGroup, ModelConfig, MoeRouting, OpSpecKind, ParallelConfig, TrainingConfig};

/// Average over every k-subset of e experts and every source server of the servers other than
/// the source holding one of the k (e / ep experts per rank, `per_server` ranks per server).
fn brute_random(e: u64, k: u64, ep: u64, per_server: u64) -> f64 {
    let local = e / ep;
    let servers = ep / per_server;
    let (mut sum, mut n) = (0u64, 0u64);
    for mask in 0u64..(1 << e) {
        if mask.count_ones() as u64 != k {
            continue;
        }
        let hit: BTreeSet<u64> = (0..e).filter(|i| mask >> i & 1 == 1).map(|i| i / local / per_server).collect();
        for src in 0..servers {
            sum += hit.iter().filter(|s| **s != src).count() as u64;
            n += 1;
        }
    }
    sum as f64 / n as f64
}

/// Automodel's `FakeBalancedGate` (noise 0): token t's experts are (t·k + j) mod e, j < k; every
/// rank numbers its own tokens from 0, so each token index leaves from every server.
fn brute_round_robin(e: u64, k: u64, ep: u64, per_server: u64, tokens: u64) -> f64 {
    let local = e / ep;
    let servers = ep / per_server;
    let mut sum = 0u64;
    for t in 0..tokens {
        let hit: BTreeSet<u64> = (0..k).map(|j| ((t * k + j) % e) / local / per_server).collect();
        for src in 0..servers {
            sum += hit.iter().filter(|s| **s != src).count() as u64;
        }
    }
    sum as f64 / (tokens * servers) as f64
}

#[test]
fn random_routing_other_servers_match_enumeration() {
    // (e, k, ep, ranks per server)
    for (e, k, ep, g) in [
        (8, 2, 4, 2),
        (12, 3, 6, 2),
        (16, 4, 8, 4),
        (16, 2, 8, 2),
        (12, 12, 6, 3),
        (10, 1, 10, 5),
    ] {
        let got = MoeRouting::Random.other_servers_per_token(e, k, ep / g);
        let want = brute_random(e, k, ep, g);
        assert!((got - want).abs() < 1e-9, "e {e} k {k} ep {ep} per server {g}: {got} vs {want}");
    }
}

#[test]
fn round_robin_other_servers_match_the_gate() {
    for (e, k, ep, g) in [
        (256, 8, 64, 8),
        (128, 4, 64, 8),
        (384, 8, 32, 8),
        (32, 3, 8, 2),
        (24, 5, 6, 3),
        (60, 4, 12, 4),
    ] {
        let got = MoeRouting::RoundRobin.other_servers_per_token(e, k, ep / g);
        let want = brute_round_robin(e, k, ep, g, e * 5);
        assert!((got - want).abs() < 1e-9, "e {e} k {k} ep {ep} per server {g}: {got} vs {want}");
    }
    // DeepSeek-V3 on EP64 over 8 servers: a token's 8 consecutive experts sit in one server
    // (32 per server), the source's own one time in eight.
    assert_eq!(MoeRouting::RoundRobin.other_servers_per_token(256, 8, 8), 7.0 / 8.0);
}

fn plan(m: &ModelConfig, t: &TrainingConfig, gpus: u64, gpn: u64, yaml: &str) -> ParallelConfig {
    let p: ParallelConfig = serde_yaml_ng::from_str(yaml).unwrap();
    let mut p = p.resolve(gpus, m, t).unwrap();
    p.gpus_per_node = gpn;
    p
}

/// For every rank: its inter-server group is the ranks of its EP group with its local index
/// (rank mod gpus per node), its intra-server group those of its EP group on its server.
#[test]
fn the_two_phases_run_over_rails_and_servers_of_the_ep_group() {
    let m = preset("qwen3-235b-a22b").unwrap();
    let t = TrainingConfig {
        global_batch_size: 256,
        ..TrainingConfig::default()
    };
    let gpn = 8u32;
    for (gpus, yaml) in [
        (64, "{ ep: 32, moe_token_dispatcher: flex }"),
        (
            128,
            "{ tp: 2, pp: 2, ep: 16, etp: 1, sequence_parallel: true, moe_token_dispatcher: flex }",
        ),
        (128, "{ tp: 2, cp: 2, ep: 8, sequence_parallel: true, moe_token_dispatcher: flex }"),
        (64, "{ pp: 2, ep: 16, moe_token_dispatcher: flex }"),
    ] {
        let p = plan(&m, &t, gpus, u64::from(gpn), yaml);
        let l = Layout::of(&p);
        assert!(l.ep_server_units > 0, "{yaml}: the EP group spans servers");
        for u in 0..l.units() {
            let ep_sets = rank_sets(&l, u, Group::Ep);
            let inter = rank_sets(&l, u, Group::EpInter);
            let intra = rank_sets(&l, u, Group::EpIntra);
            for lane in 0..l.tp {
                let r = l.rank(u, lane);
                let mine = |sets: &[BTreeSet<u32>]| -> BTreeSet<u32> {
                    let v: Vec<&BTreeSet<u32>> = sets.iter().filter(|s| s.contains(&r)).collect();
                    assert_eq!(v.len(), 1, "{yaml}: rank {r}");
                    v[0].clone()
                };
                let ep = mine(&ep_sets);
                let want_inter: BTreeSet<u32> = ep.iter().copied().filter(|x| x % gpn == r % gpn).collect();
                let want_intra: BTreeSet<u32> = ep.iter().copied().filter(|x| x / gpn == r / gpn).collect();
                assert_eq!(mine(&inter), want_inter, "{yaml}: rail of rank {r}");
                assert_eq!(mine(&intra), want_intra, "{yaml}: server part of rank {r}");
                assert!(want_inter.len() > 1 && want_intra.len() > 1, "{yaml}");
                assert_eq!(want_inter.len() * want_intra.len(), ep.len(), "{yaml}");
            }
        }
        // The alltoall dispatcher keeps one all-to-all: no server phases in its layout.
        let p = plan(&m, &t, gpus, u64::from(gpn), &yaml.replace(", moe_token_dispatcher: flex", ""));
        assert_eq!(Layout::of(&p).ep_server_units, 0, "{yaml}");
    }
}

fn comms(ops: &LayerOps, backward: bool) -> Vec<(String, CollectiveOp, CommGroup, u64)> {
    let list = if backward { &ops.backward } else { &ops.forward };
    list.iter()
        .filter_map(|o| match o.kind {
            OpSpecKind::Comm { op, group, bytes, .. } => Some((o.name.to_string(), op, group, bytes)),
            _ => None,
        })
        .collect()
}

fn moe_layer(m: &ModelConfig, t: &TrainingConfig, gpus: u64, gpn: u64, yaml: &str) -> LayerOps {
    let p = plan(m, t, gpus, gpn, yaml);
    let layer = (0..m.num_hidden_layers).find(|i| m.is_moe(*i)).unwrap();
    transformer_layer(m, t, &p, layer)
}

fn train() -> TrainingConfig {
    TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 256,
        ..TrainingConfig::default()
    }
}

/// Bytes from the mechanism: the network phase carries `tok · D_srv · h · dt` (all-to-all size
/// convention over the rail's `servers` ranks), the NVLink phase the per-rank copies of the
/// single-server flex dispatcher; the backward runs them in reverse.
#[test]
fn flex_over_servers_moves_a_token_once_per_destination_server() {
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = train();
    let (e, k, h) = (m.num_experts, m.num_experts_per_tok, m.hidden_size);
    let tok = 4096u64;
    for (routing, ep) in [("random", 32u64), ("round_robin", 32), ("random", 16), ("round_robin", 64)] {
        let yaml = format!("{{ ep: {ep}, moe_token_dispatcher: flex, moe_routing: {routing} }}");
        let r = if routing == "random" {
            MoeRouting::Random
        } else {
            MoeRouting::RoundRobin
        };
        let servers = ep / 8;
        let split = comms(&moe_layer(&m, &t, 64, 8, &yaml), false);
        let single = comms(&moe_layer(&m, &t, 64, 0, &yaml), false);
        // One server: today's single all-to-all of one copy per destination rank.
        let a2a = (tok as f64 * r.ranks_per_token(e, k, ep) * (h * 2) as f64).round() as u64;
        assert_eq!(
            single,
            vec![
                ("ep_dispatch".into(), CollectiveOp::AllToAll, CommGroup::Ep, a2a),
                ("ep_combine".into(), CollectiveOp::AllToAll, CommGroup::Ep, a2a)
            ],
            "{yaml}"
        );
        let inter = (tok as f64 * r.ranks_per_token(e, k, servers) * (h * 2) as f64).round() as u64;
        assert_eq!(
            split,
            vec![
                ("ep_dispatch_inter".into(), CollectiveOp::AllToAll, CommGroup::EpInter, inter),
                ("ep_dispatch_intra".into(), CollectiveOp::AllToAll, CommGroup::EpIntra, a2a),
                ("ep_combine_intra".into(), CollectiveOp::AllToAll, CommGroup::EpIntra, a2a),
                ("ep_combine_inter".into(), CollectiveOp::AllToAll, CommGroup::EpInter, inter),
            ],
            "{yaml}"
        );
        let names: Vec<String> = comms(&moe_layer(&m, &t, 64, 8, &yaml), true).into_iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            [
                "ep_combine_inter_bwd",
                "ep_combine_intra_bwd",
                "ep_dispatch_intra_bwd",
                "ep_dispatch_inter_bwd"
            ],
            "{yaml}"
        );
        // What leaves a server: (servers - 1) / servers of the rail all-to-all, that is
        // tok · E[other servers] · h · dt; never more than the per-rank copies to other servers
        // ((ep - 8) / ep of the single all-to-all).
        let net = inter as f64 * (servers - 1) as f64 / servers as f64;
        let want = tok as f64 * r.other_servers_per_token(e, k, servers) * (h * 2) as f64;
        assert!((net - want).abs() <= 1.0, "{yaml}: {net} vs {want}");
        let per_rank_net = a2a as f64 * (ep - 8) as f64 / ep as f64;
        assert!(net <= per_rank_net + 1.0, "{yaml}: {net} > {per_rank_net}");
    }
}

/// Automodel's DeepSeek-V3 rows (EP64 on 8 servers, round robin): exactly one server per token.
#[test]
fn round_robin_deepseek_v3_sends_each_token_to_one_server() {
    let m = preset("deepseek-v3").unwrap();
    let t = train();
    let c = comms(
        &moe_layer(&m, &t, 256, 8, "{ ep: 64, moe_token_dispatcher: flex, moe_routing: round_robin }"),
        false,
    );
    assert_eq!(c[0].0, "ep_dispatch_inter");
    assert_eq!(c[0].3, 4096 * m.hidden_size * 2);
    // And on NVLink two ranks per token (EP64: 4 experts per rank, 8-expert windows).
    assert_eq!(c[1].3, 2 * 4096 * m.hidden_size * 2);
}

/// One server, or the alltoall dispatcher: the same ops as without the server size.
#[test]
fn inside_one_server_and_other_dispatchers_are_unchanged() {
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = train();
    for (gpn, yaml) in [
        (8, "{ ep: 8, moe_token_dispatcher: flex }"),
        (64, "{ ep: 32, moe_token_dispatcher: flex }"),
        (8, "{ ep: 32 }"),
        (8, "{ ep: 32, moe_token_dispatcher: alltoall, moe_routing: round_robin }"),
        (72, "{ ep: 32, moe_token_dispatcher: flex }"),
    ] {
        let a = moe_layer(&m, &t, 64, gpn, yaml);
        let b = moe_layer(&m, &t, 64, 0, yaml);
        assert_eq!(a.forward, b.forward, "{yaml} on {gpn} GPUs per node");
        assert_eq!(a.backward, b.backward, "{yaml} on {gpn} GPUs per node");
    }
}
