//! Topology generators. Each lays out nodes as: hosts, then one NVSwitch per server (when
//! `gpus_per_server > 1`), then the packet switches, tier by tier.

use llmsim_core::{Bandwidth, FieldError, NodeId};

use crate::TopoError;
use crate::graph::{LinkKind, LinkParams, NodeKind, ScaleUp, Topology, TopologyBuilder};
use crate::routing::{FatTreeRule, RailRule, Routing, SpineLeafRule};

/// Adds hosts and the scale-up domain (NVSwitch per server, NVLink cables, host port 0).
/// Returns the builder with hosts `0..num_hosts` and NVSwitches after them.
///
/// # Errors
/// `TopoError::Invalid` if `num_hosts` is not a multiple of `gpus_per_server`, or NVLink bandwidth
/// is zero with more than one GPU per server.
pub fn hosts_with_scale_up(num_hosts: u32, scale_up: ScaleUp) -> Result<TopologyBuilder, TopoError> {
    let g = scale_up.gpus_per_server;
    if g == 0 {
        return Err(FieldError::new("gpus_per_server", "must be at least 1").into());
    }
    if num_hosts == 0 {
        return Err(FieldError::new("gpus", "must be at least 1").into());
    }
    if !num_hosts.is_multiple_of(g) {
        return Err(FieldError::new(
            "gpus",
            format!("{num_hosts} GPUs are not a whole number of {g}-GPU servers; use a multiple of {g}"),
        )
        .into());
    }
    if g > 1 && scale_up.bandwidth.is_zero() {
        return Err(FieldError::new("scale_up.bandwidth", "NVLink bandwidth must be positive, e.g. \"450GBps\"").into());
    }
    let mut b = TopologyBuilder::new();
    b.add_nodes(NodeKind::Host, num_hosts);
    if g > 1 {
        let servers = num_hosts / g;
        let nv0 = b.add_nodes(NodeKind::NvSwitch, servers);
        let p = LinkParams::new(scale_up.bandwidth, scale_up.latency);
        // Host ports first (port 0 = NVLink), so add the host -> NVSwitch directions in host order,
        // then the NVSwitch -> host directions in local-rank order.
        for h in 0..num_hosts {
            b.add_link(NodeId(h), NodeId(nv0.0 + h / g), p, LinkKind::NvLink);
        }
        for h in 0..num_hosts {
            b.add_link(NodeId(nv0.0 + h / g), NodeId(h), p, LinkKind::NvLink);
        }
    }
    Ok(b)
}

/// One switch connecting every host.
///
/// # Errors
/// See [`hosts_with_scale_up`]; also a zero NIC bandwidth.
pub fn flat(num_hosts: u32, nic: LinkParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_rate("nic", nic)?;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let sw = b.add_node(NodeKind::Switch { tier: 1 });
    for h in 0..num_hosts {
        b.add_link(NodeId(h), sw, nic, LinkKind::HostNic);
    }
    for h in 0..num_hosts {
        b.add_link(sw, NodeId(h), nic, LinkKind::HostNic);
    }
    b.build(
        format!("flat-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::Flat { switch: sw },
        ecmp_seed,
    )
}

pub(crate) fn check_rate(field: &str, p: LinkParams) -> Result<(), TopoError> {
    if p.bandwidth.is_zero() {
        return Err(FieldError::new(field, "bandwidth must be positive, e.g. \"400Gbps\"").into());
    }
    Ok(())
}

/// Largest host count a generator builds (keeps every id and link count well inside `u32`).
pub const MAX_HOSTS: u32 = 1 << 24;

pub(crate) fn check_hosts(num_hosts: u32) -> Result<(), TopoError> {
    if num_hosts > MAX_HOSTS {
        return Err(FieldError::new(
            "gpus",
            format!("{num_hosts} GPUs is more than llmsim builds; use at most {MAX_HOSTS}"),
        )
        .into());
    }
    Ok(())
}

/// Parameters of a k-ary fat-tree (Al-Fares et al., SIGCOMM 2008): k pods of k/2 edge and k/2
/// aggregation switches, (k/2)^2 cores, k/2 hosts per edge, k^3/4 hosts in all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FatTreeParams {
    /// Switch radix; even, at least 2.
    pub k: u32,
    /// Host NIC <-> edge switch.
    pub host_link: LinkParams,
    /// Edge <-> aggregation.
    pub edge_agg: LinkParams,
    /// Aggregation <-> core.
    pub agg_core: LinkParams,
}

/// Largest radix [`fat_tree`] accepts ((k/2)^2 cores stay small enough to build).
pub const MAX_FAT_TREE_K: u32 = 1024;

/// A k-ary fat-tree holding `num_hosts` GPUs. Hosts fill edge slots in order; only the pods that
/// hold hosts are built (all `(k/2)^2` cores are), so a small cluster on a big radix stays small.
/// Routing: [`FatTreeRule`] (up-down, ECMP up).
///
/// # Errors
/// `TopoError::Invalid` for an odd or out-of-range `k`, more GPUs than `k^3/4`, a zero bandwidth,
/// or the scale-up errors of [`hosts_with_scale_up`].
pub fn fat_tree(num_hosts: u32, p: &FatTreeParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_fat_tree(num_hosts, p)?;
    let k = p.k;
    let h = k / 2;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let pods = num_hosts.div_ceil(h * h);
    let edge0 = b.add_nodes(NodeKind::Switch { tier: 1 }, pods * h).0;
    let agg0 = b.add_nodes(NodeKind::Switch { tier: 2 }, pods * h).0;
    let core0 = b.add_nodes(NodeKind::Switch { tier: 3 }, h * h).0;
    b.reserve_links(2 * num_hosts as usize + 4 * (pods * h * h) as usize);
    for host in 0..num_hosts {
        b.add_cable(NodeId(host), NodeId(edge0 + host / h), p.host_link, LinkKind::HostNic);
    }
    for pod in 0..pods {
        for i in 0..h {
            for j in 0..h {
                b.add_cable(
                    NodeId(edge0 + pod * h + i),
                    NodeId(agg0 + pod * h + j),
                    p.edge_agg,
                    LinkKind::Fabric,
                );
            }
        }
    }
    for pod in 0..pods {
        for j in 0..h {
            for m in 0..h {
                b.add_cable(NodeId(agg0 + pod * h + j), NodeId(core0 + j * h + m), p.agg_core, LinkKind::Fabric);
            }
        }
    }
    let rule = FatTreeRule {
        half_k: h,
        hosts: num_hosts,
        pods,
        edge0,
        agg0,
        core0,
        div: [h, h * h].map(crate::fastdiv::Divisor::new),
    };
    b.build(
        format!("fat-tree-k{k}-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::FatTree(rule),
        ecmp_seed,
    )
}

/// A k-ary fat-tree with dual-ToR (Alibaba HPN's dual-ToR, dual-plane): two fat-tree planes of
/// `p`'s radix above the hosts, each GPU NIC with two ports of half `host_link`'s bandwidth, one
/// on an edge switch of each plane, so a failed edge switch leaves every GPU reachable. Built by
/// the declared Clos ([`crate::clos::clos`], XGFT `w_1 = 2`) on the fat-tree's tiers `[{k/2
/// down, k/2 up}, {k/2 down, k/2 up}, {pods down}]`: twice the edges, aggregations and cores of
/// [`fat_tree`], every switch still of radix k. Routing: [`crate::clos::ClosRule`] (up-down,
/// the flow hash picks the NIC port, hence the plane).
///
/// # Errors
/// As [`fat_tree`].
pub fn fat_tree_dual_tor(num_hosts: u32, p: &FatTreeParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_fat_tree(num_hosts, p)?;
    let h = p.k / 2;
    let half = LinkParams::new(Bandwidth::from_bps(p.host_link.bandwidth.bps() / 2), p.host_link.latency);
    check_rate("topology.host_link", half)?;
    let tiers = crate::clos::ClosParams {
        down: vec![h, h, num_hosts.div_ceil(h * h).max(1)],
        up: vec![h, h, 0],
        link: vec![half, p.edge_agg, p.agg_core],
        host_ports: 2,
    };
    let mut t = crate::clos::clos(num_hosts, &tiers, scale_up, ecmp_seed)?;
    t.name = format!("fat-tree-k{}-dualtor-{num_hosts}", p.k);
    Ok(t)
}

/// Checks a fat-tree's radix, size and rates.
fn check_fat_tree(num_hosts: u32, p: &FatTreeParams) -> Result<(), TopoError> {
    let k = p.k;
    if k < 2 || !k.is_multiple_of(2) || k > MAX_FAT_TREE_K {
        return Err(FieldError::new(
            "topology.k",
            format!("k={k} must be an even switch radix in 2..={MAX_FAT_TREE_K}, e.g. 4, 8, 16, 64"),
        )
        .into());
    }
    check_hosts(num_hosts)?;
    let capacity = u64::from(k).pow(3) / 4;
    if u64::from(num_hosts) > capacity {
        let need = smallest_fat_tree_k(num_hosts);
        return Err(FieldError::new(
            "topology.k",
            format!("a k={k} fat-tree holds {capacity} GPUs, fewer than {num_hosts}; use k >= {need}"),
        )
        .into());
    }
    check_rate("topology.host_link", p.host_link)?;
    check_rate("topology.edge_agg", p.edge_agg)?;
    check_rate("topology.agg_core", p.agg_core)?;
    Ok(())
}

/// The smallest even k whose fat-tree holds `num_hosts` hosts.
pub fn smallest_fat_tree_k(num_hosts: u32) -> u32 {
    let mut k = 2u32;
    while u64::from(k).pow(3) / 4 < u64::from(num_hosts) {
        k += 2;
    }
    k
}

/// How many spines a two-tier fabric gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpineCount {
    /// Exactly this many spines (each leaf has one uplink to each spine).
    Count(u32),
    /// As few spines as keep the leaf oversubscription (downlink / uplink capacity) at or below
    /// this ratio; 1.0 is non-blocking.
    Oversubscription(f64),
}

impl SpineCount {
    /// Spines for leaves with `down` bandwidth below them and `uplink` per spine link.
    pub(crate) fn resolve(self, field: &str, down: Bandwidth, uplink: Bandwidth) -> Result<u32, TopoError> {
        match self {
            SpineCount::Count(0) => Err(FieldError::new(format!("{field}.spines"), "must be at least 1").into()),
            SpineCount::Count(n) => Ok(n),
            SpineCount::Oversubscription(r) if !(r.is_finite() && r >= 1.0 / 64.0) => Err(FieldError::new(
                format!("{field}.oversubscription"),
                format!("{r} is not a usable ratio; give a positive number such as 1.0 (non-blocking) or 3.0 (3:1)"),
            )
            .into()),
            SpineCount::Oversubscription(r) => {
                let n = (down.bps_f64() / (r * uplink.bps_f64()) - 1e-9).ceil().max(1.0);
                if n > 65_536.0 {
                    return Err(FieldError::new(
                        format!("{field}.oversubscription"),
                        format!("ratio {r} needs {n} spines; use a larger ratio or faster uplinks"),
                    )
                    .into());
                }
                Ok(n as u32)
            }
        }
    }
}

/// Parameters of a two-tier leaf-spine Clos. Every leaf has one uplink to every spine.
/// Oversubscription = `hosts_per_leaf * nic / (spines * uplink)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpineLeafParams {
    /// Host NICs under one leaf.
    pub hosts_per_leaf: u32,
    /// Number of leaves; `None` builds as many as the hosts need.
    pub leaves: Option<u32>,
    /// Spines, as a count or from an oversubscription ratio.
    pub spines: SpineCount,
    /// Host NIC <-> leaf.
    pub nic: LinkParams,
    /// Leaf <-> spine, per link.
    pub uplink: LinkParams,
}

/// A leaf-spine Clos holding `num_hosts` GPUs. Routing: [`SpineLeafRule`].
///
/// # Errors
/// `TopoError::Invalid` for zero sizes or bandwidths, too few leaves, a bad oversubscription, or
/// the scale-up errors of [`hosts_with_scale_up`].
pub fn spine_leaf(num_hosts: u32, p: &SpineLeafParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    let hpl = p.hosts_per_leaf;
    if hpl == 0 {
        return Err(FieldError::new("topology.hosts_per_leaf", "must be at least 1, e.g. 32").into());
    }
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    check_rate("topology.uplink", p.uplink)?;
    let need = num_hosts.div_ceil(hpl);
    let leaves = p.leaves.unwrap_or(need);
    if leaves < need.max(1) || leaves > MAX_HOSTS {
        return Err(FieldError::new(
            "topology.leaves",
            format!("{leaves} leaves of {hpl} hosts cannot hold {num_hosts} GPUs; use at least {need} (or leave it out)"),
        )
        .into());
    }
    let down = Bandwidth::from_bps(p.nic.bandwidth.bps().saturating_mul(u64::from(hpl)));
    let spines = p.spines.resolve("topology", down, p.uplink.bandwidth)?;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let leaf0 = b.add_nodes(NodeKind::Switch { tier: 1 }, leaves).0;
    let spine0 = b.add_nodes(NodeKind::Switch { tier: 2 }, spines).0;
    b.reserve_links(2 * num_hosts as usize + 2 * leaves as usize * spines as usize);
    for host in 0..num_hosts {
        b.add_cable(NodeId(host), NodeId(leaf0 + host / hpl), p.nic, LinkKind::HostNic);
    }
    for l in 0..leaves {
        for s in 0..spines {
            b.add_cable(NodeId(leaf0 + l), NodeId(spine0 + s), p.uplink, LinkKind::Fabric);
        }
    }
    let rule = SpineLeafRule {
        hosts_per_leaf: hpl,
        hosts: num_hosts,
        leaves,
        spines,
        leaf0,
        spine0,
    };
    b.build(
        format!("spine-leaf-{leaves}x{spines}-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::SpineLeaf(rule),
        ecmp_seed,
    )
}

/// Parameters of a rail-optimized fabric (NVIDIA DGX SuperPOD, Alibaba HPN, Spectrum-X): the NIC
/// of local rank `r` connects to the rail-`r` leaf of its segment; leaves connect to every spine
/// of their plane. Rails = `gpus_per_server`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RailFatTreeParams {
    /// Servers under one set of rail leaves (each leaf has this many downlinks per plane).
    pub servers_per_segment: u32,
    /// Spines per plane.
    pub spines: SpineCount,
    /// NIC bandwidth per GPU (all planes together) and the host <-> leaf latency.
    pub nic: LinkParams,
    /// Leaf <-> spine, per link.
    pub uplink: LinkParams,
    /// Two independent planes, each NIC with one port into each.
    pub dual_plane: bool,
    /// Bandwidth of one NIC port with `dual_plane`; `None` means half the NIC bandwidth.
    pub plane_bandwidth: Option<Bandwidth>,
}

/// The checks both rail-optimized builders share; returns `servers_per_segment`.
fn check_rail_params(num_hosts: u32, p: &RailFatTreeParams) -> Result<u32, TopoError> {
    let sps = p.servers_per_segment;
    if sps == 0 {
        return Err(FieldError::new("topology.servers_per_segment", "must be at least 1, e.g. 32").into());
    }
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    check_rate("topology.uplink", p.uplink)?;
    Ok(sps)
}

/// A rail-optimized two-tier fabric holding `num_hosts` GPUs; segments are derived from the GPU
/// count (the last one may be partly filled). Routing: [`RailRule`]; the host picks the plane by
/// flow hash.
///
/// # Errors
/// `TopoError::Invalid` for zero sizes or bandwidths, a bad oversubscription, or the scale-up
/// errors of [`hosts_with_scale_up`] (GPUs not a multiple of `gpus_per_server`).
pub fn rail_fat_tree(num_hosts: u32, p: &RailFatTreeParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    let sps = check_rail_params(num_hosts, p)?;
    let planes = if p.dual_plane { 2 } else { 1 };
    let port_bw = match (p.dual_plane, p.plane_bandwidth) {
        (true, Some(bw)) => bw,
        (true, None) => Bandwidth::from_bps(p.nic.bandwidth.bps() / 2),
        (false, _) => p.nic.bandwidth,
    };
    if port_bw.is_zero() {
        return Err(FieldError::new("topology.plane_bandwidth", "must be positive, e.g. \"200Gbps\"").into());
    }
    let port = LinkParams::new(port_bw, p.nic.latency);
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let g = scale_up.gpus_per_server;
    let servers = num_hosts / g;
    let segments = servers.div_ceil(sps);
    let down = Bandwidth::from_bps(port_bw.bps().saturating_mul(u64::from(sps)));
    let spines = p.spines.resolve("topology", down, p.uplink.bandwidth)?;
    let leaves_per_plane = segments * g;
    if u64::from(leaves_per_plane) * u64::from(spines) * u64::from(planes) > u64::from(MAX_HOSTS) * 4 {
        return Err(FieldError::new(
            "topology.spines",
            format!("{spines} spines per plane make too many links; use fewer"),
        )
        .into());
    }
    let leaf0 = b.add_nodes(NodeKind::Switch { tier: 1 }, planes * leaves_per_plane).0;
    let spine0 = b.add_nodes(NodeKind::Switch { tier: 2 }, planes * spines).0;
    b.reserve_links(2 * (num_hosts * planes) as usize + 2 * (planes * leaves_per_plane) as usize * spines as usize);
    // Host ports in plane order; leaf downlinks in server order (hosts are visited in id order).
    for host in 0..num_hosts {
        let (server, rail) = (host / g, host % g);
        for q in 0..planes {
            let leaf = leaf0 + (q * segments + server / sps) * g + rail;
            b.add_cable(NodeId(host), NodeId(leaf), port, LinkKind::HostNic);
        }
    }
    for q in 0..planes {
        for l in 0..leaves_per_plane {
            for s in 0..spines {
                b.add_cable(
                    NodeId(leaf0 + q * leaves_per_plane + l),
                    NodeId(spine0 + q * spines + s),
                    p.uplink,
                    LinkKind::Fabric,
                );
            }
        }
    }
    let rule = RailRule {
        rails: g,
        servers_per_segment: sps,
        servers,
        segments,
        planes,
        spines_per_plane: spines,
        leaf0,
        spine0,
        div: RailRule::divisors(g, sps, segments, spines),
    };
    let name = format!("rail-fat-tree-{segments}seg-{planes}plane-{num_hosts}");
    b.build(name, num_hosts, scale_up, Routing::RailFatTree(rule), ecmp_seed)
}

/// A rail-optimized fabric with dual-ToR (Alibaba HPN's dual-ToR in one plane): each rail of a
/// segment has two leaves, each GPU NIC two ports of half `nic`'s bandwidth, one on each, and
/// every leaf one uplink to every spine; a failed leaf leaves every GPU reachable. The spines
/// come from `spines` as in [`rail_fat_tree`], a leaf's downlinks being its half-rate ports. A
/// rail-optimized fabric is the one-pod three-tier Clos (same nodes, cables and routes: tested),
/// so this builds [`crate::three_tier::three_tier`] with one pod and `dual_tor`. Routing:
/// [`crate::three_tier::ThreeTierRule`]. `dual_plane` is not read: a dual-plane fabric already has
/// each NIC's two ports on two leaves, one per plane ([`rail_fat_tree`]).
///
/// # Errors
/// As [`rail_fat_tree`].
pub fn rail_fat_tree_dual_tor(num_hosts: u32, p: &RailFatTreeParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    let sps = check_rail_params(num_hosts, p)?;
    let port = Bandwidth::from_bps(p.nic.bandwidth.bps() / 2);
    if port.is_zero() {
        return Err(FieldError::new("topology.nic", "bandwidth too small to split over two ports").into());
    }
    let down = Bandwidth::from_bps(port.bps().saturating_mul(u64::from(sps)));
    let spines = p.spines.resolve("topology", down, p.uplink.bandwidth)?;
    let servers = num_hosts / scale_up.gpus_per_server.max(1);
    let segments = servers.div_ceil(sps).max(1);
    let tt = crate::three_tier::ThreeTierParams {
        servers_per_segment: sps,
        segments_per_pod: segments,
        spines,
        core_uplinks: 1,
        nic: p.nic,
        fabric: p.uplink,
        dual_tor: true,
    };
    let mut t = crate::three_tier::three_tier(num_hosts, &tt, scale_up, ecmp_seed)?;
    t.name = format!("rail-fat-tree-{segments}seg-dualtor-{num_hosts}");
    Ok(t)
}
#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::{Bandwidth, SimTime};

    fn nic() -> LinkParams {
        LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500))
    }

    #[test]
    fn flat_routes_through_the_switch_or_nvlink() {
        let t = flat(16, nic(), ScaleUp::dgx_h100(), 1).unwrap();
        let mut p = Vec::new();
        t.route(NodeId(0), NodeId(9), 7, &mut p).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(t.link(p[0]).kind, LinkKind::HostNic);
        assert_eq!(t.link(p[1]).dst, NodeId(9));
        p.clear();
        t.route(NodeId(0), NodeId(5), 7, &mut p).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|l| t.link(*l).kind == LinkKind::NvLink));
        assert_eq!(t.link(p[1]).dst, NodeId(5));
    }

    #[test]
    fn bad_sizes_are_field_errors() {
        let e = flat(12, nic(), ScaleUp::dgx_h100(), 1).unwrap_err();
        assert!(e.to_string().contains("gpus"), "{e}");
        let e = flat(8, LinkParams::new(Bandwidth::ZERO, SimTime::ZERO), ScaleUp::none(), 1).unwrap_err();
        assert!(e.to_string().contains("nic"), "{e}");
    }

    fn fabric() -> LinkParams {
        LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(600))
    }

    fn ft(k: u32, hosts: u32, su: ScaleUp) -> Topology {
        fat_tree(
            hosts,
            &FatTreeParams {
                k,
                host_link: nic(),
                edge_agg: fabric(),
                agg_core: fabric(),
            },
            su,
            42,
        )
        .unwrap()
    }

    fn hops(t: &Topology, s: u32, d: u32, hash: u64) -> Vec<LinkId> {
        let mut p = Vec::new();
        t.route(NodeId(s), NodeId(d), hash, &mut p).unwrap();
        assert_eq!(t.link(*p.last().unwrap()).dst, NodeId(d));
        for w in p.windows(2) {
            assert_eq!(t.link(w[0]).dst, t.link(w[1]).src);
        }
        p
    }

    fn tier_count(t: &Topology, tier: u8) -> usize {
        t.nodes().iter().filter(|k| **k == NodeKind::Switch { tier }).count()
    }

    use llmsim_core::LinkId;

    #[test]
    fn fat_tree_counts_and_path_lengths() {
        let t = ft(4, 16, ScaleUp::none());
        assert_eq!((tier_count(&t, 1), tier_count(&t, 2), tier_count(&t, 3)), (8, 8, 4));
        assert_eq!(t.num_links(), 2 * (16 + 16 + 16));
        for s in 0..16 {
            for d in 0..16 {
                if s == d {
                    continue;
                }
                let want = if s / 2 == d / 2 {
                    2
                } else if s / 4 == d / 4 {
                    4
                } else {
                    6
                };
                for hash in 0..4 {
                    assert_eq!(hops(&t, s, d, hash).len(), want, "{s}->{d}");
                }
            }
        }
        let t = ft(8, 128, ScaleUp::none());
        assert_eq!((tier_count(&t, 1), tier_count(&t, 2), tier_count(&t, 3)), (32, 32, 16));
    }

    #[test]
    fn fat_tree_with_nvswitch_and_partial_pods() {
        let t = ft(8, 40, ScaleUp::dgx_h100());
        // 40 hosts over pods of 16: 3 pods built.
        assert_eq!(tier_count(&t, 1), 12);
        assert_eq!(t.nodes().iter().filter(|k| **k == NodeKind::NvSwitch).count(), 5);
        for s in 0..40 {
            for d in 0..40 {
                if s != d {
                    let p = hops(&t, s, d, s as u64 * 7 + d as u64);
                    if s / 8 == d / 8 {
                        assert!(p.iter().all(|l| t.link(*l).kind == LinkKind::NvLink));
                    }
                }
            }
        }
    }

    #[test]
    fn ecmp_uses_every_uplink_and_is_deterministic() {
        let t = ft(8, 128, ScaleUp::none());
        let mut cores = std::collections::BTreeSet::new();
        for hash in 0..2000u64 {
            let p = hops(&t, 0, 127, hash);
            cores.insert(t.link(p[2]).dst);
            assert_eq!(p, hops(&t, 0, 127, hash));
        }
        assert_eq!(cores.len(), 16, "every core carries some of 2000 flows");
        let t2 = ft(8, 128, ScaleUp::none());
        let t3 = fat_tree(
            128,
            &FatTreeParams {
                k: 8,
                host_link: nic(),
                edge_agg: fabric(),
                agg_core: fabric(),
            },
            ScaleUp::none(),
            43,
        )
        .unwrap();
        let same = (0..64).all(|h| hops(&t, 0, 127, h) == hops(&t2, 0, 127, h));
        let differ = (0..64).any(|h| hops(&t, 0, 127, h) != hops(&t3, 0, 127, h));
        assert!(same && differ);
    }

    #[test]
    fn fat_tree_rejects_bad_k() {
        let p = |k| FatTreeParams {
            k,
            host_link: nic(),
            edge_agg: fabric(),
            agg_core: fabric(),
        };
        let e = fat_tree(16, &p(5), ScaleUp::none(), 0).unwrap_err();
        assert!(e.to_string().contains("topology.k"), "{e}");
        let e = fat_tree(1024, &p(8), ScaleUp::none(), 0).unwrap_err();
        assert!(e.to_string().contains("use k >= 16"), "{e}");
    }

    fn sl(hosts: u32, hpl: u32, spines: SpineCount, su: ScaleUp) -> Result<Topology, TopoError> {
        spine_leaf(
            hosts,
            &SpineLeafParams {
                hosts_per_leaf: hpl,
                leaves: None,
                spines,
                nic: nic(),
                uplink: fabric(),
            },
            su,
            3,
        )
    }

    #[test]
    fn spine_leaf_oversubscription_and_paths() {
        let t = sl(64, 16, SpineCount::Oversubscription(2.0), ScaleUp::none()).unwrap();
        assert_eq!((tier_count(&t, 1), tier_count(&t, 2)), (4, 8));
        assert_eq!(hops(&t, 0, 15, 1).len(), 2);
        assert_eq!(hops(&t, 0, 16, 1).len(), 4);
        let s = t.describe();
        assert!((s.oversubscription - 2.0).abs() < 1e-9, "{s}");
        let t = sl(60, 16, SpineCount::Count(3), ScaleUp::none()).unwrap();
        assert_eq!(tier_count(&t, 2), 3);
        for d in 1..60 {
            hops(&t, 59, d - 1, d as u64);
        }
        assert!(
            sl(64, 16, SpineCount::Oversubscription(0.0), ScaleUp::none())
                .unwrap_err()
                .to_string()
                .contains("oversubscription")
        );
        assert!(
            sl(64, 0, SpineCount::Count(2), ScaleUp::none())
                .unwrap_err()
                .to_string()
                .contains("hosts_per_leaf")
        );
    }

    fn rail(hosts: u32, sps: u32, dual: bool) -> Topology {
        let p = RailFatTreeParams {
            servers_per_segment: sps,
            spines: SpineCount::Oversubscription(1.0),
            nic: nic(),
            uplink: fabric(),
            dual_plane: dual,
            plane_bandwidth: None,
        };
        rail_fat_tree(hosts, &p, ScaleUp::dgx_h100(), 5).unwrap()
    }

    #[test]
    fn rail_aligned_traffic_stays_under_the_rail_leaf() {
        let t = rail(128, 4, false); // 16 servers, 4 segments, 32 leaves
        assert_eq!(tier_count(&t, 1), 32);
        assert_eq!(tier_count(&t, 2), 4);
        // Same rail, same segment: host -> leaf -> host.
        let p = hops(&t, 3, 8 + 3, 0);
        assert_eq!(p.len(), 2);
        assert!(matches!(t.node(t.link(p[0]).dst), NodeKind::Switch { tier: 1 }));
        // Cross-rail: through a spine.
        let p = hops(&t, 3, 8 + 4, 0);
        assert_eq!(p.len(), 4);
        assert_eq!(t.node(t.link(p[1]).dst), NodeKind::Switch { tier: 2 });
        // Same rail, other segment: through a spine.
        assert_eq!(hops(&t, 3, 4 * 8 * 2 + 3, 0).len(), 4);
        for s in (0..128).step_by(3) {
            for d in 0..128 {
                if s != d {
                    hops(&t, s, d, (s * d) as u64);
                }
            }
        }
    }

    #[test]
    fn dual_plane_uses_both_planes() {
        let t = rail(64, 4, true);
        assert_eq!(tier_count(&t, 1), 2 * 2 * 8);
        assert_eq!(t.ports(NodeId(0)).len(), 3);
        assert_eq!(t.link(t.ports(NodeId(0))[1]).bandwidth, Bandwidth::from_gbps(200));
        let mut planes = std::collections::BTreeSet::new();
        for hash in 0..64 {
            let p = hops(&t, 0, 40, hash);
            planes.insert(t.link(p[0]).dst);
        }
        assert_eq!(planes.len(), 2);
        let s = t.describe();
        assert_eq!(s.bisection_bandwidth, Bandwidth::from_gbps(32 * 400), "{s}");
    }

    #[test]
    fn analytic_bisection_matches_max_flow() {
        let cases = [
            ft(4, 16, ScaleUp::none()),
            ft(6, 54, ScaleUp::none()),
            fat_tree(
                16,
                &FatTreeParams {
                    k: 4,
                    host_link: nic(),
                    edge_agg: fabric(),
                    agg_core: LinkParams::new(Bandwidth::from_gbps(100), SimTime::ZERO),
                },
                ScaleUp::none(),
                1,
            )
            .unwrap(),
            sl(64, 16, SpineCount::Oversubscription(2.0), ScaleUp::none()).unwrap(),
            sl(64, 16, SpineCount::Count(3), ScaleUp::none()).unwrap(),
            rail(128, 4, false),
            rail(128, 4, true),
            rail(64, 8, false),
            flat(8, nic(), ScaleUp::none(), 1).unwrap(),
        ];
        for t in &cases {
            let s = t.describe();
            assert_eq!(s.bisection_bandwidth, t.bisection_by_max_flow(), "{}\n{s}", t.name);
        }
    }

    #[test]
    fn describe_reads_well() {
        let t = ft(4, 16, ScaleUp::none());
        let s = t.describe();
        assert_eq!(s.switches_per_tier, vec![8, 8, 4]);
        assert_eq!(s.diameter_hops, 6);
        assert_eq!(s.sample_route.len(), 7);
        assert!(s.sample_route[0].starts_with("0(host) -400Gbps/"), "{:?}", s.sample_route);
        assert_eq!(s.bisection_bandwidth, Bandwidth::from_gbps(8 * 400));
        let text = s.to_string();
        assert!(text.contains("bisection") && text.contains("sample route"), "{text}");
    }
}
