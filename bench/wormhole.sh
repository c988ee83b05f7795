#!/usr/bin/env bash
# Wormhole fast-forwarding vs the exact packet engine (`llmsim ns3 run` with and without
# --fast-forward). Workloads: a 16-flow permutation of long flows and a 15-to-1 incast on the
# k=4 fat-tree (100G), and a generated web-search workload on the HPCC repo's 320-host fat.txt
# (30% load, 5 ms, seed 1), each with DCQCN and HPCC. Prints, per run: flows, mean and p99 of
# the per-flow relative FCT error, the speedup in wall time (single core), the fraction of
# events skipped (1 - events_ff / events_exact) and Wormhole's freezes; with --ff-memo, a cold run
# (empty memo database file) and a warm one (the database the cold run saved), with memo hits,
# misses and the database's size. Then the same for `llmsim run --backend packet` scenarios, with
# the worst transfer's error, the iteration-time error and the packet events skipped (from the
# runs' summary.json). Then a sensitivity table over θ and l on the permutation.
# WORMHOLE_SKIP_NS3=1 leaves out the ns-3 workloads (the `llmsim ns3 run` rows and the sensitivity table).
# Usage: [WORMHOLE_FULL=1] [WORMHOLE_SKIP_NS3=1] bench/wormhole.sh [reference_dir] [--no-sensitivity]   (default ../shared/reference/ns3)
set -euo pipefail
cd "$(dirname "$0")/.."
ref=$(cd "${1:-../shared/reference/ns3}" && pwd)
sensitivity=${2:-}
cargo build --release -q -p llmsim-cli
bin=$PWD/target/release/llmsim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/inputs"
cp "$ref/inputs/fat.txt" "$ref/inputs/fattree_k4_16h.txt" "$tmp/inputs/"
# Long-flow permutation (the reference run's pairs, 100 MB each) and a 15-to-1 incast (4 MB each).
awk 'NR==1 {print; next} {$5=100000000; print}' "$ref/inputs/flow_perm16_10MB.txt" > "$tmp/inputs/perm.txt"
{ echo 15; for s in $(seq 1 15); do echo "$s 0 3 100 4000000 2.000000000"; done; } > "$tmp/inputs/incast.txt"
"$bin" ns3 gen --topology "$tmp/inputs/fat.txt" --load 0.3 --duration 0.005 --seed 1 > "$tmp/inputs/websearch.txt"

cfg() { # name cc topology flows
  sed -e "s#^TOPOLOGY_FILE .*#TOPOLOGY_FILE inputs/$3#" -e "s#^FLOW_FILE .*#FLOW_FILE inputs/$4#" \
    "$ref/runs/ft16_perm_$2/config.txt" > "$tmp/$1.txt"
  echo "$tmp/$1.txt"
}

compare() { # label exact_dir ff_dir exact_json ff_json
  python3 - "$@" <<'PY'
import json, sys
label, ed, fd, ej, fj = sys.argv[1:6]
def fcts(d):
    out = {}
    for line in open(f"{d}/fct.txt"):
        s = line.split()
        out[tuple(s[:4])] = int(s[6])
    return out
e, f = fcts(ed), fcts(fd)
errs = sorted(abs(f[k] - e[k]) / e[k] for k in e if k in f)
je, jf = json.load(open(ej)), json.load(open(fj))
n = len(errs)
mean = 100 * sum(errs) / max(n, 1)
p99 = 100 * errs[min(int(0.99 * n), n - 1)] if n else 0.0
ev_e, ev_f = je["events"], jf["events"]
w = jf.get("wormhole", {})
memo = f"{w['memo_hits']:>6} {w['memo_misses']:>6} {w['memo_db_bytes']/1024:>7.0f}" if "memo_entries" in w else f"{'-':>6} {'-':>6} {'-':>7}"
print(f"{label:<30} {len(f):>5}/{len(e):<5} {mean:>9.3f}% {p99:>9.3f}% {je['wall_s']/jf['wall_s']:>8.2f}x {100*(1-ev_f/ev_e):>8.1f}% {w.get('freezes',0):>8} {je['wall_s']:>8.2f} {jf['wall_s']:>8.2f} {memo}")
PY
}

header() {
  printf "%-30s %11s %10s %10s %9s %9s %8s %8s %8s %6s %6s %7s\n" "$1" "flows ff/ex" "mean err" "p99 err" "speedup" "skipped" "freezes" "exact s" "ff s" "hits" "misses" "db KiB"
}

one() { # label config [ff flags...]
  local label=$1 c=$2; shift 2
  [ -d "$tmp/exact_$label" ] || "$bin" ns3 run "$c" --json --out "$tmp/exact_$label" > "$tmp/exact_$label.json"
  "$bin" ns3 run "$c" --json --fast-forward "$@" --out "$tmp/ff_$label" > "$tmp/ff_$label.json"
  compare "$label $*" "$tmp/exact_$label" "$tmp/ff_$label" "$tmp/exact_$label.json" "$tmp/ff_$label.json"
}

# Memo: cold (a new database file), then warm (the file the cold run saved).
memo() { # label config
  rm -f "$tmp/$1.db"
  one "$1" "$2" --ff-memo-db "$tmp/$1.db" | sed "s/--ff-memo-db [^ ]*/memo cold/"
  one "$1" "$2" --ff-memo-db "$tmp/$1.db" | sed "s/--ff-memo-db [^ ]*/memo warm/"
}

echo "fast-forward defaults: θ=5%, l=8, sample every 50us"
header "workload"
[ "${WORMHOLE_SKIP_NS3:-0}" = 1 ] || for cc in dcqcn hp; do
  for w in "perm16_100MB_$cc perm_$cc fattree_k4_16h.txt perm.txt" "incast15_4MB_$cc incast_$cc fattree_k4_16h.txt incast.txt" \
    "fat320_websearch_$cc ws_$cc fat.txt websearch.txt"; do
    set -- $w
    c=$(cfg "$2" $cc "$3" "$4")
    one "$1" "$c"
    memo "$1" "$c"
  done
done

# (c) LLM workloads (GPT-3 13B; Mixtral 8x7B with EP all-to-all) through `llmsim run --backend packet` (shrunk as in the README so the exact
# run takes seconds): per-transfer duration error, iteration-time error, speedup; fast-forward alone, then with memo
# (network.fast_forward.memo_db) cold (new database file) and warm (the file the cold run saved).
timed() { # file command...: runs the command, writes its wall seconds (microsecond clock) to file
  local out=$1 t0=$EPOCHREALTIME; shift
  "$@"
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$EPOCHREALTIME" > "$out"
}
llm() { # label yaml [--set ...]
  local label=$1 y=$2; shift 2
  timed "$tmp/t_exact" "$bin" run "$y" --backend packet "$@" --out "$tmp/llm_exact_$label" > /dev/null
  rm -f "$tmp/$label.db"
  for mode in ff "memo cold" "memo warm"; do
    local knobs='{}'
    [ "$mode" != ff ] && knobs="{memo_db: $tmp/$label.db}"
    timed "$tmp/t_ff" "$bin" run "$y" --backend packet "$@" --set "network.fast_forward=$knobs" --out "$tmp/llm_${mode/ /_}_$label" > /dev/null
    python3 - "$label $mode" "$tmp/llm_exact_$label" "$tmp/llm_${mode/ /_}_$label" "$(cat "$tmp/t_exact")" "$(cat "$tmp/t_ff")" "$tmp/$label.db" <<'PY'
import csv, json, os, sys
label, ed, fd, te, tf, db = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
# Transfer ids are reused once a collective ends, and rows are in start order, which the fast
# modes may shift: pair each transfer with the same occurrence of its (kind, src, dst, bytes).
def durations(d):
    seen, out = {}, {}
    for r in sorted(csv.DictReader(open(f"{d}/flows.csv")), key=lambda r: float(r["start_us"])):
        k = (r["kind"], r["src"], r["dst"], r["bytes"])
        seen[k] = seen.get(k, -1) + 1
        out[k + (seen[k],)] = float(r["duration_us"])
    return out
a, b = durations(ed), durations(fd)
assert a.keys() == b.keys(), f"{label}: the runs moved different transfers"
errs = sorted(abs(b[k] - x) / x for k, x in a.items() if x > 0)
n = len(errs)
rep = lambda d: json.load(open(f"{d}/summary.json"))["report"]
it = lambda d: rep(d)["iteration_time_s"]
ie = 100 * abs(it(fd) - it(ed)) / it(ed)
net = rep(fd)["net"]
skipped = 100 * (1 - net["packet_events"] / rep(ed)["net"]["packet_events"])
memo = f"{net['memo_hits']:>6} {net['memo_misses']:>6} {net['memo_entries']:>7} {os.path.getsize(db)/1024:>7.0f}" if "memo" in label else f"{'-':>6} {'-':>6} {'-':>7} {'-':>7}"
print(f"{label:<38} {n:>5} {100*sum(errs)/n:>9.3f}% {100*errs[min(int(0.99*n), n-1)]:>9.3f}% {100*errs[-1]:>8.2f}% {ie:>9.4f}% {te/tf:>8.2f}x {skipped:>7.1f}% {te:>8.2f} {tf:>8.2f} {memo}")
PY
  done
}
echo
printf "%-38s %5s %10s %10s %9s %10s %9s %8s %8s %8s %6s %6s %7s %7s\n" "llmsim run --backend packet" flows "mean err" "p99 err" "max err" "iter err" speedup skipped "exact s" "ff s" hits misses entries "db KiB"
llm "gpt3-13b_16gpu_1layer_hpcc" examples/gpt3-13b-128gpu.yaml --set network.cc=hpcc --set cluster.gpus=16 \
  --set training.global_batch_size=16 --set 'model={preset: gpt3-13b, num_hidden_layers: 1}'
llm "gpt3-13b_16gpu_1layer_dcqcn" examples/gpt3-13b-128gpu.yaml --set network.cc=dcqcn --set cluster.gpus=16 \
  --set training.global_batch_size=16 --set 'model={preset: gpt3-13b, num_hidden_layers: 1}'
llm "moe-8x7b_64gpu_2layer_hpcc" examples/wormhole-moe-8x7b-64gpu.yaml --set network.cc=hpcc \
  --set 'model={preset: mixtral-8x7b, num_hidden_layers: 2}'
# The issue's own workload, full size: GPT-3 13B on 128 GPUs (examples/wormhole-gpt-13b-128gpu.yaml),
# and the MoE 8x7B / 64-GPU one (EP all-to-all), one iteration; the exact GPT runs take about 2 minutes each. WORMHOLE_FULL=1 to include them.
if [ "${WORMHOLE_FULL:-0}" = 1 ]; then
  llm "gpt3-13b_128gpu_hpcc" examples/wormhole-gpt-13b-128gpu.yaml --set network.cc=hpcc
  llm "gpt3-13b_128gpu_dcqcn" examples/wormhole-gpt-13b-128gpu.yaml --set network.cc=dcqcn
  llm "moe-8x7b_64gpu_hpcc" examples/wormhole-moe-8x7b-64gpu.yaml --set network.cc=hpcc
  llm "moe-8x7b_64gpu_dcqcn" examples/wormhole-moe-8x7b-64gpu.yaml --set network.cc=dcqcn
fi

if [ "$sensitivity" != "--no-sensitivity" ] && [ "${WORMHOLE_SKIP_NS3:-0}" != 1 ]; then
  echo
  echo "sensitivity on perm16_100MB (sample every 50us)"
  for cc in dcqcn hp; do
    header "θ, l ($cc)"
    for l in 4 8 16; do
      for th in 0.01 0.02 0.05 0.10; do
        one "perm16_100MB_$cc" "$tmp/perm_$cc.txt" --ff-theta $th --ff-window $l
      done
    done
  done
fi
