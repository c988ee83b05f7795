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
    fn time_is_alpha_plus_bus_bytes_over_busbw() {
        let m = ScaleUpModel::from_nvlink("H100", Bandwidth::from_gbytes_per_sec(450), 8);
        let b = Bytes::gib(1);
        let t = m.time(CollectiveOp::AllReduce, b, 8);
        let expect = m.all_reduce.alpha.as_secs_f64() + (b.0 as f64 * 2.0 * 7.0 / 8.0) / (450e9 * 0.8);
        assert!((t.as_secs_f64() - expect).abs() < 1e-9, "{t} vs {expect}");
    }
}
