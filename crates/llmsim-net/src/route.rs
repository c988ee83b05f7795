//! Expansion of a [`RouteSpec`] into the links a transfer holds, shared by every backend so
//! that they see the same paths, multiplicities and latencies.

use std::hash::{BuildHasherDefault, Hasher};

use llmsim_core::{Bandwidth, Bytes, LinkId, NodeId, SimTime, mix64};
use llmsim_topo::{TopoError, Topology};

use crate::{RouteSpec, Transfer};

/// One link of an expanded route and how many legs cross it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteLink {
    pub link: LinkId,
    pub mult: u32,
}

/// What a backend needs to know about a route besides its links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteSummary {
    /// Propagation latency: the sum over legs for `Direct`/`Via`, the largest leg for `Chain`.
    pub latency: SimTime,
    /// The link that limits a lone transfer: the largest `mult / bandwidth`. `None` when the
    /// route holds no link (`src == dst`).
    pub bottleneck: Option<(Bandwidth, u32)>,
}

/// The flow hash leg `i` of a `Via`/`Chain` route uses. Leg 0 keeps the transfer's hash; the
/// others get their own, as each hop of a NCCL ring is its own QP.
#[inline]
pub fn leg_hash(flow_hash: u64, leg: usize) -> u64 {
    if leg == 0 { flow_hash } else { mix64(flow_hash ^ leg as u64) }
}

/// Reusable buffers for [`expand`].
#[derive(Default)]
pub struct RouteScratch {
    links: Vec<LinkId>,
}

/// Appends the links of `t`'s route to `out` (merged, with multiplicity, for `Via`/`Chain`).
///
/// # Errors
/// The topology's routing error for any leg.
pub fn expand(topo: &Topology, t: &Transfer, scratch: &mut RouteScratch, out: &mut Vec<RouteLink>) -> Result<RouteSummary, TopoError> {
    out.clear();
    let s = &mut scratch.links;
    s.clear();
    let latency = match &t.route {
        RouteSpec::Direct => {
            topo.route(t.src, t.dst, t.flow_hash, s)?;
            out.extend(s.iter().map(|&link| RouteLink { link, mult: 1 }));
            return Ok(summarize(topo, out, sum_latency(topo, s)));
        }
        RouteSpec::Via(via) => {
            topo.route(t.src, *via, leg_hash(t.flow_hash, 0), s)?;
            topo.route(*via, t.dst, leg_hash(t.flow_hash, 1), s)?;
            sum_latency(topo, s)
        }
        RouteSpec::Chain(hops) => {
            let mut prev = t.src;
            let mut max_leg = SimTime::ZERO;
            let nodes = hops.iter().copied().chain(std::iter::once(t.dst));
            for (leg, next) in nodes.enumerate() {
                let from = s.len();
                topo.route(prev, next, leg_hash(t.flow_hash, leg), s)?;
                max_leg = max_leg.max(sum_latency(topo, &s[from..]));
                prev = next;
            }
            max_leg
        }
    };
    s.sort_unstable();
    for &link in s.iter() {
        match out.last_mut() {
            Some(last) if last.link == link => last.mult += 1,
            _ => out.push(RouteLink { link, mult: 1 }),
        }
    }
    Ok(summarize(topo, out, latency))
}

/// Checks that `path` leads from `src` to `dst` and appends it to `out` with multiplicity 1.
///
/// # Errors
/// `TopoError::Unreachable` if a link is unknown or the links do not join up.
pub fn explicit(topo: &Topology, src: NodeId, dst: NodeId, path: &[LinkId], out: &mut Vec<RouteLink>) -> Result<RouteSummary, TopoError> {
    out.clear();
    let bad = |reason: &str| TopoError::Unreachable {
        src,
        dst,
        reason: reason.to_string(),
    };
    let mut at = src;
    for &l in path {
        if l.idx() >= topo.num_links() {
            return Err(bad("explicit path names a link the topology does not have"));
        }
        let link = topo.link(l);
        if link.src != at {
            return Err(bad("explicit path is not contiguous"));
        }
        at = link.dst;
        out.push(RouteLink { link: l, mult: 1 });
    }
    if at != dst {
        return Err(bad("explicit path does not end at the destination"));
    }
    Ok(summarize(topo, out, sum_latency(topo, path)))
}

fn sum_latency(topo: &Topology, links: &[LinkId]) -> SimTime {
    links.iter().fold(SimTime::ZERO, |acc, l| acc + topo.link(*l).latency)
}

fn summarize(topo: &Topology, links: &[RouteLink], latency: SimTime) -> RouteSummary {
    let mut bottleneck: Option<(Bandwidth, u32)> = None;
    for rl in links {
        let bw = topo.link(rl.link).bandwidth;
        // mult / bw larger <=> mult * bw_best > mult_best * bw.
        let worse = match bottleneck {
            None => true,
            Some((b, m)) => rl.mult as u128 * b.bps() as u128 > m as u128 * bw.bps() as u128,
        };
        if worse {
            bottleneck = Some((bw, rl.mult));
        }
    }
    RouteSummary { latency, bottleneck }
}

/// Serialization time of `bytes` over a link of bandwidth `bw` carried `mult` times, rounded
/// up to the picosecond (exact integer arithmetic).
#[inline]
pub fn serialization_ps(bytes: Bytes, bw: Bandwidth, mult: u32) -> u64 {
    if bytes.0 == 0 {
        return 0;
    }
    let num = bytes.0 as u128 * 8 * SimTime::PS_PER_S as u128 * mult as u128;
    u64::try_from(num.div_ceil(bw.bps() as u128)).unwrap_or(u64::MAX)
}

/// A hasher for ids that are already well spread: one `mix64` per key.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }
}

/// A set of transfer ids in flight, for duplicate detection.
pub type IdSet = std::collections::HashSet<u64, BuildHasherDefault<IdHasher>>;
