//! Compute model: how long one op takes on one GPU.
//!
//! - [`op`]: what is asked (class, dtype, FLOPs, bytes, shape).
//! - [`gpu`](mod@gpu): the GPU catalog (peak dense FLOP/s per dtype, HBM bandwidth and capacity, sources).
//! - [`custom`]: a GPU declared in a scenario, from a catalog `base` or from scratch.
//! - [`power`]: a board power limit below the TDP as a lower rate of compute-bound kernels.
//! - [`roofline`]: roofline time with per-op-class efficiencies shipped as data.
//! - [`variability`]: a job's compute at the pace of its slowest GPU (board-to-board spread).
//! - [`ssd`]: the Mamba-2 SSD scan, HBM traffic summed over its Triton kernels.
//! - [`db`]: the op-time database (CSV, like SimAI-CP Table 4) that takes precedence.
//! - [`model`]: [`ComputeModel`], database first then roofline, plus the overlap slowdown.
//!
//! See `README.md` in this crate for the catalog table and how to calibrate.

pub mod attention;
mod csvtext;
pub mod custom;
pub mod db;
pub mod error;
pub mod gemm;
pub mod gpu;
pub mod model;
pub mod op;
pub mod power;
pub mod roofline;
pub mod ssd;
pub mod tile_schedule;
pub mod variability;

pub use attention::{AttentionKernel, AttentionShape};
pub use custom::CustomGpu;
pub use db::OpDatabase;
pub use error::ComputeError;
pub use gpu::{GpuSpec, PeakTflops, catalog, gpu};
pub use model::{ComputeModel, OpTime, OverlapModel, TimeSource};
pub use op::{DType, GemmShape, KernelShape, OpClass, OpQuery};
pub use roofline::{Bound, ClassEfficiency, Efficiencies};
pub use ssd::SsdShape;
