#!/usr/bin/env bash
# Issue 36 benchmark: the batch engine on 10,000 flow-level experiments (bench/sweep-10000.yaml:
# GPT-3 13B on 128 GPUs, a grid over GPU type x NCCL algorithm x NIC bandwidth x NIC latency).
#   1. Paired, on a random sample of the grid (`samples` seeded draws of the grid's axes, each
#      with the 5 NCCL settings of the spec's zip):
#      `llmsim sweep --engine threads` (today's thread pool) then `--engine batch`, each
#      `reps` times; prints every wall time and the median ratio.
#   2. The whole 10,000-point grid with `llmsim sweep` (auto: it picks the batch engine).
# The thread pool is not run on all 10,000 (~25 min on 2 cores): its time for them is the
# sample's per-point time x 10,000, an extrapolation, and printed as one.
# Usage: bench/sweep_batch.sh [jobs] [samples] [reps]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
samples=${2:-30}
reps=${3:-3}
cargo build --release -q -p llmsim-cli
bin=${CARGO_TARGET_DIR:-target}/release/llmsim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#base: ../examples/#base: $PWD/examples/#" bench/sweep-10000.yaml > "$tmp/grid.yaml"
# The sample: the grid's axes drawn at random.
python3 - "$tmp/grid.yaml" "$samples" > "$tmp/sample.yaml" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
out, axes = [], False
for l in lines:
    if l.startswith("name:"):
        out.append("name: sweep-10000-sample"); continue
    if l.startswith("grid:"):
        out += ["random:", f"  samples: {sys.argv[2]}", "  seed: 36", "  axes:"]; axes = True; continue
    if l.startswith("zip:"):
        axes = False
    if axes and l.startswith("  "):
        k, v = l.strip().split(": ", 1)
        out.append(f"    {k}: {{ choice: {v} }}"); continue
    out.append(l)
print("\n".join(out))
PY
n=$($bin sweep "$tmp/sample.yaml" --dry-run | head -1 | awk '{ print $3 }')
echo "sample: ${samples} draws of the grid's axes x the 5 NCCL settings = ${n} points"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"
# Wall seconds of a command; its CPU seconds (user + sys, all threads) go to $tmp/cpu. On a
# shared machine the wall time carries the other tenants' load; the CPU time does not (much).
secs() {
  local s; s=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  echo "$(date +%s.%N) - $s" | bc
}
cpu() { awk '{ print $1 + $2 }' "$tmp/cpu"; }
t_threads=(); t_batch=(); c_threads=(); c_batch=()
for r in $(seq "$reps"); do
  rm -rf "$tmp/a" "$tmp/b"
  a=$(secs $bin sweep "$tmp/sample.yaml" --jobs "$jobs" --engine threads --out "$tmp/a"); t_threads+=("$a"); ca=$(cpu); c_threads+=("$ca")
  b=$(secs $bin sweep "$tmp/sample.yaml" --jobs "$jobs" --engine batch --out "$tmp/b"); t_batch+=("$b"); cb=$(cpu); c_batch+=("$cb")
  grep -E "^sweep|^ran|^engine" "$tmp/log" | sed 's/^/    /'
  echo "  rep $r: threads ${a} s wall (${ca} s CPU), batch ${b} s wall (${cb} s CPU), load $(cut -d' ' -f1 /proc/loadavg)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mt=$(median "${t_threads[@]}"); mb=$(median "${t_batch[@]}")
mct=$(median "${c_threads[@]}"); mcb=$(median "${c_batch[@]}")
echo "sample of ${n}: median wall threads ${mt} s, batch ${mb} s, speedup $(echo "scale=2; $mt / $mb" | bc)x"
echo "sample of ${n}: median CPU  threads ${mct} s, batch ${mcb} s, ratio $(echo "scale=2; $mct / $mcb" | bc)x"
# Rows equal: every metric but the wall time, and the report.
python3 - "$tmp/a/results.sqlite" "$tmp/b/results.sqlite" <<'PY'
import sqlite3, sys
def rows(p):
    c = sqlite3.connect(p)
    cols = [r[1] for r in c.execute("pragma table_info(results)")]
    keep = [x for x in cols if x not in ("sim_wall_s",)]
    return {r[0]: r for r in c.execute(f"select key, {', '.join(keep)} from results")}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = sum(1 for k in a if a[k] == b.get(k))
print(f"rows equal (all columns but sim_wall_s): {same} of {len(a)}")
PY
rm -rf "$tmp/full"
f=$(secs $bin sweep "$tmp/grid.yaml" --jobs "$jobs" --out "$tmp/full")
grep -E "^sweep|^ran|^engine" "$tmp/log" | sed 's/^/    /'
cf=$(cpu)
echo "10,000 points, batch engine (auto): ${f} s wall, ${cf} s CPU (${jobs} threads; ~$(echo "scale=1; $cf / $jobs" | bc) s wall on ${jobs} idle cores), load $(cut -d' ' -f1 /proc/loadavg)"
echo "thread pool on 10,000, extrapolated from the sample's medians: $(echo "scale=1; $mt * 10000 / $n" | bc) s wall, $(echo "scale=1; $mct * 10000 / $n" | bc) s CPU"
