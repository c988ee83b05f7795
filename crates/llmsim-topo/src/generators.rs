//! Topology generators. Each lays out nodes as: hosts, then one NVSwitch per server (when
//! `gpus_per_server > 1`), then the packet switches, tier by tier.

use llmsim_core::{FieldError, NodeId};

use crate::graph::{LinkKind, LinkParams, NodeKind, ScaleUp, Topology, TopologyBuilder};
use crate::routing::Routing;
use crate::TopoError;

/// Adds hosts and the scale-up domain (NVSwitch per server, NVLink cables, host port 0).
/// Returns the builder with hosts `0..num_hosts` and NVSwitches after them.
///
/// # Errors
/// `TopoError::Invalid` if `num_hosts` is not a multiple of `gpus_per_server`, or NVLink bandwidth
/// is zero with more than one GPU per server.
pub fn hosts_with_scale_up(num_hosts: u32, scale_up: ScaleUp) -> Result<TopologyBuilder, TopoError> {
    let g = scale_up.gpus_per_server;
    if g == 0 {
        return Err(FieldError::new("gpus_per_server", "must be at least 1").into());
    }
    if num_hosts == 0 {
        return Err(FieldError::new("gpus", "must be at least 1").into());
    }
    if num_hosts % g != 0 {
        return Err(FieldError::new(
            "gpus",
            format!("{num_hosts} GPUs are not a whole number of {g}-GPU servers; use a multiple of {g}"),
        )
        .into());
    }
    if g > 1 && scale_up.bandwidth.is_zero() {
        return Err(FieldError::new("scale_up.bandwidth", "NVLink bandwidth must be positive, e.g. \"450GBps\"").into());
    }
    let mut b = TopologyBuilder::new();
    b.add_nodes(NodeKind::Host, num_hosts);
    if g > 1 {
        let servers = num_hosts / g;
        let nv0 = b.add_nodes(NodeKind::NvSwitch, servers);
        let p = LinkParams::new(scale_up.bandwidth, scale_up.latency);
        // Host ports first (port 0 = NVLink), so add the host -> NVSwitch directions in host order,
        // then the NVSwitch -> host directions in local-rank order.
        for h in 0..num_hosts {
            b.add_link(NodeId(h), NodeId(nv0.0 + h / g), p, LinkKind::NvLink);
        }
        for h in 0..num_hosts {
            b.add_link(NodeId(nv0.0 + h / g), NodeId(h), p, LinkKind::NvLink);
        }
    }
    Ok(b)
}

/// One switch connecting every host.
///
/// # Errors
/// See [`hosts_with_scale_up`]; also a zero NIC bandwidth.
pub fn flat(num_hosts: u32, nic: LinkParams, scale_up: ScaleUp, ecmp_seed: u64) -> Result<Topology, TopoError> {
    check_rate("nic", nic)?;
    let mut b = hosts_with_scale_up(num_hosts, scale_up)?;
    let sw = b.add_node(NodeKind::Switch { tier: 1 });
    for h in 0..num_hosts {
        b.add_link(NodeId(h), sw, nic, LinkKind::HostNic);
    }
    for h in 0..num_hosts {
        b.add_link(sw, NodeId(h), nic, LinkKind::HostNic);
    }
    b.build(format!("flat-{num_hosts}"), num_hosts, scale_up, Routing::Flat { switch: sw }, ecmp_seed)
}

pub(crate) fn check_rate(field: &str, p: LinkParams) -> Result<(), TopoError> {
    if p.bandwidth.is_zero() {
        return Err(FieldError::new(field, "bandwidth must be positive, e.g. \"400Gbps\"").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::{Bandwidth, SimTime};

    fn nic() -> LinkParams {
        LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500))
    }

    #[test]
    fn flat_routes_through_the_switch_or_nvlink() {
        let t = flat(16, nic(), ScaleUp::dgx_h100(), 1).unwrap();
        let mut p = Vec::new();
        t.route(NodeId(0), NodeId(9), 7, &mut p).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(t.link(p[0]).kind, LinkKind::HostNic);
        assert_eq!(t.link(p[1]).dst, NodeId(9));
        p.clear();
        t.route(NodeId(0), NodeId(5), 7, &mut p).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|l| t.link(*l).kind == LinkKind::NvLink));
        assert_eq!(t.link(p[1]).dst, NodeId(5));
    }

    #[test]
    fn bad_sizes_are_field_errors() {
        let e = flat(12, nic(), ScaleUp::dgx_h100(), 1).unwrap_err();
        assert!(e.to_string().contains("gpus"), "{e}");
        let e = flat(8, LinkParams::new(Bandwidth::ZERO, SimTime::ZERO), ScaleUp::none(), 1).unwrap_err();
        assert!(e.to_string().contains("nic"), "{e}");
    }
}
