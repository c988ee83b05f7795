//! Route expansion takes each hop's link and far end from the rule's [`llmsim_topo::Hop`], which
//! most rules compute from addresses and the generator's link order rather than read from a
//! table (debug assertions compare each with `port_hops`). This checks, for every family, that
//! `Topology::route` and `route_in_class` give exactly the links of a reference walk that follows
//! `next_hop` and each link's `dst` from the link table, on random (src, dst, hash) triples, with
//! and without a failed link; and prints a digest of the routes (compare it across commits with
//! `cargo test -p llmsim-topo --test route_fast_path -- --nocapture`).

use llmsim_core::{LinkId, NodeId, SimRng, mix64};
use llmsim_topo::{ScaleUp, Topology, TopologySpec};

fn build(json: &str, gpus: u32, g: u32) -> Topology {
    let su = if g == 1 {
        ScaleUp::none()
    } else {
        ScaleUp {
            gpus_per_server: g,
            ..ScaleUp::dgx_h100()
        }
    };
    let spec: TopologySpec = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    spec.build(gpus, su, 7).unwrap_or_else(|e| panic!("{json} at {gpus} GPUs: {e}"))
}

/// The links from `src` to `dst` by `next_hop` (class 0) or `route_in_class`'s rule, walking
/// each link's far end from the link table.
fn reference(t: &Topology, src: NodeId, dst: NodeId, hash: u64) -> Vec<LinkId> {
    let mut at = src;
    let mut path = Vec::new();
    while at != dst {
        let l = t
            .next_hop(at, dst, hash)
            .unwrap_or_else(|e| panic!("{}: {src}->{dst}: {e}", t.name));
        assert_eq!(t.link(l).src, at);
        path.push(l);
        at = t.link(l).dst;
        assert!(path.len() <= 64, "{}: loop on {src}->{dst}", t.name);
    }
    path
}

/// Checks `n` random routes against the reference walk; returns a digest of every route.
fn check(t: &Topology, n: u32, seed: u64) -> u64 {
    let mut rng = SimRng::seed(seed);
    let hosts = u64::from(t.num_hosts());
    let mut path = Vec::new();
    let mut digest = 0u64;
    for _ in 0..n {
        let s = NodeId(rng.below(hosts) as u32);
        let d = NodeId(rng.below(hosts) as u32);
        let h = rng.next_u64();
        path.clear();
        t.route(s, d, h, &mut path).unwrap_or_else(|e| panic!("{}: {s}->{d}: {e}", t.name));
        assert_eq!(path, reference(t, s, d, h), "{}: {s}->{d} hash {h}", t.name);
        for &l in &path {
            digest = mix64(digest ^ u64::from(l.0));
        }
        digest = mix64(digest ^ 0xffff);
        for class in 1..t.route_classes() {
            path.clear();
            t.route_in_class(s, d, h, class, &mut path).unwrap();
            assert!(!path.is_empty() || s == d);
            let mut at = s;
            for &l in &path {
                assert_eq!(t.link(l).src, at, "{}: class {class} {s}->{d}", t.name);
                at = t.link(l).dst;
                digest = mix64(digest ^ u64::from(l.0));
            }
            assert_eq!(at, d, "{}: class {class} {s}->{d}", t.name);
        }
    }
    digest
}

const FAMILIES: &[(&str, u32, u32)] = &[
    (r#"{"kind":"fat-tree"}"#, 1024, 8),
    (r#"{"kind":"fat-tree"}"#, 128, 1),
    (r#"{"kind":"rail-fat-tree"}"#, 1024, 8),
    (r#"{"kind":"rail-fat-tree","dual_plane":true}"#, 512, 8),
    (r#"{"kind":"spine-leaf"}"#, 256, 8),
    (r#"{"kind":"flat"}"#, 64, 8),
    (r#"{"kind":"torus"}"#, 1024, 8),
    (r#"{"kind":"torus","dimensions":2}"#, 256, 1),
    (r#"{"kind":"dragonfly"}"#, 1024, 8),
    (r#"{"kind":"dragonfly","routing":"valiant"}"#, 1024, 8),
    (r#"{"kind":"dragonfly","routing":"ugal"}"#, 1024, 8),
    (r#"{"kind":"rail-only"}"#, 1024, 8),
    (r#"{"kind":"full-mesh"}"#, 1024, 8),
    (r#"{"kind":"three-tier"}"#, 4096, 8),
    (r#"{"kind":"three-tier","dual_tor":true}"#, 4096, 8),
    (r#"{"kind":"bcube"}"#, 1024, 8),
    (r#"{"kind":"bcube"}"#, 512, 1),
    (r#"{"kind":"clos"}"#, 1024, 8),
    (r#"{"kind":"clos","dual_tor":true}"#, 1024, 8),
    (r#"{"kind":"fat-tree","dual_tor":true}"#, 1024, 8),
    (r#"{"kind":"rail-fat-tree","dual_tor":true}"#, 1024, 8),
    (r#"{"kind":"rail-only"}"#, 256, 1),
    (r#"{"kind":"full-mesh","dims":[4,4,4],"hosts_per_router":2}"#, 128, 2),
    (r#"{"kind":"dragonfly","routing":"valiant"}"#, 256, 1),
];

#[test]
fn routes_equal_the_link_table_walk_for_every_family() {
    for &(json, gpus, g) in FAMILIES {
        let t = build(json, gpus, g);
        let digest = check(&t, 20_000, 11);
        println!("{json} {gpus}x{g}: {} digest {digest:016x}", t.name);
    }
}

#[test]
fn routes_around_a_failed_link_equal_the_link_table_walk() {
    for &(json, gpus, g) in FAMILIES {
        let mut t = build(json, gpus, g);
        // Fail a switch-to-switch link near the middle of the link table (or any link where the
        // family has none), then check routes that still exist.
        let fabric = (0..t.num_links())
            .map(|i| LinkId(((i + t.num_links() / 2) % t.num_links()) as u32))
            .find(|&l| t.link(l).kind == llmsim_topo::LinkKind::Fabric);
        let Some(l) = fabric else { continue };
        t.set_link_down(l, true).unwrap();
        let mut rng = SimRng::seed(5);
        let hosts = u64::from(t.num_hosts());
        let mut path = Vec::new();
        for _ in 0..2_000 {
            let (s, d, h) = (NodeId(rng.below(hosts) as u32), NodeId(rng.below(hosts) as u32), rng.next_u64());
            path.clear();
            if t.route(s, d, h, &mut path).is_err() {
                continue;
            }
            assert!(!path.contains(&l), "{json}: {s}->{d} crosses the failed link");
            assert_eq!(path, reference(&t, s, d, h), "{json}: {s}->{d} hash {h}");
        }
    }
}
