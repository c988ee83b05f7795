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

use llmsim_core::{Bandwidth, FieldError, LinkId, NodeId};
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::family::{FamilySpec, GridRules, RoutingRule, dims_text, grid_routers, grid_shape};
use crate::fastdiv::Divisor;
use crate::generators::{check_hosts, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, Topology};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec};
use crate::routing::{Routing, host_hop_computed, nvswitch_hop_computed};

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
        check_hosts(gpus)?;
        let rules = GridRules {
            family: "full-mesh",
            max_dims: MAX_DIMS,
            default_dimensions: 2,
        };
        let (dims, hpr) = grid_shape(&rules, self.dims.as_deref(), self.dimensions, self.hosts_per_router, gpus, scale_up)?;
        let p = FullMeshParams {
            dims,
            hosts_per_router: hpr,
            nic: self.nic.resolve(DEFAULT_NIC),
            fabric: self.fabric.resolve(DEFAULT_FABRIC),
        };
        full_mesh(gpus, &p, scale_up, seed)
    }
}

/// A resolved full mesh.
#[derive(Clone, Debug, PartialEq)]
pub struct FullMeshParams {
    /// Routers per dimension; product times `hosts_per_router` is the GPU count.
    pub dims: Vec<u32>,
    /// GPU NICs per router.
    pub hosts_per_router: u32,
    /// Host NIC <-> router.
    pub nic: LinkParams,
    /// Router <-> router, in every dimension.
    pub fabric: LinkParams,
}

/// Builds an n-D full mesh holding exactly `num_hosts` GPUs. Routing: [`FullMeshRule`].
///
/// # Errors
/// `TopoError::Invalid` when the dims times `hosts_per_router` differ from `num_hosts`, for a
/// zero bandwidth, or the scale-up errors of [`hosts_with_scale_up`].
pub fn full_mesh(num_hosts: u32, p: &FullMeshParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    let hpr = p.hosts_per_router;
    let routers = grid_routers(num_hosts, &p.dims, hpr, MAX_DIMS, p.nic, p.fabric)?;
    let mut dims = [1u32; MAX_DIMS];
    dims[..p.dims.len()].copy_from_slice(&p.dims);
    let mut stride = [1u32; MAX_DIMS];
    let mut first_port = [0u32; MAX_DIMS];
    let mut next = hpr;
    for i in 0..MAX_DIMS {
        stride[i] = if i == 0 { 1 } else { stride[i - 1] * dims[i - 1] };
        first_port[i] = next;
        next += dims[i] - 1;
    }
    // Router ports beyond the hosts: sum of (n - 1); u64 so a huge mesh is refused, not wrapped.
    let fabric_links = u64::from(routers) * u64::from(next - hpr);
    if fabric_links > 1 << 31 {
        return Err(FieldError::new(
            "topology.dims",
            format!(
                "{} needs {fabric_links} router links; use fewer routers per dimension",
                dims_text(&p.dims)
            ),
        )
        .into());
    }
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let router0 = b.add_nodes(NodeKind::Switch { tier: 1 }, routers).0;
    b.reserve_links(2 * num_hosts as usize + fabric_links as usize);
    for h in 0..num_hosts {
        b.add_link(NodeId(h), NodeId(router0 + h / hpr), p.nic, LinkKind::HostNic);
    }
    // Each router's outgoing links in port order: hosts, then per dimension its line in order.
    for r in 0..routers {
        for h in r * hpr..(r + 1) * hpr {
            b.add_link(NodeId(router0 + r), NodeId(h), p.nic, LinkKind::HostNic);
        }
        for i in 0..MAX_DIMS {
            let c = r / stride[i] % dims[i];
            let base = r - c * stride[i];
            for d in (0..dims[i]).filter(|&d| d != c) {
                b.add_link(
                    NodeId(router0 + r),
                    NodeId(router0 + base + d * stride[i]),
                    p.fabric,
                    LinkKind::Fabric,
                );
            }
        }
    }
    let rule = FullMeshRule {
        dims,
        stride,
        first_port,
        hosts_per_router: hpr,
        router0,
        ndims: MAX_DIMS - dims.iter().rev().take_while(|&&n| n == 1).count(),
        routers,
        dim_div: dims.map(Divisor::new),
        hpr_div: Divisor::new(hpr),
        num_hosts,
        host_links0: if scale_up.gpus_per_server > 1 { 2 * num_hosts } else { 0 },
        ports_per_router: next,
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
    /// Routers per dimension; unused dimensions hold 1.
    pub dims: [u32; MAX_DIMS],
    stride: [u32; MAX_DIMS],
    first_port: [u32; MAX_DIMS],
    /// GPU NICs per router.
    pub hosts_per_router: u32,
    /// Node id of the first router.
    pub router0: u32,
    /// Dimensions up to the last one of more than one router.
    ndims: usize,
    routers: u32,
    dim_div: [Divisor; MAX_DIMS],
    hpr_div: Divisor,
    num_hosts: u32,
    /// Id of the first host NIC link (after the NVLink links).
    host_links0: u32,
    /// Links (ports) of every router.
    ports_per_router: u32,
}

impl FullMeshRule {
    fn routers(&self) -> u32 {
        self.routers
    }
}

impl RoutingRule for FullMeshRule {
    fn name(&self) -> &'static str {
        "full-mesh minimal"
    }

    /// The far end of every hop is computed (a host's router, a line neighbour `r + (d - c) *
    /// stride`), so the next hop does not wait on this hop's load; coordinates come from one
    /// pass of multiply-divisions ([`Divisor`]).
    #[inline]
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError> {
        // Link ids are arithmetic too (the generator's order: NVLink links, then each host's
        // NIC link, then each router's links in port order), so a route reads no table; debug
        // assertions check each against the port table.
        if at.0 < self.num_hosts {
            let nic = (self.host_links0 + at.0, self.router0 + self.hpr_div.div(at.0));
            return Ok(host_hop_computed(t, at, dst, flow_hash, 1, |_| nic));
        }
        if at.0 < self.router0 {
            return nvswitch_hop_computed(t, at, dst);
        }
        let r = at.0 - self.router0;
        let (dr, slot) = self.hpr_div.div_rem(dst.0);
        let link0 = self.host_links0 + self.num_hosts + r * self.ports_per_router;
        if r == dr {
            let hop = Hop {
                link: LinkId(link0 + slot),
                to: dst,
            };
            debug_assert_eq!(hop, t.port_hops(at)[slot as usize], "full-mesh host port at {at}");
            return Ok(hop);
        }
        // The dimensions still to correct, in order, with both coordinates; the flow hash picks
        // one (ECMP).
        let mut differing = [(0usize, 0u32, 0u32); MAX_DIMS];
        let mut k = 0;
        let (mut a, mut b) = (r, dr);
        for (i, div) in self.dim_div.iter().enumerate().take(self.ndims) {
            let (qa, c) = div.div_rem(a);
            let (qb, d) = div.div_rem(b);
            if c != d {
                differing[k] = (i, c, d);
                k += 1;
            }
            (a, b) = (qa, qb);
        }
        if k == 0 || r >= self.routers {
            return Err(TopoError::Unreachable {
                src: at,
                dst,
                reason: "full-mesh router outside the mesh".into(),
            });
        }
        let (i, c, d) = differing[if k == 1 { 0 } else { t.ecmp_pick(at, flow_hash, k) }];
        let port = self.first_port[i] + if d < c { d } else { d - 1 };
        let to = at.0 + d * self.stride[i] - c * self.stride[i];
        let hop = Hop {
            link: LinkId(link0 + port),
            to: NodeId(to),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(port as usize), "full-mesh line port at {at}");
        Ok(hop)
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
        if !self.hosts_per_router.is_multiple_of(t.gpus_per_server()) {
            return None;
        }
        Some(2 + self.dims.iter().filter(|&&n| n > 1).count() as u32)
    }

    /// The cut across the last (slowest) dimension at its middle: hosts `0..H/2` are exactly
    /// the routers below it when that dimension is even; each of its lines is a complete graph
    /// cut in halves, `(n/2)^2` links.
    fn bisection(&self, t: &Topology) -> Option<Bandwidth> {
        let last = (0..MAX_DIMS).rev().find(|&i| self.dims[i] > 1)?;
        let n = self.dims[last];
        if !n.is_multiple_of(2) {
            return None;
        }
        let lines = self.routers() / n;
        let r0 = NodeId(self.router0);
        let fabric = t.link(t.ports(r0)[self.first_port[last] as usize]).bandwidth;
        let cross = u128::from(fabric.bps()) * u128::from(lines) * u128::from(n / 2) * u128::from(n / 2);
        let half = u128::from(t.num_hosts() / 2) * u128::from(t.nic_bandwidth(NodeId(0)).bps());
        Some(Bandwidth::from_bps(u64::try_from(cross.min(half)).unwrap_or(u64::MAX)))
    }
}
