//! The study knobs of the collective layer: `chunks` (pieces a collective is split into),
//! `chunks_in_flight` (pieces per edge at once) and `injection_latency` (per piece and step).

use std::collections::BTreeMap;
use std::sync::Arc;

use llmsim_ccl::plan::Step;
use llmsim_ccl::{AlgoChoice, CollectiveOp, CollectivePlan, PlanOptions, PlanRun, ScaleUpModel, execute, plan_collective};
use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime};
use llmsim_net::Network;
use llmsim_net::analytical::AnalyticalNetwork;
use llmsim_net::flow::FlowNetwork;
use llmsim_net::packet::{CcMode, PacketConfig, PacketNetwork};
use llmsim_topo::generators::flat;
use llmsim_topo::{LinkParams, ScaleUp, Topology};

/// The study's flat system, shrunk: `n` NICs of 100 Gb/s on one switch, one GPU per server.
fn flat_switch(n: u32) -> Arc<Topology> {
    let nic = LinkParams::new(Bandwidth::from_gbps(100), SimTime::from_ns(500));
    let su = ScaleUp {
        gpus_per_server: 1,
        ..ScaleUp::dgx_h100()
    };
    Arc::new(flat(n, nic, su, 7).unwrap())
}

fn su() -> ScaleUpModel {
    ScaleUpModel::from_nvlink("H100", Bandwidth::from_gbytes_per_sec(450), 1)
}

fn group(t: &Topology) -> Vec<NodeId> {
    (0..t.num_hosts()).map(NodeId).collect()
}

fn plan(t: &Topology, op: CollectiveOp, algo: AlgoChoice, bytes: Bytes, opts: PlanOptions) -> CollectivePlan {
    let opts = PlanOptions {
        algo,
        nic_bw: Bandwidth::from_gbps(100),
        ..opts
    };
    plan_collective(t, op, bytes, &group(t), &opts, &su()).unwrap().plan
}

fn chunked(chunks: Option<u32>, in_flight: Option<u32>) -> PlanOptions {
    PlanOptions {
        chunks,
        chunks_in_flight: in_flight,
        ..PlanOptions::h100()
    }
}

fn transfers(plan: &CollectivePlan) -> impl Iterator<Item = (usize, NodeId, NodeId, Bytes)> + '_ {
    plan.nodes().iter().enumerate().filter_map(|(i, n)| match &n.step {
        Step::Transfer { src, dst, bytes, .. } => Some((i, *src, *dst, *bytes)),
        Step::Local { .. } => None,
    })
}

/// Most transfers of one edge (channel, i.e. tree, src, dst) that overlap in time in `run`.
fn max_overlap_per_edge(plan: &CollectivePlan, run: &PlanRun) -> usize {
    let mut per_edge: BTreeMap<(u32, NodeId, NodeId), Vec<(SimTime, i32)>> = BTreeMap::new();
    for (i, s, d, b) in transfers(plan) {
        if b.0 > 0 {
            let e = per_edge.entry((plan.node(i as u32).channel, s, d)).or_default();
            e.push((run.node_start[i], 1));
            e.push((run.node_finish[i], -1));
        }
    }
    per_edge
        .values_mut()
        .map(|ev| {
            // Ends before starts at the same instant: back to back is not overlap.
            ev.sort_unstable();
            let (mut cur, mut best) = (0i32, 0i32);
            for (_, d) in ev.iter() {
                cur += d;
                best = best.max(cur);
            }
            best as usize
        })
        .max()
        .unwrap_or(0)
}

const CASES: [(CollectiveOp, AlgoChoice); 3] = [
    (CollectiveOp::AllReduce, AlgoChoice::Tree),
    (CollectiveOp::AllToAll, AlgoChoice::Direct),
    (CollectiveOp::AllReduce, AlgoChoice::Ring),
];

#[test]
fn more_chunks_never_lose_bytes_and_every_piece_completes() {
    let t = flat_switch(8);
    let n = 8u64;
    let bytes = Bytes(3 * 1_000_003); // not a multiple of anything: pieces differ by one byte
    for (op, algo) in CASES {
        let step = |chunks, in_flight| PlanOptions {
            granularity: llmsim_ccl::Granularity::Step,
            ..chunked(chunks, in_flight)
        };
        let one = plan(&t, op, algo, bytes, step(Some(1), None));
        for chunks in [1u32, 2, 3, 16, 64] {
            for in_flight in [None, Some(1), Some(4)] {
                let ctx = format!("{op} {algo:?} chunks {chunks} in flight {in_flight:?}");
                let p = plan(&t, op, algo, bytes, step(Some(chunks), in_flight));
                assert_eq!(p.network_bytes(), one.network_bytes(), "{ctx}: bytes conserved");
                let pieces = u64::from(chunks);
                let expected = match algo {
                    // n - 1 ranks send up and get data down in each tree; tree 0 gets the odd piece.
                    AlgoChoice::Tree => (pieces.div_ceil(2) + (pieces / 2).max(1)) * (n - 1) * 2,
                    AlgoChoice::Direct => pieces * n * (n - 1),
                    // A ring step DAG: `chunks` loops of what one loop sends.
                    _ => pieces * one.num_transfers() as u64,
                };
                assert_eq!(p.num_transfers() as u64, expected, "{ctx}: transfers");
                let mut net = FlowNetwork::new(t.clone());
                let run = execute(&p, &mut net, SimTime::ZERO, 0).unwrap();
                let st = net.stats();
                let nonempty = transfers(&p).filter(|x| x.3.0 > 0).count() as u64;
                assert_eq!(st.completed, nonempty, "{ctx}: every piece completes");
                assert_eq!(st.bytes_delivered, p.network_bytes(), "{ctx}: every byte arrives");
                assert!(run.node_finish.iter().all(|f| *f != SimTime::MAX), "{ctx}: every node ran");
            }
        }
    }
}

#[test]
fn chunks_in_flight_bounds_the_pieces_on_an_edge() {
    let t = flat_switch(8);
    for (op, algo) in &CASES[..2] {
        for in_flight in [1u32, 4] {
            let p = plan(&t, *op, *algo, Bytes(16_000_000), chunked(Some(16), Some(in_flight)));
            let run = execute(&p, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
            // Leaves (tree) and every pair (all-to-all) have nothing to wait for but the gate,
            // so the bound is reached.
            assert_eq!(
                max_overlap_per_edge(&p, &run),
                in_flight as usize,
                "{op} {algo:?}, {in_flight} in flight"
            );
        }
    }
}

/// Nodes on the longest chain of data dependencies (the plan's critical path in steps).
fn longest_data_chain(p: &CollectivePlan) -> u64 {
    let mut len = vec![0u64; p.len()];
    for i in 0..p.len() as u32 {
        let deps = p.deps(i);
        let best = deps
            .iter()
            .zip(p.dep_is_data(i))
            .filter(|(_, data)| **data)
            .map(|(d, _)| len[*d as usize])
            .max()
            .unwrap_or(0);
        len[i as usize] = best + 1;
    }
    len.into_iter().max().unwrap_or(0)
}

#[test]
fn injection_latency_delays_the_first_byte_by_exactly_that_latency() {
    // Idle fabric: a 2-rank all-to-all is one transfer each way. Shifting every start by L
    // shifts the whole run by L (the engine is time-invariant), on every backend.
    let t = flat_switch(2);
    let l = SimTime::from_ns(10_370);
    let with = |inj: SimTime| PlanOptions {
        injection_latency: inj,
        ..PlanOptions::h100()
    };
    let p0 = plan(
        &t,
        CollectiveOp::AllToAll,
        AlgoChoice::Direct,
        Bytes(1_000_000),
        with(SimTime::ZERO),
    );
    let pl = plan(&t, CollectiveOp::AllToAll, AlgoChoice::Direct, Bytes(1_000_000), with(l));
    type MakeNet = fn(Arc<Topology>) -> Box<dyn Network>;
    let nets: [(&str, MakeNet); 3] = [
        ("analytical", |t| Box::new(AnalyticalNetwork::new(t))),
        ("flow", |t| Box::new(FlowNetwork::new(t))),
        ("packet", |t| {
            Box::new(PacketNetwork::new(t, PacketConfig::ns3_defaults(CcMode::Dcqcn)).unwrap())
        }),
    ];
    for (name, mk) in nets {
        let r0 = execute(&p0, mk(t.clone()).as_mut(), SimTime::ZERO, 0).unwrap();
        let rl = execute(&pl, mk(t.clone()).as_mut(), SimTime::ZERO, 0).unwrap();
        for i in 0..p0.len() {
            assert_eq!(rl.node_start[i], r0.node_start[i] + l, "{name}: node {i} starts L later");
            assert_eq!(rl.node_finish[i], r0.node_finish[i] + l, "{name}: node {i} ends L later");
        }
    }
}

#[test]
fn injection_latency_is_paid_once_per_step_of_the_critical_path() {
    // A double binary tree on an uncontended (analytical) flat switch: every transfer of a
    // piece takes the same time, so the critical path is the longest chain of data
    // dependencies, and each of its steps pays the injection latency once.
    let t = flat_switch(16);
    let l = SimTime::from_us(7);
    for chunks in [1u32, 4] {
        let with = |inj: SimTime| PlanOptions {
            injection_latency: inj,
            ..chunked(Some(chunks), None)
        };
        let bytes = Bytes(8_000_000);
        let p0 = plan(&t, CollectiveOp::AllReduce, AlgoChoice::Tree, bytes, with(SimTime::ZERO));
        let pl = plan(&t, CollectiveOp::AllReduce, AlgoChoice::Tree, bytes, with(l));
        let r0 = execute(&p0, &mut AnalyticalNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
        let rl = execute(&pl, &mut AnalyticalNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
        let steps = longest_data_chain(&p0);
        // 16 ranks: binary trees of depth 4 or 5, up and down.
        assert!((8..=10).contains(&steps), "{chunks} chunks: {steps} steps");
        if chunks == 1 {
            assert_eq!(rl.duration(), r0.duration() + SimTime(l.0 * steps), "one chunk: L per step");
        } else {
            // Pieces pipeline: later pieces' latency hides behind earlier ones' transfers, but the
            // first piece's path pays it at every step and the last piece's at least once.
            let extra = rl.duration() - r0.duration();
            assert!(extra >= l && extra.0 <= l.0 * steps, "{chunks} chunks: {extra:?}");
        }
    }
}

#[test]
fn a_tree_chunk_holds_its_slot_until_its_result_arrives() {
    // ASTRA-sim's chunk parallelism P: rank v starts reducing chunk c only after chunk c - P's
    // broadcast has reached it (the root, which receives no broadcast, is gated through its
    // children).
    let t = flat_switch(16);
    let p_slots = 3u32;
    let p = plan(
        &t,
        CollectiveOp::AllReduce,
        AlgoChoice::Tree,
        Bytes(8_000_000),
        chunked(Some(24), Some(p_slots)),
    );
    let run = execute(&p, &mut FlowNetwork::new(t.clone()), SimTime::ZERO, 0).unwrap();
    // (tree, rank, chunk) -> when the rank's reduce send started / its broadcast arrived.
    let mut reduce_start = BTreeMap::new();
    let mut result_at = BTreeMap::new();
    for (i, s, d, _) in transfers(&p) {
        let n = p.node(i as u32);
        let c = n.phase / 2;
        if n.phase.is_multiple_of(2) {
            reduce_start.insert((n.channel, s, c), run.node_start[i]);
        } else {
            result_at.insert((n.channel, d, c), run.node_finish[i]);
        }
    }
    let mut checked = 0;
    for ((tree, v, c), start) in &reduce_start {
        if let Some(done) = c.checked_sub(p_slots).and_then(|e| result_at.get(&(*tree, *v, e))) {
            assert!(
                start >= done,
                "tree {tree} rank {v} chunk {c}: reduce at {start:?} before chunk {}'s result at {done:?}",
                c - p_slots
            );
            checked += 1;
        }
    }
    // 15 non-root ranks per tree, 12 chunks per tree of which the last 9 are gated.
    assert_eq!(checked, 2 * 15 * 9);
}

#[test]
fn all_to_all_chunks_split_only_the_all_to_alls() {
    let t = flat_switch(8);
    let opts = PlanOptions {
        all_to_all_chunks: Some(2),
        ..chunked(Some(6), None)
    };
    let a2a = plan(&t, CollectiveOp::AllToAll, AlgoChoice::Direct, Bytes(800_000), opts.clone());
    assert_eq!(a2a.num_transfers(), 2 * 8 * 7, "two pieces per pair");
    let tree = plan(&t, CollectiveOp::AllReduce, AlgoChoice::Tree, Bytes(800_000), opts);
    assert_eq!(tree.num_transfers(), 6 * 7 * 2, "six chunks over the two trees");
    let e = plan_collective(
        &t,
        CollectiveOp::AllToAll,
        Bytes(800_000),
        &group(&t),
        &PlanOptions {
            all_to_all_chunks: Some(0),
            ..PlanOptions::h100()
        },
        &su(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("all_to_all_chunks:"), "{e}");
}

/// `hierarchical-tree` (the study's hierarchical optimal all-reduce): inside servers the
/// scale-up model, across them, per rail, exactly the double binary tree that llmsim plans for
/// that rail alone on `bytes / m`.
#[test]
fn hierarchical_tree_crosses_servers_on_each_rails_double_binary_tree() {
    let (servers, m) = (8u32, 4u32);
    let nic = LinkParams::new(Bandwidth::from_gbps(100), SimTime::from_ns(500));
    let su_spec = ScaleUp {
        gpus_per_server: m,
        ..ScaleUp::dgx_h100()
    };
    let t = Arc::new(flat(servers * m, nic, su_spec, 7).unwrap());
    let bytes = Bytes(8_000_000);
    let su4 = ScaleUpModel::from_nvlink("H100", Bandwidth::from_gbytes_per_sec(450), m);
    let opts = |algo| PlanOptions {
        algo,
        nic_bw: Bandwidth::from_gbps(100),
        ..PlanOptions::h100()
    };
    let cross = |p: &CollectivePlan| -> BTreeMap<(NodeId, NodeId), u64> {
        let mut e = BTreeMap::new();
        for (_, s, d, b) in transfers(p) {
            *e.entry((s, d)).or_default() += b.0;
        }
        e
    };
    let hier = plan_collective(
        &t,
        CollectiveOp::AllReduce,
        bytes,
        &group(&t),
        &opts(AlgoChoice::HierarchicalTree),
        &su4,
    )
    .unwrap()
    .plan;
    let got = cross(&hier);
    // Every transfer stays on its rail (same local rank, different servers).
    for (s, d) in got.keys() {
        assert_eq!(s.0 % m, d.0 % m, "transfer {s:?} -> {d:?} leaves its rail");
        assert_ne!(s.0 / m, d.0 / m, "transfer {s:?} -> {d:?} does not cross servers");
    }
    // The same edges and bytes as a double binary tree planned on each rail alone.
    let mut want = BTreeMap::new();
    for j in 0..m {
        let rail: Vec<NodeId> = (0..servers).map(|s| NodeId(s * m + j)).collect();
        let rail_bytes = Bytes(bytes.0 / u64::from(m));
        let p = plan_collective(&t, CollectiveOp::AllReduce, rail_bytes, &rail, &opts(AlgoChoice::Tree), &su4)
            .unwrap()
            .plan;
        assert!(
            p.nodes().iter().all(|n| matches!(n.step, Step::Transfer { .. })),
            "a rail is one rank per server"
        );
        for (k, v) in cross(&p) {
            *want.entry(k).or_default() += v;
        }
    }
    assert_eq!(got, want);
    // The intra-server phases are scale-up steps, two per rank (reduce-scatter, all-gather) per chunk.
    let locals = hier.nodes().iter().filter(|n| matches!(n.step, Step::Local { .. })).count();
    assert!(locals > 0 && locals % (2 * (servers * m) as usize) == 0, "{locals} local steps");
    // Plain hierarchical follows NCCL's choice: here (H100, 8 nodes) NVLSTree, whose tree
    // across servers is a fluid pipelined tree with a zero-byte local step for its fill; the
    // chunked DBT has none (its only local steps are the reduce-scatters and all-gathers).
    let nccl = plan_collective(
        &t,
        CollectiveOp::AllReduce,
        bytes,
        &group(&t),
        &opts(AlgoChoice::Hierarchical),
        &su4,
    )
    .unwrap()
    .plan;
    let fills = |p: &CollectivePlan| {
        p.nodes()
            .iter()
            .filter(|n| matches!(n.step, Step::Local { bytes, .. } if bytes.0 == 0))
            .count()
    };
    assert!(fills(&nccl) > 0);
    assert_eq!(fills(&hier), 0);
}
