#!/usr/bin/env bash
# Issue 32 must-show: one training iteration of GPT-3 13B on 128 H100s
# (examples/gpt3-13b-128gpu.yaml) with 0, 1, 4 and 16 random fabric cables down
# (`faults: [{links: {random: N, seed: S}, action: down}]`): iteration time and exposed
# communication against no failure, and whether every transfer completed.
# Three fabrics: the example's rail-optimized fat-tree (one segment of 16 servers: a rail's DP
# traffic stays under its leaf); the same with servers_per_segment=2 (8 segments of 2 servers,
# each leaf with 2 uplinks: DP traffic crosses the spines, where the failures are); a k=8
# three-tier fat-tree with 200 Gb/s fabric links under 400 Gb/s NICs (2:1).
# Usage: bench/faults.sh            (flow backend, seeds 1 2 3)
#        BACKENDS="flow packet" SEEDS="1" bench/faults.sh
#        LLMSIM=path/to/llmsim bench/faults.sh   (skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LLMSIM:-}" ]; then
  cargo build --release -q -p llmsim-cli
  bin=${CARGO_TARGET_DIR:-target}/release/llmsim
else
  bin=$LLMSIM
fi
backends=${BACKENDS:-flow}
seeds=${SEEDS:-"1 2 3"}
tmp=$(mktemp -d)
echo "| fabric | backend | cables down | seed | iteration (s) | vs none | exposed comm (ms) | exposed DP (ms) | transfers done | wall (s) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"
for fabric in "rail 1 segment" "rail 8 segments" "fat-tree 2:1"; do
  extra=()
  [ "$fabric" = "rail 8 segments" ] && extra=(--set cluster.topology.servers_per_segment=2)
  [ "$fabric" = "fat-tree 2:1" ] && extra=(--set "cluster.topology={kind: fat-tree, edge_agg: {bandwidth: 200Gbps}, agg_core: {bandwidth: 200Gbps}}")
  for backend in $backends; do
    base=""
    for n in 0 1 4 16; do
      for seed in $seeds; do
        [ "$n" = 0 ] && [ "$seed" != "$(echo $seeds | cut -d' ' -f1)" ] && continue
        faults=()
        [ "$n" != 0 ] && faults=(--set "faults=[{links: {random: $n, seed: $seed}, action: down}]")
        start=$(date +%s.%N)
        if ! "$bin" run examples/gpt3-13b-128gpu.yaml --backend "$backend" "${extra[@]}" "${faults[@]}" --json > "$tmp/r.json" 2> "$tmp/err"; then
          # Failures that cut a switch off: the run refuses with a routing error.
          printf "| %s | %s | %s | %s | unroutable: %s |\n" "$fabric" "$backend" "$n" "$seed" "$(grep -o 'no route from [0-9]* to [0-9]*' "$tmp/err" | head -1)"
          continue
        fi
        wall=$(echo "$(date +%s.%N) - $start" | bc -l)
        row=$(python3 - "$tmp/r.json" "$base" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m, net = d["mean"], d["net"]
t = d["iteration_time_s"]
exposed = sum(m[k] for k in ("exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_pp_s", "exposed_dp_s"))
base = float(sys.argv[2]) if sys.argv[2] else t
print(f"{t:.4f} | {t / base:.4f} | {exposed * 1e3:.1f} | {m['exposed_dp_s'] * 1e3:.2f} | {net['completed']}/{net['submitted']}")
PY
)
        [ "$n" = 0 ] && base=$(python3 -c "import json; print(json.load(open('$tmp/r.json'))['iteration_time_s'])")
        printf "| %s | %s | %s | %s | %s | %.2f |\n" "$fabric" "$backend" "$n" "$([ "$n" = 0 ] && echo - || echo "$seed")" "$row" "$wall"
      done
    done
  done
done
# Named faults on the 2:1 fat-tree, on the uplinks of edge switch leaf0 (GPUs 0-3): cables down
# from the start and half way through the iteration (the flow backend then moves the flows on
# them), and all four uplinks degraded to a quarter.
fat=(--set "cluster.topology={kind: fat-tree, edge_agg: {bandwidth: 200Gbps}, agg_core: {bandwidth: 200Gbps}}")
echo
echo "| fabric | backend | fault | iteration (s) | vs none | exposed comm (ms) | exposed DP (ms) | transfers done |"
echo "|---|---|---|---:|---:|---:|---:|---|"
"$bin" run examples/gpt3-13b-128gpu.yaml --backend flow "${fat[@]}" --json > "$tmp/base.json" 2> /dev/null
base=$(python3 -c "import json; print(json.load(open('$tmp/base.json'))['iteration_time_s'])")
up3() { echo "{link: leaf0-spine0, action: down$1}, {link: leaf0-spine1, action: down$1}, {link: leaf0-spine2, action: down$1}"; }
deg() { echo "{link: leaf0->spine0, bandwidth: 50Gbps$1}, {link: leaf0->spine1, bandwidth: 50Gbps$1}, {link: leaf0->spine2, bandwidth: 50Gbps$1}, {link: leaf0->spine3, bandwidth: 50Gbps$1}"; }
cases=(
  "3 of leaf0's 4 uplink cables down from the start|$(up3 "")"
  "3 of leaf0's 4 uplink cables down at 1.5 s|$(up3 ", at: 1500ms")"
  "leaf0's 4 uplinks at 50 Gb/s from the start|$(deg "")"
  "leaf0's 4 uplinks at 50 Gb/s from 2 s|$(deg ", at: 2s")"
)
for c in "${cases[@]}"; do
  label=${c%%|*}
  f=${c#*|}
  "$bin" run examples/gpt3-13b-128gpu.yaml --backend flow "${fat[@]}" --set "faults=[$f]" --json > "$tmp/r.json" 2> /dev/null
  row=$(python3 - "$tmp/r.json" "$base" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m, net = d["mean"], d["net"]
t = d["iteration_time_s"]
exposed = sum(m[k] for k in ("exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_pp_s", "exposed_dp_s"))
print(f"{t:.4f} | {t / float(sys.argv[2]):.4f} | {exposed * 1e3:.1f} | {m['exposed_dp_s'] * 1e3:.2f} | {net['completed']}/{net['submitted']}")
PY
)
  echo "| fat-tree 2:1 | flow | $label | $row |"
done
rm -rf "$tmp"
