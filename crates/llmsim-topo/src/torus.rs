//! Torus (2-D / 3-D, wrap-around) with dimension-order routing.
//!
//! One router per torus position (Blue Gene / TPU style, with a router standing for the
//! position's switch ASIC); `hosts_per_router` GPU NICs hang off each router. Routers cable to
//! their `+1` and `-1` neighbours in every dimension, wrapping around.
//!
//! Addresses: router `i` has coordinates `(i % n0, i / n0 % n1, i / (n0*n1))` (dimension 0
//! varies fastest); host `h` sits on router `h / hosts_per_router`.
//!
//! Node layout: hosts, NVSwitches, routers (`router0 + i`). Ports of router `i`: its hosts in id
//! order, then per dimension `+1` and `-1` (one port when the dimension has 2 routers, none when
//! it has 1).
//!
//! Rule (dimension order): correct dimension 0 first, then 1, then 2, each the short way round;
//! when both ways are equally short (`n` even, the antipode) the flow hash picks one (ECMP).

use std::sync::Arc;

use llmsim_core::{Bandwidth, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, GridRules, RoutingRule, dims_text};
use crate::graph::{Hop, ScaleUp, Topology};
use crate::grid::{Grid, GridParams, GridStep};
use crate::link_spec::LinkSpec;
use crate::routing::Routing;

/// Largest number of torus dimensions.
pub const MAX_DIMS: usize = 3;

/// `topology: { kind: torus, dims: [8, 8, 16], hosts_per_router: 8 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TorusSpec {
    /// Routers per dimension, 1 to 3 entries, product = GPUs / `hosts_per_router`.
    /// Default: the most cubic shape of `dimensions` dimensions (largest last).
    pub dims: Option<Vec<u32>>,
    /// Dimensions when `dims` is not given: 2 or 3. Default 3.
    pub dimensions: Option<u32>,
    /// GPU NICs per router. Default: `gpus_per_server` (one router per server).
    pub hosts_per_router: Option<u32>,
    /// Host NIC <-> router. Default 400Gbps / 500ns.
    pub nic: LinkSpec,
    /// Router <-> router, per direction. Default 400Gbps / 600ns.
    pub fabric: LinkSpec,
}

/// The most cubic `d`-dimensional shape with product `n`, ascending (largest last).
pub fn balanced_dims(n: u32, d: usize) -> Vec<u32> {
    match d {
        0 | 1 => vec![n],
        2 => {
            let a = (1..=n.isqrt()).rev().find(|a| n.is_multiple_of(*a)).unwrap_or(1);
            vec![a, n / a]
        }
        _ => {
            let mut best = [1, 1, n];
            for a in 1..=n.isqrt() {
                if u64::from(a).pow(3) > u64::from(n) {
                    break;
                }
                if !n.is_multiple_of(a) {
                    continue;
                }
                let m = n / a;
                let b = (a..=m.isqrt()).rev().find(|b| m.is_multiple_of(*b));
                if let Some(b) = b {
                    let c = m / b;
                    // Smallest largest side; ties go to the larger smallest side (later `a`).
                    if c <= best[2] {
                        best = [a, b, c];
                    }
                }
            }
            best.to_vec()
        }
    }
}

impl FamilySpec for TorusSpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        let rules = GridRules {
            family: "torus",
            max_dims: MAX_DIMS,
            default_dimensions: 3,
        };
        let (dims, dimensions, hpr) = (self.dims.as_deref(), self.dimensions, self.hosts_per_router);
        let p = GridParams::resolve(&rules, dims, dimensions, hpr, &self.nic, &self.fabric, gpus, scale_up)?;
        torus(gpus, &p, scale_up, seed)
    }
}

/// A resolved torus.
pub type TorusParams = GridParams;

fn ports_of(n: u32) -> u32 {
    match n {
        1 => 0,
        2 => 1,
        _ => 2,
    }
}

/// Builds a torus holding exactly `num_hosts` GPUs. Routing: [`TorusRule`].
///
/// # Errors
/// `TopoError::Invalid` when the dims times `hosts_per_router` differ from `num_hosts`, for a
/// zero bandwidth, or the scale-up errors of [`crate::generators::hosts_with_scale_up`].
pub fn torus(num_hosts: u32, p: &TorusParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    // Ports per dimension: `+1`, then `-1` (one port when the dimension has 2 routers).
    let (b, grid) = Grid::lay_out(
        num_hosts,
        &p.dims,
        p.hosts_per_router,
        p.nic,
        p.fabric,
        scale_up,
        ports_of,
        |n, c, add| {
            if n >= 2 {
                add((c + 1) % n);
            }
            if n >= 3 {
                add((c + n - 1) % n);
            }
        },
    )?;
    b.build(
        format!("torus-{}-{num_hosts}", dims_text(&p.dims)),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(TorusRule { grid })),
        ecmp_seed,
    )
}

/// Dimension-order routing on a torus; see the module doc for addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorusRule {
    grid: Grid<MAX_DIMS>,
}

impl TorusRule {
    /// Routers per dimension; unused dimensions hold 1.
    pub fn dims(&self) -> [u32; MAX_DIMS] {
        self.grid.dims
    }

    fn routers(&self) -> u32 {
        self.grid.routers
    }
}

impl RoutingRule for TorusRule {
    fn name(&self) -> &'static str {
        "torus dimension-order"
    }

    /// Every hop's far end is computed (a host's router, the `+1` / `-1` neighbour), so the
    /// next hop does not wait on this hop's load; coordinates come from multiply-divisions
    /// ([`crate::fastdiv::Divisor`]).
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        let g = &self.grid;
        let (r, dr, link0) = match g.step(t, at, dst, flow_hash)? {
            GridStep::Done(hop) => return Ok(hop),
            GridStep::Router { r, dr, link0 } => (r, dr, link0),
        };
        let (mut a, mut b) = (r, dr);
        for i in 0..MAX_DIMS {
            let n = g.dims[i];
            let (qa, c) = g.dim_div[i].div_rem(a);
            let (qb, d) = g.dim_div[i].div_rem(b);
            (a, b) = (qa, qb);
            if c == d {
                continue;
            }
            let first = g.first_port[i];
            let plus = if c + 1 == n { 0 } else { c + 1 };
            let minus = if c == 0 { n - 1 } else { c - 1 };
            let (port, e) = if n == 2 {
                (first, plus)
            } else {
                let ahead = if d >= c { d - c } else { d + n - c };
                match (2 * ahead).cmp(&n) {
                    std::cmp::Ordering::Less => (first, plus),
                    std::cmp::Ordering::Greater => (first + 1, minus),
                    std::cmp::Ordering::Equal => {
                        if t.ecmp_pick(at, flow_hash, 2) == 0 {
                            (first, plus)
                        } else {
                            (first + 1, minus)
                        }
                    }
                }
            };
            return Ok(g.hop(t, at, link0, port, (i, c, e)));
        }
        Err(TopoError::Unreachable {
            src: at,
            dst,
            reason: "torus router outside the torus".into(),
        })
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        if t.num_hosts() < 2 {
            return Some(0);
        }
        if self.routers() == 1 {
            return Some(2);
        }
        // The antipodal routers hold different servers only when servers do not span routers.
        if !self.grid.hosts_per_router.is_multiple_of(t.gpus_per_server()) {
            return None;
        }
        Some(2 + self.grid.dims.iter().map(|n| n / 2).sum::<u32>())
    }

    /// Rings along the torus: variant `v` walks dimension `v / 2` fastest (the others in order
    /// after it), ascending for even `v` and descending for odd, in boustrophedon (snake) order:
    /// a digit runs backwards whenever the position of the slower digits before it is odd, so
    /// every step of the ring, row ends included, is one hop on one dimension. The two
    /// directions of one variant pair use opposite links, and `2 x dimensions` variants spread
    /// the rings over every dimension.
    fn ring_order_key(&self, _t: &Topology, host: NodeId, variant: u32) -> Option<u64> {
        // The dimensions longer than 1, in order (no allocation: sorting a group calls this often).
        let mut used = [0usize; MAX_DIMS];
        let mut n = 0;
        for i in (0..MAX_DIMS).filter(|&i| self.grid.dims[i] > 1) {
            used[n] = i;
            n += 1;
        }
        let used = &used[..n];
        if used.is_empty() {
            return None;
        }
        let v = variant as usize % (2 * used.len());
        let fast = used[v / 2];
        let r = host.0 / self.grid.hosts_per_router;
        // Mixed radix from the slowest digit (the other dimensions, last first) to `fast`, each
        // digit reflected when the position so far is odd (reflected mixed-radix Gray order).
        let mut key = 0u64;
        let mut weight = 1u64;
        let slow = used.iter().rev().copied().filter(|&i| i != fast);
        for i in slow.chain(std::iter::once(fast)) {
            let size = u64::from(self.grid.dims[i]);
            let c = u64::from(self.grid.coord(r, i));
            let digit = if key % 2 == 1 { size - 1 - c } else { c };
            key = key * size + digit;
            weight *= size;
        }
        Some(if v % 2 == 1 { weight - 1 - key } else { key })
    }

    /// The cut across the last (slowest) dimension at its middle: hosts `0..H/2` are exactly
    /// the routers below it when that dimension is even.
    fn bisection(&self, t: &Topology) -> Option<Bandwidth> {
        let last = (0..MAX_DIMS).rev().find(|&i| self.grid.dims[i] > 1)?;
        let n = self.grid.dims[last];
        if !n.is_multiple_of(2) {
            return None;
        }
        let plane = self.routers() / n;
        let cuts = if n == 2 { 1 } else { 2 };
        let r0 = NodeId(self.grid.router0);
        let fabric = t.link(t.ports(r0)[self.grid.first_port[last] as usize]).bandwidth;
        let cross = u128::from(fabric.bps()) * u128::from(plane * cuts);
        let half = u128::from(t.num_hosts() / 2) * u128::from(t.nic_bandwidth(NodeId(0)).bps());
        Some(Bandwidth::from_bps(u64::try_from(cross.min(half)).unwrap_or(u64::MAX)))
    }
}
