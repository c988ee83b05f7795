#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every Rust test. Runs on a clean clone with no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --quiet 2>&1 | tee /tmp/llmsim-test.log
# A plain closing line any CI reader understands.
passed=$(grep -Eo '[0-9]+ passed' /tmp/llmsim-test.log | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' /tmp/llmsim-test.log | awk '{s+=$1} END {print s+0}')
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
