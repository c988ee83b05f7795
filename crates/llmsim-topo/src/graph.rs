//! The topology graph: nodes, directed links, per-node ports (CSR), and route expansion.

use llmsim_core::{Bandwidth, LinkId, NodeId, SimTime, mix64};
use serde::Serialize;

use crate::TopoError;
use crate::routing::Routing;

/// The next hops a reachability search follows at a node ([`Topology::reaches`]).
type Candidates<'a> = dyn Fn(NodeId, &mut Vec<LinkId>) -> Result<(), TopoError> + 'a;

/// Longest route, in links, before routing reports a loop.
const MAX_HOPS: usize = 64;

/// What a vertex is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NodeKind {
    /// A GPU with its NIC(s). Hosts are numbered first: `NodeId(0..num_hosts)`.
    Host,
    /// A packet switch; `tier` 1 is the leaf/ToR/edge layer, 2 aggregation/spine, 3 core.
    Switch {
        /// 1 for leaf/ToR/edge, 2 for aggregation/spine, 3 for core.
        tier: u8,
    },
    /// The scale-up switch of one server (NVSwitch).
    NvSwitch,
}

/// What a link is, for reports and for choosing models (NVLink stays on the scale-up model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LinkKind {
    /// GPU <-> NVSwitch.
    NvLink,
    /// NIC <-> first switch.
    HostNic,
    /// Switch <-> switch.
    Fabric,
}

/// One direction of a cable.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Link {
    /// Sending end.
    pub src: NodeId,
    /// Receiving end.
    pub dst: NodeId,
    /// Line rate of this direction.
    pub bandwidth: Bandwidth,
    /// One-way latency (propagation and switch pipeline).
    pub latency: SimTime,
    /// What the link joins.
    pub kind: LinkKind,
}

/// One hop of a route: the link taken and the node it leads to (`link`'s far end). Routing
/// rules return it so that route expansion reads a port's far end from the same cache line as
/// its link id, instead of a second, dependent load from the link table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Hop {
    /// The link taken.
    pub link: LinkId,
    /// Its receiving end.
    pub to: NodeId,
}

/// Bandwidth and propagation latency of a class of links.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkParams {
    /// Line rate of each link, per direction.
    pub bandwidth: Bandwidth,
    /// One-way latency of each link.
    pub latency: SimTime,
}

impl LinkParams {
    /// Link parameters from a rate and a one-way latency.
    pub const fn new(bandwidth: Bandwidth, latency: SimTime) -> Self {
        LinkParams { bandwidth, latency }
    }
}

/// A node's scale-up domain: every GPU of a server reaches an NVSwitch over NVLink.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScaleUp {
    /// GPUs per server (1 means no NVSwitch is built).
    pub gpus_per_server: u32,
    /// NVLink bandwidth per GPU per direction (H100: 450 GB/s = 3.6 Tbit/s).
    pub bandwidth: Bandwidth,
    /// One-way GPU -> NVSwitch latency.
    pub latency: SimTime,
}

impl ScaleUp {
    /// No scale-up domain: one GPU per server, no NVSwitch.
    pub const fn none() -> Self {
        ScaleUp {
            gpus_per_server: 1,
            bandwidth: Bandwidth::ZERO,
            latency: SimTime::ZERO,
        }
    }
    /// DGX H100: 8 GPUs, NVLink 4 at 450 GB/s per direction.
    pub const fn dgx_h100() -> Self {
        ScaleUp {
            gpus_per_server: 8,
            bandwidth: Bandwidth::from_gbytes_per_sec(450),
            latency: SimTime::from_ns(150),
        }
    }
}

/// Builds a [`Topology`] node by node and cable by cable.
#[derive(Default)]
pub struct TopologyBuilder {
    nodes: Vec<NodeKind>,
    links: Vec<Link>,
    /// Packet error rate per link, as ns-3 files carry it; empty while every rate is zero.
    error_rates: Vec<f64>,
}

impl TopologyBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds one node and returns its id.
    pub fn add_node(&mut self, kind: NodeKind) -> NodeId {
        self.nodes.push(kind);
        NodeId::from_idx(self.nodes.len() - 1)
    }
    /// Adds `n` nodes of one kind and returns the id of the first; the rest follow in order.
    pub fn add_nodes(&mut self, kind: NodeKind, n: u32) -> NodeId {
        let first = NodeId::from_idx(self.nodes.len());
        self.nodes.extend(std::iter::repeat_n(kind, n as usize));
        first
    }
    /// Nodes added so far.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    /// Adds one directed link and returns its id.
    pub fn add_link(&mut self, src: NodeId, dst: NodeId, p: LinkParams, kind: LinkKind) -> LinkId {
        self.links.push(Link {
            src,
            dst,
            bandwidth: p.bandwidth,
            latency: p.latency,
            kind,
        });
        LinkId::from_idx(self.links.len() - 1)
    }
    /// Reserves room for `n` more directed links.
    pub fn reserve_links(&mut self, n: usize) {
        self.links.reserve(n);
    }
    /// Sets the packet error rate of a link (ns-3's per-link error model); zero by default.
    pub fn set_error_rate(&mut self, l: LinkId, rate: f64) {
        if rate == 0.0 && self.error_rates.is_empty() {
            return;
        }
        if self.error_rates.len() < self.links.len() {
            self.error_rates.resize(self.links.len(), 0.0);
        }
        self.error_rates[l.idx()] = rate;
    }
    /// Adds a cable: the `a -> b` link and the `b -> a` link.
    pub fn add_cable(&mut self, a: NodeId, b: NodeId, p: LinkParams, kind: LinkKind) -> (LinkId, LinkId) {
        (self.add_link(a, b, p, kind), self.add_link(b, a, p, kind))
    }

    /// Freezes the graph. A node's ports are its outgoing links **in the order they were added**;
    /// routing rules rely on that order.
    ///
    /// # Errors
    /// `TopoError::Invalid` if a host index is not below `num_hosts`, `num_hosts` is over the
    /// node count, a link's end is not a node, or a link has zero bandwidth.
    pub fn build(self, name: String, num_hosts: u32, scale_up: ScaleUp, routing: Routing, ecmp_seed: u64) -> Result<Topology, TopoError> {
        let n = self.nodes.len();
        if num_hosts as usize > n {
            return Err(TopoError::invalid(
                "hosts",
                format!("num_hosts {num_hosts} is over the {n} nodes of the topology"),
            ));
        }
        // Engines index per-node tables by link ends: every end must be a node.
        if let Some(l) = self.links.iter().find(|l| l.src.idx() >= n || l.dst.idx() >= n) {
            return Err(TopoError::invalid(
                "links",
                format!("link {} -> {} names a node outside 0..{n}; add the node first", l.src, l.dst),
            ));
        }
        if self.nodes.iter().take(num_hosts as usize).any(|k| *k != NodeKind::Host)
            || self.nodes.iter().skip(num_hosts as usize).any(|k| *k == NodeKind::Host)
        {
            return Err(TopoError::invalid("hosts", "hosts must be the first num_hosts nodes"));
        }
        if let Some(l) = self.links.iter().find(|l| l.bandwidth.is_zero()) {
            return Err(TopoError::invalid(
                "bandwidth",
                format!(
                    "link {} -> {} has zero bandwidth; give every link a positive rate such as \"400Gbps\"",
                    l.src, l.dst
                ),
            ));
        }
        let mut out_start = vec![0u32; n + 1];
        for l in &self.links {
            out_start[l.src.idx() + 1] += 1;
        }
        for i in 0..n {
            out_start[i + 1] += out_start[i];
        }
        let mut fill = out_start.clone();
        let mut out_links = vec![LinkId(0); self.links.len()];
        for (i, l) in self.links.iter().enumerate() {
            let s = l.src.idx();
            out_links[fill[s] as usize] = LinkId::from_idx(i);
            fill[s] += 1;
        }
        let link_dst: Vec<NodeId> = self.links.iter().map(|l| l.dst).collect();
        let port_hops = out_links
            .iter()
            .map(|&l| Hop {
                link: l,
                to: link_dst[l.idx()],
            })
            .collect();
        let mut error_rates = self.error_rates;
        if !error_rates.is_empty() {
            error_rates.resize(self.links.len(), 0.0);
        }
        Ok(Topology {
            error_rates,
            name,
            nodes: self.nodes,
            links: self.links,
            out_start,
            out_links,
            port_hops,
            num_hosts,
            scale_up,
            gpus: crate::fastdiv::Divisor::new(scale_up.gpus_per_server),
            routing,
            ecmp_seed,
            link_dst,
            down: Vec::new(),
            num_down: 0,
        })
    }
}

/// A frozen topology with its routing rule. Cloned only to change links during a run (a fault):
/// the routing rule's parameters are O(1), its BFS caches are shared data.
#[derive(Clone)]
pub struct Topology {
    /// Name for reports, e.g. `rail-fat-tree-4seg-1plane-256`.
    pub name: String,
    nodes: Vec<NodeKind>,
    links: Vec<Link>,
    out_start: Vec<u32>,
    out_links: Vec<LinkId>,
    /// `out_links` with each link's far end beside it, for route expansion ([`Hop`]).
    port_hops: Vec<Hop>,
    num_hosts: u32,
    scale_up: ScaleUp,
    /// `scale_up.gpus_per_server` as a [`crate::fastdiv::Divisor`], for `server_of` on every hop.
    gpus: crate::fastdiv::Divisor,
    routing: Routing,
    ecmp_seed: u64,
    /// `links[i].dst`, packed: route expansion touches 4 bytes per hop instead of a whole `Link`.
    link_dst: Vec<NodeId>,
    error_rates: Vec<f64>,
    /// Failed links (`faults:`), indexed by link; empty while none is down, so that routing
    /// takes its plain path.
    down: Vec<bool>,
    num_down: u32,
}

impl Topology {
    /// Number of nodes: hosts, NVSwitches and packet switches.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    /// Number of directed links (two per cable).
    pub fn num_links(&self) -> usize {
        self.links.len()
    }
    /// Number of hosts (GPUs); they are `NodeId(0..num_hosts)`.
    pub fn num_hosts(&self) -> u32 {
        self.num_hosts
    }
    /// What node `n` is.
    pub fn node(&self, n: NodeId) -> NodeKind {
        self.nodes[n.idx()]
    }
    /// Every node's kind, indexed by node id.
    pub fn nodes(&self) -> &[NodeKind] {
        &self.nodes
    }
    /// Link `l`.
    #[inline]
    pub fn link(&self, l: LinkId) -> &Link {
        &self.links[l.idx()]
    }
    /// Every directed link, indexed by link id.
    pub fn links(&self) -> &[Link] {
        &self.links
    }
    /// Outgoing links of `n`, in port order.
    #[inline]
    pub fn ports(&self, n: NodeId) -> &[LinkId] {
        &self.out_links[self.out_start[n.idx()] as usize..self.out_start[n.idx() + 1] as usize]
    }
    /// Outgoing links of `n` with their far ends, in port order ([`Topology::ports`] paired with
    /// each link's `dst`): what routing rules index to return a [`Hop`].
    #[inline]
    pub fn port_hops(&self, n: NodeId) -> &[Hop] {
        &self.port_hops[self.out_start[n.idx()] as usize..self.out_start[n.idx() + 1] as usize]
    }
    /// The hop over link `l`: the link and its far end.
    #[inline]
    pub fn hop_over(&self, l: LinkId) -> Hop {
        Hop {
            link: l,
            to: self.link_dst[l.idx()],
        }
    }
    /// The scale-up domain of every server.
    pub fn scale_up(&self) -> ScaleUp {
        self.scale_up
    }
    /// GPUs per server (1 without NVSwitch).
    pub fn gpus_per_server(&self) -> u32 {
        self.scale_up.gpus_per_server
    }
    /// Number of servers: hosts divided by GPUs per server.
    pub fn num_servers(&self) -> u32 {
        self.num_hosts / self.scale_up.gpus_per_server
    }
    /// Server (node in NCCL's sense) of a host.
    #[inline]
    pub fn server_of(&self, host: NodeId) -> u32 {
        self.gpus.div(host.0)
    }
    /// Index of a host inside its server, which is also its NIC's rail.
    #[inline]
    pub fn local_rank(&self, host: NodeId) -> u32 {
        self.gpus.rem(host.0)
    }
    /// The host with local index `local` in server `server`.
    #[inline]
    pub fn host(&self, server: u32, local: u32) -> NodeId {
        NodeId(server * self.scale_up.gpus_per_server + local)
    }
    /// Packet error rate of a link (0 unless an imported ns-3 file set one).
    pub fn link_error_rate(&self, l: LinkId) -> f64 {
        self.error_rates.get(l.idx()).copied().unwrap_or(0.0)
    }
    /// True for `NodeId(0..num_hosts)`.
    #[inline]
    pub fn is_host(&self, n: NodeId) -> bool {
        n.0 < self.num_hosts
    }
    /// The rule this topology routes by.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }
    /// The family's ring order key of `host` for ring variant `variant`
    /// ([`crate::RoutingRule::ring_order_key`]); `None` where rank order is the ring.
    pub fn ring_order_key(&self, host: NodeId, variant: u32) -> Option<u64> {
        match &self.routing {
            Routing::Rule(r) => r.ring_order_key(self, host, variant),
            _ => None,
        }
    }
    /// Whether hosts relay traffic for other hosts ([`crate::RoutingRule::hosts_forward`]).
    pub fn hosts_forward(&self) -> bool {
        match &self.routing {
            Routing::Rule(r) => r.hosts_forward(),
            _ => false,
        }
    }
    /// Replaces the routing rule (the caller keeps it consistent with the graph).
    pub fn set_routing(&mut self, routing: Routing) {
        self.routing = routing;
    }
    /// Per-switch ECMP seed, derived from the topology seed and the node id. Computed rather than
    /// stored: two multiplies are cheaper than a cache miss on a 100k-node array.
    #[inline]
    pub fn switch_seed(&self, n: NodeId) -> u64 {
        mix64(self.ecmp_seed ^ mix64(u64::from(n.0)))
    }
    /// ECMP choice among `n` equal-cost ports at node `at`, from the flow hash and the node's seed.
    #[inline]
    pub fn ecmp_pick(&self, at: NodeId, flow_hash: u64, n: usize) -> usize {
        debug_assert!(n > 0);
        ((mix64(flow_hash ^ self.switch_seed(at)) as u128 * n as u128) >> 64) as usize
    }

    /// Takes link `l` down (`true`) or brings it back up. Routing then avoids it: at each hop
    /// the rule's equal-cost candidates are narrowed to those from which the rule still reaches
    /// the destination without a failed link, and the flow hash picks among those. No table is
    /// built; a route with links down costs a search over the rule's candidates.
    ///
    /// # Errors
    /// `TopoError::Invalid` if the topology has no link `l`.
    pub fn set_link_down(&mut self, l: LinkId, down: bool) -> Result<(), TopoError> {
        if l.idx() >= self.links.len() {
            return Err(TopoError::invalid(
                "link",
                format!("no link {} (the topology has {})", l.0, self.links.len()),
            ));
        }
        if self.down.is_empty() {
            if !down {
                return Ok(());
            }
            self.down = vec![false; self.links.len()];
        }
        if self.down[l.idx()] != down {
            self.down[l.idx()] = down;
            if down {
                self.num_down += 1;
            } else {
                self.num_down -= 1;
            }
        }
        Ok(())
    }

    /// Whether link `l` is down.
    #[inline]
    pub fn is_link_down(&self, l: LinkId) -> bool {
        self.down.get(l.idx()).copied().unwrap_or(false)
    }

    /// Links down now.
    pub fn links_down(&self) -> u32 {
        self.num_down
    }

    /// Sets the bandwidth of link `l` (a degraded link).
    ///
    /// # Errors
    /// `TopoError::Invalid` if there is no link `l` or `bw` is zero (take the link down instead).
    pub fn set_link_bandwidth(&mut self, l: LinkId, bw: Bandwidth) -> Result<(), TopoError> {
        if bw.is_zero() {
            return Err(TopoError::invalid(
                "bandwidth",
                "a degraded link needs a positive bandwidth such as \"100Gbps\"; take it down with action: down instead",
            ));
        }
        match self.links.get_mut(l.idx()) {
            Some(link) => {
                link.bandwidth = bw;
                Ok(())
            }
            None => Err(TopoError::invalid(
                "link",
                format!("no link {} (the topology has {})", l.0, self.links.len()),
            )),
        }
    }

    /// Sets the packet loss rate of link `l` (a lossy link): each packet crossing it is dropped
    /// with this probability by a backend that simulates packets.
    ///
    /// # Errors
    /// `TopoError::Invalid` if there is no link `l` or `rate` is not in [0, 1).
    pub fn set_link_error_rate(&mut self, l: LinkId, rate: f64) -> Result<(), TopoError> {
        if l.idx() >= self.links.len() {
            return Err(TopoError::invalid(
                "link",
                format!("no link {} (the topology has {})", l.0, self.links.len()),
            ));
        }
        if !(rate.is_finite() && (0.0..1.0).contains(&rate)) {
            return Err(TopoError::invalid(
                "loss",
                format!("{rate} is not a loss rate; give a probability in [0, 1), e.g. 1e-4"),
            ));
        }
        if self.error_rates.len() < self.links.len() {
            if rate == 0.0 {
                return Ok(());
            }
            self.error_rates.resize(self.links.len(), 0.0);
        }
        self.error_rates[l.idx()] = rate;
        Ok(())
    }

    /// Appends to `out` the next hops at `at` toward host `dst` that the rule allows and from
    /// which `dst` stays reachable with the links that are down: every equal-cost candidate
    /// when none is.
    ///
    /// # Errors
    /// As [`Topology::next_hop`]; `TopoError::Unreachable` when failed links cut every way.
    pub fn next_hops(&self, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        if dst.0 >= self.num_hosts {
            return Err(TopoError::NotAHost(dst));
        }
        let from = out.len();
        self.routing.next_hops(self, at, dst, out)?;
        if self.num_down == 0 {
            return Ok(());
        }
        let mut i = from;
        while i < out.len() {
            if self.reaches(out[i], dst, MAX_HOPS) {
                i += 1;
            } else {
                out.remove(i);
            }
        }
        if out.len() == from {
            return Err(self.cut_off(at, dst));
        }
        Ok(())
    }

    /// Whether the rule gets from link `l`'s far end to `dst` over links that are up, `l`
    /// included, within `hops` more links.
    fn reaches(&self, l: LinkId, dst: NodeId, hops: usize) -> bool {
        self.reaches_by(l, dst, hops, &|at, c: &mut Vec<LinkId>| self.routing.next_hops(self, at, dst, c))
    }

    /// [`Topology::reaches`] following flow `flow_hash`'s candidates in route class `class`
    /// ([`Routing::flow_hops`]).
    fn reaches_flow(&self, l: LinkId, dst: NodeId, flow_hash: u64, class: u32) -> bool {
        self.reaches_by(l, dst, MAX_HOPS, &|at, c: &mut Vec<LinkId>| {
            self.routing.flow_hops(self, at, dst, flow_hash, class, c)
        })
    }

    fn reaches_by(&self, l: LinkId, dst: NodeId, hops: usize, candidates: &Candidates<'_>) -> bool {
        if self.is_link_down(l) {
            return false;
        }
        let at = self.link_dst[l.idx()];
        if at == dst {
            return true;
        }
        if hops == 0 || (self.is_host(at) && !self.hosts_forward()) {
            return false;
        }
        let mut c = Vec::new();
        if candidates(at, &mut c).is_err() {
            return false;
        }
        c.into_iter().any(|m| self.reaches_by(m, dst, hops - 1, candidates))
    }

    /// Appends to `out` the next hops at `at` toward host `dst` that flow `flow_hash`'s route in
    /// route class `class` may take ([`Routing::flow_hops`]: a Valiant dragonfly route's
    /// candidates toward its intermediate group) and from which it still reaches `dst` with the
    /// links that are down; where failed links cut every one, [`Topology::next_hops`] (the rule's
    /// minimal candidates around them). The same as `next_hops` for a rule whose route depends
    /// on the flow only through the ECMP pick. Class 0 is the route [`Topology::route`] takes.
    ///
    /// # Errors
    /// As [`Topology::next_hops`].
    pub fn flow_next_hops(&self, at: NodeId, dst: NodeId, flow_hash: u64, class: u32, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        if !self.routing.flow_specific() {
            return self.next_hops(at, dst, out);
        }
        if dst.0 >= self.num_hosts {
            return Err(TopoError::NotAHost(dst));
        }
        let from = out.len();
        if self.routing.flow_hops(self, at, dst, flow_hash, class, out).is_ok() {
            if self.num_down == 0 {
                return Ok(());
            }
            let mut i = from;
            while i < out.len() {
                if self.reaches_flow(out[i], dst, flow_hash, class) {
                    i += 1;
                } else {
                    out.remove(i);
                }
            }
            if out.len() > from {
                return Ok(());
            }
        }
        out.truncate(from);
        self.next_hops(at, dst, out)
    }

    fn cut_off(&self, at: NodeId, dst: NodeId) -> TopoError {
        TopoError::Unreachable {
            src: at,
            dst,
            reason: format!(
                "every route the {} rule allows crosses one of the {} failed links; bring links up or fail fewer",
                self.routing.name(),
                self.num_down
            ),
        }
    }

    /// [`Routing::hop`], around failed links when any is down.
    #[inline]
    fn hop(&self, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        if self.num_down == 0 {
            return self.routing.hop(self, at, dst, flow_hash);
        }
        self.hop_around(at, dst, flow_hash, 0)
    }

    /// The hop of flow `flow_hash`'s route in route class `class` around the links that are
    /// down: the flow hash picks among [`Topology::flow_next_hops`]. A rule whose route depends
    /// on the flow (Valiant) keeps its choice where it survives the failures, and every router
    /// decides from (node, destination, flow hash) alone, as a switch would: once a hop keeps
    /// the flow's choice, every later router can keep it too; before that, each hop of the
    /// minimal fallback brings the flow strictly closer, so the route ends.
    fn hop_around(&self, at: NodeId, dst: NodeId, flow_hash: u64, class: u32) -> Result<Hop, TopoError> {
        let mut c = Vec::new();
        self.flow_next_hops(at, dst, flow_hash, class, &mut c)?;
        Ok(self.hop_over(match c.len() {
            1 => c[0],
            n => c[self.ecmp_pick(at, flow_hash, n)],
        }))
    }

    /// The outgoing link `at` forwards a packet of flow `flow_hash` on, toward host `dst`.
    ///
    /// # Errors
    /// `TopoError::Unreachable` if the rule has no way to `dst`;
    /// `TopoError::NotAHost` if `dst` is not a host or `at` is not a node.
    #[inline]
    pub fn next_hop(&self, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
        if dst.0 >= self.num_hosts {
            return Err(TopoError::NotAHost(dst));
        }
        if at.idx() >= self.nodes.len() {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "no such node".into(),
            });
        }
        self.hop(at, dst, flow_hash).map(|h| h.link)
    }

    /// Appends to `out` the links from host `src` to host `dst` for flow `flow_hash`.
    /// `src == dst` gives an empty path.
    ///
    /// # Errors
    /// `TopoError::NotAHost` for a non-host endpoint, `TopoError::Unreachable` when the rule finds
    /// no way or loops.
    pub fn route(&self, src: NodeId, dst: NodeId, flow_hash: u64, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        self.route_by(src, dst, out, |at| self.hop(at, dst, flow_hash))
    }

    /// Route classes a load-aware chooser may pick among ([`crate::RoutingRule::route_classes`]):
    /// a dragonfly with UGAL routing offers its minimal route and several Valiant ones; else 1.
    pub fn route_classes(&self) -> u32 {
        match &self.routing {
            Routing::Rule(r) => r.route_classes(),
            _ => 1,
        }
    }

    /// [`Topology::route`] in route class `class` ([`Topology::route_classes`]). With links
    /// down, the class's route around them ([`Topology::flow_next_hops`]).
    ///
    /// # Errors
    /// As [`Topology::route`].
    pub fn route_in_class(&self, src: NodeId, dst: NodeId, flow_hash: u64, class: u32, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        match &self.routing {
            Routing::Rule(_) if self.num_down > 0 && class > 0 => {
                self.route_by(src, dst, out, |at| self.hop_around(at, dst, flow_hash, class))
            }
            Routing::Rule(r) if class > 0 => self.route_by(src, dst, out, |at| r.hop_in_class(self, at, dst, flow_hash, class)),
            _ => self.route(src, dst, flow_hash, out),
        }
    }

    #[inline]
    fn route_by(
        &self,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
        hop: impl Fn(NodeId) -> Result<Hop, TopoError>,
    ) -> Result<(), TopoError> {
        for h in [src, dst] {
            if h.0 >= self.num_hosts {
                return Err(TopoError::NotAHost(h));
            }
        }
        let mut at = src;
        let max_hops = MAX_HOPS.min(self.nodes.len());
        let start = out.len();
        while at != dst {
            if out.len() - start >= max_hops {
                out.truncate(start);
                return Err(TopoError::Unreachable {
                    src,
                    dst,
                    reason: "routing loop".into(),
                });
            }
            let h = hop(at)?;
            out.push(h.link);
            at = h.to;
        }
        Ok(())
    }

    /// Sum of link latencies and the bottleneck bandwidth of a path.
    pub fn path_latency_and_bottleneck(&self, path: &[LinkId]) -> (SimTime, Bandwidth) {
        let mut lat = SimTime::ZERO;
        let mut bw = Bandwidth::from_bps(u64::MAX);
        for l in path {
            let l = &self.links[l.idx()];
            lat += l.latency;
            bw = bw.min(l.bandwidth);
        }
        (lat, bw)
    }

    /// Approximate heap bytes held by this topology (graph + routing state).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<NodeKind>()
            + self.links.capacity() * size_of::<Link>()
            + self.out_start.capacity() * 4
            + self.out_links.capacity() * size_of::<LinkId>()
            + self.port_hops.capacity() * size_of::<Hop>()
            + self.link_dst.capacity() * size_of::<NodeId>()
            + self.error_rates.capacity() * 8
            + self.down.capacity()
            + self.name.capacity()
            + self.routing.heap_bytes()
    }
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .field("hosts", &self.num_hosts)
            .field("nodes", &self.nodes.len())
            .field("links", &self.links.len())
            .finish()
    }
}
