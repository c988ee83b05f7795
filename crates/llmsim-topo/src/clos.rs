//! A Clos fabric declared tier by tier: `topology: { kind: clos, tiers: [...] }`, from the leaf
//! (tier 1) up, so a topology search can sweep the structure (tiers, radix, oversubscription
//! per tier), not only a fat-tree's `k`.
//!
//! The shape is an extended generalized fat-tree, XGFT(h; m_1..m_h; w_1..w_h) (Öhring, Ibel,
//! Das, Kumar, IPPS 1995): a tier-`i` switch has `m_i` children (`down`: hosts at tier 1, tier
//! `i - 1` switches above) and `w_{i+1}` parents (`up`); hosts have one parent (`w_1 = 1`). A
//! k-ary fat-tree is `tiers: [{down: k/2, up: k/2}, {down: k/2, up: k/2}, {down: k}]`, a
//! leaf-spine `[{down: hosts_per_leaf, up: spines}, {down: leaves}]`; both build the same graph as
//! their own generators (node ids, port order and routes: tested).
//!
//! Addresses: a tier-`i` switch has the label `(x_h .. x_{i+1}; y_1 .. y_i)`, `x_j < m_j` (which
//! block it is in) and `y_j < w_j` (which parent its ancestors chose); its index in the tier is
//! `X * W_i + Y`, `X` the `x` digits big-endian, `Y` the `y` digits with `y_1` most significant,
//! `W_i = w_1 * .. * w_i`. A host's `X` is its id. Its parent `y_{i+1}` is switch
//! `(X / m_{i+1}) * W_{i+1} + Y * w_{i+1} + y_{i+1}` of tier `i + 1`.
//!
//! Node layout: hosts, NVSwitches, tier 1, tier 2, ... Ports of a switch: its children in `x_i`
//! order (a leaf: its hosts that exist), then its parents in `y_{i+1}` order. The top tier has
//! as many children as the GPUs need (default) and no parents. With `dual_tor`, `w_1 = 2`: a
//! GPU's two NIC ports (half its bandwidth each, port order = leaf `y_1` order) go to the two
//! leaves of its block, and a leaf's children are all the block's GPUs.
//!
//! Rule (up-down, no tables): a switch whose block holds the destination (`X == dst / M_i`,
//! `M_i = m_1 * .. * m_i`) goes down to child `x_i` of the destination's address; otherwise up,
//! the flow hash picking among the `w_{i+1}` parents. Routes are minimal.

use std::sync::Arc;

use llmsim_core::{FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, RoutingRule};
use crate::generators::{check_hosts, check_rate, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec};
use crate::routing::{Routing, host_hop_computed, nvswitch_hop_computed, port_range_hops, take_choice};

/// Most tiers a Clos may have.
pub const MAX_TIERS: usize = 8;

/// One tier of a declared Clos, e.g. `{ radix: 64, oversubscription: 3.0 }` or
/// `{ down: 32, up: 32, link: { bandwidth: 800Gbps } }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ClosTier {
    /// Ports down to children (hosts at tier 1). Default: `radix - up`; at the top tier, as
    /// many as the GPUs need.
    pub down: Option<u32>,
    /// Ports up to the next tier (each to a different parent). Default: from `radix` and
    /// `oversubscription`, or `down / oversubscription` when `down` is given; 0 at the top.
    pub up: Option<u32>,
    /// Switch ports. Default 64.
    pub radix: Option<u32>,
    /// `down / up` (capacity ratio, at equal link rates), e.g. 3.0 for 3:1. Default 1.0.
    pub oversubscription: Option<f64>,
    /// Links from this tier down to its children (tier 1: the GPU NICs). Default 400Gbps / 500ns
    /// at tier 1, 400Gbps / 600ns above.
    pub link: LinkSpec,
}

/// `topology: { kind: clos, tiers: [{radix: 64}, {radix: 64}, {radix: 64}] }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ClosSpec {
    /// Tiers from the leaf up, 1 to 8 of them. Default: as few non-blocking tiers of 64-port
    /// switches as hold the GPUs (one up to 64, two up to 2,048, three up to 65,536).
    pub tiers: Vec<ClosTier>,
    /// Every GPU NIC has two ports of half its bandwidth, on two leaves (Alibaba HPN's
    /// dual-ToR): each leaf block has two leaves, each cabled to all of the block's GPUs and
    /// to its own parents (`w_1 = 2` in XGFT terms). Default false.
    pub dual_tor: bool,
}

/// A resolved Clos: per tier (leaf first) children, parents and the link down.
#[derive(Clone, Debug, PartialEq)]
pub struct ClosParams {
    /// `m_i`: children per tier-`i` switch.
    pub down: Vec<u32>,
    /// Parents per tier-`i` switch (`w_{i+1}`); 0 at the top.
    pub up: Vec<u32>,
    /// The links from tier `i` down.
    pub link: Vec<LinkParams>,
    /// Leaves per GPU NIC (`w_1`): 2 with dual-ToR (each port `link[0]`), else 1.
    pub host_ports: u32,
}

impl FamilySpec for ClosSpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        check_hosts(gpus)?;
        // Default: as few non-blocking 64-port tiers as hold the GPUs (32 down, 32 up below the
        // top, 64 down at the top): 64, 2,048, 65,536, ... GPUs.
        let mut n = 1;
        while n < MAX_TIERS && 64u64 * 32u64.pow(n as u32 - 1) < u64::from(gpus) {
            n += 1;
        }
        let default_tiers = vec![ClosTier::default(); n];
        let tiers = if self.tiers.is_empty() { &default_tiers } else { &self.tiers };
        if tiers.len() > MAX_TIERS {
            return Err(FieldError::new("topology.tiers", format!("{} tiers; valid: 1 to {MAX_TIERS}", tiers.len())).into());
        }
        let h = tiers.len();
        let (mut down, mut up, mut link) = (Vec::new(), Vec::new(), Vec::new());
        let mut below = 1u64;
        for (i, t) in tiers.iter().enumerate() {
            let field = |f: &str| format!("topology.tiers[{i}].{f}");
            let ratio = t.oversubscription.unwrap_or(1.0);
            if !(ratio.is_finite() && ratio > 0.0) {
                return Err(FieldError::new(
                    field("oversubscription"),
                    format!("{ratio}; give a positive ratio such as 1.0 or 3.0"),
                )
                .into());
            }
            let radix = t.radix.unwrap_or(64);
            let top = i + 1 == h;
            let (d, u) = if top {
                if t.up.is_some_and(|u| u > 0) {
                    return Err(FieldError::new(field("up"), "the top tier has no parents; give up: 0 or leave it out").into());
                }
                let need = u64::from(gpus).div_ceil(below).max(1) as u32;
                let d = t.down.unwrap_or(need);
                let cap = if t.down.is_some() { d } else { radix };
                if u64::from(d) * below < u64::from(gpus) || d > cap {
                    return Err(FieldError::new(
                        field(if t.down.is_some() { "down" } else { "radix" }),
                        format!(
                            "{cap} ports hold {} GPUs below the top tier, fewer than {gpus}; use at least {need}",
                            u64::from(cap) * below
                        ),
                    )
                    .into());
                }
                (d, 0)
            } else {
                match (t.down, t.up) {
                    (Some(d), Some(u)) => (d, u),
                    (Some(d), None) => (d, ((f64::from(d) / ratio).ceil() as u32).max(1)),
                    (None, Some(u)) if u < radix => (radix - u, u),
                    (None, Some(u)) => {
                        return Err(FieldError::new(
                            field("up"),
                            format!("{u} uplinks leave no down ports of radix {radix}; use up < radix"),
                        )
                        .into());
                    }
                    (None, None) => {
                        let u = ((f64::from(radix) / (1.0 + ratio)).round() as u32).clamp(1, radix.saturating_sub(1).max(1));
                        (radix - u, u)
                    }
                }
            };
            if d == 0 || (!top && u == 0) {
                return Err(FieldError::new(field("down"), "a tier needs at least one down and (below the top) one up port").into());
            }
            below = below.saturating_mul(u64::from(d));
            down.push(d);
            up.push(u);
            link.push(t.link.resolve(if i == 0 { DEFAULT_NIC } else { DEFAULT_FABRIC }));
        }
        let host_ports = if self.dual_tor { 2 } else { 1 };
        if let Some(l) = link.first_mut() {
            l.bandwidth = llmsim_core::Bandwidth::from_bps(l.bandwidth.bps() / u64::from(host_ports));
        }
        clos(
            gpus,
            &ClosParams {
                down,
                up,
                link,
                host_ports,
            },
            scale_up,
            seed,
        )
    }
}

/// Builds the Clos `p` holding `num_hosts` GPUs (the last blocks may be partly filled).
/// Routing: [`ClosRule`].
///
/// # Errors
/// `TopoError::Invalid` for no tiers or more than [`MAX_TIERS`], mismatched per-tier lists, a
/// zero count or bandwidth, more GPUs than the tiers hold, more switches or links than llmsim
/// builds, or the scale-up errors of [`hosts_with_scale_up`].
pub fn clos(num_hosts: u32, p: &ClosParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_hosts(num_hosts)?;
    let h = p.down.len();
    if h == 0 || h > MAX_TIERS || p.up.len() != h || p.link.len() != h || !(1..=2).contains(&p.host_ports) {
        return Err(FieldError::new("topology.tiers", format!("give 1 to {MAX_TIERS} tiers")).into());
    }
    for (i, l) in p.link.iter().enumerate() {
        check_rate(&format!("topology.tiers[{i}].link"), *l)?;
    }
    if p.down.contains(&0) || p.up[..h - 1].contains(&0) {
        return Err(FieldError::new(
            "topology.tiers",
            "every tier needs down ports, and every tier below the top up ports",
        )
        .into());
    }
    // M_i (hosts under a tier-i block) and W_i (y-label space of tier i), u64 to refuse overflow.
    let mut m_below = vec![1u64; h + 1];
    let mut w_upto = vec![1u64; h + 1];
    for i in 1..=h {
        m_below[i] = m_below[i - 1].saturating_mul(u64::from(p.down[i - 1]));
        w_upto[i] = if i == 1 {
            u64::from(p.host_ports)
        } else {
            w_upto[i - 1].saturating_mul(u64::from(p.up[i - 2]))
        };
    }
    if m_below[h] < u64::from(num_hosts) {
        return Err(FieldError::new(
            "topology.tiers",
            format!(
                "the tiers hold {} GPUs, fewer than {num_hosts}; add down ports or a tier",
                m_below[h]
            ),
        )
        .into());
    }
    // Blocks of each tier that exist: those holding a host, and every block of a tier below the
    // top inside an existing top-tier block (switches above a partial leaf still exist).
    let top_blocks = u64::from(num_hosts).div_ceil(m_below[h - 1]).max(1);
    let mut counts = Vec::with_capacity(h);
    let mut total = 0u64;
    let mut links = 2 * u64::from(num_hosts) * u64::from(p.host_ports);
    for i in 1..=h {
        // Tier-i X space: blocks of size M_i inside top_blocks top blocks.
        let xs = top_blocks * (m_below[h - 1] / m_below[i - 1].max(1)) / u64::from(p.down[i - 1]);
        let xs = if i == h { 1 } else { xs };
        let n = xs.saturating_mul(w_upto[i]);
        counts.push(n);
        total = total.saturating_add(n);
        if i < h {
            links = links.saturating_add(2 * n * u64::from(p.up[i - 1]));
        }
    }
    if total > u64::from(crate::generators::MAX_HOSTS) || links > 1 << 31 {
        return Err(FieldError::new(
            "topology.tiers",
            format!("{total} switches and {links} links are more than llmsim builds; use fewer tiers or ports"),
        )
        .into());
    }
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let mut first = Vec::with_capacity(h);
    for (i, &n) in counts.iter().enumerate() {
        first.push(b.add_nodes(NodeKind::Switch { tier: (i + 1) as u8 }, n as u32).0);
    }
    b.reserve_links(links as usize);
    let down: Vec<u32> = p.down.clone();
    let up: Vec<u32> = p.up.clone();
    let w: Vec<u32> = w_upto.iter().map(|&x| x as u32).collect();
    // Tier by tier, each switch's cables to its children in x order: a child's parents then
    // arrive in y order, after its own children.
    for host in 0..num_hosts {
        for side in 0..w[1] {
            b.add_cable(
                NodeId(first[0] + host / down[0] * w[1] + side),
                NodeId(host),
                p.link[0],
                LinkKind::HostNic,
            );
        }
    }
    for i in 1..h {
        // Parents at tier i + 1 (0-based i), children at tier i (0-based i - 1).
        let (m, wi) = (down[i], up[i - 1]);
        for s in 0..counts[i] as u32 {
            let (x, y) = (s / w[i + 1], s % w[i + 1]);
            for xc in 0..m {
                let child = (x * m + xc) * w[i] + y / wi;
                if u64::from(child) < counts[i - 1] {
                    b.add_cable(NodeId(first[i] + s), NodeId(first[i - 1] + child), p.link[i], LinkKind::Fabric);
                }
            }
        }
    }
    // Link ids, for routes that read no table: the NVLink links, then every host's cables (leaf
    // -> host first), then tier by tier every parent's cables to its children (parent -> child
    // first); a top switch has a cable to each existing block below it.
    let host_links0 = if scale_up.gpus_per_server > 1 { 2 * num_hosts } else { 0 };
    let mut cab0 = vec![0u32; h + 1];
    let mut cnt = vec![0u32; h + 1];
    let mut next = u64::from(host_links0) + 2 * u64::from(num_hosts) * u64::from(w[1]);
    for i in 1..h {
        cnt[i] = if i + 1 == h {
            down[i].min((counts[i - 1] / u64::from(w[i])) as u32)
        } else {
            down[i]
        };
        cab0[i] = next as u32;
        next += 2 * counts[i] * u64::from(cnt[i]);
    }
    let rule = ClosRule {
        host_links0,
        cab0: fill(&cab0),
        cnt: fill(&cnt),
        tiers: h as u32,
        hosts: num_hosts,
        down: fill(&down),
        up: fill(&up),
        m_below: fill(&m_below.iter().map(|&x| x.min(u64::from(u32::MAX)) as u32).collect::<Vec<_>>()),
        w_upto: fill(&w),
        first: fill(&first),
    };
    let shape: Vec<String> = down.iter().zip(&up).map(|(d, u)| format!("{d}d{u}u")).collect();
    let dual = if p.host_ports == 2 { "-dualtor" } else { "" };
    b.build(
        format!("clos-{}{dual}-{num_hosts}", shape.join("-")),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

fn fill(v: &[u32]) -> [u32; MAX_TIERS + 1] {
    let mut a = [0u32; MAX_TIERS + 1];
    a[..v.len()].copy_from_slice(v);
    a
}

/// Up-down routing on a declared Clos; see the module doc for labels and ports. Indices are
/// 0-based tiers (`down[0]` is the leaf's `m_1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosRule {
    /// Switch tiers above the hosts.
    pub tiers: u32,
    hosts: u32,
    down: [u32; MAX_TIERS + 1],
    up: [u32; MAX_TIERS + 1],
    /// `M_i` for `i = 0..=tiers`.
    m_below: [u32; MAX_TIERS + 1],
    /// `W_i` for `i = 0..=tiers`.
    w_upto: [u32; MAX_TIERS + 1],
    first: [u32; MAX_TIERS + 1],
    /// Id of the first host cable's link (after the NVLink links).
    host_links0: u32,
    /// `cab0[p]`: id of the first link of the cables from tier-`p + 1` switches (1-based) down to
    /// their children; `cnt[p]`: cables per such switch.
    cab0: [u32; MAX_TIERS + 1],
    cnt: [u32; MAX_TIERS + 1],
}

impl ClosRule {
    /// `(first port, count)` of the equal-cost ports at tier-`tier` (1-based) switch `at`.
    #[inline]
    fn choice(&self, at: NodeId, dst: NodeId, tier: u8) -> Result<(u32, u32), TopoError> {
        let i = usize::from(tier);
        if i == 0 || i > self.tiers as usize {
            return Err(unreachable(at, dst, "not a switch of this Clos"));
        }
        let s = at.0 - self.first[i - 1];
        let x = s / self.w_upto[i];
        if dst.0 / self.m_below[i] == x {
            return Ok((dst.0 / self.m_below[i - 1] % self.down[i - 1], 1));
        }
        if i == self.tiers as usize {
            return Err(unreachable(at, dst, "the top tier does not hold the destination"));
        }
        let children = if i == 1 {
            self.hosts.saturating_sub(x * self.down[0]).min(self.down[0])
        } else {
            self.down[i - 1]
        };
        Ok((children, self.up[i - 1]))
    }
}

impl ClosRule {
    /// [`Self::choice`] with where the ports lead, for [`port_range_hop_to`]: `(first, count,
    /// to0, step)`, port `first + i` leading to node `to0 + i * step` (module doc's labels: the
    /// child `x_i` of switch `(X; Y)` is `(X * m_i + x_i; Y / w_i)`, its parent `y_{i+1}` is
    /// `(X / m_{i+1}; Y * w_{i+1} + y_{i+1})`).
    #[inline]
    fn choice_to(&self, at: NodeId, dst: NodeId, tier: u8) -> Result<(u32, u32, u32, u32), TopoError> {
        let (first, count) = self.choice(at, dst, tier)?;
        let i = usize::from(tier);
        let s = at.0 - self.first[i - 1];
        let (x, y) = (s / self.w_upto[i], s % self.w_upto[i]);
        let (to0, step) = if dst.0 / self.m_below[i] == x {
            if i == 1 {
                (dst.0, 0)
            } else {
                let xc = dst.0 / self.m_below[i - 1] % self.down[i - 1];
                (
                    self.first[i - 2] + (x * self.down[i - 1] + xc) * self.w_upto[i - 1] + y / self.up[i - 2],
                    0,
                )
            }
        } else {
            (self.first[i] + (x / self.down[i]) * self.w_upto[i + 1] + y * self.up[i - 1], 1)
        };
        Ok((first, count, to0, step))
    }
}

fn unreachable(at: NodeId, dst: NodeId, reason: &str) -> TopoError {
    TopoError::Unreachable {
        src: at,
        dst,
        reason: reason.into(),
    }
}

impl RoutingRule for ClosRule {
    fn name(&self) -> &'static str {
        "clos up-down"
    }

    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        // Every far end and link id from the labels and the generator's cable order, so a route
        // reads no table; a debug assertion checks each hop against the port table.
        let a = at.0;
        if a < self.hosts {
            let w1 = self.w_upto[1];
            let block = a / self.down[0];
            return Ok(host_hop_computed(t, at, dst, flow_hash, w1, |side| {
                (self.host_links0 + 2 * (a * w1 + side) + 1, self.first[0] + block * w1 + side)
            }));
        }
        if a < self.first[0] {
            return nvswitch_hop_computed(t, at, dst);
        }
        let mut tier = 1;
        while (tier as u32) < self.tiers && a >= self.first[tier] {
            tier += 1;
        }
        debug_assert_eq!(t.node(at), NodeKind::Switch { tier: tier as u8 });
        let (first, count, to0, step) = self.choice_to(at, dst, tier as u8)?;
        let i = tier;
        let s = a - self.first[i - 1];
        let (x, y) = (s / self.w_upto[i], s % self.w_upto[i]);
        let (link0, link_step) = if step == 0 && i == 1 {
            // Down to the host: its cable on this leaf's side `y` (leaf -> host first).
            (self.host_links0 + 2 * (dst.0 * self.w_upto[1] + y), 0)
        } else if step == 0 {
            // Down to child `first`: this switch's cable `first` (parent -> child first).
            (self.cab0[i - 1] + 2 * (s * self.cnt[i - 1] + first), 0)
        } else {
            // Up: parent `j` is `to0 + j` in tier `i + 1`, this switch its child `x % m_{i+1}`.
            let p0 = to0 - self.first[i];
            let c = self.cnt[i];
            (self.cab0[i] + 2 * (p0 * c + x % self.down[i]) + 1, 2 * c)
        };
        Ok(take_choice(t, at, flow_hash, (first, count, to0, step, link0, link_step), "clos"))
    }

    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        port_range_hops(t, at, dst, out, "clos", |tier| self.choice(at, dst, tier))
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        let hosts = t.num_hosts();
        if hosts < 2 {
            return Some(0);
        }
        if t.num_servers() == 1 {
            return Some(2);
        }
        // Hosts 0 and H - 1 meet first at the lowest tier whose block holds them both; no pair
        // meets higher.
        let tier = (1..=self.tiers)
            .find(|&i| hosts - 1 < self.m_below[i as usize])
            .unwrap_or(self.tiers);
        Some(2 * tier)
    }
}
