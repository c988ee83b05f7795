//! The seam a topology family plugs into (htsim's `Topology`, Nüwa's rules).
//!
//! A family is one file (`torus.rs`, `dragonfly.rs`, ...) holding:
//! - a spec, the serde struct a user writes under `topology:` (`deny_unknown_fields`, every field
//!   optional with a documented default, sized from the GPU count when left out), implementing
//!   [`FamilySpec`];
//! - a generator that lays out hosts, NVSwitches and switches with a [`crate::TopologyBuilder`];
//! - a routing rule with O(1) parameters implementing [`RoutingRule`]: the next hop is arithmetic
//!   on hierarchical addresses and the flow hash, never a per-destination table.
//!
//! Registration is one line in the `families { .. }` list of [`crate::TopologySpec`]
//! (`Torus(crate::torus::TorusSpec),`, with its doc comment) besides `pub mod` in `lib.rs`: it
//! names the kind for YAML, JSON, the schema docs and `--topology` (whose help lists
//! [`crate::spec::kinds`]), and `TopologySpec::build` builds it through
//! [`crate::TopologySpec::family`]. `describe` and the ns-3 export work on any family.

use std::fmt::Debug;

use llmsim_core::{Bandwidth, LinkId, NodeId};

use llmsim_core::FieldError;

use crate::TopoError;
use crate::graph::{Hop, ScaleUp, Topology};

/// A topology family's routing rule. Implementations hold O(1) parameters (node-id offsets,
/// sizes) and must not allocate in [`RoutingRule::hop`].
pub trait RoutingRule: Send + Sync + Debug {
    /// Short name for reports, e.g. `"torus dimension-order"`.
    fn name(&self) -> &'static str;

    /// The outgoing link `at` forwards a packet of flow `flow_hash` on, toward host `dst`, with
    /// the node it leads to: an entry of [`Topology::port_hops`]. Called for every node kind
    /// (host, NVSwitch, switch); `dst` is a host and `at != dst`.
    ///
    /// # Errors
    /// `TopoError::Unreachable` when the rule has no way to `dst` from `at`.
    fn hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<Hop, TopoError>;

    /// The link of [`RoutingRule::hop`].
    ///
    /// # Errors
    /// As [`RoutingRule::hop`].
    #[inline]
    fn next_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
        self.hop(t, at, dst, flow_hash).map(|h| h.link)
    }

    /// Appends to `out` every next hop the rule allows at `at` toward `dst`, the candidates
    /// [`RoutingRule::next_hop`] picks among by the flow hash, in port order. Default: the one
    /// link `next_hop` gives for hash 0 (a rule without a choice, e.g. dimension order).
    ///
    /// # Errors
    /// As [`RoutingRule::next_hop`].
    fn next_hops(&self, t: &Topology, at: NodeId, dst: NodeId, out: &mut Vec<LinkId>) -> Result<(), TopoError> {
        out.push(self.next_hop(t, at, dst, 0)?);
        Ok(())
    }

    /// Every next hop the route of flow `flow_hash` in route class `class` may take at `at`
    /// toward `dst`, in port order: the candidates [`RoutingRule::hop_in_class`] picks among by
    /// the flow hash, for a rule whose route depends on the flow beyond that pick (a dragonfly's
    /// Valiant intermediate group). Routing around failed links narrows these first and falls
    /// back to [`RoutingRule::next_hops`] only where failed links cut every one; spraying splits
    /// over them. Only called when [`RoutingRule::flow_specific`]; default: `next_hops`.
    ///
    /// # Errors
    /// As [`RoutingRule::next_hops`].
    fn flow_hops(
        &self,
        t: &Topology,
        at: NodeId,
        dst: NodeId,
        _flow_hash: u64,
        _class: u32,
        out: &mut Vec<LinkId>,
    ) -> Result<(), TopoError> {
        self.next_hops(t, at, dst, out)
    }

    /// Whether [`RoutingRule::flow_hops`] differs from [`RoutingRule::next_hops`] for some flow
    /// or class. Default false.
    fn flow_specific(&self) -> bool {
        false
    }

    /// Longest minimal host-to-host route in links, when the family knows it in closed form;
    /// `None` lets `describe` search by BFS.
    fn diameter(&self, _t: &Topology) -> Option<u32> {
        None
    }

    /// Capacity from the first half of the hosts (by id) to the second half, when known in
    /// closed form; `None` lets `describe` compute a max flow.
    fn bisection(&self, _t: &Topology) -> Option<Bandwidth> {
        None
    }

    /// Heap bytes held by the rule (zero for arithmetic rules).
    fn heap_bytes(&self) -> usize {
        0
    }

    /// Route classes a load-aware chooser may pick among per flow (UGAL: class 0 minimal, the
    /// others non-minimal); 1 (the default) for a rule without such a choice.
    fn route_classes(&self) -> u32 {
        1
    }

    /// [`RoutingRule::hop`] restricted to route class `class` (below
    /// [`RoutingRule::route_classes`]). Default: `hop`.
    ///
    /// # Errors
    /// As [`RoutingRule::hop`].
    fn hop_in_class(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64, _class: u32) -> Result<Hop, TopoError> {
        self.hop(t, at, dst, flow_hash)
    }

    /// Whether hosts relay traffic for others (server-centric fabrics such as BCube). The packet
    /// engine forwards at switches only and refuses such a topology. Default false.
    fn hosts_forward(&self) -> bool {
        false
    }

    /// Where host `host` sits in ring order number `variant` (0, 1, 2, ...), for families whose
    /// collectives should lay rings along their structure (a torus: one ring order per dimension
    /// and direction, so successive channels use different links). Sorting a group's servers by
    /// this key gives the ring. `None` (the default): rank order.
    fn ring_order_key(&self, _t: &Topology, _host: NodeId, _variant: u32) -> Option<u64> {
        None
    }
}

/// A family's user-facing spec: builds the topology for `gpus` GPUs.
pub trait FamilySpec {
    /// # Errors
    /// `TopoError::Invalid` naming the field (`topology.<field>` or `gpus`) and the valid values.
    fn build(&self, gpus: u32, scale_up: ScaleUp, seed: u64) -> Result<Topology, TopoError>;
}

/// Divisors of `n` up to `limit` entries, for "valid: ..." hints.
pub(crate) fn divisors_hint(n: u32, limit: usize) -> String {
    let mut d: Vec<String> = (1..=n)
        .filter(|i| n.is_multiple_of(*i))
        .take(limit)
        .map(|i| i.to_string())
        .collect();
    if d.len() == limit && d.last().is_none_or(|s| s != &n.to_string()) {
        d.push(format!("..., {n}"));
    }
    d.join(", ")
}

/// How a grid-shaped family (routers at n-D coordinates: torus, full mesh) names and bounds its
/// shape, for [`grid_shape`].
pub(crate) struct GridRules {
    /// The family's name in messages, e.g. `"torus"`.
    pub family: &'static str,
    /// Most entries `dims` may have.
    pub max_dims: usize,
    /// Dimensions when neither `dims` nor `dimensions` is given.
    pub default_dimensions: u32,
}

/// Resolves a grid family's `dims`, `dimensions` and `hosts_per_router` for `gpus` GPUs: the
/// routers per dimension and the hosts per router. Without `dims`, the most balanced shape of
/// `dimensions` (2 or 3) dimensions.
///
/// # Errors
/// `TopoError::Invalid` naming the field and the valid values: a `hosts_per_router` that does not
/// divide the GPUs, `dims` and `dimensions` that disagree, a shape with a zero or too many
/// entries, dims whose product is not the router count, an unsupported `dimensions`.
pub(crate) fn grid_shape(
    r: &GridRules,
    dims: Option<&[u32]>,
    dimensions: Option<u32>,
    hosts_per_router: Option<u32>,
    gpus: u32,
    scale_up: ScaleUp,
) -> Result<(Vec<u32>, u32), TopoError> {
    let hpr = hosts_per_router.unwrap_or(scale_up.gpus_per_server.max(1));
    if hpr == 0 || gpus == 0 || !gpus.is_multiple_of(hpr) {
        return Err(FieldError::new(
            "topology.hosts_per_router",
            format!(
                "{hpr} does not divide the {gpus} GPUs into whole routers; valid: {}",
                divisors_hint(gpus.max(1), 12)
            ),
        )
        .into());
    }
    let routers = gpus / hpr;
    let text = dims_text;
    let dims = match (dims, dimensions) {
        (Some(d), Some(n)) if d.len() != n as usize => {
            return Err(FieldError::new(
                "topology.dimensions",
                format!("dimensions={n} but dims has {} entries; give one of them", d.len()),
            )
            .into());
        }
        (Some(d), _) => {
            if d.is_empty() || d.len() > r.max_dims || d.contains(&0) {
                return Err(FieldError::new(
                    "topology.dims",
                    format!(
                        "{d:?} is not a {} shape; give 1 to {} sizes of at least 1, e.g. [8, 8]",
                        r.family, r.max_dims
                    ),
                )
                .into());
            }
            if d.iter().try_fold(1u32, |a, &x| a.checked_mul(x)) != Some(routers) {
                let hint = text(&crate::torus::balanced_dims(routers, d.len().min(3)));
                return Err(FieldError::new(
                    "topology.dims",
                    format!(
                        "{} routers x {hpr} hosts_per_router do not hold {gpus} GPUs; use dims whose product is {routers}, e.g. {hint}",
                        text(d)
                    ),
                )
                .into());
            }
            d.to_vec()
        }
        (None, n) => {
            let n = n.unwrap_or(r.default_dimensions);
            if !(2..=3).contains(&n) {
                return Err(FieldError::new(
                    "topology.dimensions",
                    format!(
                        "{n} is not supported without dims; valid: 2, 3 (or give dims with up to {} entries)",
                        r.max_dims
                    ),
                )
                .into());
            }
            crate::torus::balanced_dims(routers, n as usize)
        }
    };
    Ok((dims, hpr))
}

/// A grid shape as text, `4x4x8`.
pub(crate) fn dims_text(d: &[u32]) -> String {
    d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("x")
}

/// Checks a resolved grid family's parameters before building it: `num_hosts` GPUs, non-zero
/// `nic` and `fabric` rates, and `dims` (1 to `max_dims` entries) times `hosts_per_router`
/// holding exactly `num_hosts`. Returns the router count.
///
/// # Errors
/// `TopoError::Invalid` naming the field.
pub(crate) fn grid_routers(
    num_hosts: u32,
    dims: &[u32],
    hosts_per_router: u32,
    max_dims: usize,
    nic: crate::graph::LinkParams,
    fabric: crate::graph::LinkParams,
) -> Result<u32, TopoError> {
    crate::generators::check_hosts(num_hosts)?;
    crate::generators::check_rate("topology.nic", nic)?;
    crate::generators::check_rate("topology.fabric", fabric)?;
    let hpr = hosts_per_router;
    let routers = dims.iter().try_fold(1u32, |a, &x| a.checked_mul(x));
    match routers {
        Some(r) if !dims.is_empty() && dims.len() <= max_dims && hpr > 0 && r.checked_mul(hpr) == Some(num_hosts) => Ok(r),
        _ => Err(FieldError::new(
            "topology.dims",
            format!("{} routers x {hpr} hosts_per_router do not hold {num_hosts} GPUs", dims_text(dims)),
        )
        .into()),
    }
}
