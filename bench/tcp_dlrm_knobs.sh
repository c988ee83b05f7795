#!/usr/bin/env bash
# The ASTRA-sim + ns-3 DLRM study's system knobs on one collective (stand-ins for its DLRM
# experiments 2 and 4, seed astrasim-ns3-dlrm.txt section IV.C and IV.E, Table IV):
# - experiment 2, injection latency {10ns, 1us, 10us, 100us} (`--injection-latency`, the
#   scenario's `collectives.injection_latency`);
# - experiment 4, number of chunks {32, 128, 1024} and chunk parallelism {64, 128}
#   (`--chunks`, `--chunks-in-flight`; `collectives.chunks`, `collectives.chunks_in_flight`),
#   against llmsim's own chunking (none given);
# on the study's flat system: 128 NICs of 100 Gb/s (or 800 Gb/s) on one switch, 0.5 us per link,
# TCP (window 0.5 MB, RTO 50 ms), a 1 GiB (or 64 MiB) switch buffer divided among the ports.
# The collectives: a 16 MB double binary tree all-reduce (the study's largest weight matrix is
# 16.2 MB, its flat all-reduce a DBT) and the 8.4 MB per-rank all-to-all of its DLRM's embeddings
# (64 tables of dim 64, fp16, global batch 65536 over 128 GPUs: 65536 x 64 x 2 B per rank).
# Prints and appends one row per run to the CSV: completion time, drops, RTOs, fast retransmits.
# Usage: bench/tcp_dlrm_knobs.sh [exp2|exp4|a2a|all] [out.csv]   (default all, bench/tcp-dlrm-knobs.csv)
# LLMSIM=path/to/llmsim runs that binary instead of building this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
csv=${2:-bench/tcp-dlrm-knobs.csv}
source bench/lib.sh
[[ -f $csv ]] || echo "experiment,op,nic,buffer,transport,size_mb,injection_latency,chunks,in_flight,time_us,transfers,drops,rtos,fast_retx,retx_bytes,events,wall_s" > "$csv"
printf "%-5s %-4s %-7s %-6s %-5s %6s %8s %6s %6s %12s %8s %8s %6s %8s %7s\n" exp op nic buffer proto MB inj chunks inflt "time us" transfers drops RTOs fastrtx "wall s"
# one EXP OP NIC BUF TRANSPORT MB INJ CHUNKS IN_FLIGHT ("-": not given)
one() {
  local exp=$1 op=$2 nic=$3 buf=$4 tr=$5 mb=$6 inj=$7 chunks=$8 infl=$9
  local args=(--topology flat --gpus 128 --gpus-per-node 1 --nic "$nic" --nic-latency 500ns
    --backend packet --transport "$tr" --switch-buffer "$buf" --size "${mb}MB" --out "$tmp/o")
  case $op in
    DBT) args+=(--op all-reduce --algo tree) ;;
    A2A) args+=(--op all-to-all) ;;
  esac
  [[ $inj != - ]] && args+=(--injection-latency "$inj")
  [[ $chunks != - ]] && args+=(--chunks "$chunks")
  [[ $infl != - ]] && args+=(--chunks-in-flight "$infl")
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" collective "${args[@]}" > /dev/null
  t1=$(date +%s.%N)
  python3 - "$tmp/o/summary.json" "$csv" "$t0" "$t1" "$@" <<'PY'
import json, sys
s, csv, t0, t1, exp, op, nic, buf, tr, mb, inj, chunks, infl = sys.argv[1:]
j = json.load(open(s))
n = j["network"]
row = [exp, op, nic, buf, tr, mb, inj, chunks, infl, f"{j['time_us']:.1f}", j["transfers"], n["drops"], n["tcp_rtos"],
       n["tcp_fast_retransmits"], n["retransmitted_bytes"], n["packet_events"], f"{float(t1) - float(t0):.1f}"]
open(csv, "a").write(",".join(map(str, row)) + "\n")
print(f"{exp:<5} {op:<4} {nic:<7} {buf:<6} {tr:<5} {mb:>6} {inj:>8} {chunks:>6} {infl:>6} {j['time_us']:>12.1f} {row[10]:>8} {row[11]:>8} {row[12]:>6} {row[13]:>8} {row[16]:>7}")
PY
}
if [[ $which == exp2 || $which == all ]]; then
  # Injection latency: own chunking, and the study's 1024 chunks with 64 in flight.
  for nic in 100Gbps 800Gbps; do
    for ch in "- -" "1024 64"; do
      read -r c f <<< "$ch"
      for inj in 10ns 1us 10us 100us; do
        one exp2 DBT "$nic" 1GiB tcp 16 "$inj" "$c" "$f"
      done
    done
  done
fi
if [[ $which == exp4 || $which == all ]]; then
  for nic in 100Gbps 800Gbps; do
    one exp4 DBT "$nic" 1GiB tcp 16 - - -
    for c in 32 128 1024; do
      for f in 64 128; do
        one exp4 DBT "$nic" 1GiB tcp 16 - "$c" "$f"
      done
    done
  done
fi
if [[ $which == a2a || $which == all ]]; then
  # Chunking against the all-to-all's first-burst incast on the small (64 MiB) buffer.
  for c in - 16 64; do
    for f in - 1 4; do
      [[ $c == - && $f != - ]] && continue
      one a2a A2A 100Gbps 64MiB tcp 8.4 - "$c" "$f"
    done
  done
fi
