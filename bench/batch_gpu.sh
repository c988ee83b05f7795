#!/usr/bin/env bash
# Batch packet engine on a GPU: the same 100-point sweeps as bench/batch_cpu.sh, with JAX on CUDA,
# against the exact engine on the CPU. One command on a machine with an NVIDIA GPU:
#     bench/batch_gpu.sh
# It installs maturin and jax[cuda12] into .venv when JAX there does not see a GPU (that needs the
# package index; on an offline machine, prepare .venv with them first), builds the package and the
# release binary unless LLMSIM_BIN names one, and writes batch_gpu.json.
# Not yet measured (no GPU was available when it was written): see bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# A new .venv sees the system's packages: a GPU machine's preinstalled CUDA JAX (and maturin) then
# serve without the package index.
[ -x .venv/bin/python ] || python3 -m venv --system-site-packages .venv
gpu='import jax, sys; sys.exit(0 if any(d.platform == "gpu" for d in jax.devices()) else 1)'
if ! .venv/bin/python -c "$gpu" 2>/dev/null; then
    .venv/bin/pip install -q maturin numpy "jax[cuda12]"
fi
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop -q --release
.venv/bin/python -c "$gpu" || { echo "JAX sees no GPU here: $(.venv/bin/python -c 'import jax; print(jax.devices())')" >&2; exit 1; }
bin="${LLMSIM_BIN:-${CARGO_TARGET_DIR:-target}/release/llmsim}"
[ -x "$bin" ] || cargo build --release -q -p llmsim-cli
ref="${NS3_REF:-../shared/reference/ns3}"
configs=(examples/ns3/runs/ft16_perm_dcqcn/config.txt)
for r in ft16_perm_hp ft16_incast_dcqcn ft16_incast_hp; do
    [ -f "$ref/runs/$r/config.txt" ] && configs+=("$ref/runs/$r/config.txt")
done
# Without the reference folder (a GPU machine with only this repository): the DCQCN incast
# (hosts 1..15 send 1 MB each to host 0 at 2 s) written from the bundled run's config.
if [ ! -f "$ref/runs/ft16_incast_dcqcn/config.txt" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    { echo 15; for h in $(seq 1 15); do echo "$h 0 3 100 1000000 2.000000000"; done; } > "$tmp/incast.txt"
    sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE $PWD/examples/ns3/inputs/fattree_k4_16h.txt#" \
        -e "s#^FLOW_FILE .*#FLOW_FILE $tmp/incast.txt#" examples/ns3/runs/ft16_perm_dcqcn/config.txt > "$tmp/config.txt"
    configs+=("$tmp/config.txt")
fi
.venv/bin/python bench/batch_packet.py --backend gpu --llmsim "$bin" --json batch_gpu.json "${configs[@]}" "$@"
