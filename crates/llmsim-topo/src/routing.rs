//! Routing rules (Nüwa): the next hop is computed from the node, the destination's hierarchical
//! address and the flow hash. No per-destination table is stored.
//!
//! Port-order conventions every generator follows:
//! - a host's ports: `[NVLink to its NVSwitch]` (only when `gpus_per_server > 1`), then its NIC
//!   port(s) (two with a dual-plane fabric);
//! - an NVSwitch's ports: one per GPU of its server, in local-rank order.

use llmsim_core::{LinkId, NodeId};

use crate::graph::{NodeKind, Topology};
use crate::TopoError;

/// The rule a topology routes by.
#[derive(Clone, Debug)]
pub enum Routing {
    /// One switch; its port `i` leads to host `i`.
    Flat { switch: NodeId },
}

impl Routing {
    /// # Errors
    /// `TopoError::Unreachable` when `dst` cannot be reached from `at` under this rule.
    #[inline]
    pub fn next_hop(&self, t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
        match t.node(at) {
            NodeKind::Host => host_hop(t, at, dst, flow_hash),
            NodeKind::NvSwitch => nvswitch_hop(t, at, dst),
            NodeKind::Switch { .. } => match self {
                Routing::Flat { .. } => Ok(t.ports(at)[dst.idx()]),
            },
        }
    }

    pub fn heap_bytes(&self) -> usize {
        0
    }
}

/// A host sends to a GPU of its own server over NVLink, and everything else out of its NIC
/// (ECMP over the planes when it has more than one NIC port).
#[inline]
pub fn host_hop(t: &Topology, at: NodeId, dst: NodeId, flow_hash: u64) -> Result<LinkId, TopoError> {
    let ports = t.ports(at);
    let g = t.gpus_per_server();
    if g > 1 && t.server_of(at) == t.server_of(dst) {
        return Ok(ports[0]);
    }
    let nics = &ports[usize::from(g > 1)..];
    match nics.len() {
        0 => Err(TopoError::Unreachable { src: at, dst, reason: "host has no NIC".into() }),
        1 => Ok(nics[0]),
        n => Ok(nics[t.ecmp_pick(at, flow_hash, n)]),
    }
}

/// An NVSwitch forwards to the destination GPU of its own server.
#[inline]
pub fn nvswitch_hop(t: &Topology, at: NodeId, dst: NodeId) -> Result<LinkId, TopoError> {
    let ports = t.ports(at);
    let l = ports[t.local_rank(dst) as usize];
    if t.link(l).dst != dst {
        return Err(TopoError::Unreachable { src: at, dst, reason: "NVSwitch reached for a GPU of another server".into() });
    }
    Ok(l)
}
