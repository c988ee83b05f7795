#!/usr/bin/env bash
# UET vs RoCE (issue 33), bench/uet.md.
# 1. FCTs, trims and retransmissions on an incast and a permutation with spraying (k = 8
#    fat-trees, 128 hosts): `cargo run --release -p llmsim-net --example uet_bench`.
# 2. Engine speed, UET vs RoCE: `llmsim ns3 run` of the HPCC repo's 320-host fabric (inputs/fat.txt)
#    with the web-search workload of bench/ns3_speed.sh (30% load, 5 ms, seed 1), DCQCN's config,
#    as is (RoCE) and with --transport uet (the same flows and 1000-byte payloads; PFC off,
#    trimming switches). Runs interleaved, `runs` times each; rows give events, the median wall
#    time (min..max) and events/s.
# Usage: bench/uet.sh [runs] [reference_dir]   (default 3 ../shared/reference/ns3)
# LLMSIM=path/to/llmsim times that binary instead of building this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
ref=$(cd "${2:-../shared/reference/ns3}" && pwd)
cargo run --release -q -p llmsim-net --example uet_bench
source bench/lib.sh
mkdir -p "$tmp/inputs"
cp "$ref/inputs/fat.txt" "$tmp/inputs/"
"$bin" ns3 gen --topology "$tmp/inputs/fat.txt" --load 0.3 --duration 0.005 --seed 1 > "$tmp/inputs/websearch.txt"
sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE inputs/fat.txt#" -e "s#^FLOW_FILE .*#FLOW_FILE inputs/websearch.txt#" \
  "$ref/runs/ft16_perm_dcqcn/config.txt" > "$tmp/ws.txt"
for i in $(seq "$runs"); do
  for tr in roce uet; do
    "$bin" ns3 run "$tmp/ws.txt" --transport "$tr" --json > "$tmp/$tr$i.json"
  done
done
printf "\n%-6s %12s %8s %10s %12s %12s %20s %22s\n" run events flows trimmed "FCT mean us" "FCT p99 us" "wall s (min..max)" "M events/s (min..max)"
for tr in roce uet; do
  python3 - "$tmp" "$tr" "$runs" <<'PY'
import json, statistics, sys
tmp, tr, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
js = [json.load(open(f"{tmp}/{tr}{i}.json")) for i in range(1, runs + 1)]
ev = {j["events"] for j in js}
assert len(ev) == 1, f"runs differ in events: {ev}"
ev = ev.pop()
walls = sorted(j["wall_s"] for j in js)
w = statistics.median(walls)
j = js[0]
trimmed = j.get("stats", {}).get("trimmed", "-")
l = j["llmsim"]
print(f"{tr:<6} {ev:>12} {l['flows']:>8} {trimmed!s:>10} {l['fct_mean_ns']/1e3:>12.1f} {l['fct_p99_ns']/1e3:>12.1f} {w:>7.2f} ({walls[0]:.2f}..{walls[-1]:.2f}) {ev/w/1e6:>8.2f} ({ev/walls[-1]/1e6:.2f}..{ev/walls[0]/1e6:.2f})")
PY
done
