//! Topologies and helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use llmsim_core::{Bandwidth, LinkId, NodeId, SimTime};
use llmsim_net::packet::{CcMode, FlowSpec, PacketConfig, PacketRouting};
use llmsim_net::{Completion, Network, Transfer};
use llmsim_topo::generators::flat;
use llmsim_topo::ns3::parse_ns3;
use llmsim_topo::{LinkKind, LinkParams, NodeKind, Routing, ScaleUp, Topology, TopologyBuilder};

pub fn gbps(g: u64) -> Bandwidth {
    Bandwidth::from_gbps(g)
}

/// `hosts` hosts on one switch, 100 Gb/s NICs, 500 ns per link.
pub fn flat_topo(hosts: u32) -> Arc<Topology> {
    let nic = LinkParams::new(gbps(100), SimTime::from_ns(500));
    Arc::new(flat(hosts, nic, ScaleUp::none(), 1).unwrap())
}

/// A star whose host `i` has uplink `up[i]` and downlink `down[i]` (Gb/s), `latency` per link.
/// Links: uplinks `0..n`, then downlinks `n..2n`.
pub fn star(up: &[u64], down: &[u64], latency: SimTime) -> Arc<Topology> {
    assert_eq!(up.len(), down.len());
    let n = up.len() as u32;
    let mut b = TopologyBuilder::new();
    b.add_nodes(NodeKind::Host, n);
    let sw = b.add_node(NodeKind::Switch { tier: 1 });
    for (h, g) in up.iter().enumerate() {
        b.add_link(NodeId(h as u32), sw, LinkParams::new(gbps(*g), latency), LinkKind::HostNic);
    }
    for (h, g) in down.iter().enumerate() {
        b.add_link(sw, NodeId(h as u32), LinkParams::new(gbps(*g), latency), LinkKind::HostNic);
    }
    Arc::new(b.build("star".into(), n, ScaleUp::none(), Routing::Flat { switch: sw }, 1).unwrap())
}

/// A two-tier Clos: `leaves` leaves with `per_leaf` hosts each, `spines` spines, every link
/// 100 Gb/s. The topology crate has no up-down rule yet, so [`Clos::path`] routes: up to a spine
/// chosen by the leaf's ECMP hash, down to the destination leaf.
pub struct Clos {
    pub topo: Arc<Topology>,
    pub leaves: u32,
    pub per_leaf: u32,
    pub spines: u32,
    host_up: Vec<LinkId>,
    host_down: Vec<LinkId>,
    /// `[leaf][spine]`
    leaf_up: Vec<Vec<LinkId>>,
    /// `[spine][leaf]`
    spine_down: Vec<Vec<LinkId>>,
}

impl Clos {
    pub fn new(leaves: u32, per_leaf: u32, spines: u32, ecmp_seed: u64) -> Self {
        let p = LinkParams::new(gbps(100), SimTime::from_ns(500));
        let hosts = leaves * per_leaf;
        let mut b = TopologyBuilder::new();
        b.add_nodes(NodeKind::Host, hosts);
        let leaf0 = b.add_nodes(NodeKind::Switch { tier: 1 }, leaves);
        let spine0 = b.add_nodes(NodeKind::Switch { tier: 2 }, spines);
        let mut host_up = Vec::new();
        let mut host_down = Vec::new();
        for h in 0..hosts {
            let (u, d) = b.add_cable(NodeId(h), NodeId(leaf0.0 + h / per_leaf), p, LinkKind::HostNic);
            host_up.push(u);
            host_down.push(d);
        }
        let mut leaf_up = vec![Vec::new(); leaves as usize];
        let mut spine_down = vec![Vec::new(); spines as usize];
        for l in 0..leaves {
            for s in 0..spines {
                let (u, d) = b.add_cable(NodeId(leaf0.0 + l), NodeId(spine0.0 + s), p, LinkKind::Fabric);
                leaf_up[l as usize].push(u);
                spine_down[s as usize].push(d);
            }
        }
        let topo = b
            .build("clos2".into(), hosts, ScaleUp::none(), Routing::Flat { switch: leaf0 }, ecmp_seed)
            .unwrap();
        Clos {
            topo: Arc::new(topo),
            leaves,
            per_leaf,
            spines,
            host_up,
            host_down,
            leaf_up,
            spine_down,
        }
    }

    pub fn leaf_node(&self, leaf: u32) -> NodeId {
        NodeId(self.leaves * self.per_leaf + leaf)
    }

    /// The spine `src`'s leaf sends flow `hash` to.
    pub fn spine_of(&self, src: NodeId, hash: u64) -> usize {
        let leaf = src.0 / self.per_leaf;
        self.topo.ecmp_pick(self.leaf_node(leaf), hash, self.spines as usize)
    }

    pub fn path(&self, src: NodeId, dst: NodeId, hash: u64) -> Vec<LinkId> {
        let (ls, ld) = (src.0 / self.per_leaf, dst.0 / self.per_leaf);
        let mut p = vec![self.host_up[src.idx()]];
        if ls != ld {
            let s = self.spine_of(src, hash);
            p.push(self.leaf_up[ls as usize][s]);
            p.push(self.spine_down[s][ld as usize]);
        }
        p.push(self.host_down[dst.idx()]);
        p
    }
}

/// Submits everything, then steps event by event until idle.
pub fn drive(net: &mut dyn Network) -> Vec<Completion> {
    let mut done = Vec::new();
    while let Some(t) = net.next_event_time() {
        net.advance_to(t, &mut done);
    }
    done
}

pub fn finish_of(done: &[Completion], id: u64) -> SimTime {
    done.iter()
        .find(|c| c.id.0 == id)
        .unwrap_or_else(|| panic!("transfer {id} did not complete"))
        .finish
}

pub fn submit_all(net: &mut dyn Network, ts: &[Transfer]) {
    for t in ts {
        net.submit(t.clone()).unwrap();
    }
}

/// A k=4 fat-tree as ns-3 text (hosts 0-15, edge 16-23, agg 24-31, core 32-35), 100G/1us.
pub fn fat_tree_k4() -> String {
    let mut s = String::from("36 20 48\n16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35\n");
    for h in 0..16 {
        s += &format!("{h} {} 100Gbps 1000ns 0\n", 16 + h / 2);
    }
    for e in 0..8 {
        let pod = e / 2;
        for a in 0..2 {
            s += &format!("{} {} 100Gbps 1000ns 0\n", 16 + e, 24 + pod * 2 + a);
        }
    }
    for pod in 0..4 {
        for a in 0..2 {
            for c in 0..2 {
                s += &format!("{} {} 100Gbps 1000ns 0\n", 24 + pod * 2 + a, 32 + a * 2 + c);
            }
        }
    }
    s
}

/// An ns-3 topology text, parsed, with the file's node ids.
pub fn ns3_topo(text: &str) -> (Arc<Topology>, Vec<u32>) {
    let imp = parse_ns3(text, "test.txt", 1).expect("topology parses");
    (Arc::new(imp.topology), imp.file_ids)
}

/// ns-3's defaults for `cc`, with ns-3's next-hop order.
pub fn ns3_cfg(cc: CcMode) -> PacketConfig {
    PacketConfig {
        routing: PacketRouting::Ns3,
        ..PacketConfig::ns3_defaults(cc)
    }
}

/// A data flow (priority group 3, dport 100) whose tag is also its ECMP hash.
pub fn packet_flow(src: u32, dst: u32, size: u64, start: SimTime, tag: u64) -> FlowSpec {
    FlowSpec {
        src: NodeId(src),
        dst: NodeId(dst),
        size,
        start,
        pg: 3,
        dport: 100,
        tag,
        flow_hash: tag,
    }
}

/// Skipping is for checkouts without `../shared`; in CI (`CI=true`) a missing reference fails.
pub fn missing_reference(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    assert!(
        !ci,
        "{what} not found and CI=true: the reference data (../shared/reference) must be beside the checkout in CI"
    );
    println!("skipping: {what} not found");
}
