//! Routing rules (Nüwa): the next hop is computed from the node, the destination's hierarchical
//! address and the flow hash. No per-destination table is stored for the generated topologies.
//!
//! A host's hierarchical address is arithmetic on its id: for a fat-tree `(pod, edge, slot) =
//! (h / (k/2)^2, h / (k/2) % (k/2), h % (k/2))`; for a rail-optimized fabric `(segment, rail,
//! server-in-segment) = (server / servers_per_segment, local_rank, server % servers_per_segment)`.
//! A switch's address is its index inside its tier. The rule is up-down: go down when the
//! destination lies under this switch (the port is computed from the address), else go up with
//! ECMP ([`Topology::ecmp_pick`]) among the uplinks.
//!
//! Port-order conventions every generator follows (the rules depend on them):
//! - a host's ports: `[NVLink to its NVSwitch]` (only when `gpus_per_server > 1`), then its NIC
//!   port(s) (one per plane with a dual-plane fabric, plane order);
//! - an NVSwitch's ports: one per GPU of its server, in local-rank order;
//! - a packet switch's ports: its downlinks first, in the order of the address digit they lead to
//!   (host slot, edge index, pod, server-in-segment, leaf index), then its uplinks in the order
//!   described on each rule below. A switch with fewer hosts below it (the last, partly filled
//!   leaf/edge) has fewer downlinks, and its uplinks start right after them.
//!
//! Imported topologies (ns-3 files) have no structure to exploit; they route by [`BfsRule`],
//! shortest paths by hop count with ECMP over all shortest next hops, computed lazily per
//! destination on first use.

use std::sync::{Arc, OnceLock};

use llmsim_core::{LinkId, NodeId};

use crate::TopoError;
use crate::family::RoutingRule;
use crate::fastdiv::Divisor;
use crate::graph::{Hop, LinkKind, NodeKind, Topology};

/// The rule a topology routes by. Every variant except `Bfs` holds O(1) parameters.
#[derive(Clone, Debug)]
pub enum Routing {
    /// One switch; its port `i` leads to host `i`.
    Flat {
        /// The one switch.
        switch: NodeId,
    },
    /// k-ary three-tier fat-tree ([`crate::generators::fat_tree`]).
    FatTree(FatTreeRule),
    /// Two-tier leaf-spine Clos ([`crate::generators::spine_leaf`]).
    SpineLeaf(SpineLeafRule),
    /// Rail-optimized two-tier fabric, one or two planes ([`crate::generators::rail_fat_tree`]).
    RailFatTree(RailRule),
    /// Shortest-path ECMP for imported graphs, computed per destination on first use.
    Bfs(Box<BfsRule>),
    /// A family's own rule ([`RoutingRule`]: torus, dragonfly, rail-only, ...), one file each.
    Rule(Arc<dyn RoutingRule>),
}

/// Fat-tree addresses. Node layout: hosts, NVSwitches, `pods * k/2` edges (pod-major),
/// `pods * k/2` aggregation switches (pod-major), `(k/2)^2` cores.
///
/// Ports: edge `e` = `[hosts e*k/2 ..]`, then agg `0..k/2` of its pod; agg `(pod, j)` = edges
/// `0..k/2` of its pod, then cores `j*k/2 .. j*k/2 + k/2`; core `c` = agg `c / (k/2)` of pods
/// `0..pods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatTreeRule {
    /// Half the switch radix (k/2): hosts per edge, edges and aggs per pod.
    pub half_k: u32,
    /// Number of hosts.
    pub hosts: u32,
    /// Number of pods.
    pub pods: u32,
    /// Node id of the first edge switch.
    pub edge0: u32,
    /// Node id of the first aggregation switch.
    pub agg0: u32,
    /// Node id of the first core switch.
    pub core0: u32,
    /// `half_k` and `half_k^2` as [`Divisor`]s.
    pub(crate) div: [Divisor; 2],
}

/// Leaf-spine addresses. Node layout: hosts, NVSwitches, `leaves`, `spines`.
///
/// Ports: leaf `l` = `[hosts l*hosts_per_leaf ..]`, then spines `0..spines`; spine = leaves
/// `0..leaves`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpineLeafRule {
    /// Host NICs under one leaf.
    pub hosts_per_leaf: u32,
    /// Number of hosts.
    pub hosts: u32,
    /// Number of leaves.
    pub leaves: u32,
    /// Number of spines.
    pub spines: u32,
    /// Node id of the first leaf.
    pub leaf0: u32,
    /// Node id of the first spine.
    pub spine0: u32,
}

/// Rail-optimized addresses. Node layout: hosts, NVSwitches, then the leaves of every plane
/// (plane-major, then segment, then rail: leaf `(q, s, r)` is `leaf0 + (q*segments + s)*rails + r`),
/// then the spines (plane-major: `spine0 + q*spines_per_plane + i`).
///
/// Ports: leaf `(q, s, r)` = `[rail-r GPU of servers s*servers_per_segment ..]`, then the
/// `spines_per_plane` spines of plane `q`; spine of plane `q` = the leaves of plane `q` in
/// `(segment, rail)` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailRule {
    /// Rails: GPUs per server.
    pub rails: u32,
    /// Servers whose rail-`r` GPUs share one leaf.
    pub servers_per_segment: u32,
    /// Number of servers.
    pub servers: u32,
    /// Segments per plane.
    pub segments: u32,
    /// Planes: 1, or 2 for a dual-plane fabric.
    pub planes: u32,
    /// Spines in each plane.
    pub spines_per_plane: u32,
    /// Node id of the first leaf.
    pub leaf0: u32,
    /// Node id of the first spine.
    pub spine0: u32,
    /// `rails`, `servers_per_segment`, `segments * rails` and `spines_per_plane` as
    /// [`Divisor`]s.
    pub(crate) div: [Divisor; 4],
}

/// Hop count in [`BfsRule`] distance arrays meaning "cannot reach".
const UNREACHED: u8 = u8::MAX;

/// Shortest-path (hop count) routing for arbitrary graphs, the ns-3 `GlobalRouting` behaviour.
///
/// Per destination host, a distance-to-destination array (one byte per node) is computed by a
/// reverse BFS on first use and cached (`OnceLock`, so [`Topology`] stays `Send + Sync`). A node's
/// next-hop candidates are its ports whose far end is one hop closer; the flow hash picks among
/// them. Hosts never forward (only the destination host ends a path) and NVLink is used only
/// between GPUs of one server, as in the generated topologies.
pub struct BfsRule {
    in_start: Vec<u32>,
    in_links: Vec<LinkId>,
    dist: Vec<OnceLock<Box<[u8]>>>,
}

impl Clone for BfsRule {
    fn clone(&self) -> Self {
        BfsRule {
            in_start: self.in_start.clone(),
            in_links: self.in_links.clone(),
            dist: self.dist.clone(),
        }
    }
}

impl std::fmt::Debug for BfsRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.dist.iter().filter(|d| d.get().is_some()).count();
        f.debug_struct("BfsRule")
            .field("destinations", &self.dist.len())
            .field("cached", &cached)
            .finish()
    }
}

impl BfsRule {
    /// Prepares the rule for a graph of `num_nodes` nodes, `num_hosts` hosts and these links.
    pub fn new(num_nodes: usize, num_hosts: u32, links: &[crate::graph::Link]) -> Self {
        let mut in_start = vec![0u32; num_nodes + 1];
        for l in links {
            in_start[l.dst.idx() + 1] += 1;
        }
        for i in 0..num_nodes {
            in_start[i + 1] += in_start[i];
        }
        let mut fill = in_start.clone();
        let mut in_links = vec![LinkId(0); links.len()];
        for (i, l) in links.iter().enumerate() {
            let d = l.dst.idx();
            in_links[fill[d] as usize] = LinkId::from_idx(i);
            fill[d] += 1;
        }
        let dist = (0..num_hosts).map(|_| OnceLock::new()).collect();
        BfsRule { in_start, in_links, dist }
    }

    /// Hops from every node to host `dst` (`u8::MAX`: unreachable or 255+ hops away).
    pub fn distances(&self, t: &Topology, dst: NodeId) -> &[u8] {
        self.dist[dst.idx()].get_or_init(|| self.compute(t, dst))
    }

    fn compute(&self, t: &Topology, dst: NodeId) -> Box<[u8]> {
        let n = t.num_nodes();
        let mut dist = vec![UNREACHED; n].into_boxed_slice();
        let mut queue = Vec::with_capacity(n);
        dist[dst.idx()] = 0;
        queue.push(dst);
        let mut head = 0;
        while head < queue.len() {
            let v = queue[head];
            head += 1;
            let dv = dist[v.idx()];
            if dv >= UNREACHED - 1 {
                continue;
            }
            let ins = &self.in_links[self.in_start[v.idx()] as usize..self.in_start[v.idx() + 1] as usize];
            for &l in ins {
                let link = t.link(l);
                if link.kind == LinkKind::NvLink {
                    continue;
                }
                let u = link.src;
                if dist[u.idx()] == UNREACHED {
                    dist[u.idx()] = dv + 1;
                    // Hosts get a distance (they are sources) but never forward.
                    if !t.is_host(u) {
                        queue.push(u);
                    }
                }
            }
        }
        dist
    }

    /// The rule's decision at `at`: one link (NVLink inside a server), or the ports one hop
    /// closer to `dst` (`Err` when none).
    #[inline]
    fn fixed_hop(&self, t: &Topology, at: NodeId, dst: NodeId) -> Result<Option<LinkId>, TopoError> {
        let ports = t.ports(at);
        let g = t.gpus_per_server();
        match t.node(at) {
            NodeKind::Host if g > 1 && t.server_of(at) == t.server_of(dst) => {
                if let Some(&l) = ports.iter().find(|&&l| t.link(l).kind == LinkKind::NvLink) {
                    return Ok(Some(l));
                }
            }
            NodeKind::NvSwitch => {
                return ports
                    .iter()
                    .copied()
                    .find(|&l| t.link(l).dst == dst)
                    .map(Some)
                    .ok_or_else(|| TopoError::Unreachable {
                        src: at,
                        dst,
                        reason: "NVSwitch reached for a GPU it does not connect".into(),
                    });
            }
            _ => {}
        }
        Ok(None)
    }

    /// Whether `l` leads one hop closer to `dst` by `dist` (`want`: the hops left after it).
    #[inline]
    fn is_candidate(t: &Topology, dist: &[u8], want: u8, dst: NodeId, l: LinkId) -> bool {
        let link = t.link(l);
        link.kind != LinkKind::NvLink && dist[link.dst.idx()] == want && (link.dst == dst || !t.is_host(link.dst))
    }

    /// The distances to `dst` and the hops left after `at`'s next hop.
    fn want(&self, t: &Topology, at: NodeId, dst: NodeId) -> Result<(&[u8], u8), TopoError> {
        let dist = self.distances(t, dst);
        let d_at = dist[at.idx()];
        if d_at == UNREACHED || d_at == 0 {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "no path in the graph".into(),
            });
        }
        Ok((dist, d_at - 1))
    }

    #[inline]
    fn next_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
        if let Some(l) = self.fixed_hop(t, at, dst)? {
            return Ok(l);
        }
        let ports = t.ports(at);
        let (dist, want) = self.want(t, at, dst)?;
        let is_candidate = |l: LinkId| Self::is_candidate(t, dist, want, dst, l);
        let count = ports.iter().filter(|&&l| is_candidate(l)).count();
        if count == 0 {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "no path in the graph".into(),
            });
        }
        let pick = if count == 1 { 0 } else { t.ecmp_pick(at, flow_hash, count) };
        Ok(ports.iter().copied().filter(|&l| is_candidate(l)).nth(pick).unwrap_or(ports[0]))
    }

    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        if let Some(l) = self.fixed_hop(t, at, dst)? {
            out.push(l);
            return Ok(());
        }
        let (dist, want) = self.want(t, at, dst)?;
        let from = out.len();
        out.extend(t.ports(at).iter().copied().filter(|&l| Self::is_candidate(t, dist, want, dst, l)));
        if out.len() == from {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "no path in the graph".into(),
            });
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.in_start.capacity() * 4
            + self.in_links.capacity() * size_of::<LinkId>()
            + self.dist.capacity() * size_of::<OnceLock<Box<[u8]>>>()
            + self.dist.iter().filter_map(|d| d.get()).map(|d| d.len()).sum::<usize>()
    }
}

impl Routing {
    /// The link `at` forwards flow `flow_hash` on toward host `dst`.
    ///
    /// # Errors
    /// `TopoError::Unreachable` when `dst` cannot be reached from `at` under this rule.
    #[inline]
    pub fn next_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
        self.hop(t, at, dst, flow_hash).map(|h| h.link)
    }

    /// [`Routing::next_hop`] with the node the link leads to.
    ///
    /// # Errors
    /// As [`Routing::next_hop`].
    #[inline]
    pub fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        match self {
            Routing::Bfs(rule) => return rule.next_hop(t, at, dst, flow_hash).map(|l| t.hop_over(l)),
            Routing::Rule(rule) => return rule.hop(t, at, dst, flow_hash),
            Routing::FatTree(r) => return r.hop(t, at, dst, flow_hash),
            Routing::RailFatTree(r) => return r.hop(t, at, dst, flow_hash),
            _ => {}
        }
        match t.node(at) {
            NodeKind::Host => host_hop(t, at, dst, flow_hash),
            NodeKind::NvSwitch => nvswitch_hop(t, at, dst),
            NodeKind::Switch { .. } => Ok(self.switch_choice(at, dst).pick(t, at, flow_hash)),
        }
    }

    #[inline]
    fn switch_choice(&self, at: NodeId, dst: NodeId) -> Choice {
        match self {
            Routing::Flat { .. } => Choice::Port(dst.0),
            Routing::FatTree(r) => r.switch_hop(at, dst),
            Routing::SpineLeaf(r) => r.switch_hop(at, dst),
            Routing::RailFatTree(r) => r.switch_hop(at, dst),
            Routing::Bfs(_) | Routing::Rule(_) => unreachable!("handled by the caller"),
        }
    }

    /// Appends to `out` every next hop the rule allows at `at` toward host `dst`: the equal-cost
    /// candidates [`Routing::next_hop`] picks one of by the flow hash, in port order (one link
    /// where the rule has no choice). For spreading a flow over its paths and routing around
    /// failed links.
    ///
    /// # Errors
    /// As [`Routing::next_hop`].
    pub fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        match self {
            Routing::Bfs(rule) => return rule.next_hops(t, at, dst, out),
            Routing::Rule(rule) => return rule.next_hops(t, at, dst, out),
            _ => {}
        }
        match t.node(at) {
            NodeKind::Host => host_hops(t, at, dst, out)?,
            NodeKind::NvSwitch => out.push(nvswitch_hop(t, at, dst)?.link),
            NodeKind::Switch { .. } => self.switch_choice(at, dst).all(t, at, out),
        }
        Ok(())
    }

    /// Every next hop flow `flow_hash`'s route in route class `class` may take at `at`
    /// ([`RoutingRule::flow_hops`]); [`Routing::next_hops`] for a rule whose route depends on
    /// the flow only through the ECMP pick.
    ///
    /// # Errors
    /// As [`Routing::next_hop`].
    pub fn flow_hops(
        &self,
        t: &Topology,
        at: NodeId,
        dst: NodeId,
        flow_hash: u64,
        class: u32,
        out: &mut Vec<LinkId>,
    ) -> Result<(), TopoError> {
        match self {
            Routing::Rule(rule) if rule.flow_specific() => rule.flow_hops(t, at, dst, flow_hash, class, out),
            _ => self.next_hops(t, at, dst, out),
        }
    }

    /// Whether [`Routing::flow_hops`] differs from [`Routing::next_hops`] for some flow.
    pub fn flow_specific(&self) -> bool {
        matches!(self, Routing::Rule(rule) if rule.flow_specific())
    }

    /// Short name of the rule, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Routing::Flat { .. } => "flat",
            Routing::FatTree(_) => "fat-tree up-down",
            Routing::SpineLeaf(_) => "spine-leaf up-down",
            Routing::RailFatTree(_) => "rail-optimized up-down",
            Routing::Bfs(_) => "BFS shortest-path ECMP",
            Routing::Rule(r) => r.name(),
        }
    }

    /// Heap bytes held by the rule (zero for arithmetic rules).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Routing::Bfs(r) => size_of::<BfsRule>() + r.heap_bytes(),
            Routing::Rule(r) => r.heap_bytes(),
            _ => 0,
        }
    }
}

/// What a structured rule decides at a switch: one port, or ECMP over the uplinks from a port on.
#[derive(Clone, Copy, Debug)]
enum Choice {
    Port(u32),
    Up(u32),
}

impl Choice {
    #[inline]
    fn pick(self, t: &Topology, at: NodeId, flow_hash: u64) -> Hop {
        match self {
            Choice::Port(i) => t.port_hops(at)[i as usize],
            Choice::Up(first) => up(t, at, first, flow_hash),
        }
    }

    fn all(self, t: &Topology, at: NodeId, out: &mut Vec<LinkId>) {
        match self {
            Choice::Port(i) => out.push(t.ports(at)[i as usize]),
            Choice::Up(first) => out.extend_from_slice(&t.ports(at)[first as usize..]),
        }
    }
}

/// Uplink choice: ECMP over `ports[first_up..]`.
#[inline]
pub(crate) fn up(t: &Topology, at: NodeId, first_up: u32, flow_hash: u64) -> Hop {
    let ups = &t.port_hops(at)[first_up as usize..];
    ups[t.ecmp_pick(at, flow_hash, ups.len())]
}

impl FatTreeRule {
    /// [`Routing::hop`] with every far end and link id computed from the addresses (see the port
    /// layout on the struct) and the generator's cable order (NVLink links, host cables, then
    /// edge-aggregation cables pod by pod, edge by edge, then aggregation-core cables; a cable's
    /// first link goes up), so a route reads no table; a debug assertion checks each hop against
    /// the port table.
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        let h = self.half_k;
        let [hd, hhd] = self.div;
        let (a, d) = (at.0, dst.0);
        let host_links0 = if t.gpus_per_server() > 1 { 2 * self.hosts } else { 0 };
        let edge_links0 = host_links0 + 2 * self.hosts;
        let agg_links0 = edge_links0 + 2 * self.pods * h * h;
        if a < self.hosts {
            let nic = (host_links0 + 2 * a, self.edge0 + hd.div(a));
            return Ok(host_hop_computed(t, at, dst, flow_hash, 1, |_| nic));
        }
        let (port, to, link) = if a < self.edge0 {
            // An NVSwitch: its hop ends the route.
            return nvswitch_hop_computed(t, at, dst);
        } else if a < self.agg0 {
            let e = a - self.edge0;
            let first = e * h;
            if hd.div(d) == e {
                (d - first, d, host_links0 + 2 * d + 1)
            } else {
                let j = t.ecmp_pick(at, flow_hash, h as usize) as u32;
                (
                    self.hosts.saturating_sub(first).min(h) + j,
                    self.agg0 + hd.div(e) * h + j,
                    edge_links0 + 2 * (e * h + j),
                )
            }
        } else if a < self.core0 {
            let (pod, j) = hd.div_rem(a - self.agg0);
            let (d_pod, d_rest) = hhd.div_rem(d);
            if d_pod == pod {
                let i = hd.div(d_rest);
                (i, self.edge0 + pod * h + i, edge_links0 + 2 * ((pod * h + i) * h + j) + 1)
            } else {
                let m = t.ecmp_pick(at, flow_hash, h as usize) as u32;
                (h + m, self.core0 + j * h + m, agg_links0 + 2 * ((pod * h + j) * h + m))
            }
        } else {
            let pod = hhd.div(d);
            let (j, m) = hd.div_rem(a - self.core0);
            (pod, self.agg0 + pod * h + j, agg_links0 + 2 * ((pod * h + j) * h + m) + 1)
        };
        let hop = Hop {
            link: LinkId(link),
            to: NodeId(to),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(port as usize), "fat-tree port layout");
        Ok(hop)
    }

    #[inline]
    fn switch_hop(&self, at: NodeId, dst: NodeId) -> Choice {
        let h = self.half_k;
        let (a, d) = (at.0, dst.0);
        if a < self.agg0 {
            let e = a - self.edge0;
            let first = e * h;
            if d / h == e {
                return Choice::Port(d - first);
            }
            Choice::Up(self.hosts.saturating_sub(first).min(h))
        } else if a < self.core0 {
            let pod = (a - self.agg0) / h;
            if d / (h * h) == pod {
                return Choice::Port((d / h) % h);
            }
            Choice::Up(h)
        } else {
            Choice::Port(d / (h * h))
        }
    }
}

impl SpineLeafRule {
    #[inline]
    fn switch_hop(&self, at: NodeId, dst: NodeId) -> Choice {
        let p = self.hosts_per_leaf;
        let (a, d) = (at.0, dst.0);
        if a < self.spine0 {
            let l = a - self.leaf0;
            let first = l * p;
            if d / p == l {
                return Choice::Port(d - first);
            }
            Choice::Up(self.hosts.saturating_sub(first).min(p))
        } else {
            Choice::Port(d / p)
        }
    }
}

impl RailRule {
    /// The divisors of [`RailRule::div`] for these sizes.
    pub(crate) fn divisors(rails: u32, servers_per_segment: u32, segments: u32, spines_per_plane: u32) -> [Divisor; 4] {
        [rails, servers_per_segment, segments * rails, spines_per_plane].map(Divisor::new)
    }

    /// [`Routing::hop`] with every far end computed from the addresses (see the port layout on
    /// the struct), so the next hop does not wait on this hop's load.
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        let [rails, sps, seg_rails, spines] = self.div;
        let (g, a) = (self.rails, at.0);
        // Link ids follow the generator's cable order (NVLink links, then each host's cables
        // plane by plane, then each leaf's spine cables; a cable's first link goes up), so a
        // route reads no table; a debug assertion checks each hop against the port table.
        let host_links0 = if g > 1 { 2 * self.servers * g } else { 0 };
        let leaf_links0 = host_links0 + 2 * self.servers * g * self.planes;
        if a < self.servers * g {
            let (server, rail) = rails.div_rem(a);
            let seg = sps.div(server);
            return Ok(host_hop_computed(t, at, dst, flow_hash, self.planes, |q| {
                (
                    host_links0 + 2 * (a * self.planes + q),
                    self.leaf0 + (q * self.segments + seg) * g + rail,
                )
            }));
        }
        if a < self.leaf0 {
            return nvswitch_hop_computed(t, at, dst);
        }
        let (d_server, d_rail) = rails.div_rem(dst.0);
        let d_seg = sps.div(d_server);
        let n = self.spines_per_plane;
        let (port, to, link) = if a < self.spine0 {
            let lg = a - self.leaf0;
            let (q, rem) = seg_rails.div_rem(lg);
            let (seg, rail) = rails.div_rem(rem);
            let first = seg * self.servers_per_segment;
            if d_seg == seg && d_rail == rail {
                (d_server - first, dst.0, host_links0 + 2 * (dst.0 * self.planes + q) + 1)
            } else {
                let i = t.ecmp_pick(at, flow_hash, n as usize) as u32;
                (
                    self.servers.saturating_sub(first).min(self.servers_per_segment) + i,
                    self.spine0 + q * n + i,
                    leaf_links0 + 2 * (lg * n + i),
                )
            }
        } else {
            let (q, j) = spines.div_rem(a - self.spine0);
            let leaf = (q * self.segments + d_seg) * g + d_rail;
            (d_seg * g + d_rail, self.leaf0 + leaf, leaf_links0 + 2 * (leaf * n + j) + 1)
        };
        let hop = Hop {
            link: LinkId(link),
            to: NodeId(to),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(port as usize), "rail-optimized port layout at {at}");
        Ok(hop)
    }

    #[inline]
    fn switch_hop(&self, at: NodeId, dst: NodeId) -> Choice {
        let (g, sps) = (self.rails, self.servers_per_segment);
        let (a, d) = (at.0, dst.0);
        let d_server = d / g;
        let d_rail = d % g;
        let d_seg = d_server / sps;
        if a < self.spine0 {
            let rem = (a - self.leaf0) % (self.segments * g);
            let (seg, rail) = (rem / g, rem % g);
            let first = seg * sps;
            if d_seg == seg && d_rail == rail {
                return Choice::Port(d_server - first);
            }
            Choice::Up(self.servers.saturating_sub(first).min(sps))
        } else {
            Choice::Port(d_seg * g + d_rail)
        }
    }
}

/// A host sends to a GPU of its own server over NVLink, and everything else out of its NIC
/// (ECMP over the planes when it has more than one NIC port).
///
/// # Errors
/// [`TopoError::Unreachable`] when the host has no NIC.
#[inline]
pub fn host_hop(t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
    let ports = t.port_hops(at);
    let g = t.gpus_per_server();
    if g > 1 && t.server_of(at) == t.server_of(dst) {
        return Ok(ports[0]);
    }
    let nics = &ports[usize::from(g > 1)..];
    match nics.len() {
        0 => Err(TopoError::Unreachable {
            src: at,
            dst,
            reason: "host has no NIC".into(),
        }),
        1 => Ok(nics[0]),
        n => Ok(nics[t.ecmp_pick(at, flow_hash, n)]),
    }
}

/// [`host_hop`] with the far end computed rather than read beside the link, for a family whose
/// generator lays out hosts and NVSwitches with [`crate::generators::hosts_with_scale_up`] (the
/// NVSwitch of server `s` is node `num_hosts + s`): `nic_to(i)` is the node NIC port `i` leads
/// to. The next hop then does not wait on this hop's load (a debug assertion checks the far end
/// against the table).
///
/// # Errors
/// As [`host_hop`].
#[inline]
pub fn host_hop_to(t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, nic_to: impl FnOnce(u32) -> u32) -> Result<Hop, TopoError> {
    let ports = t.port_hops(at);
    let g = t.gpus_per_server();
    let (i, to) = if g > 1 && t.server_of(at) == t.server_of(dst) {
        (0, t.num_hosts() + t.server_of(at))
    } else {
        let nic0 = usize::from(g > 1);
        let n = ports.len().saturating_sub(nic0);
        let pick = match n {
            0 => {
                return Err(TopoError::Unreachable {
                    src: at,
                    dst,
                    reason: "host has no NIC".into(),
                });
            }
            1 => 0,
            n => t.ecmp_pick(at, flow_hash, n),
        };
        (nic0 + pick, nic_to(pick as u32))
    };
    let h = ports[i];
    debug_assert_eq!(h.to.0, to, "host port layout at {at}");
    Ok(Hop {
        link: h.link,
        to: NodeId(to),
    })
}

/// [`nvswitch_hop`] with the link id computed too, for a family laid out by
/// [`crate::generators::hosts_with_scale_up`] (NVSwitch -> GPU `h` is link `num_hosts + h`), so
/// the hop reads no table (a debug assertion checks it against [`nvswitch_hop`]).
///
/// # Errors
/// As [`nvswitch_hop`].
#[inline]
pub(crate) fn nvswitch_hop_computed(t: &Topology, at: NodeId, dst: NodeId) -> Result<Hop, TopoError> {
    if at.0.wrapping_sub(t.num_hosts()) != t.server_of(dst) {
        return Err(TopoError::Unreachable {
            src: at,
            dst,
            reason: "NVSwitch reached for a GPU of another server".into(),
        });
    }
    let hop = Hop {
        link: LinkId(t.num_hosts() + dst.0),
        to: dst,
    };
    debug_assert_eq!(Ok(hop), nvswitch_hop(t, at, dst), "NVSwitch layout at {at}");
    Ok(hop)
}

/// An arithmetic switch choice: `(first port, count, first far end, far-end step, first link,
/// link step)`: `count` equal-cost ports laid out at fixed strides.
pub(crate) type PortChoice = (u32, u32, u32, u32, u32, u32);

/// The hop a [`PortChoice`] describes: the flow hash picks `i` among `count`, port `first + i`, its
/// link `link0 + i * link_step`, leading to `to0 + i * step`; read from no table (a debug
/// assertion, naming `family`, checks it against the port table).
#[inline]
pub(crate) fn take_choice(t: &Topology, at: NodeId, flow_hash: u64, c: PortChoice, family: &str) -> Hop {
    let (first, count, to0, step, link0, link_step) = c;
    let i = if count == 1 {
        0
    } else {
        t.ecmp_pick(at, flow_hash, count as usize) as u32
    };
    let hop = Hop {
        link: LinkId(link0 + i * link_step),
        to: NodeId(to0 + i * step),
    };
    debug_assert_eq!(Some(&hop), t.port_hops(at).get((first + i) as usize), "{family} layout at {at}");
    hop
}

/// The first hop of a host with `nics` NIC ports, link ids and far ends computed for a family
/// laid out by [`crate::generators::hosts_with_scale_up`] (GPU `h` -> its NVSwitch is link `h`,
/// the NVSwitch is node `num_hosts + server`): NVLink to a GPU of its own server, else NIC port
/// `i` (the flow hash picks it, as [`host_hop`] does), whose `(link, far end)` is `nic(i)`. A
/// debug assertion checks it against [`host_hop`].
#[inline]
pub(crate) fn host_hop_computed(
    t: &Topology,
    at: NodeId,
    dst: NodeId,
    flow_hash: u64,
    nics: u32,
    nic: impl FnOnce(u32) -> (u32, u32),
) -> Hop {
    let hop = if t.gpus_per_server() > 1 && t.server_of(at) == t.server_of(dst) {
        Hop {
            link: LinkId(at.0),
            to: NodeId(t.num_hosts() + t.server_of(at)),
        }
    } else {
        let i = if nics == 1 {
            0
        } else {
            t.ecmp_pick(at, flow_hash, nics as usize) as u32
        };
        let (link, to) = nic(i);
        Hop {
            link: LinkId(link),
            to: NodeId(to),
        }
    };
    debug_assert_eq!(Ok(hop), host_hop(t, at, dst, flow_hash), "host layout at {at}");
    hop
}

/// Every NIC [`host_hop`] may pick (one unless the host has several planes).
///
/// # Errors
/// As [`host_hop`].
pub fn host_hops(t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
    let ports = t.ports(at);
    let g = t.gpus_per_server();
    if g > 1 && t.server_of(at) == t.server_of(dst) {
        out.push(ports[0]);
        return Ok(());
    }
    let nics = &ports[usize::from(g > 1)..];
    if nics.is_empty() {
        return Err(TopoError::Unreachable {
            src: at,
            dst,
            reason: "host has no NIC".into(),
        });
    }
    out.extend_from_slice(nics);
    Ok(())
}

/// An NVSwitch forwards to the destination GPU of its own server.
///
/// # Errors
/// [`TopoError::Unreachable`] when `dst` is a GPU of another server.
#[inline]
pub fn nvswitch_hop(t: &Topology, at: NodeId, dst: NodeId) -> Result<Hop, TopoError> {
    let ports = t.port_hops(at);
    let l = ports[t.local_rank(dst) as usize];
    if l.to != dst {
        return Err(TopoError::Unreachable {
            src: at,
            dst,
            reason: "NVSwitch reached for a GPU of another server".into(),
        });
    }
    // `dst`, not `l.to`: the same node, but the next hop need not wait on the load (the check
    // above is a predicted branch).
    Ok(Hop { link: l.link, to: dst })
}

/// The next hop of an up-down rule whose switches pick among `count` equal-cost ports starting
/// at port `first`, as `choice(tier)` says (by the flow hash when several); hosts and NVSwitches
/// as in every family. `family` names the rule in errors.
///
/// # Errors
/// What `choice` returns, [`host_hop`]'s and [`nvswitch_hop`]'s errors, and a port outside the
/// switch.
#[inline]
pub fn port_range_hop(
    t: &Topology,
    at: NodeId,
    dst: NodeId,
    flow_hash: u64,
    family: &str,
    choice: impl FnOnce(u8) -> Result<(u32, u32), TopoError>,
) -> Result<Hop, TopoError> {
    let tier = match t.node(at) {
        NodeKind::Host => return host_hop(t, at, dst, flow_hash),
        NodeKind::NvSwitch => return nvswitch_hop(t, at, dst),
        NodeKind::Switch { tier } => tier,
    };
    let (first, count) = choice(tier)?;
    let port = if count == 1 {
        first
    } else {
        first + t.ecmp_pick(at, flow_hash, count as usize) as u32
    };
    t.port_hops(at).get(port as usize).copied().ok_or_else(|| outside(at, dst, family))
}

/// [`port_range_hop`] for a rule that also knows where its ports lead: `choice(tier)` gives
/// `(first, count, to0, step)`, and port `first + i` leads to node `to0 + i * step`. The far
/// end is then computed, not read beside the link, so the next hop does not wait on this
/// hop's load (a debug assertion checks it against the table). Hosts and NVSwitches as in
/// [`port_range_hop`].
///
/// # Errors
/// As [`port_range_hop`].
#[inline]
pub fn port_range_hop_to(
    t: &Topology,
    at: NodeId,
    dst: NodeId,
    flow_hash: u64,
    family: &str,
    choice: impl FnOnce(u8) -> Result<(u32, u32, u32, u32), TopoError>,
) -> Result<Hop, TopoError> {
    let tier = match t.node(at) {
        NodeKind::Host => return host_hop(t, at, dst, flow_hash),
        NodeKind::NvSwitch => return nvswitch_hop(t, at, dst),
        NodeKind::Switch { tier } => tier,
    };
    range_hop_to(t, at, dst, flow_hash, family, choice(tier)?)
}

/// The hop at switch `at` that [`port_range_hop_to`] takes for the choice `(first, count, to0,
/// step)`, for a rule that knows the switch's tier from its id without reading the node table.
///
/// # Errors
/// A port outside the switch.
#[inline]
pub fn range_hop_to(
    t: &Topology,
    at: NodeId,
    dst: NodeId,
    flow_hash: u64,
    family: &str,
    (first, count, to0, step): (u32, u32, u32, u32),
) -> Result<Hop, TopoError> {
    let i = if count == 1 {
        0
    } else {
        t.ecmp_pick(at, flow_hash, count as usize) as u32
    };
    let h = t
        .port_hops(at)
        .get((first + i) as usize)
        .copied()
        .ok_or_else(|| outside(at, dst, family))?;
    let to = NodeId(to0 + i * step);
    debug_assert_eq!(h.to, to, "{family} port layout at {at}");
    Ok(Hop { link: h.link, to })
}

/// Every next hop [`port_range_hop`] may pick.
///
/// # Errors
/// As [`port_range_hop`].
pub fn port_range_hops(
    t: &Topology,
    at: NodeId,
    dst: NodeId,
    out: &mut Vec<LinkId>,
    family: &str,
    choice: impl FnOnce(u8) -> Result<(u32, u32), TopoError>,
) -> Result<(), TopoError> {
    let tier = match t.node(at) {
        NodeKind::Host => return host_hops(t, at, dst, out),
        NodeKind::NvSwitch => {
            out.push(nvswitch_hop(t, at, dst)?.link);
            return Ok(());
        }
        NodeKind::Switch { tier } => tier,
    };
    let (first, count) = choice(tier)?;
    let ports = t.ports(at);
    for port in first..first + count {
        out.push(*ports.get(port as usize).ok_or_else(|| outside(at, dst, family))?);
    }
    Ok(())
}

fn outside(at: NodeId, dst: NodeId, family: &str) -> TopoError {
    TopoError::Unreachable {
        src: at,
        dst,
        reason: format!("{family} port outside the switch"),
    }
}
