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
                        ts.push(Transfer::new(TransferId(id), NodeId(s), NodeId(d), Bytes(100_000 + id), SimTime::ZERO));
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
                assert_eq!(n.link_bytes()[l.idx()], Bytes::ZERO, "{down} down, {lb:?}: failed link {l} carried bytes");
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
            assert!(up.abs_diff(want) <= tol && downlinks.abs_diff(want) <= tol, "{up} {downlinks} {want}");
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
            ts.push(Transfer::new(TransferId(u64::from(s)), NodeId(s), NodeId(d), Bytes(200_000), SimTime::ZERO));
        }
        let done = run_all(&mut n, ts).expect("run");
        assert_eq!(done.len(), 16, "{lb:?}: every flow completes");
        assert_eq!(n.stats().bytes_delivered, 16 * 200_000);
        let sent = n.packet_details().expect("packet details");
        // `ports` lists the ports that sent anything.
        assert!(sent.ports.len() > 16, "{lb:?}: fabric ports sent packets");
        assert!(sent.ports.iter().all(|p| !failed.contains(&p.link)), "{lb:?}: a failed link sent packets");
    }
}
