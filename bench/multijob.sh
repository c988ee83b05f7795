#!/usr/bin/env bash
# Issue 32 §3 must-show: GPT-3 13B next to Mixtral 8x7B on one 128-GPU fabric, 2:1 oversubscribed
# leaf-spine (examples/multijob-gpt13b-mixtral-128gpu.yaml), packed vs spread placement: each
# job's iteration time alone (same servers, same network, no other job) and together, and its
# slowdown. `llmsim run` computes all three; this prints them as a table with the run's wall time.
# Usage: bench/multijob.sh                        (flow and analytical backends, 2:1 and 4:1)
#        BACKENDS="flow" OVERSUB="2.0" bench/multijob.sh
#        LLMSIM=path/to/llmsim bench/multijob.sh  (skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LLMSIM:-}" ]; then
  cargo build --release -q -p llmsim-cli
  bin=${CARGO_TARGET_DIR:-target}/release/llmsim
else
  bin=$LLMSIM
fi
backends=${BACKENDS:-"flow analytical"}
oversubs=${OVERSUB:-"2.0 4.0"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=examples/multijob-gpt13b-mixtral-128gpu.yaml
echo "| oversubscription | backend | placement | job | servers | alone (s) | together (s) | slowdown | exposed comm together (ms) | wall (s) |"
echo "|---|---|---|---|---|---:|---:|---:|---:|---:|"
for o in $oversubs; do
for backend in $backends; do
  for placement in packed spread; do
    sed "s/placement: packed/placement: $placement/; s/oversubscription: 2.0/oversubscription: $o/" "$src" > "$tmp/s.yaml"
    start=$(date +%s.%N)
    "$bin" run "$tmp/s.yaml" --backend "$backend" --json > "$tmp/r.json" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
    wall=$(echo "$(date +%s.%N) - $start" | bc -l)
    python3 - "$tmp/r.json" "$backend" "$placement" "$wall" "$o" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for j in d["jobs"]:
    m = j["report"]["mean"]
    exposed = sum(m[k] for k in ("exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_pp_s", "exposed_dp_s"))
    s = j["servers"]
    servers = f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ",".join(map(str, s))
    print(f"| {float(sys.argv[5]):g}:1 | {sys.argv[2]} | {sys.argv[3]} | {j['name']} | {servers} | {j['alone_iteration_time_s']:.4f} | "
          f"{j['iteration_time_s']:.4f} | {j['slowdown']:.3f} | {exposed * 1e3:.1f} | {float(sys.argv[4]):.1f} |")
PY
  done
done
done
