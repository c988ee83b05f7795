//! The flow backend's `spray`/`adaptive` (issue 32 §1): a flow's bytes split evenly over its
//! equal-cost paths, so that a 2:1 oversubscribed fabric no longer caps one flow at one uplink.

use std::sync::Arc;

use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime, TransferId};
use llmsim_net::packet::LoadBalance;
use llmsim_net::{FlowNetwork, Network, Transfer, run_all};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::{LinkParams, ScaleUp, Topology};

const LAT_NS: u64 = 500;

/// k = 4 fat-tree, 16 hosts: 100 Gb/s NICs, 50 Gb/s fabric links (each edge has 2 x 50 up for
/// 2 x 100 down: 2:1).
fn topo() -> Arc<Topology> {
    let lat = SimTime::from_ns(LAT_NS);
    let p = FatTreeParams {
        k: 4,
        host_link: LinkParams::new(Bandwidth::from_gbps(100), lat),
        edge_agg: LinkParams::new(Bandwidth::from_gbps(50), lat),
        agg_core: LinkParams::new(Bandwidth::from_gbps(50), lat),
    };
    Arc::new(fat_tree(16, &p, ScaleUp::none(), 1).expect("fat-tree"))
}

fn net(lb: LoadBalance) -> FlowNetwork {
    let mut n = FlowNetwork::new(topo());
    n.set_load_balance(lb);
    n.set_rate_checks(true);
    n
}

/// Bytes each link out of `from` toward a node for which `to` holds carried.
fn bytes_on(n: &FlowNetwork, from: impl Fn(u32) -> bool, to: impl Fn(u32) -> bool) -> Vec<u64> {
    let t = n.topology();
    t.links()
        .iter()
        .enumerate()
        .filter(|(_, l)| from(l.src.0) && to(l.dst.0))
        .map(|(i, _)| n.link_bytes()[i].0)
        .collect()
}

fn within(v: &[u64], tol: f64) -> bool {
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    v.iter().all(|&b| (b as f64 - mean).abs() <= tol * mean)
}

// Node layout of `fat_tree` (k = 4, 16 hosts): hosts 0..16, edges 16..24, aggs 24..32, cores 32..36.
const EDGE0: u32 = 16;
fn is_agg_of_pod0(n: u32) -> bool {
    (24..26).contains(&n)
}
fn is_core(n: u32) -> bool {
    n >= 32
}

#[test]
fn one_sprayed_flow_spreads_over_all_equal_cost_paths_within_5_percent() {
    let bytes = 4_000_000u64;
    let t = Transfer::new(TransferId(1), NodeId(0), NodeId(15), Bytes(bytes), SimTime::ZERO);
    let mut n = net(LoadBalance::Spray);
    let done = run_all(&mut n, [t.clone()]).expect("run");
    assert!(n.violations().is_empty(), "{:?}", n.violations());
    let up = bytes_on(&n, |s| s == EDGE0, is_agg_of_pod0);
    let core = bytes_on(&n, is_agg_of_pod0, is_core);
    assert_eq!((up.len(), core.len()), (2, 4), "2 edge uplinks, 4 agg-to-core links: 4 paths");
    assert!(core.iter().all(|&b| b > 0), "every path carries bytes: {core:?}");
    assert!(within(&up, 0.05) && within(&core, 0.05), "within 5%: {up:?} {core:?}");
    assert_eq!(up.iter().sum::<u64>(), bytes, "bytes conserved across the uplinks");
    assert_eq!(core.iter().sum::<u64>(), bytes, "and across the paths");

    // Rate: each 50G uplink carries half the flow, so the 100G NIC binds: 4 MB at 100 Gb/s,
    // plus six 500 ns hops.
    let hops = 6 * LAT_NS;
    let spray_ns = bytes * 8 / 100 + hops;
    assert_eq!(done[0].finish, SimTime::from_ns(spray_ns));

    // ECMP: one path, one 50G uplink binds: twice the serialization.
    let mut n = net(LoadBalance::Ecmp);
    let done = run_all(&mut n, [t]).expect("run");
    assert_eq!(done[0].finish, SimTime::from_ns(bytes * 8 / 50 + hops));
    let core = bytes_on(&n, is_agg_of_pod0, is_core);
    assert_eq!(core.iter().filter(|&&b| b > 0).count(), 1, "ECMP: one path: {core:?}");
}

#[test]
fn sprayed_flows_share_the_uplinks_max_min_fair() {
    // Hosts 0 and 1 share edge 0 and send to pod 3: each spreads half its rate on each of the
    // two 50G uplinks, so together they fill both: 50 Gb/s each, whatever ECMP's hashes are.
    let bytes = 2_000_000u64;
    let ts = [(1, 0, 15), (2, 1, 14)].map(|(id, s, d)| Transfer::new(TransferId(id), NodeId(s), NodeId(d), Bytes(bytes), SimTime::ZERO));
    for lb in [LoadBalance::Spray, LoadBalance::Adaptive] {
        let mut n = net(lb);
        let done = run_all(&mut n, ts.clone()).expect("run");
        assert!(n.violations().is_empty(), "{:?}", n.violations());
        for c in &done {
            assert_eq!(c.finish, SimTime::from_ns(bytes * 8 / 50 + 6 * LAT_NS), "{lb:?}: {c:?}");
        }
        let up = bytes_on(&n, |s| s == EDGE0, is_agg_of_pod0);
        assert_eq!(up, vec![bytes, bytes], "{lb:?}: both flows half on each uplink");
        assert_eq!(n.stats().bytes_delivered, 2 * bytes);
    }
}

#[test]
fn flowlet_keeps_one_path_in_the_fluid_model() {
    let t = Transfer::new(TransferId(1), NodeId(0), NodeId(15), Bytes(1_000_000), SimTime::ZERO);
    let mut a = net(LoadBalance::Flowlet { gap: SimTime::from_us(50) });
    let mut b = net(LoadBalance::Ecmp);
    assert_eq!(run_all(&mut a, [t.clone()]).unwrap(), run_all(&mut b, [t]).unwrap());
    assert_eq!(a.link_bytes(), b.link_bytes());
}
