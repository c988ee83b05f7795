//! Load balancing of a flow's data packets across equal-cost paths (`PacketConfig::load_balance`).
//!
//! Under `Ecmp` (the default, and ns-3's behaviour) a flow has one path, picked by its hash. The
//! other policies give the flow up to `MAX_PATHS` distinct equal-cost data paths, found at
//! `add_flow` by routing with `MAX_PATHS * 4` derived hashes through the topology's rule, and pick
//! one per data packet when it is made:
//! - `Spray`: round robin over the paths, packet by packet;
//! - `Flowlet`: the next path once the flow has been idle for `gap` (a flowlet boundary);
//! - `Adaptive`: the path whose first switch egress (the source ToR's uplink) holds the fewest
//!   queued bytes, the first such in path order on a tie.
//!
//! ACKs keep the flow's one ACK path. Packets of one flow may then arrive out of order. RoCE's
//! go-back-N receiver NACKs the expected byte and the sender resends from it; TCP counts
//! duplicate ACKs; UET (`transport::uet`) acknowledges each packet as it comes.

use llmsim_core::SimTime;

use super::tables::{Flow, Port};

/// Most data paths a flow keeps under a policy other than `Ecmp`.
pub(crate) const MAX_PATHS: usize = 16;

/// How a flow's data packets are spread over equal-cost paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadBalance {
    /// One path per flow by its hash (ns-3's per-flow ECMP). Default.
    #[default]
    Ecmp,
    /// Per packet, round robin over the flow's equal-cost paths.
    Spray,
    /// A new path after the flow has been idle for `gap`.
    Flowlet {
        /// Idle time after which the flow may take a new path.
        gap: SimTime,
    },
    /// Per packet, the path whose first switch egress queue holds the fewest bytes.
    Adaptive,
}

/// A policy without its parameters: the word a scenario's `network.load_balance` (with
/// `network.flowlet_gap`) and ns-3's `LOAD_BALANCE` key take. The one definition both use; a new
/// policy is a variant here and in `LoadBalance`, with its arm in `lb::pick`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LoadBalanceKind {
    /// One path per flow by its hash (ns-3's ECMP). Default.
    #[default]
    Ecmp,
    /// Per packet, round robin over the flow's equal-cost paths.
    Spray,
    /// A new path after the flow has been idle for `flowlet_gap`.
    Flowlet,
    /// Per packet, the path whose first switch egress queue holds the fewest bytes.
    Adaptive,
}

impl LoadBalanceKind {
    /// Every policy, in the order of the docs.
    pub const ALL: [LoadBalanceKind; 4] = [
        LoadBalanceKind::Ecmp,
        LoadBalanceKind::Spray,
        LoadBalanceKind::Flowlet,
        LoadBalanceKind::Adaptive,
    ];

    /// Its name (`ecmp | spray | flowlet | adaptive`).
    pub fn name(self) -> &'static str {
        match self {
            LoadBalanceKind::Ecmp => "ecmp",
            LoadBalanceKind::Spray => "spray",
            LoadBalanceKind::Flowlet => "flowlet",
            LoadBalanceKind::Adaptive => "adaptive",
        }
    }

    /// The policy named `name`, if any.
    pub fn from_name(name: &str) -> Option<LoadBalanceKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The policy with its parameters: `flowlet_gap` is a flowlet's idle gap (unused by the
    /// others).
    pub fn with_gap(self, flowlet_gap: SimTime) -> LoadBalance {
        match self {
            LoadBalanceKind::Ecmp => LoadBalance::Ecmp,
            LoadBalanceKind::Spray => LoadBalance::Spray,
            LoadBalanceKind::Flowlet => LoadBalance::Flowlet { gap: flowlet_gap },
            LoadBalanceKind::Adaptive => LoadBalance::Adaptive,
        }
    }
}

impl LoadBalance {
    /// Which policy this is.
    pub fn kind(self) -> LoadBalanceKind {
        match self {
            LoadBalance::Ecmp => LoadBalanceKind::Ecmp,
            LoadBalance::Spray => LoadBalanceKind::Spray,
            LoadBalance::Flowlet { .. } => LoadBalanceKind::Flowlet,
            LoadBalance::Adaptive => LoadBalanceKind::Adaptive,
        }
    }

    /// Its name in scenarios (`ecmp | spray | flowlet | adaptive`).
    pub fn name(self) -> &'static str {
        self.kind().name()
    }
}

/// The offset in `paths` of the data path flow `fl`'s next packet takes (`now`: ps). `paths`:
/// the engine's path table; `ports`: its egress ports (for `Adaptive`).
#[inline]
pub(crate) fn pick(lb: LoadBalance, fl: &mut Flow, now: u64, paths: &[u32], ports: &[Port]) -> u32 {
    // ECMP reads the config only: `npaths` is on a line of the flow this path never reads.
    if lb == LoadBalance::Ecmp {
        return fl.path_data;
    }
    let n = u32::from(fl.npaths);
    if n <= 1 {
        return fl.path_data;
    }
    let len = (fl.path_ack - fl.path_data) / n;
    let k = match lb {
        LoadBalance::Ecmp => 0,
        LoadBalance::Spray => {
            let k = u32::from(fl.path_idx);
            fl.path_idx = ((k + 1) % n) as u8;
            k
        }
        LoadBalance::Flowlet { gap } => {
            // `last_tx` holds the time plus one (0: no packet yet).
            if fl.last_tx != 0 && now + 1 - fl.last_tx > gap.as_ps() {
                fl.path_idx = ((u32::from(fl.path_idx) + 1) % n) as u8;
            }
            fl.last_tx = now + 1;
            u32::from(fl.path_idx)
        }
        LoadBalance::Adaptive => {
            // Link 1 of a data path: the source ToR's egress (link 0 is the host's own).
            let at = |k: u32| (fl.path_data + k * len + 1) as usize;
            if len < 2 {
                0
            } else {
                (0..n).min_by_key(|&k| ports[paths[at(k)] as usize].total).unwrap_or(0)
            }
        }
    };
    fl.path_data + k * len
}
