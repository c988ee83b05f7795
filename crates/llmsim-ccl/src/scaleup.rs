//! The scale-up (NVLink/NVSwitch) domain on a per-collective alpha-beta model (Multiverse §4.1):
//! `time = alpha + bytes * busbw_factor(op, n) / busbw`.
//!
//! Defaults are *model* values, not measurements: `busbw = 0.8 x` the GPU's per-direction NVLink
//! bandwidth, `alpha` from NCCL's single-node Simple ring latency (base 8.4 us + (n-1) x 3.4 us
//! NVLink hardware latency per step; NCCL 2.30.7 tuning.cc). Calibrate them with measured
//! nccl-tests figures through the override.

use llmsim_core::{Bandwidth, Bytes, SimTime};
use serde::{Deserialize, Serialize};

use crate::CollectiveOp;

/// Alpha-beta parameters of one collective inside one server.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlphaBeta {
    /// Fixed latency of the collective, independent of size.
    pub alpha: SimTime,
    /// Bus bandwidth (nccl-tests definition) reached on large messages.
    pub busbw: Bandwidth,
}

/// The scale-up model of one GPU type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleUpModel {
    /// GPU name the model is for (as in `llmsim-compute`'s catalog).
    pub gpu: String,
    /// NVLink bandwidth per GPU per direction.
    pub nvlink: Bandwidth,
    /// All-reduce parameters.
    pub all_reduce: AlphaBeta,
    /// All-gather parameters.
    pub all_gather: AlphaBeta,
    /// Reduce-scatter parameters.
    pub reduce_scatter: AlphaBeta,
    /// All-to-all parameters; broadcast and reduce use them too.
    pub all_to_all: AlphaBeta,
    /// The expert-parallel all-to-alls of the `flex` token dispatcher (HybridEP) where its
    /// kernels were measured ([`HybridEp`]); `None`: they take [`Self::all_to_all`] as NCCL's do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flex_all_to_all: Option<HybridEp>,
}

/// HybridEP's dispatch and combine inside one NVLink domain, as Megatron-Core's `flex` token
/// dispatcher calls them: the measured algorithm bandwidth of its torch API (kernel plus the
/// device sync and flag updates around it) against the EP group size, scaled to the scenario's
/// NVLink bandwidth from that of the board it was measured on. Algorithm bandwidth is the
/// tokens a rank receives (one copy per token and rank, its own included) over the time, which
/// under balanced routing is the per-rank send buffer llmsim's all-to-all size counts.
///
/// Measured (deepseek-ai/DeepEP `docs/README_Hybrid-EP.md`, branch hybrid-ep, stored at
/// 41cad944; `tests/test_hybrid_ep.py` counts `dispatched_hidden.numel() * 2` bytes): 4,096
/// tokens of hidden 7,168 per rank, top-8, random uniform routing, 8 local experts, BF16; the
/// mean of the dispatch and combine figures, GB/s:
/// - GB200 (NVLink 5, 900 GB/s per direction), 32 SMs (the Megatron-Bridge recipes' setting):
///   8 ranks 545.71 / 568.94, 16: 523.48 / 521.55, 24: 507.32 / 483.76, 32: 484.22 / 464.54,
///   36: 479.02 / 447.89;
/// - B200 (NVLink 5, 900 GB/s), 8 ranks, 16 SMs (the one setting measured): 535.94 / 530.86.
///
/// The same kernels alone run at 684-764 GB/s on GB200 at 8 ranks: a third of the API's time
/// is outside the kernel. Not measured, assumed: GB300 takes GB200's figures and B300 B200's
/// (the same NVLink 5 switch generation); other GPUs have no figure and keep NCCL's model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridEp {
    /// (EP ranks in the NVLink domain, algorithm bandwidth), ascending in ranks; linear in
    /// between, the end figures beyond.
    pub points: Vec<(u32, Bandwidth)>,
}

/// NVLink per direction of the boards [`HybridEp`]'s figures were measured on, bytes/s.
const HYBRID_EP_NVLINK: f64 = 900e9;

/// [`HybridEp`]'s figures on GB200: (EP ranks, dispatch GB/s, combine GB/s).
const HYBRID_EP_GB200: [(u32, f64, f64); 5] = [
    (8, 545.71, 568.94),
    (16, 523.48, 521.55),
    (24, 507.32, 483.76),
    (32, 484.22, 464.54),
    (36, 479.02, 447.89),
];

/// [`HybridEp`]'s figures on B200, as [`HYBRID_EP_GB200`].
const HYBRID_EP_B200: [(u32, f64, f64); 1] = [(8, 535.94, 530.86)];

impl HybridEp {
    /// The figures for a catalog GPU (or the catalog GPU a custom one is based on), at NVLink
    /// bandwidth `nvlink` per direction; `None` where HybridEP was not measured on it.
    pub fn for_gpu(gpu: &str, nvlink: Bandwidth) -> Option<Self> {
        let measured: &[(u32, f64, f64)] = match gpu {
            "GB200" | "GB300" => &HYBRID_EP_GB200,
            "B200" | "B300" => &HYBRID_EP_B200,
            _ => return None,
        };
        let scale = nvlink.bps_f64() / 8.0 / HYBRID_EP_NVLINK;
        Some(HybridEp {
            points: measured
                .iter()
                .map(|&(n, d, c)| (n, Bandwidth::from_bps_f64((d + c) / 2.0 * 1e9 * 8.0 * scale)))
                .collect(),
        })
    }

    /// Algorithm bandwidth at `ranks` EP ranks.
    pub fn algbw(&self, ranks: u32) -> Bandwidth {
        let p = &self.points;
        let (Some(first), Some(last)) = (p.first(), p.last()) else {
            return Bandwidth::from_bps(0);
        };
        if ranks <= first.0 {
            return first.1;
        }
        if ranks >= last.0 {
            return last.1;
        }
        let i = p.iter().position(|x| x.0 >= ranks).expect("inside the range");
        let ((n0, b0), (n1, b1)) = (p[i - 1], p[i]);
        let f = f64::from(ranks - n0) / f64::from(n1 - n0);
        Bandwidth::from_bps_f64(b0.bps_f64() + f * (b1.bps_f64() - b0.bps_f64()))
    }
}

/// Fraction of NVLink bandwidth the default model assumes a collective reaches.
pub const DEFAULT_NVLINK_EFFICIENCY: f64 = 0.8;

impl ScaleUpModel {
    /// The default model for an NVLink bandwidth (a GPU's figure is in `llmsim-compute`'s catalog).
    pub fn from_nvlink(gpu: &str, nvlink: Bandwidth, gpus: u32) -> Self {
        let busbw = nvlink.scale(DEFAULT_NVLINK_EFFICIENCY);
        let steps = |s: u64| SimTime::from_ns(8_400 + s * 3_400);
        let n = gpus.max(2) as u64;
        ScaleUpModel {
            gpu: gpu.to_string(),
            nvlink,
            all_reduce: AlphaBeta {
                alpha: steps(2 * (n - 1)),
                busbw,
            },
            all_gather: AlphaBeta {
                alpha: steps(n - 1),
                busbw,
            },
            reduce_scatter: AlphaBeta {
                alpha: steps(n - 1),
                busbw,
            },
            all_to_all: AlphaBeta { alpha: steps(1), busbw },
            flex_all_to_all: None,
        }
    }

    /// Time of a `flex`-dispatcher (HybridEP) all-to-all of `bytes` (per-rank send buffer) over
    /// `n` GPUs of one NVLink domain: the all-to-all's latency plus the bytes at HybridEP's
    /// measured bandwidth, or [`Self::time`]'s all-to-all where none was measured.
    pub fn flex_time(&self, bytes: Bytes, n: u32) -> SimTime {
        match &self.flex_all_to_all {
            Some(h) if n >= 2 => self.all_to_all.alpha + SimTime::from_secs_f64(bytes.0 as f64 * 8.0 / h.algbw(n).bps_f64()),
            _ => self.time(CollectiveOp::AllToAll, bytes, n),
        }
    }

    /// The model for collectives that NCCL runs on NVLink SHARP (NVLS): the NVSwitch reduces and
    /// multicasts, so an all-reduce is bounded by `nvls.busbw`, the switch's reduction bandwidth
    /// cap, rather than by NVLink. Its reduce-scatter and all-gather halves each take half of
    /// the all-reduce (the same busbw on half the bus bytes, half the latency).
    pub fn with_nvls(&self, nvls: AlphaBeta) -> Self {
        let half = AlphaBeta {
            alpha: SimTime(nvls.alpha.0 / 2),
            busbw: nvls.busbw,
        };
        ScaleUpModel {
            all_reduce: nvls,
            reduce_scatter: half,
            all_gather: half,
            ..self.clone()
        }
    }

    /// The alpha-beta parameters of `op` (broadcast and reduce use the all-to-all ones).
    pub fn params(&self, op: CollectiveOp) -> AlphaBeta {
        match op {
            CollectiveOp::AllReduce => self.all_reduce,
            CollectiveOp::AllGather => self.all_gather,
            CollectiveOp::ReduceScatter => self.reduce_scatter,
            CollectiveOp::AllToAll | CollectiveOp::Broadcast | CollectiveOp::Reduce => self.all_to_all,
        }
    }

    /// Time of `op` on `bytes` (nccl-tests size) over `n` GPUs of one server.
    pub fn time(&self, op: CollectiveOp, bytes: Bytes, n: u32) -> SimTime {
        if n < 2 {
            return SimTime::ZERO;
        }
        let ab = self.params(op);
        let bus_bytes = bytes.0 as f64 * op.busbw_factor(n);
        ab.alpha + SimTime::from_secs_f64(bus_bytes * 8.0 / ab.busbw.bps_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_ep_takes_the_measured_figures_and_nccl_elsewhere() {
        let nv = Bandwidth::from_gbytes_per_sec(900);
        let h = HybridEp::for_gpu("GB200", nv).unwrap();
        let gbs = |n| h.algbw(n).bps_f64() / 8e9;
        assert!((gbs(8) - (545.71 + 568.94) / 2.0).abs() < 1e-6);
        assert!((gbs(4) - gbs(8)).abs() < 1e-9 && (gbs(72) - gbs(36)).abs() < 1e-9);
        assert!((gbs(20) - (gbs(16) + gbs(24)) / 2.0).abs() < 1e-6);
        assert!(gbs(8) > gbs(16) && gbs(16) > gbs(36));
        assert_eq!(HybridEp::for_gpu("GB300", nv), Some(h.clone()));
        let half = HybridEp::for_gpu("GB200", Bandwidth::from_gbytes_per_sec(450)).unwrap();
        assert!((half.algbw(8).bps_f64() / h.algbw(8).bps_f64() - 0.5).abs() < 1e-9);
        assert!(HybridEp::for_gpu("H100", Bandwidth::from_gbytes_per_sec(450)).is_none());
        // 1 GiB per rank at 8 ranks: the latency plus the bytes at the measured bandwidth; slower
        // than NCCL's model of the same all-to-all on that NVLink.
        let mut m = ScaleUpModel::from_nvlink("GB200", nv, 8);
        let nccl = m.flex_time(Bytes::gib(1), 8);
        assert_eq!(nccl, m.time(CollectiveOp::AllToAll, Bytes::gib(1), 8));
        m.flex_all_to_all = Some(h);
        let t = m.flex_time(Bytes::gib(1), 8);
        let want = m.all_to_all.alpha.as_secs_f64() + (1u64 << 30) as f64 / 557.325e9;
        assert!((t.as_secs_f64() - want).abs() < 1e-9, "{t}");
        assert!(t > nccl);
        assert_eq!(m.flex_time(Bytes::gib(1), 1), SimTime::ZERO);
    }

    #[test]
    fn time_is_alpha_plus_bus_bytes_over_busbw() {
        let m = ScaleUpModel::from_nvlink("H100", Bandwidth::from_gbytes_per_sec(450), 8);
        let b = Bytes::gib(1);
        let t = m.time(CollectiveOp::AllReduce, b, 8);
        let expect = m.all_reduce.alpha.as_secs_f64() + (b.0 as f64 * 2.0 * 7.0 / 8.0) / (450e9 * 0.8);
        assert!((t.as_secs_f64() - expect).abs() < 1e-9, "{t} vs {expect}");
    }
}
