#!/usr/bin/env bash
# Interoperability figures (issue 7): wall time of `llmsim run` on workloads from other tools.
# - SimAI/AICB: the bundled GPT-3 13B / 128-GPU workload file on the flow backend (SimAI's own
#   analytical backend takes 41 s for this workload on this machine, per the issue).
# - Chakra: export examples/gpt3-13b-128gpu.yaml to 128 per-rank traces, read them back, run;
#   the iteration time must equal the native run's.
# Usage: bench/interop.sh [runs]   (default 3; medians)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release -q -p llmsim-cli
bin=target/release/llmsim
simai=examples/interop/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt
cluster=examples/interop/cluster-128xh100.yaml
et=$(mktemp -d)
trap 'rm -rf "$et"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timed() { # prints "wall_s rss_kb" of one run of "$@"; the report goes to /tmp/llmsim-interop.out
  { /usr/bin/time -f "TIME %e %M" "$@" > /tmp/llmsim-interop.out; } 2>&1 | awk '/^TIME/ {print $2, $3}'
}
row() { # name, command...
  local name=$1; shift
  local ts=() rss=0
  for _ in $(seq "$runs"); do
    read -r t m < <(timed "$@")
    ts+=("$t"); [ "$m" -gt "$rss" ] && rss=$m
  done
  local it
  it=$(grep -Eo 'iteration time +[0-9.]+ s' /tmp/llmsim-interop.out | grep -Eo '[0-9.]+' || true)
  [ -n "$it" ] && it="$it s" || it="-"
  printf "| %s | %s s | %d MB | %s |\n" "$name" "$(printf '%s\n' "${ts[@]}" | median)" $((rss / 1024)) "$it"
}
echo "| run | median wall | peak RSS | simulated iteration |"
echo "|---|---|---|---|"
row "SimAI file, GPT-3 13B, 128 H100, flow" "$bin" run --workload "simai:$simai" "$cluster"
row "same, ASTRA-sim network YAML as the cluster" "$bin" run --workload "simai:$simai" examples/interop/astra-network-128npu.yaml
row "Chakra export of examples/gpt3-13b-128gpu.yaml (128 ranks)" "$bin" workload export examples/gpt3-13b-128gpu.yaml --format chakra --out "$et"
echo "| (traces: $(du -sh "$et" | cut -f1)) | | | |"
row "Chakra traces back in, flow" "$bin" run --workload "chakra:$et/gpt3-13b-128gpu" --comm-groups "$et/groups.json" "$cluster"
row "native run of the same scenario, flow" "$bin" run examples/gpt3-13b-128gpu.yaml
echo
echo "SimAI-style summary of the SimAI file on the flow backend:"
"$bin" run --workload "simai:$simai" "$cluster" | sed -n '/SimAI-style summary/,$p'
