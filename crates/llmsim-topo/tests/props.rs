//! Property: on random small topologies, every (src, dst, hash) route reaches dst over existing,
//! chained links without visiting a node twice, and the same inputs give the same route.

use llmsim_core::{Bandwidth, LinkId, NodeId, SimTime};
use llmsim_topo::generators::{self, FatTreeParams, RailFatTreeParams, SpineCount, SpineLeafParams};
use llmsim_topo::ns3::{parse_ns3, to_ns3};
use llmsim_topo::{LinkParams, ScaleUp, Topology};
use proptest::prelude::*;

fn lp(gbps: u64) -> LinkParams {
    LinkParams::new(Bandwidth::from_gbps(gbps), SimTime::from_ns(500))
}

fn scale_up(g: u32) -> ScaleUp {
    if g == 1 {
        ScaleUp::none()
    } else {
        ScaleUp {
            gpus_per_server: g,
            ..ScaleUp::dgx_h100()
        }
    }
}

/// (generator 0..6: 5 is an imported copy, 6 three-tier; size knob, gpus_per_server, extra knob, seed)
fn build(kind: u8, a: u32, g: u32, b: u32, seed: u64) -> Topology {
    let su = scale_up(g);
    match kind {
        0 => {
            let k = 2 * (1 + a % 4);
            let hosts = ((1 + b % (k * k * k / 4)) / g).max(1) * g;
            let k = generators::smallest_fat_tree_k(hosts).max(k);
            generators::fat_tree(
                hosts,
                &FatTreeParams {
                    k,
                    host_link: lp(400),
                    edge_agg: lp(400),
                    agg_core: lp(200),
                },
                su,
                seed,
            )
            .unwrap()
        }
        1 => {
            let hosts = g * (1 + a % 12);
            let p = SpineLeafParams {
                hosts_per_leaf: 1 + b % 9,
                leaves: None,
                spines: SpineCount::Count(1 + a % 4),
                nic: lp(400),
                uplink: lp(400),
            };
            generators::spine_leaf(hosts, &p, su, seed).unwrap()
        }
        2 | 3 => {
            let hosts = g * (1 + a % 12);
            let p = RailFatTreeParams {
                servers_per_segment: 1 + b % 5,
                spines: SpineCount::Oversubscription(1.0 + f64::from(a % 3)),
                nic: lp(400),
                uplink: lp(400),
                dual_plane: kind == 3,
                plane_bandwidth: None,
            };
            generators::rail_fat_tree(hosts, &p, su, seed).unwrap()
        }
        4 => generators::flat(g * (1 + a % 9), lp(400), su, seed).unwrap(),
        6 => {
            // Three-tier Clos with pods, dual-ToR for odd b.
            let hosts = g * (1 + a % 24);
            let p = llmsim_topo::three_tier::ThreeTierParams {
                servers_per_segment: 1 + b % 3,
                segments_per_pod: 1 + (b / 3) % 3,
                spines: 1 + a % 3,
                core_uplinks: 1 + (a / 3) % 3,
                nic: lp(400),
                fabric: lp(400),
                dual_tor: b % 2 == 1,
            };
            llmsim_topo::three_tier::three_tier(hosts, &p, su, seed).unwrap()
        }
        _ => {
            // An imported (BFS-routed) copy of a random generated topology.
            let t = build((a % 4) as u8, a / 4, g, b, seed);
            parse_ns3(&to_ns3(&t), "prop.txt", seed).unwrap().topology
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]
    #[test]
    fn routes_reach_dst_without_loops(
        kind in 0u8..7, a in 0u32..64, g in prop::sample::select(vec![1u32, 2, 4, 8]), b in 0u32..512, seed: u64,
        pairs in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 1..24),
    ) {
        let t = build(kind, a, g, b, seed);
        let h = t.num_hosts();
        let mut path: Vec<LinkId> = Vec::new();
        for (s, d, hash) in pairs {
            let (s, d) = (NodeId(s % h), NodeId(d % h));
            path.clear();
            t.route(s, d, hash, &mut path).unwrap();
            let mut seen = vec![false; t.num_nodes()];
            let mut at = s;
            seen[at.idx()] = true;
            for &l in &path {
                prop_assert!(l.idx() < t.num_links());
                let link = t.link(l);
                prop_assert_eq!(link.src, at);
                prop_assert!(t.ports(at).contains(&l));
                at = link.dst;
                prop_assert!(!seen[at.idx()], "loop at {} in {}", at, t.name);
                seen[at.idx()] = true;
            }
            prop_assert_eq!(at, d);
            let mut again = Vec::new();
            t.route(s, d, hash, &mut again).unwrap();
            prop_assert_eq!(&again, &path);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// Issue 32 §2: with fabric cables down, no route uses a failed link; a route the rule cannot
    /// find says so (never a wrong path). With no failure, the hop a flow takes is one of the
    /// equal-cost candidates `next_hops` lists.
    #[test]
    fn no_route_uses_a_failed_link(
        kind in 0u8..7, a in 0u32..64, g in prop::sample::select(vec![1u32, 2, 4, 8]), b in 0u32..512, seed: u64,
        down in 0u32..6, fail_seed: u64,
        pairs in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 1..24),
    ) {
        let mut t = build(kind, a, g, b, seed);
        let h = t.num_hosts();
        let mut path: Vec<LinkId> = Vec::new();
        let mut hops = Vec::new();
        for &(s, d, hash) in &pairs {
            let (s, d) = (NodeId(s % h), NodeId(d % h));
            path.clear();
            t.route(s, d, hash, &mut path).unwrap();
            let mut at = s;
            for &l in &path {
                hops.clear();
                t.next_hops(at, d, &mut hops).unwrap();
                prop_assert!(hops.contains(&l), "{} not among {:?} at {}", l, hops, at);
                at = t.link(l).dst;
            }
        }
        let cables = llmsim_topo::names::random_fabric_cables(&t, down, fail_seed, "f");
        let Ok(cables) = cables else { return Ok(()); };
        for &l in &cables {
            t.set_link_down(l, true).unwrap();
        }
        let mut reached = 0;
        for (s, d, hash) in pairs {
            let (s, d) = (NodeId(s % h), NodeId(d % h));
            path.clear();
            match t.route(s, d, hash, &mut path) {
                Ok(()) => {
                    reached += 1;
                    let mut at = s;
                    for &l in &path {
                        prop_assert!(!t.is_link_down(l), "route {}->{} uses failed link {} in {}", s, d, l, t.name);
                        prop_assert_eq!(t.link(l).src, at);
                        at = t.link(l).dst;
                    }
                    prop_assert_eq!(at, d);
                }
                Err(e) => prop_assert!(matches!(e, llmsim_topo::TopoError::Unreachable { .. }), "{}", e),
            }
        }
        // Bringing every link back restores the plain routes.
        for &l in &cables {
            t.set_link_down(l, false).unwrap();
        }
        prop_assert_eq!(t.links_down(), 0);
        let _ = reached;
    }
}

/// One failed cable on a k = 4 fat-tree: every pair still routes (each switch has two ways up),
/// and never over the failed cable.
#[test]
fn one_failed_cable_is_routed_around_in_a_fat_tree() {
    let p = FatTreeParams {
        k: 4,
        host_link: lp(100),
        edge_agg: lp(100),
        agg_core: lp(100),
    };
    for cable in 0..16u64 {
        let mut t = generators::fat_tree(16, &p, ScaleUp::none(), 1).unwrap();
        let down = llmsim_topo::names::random_fabric_cables(&t, 1, cable, "f").unwrap();
        for &l in &down {
            t.set_link_down(l, true).unwrap();
        }
        let mut path = Vec::new();
        for s in 0..16 {
            for d in 0..16 {
                for hash in 0..8u64 {
                    path.clear();
                    t.route(NodeId(s), NodeId(d), hash, &mut path).unwrap();
                    assert!(path.iter().all(|l| !down.contains(l)), "{s}->{d} over {down:?}: {path:?}");
                }
            }
        }
    }
}

/// Dual-ToR three-tier: with every cable of one leaf down, every pair still routes (each NIC has
/// a port on the other leaf of its pair), and never over the failed leaf.
#[test]
fn a_dual_tor_leaf_down_leaves_every_gpu_reachable() {
    let p = llmsim_topo::three_tier::ThreeTierParams {
        servers_per_segment: 2,
        segments_per_pod: 2,
        spines: 2,
        core_uplinks: 2,
        nic: lp(400),
        fabric: lp(400),
        dual_tor: true,
    };
    let mut t = llmsim_topo::three_tier::three_tier(32, &p, scale_up(2), 3).unwrap();
    // The first leaf: the first switch node; take down every link touching it.
    let leaf = (0..t.num_nodes() as u32)
        .map(NodeId)
        .find(|&n| matches!(t.node(n), llmsim_topo::NodeKind::Switch { tier: 1 }))
        .unwrap();
    let touching: Vec<LinkId> = (0..t.links().len() as u32)
        .map(LinkId)
        .filter(|&l| t.link(l).src == leaf || t.link(l).dst == leaf)
        .collect();
    assert!(touching.len() >= 2 * (2 + 2), "hosts and spines");
    for &l in &touching {
        t.set_link_down(l, true).unwrap();
    }
    let mut path = Vec::new();
    for s in 0..32 {
        for d in 0..32 {
            if s == d {
                continue;
            }
            path.clear();
            t.route(NodeId(s), NodeId(d), u64::from(s * 7 + d), &mut path).unwrap();
            assert!(
                path.iter()
                    .all(|&l| !t.is_link_down(l) && t.link(l).src != leaf && t.link(l).dst != leaf)
            );
        }
    }
}
