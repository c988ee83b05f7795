//! `describe`: counts, bandwidths, diameter and a sample route of a topology, for humans and JSON.

use std::fmt;

use llmsim_core::{Bandwidth, LinkId, NodeId};
use serde::Serialize;

use crate::graph::{LinkKind, NodeKind, Topology};
use crate::routing::Routing;

/// What `llmsim topo describe` prints. Bandwidths are one direction; NVLink is not counted in the
/// bandwidth figures (they describe the scale-out network).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopologySummary {
    /// The topology's name.
    pub name: String,
    /// The routing rule's name.
    pub routing: String,
    /// Number of hosts (GPUs).
    pub hosts: u32,
    /// Number of servers.
    pub servers: u32,
    /// GPUs per server.
    pub gpus_per_server: u32,
    /// Packet switches per tier; index 0 is tier 1 (leaf / ToR / edge).
    pub switches_per_tier: Vec<u32>,
    /// Number of NVSwitches.
    pub nvswitches: u32,
    /// Directed links (two per cable), NVLink included.
    pub links: usize,
    /// Sum of every host's NIC bandwidth.
    pub host_injection_bandwidth: Bandwidth,
    /// Sum of every directed scale-out link's bandwidth.
    pub total_bandwidth: Bandwidth,
    /// Capacity from the first half of the hosts (by id) to the second half. Generated trees:
    /// analytic, `hosts/2 * min(NIC, uplink share per host at each tier whose groups lie inside a
    /// half)`, exact for fully populated instances. Imported graphs: a max-flow min cut.
    pub bisection_bandwidth: Bandwidth,
    /// `(hosts/2 * NIC) / bisection`: 1.0 is non-blocking.
    pub oversubscription: f64,
    /// Longest host-to-host path, in links.
    pub diameter_hops: u32,
    /// False when the diameter of a large imported graph was taken from a sample of sources.
    pub diameter_exact: bool,
    /// Route of flow hash 0 from host 0 to the last host, one entry per node:
    /// `"16(switch t1) -400Gbps/500.000ns->"`, the last without an arrow.
    pub sample_route: Vec<String>,
    /// Heap held by the graph and its routing state.
    pub heap_bytes: usize,
    /// Cost proxies of the scale-out fabric (switches are `switches_per_tier`).
    pub cost: CostProxies,
}

/// What a fabric costs, in the units architects price it by. Optics assume the common build:
/// a host NIC reaches its first switch over copper in the rack, every switch-to-switch cable is
/// optical with a transceiver at each end (Meta's rail-only paper and HPN count optics this
/// way); NVLink is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CostProxies {
    /// Packet switches (NVSwitches not counted).
    pub switches: u32,
    /// Switch ports in use: cable ends at a packet switch.
    pub switch_ports: u64,
    /// Scale-out cables: host-to-switch and switch-to-switch.
    pub cables: u64,
    /// Optical transceivers: two per switch-to-switch cable.
    pub optics: u64,
}

fn kind_text(k: NodeKind) -> String {
    match k {
        NodeKind::Host => "host".into(),
        NodeKind::NvSwitch => "nvswitch".into(),
        NodeKind::Switch { tier } => format!("switch t{tier}"),
    }
}

fn sum_bw(it: impl Iterator<Item = Bandwidth>) -> Bandwidth {
    Bandwidth::from_bps(it.fold(0u64, |a, b| a.saturating_add(b.bps())))
}

impl Topology {
    /// Bandwidth of the NIC port(s) of one host (all planes).
    pub fn nic_bandwidth(&self, host: NodeId) -> Bandwidth {
        sum_bw(
            self.ports(host)
                .iter()
                .map(|&l| self.link(l))
                .filter(|l| l.kind != LinkKind::NvLink)
                .map(|l| l.bandwidth),
        )
    }

    fn up_bandwidth(&self, switch: NodeId) -> Bandwidth {
        sum_bw(
            self.ports(switch)
                .iter()
                .map(|&l| self.link(l))
                .filter(|l| l.kind == LinkKind::Fabric && l.dst > switch)
                .map(|l| l.bandwidth),
        )
    }

    /// `(hosts per group, uplink bandwidth per group)` of each tier below the top of a generated
    /// tree; `None` for imported graphs.
    fn tree_tiers(&self) -> Option<Vec<(u64, u64)>> {
        Some(match self.routing() {
            Routing::Flat { .. } => vec![],
            Routing::FatTree(r) => {
                let h = u64::from(r.half_k);
                let pod: u64 = (0..r.half_k).map(|j| self.up_bandwidth(NodeId(r.agg0 + j)).bps()).sum();
                vec![(h, self.up_bandwidth(NodeId(r.edge0)).bps()), (h * h, pod)]
            }
            Routing::SpineLeaf(r) => vec![(u64::from(r.hosts_per_leaf), self.up_bandwidth(NodeId(r.leaf0)).bps())],
            Routing::RailFatTree(r) => {
                let per_leaf = self.up_bandwidth(NodeId(r.leaf0)).bps();
                let seg_hosts = u64::from(r.servers_per_segment) * u64::from(r.rails);
                vec![(seg_hosts, per_leaf * u64::from(r.rails) * u64::from(r.planes))]
            }
            Routing::Bfs(_) | Routing::Rule(_) => return None,
        })
    }

    /// Capacity from hosts `0..H/2` to hosts `H - H/2..H`, by max flow over the scale-out links.
    pub fn bisection_by_max_flow(&self) -> Bandwidth {
        let h = self.num_hosts();
        if h < 2 {
            return Bandwidth::ZERO;
        }
        let half = h / 2;
        let side = |n: NodeId| -> u8 {
            if n.0 < half {
                1
            } else if n.0 >= h - half && n.0 < h {
                2
            } else if n.0 < h {
                3
            } else {
                0
            }
        };
        let n = self.num_nodes();
        let (s, t) = (n, n + 1);
        let mut f = MaxFlow::new(n + 2);
        for l in self.links() {
            let (a, b) = (side(l.src), side(l.dst));
            // Hosts do not forward: no link into the source half, out of the sink half, or via an
            // unassigned middle host.
            if l.kind == LinkKind::NvLink || b == 1 || a == 2 || a == 3 || b == 3 {
                continue;
            }
            f.add_edge(l.src.idx(), l.dst.idx(), l.bandwidth.bps());
        }
        for i in 0..half {
            f.add_edge(s, i as usize, u64::MAX / 4);
            f.add_edge((h - 1 - i) as usize, t, u64::MAX / 4);
        }
        Bandwidth::from_bps(f.run(s, t))
    }

    fn bisection(&self) -> Bandwidth {
        let h = u64::from(self.num_hosts());
        if h < 2 {
            return Bandwidth::ZERO;
        }
        if let Routing::Rule(r) = self.routing()
            && let Some(b) = r.bisection(self)
        {
            return b;
        }
        let Some(tiers) = self.tree_tiers() else {
            return self.bisection_by_max_flow();
        };
        let half = h / 2;
        let mut best = u128::from(half) * u128::from(self.nic_bandwidth(NodeId(0)).bps());
        for (group, up) in tiers {
            if group > 0 && group <= half {
                best = best.min(u128::from(half) * u128::from(up) / u128::from(group));
            }
        }
        Bandwidth::from_bps(u64::try_from(best).unwrap_or(u64::MAX))
    }

    fn diameter(&self) -> (u32, bool) {
        let h = self.num_hosts();
        let servers = self.num_servers();
        if h < 2 {
            return (0, true);
        }
        let d = match self.routing() {
            Routing::Flat { .. } => 2,
            Routing::FatTree(r) => {
                if r.pods > 1 {
                    6
                } else if h > r.half_k && servers > 1 {
                    4
                } else {
                    2
                }
            }
            Routing::SpineLeaf(r) => {
                if h > r.hosts_per_leaf && servers > 1 {
                    4
                } else {
                    2
                }
            }
            Routing::RailFatTree(r) => {
                if servers > 1 && (r.rails > 1 || r.segments > 1) {
                    4
                } else {
                    2
                }
            }
            Routing::Bfs(_) => return self.diameter_by_bfs(),
            Routing::Rule(r) => match r.diameter(self) {
                Some(d) => d,
                None => return self.diameter_by_bfs(),
            },
        };
        (d, true)
    }

    /// Longest shortest host-to-host path (hosts do not forward; GPUs of a server meet over NVLink
    /// in 2 hops). Exact up to ~3e8 node-visits, else from 64 spread sources (a lower bound).
    fn diameter_by_bfs(&self) -> (u32, bool) {
        let h = self.num_hosts();
        let n = self.num_nodes();
        let work = u64::from(h) * (n + self.num_links()) as u64;
        let (step, exact) = if work > 300_000_000 { ((h / 64).max(1), false) } else { (1, true) };
        let mut dist = vec![u32::MAX; n];
        let mut queue = Vec::with_capacity(n);
        let mut best = 0u32;
        let g = self.gpus_per_server();
        if g > 1 && h > 1 {
            best = 2;
        }
        let mut src = 0;
        while src < h {
            dist.fill(u32::MAX);
            queue.clear();
            dist[src as usize] = 0;
            queue.push(NodeId(src));
            let mut head = 0;
            while head < queue.len() {
                let v = queue[head];
                head += 1;
                if v.0 != src && self.is_host(v) {
                    if g == 1 || self.server_of(v) != self.server_of(NodeId(src)) {
                        best = best.max(dist[v.idx()]);
                    }
                    continue;
                }
                for &l in self.ports(v) {
                    let link = self.link(l);
                    if link.kind == LinkKind::NvLink {
                        continue;
                    }
                    if dist[link.dst.idx()] == u32::MAX {
                        dist[link.dst.idx()] = dist[v.idx()] + 1;
                        queue.push(link.dst);
                    }
                }
            }
            src += step;
        }
        (best, exact)
    }

    /// Counts, bandwidths, diameter and a sample route.
    pub fn describe(&self) -> TopologySummary {
        let mut switches_per_tier = Vec::new();
        let mut nvswitches = 0;
        for &k in self.nodes() {
            match k {
                NodeKind::Switch { tier } => {
                    let t = usize::from(tier.max(1)) - 1;
                    if switches_per_tier.len() <= t {
                        switches_per_tier.resize(t + 1, 0);
                    }
                    switches_per_tier[t] += 1;
                }
                NodeKind::NvSwitch => nvswitches += 1,
                NodeKind::Host => {}
            }
        }
        let h = self.num_hosts();
        let host_injection_bandwidth = sum_bw((0..h).map(|i| self.nic_bandwidth(NodeId(i))));
        let total_bandwidth = sum_bw(self.links().iter().filter(|l| l.kind != LinkKind::NvLink).map(|l| l.bandwidth));
        let bisection_bandwidth = self.bisection();
        let offered = f64::from(h / 2) * self.nic_bandwidth(NodeId(0)).bps_f64();
        let oversubscription = if bisection_bandwidth.is_zero() {
            if h < 2 { 1.0 } else { f64::INFINITY }
        } else {
            offered / bisection_bandwidth.bps_f64()
        };
        let (diameter_hops, diameter_exact) = self.diameter();
        let mut cost = CostProxies {
            switches: switches_per_tier.iter().sum(),
            ..CostProxies::default()
        };
        let is_switch = |n: NodeId| matches!(self.node(n), NodeKind::Switch { .. });
        for l in self.links() {
            if l.kind == LinkKind::NvLink {
                continue;
            }
            // Directed links: each cable appears twice; count its ends once, from the link
            // leaving each end.
            cost.switch_ports += u64::from(is_switch(l.src));
            if l.src.0 < l.dst.0 {
                cost.cables += 1;
                cost.optics += 2 * u64::from(is_switch(l.src) && is_switch(l.dst));
            }
        }
        TopologySummary {
            name: self.name.clone(),
            routing: self.routing().name().to_string(),
            hosts: h,
            servers: self.num_servers(),
            gpus_per_server: self.gpus_per_server(),
            switches_per_tier,
            nvswitches,
            links: self.num_links(),
            host_injection_bandwidth,
            total_bandwidth,
            bisection_bandwidth,
            oversubscription,
            diameter_hops,
            diameter_exact,
            sample_route: self.route_text(NodeId(0), NodeId(h.saturating_sub(1)), 0),
            heap_bytes: self.heap_bytes(),
            cost,
        }
    }

    /// A route as text, one entry per node: `"0(host) -400Gbps/500.000ns->"`, ending with the
    /// destination; an unroutable pair gives one entry with the error.
    pub fn route_text(&self, src: NodeId, dst: NodeId, flow_hash: u64) -> Vec<String> {
        let mut path: Vec<LinkId> = Vec::new();
        if let Err(e) = self.route(src, dst, flow_hash, &mut path) {
            return vec![e.to_string()];
        }
        let mut out = Vec::with_capacity(path.len() + 1);
        let mut at = src;
        for &l in &path {
            let link = self.link(l);
            out.push(format!(
                "{}({}) -{}/{}->",
                at,
                kind_text(self.node(at)),
                link.bandwidth,
                link.latency
            ));
            at = link.dst;
        }
        out.push(format!("{}({})", at, kind_text(self.node(at))));
        out
    }
}

impl TopologySummary {
    /// Switches per tier as `t1: 16`, `t2: 8`, ...
    fn tiers(&self) -> Vec<String> {
        self.switches_per_tier
            .iter()
            .enumerate()
            .map(|(i, n)| format!("t{}: {n}", i + 1))
            .collect()
    }

    /// The scale-out fabric in one line, for a run's header: switches per tier, NIC bandwidth per
    /// GPU, oversubscription and bisection, e.g.
    /// `switches t1: 16, t2: 8; NIC 400Gbps per GPU; oversubscription 1.00:1; bisection 25.6Tbps`.
    pub fn fabric_line(&self) -> String {
        let tiers = self.tiers();
        let switches = if tiers.is_empty() {
            "no switches".to_string()
        } else {
            format!("switches {}", tiers.join(", "))
        };
        let per_gpu = Bandwidth::from_bps(self.host_injection_bandwidth.bps() / u64::from(self.hosts.max(1)));
        format!(
            "{switches}; NIC {per_gpu} per GPU; oversubscription {:.2}:1; bisection {}; {} optics",
            self.oversubscription, self.bisection_bandwidth, self.cost.optics
        )
    }
}

impl fmt::Display for TopologySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "topology      {} (routing: {})", self.name, self.routing)?;
        writeln!(
            f,
            "hosts         {} GPUs in {} servers of {}",
            self.hosts, self.servers, self.gpus_per_server
        )?;
        let tiers = self.tiers();
        writeln!(
            f,
            "switches      {} ({}), NVSwitches {}",
            self.switches_per_tier.iter().sum::<u32>(),
            tiers.join(", "),
            self.nvswitches
        )?;
        writeln!(f, "links         {} directed ({} cables)", self.links, self.links / 2)?;
        writeln!(f, "injection     {} (all host NICs)", self.host_injection_bandwidth)?;
        writeln!(
            f,
            "total         {} (all scale-out links, one direction each)",
            self.total_bandwidth
        )?;
        writeln!(f, "bisection     {} (first half of hosts -> second half)", self.bisection_bandwidth)?;
        writeln!(f, "oversub.      {:.2}:1", self.oversubscription)?;
        writeln!(
            f,
            "diameter      {} hops{}",
            self.diameter_hops,
            if self.diameter_exact { "" } else { " (sampled)" }
        )?;
        writeln!(
            f,
            "cost proxies  {} switches, {} switch ports, {} cables, {} optics (two per switch-to-switch cable)",
            self.cost.switches, self.cost.switch_ports, self.cost.cables, self.cost.optics
        )?;
        writeln!(f, "memory        {:.1} MiB", self.heap_bytes as f64 / (1024.0 * 1024.0))?;
        write!(f, "sample route  {}", self.sample_route.join(" "))
    }
}

/// Dinic's max flow on a small adjacency-list graph (used for imported graphs and in tests).
struct MaxFlow {
    head: Vec<usize>,
    to: Vec<usize>,
    cap: Vec<u64>,
    next: Vec<usize>,
}

impl MaxFlow {
    const NONE: usize = usize::MAX;
    fn new(n: usize) -> Self {
        MaxFlow {
            head: vec![Self::NONE; n],
            to: Vec::new(),
            cap: Vec::new(),
            next: Vec::new(),
        }
    }
    fn add_edge(&mut self, a: usize, b: usize, c: u64) {
        for (x, y, c) in [(a, b, c), (b, a, 0)] {
            self.to.push(y);
            self.cap.push(c);
            self.next.push(self.head[x]);
            self.head[x] = self.to.len() - 1;
        }
    }
    fn run(&mut self, s: usize, t: usize) -> u64 {
        let n = self.head.len();
        let mut total = 0u64;
        let mut level = vec![u32::MAX; n];
        let mut it = vec![0usize; n];
        let mut queue = Vec::with_capacity(n);
        loop {
            level.fill(u32::MAX);
            level[s] = 0;
            queue.clear();
            queue.push(s);
            let mut qh = 0;
            while qh < queue.len() {
                let v = queue[qh];
                qh += 1;
                let mut e = self.head[v];
                while e != Self::NONE {
                    if self.cap[e] > 0 && level[self.to[e]] == u32::MAX {
                        level[self.to[e]] = level[v] + 1;
                        queue.push(self.to[e]);
                    }
                    e = self.next[e];
                }
            }
            if level[t] == u32::MAX {
                return total;
            }
            it.copy_from_slice(&self.head);
            loop {
                let f = self.push(s, t, u64::MAX, &level, &mut it);
                if f == 0 {
                    break;
                }
                total = total.saturating_add(f);
            }
        }
    }
    /// Iterative blocking-flow step: finds one augmenting path in the level graph.
    fn push(&mut self, s: usize, t: usize, limit: u64, level: &[u32], it: &mut [usize]) -> u64 {
        let mut stack: Vec<usize> = Vec::new(); // edges on the current path
        let mut v = s;
        loop {
            if v == t {
                let f = stack.iter().map(|&e| self.cap[e]).min().unwrap_or(limit).min(limit);
                for &e in &stack {
                    self.cap[e] -= f;
                    self.cap[e ^ 1] += f;
                }
                return f;
            }
            let mut advanced = false;
            while it[v] != Self::NONE {
                let e = it[v];
                let u = self.to[e];
                if self.cap[e] > 0 && level[u] == level[v] + 1 {
                    stack.push(e);
                    v = u;
                    advanced = true;
                    break;
                }
                it[v] = self.next[e];
            }
            if !advanced {
                // Dead end: retreat and skip the edge that led here.
                let Some(e) = stack.pop() else { return 0 };
                v = self.to[e ^ 1];
                it[v] = self.next[it[v]];
            }
        }
    }
}
