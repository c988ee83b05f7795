#!/usr/bin/env bash
# Speed of the packet engine on the HPCC repo's 320-host fabric (inputs/fat.txt: 20 ToRs of
# 16 x 100G hosts, 400G fabric) with a generated web-search workload: Poisson arrivals at 30%
# load for 5 ms, web-search flow sizes (DCTCP paper CDF), seed 1. Prints wall time, events/s
# and peak RSS per CC, and the small ft16 permutation for reference (ns-3: 3.5-4 s there and
# about 4 minutes / 340 MB on the 320-host run, single-threaded, same machine class).
# Usage: bench/ns3_speed.sh [reference_dir] [ccs] [runs]   (default ../shared/reference/ns3 "dcqcn hp" 1)
# With runs > 1 every run is repeated and the row gives the median wall time (min..max after it)
# and the largest peak RSS: the machines are shared, one run is noisy.
# LLMSIM=path/to/llmsim times that binary (e.g. a build of the commit before a change, for paired
# before/after runs) instead of building this checkout; the build honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=$(cd "${1:-../shared/reference/ns3}" && pwd)
ccs=${2:-"dcqcn hp"}
runs=${3:-1}
source bench/lib.sh
mkdir -p "$tmp/inputs"
cp "$ref/inputs/fat.txt" "$tmp/inputs/"
"$bin" ns3 gen --topology "$tmp/inputs/fat.txt" --load 0.3 --duration 0.005 --seed 1 > "$tmp/inputs/websearch.txt"
echo "workload: $(head -1 "$tmp/inputs/websearch.txt") flows, $(awk 'NR>1 {s+=$5} END {printf "%.2f", s/1e9}' "$tmp/inputs/websearch.txt") GB over 5 ms"
printf "%-28s %12s %10s %14s %10s %12s\n" run "events" "wall s" "M events/s" "RSS MB" "flows done"
one() {
  local name=$1 cfg=$2
  rm -f "$tmp"/r*.json "$tmp"/rss
  for i in $(seq "$runs"); do
    out=$( { /usr/bin/time -f "TIME %e %M" "$bin" ns3 run "$cfg" --json > "$tmp/r$i.json"; } 2>&1 )
    echo "$out" | awk '/^TIME/ {print $3}' >> "$tmp/rss"
  done
  python3 - "$tmp" "$name" "$runs" <<'PY'
import json, statistics, sys
tmp, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
js = [json.load(open(f"{tmp}/r{i}.json")) for i in range(1, runs + 1)]
events = {j["events"] for j in js}
assert len(events) == 1, f"runs differ in events: {events}"
ev = events.pop()
walls = sorted(j["wall_s"] for j in js)
wall = statistics.median(walls)
rss = max(int(x) for x in open(f"{tmp}/rss").read().split()) / 1024
spread = f" ({walls[0]:.2f}..{walls[-1]:.2f})" if runs > 1 else ""
j = js[0]
print(f"{name:<28} {ev:>12} {wall:>10.2f} {ev/wall/1e6:>14.1f} {rss:>10.1f} {j['llmsim']['flows']:>6}/{j['flows_total']}{spread}")
PY
}
for cc in $ccs; do
  sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE inputs/fat.txt#" -e "s#^FLOW_FILE .*#FLOW_FILE inputs/websearch.txt#" \
    "$ref/runs/ft16_perm_$cc/config.txt" > "$tmp/ws_$cc.txt"
  one "fat320 websearch $cc" "$tmp/ws_$cc.txt"
done
for cc in $ccs; do
  one "ft16_perm_$cc" "$ref/runs/ft16_perm_$cc/config.txt"
done
