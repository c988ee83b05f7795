//! Rail-only network (Wang et al., "Rail-only: A Low-Cost High-Performance Network for Training
//! LLMs with Trillion Parameters", Meta 2023): no spine shared between rails.
//!
//! Rail `r` (local rank `r` of every server) has its own network: leaves of `servers_per_leaf`
//! servers and, when a rail needs more than one leaf, its own spines. Nothing joins two rails
//! except the servers' NVSwitches, so cross-rail traffic first crosses NVLink to the GPU of its
//! own server on the destination's rail (the PXN relay), then rides that rail.
//!
//! Node layout: hosts, NVSwitches, leaves (rail-major: `leaf0 + r*leaves_per_rail + i`), spines
//! (`spine0 + r*spines_per_rail + s`). Ports: leaf = its servers' rail-`r` GPUs in server order,
//! then the spines of its rail; spine = the leaves of its rail.
//!
//! Rule: a host sends to another server's GPU over its NIC when both are on one rail, else over
//! NVLink to its server's GPU on the destination rail (which then sends over its NIC); a rail-`r`
//! switch routes toward `host(server_of(dst), r)` (up-down, ECMP up), which is `dst` or its relay.

use std::sync::Arc;

use llmsim_core::{Bandwidth, FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, RoutingRule};
use crate::fastdiv::Divisor;
use crate::generators::{SpineCount, check_hosts, check_rate, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec, spine_count};
use crate::routing::Routing;

/// `topology: { kind: rail-only, servers_per_leaf: 32 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RailOnlySpec {
    /// Servers under one rail leaf. Default 32 (a 64-port leaf, half down).
    pub servers_per_leaf: Option<u32>,
    /// Spines per rail (used when a rail has more than one leaf). Give this or
    /// `oversubscription`; default non-blocking.
    pub spines: Option<u32>,
    /// Leaf downlink to uplink bandwidth ratio, e.g. 2.0 for 2:1 (instead of `spines`).
    pub oversubscription: Option<f64>,
    /// Host NIC <-> rail leaf. Default 400Gbps / 500ns.
    pub nic: LinkSpec,
    /// Rail leaf <-> rail spine. Default 400Gbps / 600ns.
    pub fabric: LinkSpec,
}

impl FamilySpec for RailOnlySpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        let p = RailOnlyParams {
            servers_per_leaf: self.servers_per_leaf.unwrap_or(32),
            spines: spine_count(self.spines, self.oversubscription)?,
            nic: self.nic.resolve(DEFAULT_NIC),
            fabric: self.fabric.resolve(DEFAULT_FABRIC),
        };
        rail_only(gpus, &p, scale_up, seed)
    }
}

/// A resolved rail-only network.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RailOnlyParams {
    /// Servers whose rail-`r` GPUs share one leaf.
    pub servers_per_leaf: u32,
    /// Spines per rail, as a count or from an oversubscription ratio.
    pub spines: SpineCount,
    /// Host NIC <-> leaf.
    pub nic: LinkParams,
    /// Leaf <-> spine, per link.
    pub fabric: LinkParams,
}

/// Builds a rail-only network holding `num_hosts` GPUs (rails = `gpus_per_server`).
/// Routing: [`RailOnlyRule`].
///
/// # Errors
/// `TopoError::Invalid` for a zero `servers_per_leaf` or bandwidth, a bad oversubscription, or
/// the scale-up errors of [`hosts_with_scale_up`].
pub fn rail_only(num_hosts: u32, p: &RailOnlyParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    let spl = p.servers_per_leaf;
    if spl == 0 {
        return Err(FieldError::new("topology.servers_per_leaf", "must be at least 1, e.g. 32").into());
    }
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    check_rate("topology.fabric", p.fabric)?;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let g = scale_up.gpus_per_server;
    let servers = num_hosts / g;
    let leaves = servers.div_ceil(spl);
    let spines = if leaves > 1 {
        let down = Bandwidth::from_bps(p.nic.bandwidth.bps().saturating_mul(u64::from(spl)));
        p.spines.resolve("topology", down, p.fabric.bandwidth)?
    } else {
        0
    };
    if u64::from(leaves) * u64::from(spines) * u64::from(g) > u64::from(crate::generators::MAX_HOSTS) * 4 {
        return Err(FieldError::new(
            "topology.spines",
            format!("{spines} spines per rail make too many links; use fewer"),
        )
        .into());
    }
    let leaf0 = b.add_nodes(NodeKind::Switch { tier: 1 }, g * leaves).0;
    let spine0 = b.add_nodes(NodeKind::Switch { tier: 2 }, g * spines).0;
    b.reserve_links(2 * num_hosts as usize + 2 * (g * leaves) as usize * spines as usize);
    for host in 0..num_hosts {
        let (server, rail) = (host / g, host % g);
        b.add_link(NodeId(host), NodeId(leaf0 + rail * leaves + server / spl), p.nic, LinkKind::HostNic);
    }
    for rail in 0..g {
        for i in 0..leaves {
            let leaf = NodeId(leaf0 + rail * leaves + i);
            for server in i * spl..((i + 1) * spl).min(servers) {
                b.add_link(leaf, NodeId(server * g + rail), p.nic, LinkKind::HostNic);
            }
            for s in 0..spines {
                b.add_link(leaf, NodeId(spine0 + rail * spines + s), p.fabric, LinkKind::Fabric);
            }
        }
    }
    for rail in 0..g {
        for s in 0..spines {
            for i in 0..leaves {
                b.add_link(
                    NodeId(spine0 + rail * spines + s),
                    NodeId(leaf0 + rail * leaves + i),
                    p.fabric,
                    LinkKind::Fabric,
                );
            }
        }
    }
    let rule = RailOnlyRule {
        rails: g,
        servers_per_leaf: spl,
        servers,
        leaves_per_rail: leaves,
        spines_per_rail: spines,
        leaf0,
        spine0,
        div: [g, spl, leaves, spines].map(Divisor::new),
    };
    b.build(
        format!("rail-only-{g}r{leaves}l{spines}s-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

/// Rail-only routing; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailOnlyRule {
    /// Rails: GPUs per server.
    pub rails: u32,
    /// Servers whose rail-`r` GPUs share one leaf.
    pub servers_per_leaf: u32,
    /// Servers in the network.
    pub servers: u32,
    /// Leaves in each rail.
    pub leaves_per_rail: u32,
    /// Spines in each rail (0 when a rail has one leaf).
    pub spines_per_rail: u32,
    leaf0: u32,
    spine0: u32,
    /// `rails`, `servers_per_leaf`, `leaves_per_rail`, `spines_per_rail` as [`Divisor`]s.
    div: [Divisor; 4],
}

impl RoutingRule for RailOnlyRule {
    fn name(&self) -> &'static str {
        "rail-only (NVLink to the rail, then up-down)"
    }

    /// Every hop's far end is computed from the addresses (module doc's layout), so the next
    /// hop does not wait on this hop's load; sizes divide as [`Divisor`]s.
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        let g = self.rails;
        let [rails, spl_div, leaves_div, spines_div] = self.div;
        let spl = self.servers_per_leaf;
        let (d_server, d_rail) = rails.div_rem(dst.0);
        let a = at.0;
        let hosts = self.servers * g;
        // Link ids from the generator's order (NVLink links, each host's NIC link, each leaf's
        // links in port order rail by rail, then each spine's), so a route reads no table; a
        // debug assertion checks each hop against the port table.
        let nv = if g > 1 { 2 * hosts } else { 0 };
        let leaf_links0 = nv + hosts;
        let per_rail = self.servers + self.leaves_per_rail * self.spines_per_rail;
        let spine_links0 = leaf_links0 + g * per_rail;
        let (port, to, link) = if a < hosts {
            let (server, rail) = rails.div_rem(a);
            if g == 1 {
                (0, self.leaf0 + spl_div.div(server), a)
            } else if rail == d_rail && server != d_server {
                // The NIC (port 1) to its rail leaf.
                (1, self.leaf0 + rail * self.leaves_per_rail + spl_div.div(server), nv + a)
            } else {
                // Same server, or another rail: NVLink (port 0) to its NVSwitch.
                (0, hosts + server, a)
            }
        } else if a < self.leaf0 {
            // The NVSwitch hands the packet to its GPU on the destination's rail.
            let to = (a - hosts) * g + d_rail;
            (d_rail, to, hosts + to)
        } else if a < self.spine0 {
            let (rail, i) = leaves_div.div_rem(a - self.leaf0);
            let first = i * spl;
            let link0 = leaf_links0 + rail * per_rail + i * (spl + self.spines_per_rail);
            if spl_div.div(d_server) == i {
                (d_server - first, d_server * g + rail, link0 + d_server - first)
            } else if self.spines_per_rail == 0 {
                return Err(TopoError::Unreachable {
                    src: at,
                    dst,
                    reason: "rail leaf without spines".into(),
                });
            } else {
                let j = t.ecmp_pick(at, flow_hash, self.spines_per_rail as usize) as u32;
                let port = self.servers.saturating_sub(first).min(spl) + j;
                (port, self.spine0 + rail * self.spines_per_rail + j, link0 + port)
            }
        } else {
            let sp = a - self.spine0;
            let rail = spines_div.div(sp);
            let leaf = spl_div.div(d_server);
            (
                leaf,
                self.leaf0 + rail * self.leaves_per_rail + leaf,
                spine_links0 + sp * self.leaves_per_rail + leaf,
            )
        };
        let hop = Hop {
            link: LinkId(link),
            to: NodeId(to),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(port as usize), "rail-only port layout at {at}");
        Ok(hop)
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        if t.num_hosts() < 2 {
            return Some(0);
        }
        if self.servers < 2 {
            return Some(2);
        }
        let rail = if self.leaves_per_rail > 1 { 4 } else { 2 };
        Some(rail + if self.rails > 1 { 2 } else { 0 })
    }
}
