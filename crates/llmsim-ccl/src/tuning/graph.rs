//! What NCCL's topology search (`search.cc`, `connect.cc`) would find for the ring, tree and
//! NVLS graphs of a homogeneous cluster: N nodes of `ppn` GPUs behind one NVSwitch, with
//! `nics` NICs per node, each behind its own PCIe switch.
//!
//! NCCL searches channel by channel over a real topology graph, subtracting each channel's
//! bandwidth from every link it crosses. Here that search is reduced to link capacities on the
//! regular system llmsim describes: a channel at speed `s` takes `s` from one NIC (in and out),
//! from the PCIe path of the GPU it enters and leaves by, and from the NVLink port of every GPU
//! that forwards it. The control flow that picks among speeds (pass 1: highest speed first,
//! lower while the next speed is > 0.49 of the best found; duplication; pass 2: try faster) is
//! NCCL's own.

use serde::Serialize;

use super::GpuArch;

/// NCCL 2.30.7 search.cc: per-channel speeds tried by the search (GB/s).
const SPEED_INTRA: &[f64] = &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0];
const SPEED_INTER: &[f64] = &[
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];
const SM90_SPEED_INTRA: &[f64] = &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0];
const SM90_SPEED_INTER: &[f64] = &[
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];
const SM100_SPEED_INTRA: &[f64] = &[90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0];
const SM100_SPEED_INTER: &[f64] = &[
    96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
];

/// NCCL device.h: MAXCHANNELS.
pub const MAXCHANNELS: u32 = 64;
/// NCCL init.cc: the ring search asks for at most MAXCHANNELS/2 channels.
const RING_MAX_CHANNELS: u32 = MAXCHANNELS / 2;
/// NCCL device.h: NCCL_MAX_NVLS_ARITY.
const MAX_NVLS_ARITY: u32 = 32;
/// NCCL nvls.cc: NVLS_NCHANNELS_SM90 / SM100 / SM100_NVL.
const NVLS_NCHANNELS_SM90: u32 = 16;
const NVLS_NCHANNELS_SM100: u32 = 32;
const NVLS_NCHANNELS_SM100_NVL: u32 = 24;

/// One graph found by the search: channels and per-channel bandwidth, as NCCL's
/// `ncclTopoGraph` holds them after `ncclTopoCompute` (GB/s per channel).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GraphSearch {
    /// Channels the search found (`ncclTopoGraph::nChannels`); 0 when there is no graph.
    pub nchannels: u32,
    /// Bandwidth per channel inside a node (`bwIntra`), GB/s.
    pub bw_intra_gbps: f64,
    /// Bandwidth per channel between nodes (`bwInter`), GB/s.
    pub bw_inter_gbps: f64,
}

impl GraphSearch {
    const NONE: GraphSearch = GraphSearch {
        nchannels: 0,
        bw_intra_gbps: 0.0,
        bw_inter_gbps: 0.0,
    };
}

/// The search results the tuning model reads, plus the channel counts NCCL sets up from them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphInfo {
    /// GPUs per node.
    pub ppn: u32,
    /// Nodes.
    pub nnodes: u32,
    /// NVLink bandwidth per GPU as NCCL's topology sees it (links x NCCL's per-link constant),
    /// GB/s; 0 when the GPUs talk over PCIe.
    pub nccl_nvlink_gbps: f64,
    /// NIC bandwidth as NCCL sees it (link speed / 8), GB/s.
    pub nccl_nic_gbps: f64,
    /// GPU <-> NIC PCIe path bandwidth (NCCL: width x GT/s / 80), GB/s.
    pub nccl_pcie_gbps: f64,
    /// Speed array the search walked ("intra" on one node, "inter" across nodes).
    pub speed_array: &'static str,
    /// The ring graph (`NCCL_TOPO_PATTERN_RING`).
    pub ring: GraphSearch,
    /// The tree graph (`NCCL_TOPO_PATTERN_BALANCED_TREE`).
    pub tree: GraphSearch,
    /// The NVLS graph (also used by NVLSTree); `None` without NVLS support.
    pub nvls: Option<GraphSearch>,
    /// Collective channels after `ncclTopoPostset`: min(ring, tree) x2, the Hopper multi-node
    /// doubling, then NCCL_MAX/MIN_NCHANNELS.
    pub comm_channels: u32,
    /// NVLS channels (`comm->nvlsChannels`); 0 without NVLS.
    pub nvls_channels: u32,
}

/// Physical description the search needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SearchSystem {
    pub arch: GpuArch,
    pub ppn: u32,
    pub nnodes: u32,
    pub nics: u32,
    /// NCCL view, GB/s.
    pub nvlink: f64,
    pub nic: f64,
    pub pcie: f64,
    pub nvls: bool,
    pub min_channels: Option<u32>,
    pub max_channels: Option<u32>,
}

impl SearchSystem {
    fn inter(&self) -> bool {
        self.nnodes > 1
    }

    fn speeds(&self) -> (&'static [f64], &'static str) {
        match (self.arch, self.inter()) {
            (GpuArch::Ampere, false) => (SPEED_INTRA, "intra (sm80)"),
            (GpuArch::Ampere, true) => (SPEED_INTER, "inter (sm80)"),
            (GpuArch::Hopper, false) => (SM90_SPEED_INTRA, "sm90 intra"),
            (GpuArch::Hopper, true) => (SM90_SPEED_INTER, "sm90 inter"),
            (GpuArch::Blackwell, false) => (SM100_SPEED_INTRA, "sm100 intra"),
            (GpuArch::Blackwell, true) => (SM100_SPEED_INTER, "sm100 inter"),
        }
    }

    /// Intra-node bandwidth of one GPU: NVLink if present, else its PCIe link.
    fn gpu_bw(&self) -> f64 {
        if self.nvlink > 0.0 { self.nvlink } else { self.pcie }
    }

    /// NCCL search.cc `ncclTopoSearchInit`: per-channel maximum (best GPU->NET path across
    /// nodes, best GPU->GPU path inside one) and total GPU bandwidth.
    fn max_total_bw(&self) -> (f64, f64) {
        if self.inter() {
            (self.nic.min(self.pcie), self.gpu_bw())
        } else {
            (self.gpu_bw(), self.gpu_bw())
        }
    }

    /// Channels the ring/tree search fits at an intra speed `si` and inter speed `se`.
    fn chain_capacity(&self, si: f64, se: f64) -> u32 {
        let mut cap = u32::MAX;
        if self.ppn > 1 {
            // Inside one node every GPU forwards every channel (the ring closes on itself; the
            // search replays one GPU order). Across nodes each channel enters by the GPU next
            // to its NIC, so the order rotates and a GPU forwards (ppn-1)/ppn of the channels.
            let per_gpu = if self.inter() {
                si * f64::from(self.ppn - 1) / f64::from(self.ppn)
            } else {
                si
            };
            cap = cap.min(floor_div(self.gpu_bw(), per_gpu));
        }
        if self.inter() {
            // NCCL search.cc ncclTopoSearchRecNet: each channel takes `bwInter` from one NIC.
            let per_nic = floor_div(self.nic.min(self.pcie), se);
            cap = cap.min(self.nics.saturating_mul(per_nic));
            // ... and enters/leaves the node through one GPU's PCIe path.
            cap = cap.min(self.ppn.saturating_mul(floor_div(self.pcie, se)));
        }
        cap
    }

    /// NCCL search.cc ncclTopoSearchTryNvls: a channel pulls `bwIntra` on every GPU's NVSwitch
    /// port, twice on its head GPU.
    fn nvls_capacity(&self, si: f64, se: f64) -> u32 {
        let max_heads = if self.inter() {
            // One head per NIC, each head a different GPU (ncclTopoSearchRecNet).
            let per_nic = floor_div(self.nic.min(self.pcie), se).min(1);
            self.ppn.min(self.nics * per_nic)
        } else {
            self.ppn
        };
        let by_nvlink = floor_div(self.gpu_bw(), si).saturating_sub(1);
        max_heads.min(by_nvlink).min(MAX_NVLS_ARITY)
    }
}

fn floor_div(a: f64, b: f64) -> u32 {
    if b <= 0.0 {
        return u32::MAX;
    }
    // Tolerate float noise such as 370.8/61.8.
    let q = (a / b + 1e-9).floor();
    if q >= f64::from(u32::MAX) { u32::MAX } else { q.max(0.0) as u32 }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Ring,
    Tree,
}

/// NCCL search.cc `ncclTopoCompute` for ring and tree patterns.
fn compute_chain(sys: &SearchSystem, pattern: Pattern, min_ch: u32, max_ch: u32) -> GraphSearch {
    let (speeds, _) = sys.speeds();
    let (max_bw, mut total_bw) = sys.max_total_bw();
    // search.cc: non-ring patterns need not return to the first NIC.
    if sys.ppn > 1 && pattern != Pattern::Ring {
        total_bw *= f64::from(sys.ppn) / f64::from(sys.ppn - 1);
    }
    let mut idx = 0;
    while (speeds[idx] > max_bw || speeds[idx] * f64::from(min_ch) > total_bw) && idx < speeds.len() - 1 {
        idx += 1;
    }

    // Pass 1: take the best solution over decreasing speeds.
    let mut best = GraphSearch::NONE;
    loop {
        let s = speeds[idx];
        let cap = sys.chain_capacity(s, s).min(max_ch);
        let mut perfect = false;
        if cap >= min_ch.max(1) {
            let cand = GraphSearch {
                nchannels: cap,
                bw_intra_gbps: s,
                bw_inter_gbps: s,
            };
            // search.cc ncclTopoCompareGraphs: more nChannels*bwIntra wins.
            if f64::from(cand.nchannels) * s > f64::from(best.nchannels) * best.bw_intra_gbps {
                best = cand;
            }
            perfect = cap == max_ch;
        }
        if perfect || f64::from(best.nchannels) * best.bw_inter_gbps >= sys.gpu_bw() {
            break;
        }
        let next_ok = idx < speeds.len() - 1 && (best.nchannels == 0 || speeds[idx + 1] / best.bw_inter_gbps > 0.49);
        if !next_ok {
            break;
        }
        idx += 1;
    }
    if best.nchannels == 0 {
        // search.cc: "falling back to simple order" with one slow channel.
        return GraphSearch {
            nchannels: 1,
            bw_intra_gbps: 0.1,
            bw_inter_gbps: 0.1,
        };
    }

    // search.cc ncclTopoDupChannels.
    let cc_above_80 = sys.arch != GpuArch::Ampere;
    if best.bw_intra_gbps >= 25.0 && !(cc_above_80 && best.bw_intra_gbps < 50.0 && best.nchannels > 4) {
        let dup = (best.nchannels * 2).min(max_ch);
        let div = f64::from(dup.div_ceil(best.nchannels));
        best.bw_intra_gbps /= div;
        best.bw_inter_gbps /= div;
        best.nchannels = dup;
    }

    // Pass 2: try faster speeds, keeping at least the channels found.
    let mut idx = 0;
    while speeds[idx] > best.bw_inter_gbps && idx < speeds.len() - 1 {
        idx += 1;
    }
    let found = best;
    while idx > 0 {
        idx -= 1;
        let s = speeds[idx];
        match pattern {
            Pattern::Ring => {
                let cap = sys.chain_capacity(s, s).min(max_ch);
                if cap >= found.nchannels && f64::from(cap) * s > f64::from(best.nchannels) * best.bw_intra_gbps {
                    best = GraphSearch {
                        nchannels: cap,
                        bw_intra_gbps: s,
                        bw_inter_gbps: s,
                    };
                }
            }
            Pattern::Tree => {
                // search.cc: trees only raise bwIntra, up to twice bwInter.
                if best.bw_intra_gbps >= 2.0 * best.bw_inter_gbps {
                    break;
                }
                let cap = sys.chain_capacity(s, best.bw_inter_gbps).min(max_ch);
                if cap >= found.nchannels {
                    best.bw_intra_gbps = s;
                }
            }
        }
    }
    best
}

/// NCCL search.cc `ncclTopoCompute` for the NVLS pattern.
fn compute_nvls(sys: &SearchSystem) -> GraphSearch {
    let (speeds, _) = sys.speeds();
    let (max_bw, mut total_bw) = sys.max_total_bw();
    let max_ch = sys.ppn.min(MAX_NVLS_ARITY);
    // search.cc: intra-node NVLS must pull evenly from all GPUs.
    let min_ch = if sys.inter() { 1 } else { max_ch };
    if sys.ppn > 1 {
        total_bw *= f64::from(sys.ppn) / f64::from(sys.ppn - 1);
    }
    let mut idx = 0;
    while (speeds[idx] > max_bw || speeds[idx] * f64::from(min_ch) > total_bw) && idx < speeds.len() - 1 {
        idx += 1;
    }
    let mut best = GraphSearch::NONE;
    loop {
        let s = speeds[idx];
        let cap = sys.nvls_capacity(s, s).min(max_ch);
        if cap >= min_ch {
            // search.cc ncclTopoCompareGraphs, NVLS: more heads, or more nChannels*bwInter.
            if cap > best.nchannels || f64::from(cap) * s > f64::from(best.nchannels) * best.bw_inter_gbps {
                best = GraphSearch {
                    nchannels: cap,
                    bw_intra_gbps: s,
                    bw_inter_gbps: s,
                };
            }
            if cap == max_ch {
                break;
            }
        }
        let next_ok = idx < speeds.len() - 1 && (best.nchannels == 0 || speeds[idx + 1] / best.bw_inter_gbps > 0.49);
        if !next_ok {
            break;
        }
        idx += 1;
    }
    if best.nchannels == 0 {
        return best;
    }
    // Pass 2: raise bwInter (channels fixed) while it is below twice bwIntra.
    let mut idx = 0;
    while speeds[idx] > best.bw_inter_gbps && idx < speeds.len() - 1 {
        idx += 1;
    }
    while idx > 0 && best.bw_inter_gbps < 2.0 * best.bw_intra_gbps {
        idx -= 1;
        let s = speeds[idx];
        if sys.nvls_capacity(best.bw_intra_gbps, s) >= best.nchannels {
            best.bw_inter_gbps = s;
        } else {
            break;
        }
    }
    best
}

/// Runs the searches and NCCL's channel set-up (init.cc, connect.cc `ncclTopoPostset`).
pub(crate) fn search(sys: &SearchSystem) -> GraphInfo {
    let ring = compute_chain(sys, Pattern::Ring, 1, RING_MAX_CHANNELS);
    // init.cc: the tree search must find exactly as many channels as the ring.
    let tree = compute_chain(sys, Pattern::Tree, ring.nchannels, ring.nchannels);
    let nvls_supported = sys.nvls && sys.arch != GpuArch::Ampere && sys.ppn >= 2;
    let nvls = if nvls_supported {
        let g = compute_nvls(sys);
        (g.nchannels > 0).then_some(g)
    } else {
        None
    };

    // connect.cc ncclTopoPostset: tree0/tree1 double the channels.
    let mut comm = (ring.nchannels.min(tree.nchannels) * 2).min(MAXCHANNELS);
    // connect.cc: Hopper+ multi-node with fast rings: 4 compute channels per search channel.
    if sys.arch != GpuArch::Ampere && sys.inter() && ring.bw_intra_gbps > 45.0 && comm < 16 {
        comm *= 2;
    }
    // NCCL_MAX_NCHANNELS, then NCCL_MIN_NCHANNELS (which duplicates channels).
    let max_ch = sys.max_channels.unwrap_or(MAXCHANNELS).clamp(1, MAXCHANNELS);
    comm = comm.min(max_ch);
    comm = comm.max(sys.min_channels.unwrap_or(0).min(MAXCHANNELS));

    let nvls_channels = match (nvls, sys.arch) {
        (None, _) => 0,
        (Some(_), GpuArch::Blackwell) if sys.inter() => NVLS_NCHANNELS_SM100,
        (Some(_), GpuArch::Blackwell) => NVLS_NCHANNELS_SM100_NVL,
        (Some(_), _) => NVLS_NCHANNELS_SM90,
    };

    GraphInfo {
        ppn: sys.ppn,
        nnodes: sys.nnodes,
        nccl_nvlink_gbps: sys.nvlink,
        nccl_nic_gbps: sys.nic,
        nccl_pcie_gbps: sys.pcie,
        speed_array: sys.speeds().1,
        ring,
        tree,
        nvls,
        comm_channels: comm,
        nvls_channels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100(nnodes: u32) -> SearchSystem {
        SearchSystem {
            arch: GpuArch::Hopper,
            ppn: 8,
            nnodes,
            nics: 8,
            // 18 NVLink4 links x NCCL's SM90_NVLINK_BW.
            nvlink: 18.0 * 20.6,
            // 400 Gb/s / 8.
            nic: 50.0,
            // PCIe Gen5 x16: 16 * 240 / 80.
            pcie: 48.0,
            nvls: true,
            min_channels: None,
            max_channels: None,
        }
    }

    #[test]
    fn single_node_h100_ring_is_6x60_duplicated_to_12x30() {
        let g = search(&h100(1));
        // 370.8 / 60 -> 6 channels at 60 GB/s; duplicated (60 >= 50) to 12 at 30.
        assert_eq!(
            g.ring,
            GraphSearch {
                nchannels: 12,
                bw_intra_gbps: 30.0,
                bw_inter_gbps: 30.0
            }
        );
        assert_eq!(g.tree.nchannels, 12);
        assert_eq!(g.comm_channels, 24);
        let nvls = g.nvls.unwrap();
        // 8 heads; (8+1) x 40 <= 370.8 < (8+1) x 50.
        assert_eq!((nvls.nchannels, nvls.bw_intra_gbps), (8, 40.0));
        assert_eq!(g.nvls_channels, NVLS_NCHANNELS_SM90);
    }

    #[test]
    fn multi_node_h100_ring_is_8x48_and_16_comm_channels() {
        let g = search(&h100(4));
        // One 48 GB/s channel per 50 GB/s NIC; no duplication (48 < 50 with > 4 channels);
        // x2 for tree0/tree1; 16 is not < 16 so no Hopper doubling.
        assert_eq!(
            g.ring,
            GraphSearch {
                nchannels: 8,
                bw_intra_gbps: 48.0,
                bw_inter_gbps: 48.0
            }
        );
        assert_eq!(g.tree, g.ring);
        assert_eq!(g.comm_channels, 16);
        let nvls = g.nvls.unwrap();
        assert_eq!((nvls.nchannels, nvls.bw_intra_gbps, nvls.bw_inter_gbps), (8, 40.0, 48.0));
    }

    #[test]
    fn four_nics_get_hopper_doubling() {
        let mut s = h100(2);
        s.nics = 4;
        let g = search(&s);
        // 4 channels at 48 (one per NIC); 4 is not > 4, so duplicated to 8 at 24.
        assert_eq!(
            g.ring,
            GraphSearch {
                nchannels: 8,
                bw_intra_gbps: 24.0,
                bw_inter_gbps: 24.0
            }
        );
        // x2 for trees; bwIntra 24 <= 45, so no Hopper doubling.
        assert_eq!(g.comm_channels, 16);
    }

    #[test]
    fn channel_clamps() {
        let mut s = h100(1);
        s.max_channels = Some(4);
        assert_eq!(search(&s).comm_channels, 4);
        s.max_channels = None;
        s.min_channels = Some(32);
        assert_eq!(search(&s).comm_channels, 32);
    }
}
