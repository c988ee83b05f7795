//! BCube (hosts relay) on the backends: the packet engine, which forwards at switches only,
//! refuses it with an error naming the backends that run it; the flow and analytical backends
//! carry a lone transfer over its relayed route in latency plus serialization time.

use std::sync::Arc;

use llmsim_core::{Bytes, NodeId, SimTime, TransferId};
use llmsim_net::packet::PacketConfig;
use llmsim_net::{AnalyticalNetwork, FlowNetwork, Network, PacketNetwork, RouteSpec, Transfer, run_all};
use llmsim_topo::bcube::BCubeSpec;
use llmsim_topo::{FamilySpec, ScaleUp, Topology};

/// BCube(4, 1): 16 GPUs with 2 ports of 400 Gb/s, 500 ns each.
fn topo() -> Arc<Topology> {
    let spec = BCubeSpec {
        n: Some(4),
        k: Some(1),
        ..BCubeSpec::default()
    };
    Arc::new(spec.build(16, ScaleUp::none(), 1).unwrap())
}

#[test]
fn the_packet_engine_refuses_a_topology_whose_hosts_relay() {
    let err = PacketNetwork::new(topo(), PacketConfig::default()).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("forwards at switches only") && msg.contains("flow or analytical"),
        "{msg}"
    );
}

#[test]
fn flow_and_analytical_carry_a_relayed_transfer() {
    // Host 0 = (0, 0) to host 5 = (1, 1): two digits, 4 links through a relaying host.
    let bytes = 1u64 << 20;
    let want = SimTime::from_ns(4 * 500) + SimTime::from_secs_f64(bytes as f64 * 8.0 / 400e9);
    let t = Transfer {
        id: TransferId(0),
        src: NodeId(0),
        dst: NodeId(5),
        bytes: Bytes(bytes),
        start: SimTime::ZERO,
        flow_hash: 3,
        route: RouteSpec::Direct,
    };
    let mut flow = FlowNetwork::new(topo());
    let mut analytical = AnalyticalNetwork::new(topo());
    for net in [&mut flow as &mut dyn Network, &mut analytical] {
        let done = run_all(net, [t.clone()]).unwrap();
        let got = done[0].finish;
        assert!(got.0.abs_diff(want.0) <= 1_000, "{got} vs {want}");
    }
}
