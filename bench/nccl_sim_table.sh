#!/usr/bin/env bash
# Simulated busbw (flow backend, NCCL's own algorithm/protocol/channel choice) for the
# NCCL model check in bench/nccl-model.md. Usage: bench/nccl_sim_table.sh [path/to/llmsim]
# H100, 8 GPUs per server, 400 Gbps NIC per GPU, non-blocking rail-optimized fabric.
set -euo pipefail
B=${1:-target/release/llmsim}
echo "| collective | GPUs | size | NCCL choice | NCCL model busbw GB/s | llmsim simulated busbw GB/s | simulated as | wall s |"
echo "|---|---|---|---|---|---|---|---|"
for op in all-reduce all-gather reduce-scatter; do
  for g in 8 16 128 1024; do
    for s in 8MB 64MB 512MB 8GB; do
      t0=$(date +%s.%N)
      out=$("$B" collective --op "$op" --size "$s" --gpus "$g" --gpus-per-node 8 --topology rail-fat-tree --nic 400Gbps --backend flow)
      t1=$(date +%s.%N)
      choice=$(grep -Eo '^chosen [A-Za-z]+/[A-Za-z0-9]+' <<<"$out" | cut -d' ' -f2)
      model=$(grep -Eo 'NCCL model predicts: .* busbw [0-9.]+' <<<"$out" | grep -Eo '[0-9.]+$')
      sim=$(grep -Eo '^algbw: .* busbw: [0-9.]+' <<<"$out" | grep -Eo '[0-9.]+$')
      exp=$(grep -Eo '^simulated expansion: [a-z -]+( \([a-z ]+\))?' <<<"$out" | sed 's/simulated expansion: //')
      printf '| %s | %s | %s | %s | %s | %s | %s | %.2f |\n' "$op" "$g" "$s" "$choice" "$model" "$sim" "$exp" "$(echo "$t1 - $t0" | bc)"
    done
  done
done
