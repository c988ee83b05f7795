//! Wormhole across a link failure (issue 32 §2; the paper's §5: a failure interrupts steady
//! state). A cable that long steady flows cross fails while their partition is frozen: the
//! partition resumes at the failure, the flows move to the other aggregation switch, lose what
//! was on the cable and recover by go-back-N, settle, and are fast-forwarded again. Every flow
//! finishes with its bytes, and each flow's completion time stays within the bound the steady
//! case keeps against the exact engine under the same failure (2θ per flow, θ on the mean).

mod common;

use llmsim_core::{LinkId, NodeId, SimTime};
use llmsim_net::packet::{CcMode, FlowSpec, PacketEngine, WormholeConfig};

use common::{fat_tree_k4, ns3_cfg, ns3_topo, packet_flow};

/// Three 20 MB flows from pod 1 into host 0 (an incast) and a disjoint pair, all from 0.
fn flows() -> Vec<FlowSpec> {
    let mut v: Vec<FlowSpec> = (1..=3u32)
        .map(|s| packet_flow(4 + s, 0, 20_000_000, SimTime::ZERO, u64::from(s)))
        .collect();
    v.push(packet_flow(12, 14, 20_000_000, SimTime::ZERO, 100));
    v
}

/// Both directions of the cable between host 0's edge switch and its first aggregation switch.
fn edge_agg_cable(e: &PacketEngine) -> Vec<u32> {
    let t = e.topology();
    let edge = t.link(t.ports(NodeId(0))[0]).dst;
    let agg = t
        .ports(edge)
        .iter()
        .map(|&l| t.link(l).dst)
        .find(|&n| !t.is_host(n))
        .expect("an uplink");
    (0..t.num_links())
        .map(LinkId::from_idx)
        .filter(|&l| {
            let k = t.link(l);
            (k.src, k.dst) == (edge, agg) || (k.src, k.dst) == (agg, edge)
        })
        .map(|l| l.0)
        .collect()
}

fn run(cc: CcMode, ww: Option<WormholeConfig>, fail_at: SimTime) -> PacketEngine {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let mut e = PacketEngine::new(t, Some(ids), ns3_cfg(cc)).expect("engine");
    if let Some(w) = ww {
        e.set_wormhole(w).expect("knobs");
    }
    for f in flows() {
        e.add_flow(f).expect("flow");
    }
    for l in edge_agg_cable(&e) {
        e.schedule_link_down(fail_at, l).expect("scheduled");
    }
    e.run();
    e
}

#[test]
fn wormhole_resumes_across_a_link_failure_within_its_bound() {
    let theta = 0.05;
    let knobs = WormholeConfig {
        fast_forward: true,
        ..WormholeConfig::default()
    };
    assert_eq!(knobs.theta, theta);
    for cc in [CcMode::Dcqcn, CcMode::Hpcc] {
        // The incast shares host 0's 100 Gb/s downlink: ~4.8 ms; the failure comes at 2 ms,
        // well after the partition first froze.
        let at = SimTime::from_ms(2);
        let exact = run(cc, None, at);
        let fast = run(cc, Some(knobs), at);
        let w = fast.wormhole_stats().expect("on");
        assert!(w.freezes > 0 && w.skipped_bytes > 0, "{cc:?}: something was skipped: {w:?}");
        let (es, fs) = (exact.stats(), fast.stats());
        assert_eq!(fs.flows_done, flows().len() as u64, "{cc:?}: every flow finishes");
        assert_eq!(es.flows_done, flows().len() as u64);
        assert_eq!(fs.payload_delivered, es.payload_delivered, "{cc:?}: every byte once");
        assert!(es.drops_error > 0, "{cc:?}: the failure cost packets in the exact run");
        assert!(fs.events < es.events, "{cc:?}: fewer events ({} vs {})", fs.events, es.events);
        let mut sum = 0.0;
        for f in 0..flows().len() as u32 {
            let (a, b) = (exact.flow_result(f).unwrap(), fast.flow_result(f).unwrap());
            assert_eq!(a.start, b.start);
            let (d0, d1) = ((a.finish - a.start).as_ps() as f64, (b.finish - b.start).as_ps() as f64);
            let err = (d1 - d0).abs() / d0;
            println!("{cc:?} flow {f}: exact {d0} ps, fast-forward {d1} ps, error {err:.4}");
            assert!(err < 2.0 * theta, "{cc:?} flow {f}: FCT error {err:.4}");
            sum += err;
        }
        let mean = sum / flows().len() as f64;
        assert!(mean < theta, "{cc:?}: mean FCT error {mean:.4} >= θ");
    }
}

/// With memoization on, a failure early in the run stops it: the run still completes every
/// flow, and the database recorded before the failure is still there for the caller to save.
#[test]
fn a_failure_stops_memoization_and_keeps_the_database() {
    let knobs = WormholeConfig {
        fast_forward: true,
        memo: true,
        ..WormholeConfig::default()
    };
    let mut fast = run(CcMode::Dcqcn, Some(knobs), SimTime::from_us(50));
    assert_eq!(fast.stats().flows_done, flows().len() as u64);
    assert!(fast.memo_db().is_some());
    assert!(fast.take_memo_db().is_some());
}
