#!/usr/bin/env bash
# Cost of `llmsim run` against GPU count (issue 29): wall time, peak RSS, and the memory the run
# estimated for itself before it started, for the analytical and flow backends.
# Workload: GPT-3 175B, TP8 PP8, micro-batch 1, 96 micro-batches per pipeline (global batch
# 96 x DP), on a rail-optimized fat-tree of H100 servers (examples/gpt3-175b-1024gpu.yaml scaled
# with --set). One run per cell (the larger ones take minutes); a run past the time limit is
# killed and shown as "> LIMIT".
# Modes: analytical; flow (network.fold: auto, the default: replicas folded only where it is
# exact, here it falls back to every replica after the first ECMP collision); flow-approx
# (network.fold: approximate: replica 0's programs, every replica's pipeline sends on the
# network, within 3% of the plain run in tests/fold.rs).
# Usage: [MODES="analytical flow flow-approx"] bench/scale.sh [time limit per run in s,
#        default 300] [GPU counts...] (default GPU counts: 1024 4096 16384 65536 131072)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-300}
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1024 4096 16384 65536 131072)
cargo build --release -q -p llmsim-cli
bin=${CARGO_TARGET_DIR:-target}/release/llmsim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-8s %-11s %9s %12s %14s %9s %12s %12s %10s\n" GPUs backend "wall s" "peak RSS MiB" "estimate MiB" "est/RSS" "prog. nodes" "transfers" "iter s"
modes=(${MODES:-analytical flow flow-approx})
for gpus in "${sizes[@]}"; do
  for backend in "${modes[@]}"; do
    dp=$((gpus / 64))
    extra=()
    b=$backend
    if [ "$backend" = flow-approx ]; then b=flow; extra=(--set network.fold=approximate); fi
    set +e
    /usr/bin/time -f "TIME %e %M" -o "$tmp/time" timeout "$limit" "$bin" run examples/gpt3-175b-1024gpu.yaml \
      --backend "$b" --set "cluster.gpus=$gpus" --set "training.global_batch_size=$((dp * 96))" "${extra[@]}" \
      --ignore-memory-estimate >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    wall=$(awk '/^TIME/ {print $2}' "$tmp/time")
    rss=$(awk '/^TIME/ {printf "%.0f", $3 / 1024}' "$tmp/time")  # KiB -> MiB
    est=$(sed -n 's/.*: about \([0-9]*\) MiB and.*/\1/p' "$tmp/err")
    nodes=$(sed -n 's/.* \([0-9]*\) program nodes; simulated.*/\1/p' "$tmp/out")
    transfers=$(sed -n 's/.* \([0-9]*\) transfers, .*program nodes; simulated.*/\1/p' "$tmp/out")
    iter=$(awk '/iteration time/ {print $3}' "$tmp/out")
    if [ "$rc" -ne 0 ]; then
      wall="> $limit"; est="-"; nodes="-"; transfers="-"; iter="-"
      [ "$rc" -ne 124 ] && wall="exit $rc"
    fi
    ratio=$([ "$est" != "-" ] && [ -n "$est" ] && awk -v e="$est" -v r="$rss" 'BEGIN {printf "%.2f", e / r}' || echo "-")
    printf "%-8s %-11s %9s %12s %14s %9s %12s %12s %10s\n" "$gpus" "$backend" "$wall" "$rss" "${est:--}" "$ratio" "${nodes:--}" "${transfers:--}" "${iter:--}"
  done
done
