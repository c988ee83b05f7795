#!/usr/bin/env bash
# Topology families at scale (issue 34).
#  1. Per family at 65,536 GPUs (8-GPU servers, every parameter from its default): generation +
#     routing set-up time, route lookups/s (1,000,000 random full-path expansions) and peak RSS,
#     one process per family (examples/families_scale.rs).
#  2. Per family at 1,024 GPUs: a 1 GiB all-reduce and a 1 GiB all-to-all on the flow backend
#     through `llmsim collective --topology KIND --gpus 1024 --backend flow`.
# Usage: bench/topo_families.sh [GPUS=65536]   (CARGO_TARGET_DIR honoured; release build)
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${1:-65536}
KINDS=(fat-tree rail-fat-tree torus dragonfly rail-only full-mesh three-tier bcube clos)
cargo build --release -q -p llmsim-topo --example families_scale
cargo build --release -q -p llmsim-cli --bin llmsim
T=${CARGO_TARGET_DIR:-target}/release
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| kind | instance | nodes | directed links | set-up ms (on CPU) | M lookups/s (per CPU-s) | hops/route | heap MiB | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for k in "${KINDS[@]}"; do
  "$T/examples/families_scale" "$k" "$GPUS" 1000000 8
done
echo
echo "| kind | op | expansion | completion time | busbw | wall s |"
echo "|---|---|---|---|---|---|"
for k in "${KINDS[@]}"; do
  for op in all-reduce all-to-all; do
    start=$(date +%s.%N)
    out=$("$T/llmsim" collective --topology "$k" --gpus 1024 --backend flow --op "$op" --size 1GiB 2>&1) || { echo "| $k | $op | error: $(echo "$out" | tail -1) | | |"; continue; }
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    time=$(echo "$out" | grep -m1 '^completion time:' | cut -d: -f2 | xargs)
    bus=$(echo "$out" | grep -m1 '^algbw:' | sed 's/.*busbw: *//; s/ *(.*//')
    algo=$(echo "$out" | grep -m1 '^simulated expansion:' | cut -d: -f2 | cut -d'(' -f1 | xargs)
    echo "| $k | $op | ${algo:-?} | ${time:-?} | ${bus:-?} | $(printf %.1f "$wall") |"
  done
done
