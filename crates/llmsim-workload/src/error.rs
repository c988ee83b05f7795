//! The workload crate's one error type. Every variant names the offending field (or file) and
//! what would be valid, so a scenario author can fix the YAML from the message alone.

use thiserror::Error;

use crate::memory::MemoryFootprint;

const GIB: f64 = (1u64 << 30) as f64;

fn gib(b: u64) -> f64 {
    b as f64 / GIB
}

/// A model, training or parallelism setting llmsim cannot use, or a plan that does not fit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum WorkloadError {
    /// `model:` names no known preset.
    #[error("model: unknown preset {name:?}; valid presets: {}", valid.join(", "))]
    UnknownPreset {
        /// The name given.
        name: String,
        /// The known preset names.
        valid: Vec<String>,
    },

    /// A Hugging Face `config.json` that is not JSON or lacks a usable field.
    #[error("model config.json: {message}")]
    HfConfig {
        /// What is wrong with it.
        message: String,
    },

    /// A required field is absent (e.g. `model.hidden_size` without a preset or config).
    #[error("{field}: missing; give it explicitly, or start from `preset:` or `config:`")]
    MissingField {
        /// The dotted field, e.g. `model.hidden_size`.
        field: String,
    },

    /// A file that cannot be read.
    #[error("{path}: {message}")]
    Io {
        /// The file's path.
        path: String,
        /// The I/O error.
        message: String,
    },

    /// A parallel degree that does not divide what it splits.
    #[error("{field}: {message}")]
    Divisibility {
        /// The dotted field, e.g. `parallel.tp`.
        field: String,
        /// What it must divide, and the valid values.
        message: String,
    },

    /// The GPU count is not the product of the parallel degrees.
    #[error("cluster has {gpus} GPUs but tp*cp*dp*pp = {product}: {message}")]
    GpuCount {
        /// GPUs in the cluster.
        gpus: u64,
        /// `tp * cp * dp * pp`.
        product: u64,
        /// What to change.
        message: String,
    },

    /// Any other invalid value.
    #[error("{field}: {message}")]
    Invalid {
        /// The dotted field.
        field: String,
        /// What is wrong, and what would be valid.
        message: String,
    },

    /// The per-GPU memory footprint exceeds the GPU's capacity.
    #[error(
        "out of memory on {gpu} ({cap:.1} GiB): needs {total:.1} GiB per GPU = parameters {p:.1} + gradients {g:.1} + \
         optimizer states {o:.1} + activations {a:.1} + workspace {w:.1} GiB; {suggestion}",
        cap = gib(*capacity),
        total = gib(footprint.total),
        p = gib(footprint.parameters),
        g = gib(footprint.gradients),
        o = gib(footprint.optimizer_states),
        a = gib(footprint.activations),
        w = gib(footprint.workspace)
    )]
    OutOfMemory {
        /// The GPU's name.
        gpu: String,
        /// The GPU's memory, in bytes.
        capacity: u64,
        /// What one GPU needs.
        footprint: MemoryFootprint,
        /// What to change so the plan fits.
        suggestion: String,
    },
}

impl WorkloadError {
    /// The dotted scenario field the error is about, where there is one
    /// (`parallel.tp`, `training.global_batch_size`, `model`, ...).
    pub fn field(&self) -> Option<&str> {
        match self {
            WorkloadError::UnknownPreset { .. } | WorkloadError::HfConfig { .. } => Some("model"),
            WorkloadError::MissingField { field } | WorkloadError::Divisibility { field, .. } | WorkloadError::Invalid { field, .. } => {
                Some(field)
            }
            WorkloadError::GpuCount { .. } => Some("parallel"),
            WorkloadError::Io { .. } | WorkloadError::OutOfMemory { .. } => None,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        WorkloadError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn divisibility(field: impl Into<String>, message: impl Into<String>) -> Self {
        WorkloadError::Divisibility {
            field: field.into(),
            message: message.into(),
        }
    }
}
