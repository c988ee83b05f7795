//! What the direct router networks (torus, full mesh) share: routers at n-D coordinates
//! (dimension 0 varies fastest), `hosts_per_router` GPU NICs on each router, and the link layout
//! their routing rules compute hops from.
//!
//! Node layout: hosts, NVSwitches, routers (`router0 + i`). Links in the generator's order:
//! NVLink links, each host's NIC link, then each router's links in port order: its hosts in id
//! order, then per dimension the family's neighbours (torus: `+1`, `-1`; full mesh: every other
//! router of the line). So a hop's link id is arithmetic and a route reads no table.

use llmsim_core::{FieldError, LinkId, NodeId};

use crate::TopoError;
use crate::Topology;
use crate::family::{GridRules, dims_text, grid_routers, grid_shape};
use crate::fastdiv::Divisor;
use crate::generators::{check_hosts, hosts_with_scale_up};
use crate::graph::{Hop, LinkKind, LinkParams, NodeKind, ScaleUp, TopologyBuilder};
use crate::link_spec::{DEFAULT_FABRIC, DEFAULT_NIC, LinkSpec};
use crate::routing::{host_hop_computed, nvswitch_hop_computed};

/// A resolved grid family (torus, full mesh): its shape and link rates.
#[derive(Clone, Debug, PartialEq)]
pub struct GridParams {
    /// Routers per dimension; product times `hosts_per_router` is the GPU count.
    pub dims: Vec<u32>,
    /// GPU NICs per router.
    pub hosts_per_router: u32,
    /// Host NIC <-> router.
    pub nic: LinkParams,
    /// Router <-> router, in every dimension.
    pub fabric: LinkParams,
}

impl GridParams {
    /// Resolves a grid family's scenario fields for `gpus` GPUs ([`grid_shape`]); unset link
    /// specs take the NIC and fabric defaults.
    ///
    /// # Errors
    /// `TopoError::Invalid` naming the field (see [`grid_shape`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resolve(
        rules: &GridRules,
        dims: Option<&[u32]>,
        dimensions: Option<u32>,
        hosts_per_router: Option<u32>,
        nic: &LinkSpec,
        fabric: &LinkSpec,
        gpus: u32,
        scale_up: ScaleUp,
    ) -> Result<Self, TopoError> {
        check_hosts(gpus)?;
        let (dims, hosts_per_router) = grid_shape(rules, dims, dimensions, hosts_per_router, gpus, scale_up)?;
        Ok(GridParams {
            dims,
            hosts_per_router,
            nic: nic.resolve(DEFAULT_NIC),
            fabric: fabric.resolve(DEFAULT_FABRIC),
        })
    }
}

/// The addresses and port layout of a grid of `N` dimensions at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grid<const N: usize> {
    /// Routers per dimension; unused dimensions hold 1.
    pub dims: [u32; N],
    /// Router-id step of one coordinate in each dimension.
    pub stride: [u32; N],
    /// First port of each dimension's neighbours on every router.
    pub first_port: [u32; N],
    /// GPU NICs per router.
    pub hosts_per_router: u32,
    /// Node id of the first router.
    pub router0: u32,
    /// Routers in the grid.
    pub routers: u32,
    pub dim_div: [Divisor; N],
    hpr_div: Divisor,
    num_hosts: u32,
    /// Id of the first host NIC link (after the NVLink links).
    host_links0: u32,
    /// Links (ports) of every router.
    ports_per_router: u32,
}

/// Where a hop at a grid node goes: decided without the family's rule (a host's NIC, an
/// NVSwitch, a router's own host port), or a router-to-router hop for the rule to choose.
pub(crate) enum GridStep {
    /// The hop, already known.
    Done(Hop),
    /// At router `r` (grid index) towards router `dr`; `link0` is `r`'s first link id.
    Router { r: u32, dr: u32, link0: u32 },
}

impl<const N: usize> Grid<N> {
    /// Lays out a grid holding exactly `num_hosts` GPUs: checks the shape, adds the routers and
    /// every link in port order. `ports(n)` is how many neighbour ports a dimension of `n`
    /// routers gives each router, and `neighbours(n, c, add)` calls `add(e)` for each neighbour
    /// coordinate `e` of coordinate `c`, in port order. The caller wraps the returned grid in its
    /// routing rule and builds.
    ///
    /// # Errors
    /// `TopoError::Invalid` naming the field: the shape errors of [`grid_routers`], a grid
    /// needing more than 2^31 router links, and the scale-up errors of [`hosts_with_scale_up`].
    #[allow(clippy::too_many_arguments)]
    pub fn lay_out(
        num_hosts: u32,
        shape: &[u32],
        hosts_per_router: u32,
        nic: LinkParams,
        fabric: LinkParams,
        scale_up: ScaleUp,
        ports: impl Fn(u32) -> u32,
        neighbours: impl Fn(u32, u32, &mut dyn FnMut(u32)),
    ) -> Result<(TopologyBuilder, Self), TopoError> {
        let hpr = hosts_per_router;
        let routers = grid_routers(num_hosts, shape, hpr, N, nic, fabric)?;
        let mut dims = [1u32; N];
        dims[..shape.len()].copy_from_slice(shape);
        let mut stride = [1u32; N];
        let mut first_port = [0u32; N];
        let mut next = hpr;
        for i in 0..N {
            stride[i] = if i == 0 { 1 } else { stride[i - 1] * dims[i - 1] };
            first_port[i] = next;
            next += ports(dims[i]);
        }
        // u64 so a huge grid is refused, not wrapped.
        let fabric_links = u64::from(routers) * u64::from(next - hpr);
        if fabric_links > 1 << 31 {
            return Err(FieldError::new(
                "topology.dims",
                format!(
                    "{} needs {fabric_links} router links; use fewer routers per dimension",
                    dims_text(shape)
                ),
            )
            .into());
        }
        let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
        let router0 = b.add_nodes(NodeKind::Switch { tier: 1 }, routers).0;
        b.reserve_links(2 * num_hosts as usize + fabric_links as usize);
        for h in 0..num_hosts {
            b.add_link(NodeId(h), NodeId(router0 + h / hpr), nic, LinkKind::HostNic);
        }
        for r in 0..routers {
            for h in r * hpr..(r + 1) * hpr {
                b.add_link(NodeId(router0 + r), NodeId(h), nic, LinkKind::HostNic);
            }
            for i in 0..N {
                let c = r / stride[i] % dims[i];
                let base = r - c * stride[i];
                neighbours(dims[i], c, &mut |e| {
                    b.add_link(
                        NodeId(router0 + r),
                        NodeId(router0 + base + e * stride[i]),
                        fabric,
                        LinkKind::Fabric,
                    );
                });
            }
        }
        let grid = Grid {
            dims,
            stride,
            first_port,
            hosts_per_router: hpr,
            router0,
            routers,
            dim_div: dims.map(Divisor::new),
            hpr_div: Divisor::new(hpr),
            num_hosts,
            host_links0: if scale_up.gpus_per_server > 1 { 2 * num_hosts } else { 0 },
            ports_per_router: next,
        };
        Ok((b, grid))
    }

    /// The hop at `at` towards host `dst` where the family's rule is not needed: a host's NIC
    /// (or its NVSwitch), an NVSwitch, the destination's own router. Otherwise the routers.
    /// Debug assertions check each computed hop against the port table.
    #[inline]
    pub fn step(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<GridStep, TopoError> {
        if at.0 < self.num_hosts {
            let nic = (self.host_links0 + at.0, self.router0 + self.hpr_div.div(at.0));
            return Ok(GridStep::Done(host_hop_computed(t, at, dst, flow_hash, 1, |_| nic)));
        }
        if at.0 < self.router0 {
            return nvswitch_hop_computed(t, at, dst).map(GridStep::Done);
        }
        let r = at.0 - self.router0;
        let (dr, slot) = self.hpr_div.div_rem(dst.0);
        let link0 = self.host_links0 + self.num_hosts + r * self.ports_per_router;
        if r == dr {
            let hop = Hop {
                link: LinkId(link0 + slot),
                to: dst,
            };
            debug_assert_eq!(hop, t.port_hops(at)[slot as usize], "grid host port at {at}");
            return Ok(GridStep::Done(hop));
        }
        Ok(GridStep::Router { r, dr, link0 })
    }

    /// The hop from router node `at` (first link `link0`) through `port`, which moves dimension
    /// `i` from coordinate `c` to `e` (`step = (i, c, e)`).
    #[inline]
    pub fn hop(&self, t: &Topology, at: NodeId, link0: u32, port: u32, step: (usize, u32, u32)) -> Hop {
        let (i, c, e) = step;
        let hop = Hop {
            link: LinkId(link0 + port),
            to: NodeId(at.0 + e * self.stride[i] - c * self.stride[i]),
        };
        debug_assert_eq!(Some(&hop), t.port_hops(at).get(port as usize), "grid port at {at}");
        hop
    }

    /// Coordinate of router `r` (grid index) in dimension `i`.
    pub fn coord(&self, r: u32, i: usize) -> u32 {
        r / self.stride[i] % self.dims[i]
    }
}
