use std::collections::BTreeMap;

use prost::Message as _;

use super::pb::{self, AttributeProto, GlobalMetadata, comm_type, node_type};
use super::*;

fn node(id: u64, ty: i32, deps: &[u64], attrs: Vec<AttributeProto>) -> pb::Node {
    pb::Node {
        id,
        name: format!("n{id}"),
        r#type: ty,
        data_deps: deps.to_vec(),
        duration_micros: if ty == node_type::COMP { 3 } else { 0 },
        attr: attrs,
        ..Default::default()
    }
}

fn encode(nodes: &[pb::Node]) -> Vec<u8> {
    let mut b = Vec::new();
    GlobalMetadata {
        version: "0.0.4".into(),
        attr: vec![],
    }
    .encode_length_delimited(&mut b)
    .unwrap();
    for n in nodes {
        n.encode_length_delimited(&mut b).unwrap();
    }
    b
}

fn trace(rank: u32, nodes: &[pb::Node]) -> RankTrace {
    decode(&encode(nodes), &format!("t.{rank}.et"), rank).unwrap()
}

fn coll(id: u64, deps: &[u64], pg: Option<&str>) -> pb::Node {
    let mut a = vec![
        AttributeProto::int("comm_type", comm_type::ALL_REDUCE),
        AttributeProto::int("comm_size", 1 << 20),
    ];
    if let Some(p) = pg {
        a.push(AttributeProto::string("pg_name", p));
    }
    node(id, node_type::COMM_COLL, deps, a)
}

#[test]
fn decode_round_trips_nodes() {
    let nodes = vec![node(4, node_type::COMP, &[], vec![]), coll(9, &[4], Some("0"))];
    let t = trace(0, &nodes);
    assert_eq!(t.nodes, nodes);
    assert_eq!(t.metadata.version, "0.0.4");
}

#[test]
fn truncated_trace_names_file_rank_and_node() {
    let nodes = vec![node(4, node_type::COMP, &[], vec![]), coll(9, &[4], None), coll(12, &[9], None)];
    let bytes = encode(&nodes);
    let e = decode(&bytes[..bytes.len() - 3], "x.3.et", 3).unwrap_err().to_string();
    assert!(e.starts_with("x.3.et (rank 3): node #2 (after node id 9)"), "{e}");
    let e = decode(&[0x05, 0x0a], "x.0.et", 0).unwrap_err().to_string();
    assert!(e.starts_with("x.0.et (rank 0): GlobalMetadata"), "{e}");
    let e = decode(&[], "x.0.et", 0).unwrap_err().to_string();
    assert!(e.contains("empty file"), "{e}");
}

#[test]
fn unknown_dependency_names_the_node() {
    let t = trace(0, &[node(1, node_type::COMP, &[77], vec![])]);
    let e = import(&[t], &BTreeMap::new(), &ImportOptions::default()).unwrap_err().to_string();
    assert_eq!(
        e,
        "t.0.et (rank 0) node id 1: depends on node id 77, which this trace does not have"
    );
}

#[test]
fn cycle_is_named_before_running() {
    // 5 -> 6 -> 7 -> 5, plus an innocent node 1.
    let nodes = vec![
        node(1, node_type::COMP, &[], vec![]),
        node(5, node_type::COMP, &[7], vec![]),
        node(6, node_type::COMP, &[5, 1], vec![]),
        node(7, node_type::COMP, &[6], vec![]),
    ];
    let e = import(&[trace(0, &nodes)], &BTreeMap::new(), &ImportOptions::default()).unwrap_err();
    match &e {
        ImportError::Cycle { rank, cycle, .. } => {
            assert_eq!(*rank, 0);
            let mut c = cycle.clone();
            c.sort_unstable();
            assert_eq!(c, vec![5, 6, 7]);
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("dependency cycle through node ids"), "{e}");
}

#[test]
fn missing_group_reported_once_with_its_ranks() {
    let traces: Vec<RankTrace> = (0..4)
        .map(|r| trace(r, &[coll(1, &[], Some(if r < 3 { "9" } else { "0" }))]))
        .collect();
    let mut groups = BTreeMap::new();
    groups.insert("0".to_string(), vec![0, 1, 2, 3]);
    let e = import(
        &traces,
        &groups,
        &ImportOptions {
            groups_file: Some("g.json".into()),
            gpus_per_node: 8,
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        ImportError::MissingGroups {
            missing: vec![("9".into(), vec![0, 1, 2])],
            groups_file: Some("g.json".into()),
        }
    );
    assert_eq!(
        e.to_string(),
        "g.json defines no pg_name \"9\" (used by ranks 0-2); add them with their member ranks"
    );
}

#[test]
fn rank_outside_its_group_is_an_error() {
    let traces: Vec<RankTrace> = (0..2).map(|r| trace(r, &[coll(1, &[], Some("0"))])).collect();
    let mut groups = BTreeMap::new();
    groups.insert("0".to_string(), vec![0]);
    let e = import(&traces, &groups, &ImportOptions::default()).unwrap_err().to_string();
    assert!(
        e.starts_with("t.1.et (rank 1) node id 1: collective over pg_name \"0\" (ranks 0)"),
        "{e}"
    );
}

#[test]
fn symmetric_ranks_fold_into_lockstep_units() {
    // Ranks 2u, 2u+1 share a TP group; ranks with the same lane share a DP group.
    let mut groups = BTreeMap::new();
    groups.insert("tp0".to_string(), vec![0, 1]);
    groups.insert("tp1".to_string(), vec![2, 3]);
    groups.insert("dp0".to_string(), vec![0, 2]);
    groups.insert("dp1".to_string(), vec![1, 3]);
    let traces: Vec<RankTrace> = (0..4u32)
        .map(|r| {
            let tp = format!("tp{}", r / 2);
            let dp = format!("dp{}", r % 2);
            trace(
                r,
                &[
                    node(1, node_type::COMP, &[], vec![]),
                    coll(2, &[1], Some(&tp)),
                    coll(3, &[2], Some(&dp)),
                ],
            )
        })
        .collect();
    let imp = import(&traces, &groups, &ImportOptions::default()).unwrap();
    assert_eq!(imp.layout.tp, 2);
    assert_eq!(imp.layout.units(), 2);
    let x = imp.workload.explicit.as_ref().unwrap();
    let kinds: Vec<(Group, Vec<u32>, bool)> = x.groups.iter().map(|g| (g.kind, g.units.clone(), g.spans_lanes)).collect();
    assert_eq!(
        kinds,
        vec![
            (Group::Tp, vec![0], true),
            (Group::Dp, vec![0, 1], false),
            (Group::Tp, vec![1], true)
        ]
    );
    // A rank that differs breaks the symmetry: every rank is its own unit.
    let mut t2 = traces.clone();
    t2[3] = trace(
        3,
        &[
            node(1, node_type::COMP, &[], vec![]),
            coll(2, &[1], Some("tp1")),
            coll(3, &[1], Some("dp1")),
        ],
    );
    let imp = import(&t2, &groups, &ImportOptions::default()).unwrap();
    assert_eq!((imp.layout.tp, imp.layout.units()), (1, 4));
}

#[test]
fn repeated_tags_match_in_order() {
    let send = |id: u64, deps: &[u64]| {
        node(
            id,
            node_type::COMM_SEND,
            deps,
            vec![
                AttributeProto::int("comm_dst", 1),
                AttributeProto::int("comm_tag", 3),
                AttributeProto::int("comm_size", 64),
            ],
        )
    };
    let recv = |id: u64, deps: &[u64]| {
        node(
            id,
            node_type::COMM_RECV,
            deps,
            vec![
                AttributeProto::int("comm_src", 0),
                AttributeProto::int("comm_tag", 3),
                AttributeProto::int("comm_size", 64),
            ],
        )
    };
    let traces = vec![trace(0, &[send(1, &[]), send(2, &[1])]), trace(1, &[recv(1, &[]), recv(2, &[1])])];
    let imp = import(&traces, &BTreeMap::new(), &ImportOptions::default()).unwrap();
    let seqs: Vec<u32> = imp.workload.stages[1]
        .nodes
        .iter()
        .map(|n| match n.kind {
            DagNodeKind::CommRecv { tag, peer, .. } => {
                assert_eq!(peer, Peer::Unit(0));
                tag.seq
            }
            _ => panic!("a receive"),
        })
        .collect();
    assert_eq!(seqs, vec![0, 1]);
}

#[test]
fn bad_attributes_are_named() {
    let t = trace(0, &[node(3, node_type::COMM_COLL, &[], vec![AttributeProto::int("comm_type", 42)])]);
    let e = import(&[t], &BTreeMap::new(), &ImportOptions::default()).unwrap_err().to_string();
    assert_eq!(e, "t.0.et (rank 0) node id 3: comm_type 42: valid 0 (ALL_REDUCE) to 9 (BARRIER)");
    let t = trace(0, &[node(3, node_type::COMM_COLL, &[], vec![])]);
    let e = import(&[t], &BTreeMap::new(), &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.ends_with("COMM_COLL_NODE without comm_type"), "{e}");
    let t = trace(0, &[node(3, node_type::COMM_SEND, &[], vec![AttributeProto::int("comm_dst", 0)])]);
    let e = import(&[t], &BTreeMap::new(), &ImportOptions::default()).unwrap_err().to_string();
    assert!(e.contains("comm_dst = 0: valid ranks 0-0 other than this rank 0"), "{e}");
}

#[test]
fn durations_and_compute_model_inputs() {
    let mut n = node(
        1,
        node_type::COMP,
        &[],
        vec![AttributeProto::uint("num_ops", 1000), AttributeProto::uint("tensor_size", 64)],
    );
    n.duration_micros = 0;
    let t = trace(0, &[node(0, node_type::COMP, &[], vec![]), n]);
    let imp = import(&[t], &BTreeMap::new(), &ImportOptions::default()).unwrap();
    let segs = &imp.workload.segments;
    assert_eq!(segs[0].duration, Some(SimTime::from_us(3)));
    assert_eq!(segs[1].duration, None, "no duration: the compute model times num_ops / tensor_size");
    match segs[1].ops[0].kind {
        OpSpecKind::Compute { flops, bytes, .. } => assert_eq!((flops, bytes), (1000.0, 64.0)),
        _ => panic!("compute"),
    }
}
