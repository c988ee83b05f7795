//! The one-file families (torus, dragonfly, rail-only, full mesh, three-tier, BCube): every host reaches every host, routes
//! are loop-free and minimal, the longest equals the family's diameter, ECMP choices are
//! equal-cost, the ns-3 export re-imports to the same graph, and bad parameters name the field.

use std::collections::BTreeSet;

use llmsim_core::{LinkId, NodeId};
use llmsim_topo::ns3::{parse_ns3, to_ns3};
use llmsim_topo::{LinkKind, ScaleUp, TopoError, Topology, TopologySpec};
use proptest::prelude::*;

fn spec(json: &str) -> TopologySpec {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn su(g: u32) -> ScaleUp {
    if g == 1 {
        ScaleUp::none()
    } else {
        ScaleUp {
            gpus_per_server: g,
            ..ScaleUp::dgx_h100()
        }
    }
}

fn build(json: &str, gpus: u32, g: u32) -> Topology {
    spec(json)
        .build(gpus, su(g), 7)
        .unwrap_or_else(|e| panic!("{json} at {gpus} GPUs: {e}"))
}

/// Nodes visited following the rule from `from` to `dst` (both included).
fn walk(t: &Topology, from: NodeId, dst: NodeId, hash: u64) -> Vec<NodeId> {
    let mut at = from;
    let mut nodes = vec![at];
    while at != dst {
        let l = t
            .next_hop(at, dst, hash)
            .unwrap_or_else(|e| panic!("{}: {from}->{dst}: {e}", t.name));
        assert_eq!(t.link(l).src, at);
        assert!(t.ports(at).contains(&l));
        at = t.link(l).dst;
        assert!(
            !nodes.contains(&at),
            "{}: loop at {at} on {from}->{dst} hash {hash}: {nodes:?}",
            t.name
        );
        nodes.push(at);
    }
    nodes
}

/// Shortest host-to-host hop counts from `src`. Hosts forward only when `hosts_forward`.
fn bfs(t: &Topology, src: NodeId, hosts_forward: bool) -> Vec<u32> {
    let mut dist = vec![u32::MAX; t.num_nodes()];
    let mut q = std::collections::VecDeque::from([src]);
    dist[src.idx()] = 0;
    while let Some(v) = q.pop_front() {
        if v != src && t.is_host(v) && !hosts_forward {
            continue;
        }
        for &l in t.ports(v) {
            let u = t.link(l).dst;
            if dist[u.idx()] == u32::MAX {
                dist[u.idx()] = dist[v.idx()] + 1;
                q.push_back(u);
            }
        }
    }
    dist
}

#[derive(Clone, Copy, PartialEq)]
enum Minimal {
    /// Every route is a shortest path (hosts do not forward).
    Shortest,
    /// Shortest when GPUs may relay (rail-only's NVLink relay).
    ShortestWithRelay,
    /// At least as long as the shortest path (dragonfly: at most one global hop).
    AtLeastShortest,
}

/// Every pair, several hashes: reach, loop-free, deterministic, minimal; returns the longest.
fn check_routes(t: &Topology, minimal: Minimal) -> u32 {
    let h = t.num_hosts();
    let mut longest = 0;
    let mut path: Vec<LinkId> = Vec::new();
    for s in 0..h {
        let dist = bfs(t, NodeId(s), minimal == Minimal::ShortestWithRelay);
        for d in 0..h {
            if s == d {
                continue;
            }
            let mut lens = BTreeSet::new();
            for hash in [0u64, 1, 0x9e37_79b9, u64::MAX, u64::from(s * 31 + d)] {
                let nodes = walk(t, NodeId(s), NodeId(d), hash);
                path.clear();
                t.route(NodeId(s), NodeId(d), hash, &mut path).unwrap();
                assert_eq!(path.len() + 1, nodes.len());
                lens.insert(path.len() as u32);
                let want = dist[d as usize];
                match minimal {
                    Minimal::AtLeastShortest => assert!(path.len() as u32 >= want),
                    _ => assert_eq!(path.len() as u32, want, "{}: {s}->{d} hash {hash} not minimal", t.name),
                }
            }
            assert_eq!(lens.len(), 1, "{}: {s}->{d}: ECMP choices of different length {lens:?}", t.name);
            longest = longest.max(*lens.first().unwrap());
        }
    }
    longest
}

/// At every node of sampled routes, every next hop some flow hash picks has the same remaining
/// length (ECMP among equal-cost hops only), and each node offers at least one.
fn check_ecmp_equal_cost(t: &Topology) -> usize {
    let h = t.num_hosts();
    let mut multi = 0;
    for s in (0..h).step_by(3) {
        for d in (0..h).step_by(5) {
            if s == d {
                continue;
            }
            for &at in &walk(t, NodeId(s), NodeId(d), 5) {
                if at == NodeId(d) {
                    break;
                }
                let mut rest = BTreeSet::new();
                let mut hops = BTreeSet::new();
                for hash in 0..32u64 {
                    let l = t.next_hop(at, NodeId(d), hash.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap();
                    hops.insert(l);
                    rest.insert(walk(t, t.link(l).dst, NodeId(d), 11).len());
                }
                assert_eq!(
                    rest.len(),
                    1,
                    "{}: at {at} toward {d}: next hops {hops:?} differ in cost {rest:?}",
                    t.name
                );
                multi += usize::from(hops.len() > 1);
            }
        }
    }
    multi
}

fn link_set(t: &Topology) -> Vec<(u32, u32, u64, u64, u8)> {
    let mut v: Vec<_> = t
        .links()
        .iter()
        .map(|l| {
            let k = match l.kind {
                LinkKind::NvLink => 0,
                LinkKind::HostNic => 1,
                LinkKind::Fabric => 2,
            };
            (l.src.0, l.dst.0, l.bandwidth.bps(), l.latency.as_ps(), k)
        })
        .collect();
    v.sort_unstable();
    v
}

fn check_ns3_round_trip(t: &Topology) {
    let text = to_ns3(t);
    let imp = parse_ns3(&text, "family.txt", 7).unwrap();
    let back = &imp.topology;
    assert_eq!(imp.file_ids, (0..t.num_nodes() as u32).collect::<Vec<_>>(), "no renumbering");
    assert_eq!(back.num_hosts(), t.num_hosts());
    assert_eq!(back.gpus_per_server(), t.gpus_per_server());
    assert_eq!(back.nodes(), t.nodes(), "{}: same kinds and tiers", t.name);
    assert_eq!(link_set(back), link_set(t), "{}: same cables", t.name);
    assert_eq!(to_ns3(back), text);
}

fn check_family(t: &Topology, minimal: Minimal) {
    let longest = check_routes(t, minimal);
    let s = t.describe();
    assert_eq!(s.diameter_hops, longest, "{}: describe's diameter vs longest route\n{s}", t.name);
    check_ns3_round_trip(t);
}

#[test]
fn torus_2d_and_3d_route_dimension_order_minimally() {
    for (json, gpus, g) in [
        (r#"{"kind":"torus","dims":[4,4],"hosts_per_router":2}"#, 32, 2),
        (r#"{"kind":"torus","dims":[3,4,2]}"#, 192, 8),
        (r#"{"kind":"torus","dims":[5,3]}"#, 15, 1),
        (r#"{"kind":"torus"}"#, 64, 1),
        (r#"{"kind":"torus","dimensions":2}"#, 96, 4),
    ] {
        let t = build(json, gpus, g);
        check_family(&t, Minimal::Shortest);
        let multi = check_ecmp_equal_cost(&t);
        if json.contains("[4,4]") {
            assert!(multi > 0, "even rings tie at the antipode: ECMP over both ways");
        }
        // The closed-form bisection agrees with a max flow.
        assert_eq!(t.describe().bisection_bandwidth, t.bisection_by_max_flow(), "{}", t.name);
    }
    let t = build(r#"{"kind":"torus"}"#, 1024, 8);
    assert_eq!(t.name, "torus-4x4x8-1024", "128 routers, most cubic shape");
    assert_eq!(t.describe().diameter_hops, 2 + 2 + 2 + 4);
}

#[test]
fn full_mesh_routes_one_hop_per_dimension() {
    for (json, gpus, g) in [
        (r#"{"kind":"full-mesh","dims":[4,4],"hosts_per_router":2}"#, 32, 2),
        (r#"{"kind":"full-mesh","dims":[3,4,2]}"#, 192, 8),
        (r#"{"kind":"full-mesh","dims":[5,3]}"#, 15, 1),
        (r#"{"kind":"full-mesh","dims":[2,2,2,2]}"#, 16, 1),
        (r#"{"kind":"full-mesh"}"#, 64, 1),
        (r#"{"kind":"full-mesh","dimensions":3}"#, 96, 4),
    ] {
        let t = build(json, gpus, g);
        check_family(&t, Minimal::Shortest);
        // Two or more dimensions to correct: the hash picks the order, every choice minimal.
        assert!(check_ecmp_equal_cost(&t) > 0, "{}: no ECMP choice", t.name);
        // The closed-form bisection agrees with a max flow (where it has one: even last dim).
        let s = t.describe();
        assert_eq!(s.bisection_bandwidth, t.bisection_by_max_flow(), "{}", t.name);
    }
    let t = build(r#"{"kind":"full-mesh"}"#, 1024, 8);
    assert_eq!(t.name, "full-mesh-8x16-1024", "128 routers, most square 2-D shape");
    // Host -> router -> (one hop per dimension) -> router -> host.
    assert_eq!(t.describe().diameter_hops, 2 + 2);
    // 8 + 16 - 2 = 22 router links per router, 128 routers, plus 2 per host.
    let fabric = t.describe().links - 2 * 1024 - 2 * 1024 / 8 * 8;
    assert_eq!(fabric, 128 * (7 + 15), "{}", t.describe());
}

#[test]
fn three_tier_routes_up_down_minimally() {
    for (json, gpus, g) in [
        // 3 pods of 2 segments of 2 servers, 2 rails; the last pod and segment partial.
        (
            r#"{"kind":"three-tier","servers_per_segment":2,"segments_per_pod":2,"spines":2}"#,
            18,
            2,
        ),
        // One pod: no core layer.
        (r#"{"kind":"three-tier","servers_per_segment":4,"segments_per_pod":4}"#, 32, 4),
        // One rail, oversubscribed at both tiers.
        (
            r#"{"kind":"three-tier","servers_per_segment":3,"segments_per_pod":2,"oversubscription":1.5,"core_oversubscription":2}"#,
            30,
            1,
        ),
        (r#"{"kind":"three-tier","servers_per_segment":2,"segments_per_pod":2}"#, 64, 4),
        // Dual-ToR: two leaves per rail and segment, a NIC port on each.
        (
            r#"{"kind":"three-tier","servers_per_segment":2,"segments_per_pod":2,"spines":2,"dual_tor":true}"#,
            18,
            2,
        ),
        (
            r#"{"kind":"three-tier","servers_per_segment":3,"segments_per_pod":1,"dual_tor":true}"#,
            9,
            1,
        ),
    ] {
        let t = build(json, gpus, g);
        check_family(&t, Minimal::Shortest);
        assert!(check_ecmp_equal_cost(&t) > 0, "{}: no ECMP choice", t.name);
    }
    let t = build(
        r#"{"kind":"three-tier","servers_per_segment":2,"segments_per_pod":2,"spines":2}"#,
        18,
        2,
    );
    assert_eq!(t.name, "three-tier-3pod-5seg-18");
    assert_eq!(t.describe().diameter_hops, 6, "host, leaf, pod spine, core, pod spine, leaf, host");
    // Defaults at 65,536 GPUs: 32 pods of 8 x 32 servers; 32 spines per pod (32 x 400G down per
    // leaf), 64 core uplinks per spine (64 leaves per pod), so 32 x 64 cores of 32 ports.
    let t = build(r#"{"kind":"three-tier"}"#, 65_536, 8);
    let s = t.describe();
    assert_eq!(t.name, "three-tier-32pod-256seg-65536");
    let (leaves, spines, cores) = (256 * 8, 32 * 32, 32 * 64);
    assert_eq!(s.cost.switches, leaves + spines + cores, "{s}");
    assert_eq!(s.cost.cables, u64::from(65_536 + leaves * 32 + spines * 64), "{s}");
    // Non-blocking at both tiers: half the hosts can send to the other half at line rate.
    assert_eq!(s.diameter_hops, 6);
    // Dual-ToR: every GPU has two half-rate NIC ports on two different leaves; twice the leaves.
    let t = build(r#"{"kind":"three-tier","dual_tor":true}"#, 4096, 8);
    for h in 0..t.num_hosts() {
        let nics: Vec<_> = t
            .ports(NodeId(h))
            .iter()
            .map(|&l| t.link(l))
            .filter(|l| l.kind == LinkKind::HostNic)
            .collect();
        assert_eq!(nics.len(), 2, "host {h}");
        assert_ne!(nics[0].dst, nics[1].dst, "host {h}: both ports on one leaf");
        assert_eq!(nics[0].bandwidth.bps(), 200_000_000_000);
    }
    // 16 segments x 8 rails x 2 leaves; a leaf's 32 x 200G down need 16 x 400G spines per pod
    // (2 pods); a spine's 128 leaves need 128 core uplinks, so 16 groups x 128 cores.
    assert_eq!(t.describe().cost.switches, 16 * 8 * 2 + 2 * 16 + 16 * 128);
    // 2:1 toward the core halves the cores.
    let t = build(r#"{"kind":"three-tier","core_oversubscription":2}"#, 65_536, 8);
    assert_eq!(t.describe().cost.switches, leaves + spines + cores / 2);
}

#[test]
fn dragonfly_minimal_routes_use_one_global_hop() {
    for (json, gpus, g) in [
        // Maximum size: g = a*h + 1 = 9 groups, one global cable per group pair.
        (
            r#"{"kind":"dragonfly","routers_per_group":4,"hosts_per_router":2,"global_links_per_router":2}"#,
            72,
            2,
        ),
        // 3 groups, 4 parallel global cables per pair: ECMP across gateways.
        (
            r#"{"kind":"dragonfly","routers_per_group":4,"hosts_per_router":2,"global_links_per_router":2}"#,
            24,
            1,
        ),
        // Partly filled last group.
        (
            r#"{"kind":"dragonfly","routers_per_group":3,"hosts_per_router":2,"global_links_per_router":1}"#,
            20,
            2,
        ),
        // Sized from the GPU count: h = 2, a = 4, p = 2.
        (r#"{"kind":"dragonfly"}"#, 64, 1),
    ] {
        let t = build(json, gpus, g);
        check_family(&t, Minimal::AtLeastShortest);
        let multi = check_ecmp_equal_cost(&t);
        if gpus == 24 {
            assert!(multi > 0, "parallel global cables give ECMP");
        }
    }
    let t = build(
        r#"{"kind":"dragonfly","routers_per_group":4,"hosts_per_router":2,"global_links_per_router":2}"#,
        72,
        2,
    );
    assert_eq!(t.describe().diameter_hops, 5, "host, local, global, local, host");
}

#[test]
fn rail_only_crosses_rails_over_nvlink() {
    for (json, gpus, g) in [
        (r#"{"kind":"rail-only","servers_per_leaf":2}"#, 40, 8),
        (r#"{"kind":"rail-only","servers_per_leaf":3,"spines":2}"#, 28, 4),
        (r#"{"kind":"rail-only"}"#, 64, 8),
        (r#"{"kind":"rail-only","servers_per_leaf":2}"#, 6, 1),
    ] {
        let t = build(json, gpus, g);
        check_family(&t, Minimal::ShortestWithRelay);
        check_ecmp_equal_cost(&t);
    }
    let t = build(r#"{"kind":"rail-only","servers_per_leaf":2}"#, 40, 8);
    // Cross-rail, other leaf: NVLink to the rail-5 GPU of server 0, then rail 5's leaf, spine, leaf.
    let nodes = walk(&t, NodeId(2), NodeId(4 * 8 + 5), 0);
    assert_eq!(nodes.len(), 7, "{nodes:?}");
    assert_eq!(nodes[2], NodeId(5), "relay: server 0's GPU on rail 5");
    // No switch connects two rails.
    for l in t.links() {
        if l.kind == LinkKind::Fabric {
            let rail_of = |n: NodeId| {
                t.ports(n)
                    .iter()
                    .find_map(|&p| t.is_host(t.link(p).dst).then(|| t.local_rank(t.link(p).dst)))
            };
            if let (Some(a), Some(b)) = (rail_of(l.src), rail_of(l.dst)) {
                assert_eq!(a, b);
            }
        }
    }
}

/// BCube(n, k): node and link counts from the closed form, digit-correcting routes as short as
/// the shortest host-relayed paths, diameter 2(k + 1) links, every differing digit an ECMP choice.
#[test]
fn bcube_routes_by_digit_correction() {
    // (spec, GPUs, GPUs per server, n, k)
    for (json, gpus, g, n, k) in [
        (r#"{"kind":"bcube","n":4,"k":1}"#, 16, 1, 4u32, 1u32),
        (r#"{"kind":"bcube","n":4,"k":2}"#, 32, 1, 4, 2),
        (r#"{"kind":"bcube","n":4}"#, 48, 2, 4, 2),
        (r#"{"kind":"bcube","n":3,"k":0}"#, 3, 1, 3, 0),
        (r#"{"kind":"bcube"}"#, 128, 8, 8, 2),
        (r#"{"kind":"bcube","n":8,"k":1}"#, 64, 8, 8, 1),
    ] {
        let t = build(json, gpus, g);
        let nk = n.pow(k);
        let m = gpus / nk;
        let switches = if k == 0 { 1 } else { k * m * n.pow(k - 1) + nk };
        let nvswitches = if g > 1 { gpus / g } else { 0 };
        assert_eq!(t.num_nodes() as u32, gpus + nvswitches + switches, "{json}");
        let nvlinks = if g > 1 { 2 * gpus } else { 0 };
        assert_eq!(t.num_links() as u32, 2 * gpus * (k + 1) + nvlinks, "{json}");
        assert!(t.hosts_forward());
        let longest = check_routes(&t, Minimal::ShortestWithRelay);
        assert_eq!(longest, if t.num_servers() == 1 { 2 } else { 2 * (k + 1) }, "{json}");
        assert_eq!(t.describe().diameter_hops, longest);
        check_ns3_round_trip(&t);
        if k > 0 {
            assert!(check_ecmp_equal_cost(&t) > 0, "{json}: some host has several digits to fix");
        }
    }
    // ECMP candidates at a host are exactly its NIC ports of the differing digits.
    let t = build(r#"{"kind":"bcube","n":4,"k":2}"#, 32, 1);
    let mut hops = Vec::new();
    // 0 = (0,0,0), 27 = (1,2,3): every digit differs.
    t.next_hops(NodeId(0), NodeId(27), &mut hops).unwrap();
    assert_eq!(hops, t.ports(NodeId(0)).to_vec());
    hops.clear();
    // 4 = (0,1,0): only digit 1 differs.
    t.next_hops(NodeId(0), NodeId(4), &mut hops).unwrap();
    assert_eq!(hops, vec![t.ports(NodeId(0))[1]]);
}

/// A failed host cable in BCube(4, 2): pairs differing in two or more digits still route, by
/// another digit order, and never over the cable; pairs that can only use it are unreachable.
#[test]
fn bcube_routes_around_a_failed_host_cable() {
    let mut t = build(r#"{"kind":"bcube","n":4,"k":2}"#, 32, 1);
    // Host 5's level-0 cable, both directions.
    let up = t.ports(NodeId(5))[0];
    let sw = t.link(up).dst;
    let down = *t.ports(sw).iter().find(|&&l| t.link(l).dst == NodeId(5)).unwrap();
    t.set_link_down(up, true).unwrap();
    t.set_link_down(down, true).unwrap();
    let digits = |h: u32| [h % 4, h / 4 % 4, h / 16];
    let mut path = Vec::new();
    for s in 0..32u32 {
        for d in 0..32u32 {
            if s == d {
                continue;
            }
            let differ = (0..3).filter(|&i| digits(s)[i] != digits(d)[i]).count();
            for hash in 0..4u64 {
                path.clear();
                match t.route(NodeId(s), NodeId(d), hash, &mut path) {
                    Ok(()) => assert!(!path.contains(&up) && !path.contains(&down), "{s}->{d}"),
                    Err(e) => {
                        assert!(matches!(e, TopoError::Unreachable { .. }));
                        // Only a pair whose one differing digit is digit 0 at host 5 has no other way.
                        assert_eq!(differ, 1, "{s}->{d}: {e}");
                        assert!((s == 5 || d == 5) && digits(s)[0] != digits(d)[0], "{s}->{d}: {e}");
                    }
                }
            }
        }
    }
}

/// Group of a dragonfly router (routers follow hosts and NVSwitches, `a` per group).
fn df_group(t: &Topology, n: NodeId, router0: u32, a: u32) -> Option<u32> {
    matches!(t.node(n), llmsim_topo::NodeKind::Switch { .. }).then(|| (n.0 - router0) / a)
}

/// Valiant on a dragonfly (9 groups of 4 routers, 2 hosts each): every pair routes loop-free;
/// an inter-group route crosses at most two global cables and meets at most one group besides
/// its own two; over many flows every other group serves as the intermediate; the same flow
/// hash gives the same route. UGAL's route classes are the minimal rule's route (class 0) and
/// Valiant's (class 1), built independently from `routing: minimal` and `routing: valiant`.
#[test]
fn dragonfly_valiant_goes_through_one_intermediate_group() {
    let base = r#""routers_per_group":4,"hosts_per_router":2,"global_links_per_router":2"#;
    let val = build(&format!(r#"{{"kind":"dragonfly",{base},"routing":"valiant"}}"#), 72, 1);
    let min = build(&format!(r#"{{"kind":"dragonfly",{base}}}"#), 72, 1);
    let ugal = build(&format!(r#"{{"kind":"dragonfly",{base},"routing":"ugal"}}"#), 72, 1);
    assert_eq!(val.routing().name(), "dragonfly valiant");
    assert_eq!(min.route_classes(), 1);
    assert_eq!(val.route_classes(), 1);
    assert_eq!(ugal.route_classes(), 5);
    let (router0, a) = (72, 4);
    let mut via_seen = BTreeSet::new();
    let (mut p, mut q) = (Vec::new(), Vec::new());
    for s in 0..72u32 {
        for d in 0..72u32 {
            if s == d {
                continue;
            }
            for hash in [0u64, 1, 0x9e37_79b9, u64::from(s * 131 + d)] {
                let nodes = walk(&val, NodeId(s), NodeId(d), hash);
                let groups: Vec<u32> = nodes.iter().filter_map(|&n| df_group(&val, n, router0, a)).collect();
                let mut distinct = groups.clone();
                distinct.dedup();
                let (sg, dg) = (s / 8, d / 8);
                assert_eq!(distinct.first(), Some(&sg));
                assert_eq!(distinct.last(), Some(&dg));
                assert!(distinct.len() <= 3, "{s}->{d}: groups {distinct:?}");
                if sg == dg {
                    assert_eq!(distinct.len(), 1);
                } else if distinct.len() == 3 {
                    via_seen.insert((sg, dg, distinct[1]));
                }
                assert!(nodes.len() - 1 <= 8, "{s}->{d}: {} links", nodes.len() - 1);
                p.clear();
                val.route(NodeId(s), NodeId(d), hash, &mut p).unwrap();
                q.clear();
                val.route(NodeId(s), NodeId(d), hash, &mut q).unwrap();
                assert_eq!(p, q);
                // UGAL class 0 = minimal's route, class 1 = Valiant's (same seed and hash).
                q.clear();
                ugal.route_in_class(NodeId(s), NodeId(d), hash, 1, &mut q).unwrap();
                assert_eq!(p, q, "{s}->{d}");
                p.clear();
                min.route(NodeId(s), NodeId(d), hash, &mut p).unwrap();
                q.clear();
                ugal.route_in_class(NodeId(s), NodeId(d), hash, 0, &mut q).unwrap();
                assert_eq!(p, q);
                q.clear();
                ugal.route(NodeId(s), NodeId(d), hash, &mut q).unwrap();
                assert_eq!(p, q, "UGAL without loads routes minimally");
            }
        }
    }
    // Every (source group, destination group) pair used several intermediates, and every group
    // served as one.
    let vias: BTreeSet<u32> = via_seen.iter().map(|x| x.2).collect();
    assert_eq!(vias, (0..9).collect());
    // Minimal routes still have the minimal rule's diameter; next_hops lists its candidates.
    assert_eq!(val.describe().diameter_hops, min.describe().diameter_hops);
    let mut h1 = Vec::new();
    let mut h2 = Vec::new();
    for at in 72..(72 + 36) {
        h1.clear();
        h2.clear();
        val.next_hops(NodeId(at), NodeId(70), &mut h1).unwrap();
        min.next_hops(NodeId(at), NodeId(70), &mut h2).unwrap();
        assert_eq!(h1, h2);
    }
}

/// The minimal dragonfly rule's `next_hops` are exactly the hops `next_hop` picks over many
/// flow hashes, all equal-cost; taking one of several down leaves the pair routed around it.
#[test]
fn dragonfly_next_hops_list_every_equal_cost_hop() {
    // 3 groups of 2 routers x 2 global links: 4 global ports per group for 2 peers, 2 copies.
    let json = r#"{"kind":"dragonfly","routers_per_group":2,"hosts_per_router":2,"global_links_per_router":2}"#;
    let t = build(json, 12, 1);
    let mut several = Vec::new();
    for at in 0..t.num_nodes() as u32 {
        for d in 0..12u32 {
            if at == d {
                continue;
            }
            let mut listed = Vec::new();
            t.next_hops(NodeId(at), NodeId(d), &mut listed).unwrap();
            let picked: BTreeSet<LinkId> = (0..64u64)
                .map(|h| t.next_hop(NodeId(at), NodeId(d), h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap())
                .collect();
            assert_eq!(listed.iter().copied().collect::<BTreeSet<_>>(), picked, "at {at} toward {d}");
            let rest: BTreeSet<usize> = listed.iter().map(|&l| walk(&t, t.link(l).dst, NodeId(d), 1).len()).collect();
            assert_eq!(rest.len(), 1, "at {at} toward {d}: unequal candidates");
            if listed.len() > 1 && at >= 12 {
                several.push((at, d, listed[0]));
            }
        }
    }
    assert!(!several.is_empty(), "some router has two equal-cost hops");
    for (at, d, l) in several {
        let mut f = t.clone();
        f.set_link_down(l, true).unwrap();
        let mut path = Vec::new();
        for s in 0..12u32 {
            if s == d {
                continue;
            }
            for hash in 0..4 {
                path.clear();
                if f.route(NodeId(s), NodeId(d), hash, &mut path).is_ok() {
                    assert!(!path.contains(&l));
                }
            }
        }
        // From the router with the choice, the pair still routes.
        let mut hops = Vec::new();
        f.next_hops(NodeId(at), NodeId(d), &mut hops).unwrap();
        assert!(!hops.contains(&l) && !hops.is_empty());
    }
}

/// Node sequences of every pair's route under a few hashes.
fn all_walks(t: &Topology) -> Vec<Vec<NodeId>> {
    let h = t.num_hosts();
    let mut v = Vec::new();
    for s in 0..h {
        for d in 0..h {
            for hash in [0u64, 7, 0x9e37_79b9, u64::from(s * 131 + d)] {
                v.push(walk(t, NodeId(s), NodeId(d), hash));
            }
        }
    }
    v
}

/// The declared Clos builds the same graph as the fat-tree, leaf-spine and (one GPU per server,
/// full pods) three-tier generators for their parameters: the same nodes and tiers, the same cables, and the same route (node by node) for
/// every pair and flow hash, full and partly filled, with and without NVLink servers.
#[test]
fn clos_tiers_equal_the_fat_tree_and_leaf_spine_generators() {
    for (k, gpus, g) in [(4u32, 16u32, 1u32), (6, 40, 2), (6, 54, 1), (4, 8, 4)] {
        let h = k / 2;
        let ft = build(&format!(r#"{{"kind":"fat-tree","k":{k}}}"#), gpus, g);
        let json = format!(r#"{{"kind":"clos","tiers":[{{"down":{h},"up":{h}}},{{"down":{h},"up":{h}}},{{"radix":{k}}}]}}"#);
        let c = build(&json, gpus, g);
        assert_eq!(c.nodes(), ft.nodes(), "{json} at {gpus}");
        assert_eq!(link_set(&c), link_set(&ft), "{json} at {gpus}");
        for n in 0..c.num_nodes() as u32 {
            let far = |t: &Topology| t.ports(NodeId(n)).iter().map(|&l| t.link(l).dst).collect::<Vec<_>>();
            assert_eq!(far(&c), far(&ft), "port order at node {n}");
        }
        assert_eq!(all_walks(&c), all_walks(&ft), "{json} at {gpus}");
        assert_eq!(c.describe().diameter_hops, ft.describe().diameter_hops);
    }
    for (hpl, spines, gpus, g) in [(4u32, 3u32, 20u32, 1u32), (8, 2, 64, 8), (4, 4, 6, 2)] {
        let sl = build(
            &format!(r#"{{"kind":"spine-leaf","hosts_per_leaf":{hpl},"spines":{spines}}}"#),
            gpus,
            g,
        );
        let json = format!(r#"{{"kind":"clos","tiers":[{{"down":{hpl},"up":{spines}}},{{}}]}}"#);
        let c = build(&json, gpus, g);
        assert_eq!(c.nodes(), sl.nodes(), "{json} at {gpus}");
        assert_eq!(link_set(&c), link_set(&sl), "{json} at {gpus}");
        assert_eq!(all_walks(&c), all_walks(&sl), "{json} at {gpus}");
    }
    // A three-tier Clos with one GPU per server (no rails) and full pods: leaves of `sps`
    // servers, `spines` pod spines, `core_uplinks` cores per spine group.
    for (sps, spp, spines, ratio, pods) in [(2u32, 2u32, 2u32, 1.0f64, 3u32), (3, 2, 2, 2.0, 2), (2, 3, 1, 1.0, 4)] {
        let gpus = sps * spp * pods;
        let tt = build(
            &format!(
                r#"{{"kind":"three-tier","servers_per_segment":{sps},"segments_per_pod":{spp},"spines":{spines},"core_oversubscription":{ratio}}}"#
            ),
            gpus,
            1,
        );
        let up2 = (f64::from(spp) / ratio).ceil() as u32;
        let json = format!(r#"{{"kind":"clos","tiers":[{{"down":{sps},"up":{spines}}},{{"down":{spp},"up":{up2}}},{{}}]}}"#);
        let c = build(&json, gpus, 1);
        assert_eq!(c.nodes(), tt.nodes(), "{json} at {gpus}");
        assert_eq!(link_set(&c), link_set(&tt), "{json} at {gpus}");
        assert_eq!(all_walks(&c), all_walks(&tt), "{json} at {gpus}");
    }
}

/// A four-tier oversubscribed Clos: switch counts from XGFT's closed form (tier i has
/// `m_{i+1} * .. * m_h * w_1 * .. * w_i` switches), minimal up-down routes, diameter 2h, ns-3
/// round trip, and ECMP over the parents.
#[test]
fn clos_four_tiers_route_up_down_minimally() {
    // m = (2, 2, 3, need), w = (1, 2, 1, 2).
    let json = r#"{"kind":"clos","tiers":[{"down":2,"up":2},{"down":2,"up":1},{"down":3,"up":2},{}]}"#;
    for (gpus, g) in [(36u32, 1u32), (30, 2), (24, 4)] {
        let t = build(json, gpus, g);
        let m = [2u32, 2, 3, gpus.div_ceil(12)];
        let w = [1u32, 2, 1, 2];
        let switches: u32 = (0..4)
            .map(|i| m[i + 1..].iter().product::<u32>() * w[..=i].iter().product::<u32>())
            .sum();
        let nvswitches = if g > 1 { gpus / g } else { 0 };
        assert_eq!(t.num_nodes() as u32, gpus + nvswitches + switches, "{gpus}");
        let longest = check_routes(&t, Minimal::Shortest);
        assert_eq!(longest, 8, "{gpus}");
        assert_eq!(t.describe().diameter_hops, 8);
        assert!(check_ecmp_equal_cost(&t) > 0);
        // Partly filled (30): switches without a host below them are farther from a host than
        // their tier; the export's tier lines carry their tiers through the round trip.
        check_ns3_round_trip(&t);
        assert_eq!(to_ns3(&t).contains("# llmsim tiers:"), gpus % 12 != 0, "{gpus}");
    }
}

/// Dual-ToR on the declared Clos (so on a fat-tree or leaf-spine shape): each GPU's two half-rate
/// ports reach the two leaves of its block, routes stay minimal with equal-cost choices, and with
/// every cable of one leaf down every pair still routes, never through that leaf.
#[test]
fn clos_dual_tor_survives_a_leaf() {
    let json = r#"{"kind":"clos","dual_tor":true,"tiers":[{"down":2,"up":2},{"down":2,"up":2},{}]}"#;
    let one = r#"{"kind":"clos","tiers":[{"down":2,"up":2},{"down":2,"up":2},{}]}"#;
    for (gpus, g) in [(16u32, 1u32), (16, 2)] {
        let t = build(json, gpus, g);
        let single = build(one, gpus, g);
        let leaves = |t: &Topology| {
            t.nodes()
                .iter()
                .filter(|k| matches!(k, llmsim_topo::NodeKind::Switch { tier: 1 }))
                .count()
        };
        assert_eq!(leaves(&t), 2 * leaves(&single));
        let nic = |t: &Topology| t.links().iter().filter(|l| l.kind == LinkKind::HostNic).count();
        assert_eq!(nic(&t), 2 * nic(&single));
        assert_eq!(t.nic_bandwidth(NodeId(0)), single.nic_bandwidth(NodeId(0)), "two half-rate ports");
        let longest = check_routes(&t, Minimal::Shortest);
        assert_eq!(longest, 6);
        assert!(check_ecmp_equal_cost(&t) > 0);
        check_ns3_round_trip(&t);
        let mut f = t.clone();
        let leaf = (0..f.num_nodes() as u32)
            .map(NodeId)
            .find(|&n| matches!(f.node(n), llmsim_topo::NodeKind::Switch { tier: 1 }))
            .unwrap();
        let touching: Vec<LinkId> = (0..f.num_links() as u32)
            .map(LinkId)
            .filter(|&l| f.link(l).src == leaf || f.link(l).dst == leaf)
            .collect();
        for &l in &touching {
            f.set_link_down(l, true).unwrap();
        }
        let mut path = Vec::new();
        for s in 0..gpus {
            for d in 0..gpus {
                for hash in 0..4u64 {
                    path.clear();
                    f.route(NodeId(s), NodeId(d), hash, &mut path).unwrap();
                    assert!(path.iter().all(|&l| f.link(l).src != leaf && f.link(l).dst != leaf));
                }
            }
        }
    }
}

/// Torus ring orders are snakes: for every variant of a 3 x 4 x 2 torus, consecutive routers in
/// ring order differ by one step in exactly one dimension (no wrap-around needed), odd sizes
/// included; each variant visits every router once, and variants `2i` and `2i + 1` are each
/// other's reverse.
#[test]
fn torus_ring_orders_are_snakes() {
    let t = build(r#"{"kind":"torus","dims":[3,4,2],"hosts_per_router":1}"#, 24, 1);
    let coord = |h: u32| [h % 3, h / 3 % 4, h / 12];
    for v in 0..6u32 {
        let mut order: Vec<u32> = (0..24).collect();
        order.sort_by_key(|&h| t.ring_order_key(NodeId(h), v).unwrap());
        let keys: BTreeSet<u64> = (0..24).map(|h| t.ring_order_key(NodeId(h), v).unwrap()).collect();
        assert_eq!(keys.len(), 24, "variant {v}: distinct positions");
        for w in order.windows(2) {
            let (a, b) = (coord(w[0]), coord(w[1]));
            let steps: u32 = (0..3).map(|i| a[i].abs_diff(b[i])).sum();
            assert_eq!(steps, 1, "variant {v}: {a:?} -> {b:?} in {order:?}");
        }
        if v % 2 == 1 {
            let mut prev: Vec<u32> = (0..24).collect();
            prev.sort_by_key(|&h| t.ring_order_key(NodeId(h), v - 1).unwrap());
            prev.reverse();
            assert_eq!(order, prev, "variant {v} reverses {}", v - 1);
        }
    }
}

fn invalid(json: &str, gpus: u32, g: u32) -> (String, String) {
    match spec(json).build(gpus, su(g), 0) {
        Err(TopoError::Invalid(e)) => (e.field, e.message),
        other => panic!("{json}: expected a field error, got {other:?}"),
    }
}

#[test]
fn impossible_parameters_name_the_field_and_valid_values() {
    let (f, m) = invalid(r#"{"kind":"torus","dims":[4,4]}"#, 1024, 8);
    assert_eq!(f, "topology.dims");
    assert!(m.contains("product is 128") && m.contains("e.g. 8x16"), "{m}");
    let (f, m) = invalid(r#"{"kind":"torus","hosts_per_router":3}"#, 64, 1);
    assert_eq!(f, "topology.hosts_per_router");
    assert!(m.contains("valid: 1, 2, 4, 8"), "{m}");
    let (f, _) = invalid(r#"{"kind":"torus","dims":[2,2,2,2]}"#, 16, 1);
    assert_eq!(f, "topology.dims");
    let (f, m) = invalid(r#"{"kind":"torus","dimensions":4}"#, 16, 1);
    assert_eq!(f, "topology.dimensions");
    assert!(m.contains("valid: 2, 3"), "{m}");
    // The full mesh shares the grid rules: four dims allowed, the same hints.
    let (f, m) = invalid(r#"{"kind":"full-mesh","dims":[4,4]}"#, 1024, 8);
    assert_eq!(f, "topology.dims");
    assert!(m.contains("product is 128") && m.contains("e.g. 8x16"), "{m}");
    assert!(build(r#"{"kind":"full-mesh","dims":[2,2,2,2]}"#, 16, 1).num_hosts() == 16);
    let (f, m) = invalid(r#"{"kind":"full-mesh","dims":[2,2,2,2,1]}"#, 16, 1);
    assert_eq!(f, "topology.dims");
    assert!(m.contains("not a full-mesh shape") && m.contains("1 to 4 sizes"), "{m}");
    let (f, m) = invalid(
        r#"{"kind":"dragonfly","routers_per_group":4,"hosts_per_router":2,"global_links_per_router":1}"#,
        128,
        1,
    );
    assert_eq!(f, "topology.global_links_per_router");
    assert!(m.contains("global_links_per_router >= 4") && m.contains("radix"), "{m}");
    let (f, m) = invalid(r#"{"kind":"dragonfly","routers_per_group":4,"groups":2}"#, 128, 1);
    assert_eq!(f, "topology.groups");
    assert!(m.contains("at least 16"), "{m}");
    let (f, _) = invalid(r#"{"kind":"rail-only","servers_per_leaf":0}"#, 64, 8);
    assert_eq!(f, "topology.servers_per_leaf");
    let (f, _) = invalid(r#"{"kind":"rail-only","spines":2,"oversubscription":2}"#, 64, 8);
    assert_eq!(f, "topology.spines");
    let (f, _) = invalid(r#"{"kind":"three-tier","segments_per_pod":0}"#, 64, 8);
    assert_eq!(f, "topology.segments_per_pod");
    let (f, m) = invalid(r#"{"kind":"three-tier","core_oversubscription":0}"#, 64, 8);
    assert_eq!(f, "topology.core_oversubscription");
    assert!(m.contains("2.0 (2:1)"), "{m}");
    let (f, _) = invalid(r#"{"kind":"three-tier","spines":2,"oversubscription":2}"#, 64, 8);
    assert_eq!(f, "topology.spines");
    let (f, m) = invalid(r#"{"kind":"bcube","n":4,"k":2}"#, 40, 1);
    assert_eq!(f, "gpus");
    assert!(m.contains("32, 48, ..., 64"), "{m}");
    let (f, m) = invalid(r#"{"kind":"bcube","n":6}"#, 64, 4);
    assert_eq!(f, "topology.n");
    assert!(m.contains("multiple of 4"), "{m}");
    let (f, _) = invalid(r#"{"kind":"bcube","n":4,"k":3}"#, 32, 1);
    assert_eq!(f, "gpus");
    let (f, m) = invalid(r#"{"kind":"clos","tiers":[{"down":4,"up":4},{"radix":4}]}"#, 32, 1);
    assert_eq!(f, "topology.tiers[1].radix");
    assert!(m.contains("use at least 8"), "{m}");
    let (f, _) = invalid(r#"{"kind":"clos","tiers":[{"down":4,"up":4},{"up":2}]}"#, 32, 1);
    assert_eq!(f, "topology.tiers[1].up");
    let (f, _) = invalid(r#"{"kind":"clos","tiers":[{"radix":4,"up":4},{}]}"#, 32, 1);
    assert_eq!(f, "topology.tiers[0].up");
    let (f, _) = invalid(r#"{"kind":"torus","fabric":{"bandwidth":"0bps"}}"#, 64, 8);
    assert_eq!(f, "topology.fabric");
    assert!(serde_json::from_str::<TopologySpec>(r#"{"kind":"torus","dim":[4]}"#).is_err());
}

#[test]
fn every_family_sizes_itself_from_the_gpu_count() {
    for kind in ["torus", "dragonfly", "rail-only", "full-mesh", "three-tier", "bcube", "clos"] {
        for gpus in [8, 1024, 8192] {
            let t = build(&format!(r#"{{"kind":"{kind}"}}"#), gpus, 8);
            assert_eq!(t.num_hosts(), gpus, "{}", t.name);
            let mut p = Vec::new();
            t.route(NodeId(0), NodeId(gpus - 1), 3, &mut p).unwrap();
        }
    }
}

/// A dragonfly (4 groups of 2 routers, 4 hosts per router, 4 global links per router) whose
/// router had no candidate toward host 21: a non-minimal cable copy through the same gateway as
/// the next, minimal one hid it (found by the property test below, seed cc 03a78fe7...).
#[test]
fn dragonfly_routes_every_pair_when_copies_share_a_gateway() {
    let json = r#"{"kind":"dragonfly","routers_per_group":2,"hosts_per_router":4,"global_links_per_router":4}"#;
    let t = spec(json).build(32, su(4), 0).unwrap();
    assert_eq!(t.num_hosts(), 32);
    for s in 0..32 {
        for d in 0..32 {
            for hash in [0u64, 1, 7, u64::MAX] {
                walk(&t, NodeId(s), NodeId(d), hash);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_family_instances_route_without_loops(
        kind in 0u8..6, x in 1u32..6, y in 1u32..5, z in 1u32..4, g in prop::sample::select(vec![1u32, 2, 4, 8]), seed: u64,
        pairs in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 1..32),
    ) {
        let (json, gpus) = match kind {
            0 => (format!(r#"{{"kind":"torus","dims":[{x},{y},{z}],"hosts_per_router":{g}}}"#), x * y * z * g),
            1 => (
                format!(r#"{{"kind":"dragonfly","routers_per_group":{x},"hosts_per_router":{g},"global_links_per_router":{y}}}"#),
                g * (x * y + 1).min(1 + z * 3) * x,
            ),
            2 => (format!(r#"{{"kind":"rail-only","servers_per_leaf":{x},"spines":{y}}}"#), g * (x * z + y)),
            3 => (format!(r#"{{"kind":"full-mesh","dims":[{x},{y},{z}],"hosts_per_router":{g}}}"#), x * y * z * g),
            5 => {
                // BCube(n, k) with n a multiple of the server size and m = GPUs / n^k in 2..=n.
                let n = (g * x).max(2);
                // With k = 0 the GPUs are m itself: whole servers.
                let m = if z == 1 { (g * (1 + y % x)).max(2) } else { 2 + y % (n - 1) };
                (format!(r#"{{"kind":"bcube","n":{n},"k":{}}}"#, z - 1), m * n.pow(z - 1))
            }
            _ => (
                format!(r#"{{"kind":"three-tier","servers_per_segment":{x},"segments_per_pod":{z},"spines":{y}}}"#),
                g * (x * z * y + 1),
            ),
        };
        let t = spec(&json).build(gpus, su(g), seed).unwrap();
        let h = t.num_hosts();
        for (s, d, hash) in pairs {
            let (s, d) = (NodeId(s % h), NodeId(d % h));
            walk(&t, s, d, hash);
        }
    }
}

/// Cost proxies on a k = 4 fat-tree (16 hosts, 8 edge, 8 aggregation, 4 core switches), counted
/// from its structure: every switch has k = 4 ports in use; 16 host cables, 16 edge-aggregation
/// and 16 aggregation-core cables; optics at both ends of the 32 switch-to-switch cables.
#[test]
fn cost_proxies_count_a_k4_fat_tree() {
    let t = build(r#"{"kind":"fat-tree","k":4}"#, 16, 1);
    let c = t.describe().cost;
    assert_eq!(c.switches, 8 + 8 + 4);
    assert_eq!(c.switch_ports, 20 * 4);
    assert_eq!(c.cables, 16 + 16 + 16);
    assert_eq!(c.optics, 2 * (16 + 16));
    // The alias UB-Mesh names the full mesh.
    assert_eq!(spec(r#"{"kind":"ub-mesh"}"#), spec(r#"{"kind":"full-mesh"}"#));
}

/// Host-to-host hop counts from `src` over links that are up (hosts do not forward).
fn bfs_up(t: &Topology, src: NodeId) -> Vec<u32> {
    let mut dist = vec![u32::MAX; t.num_nodes()];
    let mut q = std::collections::VecDeque::from([src]);
    dist[src.idx()] = 0;
    while let Some(v) = q.pop_front() {
        if v != src && t.is_host(v) {
            continue;
        }
        for &l in t.ports(v) {
            let u = t.link(l).dst;
            if !t.is_link_down(l) && dist[u.idx()] == u32::MAX {
                dist[u.idx()] = dist[v.idx()] + 1;
                q.push_back(u);
            }
        }
    }
    dist
}

/// Takes every cable of each leaf (tier-1 switch) down in turn, and checks that every pair still
/// routes under several flow hashes, never over a down link or the failed leaf, and as short as
/// the graph without the leaf allows (a BFS over the links that are up). Returns the leaves
/// tried.
fn check_every_leaf_failure(t: &Topology) -> u32 {
    let h = t.num_hosts();
    let mut tried = 0;
    let mut path = Vec::new();
    for leaf in (0..t.num_nodes() as u32).map(NodeId) {
        if !matches!(t.node(leaf), llmsim_topo::NodeKind::Switch { tier: 1 }) {
            continue;
        }
        let mut f = t.clone();
        for l in (0..f.num_links() as u32).map(LinkId) {
            if f.link(l).src == leaf || f.link(l).dst == leaf {
                f.set_link_down(l, true).unwrap();
            }
        }
        tried += 1;
        for s in 0..h {
            let dist = bfs_up(&f, NodeId(s));
            for d in 0..h {
                if s == d {
                    continue;
                }
                for hash in [0u64, 1, 0x9e37_79b9, u64::from(s * 131 + d)] {
                    path.clear();
                    f.route(NodeId(s), NodeId(d), hash, &mut path)
                        .unwrap_or_else(|e| panic!("{}: leaf {leaf} down: {s}->{d}: {e}", t.name));
                    let mut at = NodeId(s);
                    for &l in &path {
                        let link = f.link(l);
                        assert_eq!(link.src, at, "{}: route not contiguous", t.name);
                        assert!(!f.is_link_down(l) && link.dst != leaf, "{}: {s}->{d} over the failed leaf", t.name);
                        at = link.dst;
                    }
                    assert_eq!(at, NodeId(d));
                    assert_eq!(
                        path.len() as u32,
                        dist[d as usize],
                        "{}: leaf {leaf} down: {s}->{d} not minimal",
                        t.name
                    );
                }
            }
        }
    }
    tried
}

/// Dual-ToR on the `fat-tree` and `rail-fat-tree` kinds: each GPU has two NIC ports of half its
/// bandwidth on two different leaves, the fabric has twice the leaves of the single-ToR one,
/// routes are minimal with equal-cost choices and the family's diameter, the ns-3 export
/// re-imports to the same graph, and with any one leaf down every pair still routes around it,
/// as short as the remaining graph allows. The fat-tree's is the declared Clos with `dual_tor` on
/// its tiers (same nodes, cables and routes); the rail-fat-tree's has both leaves of a rail under
/// the same spines.
#[test]
fn fat_tree_and_rail_fat_tree_dual_tor_survive_a_leaf() {
    let cases = [
        (
            r#"{"kind":"fat-tree","k":4,"dual_tor":true}"#,
            r#"{"kind":"fat-tree","k":4}"#,
            16u32,
            1u32,
        ),
        (
            r#"{"kind":"fat-tree","k":4,"dual_tor":true}"#,
            r#"{"kind":"fat-tree","k":4}"#,
            16,
            2,
        ),
        // Partly filled: two of three pods, the last edge half full.
        (
            r#"{"kind":"fat-tree","k":6,"dual_tor":true}"#,
            r#"{"kind":"fat-tree","k":6}"#,
            14,
            2,
        ),
        (
            r#"{"kind":"rail-fat-tree","servers_per_segment":2,"dual_tor":true}"#,
            r#"{"kind":"rail-fat-tree","servers_per_segment":2}"#,
            16,
            4,
        ),
        // Partly filled last segment, one rail, oversubscribed 2:1.
        (
            r#"{"kind":"rail-fat-tree","servers_per_segment":3,"oversubscription":2.0,"dual_tor":true}"#,
            r#"{"kind":"rail-fat-tree","servers_per_segment":3,"oversubscription":2.0}"#,
            8,
            1,
        ),
    ];
    for (json, single_json, gpus, g) in cases {
        let t = build(json, gpus, g);
        let single = build(single_json, gpus, g);
        assert!(t.name.contains("dualtor"), "{}", t.name);
        let leaves = |t: &Topology| {
            t.nodes()
                .iter()
                .filter(|k| matches!(k, llmsim_topo::NodeKind::Switch { tier: 1 }))
                .count()
        };
        assert_eq!(leaves(&t), 2 * leaves(&single), "{json}");
        for host in 0..gpus {
            let nics: Vec<_> = t
                .ports(NodeId(host))
                .iter()
                .map(|&l| t.link(l))
                .filter(|l| l.kind == LinkKind::HostNic)
                .collect();
            assert_eq!(nics.len(), 2, "{json}: host {host}");
            assert_ne!(nics[0].dst, nics[1].dst, "{json}: host {host}: both ports on one leaf");
            assert_eq!(nics[0].bandwidth.bps(), 200_000_000_000, "{json}: half of 400G");
        }
        assert_eq!(t.nic_bandwidth(NodeId(0)), single.nic_bandwidth(NodeId(0)));
        let longest = check_routes(&t, Minimal::Shortest);
        assert_eq!(
            longest,
            check_routes(&single, Minimal::Shortest),
            "{json}: same diameter as single-ToR"
        );
        assert_eq!(t.describe().diameter_hops, longest, "{json}");
        assert!(check_ecmp_equal_cost(&t) > 0, "{json}");
        check_ns3_round_trip(&t);
        assert!(check_every_leaf_failure(&t) > 0);
    }
    // The fat-tree's dual-ToR is the declared Clos's on the fat-tree tiers.
    let ft = build(r#"{"kind":"fat-tree","k":4,"dual_tor":true}"#, 16, 2);
    let c = build(
        r#"{"kind":"clos","dual_tor":true,"tiers":[{"down":2,"up":2},{"down":2,"up":2},{"radix":4}]}"#,
        16,
        2,
    );
    assert_eq!(c.nodes(), ft.nodes());
    assert_eq!(link_set(&c), link_set(&ft));
    assert_eq!(all_walks(&c), all_walks(&ft));
    // At the defaults: a 1,024-GPU rail-fat-tree with dual-ToR has 4 segments x 8 rails x 2
    // leaves, each leaf with 32 x 200G down and so 16 x 400G spines.
    let t = build(r#"{"kind":"rail-fat-tree","dual_tor":true}"#, 1024, 8);
    assert_eq!(t.name, "rail-fat-tree-4seg-dualtor-1024");
    assert_eq!(t.describe().cost.switches, 4 * 8 * 2 + 16);
    // A k = 16 fat-tree with dual-ToR: two planes of 16 pods x (8 + 8) switches and 64 cores.
    let t = build(r#"{"kind":"fat-tree","dual_tor":true}"#, 1024, 8);
    assert_eq!(t.name, "fat-tree-k16-dualtor-1024");
    assert_eq!(t.describe().cost.switches, 2 * (16 * 16 + 64));
    // With dual_plane, each NIC's two ports are already on two leaves (one per plane).
    let a = build(r#"{"kind":"rail-fat-tree","dual_plane":true,"dual_tor":true}"#, 64, 8);
    let b = build(r#"{"kind":"rail-fat-tree","dual_plane":true}"#, 64, 8);
    assert_eq!(link_set(&a), link_set(&b));
}

/// A rail-optimized fabric is the one-pod three-tier Clos: the same nodes, cables, port order
/// and routes (node by node), full and partly filled, so the rail-fat-tree's dual-ToR can be the
/// three-tier's.
#[test]
fn rail_fat_tree_equals_the_one_pod_three_tier() {
    for (sps, spines, gpus, g) in [(2u32, 2u32, 16u32, 4u32), (3, 1, 20, 2), (4, 3, 8, 1)] {
        let rail = build(
            &format!(r#"{{"kind":"rail-fat-tree","servers_per_segment":{sps},"spines":{spines}}}"#),
            gpus,
            g,
        );
        let tt = build(
            &format!(r#"{{"kind":"three-tier","servers_per_segment":{sps},"segments_per_pod":64,"spines":{spines}}}"#),
            gpus,
            g,
        );
        assert_eq!(rail.nodes(), tt.nodes(), "{gpus}");
        assert_eq!(link_set(&rail), link_set(&tt), "{gpus}");
        for n in 0..rail.num_nodes() as u32 {
            let far = |t: &Topology| t.ports(NodeId(n)).iter().map(|&l| t.link(l).dst).collect::<Vec<_>>();
            assert_eq!(far(&rail), far(&tt), "port order at node {n}");
        }
        assert_eq!(all_walks(&rail), all_walks(&tt), "{gpus}");
    }
}

/// Groups a route visits, in order, without repeats.
fn df_groups(t: &Topology, path: &[LinkId], router0: u32, a: u32) -> Vec<u32> {
    let mut g: Vec<u32> = path.iter().filter_map(|&l| df_group(t, t.link(l).dst, router0, a)).collect();
    g.dedup();
    g
}

/// Valiant and UGAL routes around a failed global cable (9 groups of 4 routers x 2 hosts, one
/// cable per pair of groups): a flow keeps the intermediate group its route takes without the
/// failure wherever the failed cable is neither of its two global hops, and falls back to the
/// minimal route otherwise; no route crosses the failed cable, and `next_hop` walks (as switches
/// forward) give the same routes. The candidates a flow spreads over (`flow_next_hops`, followed
/// along every branch) stay inside its source, intermediate and destination groups and include
/// every hop `next_hop` picks for it.
#[test]
fn dragonfly_valiant_and_ugal_keep_their_intermediate_group_around_a_failed_cable() {
    let base = r#""routers_per_group":4,"hosts_per_router":2,"global_links_per_router":2"#;
    let val = build(&format!(r#"{{"kind":"dragonfly",{base},"routing":"valiant"}}"#), 72, 1);
    let ugal = build(&format!(r#"{{"kind":"dragonfly",{base},"routing":"ugal"}}"#), 72, 1);
    let (router0, a) = (72u32, 4u32);
    let cable = |t: &Topology, x: u32, y: u32| -> Vec<LinkId> {
        (0..t.num_links() as u32)
            .map(LinkId)
            .filter(|&l| {
                let (s, d) = (t.link(l).src, t.link(l).dst);
                match (df_group(t, s, router0, a), df_group(t, d, router0, a)) {
                    (Some(gs), Some(gd)) => (gs, gd) == (x, y) || (gs, gd) == (y, x),
                    _ => false,
                }
            })
            .collect()
    };
    let (mut kept, mut fell_back) = (0, 0);
    let (mut p, mut q) = (Vec::new(), Vec::new());
    for (x, y) in [(0u32, 1u32), (0, 5), (3, 7), (2, 8)] {
        for (t, class) in [(&val, 0u32), (&ugal, 1), (&ugal, 3)] {
            let failed = cable(t, x, y);
            assert_eq!(failed.len(), 2, "one cable per pair of groups");
            let mut f = t.clone();
            for &l in &failed {
                f.set_link_down(l, true).unwrap();
            }
            for s in 0..72u32 {
                for d in (0..72u32).filter(|d| d / 8 != s / 8) {
                    for hash in [3u64, u64::from(s * 131 + d)] {
                        p.clear();
                        t.route_in_class(NodeId(s), NodeId(d), hash, class, &mut p).unwrap();
                        let before = df_groups(t, &p, router0, a);
                        q.clear();
                        if before.len() == 2 {
                            // The flow's intermediate group is its own source group: its route
                            // is the minimal one, and no other is a route of this flow.
                            let direct = before == [x, y] || before == [y, x];
                            match f.route_in_class(NodeId(s), NodeId(d), hash, class, &mut q) {
                                Ok(()) => assert!(!direct && df_groups(&f, &q, router0, a) == before),
                                Err(e) => assert!(direct, "{s}->{d}: {e}"),
                            }
                            continue;
                        }
                        assert_eq!(before.len(), 3, "{s}->{d}: Valiant visits three groups");
                        let (sg, via, dg) = (before[0], before[1], before[2]);
                        f.route_in_class(NodeId(s), NodeId(d), hash, class, &mut q)
                            .unwrap_or_else(|e| panic!("{s}->{d} class {class}, cable {x}-{y} down: {e}"));
                        assert!(q.iter().all(|l| !failed.contains(l)), "{s}->{d} crosses the failed cable");
                        let after = df_groups(&f, &q, router0, a);
                        let cut = [(sg, via), (via, dg)].iter().any(|&(u, v)| (u, v) == (x, y) || (u, v) == (y, x));
                        if cut {
                            assert_eq!(after, vec![sg, dg], "{s}->{d}: minimal fallback");
                            fell_back += 1;
                        } else {
                            assert_eq!(after, before, "{s}->{d} class {class}: keeps group {via}");
                            kept += 1;
                        }
                        if class == 0 {
                            // Switch by switch, as the packet engine forwards.
                            let nodes = walk(&f, NodeId(s), NodeId(d), hash);
                            assert_eq!(nodes.len(), q.len() + 1);
                            // The spreading candidates stay in the route's groups.
                            let mut front = vec![NodeId(s)];
                            let mut seen = BTreeSet::new();
                            let mut hops = Vec::new();
                            while let Some(at) = front.pop() {
                                if at == NodeId(d) || !seen.insert(at) {
                                    continue;
                                }
                                hops.clear();
                                f.flow_next_hops(at, NodeId(d), hash, 0, &mut hops).unwrap();
                                let picked = f.next_hop(at, NodeId(d), hash).unwrap();
                                assert!(hops.contains(&picked), "at {at}: the pick is a candidate");
                                for &l in &hops {
                                    assert!(!failed.contains(&l));
                                    let to = f.link(l).dst;
                                    if let Some(g) = df_group(&f, to, router0, a) {
                                        assert!(after.contains(&g), "{s}->{d}: spreads into group {g}");
                                    }
                                    front.push(to);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(kept > 1000 && fell_back > 50, "kept {kept}, fell back {fell_back}");
}

/// Partly filled Clos fabrics through ns-3 topology text: leaves and spines above no host keep
/// their tiers (the export's `# llmsim tiers:` lines), so export then import gives the same graph
/// and node kinds; a fabric whose every switch sits at its hop distance from a host writes no
/// tier line; bad tier entries are parse errors naming the line.
#[test]
fn partly_filled_clos_fabrics_round_trip_through_ns3() {
    for (json, gpus, g) in [
        (r#"{"kind":"clos","tiers":[{"down":4,"up":2},{"down":4,"up":2},{}]}"#, 36u32, 2u32),
        // Top switches with more down ports than blocks below them.
        (r#"{"kind":"clos","tiers":[{"down":4,"up":2},{"down":4,"up":2},{"down":8}]}"#, 40, 2),
        (
            r#"{"kind":"clos","tiers":[{"down":2,"up":2},{"down":3,"up":1},{"down":2,"up":2},{}]}"#,
            14,
            1,
        ),
        (
            r#"{"kind":"clos","dual_tor":true,"tiers":[{"down":4,"up":2},{"down":2,"up":2},{}]}"#,
            20,
            2,
        ),
        (r#"{"kind":"fat-tree","k":6}"#, 20, 1),
        (
            r#"{"kind":"three-tier","servers_per_segment":2,"segments_per_pod":3,"spines":2}"#,
            10,
            1,
        ),
    ] {
        let t = build(json, gpus, g);
        check_ns3_round_trip(&t);
        let imp = parse_ns3(&to_ns3(&t), "partial.txt", 7).unwrap();
        // The imported graph routes every pair (BFS rule) as short as the generated rule.
        for s in 0..gpus {
            for d in 0..gpus {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                t.route(NodeId(s), NodeId(d), 3, &mut a).unwrap();
                imp.topology.route(NodeId(s), NodeId(d), 3, &mut b).unwrap();
                assert_eq!(a.len(), b.len(), "{json}: {s}->{d}");
            }
        }
    }
    let full = build(r#"{"kind":"fat-tree","k":4}"#, 16, 1);
    assert!(!to_ns3(&full).contains('#'));
    let partial = build(r#"{"kind":"clos","tiers":[{"down":4,"up":2},{"down":4,"up":2},{}]}"#, 36, 1);
    let text = to_ns3(&partial);
    let tiers = text.lines().find(|l| l.starts_with("# llmsim tiers:")).unwrap();
    for bad in ["0:1", "1000000:1", "x:2"] {
        let broken = text.replace(tiers, &format!("# llmsim tiers: {bad}"));
        let e = parse_ns3(&broken, "bad.txt", 1).unwrap_err().to_string();
        assert!(e.contains("bad.txt") && e.contains(bad), "{bad}: {e}");
    }
}
