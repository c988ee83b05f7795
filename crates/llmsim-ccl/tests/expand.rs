//! Collective expansions executed on the analytical and flow backends.

use std::sync::Arc;

use llmsim_ccl::expand::{self, ExpandParams, Granularity};
use llmsim_ccl::plan::{Expansion, Step};
use llmsim_ccl::{CollectiveOp, ScaleUpModel, execute};
use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime};
use llmsim_net::Network;
use llmsim_net::analytical::AnalyticalNetwork;
use llmsim_net::flow::FlowNetwork;
use llmsim_topo::generators::flat;
use llmsim_topo::{LinkParams, ScaleUp, Topology};

fn nic() -> LinkParams {
    LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500))
}

fn cluster(gpus: u32) -> Arc<Topology> {
    Arc::new(flat(gpus, nic(), ScaleUp::dgx_h100(), 7).unwrap())
}

fn all(t: &Topology) -> Vec<NodeId> {
    (0..t.num_hosts()).map(NodeId).collect()
}

fn su() -> ScaleUpModel {
    ScaleUpModel::from_nvlink("H100", llmsim_core::Bandwidth::from_gbytes_per_sec(450), 8)
}

fn transfer_bytes(plan: &llmsim_ccl::CollectivePlan) -> u64 {
    plan.network_bytes()
}

#[test]
fn ring_all_reduce_has_2n_minus_2_steps_and_conserves_bytes() {
    let t = cluster(16);
    let p = ExpandParams {
        granularity: Granularity::Step,
        ..ExpandParams::default()
    };
    let b = Bytes::mib(64);
    let plan = expand::ring(&t, CollectiveOp::AllReduce, b, &all(&t), &p).unwrap();
    let n = 16u64;
    let rings = expand::rings(&t, &all(&t), p.channels).unwrap().len() as u64;
    assert_eq!(rings, 8, "one ring per rotation inside the 8-GPU servers");
    assert_eq!(plan.num_transfers() as u64, 2 * (n - 1) * n * rings);
    // Every rank sends 2(n-1)/n of the buffer: 2(n-1) * bytes in all.
    assert_eq!(transfer_bytes(&plan), 2 * (n - 1) * b.0);
    let phases: std::collections::BTreeSet<u32> = plan.nodes().iter().map(|x| x.phase).collect();
    assert_eq!(phases.len() as u64, 2 * (n - 1));
}

#[test]
fn all_gather_and_reduce_scatter_rings_have_n_minus_1_steps() {
    let t = cluster(16);
    let p = ExpandParams {
        granularity: Granularity::Step,
        channels: 8,
        ..ExpandParams::default()
    };
    for op in [CollectiveOp::AllGather, CollectiveOp::ReduceScatter] {
        let plan = expand::ring(&t, op, Bytes::mib(16), &all(&t), &p).unwrap();
        assert_eq!(plan.network_bytes(), 15 * Bytes::mib(16).0);
        let phases: std::collections::BTreeSet<u32> = plan.nodes().iter().map(|x| x.phase).collect();
        assert_eq!(phases.len(), 15);
    }
}

#[test]
fn every_expansion_runs_to_completion_on_both_backends() {
    let t = cluster(32);
    let g = all(&t);
    let p = ExpandParams {
        channels: 4,
        ..ExpandParams::default()
    };
    let cases = [
        (Expansion::Ring, CollectiveOp::AllReduce),
        (Expansion::RingPipelined, CollectiveOp::AllReduce),
        (Expansion::DoubleBinaryTree, CollectiveOp::AllReduce),
        (Expansion::HalvingDoubling, CollectiveOp::AllReduce),
        (Expansion::HalvingDoubling, CollectiveOp::ReduceScatter),
        (Expansion::DirectAllToAll, CollectiveOp::AllToAll),
        (Expansion::Hierarchical, CollectiveOp::AllReduce),
    ];
    for (e, op) in cases {
        let plan = expand::expand(&t, op, Bytes::mib(8), &g, e, &p, &su()).unwrap();
        for backend in 0..2 {
            let mut net: Box<dyn Network> = if backend == 0 {
                Box::new(AnalyticalNetwork::new(t.clone()))
            } else {
                Box::new(FlowNetwork::new(t.clone()))
            };
            let run = execute(&plan, net.as_mut(), SimTime::ZERO, 0).unwrap();
            assert!(
                run.node_finish.iter().all(|f| *f != SimTime::MAX),
                "{e:?} {op}: a step never finished"
            );
            assert!(run.finish > SimTime::ZERO);
            let st = net.stats();
            assert_eq!(st.completed, st.submitted, "{e:?}: all transfers complete");
            let submitted: u64 = plan
                .nodes()
                .iter()
                .map(|x| match &x.step {
                    Step::Transfer { bytes, .. } => bytes.0,
                    _ => 0,
                })
                .sum();
            assert_eq!(st.bytes_delivered, submitted, "{e:?}: bytes conserved");
            // Dependencies respected.
            for i in 0..plan.len() as u32 {
                for d in plan.deps(i) {
                    assert!(
                        run.node_start[i as usize] >= run.node_finish[*d as usize],
                        "{e:?}: node {i} started before dep {d}"
                    );
                }
            }
        }
    }
}

#[test]
fn analytical_is_never_slower_than_flow() {
    let t = cluster(32);
    let g = all(&t);
    for e in [Expansion::Ring, Expansion::DoubleBinaryTree, Expansion::HalvingDoubling] {
        let plan = expand::expand(&t, CollectiveOp::AllReduce, Bytes::mib(32), &g, e, &ExpandParams::default(), &su()).unwrap();
        let a = execute(&plan, &mut AnalyticalNetwork::new(t.clone()), SimTime::ZERO, 0)
            .unwrap()
            .finish;
        let f = execute(&plan, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap().finish;
        assert!(a <= f, "{e:?}: analytical {a} > flow {f}");
    }
}

#[test]
fn pipelined_ring_matches_step_ring_when_uncontended() {
    let t = cluster(64);
    let g = all(&t);
    let b = Bytes::gib(1);
    let step = ExpandParams {
        granularity: Granularity::Step,
        ..ExpandParams::default()
    };
    let pipe = ExpandParams {
        granularity: Granularity::Pipelined,
        ..ExpandParams::default()
    };
    let ps = expand::ring(&t, CollectiveOp::AllReduce, b, &g, &step).unwrap();
    let pp = expand::ring(&t, CollectiveOp::AllReduce, b, &g, &pipe).unwrap();
    assert_eq!(pp.expansion, Expansion::RingPipelined);
    let ts = execute(&ps, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0)
        .unwrap()
        .duration()
        .as_secs_f64();
    let tp = execute(&pp, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0)
        .unwrap()
        .duration()
        .as_secs_f64();
    let rel = (ts - tp).abs() / ts;
    assert!(rel < 0.05, "step {ts} s vs pipelined {tp} s differ by {:.1}%", rel * 100.0);
}

#[test]
fn ring_busbw_approaches_aggregate_nic_rate_without_contention() {
    // 16 servers x 8 GPUs, one 400 Gbps NIC per GPU on a non-blocking switch: a big ring
    // all-reduce is bounded by the 8 NICs of a server, 8 x 50 GB/s = 400 GB/s of busbw.
    let t = cluster(128);
    let g = all(&t);
    let b = Bytes::gib(4);
    let plan = expand::ring(&t, CollectiveOp::AllReduce, b, &g, &ExpandParams::default()).unwrap();
    let run = execute(&plan, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
    let busbw = b.0 as f64 / run.duration().as_secs_f64() / 1e9 * CollectiveOp::AllReduce.busbw_factor(128);
    let line = 8.0 * 50.0;
    assert!(busbw <= line * 1.0001, "busbw {busbw:.1} GB/s above the NIC bound {line}");
    assert!(busbw >= 0.85 * line, "busbw {busbw:.1} GB/s is far below the NIC bound {line}");
}

#[test]
fn single_server_collectives_use_the_scale_up_model() {
    let t = cluster(8);
    let g = all(&t);
    let plan = expand::expand(
        &t,
        CollectiveOp::AllReduce,
        Bytes::mib(64),
        &g,
        Expansion::Ring,
        &ExpandParams::default(),
        &su(),
    )
    .unwrap();
    assert_eq!(plan.expansion, Expansion::ScaleUp);
    let run = execute(&plan, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
    assert_eq!(run.duration(), su().time(CollectiveOp::AllReduce, Bytes::mib(64), 8));
}

#[test]
fn double_binary_trees_are_complementary() {
    for n in [2usize, 3, 4, 7, 8, 16, 33] {
        let (t0, t1) = expand::dtree_parents(n);
        for t in [&t0, &t1] {
            assert_eq!(t.iter().filter(|p| p.is_none()).count(), 1, "one root, n={n}");
            // Every rank reaches the root.
            for start in 0..n {
                let mut r = start;
                let mut hops = 0;
                while let Some(p) = t[r] {
                    r = p;
                    hops += 1;
                    assert!(hops <= n, "cycle in tree n={n}");
                }
            }
        }
        if n > 2 {
            // A rank that is an inner node in one tree is a leaf in the other (NCCL's double tree
            // property), for even n (mirror construction).
            let inner = |t: &Vec<Option<usize>>, r: usize| t.contains(&Some(r));
            if n % 2 == 0 {
                for r in 0..n {
                    assert!(!(inner(&t0, r) && inner(&t1, r)), "rank {r} inner in both trees, n={n}");
                }
            }
        }
    }
}

#[test]
fn bad_groups_are_errors_not_panics() {
    let t = cluster(16);
    let p = ExpandParams::default();
    assert!(expand::ring(&t, CollectiveOp::AllReduce, Bytes::mib(1), &[NodeId(0)], &p).is_err());
    assert!(expand::ring(&t, CollectiveOp::AllReduce, Bytes::mib(1), &[NodeId(0), NodeId(99)], &p).is_err());
    assert!(expand::ring(&t, CollectiveOp::AllToAll, Bytes::mib(1), &all(&t), &p).is_err());
    let twelve: Vec<NodeId> = (0..12).map(NodeId).collect();
    assert!(expand::halving_doubling(&t, CollectiveOp::Broadcast, Bytes::mib(1), &twelve, &p).is_err());
    assert!(expand::halving_doubling(&t, CollectiveOp::AllReduce, Bytes::mib(1), &twelve, &p).is_ok());
}

/// DP-style groups (one rank per server) of 3, 1,000 and 1,125 ranks: NCCL's choice (PAT for
/// all-gather and reduce-scatter at one GPU per node, whatever the rank count) plans and
/// completes, and a forced halving-doubling takes Bruck's `ceil(log2 n)` steps and moves
/// `(n - 1) / n` of the buffer per rank.
#[test]
fn non_power_of_two_groups_complete_under_default_collectives() {
    use llmsim_ccl::tuning::Algo;
    use llmsim_ccl::{AlgoChoice, PlanOptions, plan_collective};
    for n in [3u32, 1_000, 1_125] {
        let t = cluster(8 * n);
        let g: Vec<NodeId> = (0..n).map(|s| NodeId(8 * s + 3)).collect();
        let mut pat = false;
        for op in [CollectiveOp::AllGather, CollectiveOp::ReduceScatter] {
            // Small enough that the flow runs stay fast in a debug build.
            let bytes = Bytes::kib(u64::from(n) * 4);
            let planned =
                plan_collective(&t, op, bytes, &g, &PlanOptions::h100(), &su()).unwrap_or_else(|e| panic!("{n} ranks, {op}: {e}"));
            pat |= planned.decision.as_ref().is_some_and(|d| d.algo == Algo::Pat);
            let mut net = FlowNetwork::new(t.clone());
            let run = execute(&planned.plan, &mut net, SimTime::ZERO, 0).unwrap();
            assert!(run.finish > SimTime::ZERO);
            let st = net.stats();
            assert_eq!(st.completed, st.submitted, "{n} ranks, {op}: every transfer completes");
            assert_eq!(st.bytes_delivered, planned.plan.network_bytes(), "{n} ranks, {op}: bytes conserved");
        }
        assert!(n < 1_000 || pat, "{n} ranks: NCCL picks PAT for some size at one GPU per node");
        for op in [CollectiveOp::AllGather, CollectiveOp::ReduceScatter] {
            let opts = PlanOptions {
                algo: AlgoChoice::HalvingDoubling,
                ..PlanOptions::h100()
            };
            let bytes = Bytes(u64::from(n) * 1_000);
            let plan = plan_collective(&t, op, bytes, &g, &opts, &su()).unwrap().plan;
            let steps: std::collections::BTreeSet<u32> = plan.nodes().iter().map(|x| x.phase).collect();
            assert_eq!(steps.len() as u32, 32 - (n - 1).leading_zeros(), "{n} ranks: ceil(log2 n) steps");
            assert_eq!(
                plan.network_bytes(),
                u64::from(n - 1) * bytes.0,
                "{n} ranks, {op}: n - 1 blocks per rank"
            );
            let run = execute(&plan, &mut AnalyticalNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
            assert!(run.node_finish.iter().all(|f| *f != SimTime::MAX));
        }
    }
}

/// On a torus, NCCL-like rings run along the dimensions: ring `r` walks dimension `r / 2`
/// fastest, ascending or descending, in snake order, so every ring step (row ends and the
/// closing step included) is one router hop, no ring routes two of its hops over one link, and
/// the two directions of one order use disjoint links.
#[test]
fn torus_rings_run_along_every_dimension_and_direction() {
    use llmsim_topo::LinkKind;
    use llmsim_topo::torus::{TorusParams, torus};
    let p = TorusParams {
        dims: vec![4, 4],
        hosts_per_router: 1,
        nic: nic(),
        fabric: nic(),
    };
    let t = torus(16, &p, ScaleUp::none(), 7).unwrap();
    let group = all(&t);
    let rings = expand::rings(&t, &group, 8).unwrap();
    assert_eq!(rings.len(), 8, "one ring per channel, cycling over 4 orders");
    let mut per_ring = Vec::new();
    let mut path = Vec::new();
    for (ring, w) in &rings {
        assert_eq!(*w, 1);
        let mut sorted = ring.clone();
        sorted.sort();
        assert_eq!(sorted, group, "a ring holds every rank once");
        let mut mine = std::collections::BTreeSet::new();
        for i in 0..ring.len() {
            path.clear();
            t.route(ring[i], ring[(i + 1) % ring.len()], 0, &mut path).unwrap();
            let hops = path.iter().filter(|&&l| t.link(l).kind == LinkKind::Fabric).count();
            assert_eq!(hops, 1, "ring {ring:?} step {i} takes {hops} router hops");
            for &l in path.iter().filter(|&&l| t.link(l).kind == LinkKind::Fabric) {
                assert!(mine.insert(l), "ring {ring:?} routes two hops over link {l:?}");
            }
        }
        assert_eq!(mine.len(), 16, "16 one-hop steps");
        per_ring.push(mine);
    }
    assert!(per_ring[0].is_disjoint(&per_ring[1]), "a snake and its reverse share no link");
    assert!(per_ring[2].is_disjoint(&per_ring[3]));
    // Rank order (one ring) would use only the + links of dimension 0 and the row ends.
    let (first, _) = &rings[0];
    assert_eq!(first[..8], [0, 1, 2, 3, 7, 6, 5, 4].map(NodeId), "snake");
    let (second, _) = &rings[1];
    assert_eq!(second[..4], [NodeId(12), NodeId(13), NodeId(14), NodeId(15)], "the snake reversed");
    let (third, _) = &rings[2];
    assert_eq!(third[..8], [0, 4, 8, 12, 13, 9, 5, 1].map(NodeId), "dimension 1 fastest");
}
