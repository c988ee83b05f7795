//! Workloads: model configs, parallelism plans and the per-rank op DAGs they generate.
//!
//! - [`model`]: [`ModelConfig`] from presets, Hugging Face `config.json` or explicit fields.
//! - [`config`]: training and parallelism settings (Megatron names), validated.
//! - [`ops`]: per-layer op lists (FLOPs, bytes, communication) for one micro-batch.
//! - [`memory`]: per-GPU memory footprint and the OOM check.
//! - [`dag`]: the op DAG, with Chakra semantics (COMP / COMM_COLL / SEND / RECV nodes).
//! - [`megatron`]: the Megatron generator (1F1B, interleaved, DP buckets, EP, CP).
//! - [`chakra`]: Chakra execution traces in and out; [`simai`]: SimAI/AICB workload files in.

pub mod config;
pub mod dag;
pub mod dlrm;
pub mod error;
pub mod formats;
pub mod import;
pub mod megatron;
pub mod memory;
pub mod model;
pub mod ops;
pub mod schema;

/// The workload formats under their historical paths.
pub use formats::{chakra, simai};

pub use config::{
    AttentionKernelChoice, AttentionSoftmax, CpImpl, FlexBackend, Fp8Impl, Fp8Recipe, FsdpImpl, GemmModule, GradScaling, MambaGate,
    MoeDispatcher, MoeExperts, MoeRouting, OptimizerKind, ParallelConfig, PipelineSchedule, PpImpl, Recompute, RecomputeModule,
    TrainingConfig,
};
pub use error::WorkloadError;
pub use import::ImportError;
pub use memory::MemoryFootprint;
pub use model::{ModelConfig, ModelSpec};
pub use ops::{CommGroup, LayerOps, OpSpec, OpSpecKind, Pass};
