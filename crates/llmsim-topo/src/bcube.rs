//! BCube(n, k) (Guo et al., SIGCOMM 2009): a server-centric fabric where servers relay.
//!
//! Every GPU is a BCube server with `k + 1` NIC ports, one per level. Its address is its host id
//! written in base `n`, digits `a_k .. a_0`. Level `l` has switches of `n` ports; the level-`l`
//! switch of a host connects the `n` hosts whose addresses differ from it in digit `l` only
//! (port `p` leads to the one with `a_l = p`). There are no switch-to-switch links: a route
//! corrects one differing digit per host-switch-host hop, relayed by the hosts in between.
//!
//! Sizes: `n^k * m` GPUs with `2 <= m <= n` (the top digit takes `m` values), so that every
//! intermediate address of a digit-correcting route is a host; level-`k` switches then have `m`
//! ports. A server's GPUs must share their level-0 switch (`gpus_per_server` divides `n`), so
//! the NVLink hop between GPUs of one server costs as much as the level-0 hop it replaces.
//!
//! Node layout: hosts, NVSwitches, level-`l` switches for `l = 0..=k` (`m * n^(k-1)` each below
//! level `k`, `n^k` at level `k`): switch `(l, i)` is `sw0 + l * m * n^(k-1) + i`, with `i` the
//! host address with digit `l` removed. Ports of a host: `[NVLink]`, then its NIC ports in level
//! order; of a switch: its hosts in digit order.
//!
//! Rule (BCube's digit correction, no tables): a host sends to a GPU of its own server over NVLink;
//! otherwise it may correct any digit in which it differs from the destination, so the
//! candidates are the NIC ports of those levels (all equal-cost: each leaves one digit fewer);
//! the flow hash picks one. A switch forwards to port `b_l`, the destination's digit.
//!
//! The packet engine forwards at switches only, so BCube runs on the analytical and flow
//! backends; the packet backend refuses it ([`crate::Topology::hosts_forward`]).

use std::sync::Arc;

use llmsim_core::{FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, RoutingRule};
use crate::fastdiv::Divisor;
use crate::generators::{check_hosts, check_rate, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_NIC, LinkSpec};
use crate::routing::{Routing, nvswitch_hop};

/// `topology: { kind: bcube, n: 8, k: 3 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BCubeSpec {
    /// Switch ports (n), at least 2 and a multiple of the GPUs per server. Default 8 (rounded up
    /// to a multiple of the GPUs per server), or the next such n whose BCube holds exactly the
    /// GPUs.
    pub n: Option<u32>,
    /// Levels minus one (k): every GPU has `k + 1` NIC ports. Default: the smallest k with
    /// `n^(k+1) >= GPUs`.
    pub k: Option<u32>,
    /// Each NIC port <-> its switch. Default 400Gbps / 500ns per port.
    pub nic: LinkSpec,
}

/// A resolved BCube.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BCubeParams {
    /// Switch ports (n): values of every address digit below the top one.
    pub n: u32,
    /// Levels minus one (k): every GPU has `k + 1` NIC ports.
    pub k: u32,
    /// One NIC port.
    pub nic: LinkParams,
}

/// Most levels (k + 1) the generator accepts.
pub const MAX_LEVELS: u32 = 24;

impl FamilySpec for BCubeSpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        check_hosts(gpus)?;
        let g = scale_up.gpus_per_server.max(1);
        let smallest_k = |n: u32| -> u32 {
            let mut k = 0u32;
            while k < MAX_LEVELS && u64::from(n).pow(k + 1) < u64::from(gpus) {
                k += 1;
            }
            k
        };
        let fits = |n: u32, k: u32| -> bool {
            let nk = u64::from(n).checked_pow(k).unwrap_or(u64::MAX);
            let m = u64::from(gpus) / nk;
            u64::from(gpus).is_multiple_of(nk) && m <= u64::from(n) && (m >= 2 || gpus == 1)
        };
        // Default n: 8 (or the server size), else the next multiple of the server size whose
        // BCube holds exactly the GPUs, so that any GPU count builds.
        let default_n = 8u32.div_ceil(g) * g;
        let n = match self.n {
            Some(n) => n,
            None => (default_n..=gpus.max(default_n))
                .step_by(g as usize)
                .find(|&n| fits(n, self.k.unwrap_or_else(|| smallest_k(n))))
                .unwrap_or(default_n),
        };
        if n < 2 {
            return Err(FieldError::new("topology.n", format!("{n} switch ports; valid: 2 or more, e.g. 8")).into());
        }
        let k = self.k.unwrap_or_else(|| smallest_k(n));
        let p = BCubeParams {
            n,
            k,
            nic: self.nic.resolve(DEFAULT_NIC),
        };
        bcube(gpus, &p, scale_up, seed)
    }
}

/// Builds BCube(n, k) holding `num_hosts` GPUs. Routing: [`BCubeRule`].
///
/// # Errors
/// `TopoError::Invalid` naming the field and the valid values when `n` is below 2 or not a
/// multiple of the GPUs per server, `k + 1` exceeds [`MAX_LEVELS`], or the GPUs are not
/// `m * n^k` with `2 <= m <= n` (one GPU is allowed); a zero bandwidth; the scale-up errors of
/// [`hosts_with_scale_up`].
pub fn bcube(num_hosts: u32, p: &BCubeParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_hosts(num_hosts)?;
    check_rate("topology.nic", p.nic)?;
    let (n, k) = (p.n, p.k);
    let g = scale_up.gpus_per_server.max(1);
    if n < 2 || !n.is_multiple_of(g) {
        return Err(FieldError::new(
            "topology.n",
            format!(
                "{n} switch ports cannot hold whole {g}-GPU servers on a level-0 switch; valid: a multiple of {g} of at least 2, e.g. {}",
                g.max(2).div_ceil(g) * g
            ),
        )
        .into());
    }
    if k + 1 > MAX_LEVELS {
        return Err(FieldError::new("topology.k", format!("{k} gives {} levels; valid: 0..={}", k + 1, MAX_LEVELS - 1)).into());
    }
    let nk = u64::from(n).pow(k);
    let valid = |k: u32| -> String {
        let nk = u64::from(n).pow(k);
        format!("{}, {}, ..., {}", 2 * nk, 3 * nk, u64::from(n) * nk)
    };
    if nk > u64::from(num_hosts) || (!u64::from(num_hosts).is_multiple_of(nk)) || u64::from(num_hosts) > nk * u64::from(n) {
        return Err(FieldError::new(
            "gpus",
            format!(
                "BCube(n={n}, k={k}) holds m * {nk} GPUs with 2 <= m <= {n}, not {num_hosts}; valid GPU counts: {} (or choose another n or k)",
                valid(k)
            ),
        )
        .into());
    }
    let m = (u64::from(num_hosts) / nk) as u32;
    if m < 2 && num_hosts > 1 {
        return Err(FieldError::new(
            "topology.k",
            format!(
                "{k} leaves a level with one host per switch at {num_hosts} GPUs; use k = {}",
                k.saturating_sub(1)
            ),
        )
        .into());
    }
    // Switches per level below the top: the addresses without digit l whose top digit is < m.
    let per_low = if k == 0 { 0 } else { u64::from(m) * u64::from(n).pow(k - 1) };
    let switches = u64::from(k) * per_low + nk;
    if switches > u64::from(crate::generators::MAX_HOSTS) {
        return Err(FieldError::new(
            "topology.k",
            format!("{switches} switches is more than llmsim builds; use fewer GPUs"),
        )
        .into());
    }
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let sw0 = b.add_nodes(NodeKind::Switch { tier: 1 }, switches as u32).0;
    b.reserve_links(2 * num_hosts as usize * (k as usize + 1));
    let mut pows = [1u32; MAX_LEVELS as usize];
    for l in 1..MAX_LEVELS as usize {
        pows[l] = pows[l - 1].saturating_mul(n);
    }
    let rule = BCubeRule {
        n,
        k,
        m,
        hosts: num_hosts,
        per_low: per_low as u32,
        sw0,
        pows,
        nic_links0: if scale_up.gpus_per_server > 1 { 2 * num_hosts } else { 0 },
        div: BCubeDivisors {
            n: Divisor::new(n),
            per_low: Divisor::new(per_low as u32),
            pows: pows.map(Divisor::new),
        },
    };
    // Hosts in id order: every switch receives its hosts in digit order.
    for h in 0..num_hosts {
        for l in 0..=k {
            b.add_cable(NodeId(h), NodeId(rule.switch_of(h, l)), p.nic, LinkKind::HostNic);
        }
    }
    b.build(
        format!("bcube-n{n}k{k}-{num_hosts}"),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

/// BCube digit-correcting routing; see the module doc for addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BCubeRule {
    /// Switch ports (n): values of every address digit below the top one.
    pub n: u32,
    /// Levels minus one (k): the top digit is digit `k`.
    pub k: u32,
    /// Values of the top digit (`GPUs / n^k`).
    pub m: u32,
    hosts: u32,
    /// Switches at each level below `k`.
    per_low: u32,
    sw0: u32,
    /// `n^l` for `l` below [`MAX_LEVELS`] (saturated past `u32`).
    pows: [u32; MAX_LEVELS as usize],
    /// Id of the first NIC cable's link (after the NVLink links).
    nic_links0: u32,
    div: BCubeDivisors,
}

/// The sizes [`BCubeRule`] divides by on every hop, as [`Divisor`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BCubeDivisors {
    n: Divisor,
    per_low: Divisor,
    pows: [Divisor; MAX_LEVELS as usize],
}

impl BCubeRule {
    /// `n^l`.
    #[inline]
    fn pow(&self, l: u32) -> u32 {
        self.pows[l as usize]
    }

    /// Digit `l` of host `h`'s address.
    #[inline]
    pub fn digit(&self, h: u32, l: u32) -> u32 {
        let q = self.div.pows[l as usize].div(h);
        if l == self.k { q } else { self.div.n.rem(q) }
    }

    /// The level-`l` switch of host `h`.
    #[inline]
    pub fn switch_of(&self, h: u32, l: u32) -> u32 {
        let nl = self.pow(l);
        let low = self.div.pows[l as usize].rem(h);
        let i = if l == self.k {
            low
        } else {
            self.div.pows[l as usize + 1].div(h) * nl + low
        };
        self.sw0 + l * self.per_low + i
    }

    /// The level of switch `s`.
    #[inline]
    fn level(&self, s: u32) -> u32 {
        if self.per_low == 0 {
            self.k
        } else {
            self.div.per_low.div(s - self.sw0).min(self.k)
        }
    }

    /// The NIC port offset of a host: 1 behind its NVLink port when servers have several GPUs.
    #[inline]
    fn nic0(t: &Topology) -> usize {
        usize::from(t.gpus_per_server() > 1)
    }

    fn unreachable(at: NodeId, dst: NodeId, reason: &str) -> TopoError {
        TopoError::Unreachable {
            src: at,
            dst,
            reason: reason.into(),
        }
    }
}

impl RoutingRule for BCubeRule {
    fn name(&self) -> &'static str {
        "bcube digit-correcting"
    }

    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        // The node's kind from its id (module doc's layout), without reading the node table.
        let kind = if at.0 < self.hosts {
            NodeKind::Host
        } else if at.0 < self.sw0 {
            NodeKind::NvSwitch
        } else {
            NodeKind::Switch { tier: 1 }
        };
        debug_assert_eq!(kind, t.node(at));
        // Link ids too are arithmetic (the generator's cable order, module doc), so a route
        // reads no table: `hosts_with_scale_up` adds GPU h -> NVSwitch as link h and NVSwitch ->
        // GPU h as link `hosts + h`, then every GPU's cables in level order, each two links.
        // Debug assertions check every link and far end against the port table.
        let g = t.gpus_per_server();
        let cable = |h: u32, l: u32| self.nic_links0 + 2 * (h * (self.k + 1) + l);
        match kind {
            NodeKind::NvSwitch => {
                if at.0 - self.hosts != t.server_of(dst) {
                    return Err(Self::unreachable(at, dst, "NVSwitch reached for a GPU of another server"));
                }
                let hop = Hop {
                    link: LinkId(self.hosts + dst.0),
                    to: dst,
                };
                debug_assert_eq!(Ok(hop), nvswitch_hop(t, at, dst), "bcube NVSwitch at {at}");
                Ok(hop)
            }
            NodeKind::Switch { .. } => {
                let l = self.level(at.0);
                let v = self.digit(dst.0, l);
                // The host whose digit `l` is `v` among the switch's hosts (see `switch_of`).
                let i = at.0 - self.sw0 - l * self.per_low;
                let nl = self.pow(l);
                let to = if l == self.k {
                    v * nl + i
                } else {
                    let (q, r) = self.div.pows[l as usize].div_rem(i);
                    q * nl * self.n + v * nl + r
                };
                if to >= self.hosts {
                    return Err(Self::unreachable(at, dst, "bcube switch port outside the switch"));
                }
                let hop = Hop {
                    link: LinkId(cable(to, l) + 1),
                    to: NodeId(to),
                };
                debug_assert_eq!(Some(&hop), t.port_hops(at).get(v as usize), "bcube port layout at {at}");
                Ok(hop)
            }
            NodeKind::Host => {
                if g > 1 && t.server_of(at) == t.server_of(dst) {
                    let hop = Hop {
                        link: LinkId(at.0),
                        to: NodeId(self.hosts + t.server_of(at)),
                    };
                    debug_assert_eq!(hop, t.port_hops(at)[0], "bcube NVLink at {at}");
                    return Ok(hop);
                }
                // The levels whose digits differ, lowest first, in one pass of divisions.
                let mut differ = [0u8; MAX_LEVELS as usize];
                let mut count = 0;
                let (mut a, mut d) = (at.0, dst.0);
                for l in 0..=self.k {
                    let ((qa, da), (qd, dd)) = if l == self.k {
                        ((0, a), (0, d))
                    } else {
                        (self.div.n.div_rem(a), self.div.n.div_rem(d))
                    };
                    if da != dd {
                        differ[count] = l as u8;
                        count += 1;
                    }
                    (a, d) = (qa, qd);
                }
                if count == 0 {
                    return Err(Self::unreachable(at, dst, "bcube route to itself"));
                }
                let pick = if count > 1 { t.ecmp_pick(at, flow_hash, count) } else { 0 };
                let l = u32::from(differ[pick]);
                let hop = Hop {
                    link: LinkId(cable(at.0, l)),
                    to: NodeId(self.switch_of(at.0, l)),
                };
                debug_assert_eq!(hop, t.port_hops(at)[Self::nic0(t) + l as usize], "bcube NIC layout at {at}");
                Ok(hop)
            }
        }
    }

    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        if t.node(at) != NodeKind::Host || (t.gpus_per_server() > 1 && t.server_of(at) == t.server_of(dst)) {
            out.push(self.next_hop(t, at, dst, 0)?);
            return Ok(());
        }
        let ports = t.ports(at);
        let from = out.len();
        for l in (0..=self.k).filter(|&l| self.digit(at.0, l) != self.digit(dst.0, l)) {
            out.push(ports[Self::nic0(t) + l as usize]);
        }
        if out.len() == from {
            return Err(Self::unreachable(at, dst, "bcube route to itself"));
        }
        Ok(())
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        if t.num_hosts() < 2 {
            return Some(0);
        }
        if t.num_servers() == 1 {
            return Some(2);
        }
        // Two hosts can differ in every digit whose level has at least two values (all below k,
        // since n >= 2; the top when m >= 2); each correction is a host-switch-host hop.
        let levels = self.k + u32::from(self.m >= 2);
        Some(2 * levels)
    }

    fn hosts_forward(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_switches_agree() {
        let p = BCubeParams {
            n: 4,
            k: 2,
            nic: DEFAULT_NIC,
        };
        let t = bcube(32, &p, ScaleUp::none(), 1).unwrap();
        // m = 2: level 0 and 1 have 2 * 4 switches, level 2 has 16.
        assert_eq!(t.num_nodes(), 32 + 8 + 8 + 16);
        assert_eq!(t.num_links(), 2 * 32 * 3);
        for l in 0..3 {
            let sw0 = 32 + l * 8;
            let hosts: Vec<u32> = t.ports(NodeId(sw0)).iter().map(|&x| t.link(x).dst.0).collect();
            let step = 4u32.pow(l);
            let want: Vec<u32> = (0..if l == 2 { 2 } else { 4 }).map(|p| p * step).collect();
            assert_eq!(hosts, want, "level {l} switch 0");
        }
    }
}
