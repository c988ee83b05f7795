//! Expansion of a [`RouteSpec`] into the links a transfer holds, shared by every backend so
//! that they see the same paths, multiplicities and latencies.

use llmsim_core::{Bandwidth, Bytes, LinkId, NodeId, SimTime, mix64};
use llmsim_topo::{TopoError, Topology};

use crate::{RouteSpec, Transfer};

/// One link of an expanded route and how many legs cross it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteLink {
    /// The link.
    pub link: LinkId,
    /// Legs of the route that cross it (its bytes count this many times).
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
    best: Vec<LinkId>,
}

/// Appends the links of `t`'s route to `out` (merged, with multiplicity, for `Via`/`Chain`).
///
/// # Errors
/// The topology's routing error for any leg.
pub fn expand(topo: &Topology, t: &Transfer, scratch: &mut RouteScratch, out: &mut Vec<RouteLink>) -> Result<RouteSummary, TopoError> {
    expand_with(topo, |l| topo_attrs(topo, l), t, scratch, out)
}

/// A link's bandwidth and latency as the topology holds them.
#[inline]
fn topo_attrs(topo: &Topology, l: LinkId) -> (Bandwidth, SimTime) {
    let link = topo.link(l);
    (link.bandwidth, link.latency)
}

/// [`expand`], reading each link's bandwidth and latency from `attrs` instead of the topology
/// (for a backend that keeps them beside its own per-link state, in the cache line it touches
/// next; they must equal the topology's for the result to be `expand`'s).
///
/// # Errors
/// As [`expand`].
pub fn expand_with(
    topo: &Topology,
    attrs: impl Fn(LinkId) -> (Bandwidth, SimTime) + Copy,
    t: &Transfer,
    scratch: &mut RouteScratch,
    out: &mut Vec<RouteLink>,
) -> Result<RouteSummary, TopoError> {
    out.clear();
    let s = &mut scratch.links;
    s.clear();
    let latency = match &t.route {
        RouteSpec::Direct => {
            topo.route(t.src, t.dst, t.flow_hash, s)?;
            out.extend(s.iter().map(|&link| RouteLink { link, mult: 1 }));
            return Ok(summarize(attrs, out, sum_latency(attrs, s)));
        }
        RouteSpec::Via(via) => {
            topo.route(t.src, *via, leg_hash(t.flow_hash, 0), s)?;
            topo.route(*via, t.dst, leg_hash(t.flow_hash, 1), s)?;
            sum_latency(attrs, s)
        }
        RouteSpec::Chain(hops) => {
            let mut prev = t.src;
            let mut max_leg = SimTime::ZERO;
            let nodes = hops.iter().copied().chain(std::iter::once(t.dst));
            for (leg, next) in nodes.enumerate() {
                let from = s.len();
                topo.route(prev, next, leg_hash(t.flow_hash, leg), s)?;
                max_leg = max_leg.max(sum_latency(attrs, &s[from..]));
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
    Ok(summarize(attrs, out, latency))
}

/// [`expand`], choosing per transfer among the topology's route classes
/// ([`Topology::route_classes`]: a dragonfly with UGAL routing offers minimal and Valiant) the
/// one with the smallest `hops x (1 + load)`, where load is the largest `load[link]` over the
/// route's switch-to-switch links (UGAL-G: global knowledge of the load; host and NVLink links,
/// which every class shares, are left out). Ties go to the lower class (minimal). `Via` and
/// `Chain` routes and single-class topologies: as [`expand`].
///
/// # Errors
/// The topology's routing error for any class.
pub fn expand_classes(
    topo: &Topology,
    t: &Transfer,
    load: &[u32],
    scratch: &mut RouteScratch,
    out: &mut Vec<RouteLink>,
) -> Result<RouteSummary, TopoError> {
    let classes = topo.route_classes();
    if classes < 2 || !matches!(t.route, RouteSpec::Direct) {
        return expand(topo, t, scratch, out);
    }
    out.clear();
    let mut best_cost = u64::MAX;
    for class in 0..classes {
        scratch.links.clear();
        topo.route_in_class(t.src, t.dst, t.flow_hash, class, &mut scratch.links)?;
        let busiest = scratch
            .links
            .iter()
            .filter(|l| topo.link(**l).kind == llmsim_topo::LinkKind::Fabric)
            .map(|l| u64::from(load.get(l.idx()).copied().unwrap_or(0)))
            .max()
            .unwrap_or(0);
        let cost = scratch.links.len() as u64 * (1 + busiest);
        if cost < best_cost {
            best_cost = cost;
            std::mem::swap(&mut scratch.best, &mut scratch.links);
        }
    }
    out.extend(scratch.best.iter().map(|&link| RouteLink { link, mult: 1 }));
    Ok(summarize(
        |l| topo_attrs(topo, l),
        out,
        sum_latency(|l| topo_attrs(topo, l), &scratch.best),
    ))
}

/// The part of an expanded route that depends only on the topology's structure (which links,
/// not their bandwidths or latencies): what [`expand`] computes, kept so that experiments over
/// topologies of one structure with other link parameters route a transfer once
/// ([`RouteShape::summary`] then gives what [`expand`] would for those parameters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteShape {
    /// The links with multiplicity, as [`expand`] leaves them in its `out`.
    pub links: Vec<RouteLink>,
    /// Every leg's links in route order (`Direct`: one leg).
    raw: Vec<LinkId>,
    /// Where each leg ends in `raw`.
    leg_ends: Vec<u32>,
    /// A `Chain`: the latency is the largest leg's, not the sum.
    chain: bool,
}

impl RouteShape {
    /// Routes `t` on `topo`, as [`expand`] does.
    ///
    /// # Errors
    /// The topology's routing error for any leg.
    pub fn of(topo: &Topology, t: &Transfer) -> Result<RouteShape, TopoError> {
        let mut raw = Vec::new();
        let mut leg_ends = Vec::new();
        let chain = matches!(t.route, RouteSpec::Chain(_));
        match &t.route {
            RouteSpec::Direct => {
                topo.route(t.src, t.dst, t.flow_hash, &mut raw)?;
                leg_ends.push(raw.len() as u32);
                let links = raw.iter().map(|&link| RouteLink { link, mult: 1 }).collect();
                return Ok(RouteShape {
                    links,
                    raw,
                    leg_ends,
                    chain,
                });
            }
            RouteSpec::Via(via) => {
                topo.route(t.src, *via, leg_hash(t.flow_hash, 0), &mut raw)?;
                topo.route(*via, t.dst, leg_hash(t.flow_hash, 1), &mut raw)?;
                leg_ends.push(raw.len() as u32);
            }
            RouteSpec::Chain(hops) => {
                let mut prev = t.src;
                let nodes = hops.iter().copied().chain(std::iter::once(t.dst));
                for (leg, next) in nodes.enumerate() {
                    topo.route(prev, next, leg_hash(t.flow_hash, leg), &mut raw)?;
                    leg_ends.push(raw.len() as u32);
                    prev = next;
                }
            }
        }
        let mut sorted = raw.clone();
        sorted.sort_unstable();
        let mut links: Vec<RouteLink> = Vec::new();
        for &link in &sorted {
            match links.last_mut() {
                Some(last) if last.link == link => last.mult += 1,
                _ => links.push(RouteLink { link, mult: 1 }),
            }
        }
        Ok(RouteShape {
            links,
            raw,
            leg_ends,
            chain,
        })
    }

    /// The route's latency and bottleneck on `topo` (same structure as the one it was routed
    /// on), equal to [`expand`]'s.
    pub fn summary(&self, topo: &Topology) -> RouteSummary {
        let latency = if self.chain {
            let mut from = 0usize;
            let mut max_leg = SimTime::ZERO;
            for &end in &self.leg_ends {
                max_leg = max_leg.max(sum_latency(|l| topo_attrs(topo, l), &self.raw[from..end as usize]));
                from = end as usize;
            }
            max_leg
        } else {
            sum_latency(|l| topo_attrs(topo, l), &self.raw)
        };
        summarize(|l| topo_attrs(topo, l), &self.links, latency)
    }
}

/// Reusable buffers for [`expand_split`].
#[derive(Default)]
pub struct SplitScratch {
    front: Vec<(NodeId, f64, SimTime)>,
    next: Vec<(NodeId, f64, SimTime)>,
    hops: Vec<LinkId>,
    acc: Vec<(LinkId, f64)>,
}

/// A transfer's route when its packets are spread evenly over the equal-cost paths (`spray`,
/// `adaptive` in the fluid limit): at every node the share arriving splits evenly over the
/// rule's candidates for this flow ([`Topology::flow_next_hops`], failed links avoided). `out` gets each link
/// with the fraction of the transfer's bytes it carries, summed over legs for `Via`/`Chain`
/// (a link crossed by every path of two legs carries 2). Latency: the slowest path's (the
/// last packet's), summed over `Via` legs, the largest leg for `Chain`.
///
/// In a Clos the even split per hop is the even split over paths, since every candidate leads
/// to as many paths.
///
/// # Errors
/// The topology's routing error for any leg.
pub fn expand_split(topo: &Topology, t: &Transfer, scratch: &mut SplitScratch, out: &mut Vec<(LinkId, f64)>) -> Result<SimTime, TopoError> {
    out.clear();
    scratch.acc.clear();
    let h = t.flow_hash;
    let latency = match &t.route {
        RouteSpec::Direct => split_leg(topo, t.src, t.dst, h, scratch)?,
        RouteSpec::Via(via) => {
            split_leg(topo, t.src, *via, leg_hash(h, 0), scratch)? + split_leg(topo, *via, t.dst, leg_hash(h, 1), scratch)?
        }
        RouteSpec::Chain(hops) => {
            let mut prev = t.src;
            let mut max_leg = SimTime::ZERO;
            for (leg, next) in hops.iter().copied().chain(std::iter::once(t.dst)).enumerate() {
                max_leg = max_leg.max(split_leg(topo, prev, next, leg_hash(h, leg), scratch)?);
                prev = next;
            }
            max_leg
        }
    };
    scratch.acc.sort_unstable_by_key(|e| e.0);
    for &(link, w) in &scratch.acc {
        match out.last_mut() {
            Some(last) if last.0 == link => last.1 += w,
            _ => out.push((link, w)),
        }
    }
    Ok(latency)
}

/// One leg of [`expand_split`]: appends `(link, share)` to `scratch.acc`; returns the slowest
/// path's latency. The candidates are the leg's own route's ([`Topology::flow_next_hops`]: a
/// Valiant dragonfly flow spreads over its route through its intermediate group).
fn split_leg(topo: &Topology, src: NodeId, dst: NodeId, flow_hash: u64, s: &mut SplitScratch) -> Result<SimTime, TopoError> {
    for h in [src, dst] {
        if h.0 >= topo.num_hosts() {
            return Err(TopoError::NotAHost(h));
        }
    }
    s.front.clear();
    s.front.push((src, 1.0, SimTime::ZERO));
    let mut latency = SimTime::ZERO;
    for _ in 0..=64 {
        if s.front.is_empty() {
            return Ok(latency);
        }
        s.next.clear();
        for i in 0..s.front.len() {
            let (at, w, lat) = s.front[i];
            if at == dst {
                latency = latency.max(lat);
                continue;
            }
            s.hops.clear();
            topo.flow_next_hops(at, dst, flow_hash, 0, &mut s.hops)?;
            let share = w / s.hops.len() as f64;
            for &l in &s.hops {
                let link = topo.link(l);
                s.acc.push((l, share));
                s.next.push((link.dst, share, lat + link.latency));
            }
        }
        // Paths that meet again travel on together.
        s.next.sort_unstable_by_key(|e| e.0);
        s.front.clear();
        for &(n, w, lat) in &s.next {
            match s.front.last_mut() {
                Some(last) if last.0 == n => {
                    last.1 += w;
                    last.2 = last.2.max(lat);
                }
                _ => s.front.push((n, w, lat)),
            }
        }
    }
    Err(TopoError::Unreachable {
        src,
        dst,
        reason: "routing loop".into(),
    })
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
    Ok(summarize(|l| topo_attrs(topo, l), out, sum_latency(|l| topo_attrs(topo, l), path)))
}

fn sum_latency(attrs: impl Fn(LinkId) -> (Bandwidth, SimTime), links: &[LinkId]) -> SimTime {
    links.iter().fold(SimTime::ZERO, |acc, l| acc + attrs(*l).1)
}

fn summarize(attrs: impl Fn(LinkId) -> (Bandwidth, SimTime), links: &[RouteLink], latency: SimTime) -> RouteSummary {
    let mut bottleneck: Option<(Bandwidth, u32)> = None;
    for rl in links {
        let bw = attrs(rl.link).0;
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

/// A set of transfer ids in flight, for duplicate detection (FxHash: one multiply per id).
pub type IdSet = rustc_hash::FxHashSet<u64>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use llmsim_core::TransferId;
    use llmsim_topo::{ScaleUp, TopologySpec};

    use super::*;

    /// A route shape's links and summary are `expand`'s, for every kind of route.
    #[test]
    fn shape_and_summary_equal_expand() {
        let su = ScaleUp {
            gpus_per_server: 8,
            bandwidth: Bandwidth::from_gbps(3600),
            latency: SimTime::from_ns(250),
        };
        let topo = TopologySpec::default().build(64, su, 1).unwrap();
        let mut scratch = RouteScratch::default();
        let mut out = Vec::new();
        let mut n = 0;
        for src in (0..64u32).step_by(3) {
            for dst in (1..64u32).step_by(5) {
                let h = mix64(u64::from(src) << 8 | u64::from(dst));
                let routes = [
                    RouteSpec::Direct,
                    RouteSpec::Via(NodeId((src + 8) % 64)),
                    RouteSpec::Chain(Arc::from(vec![NodeId((src + 9) % 64), NodeId((dst + 17) % 64)])),
                ];
                for route in routes {
                    let t = Transfer {
                        route,
                        flow_hash: h,
                        ..Transfer::new(TransferId(1), NodeId(src), NodeId(dst), Bytes(1 << 20), SimTime::ZERO)
                    };
                    match (expand(&topo, &t, &mut scratch, &mut out), RouteShape::of(&topo, &t)) {
                        (Ok(sum), Ok(shape)) => {
                            assert_eq!(shape.links, out, "{t:?}");
                            assert_eq!(shape.summary(&topo), sum, "{t:?}");
                            n += 1;
                        }
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                        (a, b) => panic!("{t:?}: expand {a:?}, shape {b:?}"),
                    }
                }
            }
        }
        assert!(n > 300);
    }
}
