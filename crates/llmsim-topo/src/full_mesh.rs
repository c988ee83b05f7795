//! n-D full mesh (UB-Mesh style): routers at n-D coordinates; in every dimension each router
//! cables directly to every other router of its line (the routers that differ from it in that
//! coordinate only).
//!
//! UB-Mesh (Huawei, 2025) builds its rack-level fabric as a 2-D full mesh of NPUs and stacks
//! higher dimensions above it; here, as in the torus family, a router stands for a position's
//! switching element and `hosts_per_router` GPU NICs hang off it, so every backend (the packet
//! engine forwards at switches only) runs it unchanged. What is simplified: UB-Mesh's direct
//! NPU-to-NPU links become NPU -> router -> router -> NPU, and its per-dimension link
//! bandwidths are one `fabric` link spec for all dimensions.
//!
//! Addresses: router `i` has coordinate `i / stride[d] % n[d]` in dimension `d` (dimension 0
//! varies fastest); host `h` sits on router `h / hosts_per_router`.
//!
//! Node layout: hosts, NVSwitches, routers (`router0 + i`). Ports of router `i`: its hosts in id
//! order, then per dimension its `n[d] - 1` line neighbours in coordinate order.
//!
//! Rule (minimal, adaptive order): a route corrects each differing dimension with one direct hop.
//! At each router the flow hash picks which of the still-differing dimensions to correct next
//! (ECMP over the `k!` minimal orders); every hop fixes a coordinate for good, so routes are
//! minimal and loop-free.

use std::sync::Arc;

use llmsim_core::{Bandwidth, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, GridRules, RoutingRule, dims_text};
use crate::graph::{Hop, ScaleUp, Topology};
use crate::grid::{Grid, GridParams, GridStep};
use crate::link_spec::LinkSpec;
use crate::routing::Routing;

/// Largest number of full-mesh dimensions.
pub const MAX_DIMS: usize = 4;

/// `topology: { kind: full-mesh, dims: [8, 8], hosts_per_router: 8 }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FullMeshSpec {
    /// Routers per dimension, 1 to 4 entries, product = GPUs / `hosts_per_router`.
    /// Default: the most square shape of `dimensions` dimensions (largest last).
    pub dims: Option<Vec<u32>>,
    /// Dimensions when `dims` is not given: 2 or 3. Default 2 (UB-Mesh's rack: a 2-D full mesh).
    pub dimensions: Option<u32>,
    /// GPU NICs per router. Default: `gpus_per_server` (one router per server).
    pub hosts_per_router: Option<u32>,
    /// Host NIC <-> router. Default 400Gbps / 500ns.
    pub nic: LinkSpec,
    /// Router <-> router, per direction, every dimension. Default 400Gbps / 600ns.
    pub fabric: LinkSpec,
}

impl FamilySpec for FullMeshSpec {
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError> {
        let rules = GridRules {
            family: "full-mesh",
            max_dims: MAX_DIMS,
            default_dimensions: 2,
        };
        let (dims, dimensions, hpr) = (self.dims.as_deref(), self.dimensions, self.hosts_per_router);
        let p = GridParams::resolve(&rules, dims, dimensions, hpr, &self.nic, &self.fabric, gpus, scale_up)?;
        full_mesh(gpus, &p, scale_up, seed)
    }
}

/// A resolved full mesh.
pub type FullMeshParams = GridParams;

/// Builds an n-D full mesh holding exactly `num_hosts` GPUs. Routing: [`FullMeshRule`].
///
/// # Errors
/// `TopoError::Invalid` when the dims times `hosts_per_router` differ from `num_hosts`, for a
/// zero bandwidth, a mesh of more than 2^31 router links, or the scale-up errors of
/// [`crate::generators::hosts_with_scale_up`].
pub fn full_mesh(num_hosts: u32, p: &FullMeshParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    // Ports per dimension: every other router of the line, in coordinate order.
    let (b, grid) = Grid::lay_out(
        num_hosts,
        &p.dims,
        p.hosts_per_router,
        p.nic,
        p.fabric,
        scale_up,
        |n| n - 1,
        |n, c, add| {
            for e in (0..n).filter(|&e| e != c) {
                add(e);
            }
        },
    )?;
    let rule = FullMeshRule {
        ndims: MAX_DIMS - grid.dims.iter().rev().take_while(|&&n| n == 1).count(),
        grid,
    };
    b.build(
        format!("full-mesh-{}-{num_hosts}", dims_text(&p.dims)),
        num_hosts,
        scale_up,
        Routing::Rule(Arc::new(rule)),
        ecmp_seed,
    )
}

/// Minimal routing on an n-D full mesh; see the module doc for addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullMeshRule {
    grid: Grid<MAX_DIMS>,
    /// Dimensions up to the last one of more than one router.
    ndims: usize,
}

impl FullMeshRule {
    /// Routers per dimension; unused dimensions hold 1.
    pub fn dims(&self) -> [u32; MAX_DIMS] {
        self.grid.dims
    }

    fn routers(&self) -> u32 {
        self.grid.routers
    }
}

impl RoutingRule for FullMeshRule {
    fn name(&self) -> &'static str {
        "full-mesh minimal"
    }

    /// The far end of every hop is computed (a host's router, a line neighbour `r + (d - c) *
    /// stride`), so the next hop does not wait on this hop's load; coordinates come from one
    /// pass of multiply-divisions ([`crate::fastdiv::Divisor`]).
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        let g = &self.grid;
        let (r, dr, link0) = match g.step(t, at, dst, flow_hash)? {
            GridStep::Done(hop) => return Ok(hop),
            GridStep::Router { r, dr, link0 } => (r, dr, link0),
        };
        // The dimensions still to correct, in order, with both coordinates; the flow hash picks
        // one (ECMP).
        let mut differing = [(0usize, 0u32, 0u32); MAX_DIMS];
        let mut k = 0;
        let (mut a, mut b) = (r, dr);
        for (i, div) in g.dim_div.iter().enumerate().take(self.ndims) {
            let (qa, c) = div.div_rem(a);
            let (qb, d) = div.div_rem(b);
            if c != d {
                differing[k] = (i, c, d);
                k += 1;
            }
            (a, b) = (qa, qb);
        }
        if k == 0 || r >= g.routers {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "full-mesh router outside the mesh".into(),
            });
        }
        let (i, c, d) = differing[if k == 1 { 0 } else { t.ecmp_pick(at, flow_hash, k) }];
        let port = g.first_port[i] + if d < c { d } else { d - 1 };
        Ok(g.hop(t, at, link0, port, (i, c, d)))
    }

    fn diameter(&self, t: &Topology) -> Option<u32> {
        if t.num_hosts() < 2 {
            return Some(0);
        }
        if self.routers() == 1 {
            return Some(2);
        }
        // Two servers on routers that differ in every dimension exist only when servers do not
        // span routers.
        if !self.grid.hosts_per_router.is_multiple_of(t.gpus_per_server()) {
            return None;
        }
        Some(2 + self.grid.dims.iter().filter(|&&n| n > 1).count() as u32)
    }

    /// The cut across the last (slowest) dimension at its middle: hosts `0..H/2` are exactly
    /// the routers below it when that dimension is even; each of its lines is a complete graph
    /// cut in halves, `(n/2)^2` links.
    fn bisection(&self, t: &Topology) -> Option<Bandwidth> {
        let last = (0..MAX_DIMS).rev().find(|&i| self.grid.dims[i] > 1)?;
        let n = self.grid.dims[last];
        if !n.is_multiple_of(2) {
            return None;
        }
        let lines = self.routers() / n;
        let r0 = NodeId(self.grid.router0);
        let fabric = t.link(t.ports(r0)[self.grid.first_port[last] as usize]).bandwidth;
        let cross = u128::from(fabric.bps()) * u128::from(lines) * u128::from(n / 2) * u128::from(n / 2);
        let half = u128::from(t.num_hosts() / 2) * u128::from(t.nic_bandwidth(NodeId(0)).bps());
        Some(Bandwidth::from_bps(u64::try_from(cross.min(half)).unwrap_or(u64::MAX)))
    }
}
