#!/usr/bin/env bash
# Batch packet engine on a GPU: the same 100-point sweeps as bench/batch_cpu.sh, with JAX on CUDA,
# against the exact engine on the CPU. One command on a machine with an NVIDIA GPU:
#     bench/batch_gpu.sh            (installs jax[cuda12] into .venv first)
# Not yet measured (no GPU was available when it was written): see bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q maturin numpy "jax[cuda12]"
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop -q --release
.venv/bin/python -c 'import jax; d = jax.devices()[0]; assert d.platform == "gpu", f"no GPU: JAX runs on {d}"; print(d)'
cargo build --release -q -p llmsim-cli
bin="${CARGO_TARGET_DIR:-target}/release/llmsim"
ref="${NS3_REF:-../shared/reference/ns3}"
configs=(examples/ns3/runs/ft16_perm_dcqcn/config.txt)
for r in ft16_perm_hp ft16_incast_dcqcn ft16_incast_hp; do
    [ -f "$ref/runs/$r/config.txt" ] && configs+=("$ref/runs/$r/config.txt")
done
.venv/bin/python bench/batch_packet.py --backend gpu --llmsim "$bin" --json batch_gpu.json "${configs[@]}" "$@"
