//! Dragonfly (Kim, Dally, Scott, Abts, ISCA 2008) with minimal, Valiant and UGAL routing.
//!
//! `groups` groups of `routers_per_group` (a) routers; each router has `hosts_per_router` (p)
//! GPU NICs, a local cable to every other router of its group (full mesh), and
//! `global_links_per_router` (h) global ports. Global port `j` of a group (`j = r*h + k` for port
//! `k` of router `r`) leads to group `G + (j mod (g-1)) + 1` ("consecutive" arrangement); with
//! fewer than `a*h + 1` groups, each pair of groups gets `floor(a*h / (g-1))` parallel global
//! cables (copies) and the remaining ports stay unused. Port `j` of group `G` and port
//! `c*(g-1) + g - o - 1` of group `G + o` (copy `c`, offset `o`) are the two ends of one cable.
//!
//! Node layout: hosts, NVSwitches, routers (`router0 + G*a + r`). Hosts fill routers in id order
//! (the last routers may hold fewer or none). Ports of a router: its hosts, then local links to
//! the other routers of its group in index order, then its global ports in `j` order.
//!
//! Minimal routing (at most one global hop): within a group, the direct local link; across
//! groups, every copy `c` of the global cable to the destination group has a cost
//! `[gateway != here] + 1 + [landing router != destination router]`; the flow hash picks among
//! the next hops of the cheapest copies (ECMP: all candidates are equal-cost).
//!
//! Valiant (`routing: valiant`, Valiant 1982; as the dragonfly paper's VAL): an inter-group flow
//! goes minimally to an intermediate group `I != D` picked from its flow hash and the topology
//! seed, then minimally to `D`. A router in the source group heads for `I`, a router in `I` for
//! `D`: the route meets no other group, so the rule needs no state in the packet. UGAL
//! (`routing: ugal`, after Singh's UGAL as used in the dragonfly paper): per flow, the minimal
//! route or one of [`UGAL_CANDIDATES`] Valiant routes (through as many intermediate groups),
//! whichever has the smallest `hops x (1 + load)`; the flow backend takes the
//! load from the flows already on each route's router links (UGAL-G, global knowledge); the
//! per-hop rule (analytical and packet backends) has no load and routes minimally.
//!
//! With links down, a Valiant route (and each UGAL class's) keeps its intermediate group where
//! a route through it avoids the failed links ([`RoutingRule::flow_hops`] lists the flow's
//! candidates, which failure routing narrows to those that still reach), and falls back to the
//! minimal route around them where none does; every router decides from (router, destination,
//! flow hash) alone. Spraying splits a flow over its own route's equal-cost hops the same way.
//! [`RoutingRule::next_hops`] lists the minimal candidates.

use std::sync::Arc;

use llmsim_core::{FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, RoutingRule};
use crate::generators::{check_hosts, check_rate, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec};
use crate::routing::{Routing, host_hop_computed, host_hops, nvswitch_hop, nvswitch_hop_computed};

/// `topology: { kind: dragonfly, routers_per_group: 16, hosts_per_router: 8, global_links_per_router: 8 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DragonflySpec {
    /// Routers per group (a). Default `2h` (balanced).
    pub routers_per_group: Option<u32>,
    /// GPU NICs per router (p). Default `h` (balanced).
    pub hosts_per_router: Option<u32>,
    /// Global links per router (h). Default: the smallest h whose balanced dragonfly
    /// (a = 2h, p = h, up to a*h + 1 groups) holds the GPUs; else from `a` or `p`.
    pub global_links_per_router: Option<u32>,
    /// Groups (g), at most `a*h + 1`. Default: as many as the GPUs need.
    pub groups: Option<u32>,
    /// Host NIC <-> router. Default 400Gbps / 500ns.
    pub nic: LinkSpec,
    /// Local (intra-group) router links. Default 400Gbps / 600ns.
    pub fabric: LinkSpec,
    /// Global (inter-group) links. Default: as `fabric`, latency 1us (longer optics).
    pub global: LinkSpec,
    /// `minimal` (default), `valiant` or `ugal`.
    pub routing: DragonflyRouting,
}

/// A resolved dragonfly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DragonflyParams {
    /// Groups (g).
    pub groups: u32,
    /// Routers per group (a).
    pub routers_per_group: u32,
    /// GPU NICs per router (p).
    pub hosts_per_router: u32,
    /// Global links per router (h).
    pub global_links_per_router: u32,
    /// Host NIC <-> router.
    pub nic: LinkParams,
    /// Local (intra-group) router links.
    pub local: LinkParams,
    /// Global (inter-group) router links.
    pub global: LinkParams,
    /// Minimal, Valiant or UGAL.
    pub routing: DragonflyRouting,
}

/// Largest radix (ports per router) the generator accepts.
pub const MAX_RADIX: u32 = 4096;

/// Smallest h whose balanced dragonfly (a = 2h, p = h, g = a*h + 1) holds `hosts`.
pub fn balanced_h(hosts: u32) -> u32 {
    let mut h = 1u64;
    while (2 * h * h + 1) * 2 * h * h < u64::from(hosts) {
        h += 1;
    }
    h as u32
}

impl FamilySpec for DragonflySpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        check_hosts(gpus)?;
        let (a, p, h) = (self.routers_per_group, self.hosts_per_router, self.global_links_per_router);
        let h = match (h, a, p) {
            (Some(h), _, _) => h,
            (None, None, None) => balanced_h(gpus),
            (None, Some(a), _) => (a / 2).max(1),
            (None, None, Some(p)) => p,
        };
        let a = a.unwrap_or(2 * h);
        let p = p.unwrap_or(h.max(1));
        for (field, v) in [
            ("topology.routers_per_group", a),
            ("topology.hosts_per_router", p),
            ("topology.global_links_per_router", h),
        ] {
            if v == 0 || v > MAX_RADIX {
                return Err(FieldError::new(field, format!("{v} is out of range; valid: 1..={MAX_RADIX}")).into());
            }
        }
        let per_group = u64::from(a) * u64::from(p);
        let need = u64::from(gpus).div_ceil(per_group).max(1);
        let groups = match self.groups {
            Some(g) if u64::from(g) < need || g == 0 => {
                return Err(FieldError::new(
                    "topology.groups",
                    format!("{g} groups of {a} routers x {p} hosts hold fewer than {gpus} GPUs; use at least {need}"),
                )
                .into());
            }
            Some(g) => g,
            None => need as u32,
        };
        let p = DragonflyParams {
            groups,
            routers_per_group: a,
            hosts_per_router: p,
            global_links_per_router: h,
            nic: self.nic.resolve(DEFAULT_NIC),
            local: self.fabric.resolve(DEFAULT_FABRIC),
            global: self.global.resolve(LinkParams::new(
                self.fabric.resolve(DEFAULT_FABRIC).bandwidth,
                llmsim_core::SimTime::from_ns(1000),
            )),
            routing: self.routing,
        };
        dragonfly(gpus, &p, scale_up, seed)
    }
}

/// Builds a dragonfly holding `num_hosts` GPUs. Routing: [`DragonflyRule`].
///
/// # Errors
/// `TopoError::Invalid` when the groups cannot all be joined by the global ports
/// (`g - 1 > a*h`: names `topology.global_links_per_router` and the smallest valid h), too few
/// groups, a zero bandwidth, or the scale-up errors of [`hosts_with_scale_up`].
pub fn dragonfly(num_hosts: u32, p: &DragonflyParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    check_rate("topology.fabric", p.local)?;
    check_rate("topology.global", p.global)?;
    let (g, a, hp, h) = (p.groups, p.routers_per_group, p.hosts_per_router, p.global_links_per_router);
    if a == 0 || hp == 0 || h == 0 || g == 0 {
        return Err(FieldError::new(
            "topology.routers_per_group",
            "routers, hosts and global links per router must be at least 1",
        )
        .into());
    }
    let routers = u64::from(g) * u64::from(a);
    if routers * u64::from(hp) < u64::from(num_hosts) || routers > u64::from(crate::generators::MAX_HOSTS) {
        return Err(FieldError::new(
            "topology.groups",
            format!(
                "{g} groups of {a} routers x {hp} hosts cannot hold {num_hosts} GPUs; use at least {} groups",
                u64::from(num_hosts).div_ceil(u64::from(a) * u64::from(hp))
            ),
        )
        .into());
    }
    let ports_per_group = u64::from(a) * u64::from(h);
    if u64::from(g) - 1 > ports_per_group {
        let need_h = (u64::from(g) - 1).div_ceil(u64::from(a));
        return Err(FieldError::new(
            "topology.global_links_per_router",
            format!(
                "{g} groups need {} global ports per group, but {a} routers x {h} global links give {ports_per_group} \
                 (router radix {} too small); use global_links_per_router >= {need_h}, more routers_per_group, or at most {} groups",
                g - 1,
                hp + a - 1 + h,
                ports_per_group + 1
            ),
        )
        .into());
    }
    let copies = if g > 1 { (ports_per_group / u64::from(g - 1)) as u32 } else { 0 };
    let used = copies * g.saturating_sub(1);
    let routers = routers as u32;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    // Routers left without hosts in the last group sit two hops from any host: tier 2, as an
    // ns-3 import (tier = hops from the nearest host) reads them back.
    let with_hosts = num_hosts.div_ceil(hp);
    let router0 = b.add_nodes(NodeKind::Switch { tier: 1 }, with_hosts).0;
    b.add_nodes(NodeKind::Switch { tier: 2 }, routers - with_hosts);
    b.reserve_links(2 * num_hosts as usize + routers as usize * (a as usize - 1) + 2 * used as usize * g as usize);
    for host in 0..num_hosts {
        b.add_link(NodeId(host), NodeId(router0 + host / hp), p.nic, LinkKind::HostNic);
    }
    let rule = DragonflyRule {
        groups: g,
        routers_per_group: a,
        hosts_per_router: hp,
        global_links_per_router: h,
        copies,
        hosts: num_hosts,
        router0,
        routing: p.routing,
        seed: ecmp_seed,
    };
    for grp in 0..g {
        for r in 0..a {
            let me = grp * a + r;
            let at = NodeId(router0 + me);
            let first = me * hp;
            for host in first.min(num_hosts)..(first + hp).min(num_hosts) {
                b.add_link(at, NodeId(host), p.nic, LinkKind::HostNic);
            }
            for r2 in (0..a).filter(|&r2| r2 != r) {
                b.add_link(at, NodeId(router0 + grp * a + r2), p.local, LinkKind::Fabric);
            }
            for j in r * h..((r + 1) * h).min(used) {
                let (peer_group, peer_router) = rule.global_peer(grp, j);
                b.add_link(at, NodeId(router0 + peer_group * a + peer_router), p.global, LinkKind::Fabric);
            }
        }
    }
    let routing = match p.routing {
        DragonflyRouting::Minimal => "",
        DragonflyRouting::Valiant => "-valiant",
        DragonflyRouting::Ugal => "-ugal",
    };
    b.build(
        format!("dragonfly-{g}g{a}a{hp}p{h}h{routing}-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

/// How a dragonfly routes between groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DragonflyRouting {
    /// At most one global hop (default).
    #[default]
    Minimal,
    /// Valiant: every inter-group flow goes minimally to an intermediate group picked from its
    /// flow hash and the topology seed, then minimally to its destination (two global hops).
    Valiant,
    /// UGAL: per flow, the minimal route or one of [`UGAL_CANDIDATES`] Valiant routes, whichever
    /// has the lowest `hops x (1 + load)`. The flow
    /// backend measures the load as the flows already on the path's router links
    /// ([`crate::Topology::route_classes`]); without loads (the analytical and packet backends)
    /// the estimates are equal and UGAL routes minimally.
    Ugal,
}

/// Valiant candidates (intermediate groups) UGAL weighs against the minimal route per flow.
pub const UGAL_CANDIDATES: u32 = 4;

/// Dragonfly routing; see the module doc for addresses, ports and costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DragonflyRule {
    /// Groups (g).
    pub groups: u32,
    /// Routers per group (a).
    pub routers_per_group: u32,
    /// GPU NICs per router (p).
    pub hosts_per_router: u32,
    /// Global ports per router (h).
    pub global_links_per_router: u32,
    /// Parallel global cables between each pair of groups.
    pub copies: u32,
    hosts: u32,
    router0: u32,
    /// Minimal, Valiant or UGAL.
    pub routing: DragonflyRouting,
    /// Seed of the Valiant intermediate-group choice.
    seed: u64,
}

/// Where a router sends a packet next (see [`DragonflyRule::target`]).
#[derive(Clone, Copy, Debug)]
enum Target {
    /// Host port index.
    Host(usize),
    /// Local router of this group.
    Local(u32),
    /// Group offset `o` ahead, landing at router `rd` of it (`None`: any router of it).
    Group(u32, Option<u32>),
}

impl DragonflyRule {
    /// Group and router index at the far end of global port `j` of group `grp`.
    #[inline]
    fn global_peer(&self, grp: u32, j: u32) -> (u32, u32) {
        let g = self.groups;
        let (c, o) = (j / (g - 1), j % (g - 1) + 1);
        let peer_j = c * (g - 1) + (g - o - 1);
        ((grp + o) % g, peer_j / self.global_links_per_router)
    }

    /// For copy `c` of the cables toward group offset `o`: (gateway router, landing router).
    #[inline]
    fn copy_ends(&self, o: u32, c: u32) -> (u32, u32) {
        let g = self.groups;
        let j = c * (g - 1) + o - 1;
        let peer_j = c * (g - 1) + (g - o - 1);
        (j / self.global_links_per_router, peer_j / self.global_links_per_router)
    }

    /// Router hops over copy `c` from local router `r` to router `rd` (`None`: any) of the group
    /// `o > 0` groups ahead.
    #[inline]
    fn copy_cost(&self, o: u32, c: u32, r: u32, rd: Option<u32>) -> u32 {
        let (gw, land) = self.copy_ends(o, c);
        u32::from(gw != r) + 1 + rd.map_or(0, |rd| u32::from(land != rd))
    }

    /// Router hops from local router `r` to local router `rd` of the group `o` groups ahead.
    #[inline]
    fn cost(&self, o: u32, r: u32, rd: u32) -> u32 {
        if o == 0 {
            return u32::from(r != rd);
        }
        (0..self.copies)
            .map(|c| self.copy_cost(o, c, r, Some(rd)))
            .min()
            .unwrap_or(u32::MAX)
    }

    /// Port index of router `r`'s local link to router `r2` (after `down` host ports).
    #[inline]
    fn local_port(down: usize, r: u32, r2: u32) -> usize {
        down + if r2 < r { r2 } else { r2 - 1 } as usize
    }

    fn has_hosts(&self, router: u32) -> bool {
        router * self.hosts_per_router < self.hosts
    }

    /// Valiant's intermediate group for a flow to group `dgrp`: one of the other `g - 1` groups,
    /// from the flow hash and the seed, so every router of the route agrees on it.
    #[inline]
    fn intermediate(&self, dgrp: u32, flow_hash: u64, salt: u64) -> u32 {
        let g = self.groups;
        let pick =
            llmsim_core::mix64(flow_hash ^ self.seed ^ 0x5641_4c49_414e_5400 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % u64::from(g - 1);
        (dgrp + 1 + pick as u32) % g
    }

    /// The decision at router `me` (index over all routers) toward host `dst`. `valiant`: take
    /// the Valiant route between groups, through the intermediate group the flow hash and
    /// `salt` pick. A router outside the destination group that is not
    /// in the intermediate group heads for the intermediate group; in it, for the destination.
    /// The route meets only the source, intermediate and destination groups, so this holds no
    /// per-packet state.
    #[inline]
    fn target(&self, me: u32, dst: NodeId, valiant: Option<u64>, flow_hash: u64) -> Target {
        let (a, hp) = (self.routers_per_group, self.hosts_per_router);
        let router = dst.0 / hp;
        if me == router {
            return Target::Host((dst.0 - me * hp) as usize);
        }
        let grp = me / a;
        let (dgrp, rd) = (router / a, router % a);
        if grp == dgrp {
            return Target::Local(rd);
        }
        if let Some(salt) = valiant.filter(|_| self.groups > 2) {
            let via = self.intermediate(dgrp, flow_hash, salt);
            if via != grp {
                return Target::Group((via + self.groups - grp) % self.groups, None);
            }
        }
        Target::Group((dgrp + self.groups - grp) % self.groups, Some(rd))
    }

    /// Calls `f` with every equal-cost port index at router `me` toward group offset `o` landing
    /// at `rd`, in copy order: the global port when this router is the gateway, else the local
    /// link to the gateway (a gateway's local link once per run of its copies). Returns how many.
    #[inline]
    fn group_candidates(&self, me: u32, down: usize, o: u32, rd: Option<u32>, mut f: impl FnMut(usize) -> bool) -> usize {
        let a = self.routers_per_group;
        let r = me % a;
        let best = (0..self.copies).map(|c| self.copy_cost(o, c, r, rd)).min().unwrap_or(u32::MAX);
        let global0 = down + a as usize - 1;
        let h = self.global_links_per_router;
        // `prev`: the gateway of the last *minimal* copy, so a non-minimal copy between two
        // minimal ones through one gateway does not hide the second (which left a router with no
        // candidate at all: a dragonfly found by the routing property test).
        let mut prev = None;
        let mut count = 0;
        for c in 0..self.copies {
            if self.copy_cost(o, c, r, rd) != best {
                continue;
            }
            let (gw, _) = self.copy_ends(o, c);
            let port = if gw == r {
                let j = c * (self.groups - 1) + o - 1;
                Some(global0 + (j - r * h) as usize)
            } else if prev == Some(gw) {
                None
            } else {
                Some(Self::local_port(down, r, gw))
            };
            prev = Some(gw);
            if let Some(p) = port {
                count += 1;
                if f(p) {
                    break;
                }
            }
        }
        count
    }

    fn unreachable(at: NodeId, dst: NodeId) -> TopoError {
        TopoError::Unreachable {
            src: at,
            dst,
            reason: "dragonfly groups without a global link".into(),
        }
    }

    /// The node port `p` of router `me` (with `down` host ports) leads to (module doc's port
    /// layout), computed so that the next hop does not wait on this hop's load.
    #[inline]
    fn far_end(&self, me: u32, down: usize, p: usize) -> u32 {
        let a = self.routers_per_group;
        let (grp, r) = (me / a, me % a);
        if p < down {
            return me * self.hosts_per_router + p as u32;
        }
        let local = (p - down) as u32;
        if local + 1 < a {
            let r2 = if local < r { local } else { local + 1 };
            return self.router0 + grp * a + r2;
        }
        let j = r * self.global_links_per_router + local + 1 - a;
        let (pg, pr) = self.global_peer(grp, j);
        self.router0 + pg * a + pr
    }

    /// Next hop at router `at`, minimal or Valiant between groups.
    #[inline]
    fn router_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, valiant: Option<u64>) -> Result<Hop, TopoError> {
        let h = self.router_hop_port(t, at, dst, flow_hash, valiant)?;
        let me = at.0 - self.router0;
        let down = self.hosts.saturating_sub(me * self.hosts_per_router).min(self.hosts_per_router) as usize;
        let hop = Hop {
            link: LinkId(self.first_link(t, me) + h as u32),
            to: NodeId(self.far_end(me, down, h)),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(h), "dragonfly port layout at {at}");
        Ok(hop)
    }

    /// Id of router `me`'s first link, from the generator's order (NVLink links, each host's NIC
    /// link, then each router's links in port order: its hosts, `a - 1` local links, and its
    /// global ports, `used` per group), so that a route reads no table.
    #[inline]
    fn first_link(&self, t: &Topology, me: u32) -> u32 {
        let (a, h) = (self.routers_per_group, self.global_links_per_router);
        let used = self.copies * self.groups.saturating_sub(1);
        let (grp, r) = (me / a, me % a);
        let nv = if t.gpus_per_server() > 1 { 2 * self.hosts } else { 0 };
        nv + self.hosts + (me * self.hosts_per_router).min(self.hosts) + me * (a - 1) + grp * used + (r * h).min(used)
    }

    /// The port [`Self::router_hop`] takes.
    #[inline]
    fn router_hop_port(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, valiant: Option<u64>) -> Result<usize, TopoError> {
        let me = at.0 - self.router0;
        let down = self.hosts.saturating_sub(me * self.hosts_per_router).min(self.hosts_per_router) as usize;
        match self.target(me, dst, valiant, flow_hash) {
            Target::Host(p) => Ok(p),
            Target::Local(rd) => Ok(Self::local_port(down, me % self.routers_per_group, rd)),
            Target::Group(o, rd) => {
                let count = self.group_candidates(me, down, o, rd, |_| false);
                if count == 0 {
                    return Err(Self::unreachable(at, dst));
                }
                let pick = if count > 1 { t.ecmp_pick(at, flow_hash, count) } else { 0 };
                let mut seen = 0;
                let mut port = None;
                self.group_candidates(me, down, o, rd, |p| {
                    if seen == pick {
                        port = Some(p);
                        return true;
                    }
                    seen += 1;
                    false
                });
                port.ok_or_else(|| Self::unreachable(at, dst))
            }
        }
    }

    /// Every equal-cost hop at `at` toward `dst`, minimal (`valiant: None`) or on the Valiant
    /// route through the intermediate group `flow_hash` and the salt pick, in port order.
    fn hops_via(
        &self,
        t: &Topology,
        at: NodeId,
        dst: NodeId,
        valiant: Option<u64>,
        flow_hash: u64,
        out: &mut Vec<LinkId>,
    ) -> Result<(), TopoError> {
        match t.node(at) {
            NodeKind::Host => return host_hops(t, at, dst, out),
            NodeKind::NvSwitch => {
                out.push(nvswitch_hop(t, at, dst)?.link);
                return Ok(());
            }
            NodeKind::Switch { .. } => {}
        }
        let me = at.0 - self.router0;
        let ports = t.ports(at);
        let down = self.hosts.saturating_sub(me * self.hosts_per_router).min(self.hosts_per_router) as usize;
        match self.target(me, dst, valiant, flow_hash) {
            Target::Host(p) => out.push(ports[p]),
            Target::Local(rd) => out.push(ports[Self::local_port(down, me % self.routers_per_group, rd)]),
            Target::Group(o, rd) => {
                let from = out.len();
                self.group_candidates(me, down, o, rd, |p| {
                    if !out[from..].contains(&ports[p]) {
                        out.push(ports[p]);
                    }
                    false
                });
                if out.len() == from {
                    return Err(Self::unreachable(at, dst));
                }
            }
        }
        Ok(())
    }

    /// The Valiant salt of route class `class` (`None`: minimal), as [`RoutingRule::hop`] and
    /// [`RoutingRule::hop_in_class`] route: Valiant routing is class 0's salt 0, UGAL's class `c`
    /// is Valiant with salt `c - 1`.
    fn valiant_salt(&self, class: u32) -> Option<u64> {
        match self.routing {
            DragonflyRouting::Minimal => None,
            DragonflyRouting::Valiant => Some(0),
            DragonflyRouting::Ugal => class.checked_sub(1).map(u64::from),
        }
    }

    fn hop_via(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, valiant: Option<u64>) -> Result<Hop, TopoError> {
        // The node's kind from its id (module doc's layout), without reading the node table.
        if at.0 < self.hosts {
            let nv = if t.gpus_per_server() > 1 { 2 * self.hosts } else { 0 };
            let nic = (nv + at.0, self.router0 + at.0 / self.hosts_per_router);
            Ok(host_hop_computed(t, at, dst, flow_hash, 1, |_| nic))
        } else if at.0 < self.router0 {
            nvswitch_hop_computed(t, at, dst)
        } else {
            self.router_hop(t, at, dst, flow_hash, valiant)
        }
    }
}

impl RoutingRule for DragonflyRule {
    fn name(&self) -> &'static str {
        match self.routing {
            DragonflyRouting::Minimal => "dragonfly minimal",
            DragonflyRouting::Valiant => "dragonfly valiant",
            DragonflyRouting::Ugal => "dragonfly ugal",
        }
    }

    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        self.hop_via(t, at, dst, flow_hash, (self.routing == DragonflyRouting::Valiant).then_some(0))
    }

    /// The minimal rule's equal-cost hops, whatever the routing: Valiant's choice lives in the
    /// flow hash, which this does not see ([`RoutingRule::flow_hops`] does).
    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        self.hops_via(t, at, dst, None, 0, out)
    }

    /// The hops of the flow's route in `class` (Valiant: toward its intermediate group, then its
    /// destination; UGAL: class 0 minimal, class `c` Valiant through the `c`-th intermediate),
    /// which failure routing keeps where the failed links leave one.
    fn flow_hops(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, class: u32, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        self.hops_via(t, at, dst, self.valiant_salt(class), flow_hash, out)
    }

    fn flow_specific(&self) -> bool {
        self.routing != DragonflyRouting::Minimal && self.groups > 2
    }

    /// UGAL: class 0 minimal, classes `1..=UGAL_CANDIDATES` Valiant through as many
    /// intermediate groups (class 1 is `routing: valiant`'s).
    fn route_classes(&self) -> u32 {
        if self.routing == DragonflyRouting::Ugal && self.groups > 2 {
            1 + UGAL_CANDIDATES.min(self.groups - 2)
        } else {
            1
        }
    }

    fn hop_in_class(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, class: u32) -> Result<Hop, TopoError> {
        if self.routing == DragonflyRouting::Ugal {
            self.hop_via(t, at, dst, flow_hash, class.checked_sub(1).map(u64::from))
        } else {
            self.hop(t, at, dst, flow_hash)
        }
    }
    fn diameter(&self, t: &Topology) -> Option<u32> {
        let hosts = t.num_hosts();
        if hosts < 2 {
            return Some(0);
        }
        let a = self.routers_per_group;
        let used_routers = hosts.div_ceil(self.hosts_per_router);
        if used_routers == 1 {
            return Some(2);
        }
        // Servers spanning routers would make some router pairs NVLink neighbours; search instead.
        if !self.hosts_per_router.is_multiple_of(t.gpus_per_server()) {
            return None;
        }
        let mut worst = 0;
        if used_routers > a {
            // Cost depends only on the group offset and the local indices; every (r, rd, o) is
            // realised by two routers holding hosts when every group but the last is full and
            // there are >= 3 groups (or all are full). Otherwise enumerate pairs.
            let g = self.groups;
            let full = used_routers == g * a || (g >= 3 && used_routers >= (g - 1) * a);
            if !full && used_routers > 4096 {
                return None;
            }
            if full {
                for o in 1..self.groups {
                    for r in 0..a {
                        for rd in 0..a {
                            worst = worst.max(self.cost(o, r, rd));
                        }
                    }
                }
            } else {
                for s in 0..used_routers {
                    for d in 0..used_routers {
                        let o = (d / a + self.groups - s / a) % self.groups;
                        if o != 0 && self.has_hosts(s) && self.has_hosts(d) {
                            worst = worst.max(self.cost(o, s % a, d % a));
                        }
                    }
                }
            }
        }
        if used_routers > 1 && a > 1 {
            worst = worst.max(1);
        }
        Some(2 + worst)
    }
}
