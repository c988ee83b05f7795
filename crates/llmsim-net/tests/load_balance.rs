//! Load balancing across equal-cost paths (`PacketConfig::load_balance`, issue 32 step 1):
//! spraying spreads one flow's bytes evenly over every equal-cost path; the reordering it causes
//! is repaired by RoCE go-back-N (NACKs and resends) and every byte arrives; flowlets with a long
//! gap keep one path; adaptive completes; the policies that need the topology's rule say so.

mod common;

use llmsim_core::{NodeId, SimTime};
use llmsim_net::packet::{CcMode, LoadBalance, PacketConfig, PacketEngine, PacketError, PacketRouting};

use common::{fat_tree_k4, ns3_topo, packet_flow};

fn engine(lb: LoadBalance) -> PacketEngine {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let cfg = PacketConfig {
        routing: PacketRouting::Topology,
        load_balance: lb,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    };
    PacketEngine::new(t, Some(ids), cfg).expect("engine")
}

/// Bytes sent on the links from `from` to any of `to`, one entry per link, in link order.
fn bytes_on(e: &PacketEngine, from: &[u32], to: impl Fn(u32) -> bool) -> Vec<u64> {
    let t = e.topology();
    (0..t.num_links() as u32)
        .filter(|&l| {
            let k = t.link(llmsim_core::LinkId(l));
            from.contains(&k.src.0) && to(k.dst.0)
        })
        .map(|l| e.link_tx_bytes(l).expect("link"))
        .collect()
}

/// Host 0 (pod 0) to host 15 (pod 3): 2 uplinks of its ToR, 4 agg-to-core links.
fn paths_of_host0(e: &PacketEngine) -> (Vec<u64>, Vec<u64>) {
    let t = e.topology();
    let tor = t.links().iter().find(|k| k.src == NodeId(0)).expect("host 0 NIC").dst.0;
    let aggs: Vec<u32> = t
        .links()
        .iter()
        .filter(|k| k.src.0 == tor && k.dst.0 >= 16 && k.dst.0 != tor)
        .map(|k| k.dst.0)
        .collect();
    let is_core = |n: u32| n >= 32;
    let up = bytes_on(e, &[tor], |n| aggs.contains(&n));
    let core = bytes_on(e, &aggs, is_core);
    (up, core)
}

fn within(v: &[u64], tol: f64) -> bool {
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    v.iter().all(|&b| (b as f64 - mean).abs() <= tol * mean)
}

#[test]
fn spray_spreads_one_flow_over_all_equal_cost_paths_within_5_percent() {
    let mut e = engine(LoadBalance::Spray);
    e.add_flow(packet_flow(0, 15, 4_000_000, SimTime::ZERO, 7)).expect("flow");
    e.run();
    assert_eq!(e.flow_done(0), Some(true));
    let (up, core) = paths_of_host0(&e);
    assert_eq!(up.len(), 2, "two ToR uplinks");
    assert_eq!(core.len(), 4, "four agg-to-core links: four equal-cost paths");
    println!("spray: ToR uplink bytes {up:?}, agg-to-core bytes {core:?}");
    assert!(core.iter().all(|&b| b > 0), "every path carries bytes: {core:?}");
    assert!(within(&up, 0.05), "uplinks within 5%: {up:?}");
    assert!(within(&core, 0.05), "paths within 5%: {core:?}");

    // ECMP, the default, keeps the flow on one path.
    let mut e = engine(LoadBalance::Ecmp);
    e.add_flow(packet_flow(0, 15, 4_000_000, SimTime::ZERO, 7)).expect("flow");
    e.run();
    let (_, core) = paths_of_host0(&e);
    assert_eq!(core.iter().filter(|&&b| b > 0).count(), 1, "ECMP: one path: {core:?}");
}

#[test]
fn spray_reordering_is_repaired_by_go_back_n() {
    // Two flows from one ToR to one pod: under spray, the packets of each meet different
    // queues on their four paths and some arrive after later ones.
    let run = |lb: LoadBalance| {
        let mut e = engine(lb);
        e.add_flow(packet_flow(0, 15, 2_000_000, SimTime::ZERO, 7)).expect("flow");
        // Host 1 shares host 0's ToR and sends to the same pod (sprayed too under spray).
        e.add_flow(packet_flow(1, 14, 4_000_000, SimTime::ZERO, 11)).expect("flow");
        e.run();
        assert_eq!(e.flow_done(0), Some(true));
        assert_eq!(e.flow_done(1), Some(true));
        let s = e.stats();
        assert_eq!(s.flows_done, 2);
        (s.nacks, s.retransmitted_bytes)
    };
    let (nacks_ecmp, resent_ecmp) = run(LoadBalance::Ecmp);
    assert_eq!((nacks_ecmp, resent_ecmp), (0, 0), "one path per flow: in order, lossless");
    let (nacks, resent) = run(LoadBalance::Spray);
    println!("spray: {nacks} NACKs, {resent} bytes resent; ECMP: none");
    assert!(nacks > 0, "out-of-order arrivals are NACKed");
    assert!(resent > 0, "and resent from the expected byte (go-back-N)");
}

#[test]
fn flowlet_with_a_long_gap_keeps_one_path_and_adaptive_completes() {
    let mut e = engine(LoadBalance::Flowlet { gap: SimTime::from_ms(10) });
    e.add_flow(packet_flow(0, 15, 2_000_000, SimTime::ZERO, 7)).expect("flow");
    e.run();
    let (_, core) = paths_of_host0(&e);
    assert_eq!(
        core.iter().filter(|&&b| b > 0).count(),
        1,
        "no idle gap: one flowlet, one path: {core:?}"
    );

    let mut e = engine(LoadBalance::Adaptive);
    for (i, (s, d)) in [(0, 15), (1, 14), (0, 13), (1, 12)].into_iter().enumerate() {
        e.add_flow(packet_flow(s, d, 1_000_000, SimTime::ZERO, i as u64 + 3)).expect("flow");
    }
    e.run();
    assert_eq!(e.stats().flows_done, 4);
    let (up, _) = paths_of_host0(&e);
    assert!(up.iter().all(|&b| b > 0), "adaptive uses both uplinks: {up:?}");
}

#[test]
fn spray_needs_the_topology_rule_and_a_positive_flowlet_gap() {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let cfg = PacketConfig {
        routing: PacketRouting::Ns3,
        load_balance: LoadBalance::Spray,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    };
    assert!(matches!(PacketEngine::new(t.clone(), Some(ids.clone()), cfg), Err(PacketError::Config(m)) if m.contains("routing")));
    let cfg = PacketConfig {
        routing: PacketRouting::Topology,
        load_balance: LoadBalance::Flowlet { gap: SimTime::ZERO },
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    };
    assert!(matches!(PacketEngine::new(t, Some(ids), cfg), Err(PacketError::Config(m)) if m.contains("gap")));
}
