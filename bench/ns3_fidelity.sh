#!/usr/bin/env bash
# Fidelity of the packet engine against the ns-3 RDMA model (HPCC code base): runs every
# reference scenario under ../shared/reference/ns3/runs with its own config.txt, and prints per
# run llmsim vs ns-3: mean / p50 / p99 FCT, mean slowdown, PFC pauses, and whether fct.txt is
# byte-identical. ECN marks are drawn from ns-3's own random streams (MRG32k3a, one fresh stream
# per mark and per PFC frame) with ns-3's stream counter at STREAMS when the flows start (218 for
# the reference runs' k=4 fat-tree, found by search on the DCQCN incast). DCQCN, whose marks are
# random (pmax 0.2), is also run with llmsim's own seeded stream over SEEDS seeds (min..max of
# the mean-FCT error): what to expect where ns-3's counter is unknown.
# Usage: bench/ns3_fidelity.sh [reference_dir] [seeds] [streams]   (default ../shared/reference/ns3, 20, 218)
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:-../shared/reference/ns3}
seeds=${2:-20}
streams=${3:-218}
cargo build --release -q -p llmsim-cli
bin=target/release/llmsim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-20s %23s %23s %23s %15s %9s %5s %s\n" run "mean FCT ns (err)" "p50 FCT ns (err)" "p99 FCT ns (err)" "mean SD" "PFC" "same" "wall"
for dir in "$ref"/runs/*/; do
  run=$(basename "$dir")
  "$bin" ns3 run "$dir/config.txt" --ns3-streams "$streams" --reference "$dir" --out "$tmp/$run" --json > "$tmp/$run.json"
  extra=""
  if [[ $run == *dcqcn* ]]; then
    for s in $(seq 1 "$seeds"); do
      "$bin" ns3 run "$dir/config.txt" --seed "$s" --reference "$dir" --json > "$tmp/$run.seed$s.json"
    done
    extra=$(python3 - "$tmp" "$run" "$seeds" <<'EOF'
import json, sys
tmp, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
e = []; e99 = []
for s in range(1, n + 1):
    j = json.load(open(f"{tmp}/{run}.seed{s}.json"))
    e.append(100 * (j["llmsim"]["fct_mean_ns"] / j["ns3"]["fct_mean_ns"] - 1))
    e99.append(100 * (j["llmsim"]["fct_p99_ns"] / j["ns3"]["fct_p99_ns"] - 1))
m = sum(e) / n
print(f"  own RNG, seeds 1-{n}: mean-FCT err {min(e):+.1f}..{max(e):+.1f}% (avg {m:+.1f}%), p99 err {min(e99):+.1f}..{max(e99):+.1f}%")
EOF
)
  fi
  python3 - "$tmp/$run.json" "$run" "$extra" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); run = sys.argv[2]; extra = sys.argv[3]
a, b = j["llmsim"], j["ns3"]
def col(k, fmt="{:.0f}"):
    x, y = a[k], b[k]
    err = 100 * (x / y - 1) if y else 0.0
    return f"{fmt.format(x)}/{fmt.format(y)} ({err:+.2f}%)"
same = "yes" if j.get("fct_identical") else "no"
print(f"{run:<20} {col('fct_mean_ns'):>23} {col('fct_p50_ns'):>23} {col('fct_p99_ns'):>23} {a['slowdown_mean']:.2f}/{b['slowdown_mean']:.2f}".ljust(113)
      + f" {a['pfc_pauses']:>3}/{b['pfc_pauses']:<3} {same:>5} {j['wall_s']:.2f}s{extra}")
EOF
done
