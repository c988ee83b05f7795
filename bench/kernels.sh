#!/usr/bin/env bash
# Kernel-level checks of llmsim's compute model against published kernel benchmarks.
#
# Usage: bench/kernels.sh
# Prints the GEMM model's throughput next to DeepGEMM's published FP8 table on H800 (a library
# the calibration was not derived from), and runs the calibration tests that recompute every
# cited best-shape measurement the shipped efficiency table comes from.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p llmsim-compute --example gemm_table
cargo test -q -p llmsim-compute --test calibration
