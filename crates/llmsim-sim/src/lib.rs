//! The system simulator: a scenario in, a [`Report`] out.
//!
//! [`simulate`] resolves the model and parallel plan, checks memory, generates the Megatron
//! programs ([`llmsim_workload::megatron`]), times every compute segment on the GPU
//! ([`llmsim_compute`]), and runs all units on one shared network ([`engine`]).
//!
//! The crate root is a facade: [`run`] (the pipeline), [`setup`] (scenario to model),
//! [`imported`] (imported workloads), [`ops`] (the per-op table) and [`error`]; their public
//! items are re-exported here under their historical paths.

pub mod astra;
pub mod batch;
pub mod batch_engine;
pub mod engine;
pub mod error;
pub mod estimate;
pub mod faults;
pub mod fidelity;
pub mod fold;
pub mod host;
pub mod imported;
pub mod jobs;
pub mod ops;
pub mod report;
pub mod run;
pub mod scenario;
pub mod schema;
pub mod setup;
pub mod yaml;

/// Rate samples per steadiness test of an uncontended partition in `llmsim run` when
/// `network.fast_forward.uncontended_window` is not given. On the Wormhole benchmark's LLM
/// workloads (bench/HISTORY.md, 2026-11-24) 3 cut the MoE 8x7B cold-memo packet events from 22.0 M
/// to 9.7 M (HPCC) and 21.2 M to 7.9 M (DCQCN) at 0.26% / 0.022% mean transfer error; 2 put
/// the worst transfer 15-29% off.
const UNCONTENDED_WINDOW: usize = 3;

/// Rate samples per steadiness test of a contended partition at its max-min fair shares in
/// `llmsim run` when `network.fast_forward.fair_window` is not given. On GPT-3 175B / 1,024 GPUs
/// (bench/README.md, issue 29) the packet run's pipeline sends that collide on spine links
/// otherwise run 80 us of DCQCN's 8-sample window on packets, most of their 130-250 us.
const FAIR_WINDOW: usize = 4;

/// `network.fast_forward.window` (l) when not given: 4 samples under HPCC, 8 under the other
/// CCs, one every `sample_us` (default 10 us). Measured from empty memo databases on the MoE
/// 8x7B / 64-GPU workload on H100 and on A100 (bench/HISTORY.md, 2026-11-24): HPCC with 4 skips
/// a DP-step-and-all-to-all transient that 8 samples outlast (1.7 M against 2.6 M packet events
/// on H100, 1.0 M against 1.6 M on A100, the same error); DCQCN with 4 takes its timer-driven
/// transients for steady state (0.22% against 0.006-0.008% mean transfer error, and more events).
/// TIMELY and DCTCP were not measured on these workloads and keep 8. Each algorithm's value is
/// its `FF_WINDOW` in the packet engine's registry (`cc/<name>.rs`).
#[must_use]
pub fn default_window(cc: llmsim_net::packet::CcMode) -> usize {
    cc.fast_forward_window()
}

pub use batch::Shared;

pub use engine::{EngineRun, GroupCount, Layout};
pub use error::SimError;
pub use imported::{ImportedRun, simulate_imported};
pub use ops::{OpRow, iteration_flops};
pub use report::Report;
pub use run::{Generated, Outcome, RunOptions, generate, simulate, simulate_shared};
pub use scenario::{Backend, FoldMode, GpuChoice, Scenario};
pub use setup::{Resolved, compute_model, resolve};
