//! Vocabulary shared by the layers above: the collective operations and the GPU generations.
//!
//! They live here, at the bottom, so that a crate that only names them (the compute model, the
//! workload generators) does not depend on the collective layer and, through it, on the packet
//! engine. `llmsim_ccl` re-exports both from their old paths.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::units::Bandwidth;

/// A collective operation (nccl-tests naming).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveOp {
    /// Every rank ends with the reduction of all ranks' buffers.
    AllReduce,
    /// Every rank ends with the concatenation of all ranks' buffers.
    AllGather,
    /// Every rank ends with its slice of the reduction.
    ReduceScatter,
    /// Every rank sends a distinct slice to every other rank.
    AllToAll,
    /// The root's buffer goes to every rank.
    Broadcast,
    /// The reduction of all ranks' buffers lands on the root.
    Reduce,
}

impl CollectiveOp {
    /// Every collective, in the order above.
    pub const ALL: [CollectiveOp; 6] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllToAll,
        CollectiveOp::Broadcast,
        CollectiveOp::Reduce,
    ];

    /// nccl-tests' busbw / algbw factor: all-reduce 2(n-1)/n, all-gather, reduce-scatter and
    /// all-to-all (n-1)/n, broadcast and reduce 1.
    pub fn busbw_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (n - 1.0) / n,
            CollectiveOp::Broadcast | CollectiveOp::Reduce => 1.0,
        }
    }
}

impl fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::Reduce => "reduce",
        })
    }
}

impl FromStr for CollectiveOp {
    type Err = FieldError;
    /// Any case, with or without separators ("AllReduce", "all_reduce", "all-reduce").
    fn from_str(s: &str) -> Result<Self, FieldError> {
        let k: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        CollectiveOp::ALL
            .into_iter()
            .find(|op| op.to_string().replace('-', "") == k)
            .ok_or_else(|| {
                FieldError::new(
                    "op",
                    format!("unknown collective {s:?}; valid: all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce"),
                )
            })
    }
}

/// GPU generation; selects NCCL's per-compute-capability constants and the compute catalog's
/// kernel efficiencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum GpuArch {
    /// sm80 (A100).
    Ampere,
    /// sm90 (H100, H200).
    Hopper,
    /// sm100 (B200, GB200).
    Blackwell,
}

impl GpuArch {
    /// GPU PCIe link as NCCL rates it (topo.cc: width * GT/s-code / 80): Gen4 x16 24 GB/s,
    /// Gen5 x16 48 GB/s.
    pub fn default_pcie_bw(self) -> Bandwidth {
        match self {
            GpuArch::Ampere => Bandwidth::from_gbytes_per_sec(24),
            GpuArch::Hopper | GpuArch::Blackwell => Bandwidth::from_gbytes_per_sec(48),
        }
    }
}

impl FromStr for GpuArch {
    type Err = FieldError;
    /// Generation, SM version or GPU name, any case ("hopper", "sm90", "H100").
    fn from_str(s: &str) -> Result<Self, FieldError> {
        let squashed: String = s
            .chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .flat_map(char::to_lowercase)
            .collect();
        match squashed.as_str() {
            "ampere" | "sm80" | "a100" => Ok(GpuArch::Ampere),
            "hopper" | "sm90" | "h100" | "h200" => Ok(GpuArch::Hopper),
            "blackwell" | "sm100" | "b200" | "gb200" => Ok(GpuArch::Blackwell),
            _ => Err(FieldError::new(
                "arch",
                format!("cannot read {s:?}; valid: ampere (sm80), hopper (sm90), blackwell (sm100)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_the_field_and_the_valid_values() {
        assert_eq!(
            "x".parse::<GpuArch>().unwrap_err().to_string(),
            "arch: cannot read \"x\"; valid: ampere (sm80), hopper (sm90), blackwell (sm100)"
        );
        assert_eq!("H100".parse::<GpuArch>(), Ok(GpuArch::Hopper));
        assert_eq!("AllReduce".parse::<CollectiveOp>(), Ok(CollectiveOp::AllReduce));
        assert!(
            "allsum"
                .parse::<CollectiveOp>()
                .unwrap_err()
                .to_string()
                .starts_with("op: unknown collective")
        );
    }
}
