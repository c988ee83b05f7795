//! How far llmsim has been from published runs like the one at hand: the validation's
//! llmsim/published throughput ratios (`bench/validation.md`) grouped by GPU generation, dense or
//! MoE, and precision, shipped as `data/fidelity.csv`. The report quotes the run's class so that
//! a prediction comes with the error llmsim is known to make on similar real runs. The table is
//! written by `bench/fidelity_table.py` from the validation's rows (`bench/validation-rows.csv`,
//! written by `VALIDATION_CSV=... bench/validation.sh`); nothing here changes a prediction.

use std::sync::LazyLock;

use llmsim_compute::{DType, GpuSpec};
use llmsim_core::GpuArch;
use serde::{Deserialize, Serialize};

/// The validation's record for one class of runs (a row of `data/fidelity.csv`, whose columns
/// are these fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    /// The class, e.g. `Hopper, dense, BF16/FP16`.
    pub class: String,
    /// Published runs of the class in the validation's statistics.
    pub rows: u32,
    /// Median of llmsim/published throughput over them (> 1: llmsim predicts a faster run).
    pub median_ratio: f64,
    /// The smallest and largest ratio.
    pub min_ratio: f64,
    /// See `min_ratio`.
    pub max_ratio: f64,
    /// Rows within 10% of the published figure.
    pub within_10pct: u32,
}

/// The class of a run: GPU generation, dense or MoE, and precision. `None` where the validation
/// has no such generation (V100, MI300X) or the run is not a transformer llmsim generated.
pub fn class_of(gpu: &GpuSpec, moe: Option<bool>, dtype: DType) -> Option<String> {
    let moe = moe?;
    // The catalog files V100 under Ampere's NCCL tuning, and MI300X under its nearest NVIDIA one;
    // a custom GPU declared on either (or named as an AMD Instinct) is neither generation either.
    let other = |n: &str| n.contains("V100") || n.starts_with("MI");
    if gpu.lineage().any(other) {
        return None;
    }
    let arch = match gpu.arch {
        GpuArch::Ampere => "Ampere",
        GpuArch::Hopper => "Hopper",
        GpuArch::Blackwell => "Blackwell",
    };
    let kind = if moe { "MoE" } else { "dense" };
    let precision = match dtype {
        DType::Fp8 | DType::Fp4 | DType::Mxfp8 | DType::Fp8Block => "FP8/FP4",
        _ => "BF16/FP16",
    };
    Some(format!("{arch}, {kind}, {precision}"))
}

static TABLE: LazyLock<Vec<Fidelity>> = LazyLock::new(|| parse(include_str!("../data/fidelity.csv")));

/// The rows of `data/fidelity.csv` (`#` comments; columns `class,rows,median_ratio,min_ratio,
/// max_ratio,within_10pct`). The file is generated and checked by a test, so a malformed line is
/// a build defect: it is skipped here rather than failing a user's run.
fn parse(text: &str) -> Vec<Fidelity> {
    csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes())
        .deserialize()
        .filter_map(Result::ok)
        .collect()
}

/// The validation's record for `class`, if it has published runs of that class.
pub fn lookup(class: &str) -> Option<Fidelity> {
    TABLE.iter().find(|f| f.class == class).cloned()
}

/// Every class the shipped table has.
pub fn table() -> &'static [Fidelity] {
    &TABLE
}

impl Fidelity {
    /// The report's line: how many runs, the median and range, and what it means.
    pub fn line(&self) -> String {
        let lean = if self.median_ratio > 1.05 {
            ": llmsim is optimistic here"
        } else if self.median_ratio < 0.95 {
            ": llmsim is pessimistic here"
        } else {
            ""
        };
        format!(
            "{}: {} published runs, llmsim/published throughput median {:.2} (range {:.2}-{:.2}, {} within 10%){lean}; bench/validation.md",
            self.class, self.rows, self.median_ratio, self.min_ratio, self.max_ratio, self.within_10pct
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_parses_whole() {
        let text = include_str!("../data/fidelity.csv");
        let data_lines = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).count();
        assert_eq!(table().len() + 1, data_lines, "every data line parses");
        for f in table() {
            assert!(
                f.rows > 0 && f.min_ratio <= f.median_ratio && f.median_ratio <= f.max_ratio,
                "{f:?}"
            );
            assert!(f.within_10pct <= f.rows, "{f:?}");
        }
    }

    #[test]
    fn classes_name_generation_kind_and_precision() {
        let h100 = llmsim_compute::gpu::gpu("H100").unwrap();
        assert_eq!(
            class_of(h100, Some(false), DType::Bf16).as_deref(),
            Some("Hopper, dense, BF16/FP16")
        );
        assert_eq!(class_of(h100, Some(true), DType::Fp8).as_deref(), Some("Hopper, MoE, FP8/FP4"));
        assert_eq!(class_of(h100, None, DType::Bf16), None);
        let v100 = llmsim_compute::gpu::gpu("V100").unwrap();
        assert_eq!(class_of(v100, Some(false), DType::Fp16), None);
        // Custom GPUs on those bases, or named as an AMD Instinct, have no class either.
        let on_v100 = llmsim_compute::GpuSpec {
            name: "V100-SXM3-32GB-H",
            base: Some("V100"),
            ..*v100
        };
        let mi355x = llmsim_compute::GpuSpec {
            name: "MI355X",
            base: None,
            ..*h100
        };
        assert_eq!(class_of(&on_v100, Some(false), DType::Fp16), None);
        assert_eq!(class_of(&mi355x, Some(false), DType::Fp8), None);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let t = parse(
            "class,rows,median_ratio,min_ratio,max_ratio,within_10pct\n\"A, dense, BF16/FP16\",3,1.0,0.9,1.1,3\nbad\n\"B\",x,1,1,1,1\n",
        );
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].line(),
            "A, dense, BF16/FP16: 3 published runs, llmsim/published throughput median 1.00 (range 0.90-1.10, 3 within 10%); bench/validation.md"
        );
    }
}
