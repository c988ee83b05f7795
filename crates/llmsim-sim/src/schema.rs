//! The JSON Schema of a scenario file (`llmsim schema`), derived from the serde types with
//! schemars. Draft-07, the draft editors' YAML language servers read best.

use llmsim_core::{Bandwidth, Bytes, Power};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};

use crate::Scenario;

/// The JSON Schema of a scenario file.
pub fn scenario_schema() -> Schema {
    let mut s = SchemaSettings::draft07().into_generator().into_root_schema_for::<Scenario>();
    s.insert("title".into(), "llmsim scenario".into());
    s
}

// The schema of `llmsim_compute::CustomGpu`, whose crate does not derive `JsonSchema`: the same
// fields and docs. A test checks the field names against `CustomGpu`'s own, so a field added
// there fails it until it is added here.
/// A GPU declared in the scenario (`cluster.gpu` as a map), e.g.
/// `{ name: H100-96, base: H100, memory: 96GiB }`. With `base`, every field left out is the base
/// catalog GPU's, and the base's efficiency rows apply; without it, the fields marked required
/// must all be given. Rates in dense TFLOP/s (no 2:4 sparsity).
#[derive(JsonSchema)]
#[schemars(rename = "CustomGpu", deny_unknown_fields)]
#[allow(dead_code)]
pub struct CustomGpuSchema {
    /// Name in reports. Required; must not be a catalog name (use `base` to start from one).
    name: Option<String>,
    /// Catalog GPU whose figures fill the fields left out, and whose efficiency rows apply.
    base: Option<String>,
    /// Non-tensor FP32 peak, dense TFLOP/s. Required without `base`.
    fp32_tflops: Option<f64>,
    /// Tensor-core TF32 peak, dense TFLOP/s. Default: the base's, else half of `bf16_tflops`.
    tf32_tflops: Option<f64>,
    /// Tensor-core BF16 peak, dense TFLOP/s. Required without `base`.
    bf16_tflops: Option<f64>,
    /// Tensor-core FP16 peak, dense TFLOP/s. Default: the base's, else `bf16_tflops`.
    fp16_tflops: Option<f64>,
    /// Tensor-core FP8 peak, dense TFLOP/s. Default: the base's, else none (FP8 ops run at the
    /// BF16 peak).
    fp8_tflops: Option<f64>,
    /// Tensor-core FP4 (NVFP4) peak, dense TFLOP/s. Default: the base's, else none
    /// (`training.dtype: fp4` is then rejected).
    fp4_tflops: Option<f64>,
    /// Peak HBM bandwidth, e.g. `4TB/s`. Required without `base`.
    hbm_bandwidth: Option<Bandwidth>,
    /// Memory capacity the framework can allocate into (`nvidia-smi` memory.total), e.g.
    /// `96GiB`. Required without `base`.
    memory: Option<Bytes>,
    /// NVLink (scale-up) bandwidth per GPU per direction, e.g. `450GB/s`. Required without `base`.
    nvlink_bandwidth: Option<Bandwidth>,
    /// Host link (PCIe / NVLink-C2C) bandwidth per direction, e.g. `64GB/s`: the copies of
    /// activation CPU offloading. Default: the base's; needed only when offloading.
    host_bandwidth: Option<Bandwidth>,
    /// Streaming multiprocessors (the GEMM wave model). Required without `base`.
    sm_count: Option<u32>,
    /// Maximum SM clock in MHz (`nvidia-smi -q`, "Max Clocks: SM"): the Mamba-2 SSD scan runs at
    /// a rate per SM and cycle. Default: the base's, else none (the scan is then timed by its HBM
    /// bandwidth fraction alone).
    sm_clock_mhz: Option<u32>,
    /// NCCL tuning / GEMM tile architecture: ampere | hopper | blackwell. Required without `base`.
    arch: Option<String>,
    /// Board power the peaks and efficiencies stand for (the datasheet's default power limit),
    /// e.g. `700W`. Default: the base's; needed only with `power_limit`.
    tdp: Option<Power>,
    /// Power limit set on the board (`nvidia-smi -pl`), e.g. `500W`. Default: `tdp` (no cap).
    /// Below `tdp`, compute-bound kernels (GEMM, attention, other compute roofs) run slower by a
    /// kernel-calibrated curve (`bench/kernels.md`, "Power limit"); memory-bound ones are
    /// unchanged. At least a quarter of `tdp`, at most 3kW.
    power_limit: Option<Power>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_gpu_schema_has_the_fields_custom_gpu_has() {
        let theirs = serde_json::to_value(llmsim_compute::CustomGpu::default()).unwrap();
        let mut theirs: Vec<&String> = theirs.as_object().unwrap().keys().collect();
        let ours = schemars::schema_for!(CustomGpuSchema);
        let mut ours: Vec<&String> = ours.get("properties").unwrap().as_object().unwrap().keys().collect();
        theirs.sort();
        ours.sort();
        assert_eq!(
            ours, theirs,
            "update CustomGpuSchema in llmsim-sim/src/schema.rs to CustomGpu's fields"
        );
    }
}
