#!/usr/bin/env bash
# A single all-reduce over TCP on a lossy fabric vs the analytical time vs RoCE over a lossless
# one, on the ASTRA-sim + ns-3 DLRM study's single-all-reduce topology (its section IV.A, Figs 7-10):
# 128 NICs on one switch, 100 Gb/s, 0.5 us per link, TCP window 0.5 MB, RTO 50 ms, a switch
# buffer of 64 MiB or 1 GiB divided evenly among the 128 ports (tail drop at the egress queue).
# Algorithms: DBT (llmsim's double binary tree, `--algo tree`) and A2A (each node sends its
# i-th segment to node i, then node i sends the reduced segment to all: two direct all-to-alls
# of D bytes per rank, run here as one all-to-all of D per rank, timed twice; see tcp-dlrm.md).
# Prints one row per (algorithm, buffer, transport, size): completion time, its ratio to the
# study's analytical time 2 D / 100 Gb/s, drops, RTOs, fast retransmits, retransmitted bytes,
# and in the CSV the mean NIC utilization and TCP's RTT statistics (the study's Figs 8-10).
# Usage: bench/tcp_dlrm.sh [sizes_MB] [out.csv]   (default "1 2 4 8 16 32 64", bench/tcp-dlrm.csv)
# LLMSIM=path/to/llmsim runs that binary instead of building this checkout. ALGOS (default
# "A2A DBT"), BUFS (default "64MiB 1GiB") and ROCE (default 1; 0 skips the RoCE rows) narrow the
# sweep; TCP_FLAGS adds flags to the TCP runs (e.g. "--tcp-mss 536 --tcp-initial-cwnd 1").
# SYSTEM=hier runs the study's hierarchical system instead (section III-B, Table III): 16 servers
# of 8 GPUs, each GPU's 100 Gb/s NIC on the one switch, inside a server 1200 Gb/s per GPU (V100
# NVLink) on an NVSwitch; DBT is then the study's hierarchical optimal all-reduce
# (`--algo hierarchical-tree`: local reduce-scatter, DBT per rail, local all-gather) and A2A's
# cross-server pieces go through the destination's rail (PXN, the study's all-to-all
# hierarchical); the analytical time of DBT is then 2 (7/8) D / 1200 Gb/s + 2 (D/8) / 100 Gb/s.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-"1 2 4 8 16 32 64"}
csv=${2:-bench/tcp-dlrm.csv}
source bench/lib.sh
system=${SYSTEM:-flat}
case $system in
  flat) topo=(--topology flat --gpus 128 --gpus-per-node 1 --nic 100Gbps --nic-latency 500ns) ;;
  hier) topo=(--topology flat --gpus 128 --gpus-per-node 8 --gpu V100 --nvlink 1200Gbps --nic 100Gbps --nic-latency 500ns) ;;
  *) echo "SYSTEM: flat | hier" >&2; exit 2 ;;
esac
echo "algo,buffer,transport,size_mb,time_us,analytical_us,ratio,drops,rtos,fast_retx,retx_bytes,pfc_pauses,events,wall_s,nic_util,rtt_mean_us,rtt_p50_us,rtt_p99_us" > "$csv"
printf "%-5s %-6s %-5s %6s %12s %12s %8s %8s %6s %8s %12s %8s\n" algo buffer proto MB "time us" "analyt us" ratio drops RTOs fastrtx "retx bytes" "wall s"
one() {
  local algo=$1 buf=$2 tr=$3 mb=$4
  local args
  case $algo in
    DBT) if [[ $system == hier ]]; then args=(--op all-reduce --algo hierarchical-tree); else args=(--op all-reduce --algo tree); fi ;;
    A2A) args=(--op all-to-all) ;;
  esac
  local t0 t1
  t0=$(date +%s.%N)
  local extra=()
  if [[ $tr == tcp ]]; then
    read -r -a extra <<< "${TCP_FLAGS:-}"
  fi
  "$bin" collective "${args[@]}" --size "${mb}MB" "${topo[@]}" --backend packet --transport "$tr" \
    --switch-buffer "$buf" "${extra[@]}" --out "$tmp/o" > /dev/null
  t1=$(date +%s.%N)
  python3 - "$tmp/o/summary.json" "$algo" "$buf" "$tr" "$mb" "$t0" "$t1" "$csv" "$system" <<'PY'
import json, sys
s, algo, buf, tr, mb, t0, t1, csv, system = sys.argv[1:]
j = json.load(open(s))
n = j["network"]
# A2A all-reduce = reduce-scatter + all-gather, each an all-to-all of D per rank.
phases = 2 if algo == "A2A" else 1
t = j["time_us"] * phases
d = float(mb) * 1e6
analytical = 2 * d * 8 / 100e9 * 1e6
if system == "hier" and algo == "DBT":
    # Hierarchical optimal: reduce-scatter and all-gather of D inside the server at 1200 Gb/s,
    # an all-reduce of D/8 per rail across servers at 100 Gb/s.
    analytical = (2 * 7 / 8 * d * 8 / 1200e9 + 2 * d / 8 * 8 / 100e9) * 1e6
k = phases
row = [algo, buf, tr, mb, f"{t:.1f}", f"{analytical:.1f}", f"{t/analytical:.2f}", n["drops"] * k, n["tcp_rtos"] * k,
       n["tcp_fast_retransmits"] * k, n["retransmitted_bytes"] * k, n["pfc_pauses"] * k, n["packet_events"] * k,
       f"{float(t1) - float(t0):.1f}"]
# The study's Figs 8-10: mean NIC-uplink utilization (every packet on the wire) and TCP's
# per-transfer mean RTT, its mean, p50 and p99 over transfers (empty under RoCE).
rtt = j.get("tcp_rtt_us") or {}
row += [f"{j.get('nic_utilization') or 0:.3f}"] + [f"{rtt[k]:.1f}" if k in rtt else "" for k in ("mean", "p50", "p99")]
open(csv, "a").write(",".join(map(str, row)) + "\n")
print(f"{algo:<5} {buf:<6} {tr:<5} {mb:>6} {t:>12.1f} {analytical:>12.1f} {t/analytical:>8.2f} {row[7]:>8} {row[8]:>6} {row[9]:>8} {row[10]:>12} {row[13]:>8}")
PY
}
for algo in ${ALGOS:-A2A DBT}; do
  for buf in ${BUFS:-64MiB 1GiB}; do
    for mb in $sizes; do
      one "$algo" "$buf" tcp "$mb"
    done
  done
  if [[ ${ROCE:-1} == 1 ]]; then
    for mb in $sizes; do
      one "$algo" 64MiB roce "$mb"
    done
  fi
done
