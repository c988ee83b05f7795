#!/usr/bin/env bash
# One training iteration of the ASTRA-sim + ns-3 DLRM study's model on its flat system
# (bench/tcp-dlrm-flat100.yaml: 128 V100s, one 100 Gb/s NIC each on one switch, DBT all-reduce,
# a 1 GiB switch buffer) over TCP on a lossy fabric vs RoCE on a lossless one, and the study's
# DLRM experiments on it: 2 (injection latency), 3 (switch buffer) and 4 (chunks and chunks in
# flight). Prints and appends one row per run: iteration time, compute, exposed communication
# (the study's Figs 13-16 ratio is exposed / compute), drops, RTOs.
# Usage: bench/tcp_dlrm_iter.sh [base|exp2|exp2c|exp3|exp4|exp4c|all] [out.csv]   (default base,
# bench/tcp-dlrm-iter-out.csv). LLMSIM=path/to/llmsim runs that binary instead of building.
# NICS (default "100Gbps") adds the flat800 system with "100Gbps 800Gbps". SCENARIO (default
# bench/tcp-dlrm-flat100.yaml) picks the system: bench/tcp-dlrm-hier100.yaml is the study's
# hierarchical optimal one. GRAD_BUCKET (default unset: one bucket per MLP) sets
# dlrm.grad_bucket_size; 1 gives the study's per-layer all-reduces. ITERATIONS (default 1) sets
# dlrm.iterations (the study runs 2) and SCHED (fifo|lifo, default fifo) dlrm.scheduling_policy.
# With several iterations the row's iteration, compute and exposed times are the run's totals
# over N (the study's per-iteration figures are its two-iteration sums halved; total_us is the
# whole run). All of these are in the CSV rows; a CSV with other columns (an earlier
# version's, as bench/tcp-dlrm-iter.csv) is refused: give a new file.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-base}
csv=${2:-bench/tcp-dlrm-iter-out.csv}
source bench/lib.sh
scenario=${SCENARIO:-bench/tcp-dlrm-flat100.yaml}
header="scenario,grad_bucket,experiment,nic,transport,buffer,injection_latency,chunks,in_flight,iteration_us,compute_us,exposed_comm_us,exposed_over_compute,drops,rtos,fast_retx,events,wall_s,iterations,sched,total_us"
[[ -f $csv ]] || echo "$header" > "$csv"
# Rows go only under this script's own columns (the CSVs of earlier versions have others).
[[ $(head -1 "$csv") == "$header" ]] || { echo "$csv has other columns than this script writes; give a new file" >&2; exit 1; }
printf "%-5s %-7s %-5s %-6s %6s %6s %6s %12s %10s %10s %7s %8s %6s %7s\n" exp nic proto buffer inj chunks inflt "iter us" "compute" "exposed" "exp/cmp" drops RTOs "wall s"
# one EXP NIC TRANSPORT BUFFER INJ CHUNKS IN_FLIGHT ("-": not given)
one() {
  local exp=$1 nic=$2 tr=$3 buf=$4 inj=$5 chunks=$6 infl=$7
  local sets=(--set "network.transport=$tr" --set "network.switch_buffer=$buf"
    --set "cluster.topology.nic.bandwidth=$nic")
  [[ $tr != tcp ]] && sets+=(--set "network.tcp=null")
  [[ $inj != - ]] && sets+=(--set "collectives.injection_latency=$inj")
  [[ $chunks != - ]] && sets+=(--set "collectives.chunks=$chunks")
  [[ $infl != - ]] && sets+=(--set "collectives.chunks_in_flight=$infl")
  [[ -n ${A2A_CHUNKS:-} ]] && sets+=(--set "collectives.all_to_all_chunks=$A2A_CHUNKS")
  [[ -n ${GRAD_BUCKET:-} ]] && sets+=(--set "dlrm.grad_bucket_size=$GRAD_BUCKET")
  [[ -n ${ITERATIONS:-} ]] && sets+=(--set "dlrm.iterations=$ITERATIONS")
  [[ -n ${SCHED:-} ]] && sets+=(--set "dlrm.scheduling_policy=$SCHED")
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" run "$scenario" "${sets[@]}" --out "$tmp/o" > "$tmp/log" 2>&1 || { cat "$tmp/log"; return 1; }
  t1=$(date +%s.%N)
  python3 - "$tmp/o/summary.json" "$csv" "$t0" "$t1" "$(basename "$scenario" .yaml)" "${GRAD_BUCKET:--}" "${SCHED:-fifo}" "$@" <<'PY'
import json, sys
s, csv, t0, t1, scen, gb, sched, exp, nic, tr, buf, inj, chunks, infl = sys.argv[1:]
j = json.load(open(s))["report"]
m, n = j["mean"], j["net"]
keys = ("exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_dp_s", "exposed_pp_s")
iters = j.get("iterations", 1)
if iters == 1:
    comp = m["compute_s"] * 1e6
    exposed = sum(m[k] for k in keys) * 1e6
    it = total = j["iteration_time_s"] * 1e6
else:
    # mean: iterations 2..N; first_iteration: iteration 1. Per iteration: the run's sums over N.
    f = j["first_iteration"]
    comp = (f["compute_s"] + (iters - 1) * m["compute_s"]) * 1e6 / iters
    exposed = (sum(f[k] for k in keys) + (iters - 1) * sum(m[k] for k in keys)) * 1e6 / iters
    total = sum(j["iteration_times_s"]) * 1e6
    it = total / iters
row = [scen, gb, exp, nic, tr, buf, inj, chunks, infl, f"{it:.1f}", f"{comp:.1f}", f"{exposed:.1f}", f"{exposed / comp:.3f}", n["drops"], n["tcp_rtos"],
       n["tcp_fast_retransmits"], n["packet_events"], f"{float(t1) - float(t0):.1f}", iters, sched, f"{total:.1f}"]
open(csv, "a").write(",".join(map(str, row)) + "\n")
print(f"{exp:<5} {nic:<7} {tr:<5} {buf:<6} {inj:>6} {chunks:>6} {infl:>6} {it:>12.1f} {comp:>10.1f} {exposed:>10.1f} {exposed / comp:>7.3f} {row[13]:>8} {row[14]:>6} {row[17]:>7}")
PY
}
for nic in ${NICS:-100Gbps}; do
  if [[ $which == base || $which == all ]]; then
    one base "$nic" tcp 1GiB - - -
    one base "$nic" roce 1GiB - - -
  fi
  if [[ $which == exp2 || $which == all ]]; then
    for inj in 10ns 1us 10us 100us; do one exp2 "$nic" tcp 1GiB "$inj" - -; done
  fi
  if [[ $which == exp2c || $which == all ]]; then
    # The study's 1,024 chunks and 64 slots on the all-reduces; the all-to-alls in A2A_CHUNKS
    # pieces per pair (default 1: their 65.5 KB pairs would be 16.6 M transfers at 1,024).
    # EXP2C_IN_FLIGHT (default 64) sets the slots per rank and tree.
    for inj in 10ns 100us; do A2A_CHUNKS=${A2A_CHUNKS:-1} one exp2c "$nic" tcp 1GiB "$inj" 1024 "${EXP2C_IN_FLIGHT:-64}"; done
  fi
  if [[ $which == exp4c || $which == all ]]; then
    # Experiment 4's 1,024 chunks on the all-reduces (the all-to-alls as in exp2c).
    for f in 64 128; do A2A_CHUNKS=${A2A_CHUNKS:-1} one exp4c "$nic" tcp 1GiB - 1024 "$f"; done
  fi
  if [[ $which == exp3 || $which == all ]]; then
    for buf in 64MiB 128MiB 1GiB; do one exp3 "$nic" tcp "$buf" - - -; done
  fi
  if [[ $which == exp4 || $which == all ]]; then
    # The study's 1024 chunks would split each 512 B all-to-all pair into 1024 transfers (16.6 M
    # per all-to-all): too many to simulate here. With 32 chunks, 64 and 128 in flight are the
    # same (every chunk at once).
    for cf in "32 64" "128 64" "128 128"; do
      read -r c f <<< "$cf"
      one exp4 "$nic" tcp 1GiB - "$c" "$f"
    done
  fi
done
