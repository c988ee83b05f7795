//! Every registered congestion control is its own algorithm (issue 33: Swift and HPCC-PINT
//! joined DCQCN, HPCC, TIMELY and DCTCP): on one incast each completes every flow with every
//! byte, and no two give the same flow completion times.

mod common;

use llmsim_core::SimTime;
use llmsim_net::packet::{CcMode, PacketConfig, PacketEngine};

use common::{flat_topo, packet_flow};

/// 16 senders x 1 MB to one receiver under one 100 Gb/s switch with a 2 MB buffer.
fn incast(cc: CcMode) -> (Vec<u64>, PacketEngine) {
    let cfg = PacketConfig {
        buffer_bytes: 2_000_000,
        ..PacketConfig::ns3_defaults(cc)
    };
    let n = 16u32;
    let mut e = PacketEngine::new(flat_topo(n + 1), None, cfg).expect("engine");
    for s in 0..n {
        e.add_flow(packet_flow(s, n, 1_000_000, SimTime::ZERO, u64::from(s))).expect("flow");
    }
    e.run();
    assert_eq!(e.stats().flows_done, u64::from(n), "{}: every flow finishes", cc.name());
    assert_eq!(e.stats().payload_delivered, u64::from(n) * 1_000_000, "{}", cc.name());
    let fcts = (0..n).map(|f| e.flow_result(f).expect("flow").fct().as_ns()).collect();
    (fcts, e)
}

#[test]
fn each_congestion_control_is_distinct_on_an_incast() {
    let runs: Vec<(CcMode, Vec<u64>)> = CcMode::ALL.iter().map(|&c| (c, incast(c).0)).collect();
    assert!(runs.iter().any(|(c, _)| c.name() == "swift"));
    assert!(runs.iter().any(|(c, _)| c.name() == "hpcc-pint"));
    for (i, (a, fa)) in runs.iter().enumerate() {
        for (b, fb) in &runs[i + 1..] {
            assert_ne!(fa, fb, "{} and {} give the same FCTs", a.name(), b.name());
        }
    }
}

#[test]
fn swift_holds_the_queue_near_its_target_and_pint_shrinks_the_header() {
    let swift = CcMode::parse("swift").expect("registered");
    let (_, e) = incast(swift);
    let none = CcMode::parse("dcqcn").expect("registered");
    let (_, d) = incast(none);
    // The receiver's downlink is the one congested port.
    let maxq = |e: &PacketEngine| e.queue_stats().iter().map(|q| q.3).max().expect("ports");
    assert!(maxq(&e) < maxq(&d), "swift {} vs dcqcn {}", maxq(&e), maxq(&d));
    let pint = CcMode::parse("hpcc-pint").expect("registered");
    let hpcc = CcMode::parse("hpcc").expect("registered");
    assert_eq!(
        PacketConfig::ns3_defaults(hpcc).data_packet_bytes(1000) - PacketConfig::ns3_defaults(pint).data_packet_bytes(1000),
        40,
        "PINT carries 2 bytes where HPCC's INT stack takes 42"
    );
}
