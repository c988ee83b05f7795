//! ASTRA-sim network YAML (analytical backend) as an llmsim cluster.
//!
//! ```yaml
//! topology: [ Ring, Switch ]      # per dimension: Ring | Switch | FullyConnected
//! npus_count: [ 8, 16 ]           # NPUs per dimension; their product is the cluster size
//! bandwidth: [ 200.0, 50.0 ]      # GB/s per NPU per dimension, GB = 2^30 bytes
//! latency: [ 500.0, 1000.0 ]      # ns per hop
//! ```
//!
//! Mapping (ASTRA-sim's dimensions nest: dimension 0 joins NPUs 0..n0, dimension 1 joins the
//! NPUs with the same index in dimension 0, and so on):
//! - one dimension: every NPU on one switch (`flat`), NIC = that dimension's bandwidth/latency;
//! - two or more: dimension 0 is the server (its NPUs share the scale-up domain: `gpus_per_node`
//!   = `npus_count[0]`, NVLink bandwidth and latency from dimension 0), dimension 1 is a
//!   rail-optimized segment (one rail switch per NPU index, joining `npus_count[1]` servers:
//!   `rail-fat-tree` with `servers_per_segment` = `npus_count[1]`, NIC from dimension 1), and
//!   dimensions 2.. are the spine layer joining the segments (uplinks from dimension 2).
//!
//! llmsim models a scale-up domain as a switch (NVSwitch) and the scale-out as switches, so a
//! `Ring` or `FullyConnected` dimension is simulated as a switch of the same per-NPU bandwidth
//! (an approximation: no multi-hop ring paths). The GPU type is H100 unless
//! `--set cluster.gpu=...`; the network backend is flow unless `--backend`.

use serde::Deserialize;

use crate::SimError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AstraNetwork {
    topology: Vec<String>,
    npus_count: Vec<u32>,
    bandwidth: Vec<f64>,
    latency: Vec<f64>,
}

fn err(field: &str, message: String) -> SimError {
    SimError::Scenario {
        field: format!("ASTRA-sim network: {field}"),
        message,
    }
}

/// Whether `text` is an ASTRA-sim network YAML; if so, the equivalent scenario YAML.
///
/// # Errors
/// An ASTRA-sim file with unequal list lengths, an unknown topology, a zero NPU count or a
/// non-positive bandwidth.
pub fn to_scenario_yaml(text: &str) -> Result<Option<String>, SimError> {
    let v: serde_yaml_ng::Value = match crate::yaml::parse(text) {
        Ok(v) => v,
        Err(_) => return Ok(None),
    };
    let is_astra = matches!(&v, serde_yaml_ng::Value::Mapping(m) if m.contains_key("npus_count"));
    if !is_astra {
        return Ok(None);
    }
    let a: AstraNetwork =
        serde_yaml_ng::from_value(v).map_err(|e| err("file", format!("{e}; expected topology, npus_count, bandwidth, latency")))?;
    let n = a.topology.len();
    if n == 0 || a.npus_count.len() != n || a.bandwidth.len() != n || a.latency.len() != n {
        return Err(err(
            "topology",
            format!(
                "topology, npus_count, bandwidth and latency need one entry per dimension (got {}, {}, {}, {})",
                n,
                a.npus_count.len(),
                a.bandwidth.len(),
                a.latency.len()
            ),
        ));
    }
    for (i, t) in a.topology.iter().enumerate() {
        if !matches!(t.as_str(), "Ring" | "Switch" | "FullyConnected") {
            return Err(err(&format!("topology[{i}]"), format!("{t:?}: valid Ring, Switch, FullyConnected")));
        }
        if a.npus_count[i] == 0 {
            return Err(err(&format!("npus_count[{i}]"), "must be at least 1".into()));
        }
        if !(a.bandwidth[i] > 0.0 && a.bandwidth[i].is_finite()) {
            return Err(err(&format!("bandwidth[{i}]"), format!("{} GB/s must be positive", a.bandwidth[i])));
        }
        if !(a.latency[i] >= 0.0 && a.latency[i].is_finite()) {
            return Err(err(&format!("latency[{i}]"), format!("{} ns must be >= 0", a.latency[i])));
        }
    }
    let total: u64 = a.npus_count.iter().map(|x| *x as u64).product();
    if total > u32::MAX as u64 {
        return Err(err("npus_count", format!("{total} NPUs is too many")));
    }
    // GB/s with GB = 2^30 bytes -> bits/s; ns -> ps.
    let bw = |i: usize| format!("{}bps", (a.bandwidth[i] * (1u64 << 30) as f64 * 8.0).round() as u64);
    let lat = |i: usize| format!("{}ps", (a.latency[i] * 1000.0).round() as u64);
    let cluster = if n == 1 {
        format!(
            "cluster:\n  gpus: {total}\n  gpus_per_node: 1\n  topology: {{ kind: flat, nic: {{ bandwidth: {}, latency: {} }} }}\n",
            bw(0),
            lat(0)
        )
    } else {
        let uplink = if n >= 3 {
            format!(", uplink: {{ bandwidth: {}, latency: {} }}", bw(2), lat(2))
        } else {
            String::new()
        };
        format!(
            "cluster:\n  gpus: {total}\n  gpus_per_node: {}\n  nvlink_bandwidth: {}\n  nvlink_latency: {}\n  topology: {{ kind: rail-fat-tree, servers_per_segment: {}, nic: {{ bandwidth: {}, latency: {} }}{uplink} }}\n",
            a.npus_count[0],
            bw(0),
            lat(0),
            a.npus_count[1],
            bw(1),
            lat(1)
        )
    };
    Ok(Some(cluster))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;
    use llmsim_core::{Bandwidth, SimTime};
    use std::path::Path;

    #[test]
    fn two_dimensions_become_servers_and_rails() {
        let y = "topology: [ Ring, Switch ]\nnpus_count: [ 8, 4 ]\nbandwidth: [ 200.0, 50.0 ]\nlatency: [ 500.0, 1000.0 ]\n";
        assert!(to_scenario_yaml(y).unwrap().is_some(), "recognised");
        let s = Scenario::cluster_from_yaml(y, &[], Path::new(".")).unwrap();
        assert_eq!(s.cluster.gpus, Some(32));
        assert_eq!(s.cluster.gpus_per_node, 8);
        // 200 GB/s with GB = 2^30 bytes.
        assert_eq!(
            s.cluster.nvlink_bandwidth,
            Some(Bandwidth::from_bps((200.0 * (1u64 << 30) as f64 * 8.0) as u64))
        );
        assert_eq!(s.cluster.nvlink_latency, Some(SimTime::from_ns(500)));
        let topo = serde_json::to_value(&s.cluster.topology).unwrap();
        assert_eq!(topo["kind"], "rail-fat-tree");
        assert_eq!(topo["servers_per_segment"], 4);
    }

    #[test]
    fn scenario_yaml_is_not_astra() {
        assert!(to_scenario_yaml("cluster: { gpus: 8 }").unwrap().is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let e = to_scenario_yaml("topology: [ Torus ]\nnpus_count: [ 8 ]\nbandwidth: [ 1.0 ]\nlatency: [ 1.0 ]\n").unwrap_err();
        assert!(
            e.to_string().contains("topology[0]") && e.to_string().contains("valid Ring, Switch, FullyConnected"),
            "{e}"
        );
        let e = to_scenario_yaml("topology: [ Ring, Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 1.0 ]\nlatency: [ 1.0 ]\n").unwrap_err();
        assert!(e.to_string().contains("one entry per dimension"), "{e}");
    }
}
