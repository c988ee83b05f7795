"""The ASTRA-sim + ns-3 DLRM study's Figs 7-10 from llmsim's single all-reduce sweeps.

Reads bench/tcp-dlrm.csv (flat, bench/tcp_dlrm.sh) and bench/tcp-dlrm-hier.csv
(SYSTEM=hier bench/tcp_dlrm.sh) and draws, per system, against the collective size:
  Fig 7:  simulated / analytical time;
  Fig 8:  mean NIC-uplink utilization (every packet on the wire) and TCP RTOs;
  Fig 9:  p50 and p99 over transfers of TCP's per-transfer mean RTT;
  Fig 10: the mean of those RTTs and the retransmitted packets (bytes / 1514).
Usage: /work/main/.venv/bin/python bench/tcp_dlrm_figs.py [out.png]  (default bench/tcp-dlrm-figs.png)
"""

import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(path):
    rows = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(r["algo"], r["buffer"], r["transport"])].append(r)
    for v in rows.values():
        v.sort(key=lambda r: float(r["size_mb"]))
    return rows


def num(r, k):
    return float(r[k]) if r.get(k) not in (None, "") else float("nan")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/tcp-dlrm-figs.png"
    systems = [("flat", "bench/tcp-dlrm.csv"), ("hier", "bench/tcp-dlrm-hier.csv")]
    fig, axes = plt.subplots(len(systems), 4, figsize=(22, 5 * len(systems)), squeeze=False)
    for row, (name, path) in enumerate(systems):
        data = load(path)
        a7, a8, a9, a10 = axes[row]
        a8r, a10r = a8.twinx(), a10.twinx()
        for (algo, buf, tr), rs in sorted(data.items()):
            x = [num(r, "size_mb") for r in rs]
            label = f"{algo} {buf} {tr}"
            style = "-" if tr == "tcp" else ":"
            (line,) = a7.plot(x, [num(r, "ratio") for r in rs], style, marker="o", label=label)
            c = line.get_color()
            a8.plot(x, [num(r, "nic_util") * 100 for r in rs], style, marker="o", color=c, label=label)
            if tr == "tcp":
                a8r.plot(x, [num(r, "rtos") for r in rs], "--", marker="x", color=c, alpha=0.6)
                a9.plot(x, [num(r, "rtt_p50_us") for r in rs], "-", marker="o", color=c, label=f"{label} p50")
                a9.plot(x, [num(r, "rtt_p99_us") for r in rs], "--", marker="^", color=c, label=f"{label} p99")
                a10.plot(x, [num(r, "rtt_mean_us") for r in rs], "-", marker="o", color=c, label=label)
                a10r.plot(x, [num(r, "retx_bytes") / 1514 for r in rs], "--", marker="x", color=c, alpha=0.6)
        a7.set(title=f"{name}: time / analytical (Fig 7)", xscale="log", yscale="log", xlabel="MB")
        a8.set(title=f"{name}: NIC utilization % (lines), RTOs (dashed, right) (Fig 8)", xscale="log", xlabel="MB")
        a8r.set(yscale="symlog", ylabel="RTOs")
        a8r.set_ylim(bottom=0)
        a9.set(title=f"{name}: RTT p50 / p99 over transfers, us (Fig 9)", xscale="log", yscale="log", xlabel="MB")
        a10.set(
            title=f"{name}: mean RTT us (lines), retransmitted packets (dashed, right) (Fig 10)",
            xscale="log",
            yscale="log",
            xlabel="MB",
        )
        a10r.set(yscale="symlog", ylabel="retransmitted packets")
        a10r.set_ylim(bottom=0)
        for a in (a7, a8, a9, a10):
            a.grid(True, which="both", alpha=0.3)
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
