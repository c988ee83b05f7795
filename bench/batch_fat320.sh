#!/usr/bin/env bash
# Batch packet engine (llmsim.batch, JAX on CPU) vs the exact engine on 100 CC parameter points of
# the 320-host fabric (the reference's inputs/fat.txt) with the web-search workload of
# bench/ns3_speed.sh (`ns3 gen`, 30% load, 5 ms, seed 1: 3,491 flows), DCQCN and HPCC
# (bench/README.md, "Live-flow windows"). One batch run per CC, timed with its compile (--runs 0);
# the exact engine runs every point. Expect about half an hour per CC on the 2-core machine.
# Usage: bench/batch_fat320.sh [reference_dir] [batch_packet.py flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
ref=$(cd "${1:-../shared/reference/ns3}" && pwd)
shift || true
source bench/lib.sh
mkdir -p "$tmp/inputs"
cp "$ref/inputs/fat.txt" "$tmp/inputs/"
"$bin" ns3 gen --topology "$tmp/inputs/fat.txt" --load 0.3 --duration 0.005 --seed 1 > "$tmp/inputs/websearch.txt"
for cc in dcqcn hp; do
  sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE inputs/fat.txt#" -e "s#^FLOW_FILE .*#FLOW_FILE inputs/websearch.txt#" \
    "$ref/runs/ft16_perm_$cc/config.txt" > "$tmp/ws_$cc.txt"
done
JAX_PLATFORMS=cpu .venv/bin/python bench/batch_packet.py --backend cpu --runs 0 --llmsim "$bin" \
  "$tmp/ws_dcqcn.txt" "$tmp/ws_hp.txt" "$@"
