//! Three-tier Clos with pods: rail-optimized pods joined by a core layer, the shape of the
//! 10k-100k-GPU fabrics (Alibaba HPN's pods of 15k GPUs behind a core tier, a DGX SuperPOD of
//! several scalable-unit groups behind core switches, Meta's 24k-GPU RoCE clusters' AI zones).
//!
//! Structure, bottom up:
//! - a **segment** is `servers_per_segment` servers; NIC `r` of every server of a segment goes to
//!   the segment's rail-`r` **leaf** (one leaf per rail per segment, as in `rail-fat-tree`);
//! - a **pod** is `segments_per_pod` segments; every leaf of a pod has one uplink to each of the
//!   pod's `spines` **pod spines** (aggregation switches);
//! - pod spine `j` of every pod has `U` uplinks, one to each **core** switch of core group `j`
//!   (`spines` groups of `U` cores, as in a k-ary fat-tree), with `U` set by
//!   `core_oversubscription`. With one pod there is no core layer.
//!
//! With `dual_tor: true` (Alibaba HPN's dual-ToR) each rail of a segment has two leaves, and every
//! NIC has two ports of half its bandwidth, one to each: a leaf failure leaves every GPU reachable.
//!
//! Addresses: host `h` is GPU `h % g` (its rail) of server `h / g`; server `s` is in segment
//! `s / servers_per_segment`; segment `e` is in pod `e / segments_per_pod`.
//!
//! Node layout: hosts, NVSwitches, leaves (`leaf0 + (segment * g + rail) * sides + side`, `sides`
//! 2 with dual-ToR, else 1), pod spines (`spine0 + pod * spines + j`), cores (`core0 + j * U + u`).
//!
//! Ports: leaf = its servers' rail NICs in server order, then pod spines `0..spines`; pod spine =
//! the leaves of its pod in `(segment, rail, side)` order, then its `U` cores; core = pods
//! `0..pods`. A host's NIC ports are one per side, in side order (the flow hash picks one).
//!
//! Rule (up-down, no tables): a leaf delivers to its own hosts, else goes up to a pod spine picked
//! by the flow hash; a pod spine delivers to the destination's leaf inside its pod, else goes up
//! to a core of its group picked by the flow hash (with dual-ToR, down to either of the two
//! leaves, by the flow hash); a core goes down to the destination's pod (to that pod's spine `j`,
//! the only one cabled to it). Routes are minimal: 2 links inside a
//! leaf, 4 inside a pod (also between rails of one segment: cross-rail traffic climbs to a spine,
//! as on every rail-optimized fabric; NCCL's PXN moves it to NVLink first), 6 across pods.

use std::sync::Arc;

use llmsim_core::{FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, RoutingRule};
use crate::fastdiv::Divisor;
use crate::generators::{check_hosts, check_rate, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec, spine_count};
use crate::routing::{PortChoice, Routing, host_hop_computed, nvswitch_hop_computed, port_range_hops, take_choice};

/// `topology: { kind: three-tier, servers_per_segment: 32, segments_per_pod: 8,
/// core_oversubscription: 2.0 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ThreeTierSpec {
    /// Servers whose rail-`r` NICs share one leaf. Default 32 (a DGX SuperPOD scalable unit).
    pub servers_per_segment: Option<u32>,
    /// Segments per pod. Default 8: a pod of 256 servers (2,048 GPUs at 8 per server), whose
    /// spines then have 64 leaf ports and, non-blocking, 64 core ports (a 128-port switch).
    pub segments_per_pod: Option<u32>,
    /// Pod spines per pod (each leaf has one uplink to each). Give this or `oversubscription`,
    /// not both; default non-blocking.
    pub spines: Option<u32>,
    /// Leaf downlink / uplink capacity, e.g. 2.0 for 2:1; sets `spines`. Default 1.0.
    pub oversubscription: Option<f64>,
    /// Pod-spine downlink / core-uplink capacity, e.g. 2.0 for 2:1 between pods (HPN-style pods
    /// are oversubscribed toward the core). Default 1.0 (non-blocking).
    pub core_oversubscription: Option<f64>,
    /// GPU NIC <-> leaf. Default 400Gbps / 500ns.
    pub nic: LinkSpec,
    /// Leaf <-> pod spine and pod spine <-> core. Default 400Gbps / 600ns.
    pub fabric: LinkSpec,
    /// Two leaves per rail and segment, each NIC's two ports (half the NIC bandwidth each) on
    /// both (Alibaba HPN's dual-ToR). Default false.
    pub dual_tor: bool,
}

impl FamilySpec for ThreeTierSpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        check_hosts(gpus)?;
        let positive = |field: &str, v: Option<u32>, default: u32| -> Result<u32, TopoError> {
            match v {
                Some(0) => Err(FieldError::new(field, "must be at least 1, e.g. 8").into()),
                Some(n) => Ok(n),
                None => Ok(default),
            }
        };
        let sps = positive("topology.servers_per_segment", self.servers_per_segment, 32)?;
        let spp = positive("topology.segments_per_pod", self.segments_per_pod, 8)?;
        let nic = self.nic.resolve(DEFAULT_NIC);
        let fabric = self.fabric.resolve(DEFAULT_FABRIC);
        check_rate("topology.nic", nic)?;
        check_rate("topology.fabric", fabric)?;
        let g = scale_up.gpus_per_server.max(1);
        let sides: u32 = if self.dual_tor { 2 } else { 1 };
        let port = llmsim_core::Bandwidth::from_bps(nic.bandwidth.bps() / u64::from(sides));
        let down = llmsim_core::Bandwidth::from_bps(port.bps().saturating_mul(u64::from(sps)));
        let spines = spine_count(self.spines, self.oversubscription)?.resolve("topology", down, fabric.bandwidth)?;
        let ratio = self.core_oversubscription.unwrap_or(1.0);
        if !(ratio.is_finite() && ratio >= 1.0 / 64.0) {
            return Err(FieldError::new(
                "topology.core_oversubscription",
                format!("{ratio} is not a usable ratio; give a positive number such as 1.0 (non-blocking) or 2.0 (2:1)"),
            )
            .into());
        }
        // A pod spine's downlinks are its pod's leaves; its core uplinks carry that over `ratio`.
        let leaves_per_pod = u64::from(spp) * u64::from(g) * u64::from(sides);
        let core_up = ((leaves_per_pod as f64) / ratio - 1e-9).ceil().max(1.0);
        if core_up > 65_536.0 {
            return Err(FieldError::new(
                "topology.core_oversubscription",
                format!("ratio {ratio} needs {core_up} core uplinks per pod spine; use a larger ratio"),
            )
            .into());
        }
        let p = ThreeTierParams {
            servers_per_segment: sps,
            segments_per_pod: spp,
            spines,
            core_uplinks: core_up as u32,
            nic,
            fabric,
            dual_tor: self.dual_tor,
        };
        three_tier(gpus, &p, scale_up, seed)
    }
}

/// A resolved three-tier Clos.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreeTierParams {
    /// Servers whose rail-`r` NICs share one leaf.
    pub servers_per_segment: u32,
    /// Segments per pod.
    pub segments_per_pod: u32,
    /// Pod spines per pod.
    pub spines: u32,
    /// Core uplinks per pod spine (cores per core group).
    pub core_uplinks: u32,
    /// Per GPU, both ports together with `dual_tor`.
    pub nic: LinkParams,
    /// Leaf <-> pod spine and pod spine <-> core, per link.
    pub fabric: LinkParams,
    /// Two leaves per rail and segment, a NIC port (half of `nic`) on each.
    pub dual_tor: bool,
}

/// Builds a three-tier Clos holding `num_hosts` GPUs; the last segment and pod may be partial.
/// Routing: [`ThreeTierRule`].
///
/// # Errors
/// `TopoError::Invalid` for zero sizes or bandwidths, a fabric with more links than llmsim builds,
/// or the scale-up errors of [`hosts_with_scale_up`].
pub fn three_tier(num_hosts: u32, p: &ThreeTierParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    check_rate("topology.fabric", p.fabric)?;
    let (sps, spp, n, u) = (p.servers_per_segment, p.segments_per_pod, p.spines, p.core_uplinks);
    if sps == 0 || spp == 0 || n == 0 || u == 0 {
        return Err(FieldError::new(
            "topology",
            "servers_per_segment, segments_per_pod, spines and core uplinks must be at least 1",
        )
        .into());
    }
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let g = scale_up.gpus_per_server;
    let sides: u32 = if p.dual_tor { 2 } else { 1 };
    let port = LinkParams::new(
        llmsim_core::Bandwidth::from_bps(p.nic.bandwidth.bps() / u64::from(sides)),
        p.nic.latency,
    );
    check_rate("topology.nic", port)?;
    let servers = num_hosts / g;
    let segments = servers.div_ceil(sps);
    let pods = segments.div_ceil(spp);
    let leaves = segments * g * sides;
    let cores = if pods > 1 { n * u } else { 0 };
    // Cables: leaf-spine and spine-core, both directions; u64 so a huge fabric is refused.
    let fabric_links = 2 * u64::from(leaves) * u64::from(n) + 2 * u64::from(pods) * u64::from(cores);
    if fabric_links > 1 << 31 || u64::from(pods) * u64::from(n) > 1 << 24 {
        return Err(FieldError::new(
            "topology.spines",
            format!("{n} spines per pod make {fabric_links} fabric links; use fewer spines or larger segments"),
        )
        .into());
    }
    let leaf0 = b.add_nodes(NodeKind::Switch { tier: 1 }, leaves).0;
    let spine0 = b.add_nodes(NodeKind::Switch { tier: 2 }, pods * n).0;
    let core0 = b.add_nodes(NodeKind::Switch { tier: 3 }, cores).0;
    b.reserve_links(2 * (num_hosts * sides) as usize + fabric_links as usize);
    // Leaf ports: hosts first, in server order (hosts are visited in id order); a host's ports
    // in side order.
    for h in 0..num_hosts {
        let (server, rail) = (h / g, h % g);
        for side in 0..sides {
            let leaf = leaf0 + ((server / sps) * g + rail) * sides + side;
            b.add_cable(NodeId(h), NodeId(leaf), port, LinkKind::HostNic);
        }
    }
    // Then each leaf's spines; a spine receives its pod's leaves in (segment, rail, side) order.
    for l in 0..leaves {
        let pod = l / sides / g / spp;
        for j in 0..n {
            b.add_cable(NodeId(leaf0 + l), NodeId(spine0 + pod * n + j), p.fabric, LinkKind::Fabric);
        }
    }
    // Then each pod spine's cores; a core receives pods in order.
    if pods > 1 {
        for pod in 0..pods {
            for j in 0..n {
                for c in 0..u {
                    b.add_cable(NodeId(spine0 + pod * n + j), NodeId(core0 + j * u + c), p.fabric, LinkKind::Fabric);
                }
            }
        }
    }
    let rule = ThreeTierRule {
        rails: g,
        sides,
        servers_per_segment: sps,
        segments_per_pod: spp,
        servers,
        segments,
        spines: n,
        core_uplinks: u,
        leaf0,
        spine0,
        core0,
        pods,
        div: ThreeTierDivisors {
            rails: Divisor::new(g),
            sides: Divisor::new(sides),
            servers_per_segment: Divisor::new(sps),
            segments_per_pod: Divisor::new(spp),
            spines: Divisor::new(n),
            core_uplinks: Divisor::new(u),
        },
        num_hosts,
        host_links0: if g > 1 { 2 * num_hosts } else { 0 },
    };
    let dual = if p.dual_tor { "-dualtor" } else { "" };
    b.build(
        format!("three-tier-{pods}pod-{segments}seg{dual}-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

fn unreachable(at: NodeId, dst: NodeId, reason: &str) -> TopoError {
    TopoError::Unreachable {
        src: at,
        dst,
        reason: reason.into(),
    }
}

/// Up-down routing on a three-tier Clos; see the module doc for addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreeTierRule {
    /// Rails: GPUs per server.
    pub rails: u32,
    /// Leaves per rail and segment: 2 with dual-ToR, else 1.
    pub sides: u32,
    /// Servers whose rail-`r` NICs share one leaf.
    pub servers_per_segment: u32,
    /// Segments per pod.
    pub segments_per_pod: u32,
    /// Number of servers.
    pub servers: u32,
    /// Number of segments.
    pub segments: u32,
    /// Pod spines per pod.
    pub spines: u32,
    /// Core uplinks per pod spine (cores per core group).
    pub core_uplinks: u32,
    /// Node id of the first leaf.
    pub leaf0: u32,
    /// Node id of the first pod spine.
    pub spine0: u32,
    /// Node id of the first core.
    pub core0: u32,
    /// Number of pods.
    pub pods: u32,
    div: ThreeTierDivisors,
    num_hosts: u32,
    /// Id of the first host NIC link (after the NVLink links).
    host_links0: u32,
}

/// The sizes [`ThreeTierRule`] divides by on every hop, as [`Divisor`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ThreeTierDivisors {
    rails: Divisor,
    sides: Divisor,
    servers_per_segment: Divisor,
    segments_per_pod: Divisor,
    spines: Divisor,
    core_uplinks: Divisor,
}

impl ThreeTierRule {
    /// Servers cabled to segment `seg`'s leaves (the last segment may be partial).
    fn servers_in(&self, seg: u32) -> u32 {
        (self.servers - seg * self.servers_per_segment).min(self.servers_per_segment)
    }

    /// The equal-cost ports at switch `at` (of `tier`) toward host `dst`: `count` ports from
    /// `first`, among which the flow hash picks.
    fn choice(&self, at: NodeId, dst: NodeId, tier: u8) -> Result<(u32, u32), TopoError> {
        let g = self.rails;
        let (d_server, d_rail) = (dst.0 / g, dst.0 % g);
        if d_server >= self.servers {
            return Err(unreachable(at, dst, "destination is not a host of this three-tier fabric"));
        }
        let d_seg = d_server / self.servers_per_segment;
        let d_pod = d_seg / self.segments_per_pod;
        Ok(match tier {
            1 => {
                let l = (at.0 - self.leaf0) / self.sides;
                let (seg, rail) = (l / g, l % g);
                if d_seg == seg && d_rail == rail {
                    (d_server - seg * self.servers_per_segment, 1)
                } else {
                    (self.servers_in(seg), self.spines)
                }
            }
            2 => {
                let pod = (at.0 - self.spine0) / self.spines;
                if d_pod == pod {
                    (((d_seg - pod * self.segments_per_pod) * g + d_rail) * self.sides, self.sides)
                } else if self.pods > 1 {
                    (self.leaves_in(pod), self.core_uplinks)
                } else {
                    return Err(unreachable(at, dst, "one-pod fabric has no core"));
                }
            }
            _ => (d_pod, 1),
        })
    }

    /// Leaves in pod `pod` (the last pod may be partial).
    fn leaves_in(&self, pod: u32) -> u32 {
        (self.segments - pod * self.segments_per_pod).min(self.segments_per_pod) * self.rails * self.sides
    }
}

impl ThreeTierRule {
    /// [`Self::choice`] with where the ports lead, for [`port_range_hop_to`]: `(first, count,
    /// to0, step)`, port `first + i` leading to node `to0 + i * step` (module doc's layout). One
    /// pass of multiply-divisions ([`Divisor`]); [`Self::choice`] is the reference (a debug
    /// assertion compares them).
    #[inline]
    fn choice_to(&self, at: NodeId, dst: NodeId, tier: u8) -> Result<PortChoice, TopoError> {
        let dv = &self.div;
        let g = self.rails;
        let (d_server, d_rail) = dv.rails.div_rem(dst.0);
        if d_server >= self.servers {
            return Err(unreachable(at, dst, "destination is not a host of this three-tier fabric"));
        }
        let (d_seg, d_in_seg) = dv.servers_per_segment.div_rem(d_server);
        let d_pod = dv.segments_per_pod.div(d_seg);
        // Link ids (the generator's cable order, each cable two links): host NIC cables from
        // `host_links0`, host by host and side by side; leaf-spine cables from `leaf_links0`,
        // leaf by leaf and spine by spine; spine-core cables from `core_links0`, spine by spine
        // and core by core. The first link of a cable goes up, the second down.
        let (n, u) = (self.spines, self.core_uplinks);
        let leaf_links0 = self.host_links0 + 2 * self.num_hosts * self.sides;
        let core_links0 = leaf_links0 + 2 * self.segments * g * self.sides * n;
        let out = match tier {
            1 => {
                let lg = at.0 - self.leaf0;
                let (l, side) = dv.sides.div_rem(lg);
                let (seg, rail) = dv.rails.div_rem(l);
                if d_seg == seg && d_rail == rail {
                    let link = self.host_links0 + 2 * (dst.0 * self.sides + side) + 1;
                    (d_in_seg, 1, dst.0, 0, link, 0)
                } else {
                    let first = self.servers_in(seg);
                    let to0 = self.spine0 + dv.segments_per_pod.div(seg) * n;
                    (first, n, to0, 1, leaf_links0 + 2 * lg * n, 2)
                }
            }
            2 => {
                let s = at.0 - self.spine0;
                let (pod, j) = dv.spines.div_rem(s);
                if d_pod == pod {
                    let first = ((d_seg - pod * self.segments_per_pod) * g + d_rail) * self.sides;
                    let leaf = (d_seg * g + d_rail) * self.sides;
                    let link = leaf_links0 + 2 * (leaf * n + j) + 1;
                    (first, self.sides, self.leaf0 + leaf, 1, link, 2 * n)
                } else if self.pods > 1 {
                    (self.leaves_in(pod), u, self.core0 + j * u, 1, core_links0 + 2 * s * u, 2)
                } else {
                    return Err(unreachable(at, dst, "one-pod fabric has no core"));
                }
            }
            _ => {
                let (j, c) = dv.core_uplinks.div_rem(at.0 - self.core0);
                let link = core_links0 + 2 * ((d_pod * n + j) * u + c) + 1;
                (d_pod, 1, self.spine0 + d_pod * n + j, 0, link, 0)
            }
        };
        debug_assert_eq!(self.choice(at, dst, tier).ok(), Some((out.0, out.1)));
        Ok(out)
    }

    /// The leaf NIC port `side` of host `h` leads to.
    #[inline]
    fn leaf_of(&self, h: u32, side: u32) -> u32 {
        let (server, rail) = self.div.rails.div_rem(h);
        self.leaf0 + (self.div.servers_per_segment.div(server) * self.rails + rail) * self.sides + side
    }
}

impl RoutingRule for ThreeTierRule {
    fn name(&self) -> &'static str {
        "three-tier up-down"
    }

    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        // The node's kind from its id (module doc's layout), without reading the node table.
        let tier = if at.0 < self.num_hosts {
            return Ok(host_hop_computed(t, at, dst, flow_hash, self.sides, |side| {
                (self.host_links0 + 2 * (at.0 * self.sides + side), self.leaf_of(at.0, side))
            }));
        } else if at.0 < self.leaf0 {
            return nvswitch_hop_computed(t, at, dst);
        } else if at.0 < self.spine0 {
            1
        } else if at.0 < self.core0 {
            2
        } else {
            3
        };
        debug_assert_eq!(t.node(at), NodeKind::Switch { tier });
        Ok(take_choice(t, at, flow_hash, self.choice_to(at, dst, tier)?, "three-tier"))
    }

    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        port_range_hops(t, at, dst, out, "three-tier", |tier| self.choice(at, dst, tier))
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        let hosts = t.num_hosts();
        if hosts < 2 {
            return Some(0);
        }
        // Two hosts on different servers and different leaves exist whenever there is more than
        // one leaf and more than one server; a single server talks over NVLink (2 links).
        Some(if self.servers == 1 {
            2
        } else if self.pods > 1 {
            6
        } else if self.segments * self.rails > 1 {
            4
        } else {
            2
        })
    }
}
