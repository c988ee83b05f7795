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
//! Registration is one variant of [`crate::TopologySpec`] (`Torus(TorusSpec)`), which names the
//! kind for YAML, JSON and `--topology`. `describe` and the ns-3 export work on any family.

use std::fmt::Debug;

use llmsim_core::{Bandwidth, LinkId, NodeId};

use crate::TopoError;
use crate::graph::{ScaleUp, Topology};

/// A topology family's routing rule. Implementations hold O(1) parameters (node-id offsets,
/// sizes) and must not allocate in [`RoutingRule::next_hop`].
pub trait RoutingRule: Send + Sync + Debug {
    /// Short name for reports, e.g. `"torus dimension-order"`.
    fn name(&self) -> &'static str;

    /// The outgoing link `at` forwards a packet of flow `flow_hash` on, toward host `dst`. Called
    /// for every node kind (host, NVSwitch, switch); `dst` is a host and `at != dst`.
    ///
    /// # Errors
    /// `TopoError::Unreachable` when the rule has no way to `dst` from `at`.
    fn next_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError>;

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
