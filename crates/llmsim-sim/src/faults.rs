//! `faults:` (issue 32 §2): failed and degraded links, failed switches, random fabric failures,
//! and stragglers, applied when the cluster is set up.
//!
//! - Links and switches: taken down (or brought up, or given a lower bandwidth) in the topology
//!   before the run; the routing rules then route around them ([`Topology::set_link_down`]), on
//!   every backend.
//! - Stragglers: a GPU (or every GPU of a server) whose compute kernels take `slowdown` times
//!   longer. A unit (a TP group) runs at its slowest GPU's pace, since TP synchronizes it.
//!
//! - Lossy links (`loss:`): each packet crossing the link is dropped with that probability. Only
//!   the packet backend simulates packets, so the flow and analytical backends refuse `loss`
//!   rather than ignore it.
//!
//! A fault at `at: 0` is part of the topology from the start (every backend). A link, random
//! links' or switch's fault at a later time is handed to the network link by link
//! ([`Network::schedule_link_change`]): the flow backend moves the flows on it (down, up,
//! bandwidth); the packet backend models a link going down (packets on it lost, go-back-N
//! recovers), coming back, changing bandwidth or loss rate; the analytical backend refuses
//! them. A straggler with a later `at` slows the kernels that start from then on.
//!
//! [`Network::schedule_link_change`]: llmsim_net::Network::schedule_link_change

use llmsim_core::{Bandwidth, SimTime};
use llmsim_topo::names::{link_names, random_fabric_cables, resolve_link, resolve_node};
use llmsim_topo::{TopoError, Topology};
use llmsim_workload::dag::Layout;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::SimError;

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

/// For `skip_serializing_if`: a zero time is left out of serialized scenarios.
pub(crate) fn is_zero(t: &SimTime) -> bool {
    *t == SimTime::ZERO
}

/// One entry of `faults:`: a time and one target with what happens to it. Targets: `link`
/// (`action` or `bandwidth`), `links` (random, `action: down`), `switch` (`action`), `gpu` or
/// `server` (`slowdown`). Link names are `llmsim topo --describe --links`'s: `leaf0->spine3`
/// one direction, `leaf0-spine3` the cable.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// When it happens (default 0: from the start). A later time needs the flow or packet
    /// backend for links, random links and switches (`loss` the packet backend); a straggler
    /// may come later on every backend.
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
    /// A lossy link's packet loss rate in [0, 1) (with `link`), e.g. 1e-4: each packet crossing
    /// it is dropped with this probability (packet backend only).
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
        if let Some(p) = self.loss {
            if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                return Err(bad(
                    i,
                    "loss",
                    format!("{p} is not a loss rate; give a probability in [0, 1), e.g. loss: 1e-4 (take the link down for 1)"),
                ));
            }
            if self.link.is_none() {
                return Err(bad(i, "loss", "a loss rate is for one named link (link: a-b)"));
            }
        }
        let given = [
            ("action", self.action.is_some()),
            ("bandwidth", self.bandwidth.is_some()),
            ("loss", self.loss.is_some()),
        ];
        let said: Vec<&str> = given.iter().filter(|g| g.1).map(|g| g.0).collect();
        match said.len() {
            1 => {}
            0 => {
                return Err(bad(
                    i,
                    "action",
                    "say what happens: action: down | up, bandwidth: 100Gbps, or loss: 1e-4",
                ));
            }
            _ => {
                return Err(bad(
                    i,
                    said[1],
                    format!("give one of action, bandwidth and loss, not {}", said.join(" and ")),
                ));
            }
        }
        if self.bandwidth.is_some() && self.link.is_none() {
            return Err(bad(i, "bandwidth", "a degraded bandwidth is for one named link"));
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

/// Whether an entry makes a link lossy (the packet backend's Wormhole fast-forward moves frozen
/// flows at their mean rate and would drop no packet while they are frozen, so the exact engine
/// runs such scenarios by default).
pub fn lossy(faults: &[FaultSpec]) -> bool {
    faults.iter().any(|f| f.loss.is_some())
}

/// Whether any entry touches the network (links or switches).
pub fn touches_network(faults: &[FaultSpec]) -> bool {
    faults.iter().any(|f| f.link.is_some() || f.links.is_some() || f.switch.is_some())
}

/// Checks that the backend simulates what the entries ask for: packet loss needs packets, and
/// the analytical backend has no time-varying links.
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].loss` or `faults[i].at`, with the backend to use.
pub fn check_backend(faults: &[FaultSpec], backend: crate::Backend) -> Result<(), SimError> {
    for (i, f) in faults.iter().enumerate() {
        if f.loss.is_some() && backend != crate::Backend::Packet {
            return Err(bad(
                i,
                "loss",
                format!(
                    "the {backend} backend moves no packets, so it cannot drop them; use backend: packet (--backend packet) for a lossy link"
                ),
            ));
        }
    }
    Ok(())
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
        if f.at != SimTime::ZERO || f.loss.is_some() {
            // Checked here, applied by the network during the run (a loss rate from 0 too: the
            // packet backend then also watches for lost tails).
            fault_links(topo, &names, i, f)?;
            continue;
        }
        let down = f.action == Some(FaultAction::Down);
        for l in fault_links(topo, &names, i, f)? {
            match (f.bandwidth, f.loss) {
                (Some(bw), _) => topo.set_link_bandwidth(l, bw).map_err(|e| bad(i, "bandwidth", e.to_string()))?,
                _ => topo.set_link_down(l, down).map_err(topo_err)?,
            }
        }
    }
    Ok(())
}

/// The links entry `i` names: a link (one direction or both), random fabric cables (both
/// directions each), or every link to and from a switch. Strays (stragglers) name none.
fn fault_links(topo: &Topology, names: &[String], i: usize, f: &FaultSpec) -> Result<Vec<llmsim_core::LinkId>, SimError> {
    if let Some(name) = &f.link {
        return resolve_link(topo, names, &format!("faults[{i}].link"), name).map_err(topo_err);
    }
    if let Some(r) = &f.links {
        return random_fabric_cables(topo, r.random, r.seed, &format!("faults[{i}].links.random")).map_err(topo_err);
    }
    if let Some(name) = &f.switch {
        let n = resolve_node(topo, &format!("faults[{i}].switch"), name).map_err(topo_err)?;
        if topo.is_host(n) {
            return Err(bad(i, "switch", format!("{name} is a GPU, not a switch; use gpu: for a straggler")));
        }
        return Ok((0..topo.num_links())
            .map(llmsim_core::LinkId::from_idx)
            .filter(|&l| topo.link(l).src == n || topo.link(l).dst == n)
            .collect());
    }
    Ok(Vec::new())
}

/// Hands the link, random-link and switch entries with `at` after 0 to `net`, link by link, in
/// list order.
///
/// # Errors
/// `SimError::Scenario` naming `faults[i].at` when the backend does not simulate changes during
/// the run; `faults[i].link` / `.switch` / `.links.random` for what the topology lacks.
pub fn schedule(faults: &[FaultSpec], topo: &Topology, net: &mut dyn llmsim_net::Network) -> Result<(), SimError> {
    let during = |f: &FaultSpec| (f.at != SimTime::ZERO || f.loss.is_some()) && touches_network(std::slice::from_ref(f));
    if !faults.iter().any(during) {
        return Ok(());
    }
    let names = link_names(topo);
    for (i, f) in faults.iter().enumerate() {
        if !during(f) {
            continue;
        }
        let change = match (f.action, f.bandwidth, f.loss) {
            (_, Some(bw), _) => llmsim_net::LinkChange::Bandwidth(bw),
            (_, _, Some(p)) => llmsim_net::LinkChange::Loss(p),
            (Some(FaultAction::Up), None, None) => llmsim_net::LinkChange::Up,
            _ => llmsim_net::LinkChange::Down,
        };
        for l in fault_links(topo, &names, i, f)? {
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
