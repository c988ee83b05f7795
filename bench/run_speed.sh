#!/usr/bin/env bash
# Speed of `llmsim run` on the bundled examples: median wall time of N runs and peak RSS.
# Targets (issue 3): GPT-3 175B on 1,024 GPUs <= 2 s on the flow backend and <= 0.5 s on the
# analytical one; GPT-3 13B on 128 GPUs <= 1 s on the flow backend.
# Usage: bench/run_speed.sh [runs]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
cargo build --release -q -p llmsim-cli
bin=target/release/llmsim
printf "%-24s %-11s %10s %10s %12s %9s\n" example backend "median s" "min s" "peak RSS MB" "sim iter s"
for case in "gpt3-175b-1024gpu flow" "gpt3-175b-1024gpu analytical" "gpt3-13b-128gpu flow" "gpt3-13b-128gpu analytical"; do
  set -- $case
  times=(); rss=0; iter=""
  for _ in $(seq "$runs"); do
    out=$( { /usr/bin/time -f "TIME %e %M" "$bin" run "examples/$1.yaml" --backend "$2" --json > /tmp/llmsim-speed.json; } 2>&1 )
    t=$(echo "$out" | awk '/^TIME/ {print $2}')
    m=$(echo "$out" | awk '/^TIME/ {print $3}')
    times+=("$t"); (( m > rss )) && rss=$m
    iter=$(python3 -c "import json; print('%.4f' % json.load(open('/tmp/llmsim-speed.json'))['iteration_time_s'])")
  done
  sorted=$(printf "%s\n" "${times[@]}" | sort -g)
  median=$(echo "$sorted" | awk -v n="$runs" 'NR == int((n + 1) / 2) {print}')
  min=$(echo "$sorted" | head -1)
  printf "%-24s %-11s %10s %10s %12.1f %9s\n" "$1" "$2" "$median" "$min" "$(echo "$rss / 1024" | bc -l)" "$iter"
done
