//! `faults:` (issue 32 §2): failed and degraded links, failed switches, random fabric failures,
//! and stragglers, applied when the cluster is set up.
//!
//! - Links and switches: taken down (or brought up, or given a lower bandwidth) in the topology
//!   before the run; the routing rules then route around them ([`Topology::set_link_down`]), on
//!   every backend.
//! - Stragglers: a GPU (or every GPU of a server) whose compute kernels take `slowdown` times
//!   longer. A unit (a TP group) runs at its slowest GPU's pace, since TP synchronizes it.
//!
//! A fault at `at: 0` is part of the topology from the start (every backend). A named link's
//! fault at a later time is handed to the network ([`Network::schedule_link_change`]): the flow
//! backend moves the flows on it (down, up, bandwidth); the packet backend models a link going
//! down (packets on it lost, go-back-N recovers) and refuses the rest; the analytical backend
//! refuses them. A straggler with a later `at` slows the kernels that start from then on.
//!
//! [`Network::schedule_link_change`]: llmsim_net::Network::schedule_link_change

use llmsim_core::{Bandwidth, SimTime};
use llmsim_topo::names::{link_names, random_fabric_cables, resolve_link, resolve_node};
use llmsim_topo::{TopoError, Topology};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::SimError;
use crate::engine::Layout;

/// `action:` of a link or switch fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FaultAction {
    /// The link (both directions for a cable `a-b`) or every link of the switch fails.
    Down,
    /// Brings it back (after an earlier `down` in the list).
    Up,
}

/// `links: {random: N, seed: S}`: N fabric (switch-to-switch) cables drawn at random.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomLinks {
    /// How many cables (each fails in both directions).
    pub random: u32,
    /// Seed of the draw (default 1).
    #[serde(default = "one")]
    pub seed: u64,
}

fn one() -> u64 {
    1
}

fn is_zero(t: &SimTime) -> bool {
    *t == SimTime::ZERO
}

/// One entry of `faults:`: a time and one target with what happens to it. Targets: `link`
/// (`action` or `bandwidth`), `links` (random, `action: down`), `switch` (`action`), `gpu` or
/// `server` (`slowdown`). Link names are `llmsim topo --describe --links`'s: `leaf0->spine3`
/// one direction, `leaf0-spine3` the cable.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// When it happens (default 0: from the start). A named link's change or a straggler may come
    /// later (links: flow backend, or packet for action: down); random links and switches fail
    /// at 0 only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub at: SimTime,
    /// A link by name: `a->b` (one direction) or `a-b` (the cable, both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Random fabric cables, e.g. `{random: 4, seed: 7}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<RandomLinks>,
    /// A switch by name (`spine3`): every link to and from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    /// down | up, for `link`, `links` and `switch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<FaultAction>,
    /// A degraded link's bandwidth, e.g. 100Gbps (with `link`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// A lossy link's packet loss rate (with `link`): not simulated yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// A straggler GPU by rank (0..gpus).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// A straggler server (every GPU of it), 0..gpus/gpus_per_node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<u32>,
    /// How many times longer a straggler's compute kernels take (>= 1, e.g. 1.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
}

fn bad(i: usize, key: &str, message: impl Into<String>) -> SimError {
    SimError::Scenario {
        field: format!("faults[{i}].{key}"),
        message: message.into(),
    }
}

fn topo_err(e: TopoError) -> SimError {
    match e {
        TopoError::Invalid(f) => SimError::Scenario {
            field: f.field,
            message: f.message,
        },
        other => SimError::from(other),
    }
}

impl FaultSpec {
    /// Which target the entry names, checking that it names exactly one and the keys that go
    /// with it.
    fn check(&self, i: usize) -> Result<(), SimError> {
        let targets = [
            ("link", self.link.is_some()),
            ("links", self.links.is_some()),
            ("switch", self.switch.is_some()),
            ("gpu", self.gpu.is_some()),
            ("server", self.server.is_some()),
        ];
        let named: Vec<&str> = targets.iter().filter(|t| t.1).map(|t| t.0).collect();
        if named.len() != 1 {
            return Err(SimError::Scenario {
                field: format!("faults[{i}]"),
                message: format!(
                    "names {}; give exactly one of link, links, switch, gpu, server",
                    if named.is_empty() {
                        "no target".to_string()
                    } else {
                        named.join(" and ")
                    }
                ),
            });
        }
        if self.at != SimTime::ZERO && (self.links.is_some() || self.switch.is_some()) {
            return Err(bad(
                i,
                "at",
                format!(
                    "{}: random links and switches fail from the start only (at: 0); name links for a failure during the run",
                    self.at
                ),
            ));
        }
        let straggler = self.gpu.is_some() || self.server.is_some();
        if straggler {
            match self.slowdown {
                Some(x) if x.is_finite() && x >= 1.0 => {}
                Some(x) => return Err(bad(i, "slowdown", format!("{x} must be a finite factor >= 1, e.g. 1.3"))),
                None => return Err(bad(i, "slowdown", "a straggler needs a slowdown factor, e.g. slowdown: 1.3")),
            }
            if self.action.is_some() || self.bandwidth.is_some() || self.loss.is_some() {
                return Err(bad(
                    i,
                    "slowdown",
                    "a straggler takes only slowdown (action, bandwidth and loss are for links)",
                ));
            }
            return Ok(());
        }
        if self.slowdown.is_some() {
            return Err(bad(i, "slowdown", "slowdown is for a gpu or server straggler"));
        }
        if self.loss.is_some() {
            return Err(bad(
                i,
                "loss",
                "lossy links are not simulated yet; take the link down or lower its bandwidth",
            ));
        }
        match (self.action, self.bandwidth, self.link.is_some()) {
            (Some(_), None, _) => {}
            (None, Some(_), true) => {}
            (None, Some(_), false) => return Err(bad(i, "bandwidth", "a degraded bandwidth is for one named link")),
            (Some(_), Some(_), _) => return Err(bad(i, "action", "give action or bandwidth, not both")),
            (None, None, _) => return Err(bad(i, "action", "say what happens: action: down | up, or bandwidth: 100Gbps")),
        }
        if self.links.is_some() && self.action == Some(FaultAction::Up) {
            return Err(bad(i, "action", "random links can only go down"));
        }
        Ok(())
    }
}

/// Checks every entry (what needs no topology: targets, keys, times, slowdowns).
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].<key>`.
pub fn check(faults: &[FaultSpec]) -> Result<(), SimError> {
    faults.iter().enumerate().try_for_each(|(i, f)| f.check(i))
}

/// Whether any entry touches the network (links or switches).
pub fn touches_network(faults: &[FaultSpec]) -> bool {
    faults.iter().any(|f| f.link.is_some() || f.links.is_some() || f.switch.is_some())
}

/// Applies the link and switch entries to `topo`, in list order.
///
/// # Errors
/// `SimError::Scenario` naming the entry's field: an unknown link or switch, too many random
/// links, a zero bandwidth.
pub fn apply_to_topology(faults: &[FaultSpec], topo: &mut Topology) -> Result<(), SimError> {
    check(faults)?;
    if !touches_network(faults) {
        return Ok(());
    }
    let names = link_names(topo);
    for (i, f) in faults.iter().enumerate() {
        if f.at != SimTime::ZERO {
            // Checked here, applied by the network during the run.
            if let Some(name) = &f.link {
                resolve_link(topo, &names, &format!("faults[{i}].link"), name).map_err(topo_err)?;
            }
            continue;
        }
        let down = f.action == Some(FaultAction::Down);
        if let Some(name) = &f.link {
            let links = resolve_link(topo, &names, &format!("faults[{i}].link"), name).map_err(topo_err)?;
            for l in links {
                match f.bandwidth {
                    Some(bw) => topo.set_link_bandwidth(l, bw).map_err(|e| bad(i, "bandwidth", e.to_string()))?,
                    None => topo.set_link_down(l, down).map_err(topo_err)?,
                }
            }
        } else if let Some(r) = &f.links {
            for l in random_fabric_cables(topo, r.random, r.seed, &format!("faults[{i}].links.random")).map_err(topo_err)? {
                topo.set_link_down(l, true).map_err(topo_err)?;
            }
        } else if let Some(name) = &f.switch {
            let n = resolve_node(topo, &format!("faults[{i}].switch"), name).map_err(topo_err)?;
            if topo.is_host(n) {
                return Err(bad(i, "switch", format!("{name} is a GPU, not a switch; use gpu: for a straggler")));
            }
            let links: Vec<_> = (0..topo.num_links())
                .map(llmsim_core::LinkId::from_idx)
                .filter(|&l| topo.link(l).src == n || topo.link(l).dst == n)
                .collect();
            for l in links {
                topo.set_link_down(l, down).map_err(topo_err)?;
            }
        }
    }
    Ok(())
}

/// Hands the named-link entries with `at` after 0 to `net`, in list order.
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].at` when the backend does not simulate changes during
/// the run; `faults[i].link` for an unknown link.
pub fn schedule(faults: &[FaultSpec], topo: &Topology, net: &mut dyn llmsim_net::Network) -> Result<(), SimError> {
    if !faults.iter().any(|f| f.at != SimTime::ZERO && f.link.is_some()) {
        return Ok(());
    }
    let names = link_names(topo);
    for (i, f) in faults.iter().enumerate() {
        let Some(name) = f.link.as_ref().filter(|_| f.at != SimTime::ZERO) else {
            continue;
        };
        let change = match (f.action, f.bandwidth) {
            (_, Some(bw)) => llmsim_net::LinkChange::Bandwidth(bw),
            (Some(FaultAction::Up), None) => llmsim_net::LinkChange::Up,
            _ => llmsim_net::LinkChange::Down,
        };
        for l in resolve_link(topo, &names, &format!("faults[{i}].link"), name).map_err(topo_err)? {
            net.schedule_link_change(f.at, l, change).map_err(|e| bad(i, "at", e.to_string()))?;
        }
    }
    Ok(())
}

/// Checks, once the run is over, that no fault came after its end.
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].at`.
pub fn check_times(faults: &[FaultSpec], end: SimTime) -> Result<(), SimError> {
    match faults.iter().position(|f| f.at > end) {
        Some(i) => Err(bad(
            i,
            "at",
            format!(
                "{} is after the run, which ended at {end}; give a time within the iteration",
                faults[i].at
            ),
        )),
        None => Ok(()),
    }
}

/// Each unit's compute slowdown (its slowest GPU's), or an empty vector when no straggler.
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].gpu` / `faults[i].server` when out of range.
pub fn unit_slowdowns(faults: &[FaultSpec], layout: Layout, gpus: u32, gpus_per_node: u32) -> Result<Vec<Vec<(SimTime, f64)>>, SimError> {
    unit_slowdowns_on(faults, layout, gpus, gpus_per_node, None)
}

/// [`unit_slowdowns`] of a job whose rank `r` runs on GPU `hosts[r]` of a cluster of `gpus`
/// (`jobs:`); `None`: rank `r` is GPU `r`.
///
/// # Errors
/// As [`unit_slowdowns`].
pub fn unit_slowdowns_on(
    faults: &[FaultSpec],
    layout: Layout,
    gpus: u32,
    gpus_per_node: u32,
    hosts: Option<&[u32]>,
) -> Result<Vec<Vec<(SimTime, f64)>>, SimError> {
    check(faults)?;
    // Per GPU: the (from, factor) entries that name it.
    let mut per_gpu: Vec<Vec<(SimTime, f64)>> = vec![Vec::new(); gpus as usize];
    let mut any = false;
    for (i, f) in faults.iter().enumerate() {
        let x = f.slowdown.unwrap_or(1.0);
        if let Some(g) = f.gpu {
            if g >= gpus {
                return Err(bad(
                    i,
                    "gpu",
                    format!("GPU {g} is out of range: the cluster has GPUs 0..{}", gpus.saturating_sub(1)),
                ));
            }
            per_gpu[g as usize].push((f.at, x));
            any = true;
        }
        if let Some(sv) = f.server {
            let servers = gpus / gpus_per_node.max(1);
            if sv >= servers {
                return Err(bad(
                    i,
                    "server",
                    format!(
                        "server {sv} is out of range: the cluster has servers 0..{}",
                        servers.saturating_sub(1)
                    ),
                ));
            }
            for g in sv * gpus_per_node..(sv + 1) * gpus_per_node {
                per_gpu[g as usize].push((f.at, x));
            }
            any = true;
        }
    }
    if !any {
        return Ok(Vec::new());
    }
    // A unit (TP group) runs at its slowest GPU's pace.
    Ok((0..layout.units())
        .map(|u| {
            (0..layout.tp)
                .flat_map(|lane| {
                    let r = layout.rank(u, lane);
                    let g = hosts.map_or(r, |h| h[r as usize]);
                    per_gpu.get(g as usize).into_iter().flatten().copied()
                })
                .collect()
        })
        .collect())
}
