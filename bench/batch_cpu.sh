#!/usr/bin/env bash
# Batch packet engine (llmsim.batch, JAX on CPU) vs the exact engine on 100 CC parameter points of
# the ns-3 ft16 scenarios: throughput and FCT error (bench/README.md, "Batch packet engine").
# Needs the package with the batch extra in .venv (maturin develop; pip install "jax[cpu]") and
# the release binary. Scenarios: the bundled DCQCN permutation, plus NS3_REF's runs when present.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p llmsim-cli
bin="${CARGO_TARGET_DIR:-target}/release/llmsim"
ref="${NS3_REF:-../shared/reference/ns3}"
configs=(examples/ns3/runs/ft16_perm_dcqcn/config.txt)
for r in ft16_perm_hp ft16_incast_dcqcn ft16_incast_hp; do
    [ -f "$ref/runs/$r/config.txt" ] && configs+=("$ref/runs/$r/config.txt")
done
JAX_PLATFORMS=cpu .venv/bin/python bench/batch_packet.py --backend cpu --llmsim "$bin" "${configs[@]}" "$@"
