//! Links down on the flow backend (issue 32 §2): routes avoid them, every transfer completes,
//! bytes are conserved and no failed link carries a byte, under ECMP and spraying alike.

use std::sync::Arc;

use llmsim_core::{Bandwidth, Bytes, LinkId, NodeId, SimTime, TransferId};
use llmsim_net::packet::LoadBalance;
use llmsim_net::{FlowNetwork, Network, Transfer, run_all};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::names::random_fabric_cables;
use llmsim_topo::{LinkParams, ScaleUp, Topology};

fn topo(down: u32, seed: u64) -> (Arc<Topology>, Vec<LinkId>) {
    let lat = SimTime::from_ns(500);
    let p = FatTreeParams {
        k: 4,
        host_link: LinkParams::new(Bandwidth::from_gbps(100), lat),
        edge_agg: LinkParams::new(Bandwidth::from_gbps(100), lat),
        agg_core: LinkParams::new(Bandwidth::from_gbps(100), lat),
    };
    let mut t = fat_tree(16, &p, ScaleUp::none(), 1).expect("fat-tree");
    let failed = random_fabric_cables(&t, down, seed, "faults").expect("cables");
    for &l in &failed {
        t.set_link_down(l, true).expect("link");
    }
    (Arc::new(t), failed)
}

#[test]
fn all_to_all_with_links_down_completes_and_conserves_bytes() {
    for (down, seed) in [(1, 1), (2, 5), (3, 9)] {
        for lb in [LoadBalance::Ecmp, LoadBalance::Spray] {
            let (t, failed) = topo(down, seed);
            let mut n = FlowNetwork::new(t.clone());
            n.set_load_balance(lb);
            n.set_rate_checks(true);
            let mut ts = Vec::new();
            for s in 0..16u32 {
                for d in 0..16u32 {
                    if s != d {
                        let id = u64::from(s * 16 + d);
                        ts.push(Transfer::new(
                            TransferId(id),
                            NodeId(s),
                            NodeId(d),
                            Bytes(100_000 + id),
                            SimTime::ZERO,
                        ));
                    }
                }
            }
            let want: u64 = ts.iter().map(|t| t.bytes.0).sum();
            let done = match run_all(&mut n, ts) {
                Ok(d) => d,
                // A draw that cuts a pod off (all its uplinks) is a routing error, not a hang.
                Err(e) => {
                    assert!(e.to_string().contains("failed links"), "{e}");
                    continue;
                }
            };
            assert_eq!(done.len(), 240, "{down} down, {lb:?}: every transfer completes");
            assert_eq!(n.stats().bytes_delivered, want, "bytes conserved");
            assert!(n.violations().is_empty(), "{:?}", n.violations());
            for &l in &failed {
                assert_eq!(
                    n.link_bytes()[l.idx()],
                    Bytes::ZERO,
                    "{down} down, {lb:?}: failed link {l} carried bytes"
                );
            }
            // Every byte that left a host arrived at one: NIC uplinks and downlinks agree.
            let (mut up, mut downlinks) = (0u64, 0u64);
            for (i, l) in t.links().iter().enumerate() {
                if t.is_host(l.src) {
                    up += n.link_bytes()[i].0;
                }
                if t.is_host(l.dst) {
                    downlinks += n.link_bytes()[i].0;
                }
            }
            let tol = if lb == LoadBalance::Spray { 240 * 8 } else { 0 };
            assert!(
                up.abs_diff(want) <= tol && downlinks.abs_diff(want) <= tol,
                "{up} {downlinks} {want}"
            );
        }
    }
}

/// The packet backend routes with the same rule: with cables down at the start, every flow
/// completes, every byte arrives once, and no failed link sends a packet (ECMP and spray).
#[test]
fn packet_backend_routes_around_links_down_at_the_start() {
    use llmsim_net::packet::{CcMode, PacketConfig, PacketNetwork};
    let (t, failed) = topo(2, 5);
    for lb in [LoadBalance::Ecmp, LoadBalance::Spray] {
        let cfg = PacketConfig {
            load_balance: lb,
            ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
        };
        let mut n = PacketNetwork::new(t.clone(), cfg).expect("packet network");
        let mut ts = Vec::new();
        for s in 0..16u32 {
            let d = (s + 5) % 16;
            ts.push(Transfer::new(
                TransferId(u64::from(s)),
                NodeId(s),
                NodeId(d),
                Bytes(200_000),
                SimTime::ZERO,
            ));
        }
        let done = run_all(&mut n, ts).expect("run");
        assert_eq!(done.len(), 16, "{lb:?}: every flow completes");
        assert_eq!(n.stats().bytes_delivered, 16 * 200_000);
        let sent = n.packet_details().expect("packet details");
        // `ports` lists the ports that sent anything.
        assert!(sent.ports.len() > 16, "{lb:?}: fabric ports sent packets");
        assert!(
            sent.ports.iter().all(|p| !failed.contains(&p.link)),
            "{lb:?}: a failed link sent packets"
        );
    }
}

/// A link on a running flow's path fails half way: the flow moves to another equal-cost path
/// with the bytes it has left and finishes as if nothing happened (the other path is as fast
/// and idle); nothing more crosses the failed link. A link degraded to half its bandwidth half
/// way makes the second half take twice as long.
#[test]
fn a_link_change_during_a_flow_moves_or_slows_it() {
    use llmsim_net::LinkChange;
    let bytes = 1_250_000u64; // 100 us at 100 Gb/s
    let t = Transfer::new(TransferId(1), NodeId(0), NodeId(15), Bytes(bytes), SimTime::ZERO);
    let hops = SimTime::from_ns(6 * 500);
    let (topo0, _) = topo(0, 1);
    let mut path = Vec::new();
    topo0.route(t.src, t.dst, t.flow_hash, &mut path).unwrap();
    // The edge's uplink on the flow's path (the second link).
    let up = path[1];
    for lb in [LoadBalance::Ecmp, LoadBalance::Spray] {
        let mut n = FlowNetwork::new(topo0.clone());
        n.set_load_balance(lb);
        n.set_rate_checks(true);
        n.schedule_link_change(SimTime::from_us(50), up, LinkChange::Down).unwrap();
        let done = run_all(&mut n, [t.clone()]).unwrap();
        assert_eq!(done[0].finish, SimTime::from_us(100) + hops, "{lb:?}");
        assert_eq!(n.link_bytes()[up.idx()], Bytes::ZERO, "{lb:?}: counted on its last path");
        assert_eq!(n.stats().bytes_delivered, bytes);
        assert!(n.fault_error().is_none());
        assert!(n.violations().is_empty(), "{:?}", n.violations());
    }
    let mut n = FlowNetwork::new(topo0.clone());
    n.schedule_link_change(SimTime::from_us(50), up, LinkChange::Bandwidth(Bandwidth::from_gbps(50)))
        .unwrap();
    let done = run_all(&mut n, [t.clone()]).unwrap();
    // 50 us at 100 Gb/s, then the other 625 kB at 50 Gb/s: 100 us.
    assert_eq!(done[0].finish, SimTime::from_us(150) + hops);
    // A link change in the past is refused.
    assert!(n.schedule_link_change(SimTime::ZERO, up, LinkChange::Up).is_err());
}

/// Failing every uplink of the source's edge while the flow runs leaves it no route: the
/// network says which transfer and why instead of finishing it.
#[test]
fn a_flow_cut_off_during_the_run_is_reported() {
    use llmsim_net::LinkChange;
    let (t, _) = topo(0, 1);
    let mut n = FlowNetwork::new(t.clone());
    // Edge 0 (node 16) has uplinks to aggs 24 and 25.
    let ups: Vec<LinkId> = (0..t.num_links())
        .map(LinkId::from_idx)
        .filter(|&l| t.link(l).src == NodeId(16) && t.link(l).dst.0 >= 24)
        .collect();
    assert_eq!(ups.len(), 2);
    for &l in &ups {
        n.schedule_link_change(SimTime::from_us(10), l, LinkChange::Down).unwrap();
    }
    let tr = Transfer::new(TransferId(7), NodeId(0), NodeId(15), Bytes(1_250_000), SimTime::ZERO);
    n.submit(tr).unwrap();
    let mut done = Vec::new();
    while let Some(x) = n.next_event_time() {
        n.advance_to(x, &mut done);
    }
    assert!(done.is_empty());
    let e = n.fault_error().expect("a fault error").to_string();
    assert!(e.contains("transfer 7") && e.contains("failed links"), "{e}");
}

/// A link failing under a running flow on the packet backend: the packets on it are lost, the
/// flow moves to another path, and RoCE recovers every byte: by go-back-N when later packets
/// arrive out of order, and by the ACK timeout when the flow's last packets were the ones lost.
#[test]
fn packet_backend_recovers_a_link_failing_mid_transfer() {
    use llmsim_net::LinkChange;
    use llmsim_net::packet::{CcMode, PacketConfig, PacketNetwork};
    let bytes = 1_250_000u64; // 100 us at 100 Gb/s
    let (t, _) = topo(0, 1);
    let tr = Transfer::new(TransferId(1), NodeId(0), NodeId(15), Bytes(bytes), SimTime::ZERO);
    let mut path = Vec::new();
    t.route(tr.src, tr.dst, tr.flow_hash, &mut path).unwrap();
    let net = || PacketNetwork::new(t.clone(), PacketConfig::ns3_defaults(CcMode::Dcqcn)).expect("packet network");
    let mut plain = net();
    let base = run_all(&mut plain, [tr.clone()]).unwrap()[0].finish;
    assert_eq!(plain.stats().drops, 0);
    // Mid-transfer (the edge uplink at 50 us): later packets arrive out of order, a NACK brings
    // the sender back. Near the end (the destination pod's agg-to-edge link 4 us before the end,
    // with only the flow's last packets left to cross it): nothing arrives after the loss, and the
    // ACK timeout (`FAULT_ACK_TIMEOUT`, checked every 500 us) resends.
    let timeout = llmsim_net::packet::FAULT_ACK_TIMEOUT;
    for (link, at, tail) in [(path[1], SimTime::from_us(50), false), (path[4], base - SimTime::from_us(4), true)] {
        let mut n = net();
        n.schedule_link_change(at, link, LinkChange::Down).unwrap();
        let done = run_all(&mut n, [tr.clone()]).unwrap();
        let s = n.stats();
        println!(
            "link {link} down at {at}: finish {} (no failure {base}), {} drops, {} NACKs, {} B resent",
            done[0].finish, s.drops, s.nacks, s.retransmitted_bytes
        );
        assert_eq!(done.len(), 1, "the flow completes");
        assert_eq!(s.bytes_delivered, bytes);
        assert!(s.drops > 0, "packets on the failed link are lost");
        assert!(s.retransmitted_bytes > 0, "and sent again");
        assert!(done[0].finish > base, "recovery costs time");
        if tail {
            assert!(done[0].finish > at + timeout, "a tail loss waits for the ACK timeout");
            assert_eq!(s.nacks, 0, "nothing arrived out of order");
        } else {
            assert!(s.nacks > 0, "out-of-order arrivals are NACKed");
            assert!(done[0].finish < at + timeout, "recovered by go-back-N, before any timeout");
        }
        assert!(n.fault_error().is_none());
    }
    // Under Wormhole fast-forward the failure interrupts steady state and is simulated the same
    // way (tests/wormhole_faults.rs checks the times against the exact engine).
    let cfg = PacketConfig {
        wormhole: llmsim_net::packet::WormholeConfig::fast_forwarding(0.05, 4, 3, SimTime::from_us(10), false),
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    };
    let mut n = PacketNetwork::new(t.clone(), cfg).expect("packet network");
    n.schedule_link_change(SimTime::from_us(5), path[1], LinkChange::Down)
        .expect("a failure under Wormhole is simulated");
}
