//! The user spec: JSON/YAML shapes, defaults, and typed errors for bad parameters.

use llmsim_core::{Bandwidth, NodeId};
use llmsim_topo::{NodeKind, ScaleUp, TopoError, TopologySpec};

fn spec(json: &str) -> TopologySpec {
    serde_json::from_str(json).unwrap()
}

fn invalid(s: &TopologySpec, gpus: u32, su: ScaleUp) -> (String, String) {
    match s.build(gpus, su, 0) {
        Err(TopoError::Invalid(e)) => (e.field, e.message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn fat_tree_picks_the_smallest_k() {
    let t = spec(r#"{"kind":"fat-tree"}"#).build(128, ScaleUp::dgx_h100(), 1).unwrap();
    assert!(t.name.starts_with("fat-tree-k8-"), "{}", t.name);
    let t = spec(r#"{"kind":"fat-tree","k":4,"agg_core":{"bandwidth":"100Gbps"}}"#)
        .build(16, ScaleUp::none(), 1)
        .unwrap();
    let s = t.describe();
    assert_eq!(s.bisection_bandwidth, Bandwidth::from_gbps(8 * 100), "{s}");
    assert!((s.oversubscription - 4.0).abs() < 1e-9);
}

#[test]
fn rail_fat_tree_derives_segments_and_accepts_the_alias() {
    let s = spec(r#"{"kind":"rail-optimized","servers_per_segment":4,"dual_plane":true,"uplink":{"latency":"1us"}}"#);
    let t = s.build(256, ScaleUp::dgx_h100(), 1).unwrap();
    let d = t.describe();
    assert_eq!(d.switches_per_tier[0], 2 * 8 * 8, "2 planes x 8 segments x 8 rails: {d}");
    assert_eq!(d.nvswitches, 32);
    let default = TopologySpec::default().build(1024, ScaleUp::dgx_h100(), 1).unwrap().describe();
    assert_eq!(default.switches_per_tier, vec![32, 32]);
    assert!((default.oversubscription - 1.0).abs() < 1e-9);
}

#[test]
fn spine_leaf_by_ratio_or_count() {
    let t = spec(r#"{"kind":"spine-leaf","hosts_per_leaf":16,"oversubscription":4}"#)
        .build(64, ScaleUp::none(), 1)
        .unwrap();
    assert_eq!(t.describe().switches_per_tier, vec![4, 4]);
    let s = spec(r#"{"kind":"spine-leaf","spines":2,"oversubscription":4}"#);
    assert_eq!(invalid(&s, 64, ScaleUp::none()).0, "topology.spines");
}

#[test]
fn unknown_fields_and_kinds_are_errors() {
    assert!(serde_json::from_str::<TopologySpec>(r#"{"kind":"fat-tree","kk":4}"#).is_err());
    assert!(serde_json::from_str::<TopologySpec>(r#"{"kind":"hypercube"}"#).is_err());
    let e = serde_json::from_str::<TopologySpec>(r#"{"kind":"flat","nic":{"bandwidth":"400Gbs"}}"#).unwrap_err();
    assert!(e.to_string().contains("400Gbs"), "{e}");
    let e = serde_json::from_str::<TopologySpec>(r#"{"kind":"flat","nic":{"bw":"400Gbps"}}"#).unwrap_err();
    assert!(e.to_string().contains("bw"), "{e}");
}

#[test]
fn bad_parameters_name_the_field_and_the_fix() {
    let (f, m) = invalid(&spec(r#"{"kind":"fat-tree","k":5}"#), 16, ScaleUp::none());
    assert_eq!(f, "topology.k");
    assert!(m.contains("even"), "{m}");
    let (f, m) = invalid(&spec(r#"{"kind":"fat-tree","k":4}"#), 64, ScaleUp::none());
    assert_eq!(f, "topology.k");
    assert!(m.contains("k >= 8"), "{m}");
    let (f, _) = invalid(&spec(r#"{"kind":"rail-fat-tree"}"#), 12, ScaleUp::dgx_h100());
    assert_eq!(f, "gpus");
    let (f, _) = invalid(&spec(r#"{"kind":"flat","nic":{"bandwidth":"0Gbps"}}"#), 8, ScaleUp::none());
    assert_eq!(f, "nic");
    let (f, _) = invalid(&spec(r#"{"kind":"spine-leaf","uplink":{"bandwidth":"0bps"}}"#), 8, ScaleUp::none());
    assert_eq!(f, "topology.uplink");
    let (f, _) = invalid(
        &spec(r#"{"kind":"rail-fat-tree","servers_per_segment":0}"#),
        16,
        ScaleUp::dgx_h100(),
    );
    assert_eq!(f, "topology.servers_per_segment");
    let (f, _) = invalid(&spec(r#"{"kind":"fat-tree"}"#), 0, ScaleUp::none());
    assert_eq!(f, "gpus");
    let (f, _) = invalid(&spec(r#"{"kind":"fat-tree"}"#), u32::MAX, ScaleUp::none());
    assert_eq!(f, "gpus");
}

#[test]
fn ns3_spec_reads_the_file_or_says_why_not() {
    let e = spec(r#"{"kind":"ns3","path":"/nonexistent/topo.txt"}"#)
        .build(16, ScaleUp::none(), 0)
        .unwrap_err();
    assert!(matches!(e, TopoError::Parse { .. }), "{e}");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/ns3/inputs/fattree_k4_16h.txt"
    );
    if !std::path::Path::new(path).exists() {
        missing_reference(path);
        return;
    }
    let s = TopologySpec::Ns3 { path: path.into() };
    let t = s.build(16, ScaleUp::none(), 0).unwrap();
    assert_eq!(t.node(NodeId(16)), NodeKind::Switch { tier: 1 });
    assert_eq!(invalid(&s, 17, ScaleUp::none()).0, "gpus");
}

/// Skipping is for checkouts without `../shared`; in CI (`CI=true`) a missing reference fails.
fn missing_reference(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    assert!(
        !ci,
        "{what} not found and CI=true: the reference data (../shared/reference) must be beside the checkout in CI"
    );
    println!("skipping: {what} not found");
}

/// The kind list (CLI help, docs) is read from the spec itself: every entry parses as a kind,
/// and the families added one file each are there.
#[test]
fn kinds_come_from_the_spec() {
    let kinds = llmsim_topo::spec::kinds();
    for k in &kinds {
        let name = k.split(' ').next().unwrap();
        if name == "ns3" {
            continue;
        }
        let spec: Result<llmsim_topo::TopologySpec, _> = serde_json::from_str(&format!(r#"{{"kind":"{name}"}}"#));
        assert!(spec.is_ok(), "{name}: {spec:?}");
    }
    for k in [
        "torus",
        "dragonfly",
        "rail-only",
        "full-mesh (alias ub-mesh)",
        "three-tier",
        "bcube",
        "rail-fat-tree (alias rail-optimized)",
        "ns3",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
}
