#!/usr/bin/env bash
# Engine speed under TCP vs RoCE, and RoCE before/after the transport seam.
# 1. TCP vs RoCE events/s: one double-binary-tree all-reduce of 8 MB on 128 hosts under one
#    100 Gb/s switch with a 1 GiB buffer (no drops under either transport, so both move the
#    same bytes), `llmsim collective --backend packet --transport {tcp,roce}`; events from its
#    summary.json, wall time of the whole command (topology and plan included).
# 2. RoCE before/after: `llmsim ns3 run` of the ft16 permutation reference runs (dcqcn, hp) with
#    BEFORE (a build of the commit before the seam) and this build.
# Runs are interleaved, `runs` times each (default 5); rows give the median wall time and
# events/s with min..max. Usage: BEFORE=path/to/old/llmsim bench/tcp_speed.sh [runs] [reference_dir]
# LLMSIM=path/to/llmsim times that binary instead of building this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
ref=$(cd "${2:-../shared/reference/ns3}" && pwd)
source bench/lib.sh
topo=(--topology flat --gpus 128 --gpus-per-node 1 --nic 100Gbps --nic-latency 500ns)
coll() {
  local tr=$1 i=$2 t0 t1
  t0=$(date +%s.%N)
  "$bin" collective --op all-reduce --algo tree --size 8MB "${topo[@]}" --backend packet --transport "$tr" \
    --switch-buffer 1GiB --out "$tmp/$tr$i" > /dev/null
  t1=$(date +%s.%N)
  python3 -c "import json,sys; n=json.load(open('$tmp/$tr$i/summary.json'))['network']; print(n['packet_events'], n['drops'], $t1-$t0)" >> "$tmp/$tr.txt"
}
for i in $(seq "$runs"); do
  coll roce "$i"
  coll tcp "$i"
done
nsrun() {
  local name=$1 b=$2 cfg=$3
  "$b" ns3 run "$cfg" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print(j['events'], 0, j['wall_s'])" >> "$tmp/$name.txt"
}
rows=(roce tcp)
if [[ -n ${BEFORE:-} ]]; then
  before=$(realpath "$BEFORE")
  for cc in dcqcn hp; do
    for i in $(seq "$runs"); do
      nsrun "before_$cc" "$before" "$ref/runs/ft16_perm_$cc/config.txt"
      nsrun "after_$cc" "$bin" "$ref/runs/ft16_perm_$cc/config.txt"
    done
    rows+=("before_$cc" "after_$cc")
  done
fi
printf "%-14s %12s %8s %18s %22s\n" run events drops "wall s (min..max)" "M events/s (min..max)"
for r in "${rows[@]}"; do
  python3 - "$tmp/$r.txt" "$r" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
ev = {int(r[0]) for r in rows}
assert len(ev) == 1, f"runs differ in events: {ev}"
ev = ev.pop()
walls = sorted(float(r[2]) for r in rows)
w = statistics.median(walls)
print(f"{sys.argv[2]:<14} {ev:>12} {rows[0][1]:>8} {w:>7.2f} ({walls[0]:.2f}..{walls[-1]:.2f}) {ev/w/1e6:>8.2f} ({ev/walls[-1]/1e6:.2f}..{ev/walls[0]/1e6:.2f})")
PY
done
