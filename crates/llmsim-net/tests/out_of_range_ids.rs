//! Every public getter of the packet engine that takes an id answers `None` (or an error) for
//! an id it does not have, on a fresh engine and after a run: its per-id tables skip bounds
//! checks in release builds, so an unchecked caller id would be undefined behaviour. Run it in
//! release mode too: `cargo test --release -p llmsim-net --test out_of_range_ids`.

mod common;

use common::{ns3_cfg, ns3_topo, packet_flow};
use llmsim_core::SimTime;
use llmsim_net::packet::ns3::{fct_text, finished};
use llmsim_net::packet::{CcMode, PacketEngine, PacketError};

/// Two hosts under one switch: 3 nodes, 4 directed links.
const TOPO: &str = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n";

const FAR: [u32; 5] = [4, 1000, 400_000_000, u32::MAX - 1, u32::MAX];

fn engine() -> PacketEngine {
    let (t, ids) = ns3_topo(TOPO);
    PacketEngine::new(t, Some(ids), ns3_cfg(CcMode::Dcqcn)).expect("engine")
}

fn assert_all_none(e: &PacketEngine, first_flow: u32) {
    for f in std::iter::once(first_flow).chain(FAR) {
        assert_eq!(e.flow_done(f), None, "flow_done({f})");
        assert_eq!(e.flow_result(f), None, "flow_result({f})");
        assert_eq!(e.flow_bytes_acked(f), None, "flow_bytes_acked({f})");
        assert_eq!(e.standalone_fct(f as usize), None, "standalone_fct({f})");
        assert!(matches!(fct_text(e, &[f]), Err(PacketError::Flow(_))), "fct_text([{f}])");
        assert!(matches!(finished(e, &[f]), Err(PacketError::Flow(_))), "finished([{f}])");
    }
    assert_eq!(e.standalone_fct(usize::MAX), None);
    for n in std::iter::once(3).chain(FAR) {
        assert_eq!(e.ns3_id(n), None, "ns3_id({n})");
        assert_eq!(e.port_count(n), None, "port_count({n})");
    }
    for l in FAR {
        assert_eq!(e.ns3_ifindex(l), None, "ns3_ifindex({l})");
    }
}

#[test]
fn getters_answer_none_for_ids_out_of_range() {
    let mut e = engine();
    assert_all_none(&e, 0);
    // In range: the ids the engine has answer.
    assert_eq!(e.ns3_id(2), Some(2));
    assert_eq!(e.port_count(2), Some(2));
    assert_eq!(e.ns3_ifindex(3), Some(2));

    let id = e.add_flow(packet_flow(0, 1, 10_000, SimTime::ZERO, 7)).expect("flow");
    e.run();
    assert_eq!(e.flow_done(id), Some(true));
    assert_eq!(e.flow_bytes_acked(id), Some(10_000));
    assert_eq!(e.flow_result(id).map(|r| r.tag), Some(7));
    assert!(fct_text(&e, &[id]).is_ok());
    assert_all_none(&e, id + 1);
}

#[test]
fn an_ns3_id_list_of_the_wrong_length_is_an_error() {
    let (t, mut ids) = ns3_topo(TOPO);
    ids.pop();
    let e = PacketEngine::new(t, Some(ids), ns3_cfg(CcMode::Dcqcn));
    assert!(matches!(e, Err(PacketError::Config(m)) if m.contains("ns3_ids")));
}
