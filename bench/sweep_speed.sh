#!/usr/bin/env bash
# Issue 6 benchmark: 1,000 flow-level experiments of a 128-GPU scenario (bench/sweep-1000.yaml).
#   A. `llmsim sweep --jobs N`: every experiment in one process (batch runner, shared topology
#      and workloads, results committed to SQLite as each finishes).
#   B. One `llmsim run --json` process per experiment, N at a time (xargs -P N): the usual way.
# Prints both wall times and the speedup. Usage: bench/sweep_speed.sh [jobs] [points]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
points=${2:-1000}
cargo build --release -q -p llmsim-cli
bin=target/release/llmsim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s/samples: 1000/samples: ${points}/; s#base: ../examples/#base: $PWD/examples/#" bench/sweep-1000.yaml > "$tmp/spec.yaml"
$bin sweep "$tmp/spec.yaml" --dry-run | tail -n +2 | awk '{ $1=""; $2=""; print }' > "$tmp/points.txt"
n=$(wc -l < "$tmp/points.txt")
echo "points: $n, jobs: $jobs, machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

start=$(date +%s.%N)
$bin sweep "$tmp/spec.yaml" --jobs "$jobs" --out "$tmp/batch" | grep -E "^ran|^shared"
a=$(echo "$(date +%s.%N) - $start" | bc)
echo "A. one process, batch runner:   ${a} s"

# B: each line "k=v k=v ..." becomes --set k=v ...
start=$(date +%s.%N)
awk '{ s=""; for (i = 1; i <= NF; i++) s = s " --set " $i; print s }' "$tmp/points.txt" |
  xargs -P "$jobs" -I{} sh -c "$bin run $PWD/examples/gpt3-13b-128gpu.yaml {} --json > /dev/null 2>&1 || true"
b=$(echo "$(date +%s.%N) - $start" | bc)
echo "B. one process per experiment:  ${b} s"
echo "speedup A over B: $(echo "scale=2; $b / $a" | bc)x"
