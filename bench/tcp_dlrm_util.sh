#!/usr/bin/env bash
# NIC utilization over time and the distribution of TCP's per-transfer RTT for a 16 MB
# all-reduce (the ASTRA-sim + ns-3 DLRM study's Figs 8-10 as time series and distributions):
# flat DBT and A2A (one all-to-all phase) on the 64 MiB and 1 GiB switches, and the
# hierarchical system's hierarchical-tree all-reduce. `llmsim collective --util-bin` writes
# util.csv (per link and bin); this keeps, per run, the mean over the hosts' NIC uplinks per
# bin (bench/tcp-dlrm-util/<run>.util.csv) and each transfer's mean RTT
# (bench/tcp-dlrm-util/<run>.rtt.csv), then draws bench/tcp-dlrm-util.png with
# /work/main/.venv/bin/python (PYTHON overrides it).
# Usage: bench/tcp_dlrm_util.sh   (LLMSIM=path/to/llmsim runs that binary instead of building)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
out=bench/tcp-dlrm-util
mkdir -p "$out"
flat=(--topology flat --gpus 128 --gpus-per-node 1 --nic 100Gbps --nic-latency 500ns)
hier=(--topology flat --gpus 128 --gpus-per-node 8 --gpu V100 --nvlink 1200Gbps --nic 100Gbps --nic-latency 500ns)
one() { # name bin_us buffer args...
  local name=$1 bin=$2 buf=$3; shift 3
  "$bin_path" collective --size 16MB "$@" --backend packet --transport tcp --switch-buffer "$buf" \
    --util-bin "${bin}us" --out "$tmp/$name" > /dev/null
  python3 - "$tmp/$name" "$out/$name" "$bin" <<'PY'
import csv, json, sys
from collections import defaultdict
d, o, binw = sys.argv[1:]
s = json.load(open(f"{d}/summary.json"))
hosts = s["ranks"]
bins = defaultdict(float)
for r in csv.DictReader(open(f"{d}/util.csv")):
    if r["kind"] == "nic" and int(r["src"]) < hosts:
        bins[float(r["bin_start_us"])] += float(r["utilization"])
# Every bin up to the collective's end, idle ones (no packet on any uplink) as 0.
w = float(binw)
with open(f"{o}.util.csv", "w") as f:
    f.write("bin_start_us,mean_nic_uplink_utilization\n")
    for k in range(int(s["time_us"] // w) + 1):
        f.write(f"{k * w:g},{bins.get(round(k * w, 3), 0.0) / hosts:.4f}\n")
with open(f"{o}.rtt.csv", "w") as f:
    f.write("transfer,mean_rtt_us\n")
    for r in csv.DictReader(open(f"{d}/transfers.csv")):
        if r.get("mean_rtt_us"):
            f.write(f"{r['id']},{r['mean_rtt_us']}\n")
n = s["network"]
print(f"{o}: {s['time_us']:.0f} us, RTOs {n['tcp_rtos']}, util {s['nic_utilization']:.3f}, rtt {s['tcp_rtt_us']}")
PY
}
bin_path=$bin
one flat-dbt-64MiB 1000 64MiB "${flat[@]}" --op all-reduce --algo tree
one flat-dbt-1GiB 50 1GiB "${flat[@]}" --op all-reduce --algo tree
one flat-a2a-64MiB 1000 64MiB "${flat[@]}" --op all-to-all
one flat-a2a-1GiB 50 1GiB "${flat[@]}" --op all-to-all
one hier-dbt-64MiB 20 64MiB "${hier[@]}" --op all-reduce --algo hierarchical-tree
"${PYTHON:-/work/main/.venv/bin/python}" bench/tcp_dlrm_util.py "$out" bench/tcp-dlrm-util.png
