"""Draws bench/tcp_dlrm_util.sh's runs: mean NIC-uplink utilization over time (left) and the
distribution of TCP's per-transfer mean RTT (right, CDF), one line per run.
Usage: python bench/tcp_dlrm_util.py <dir> <out.png>
"""

import csv
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    d, out = sys.argv[1], sys.argv[2]
    fig, (a, b) = plt.subplots(1, 2, figsize=(16, 5))
    for path in sorted(glob.glob(os.path.join(d, "*.util.csv"))):
        name = os.path.basename(path)[: -len(".util.csv")]
        with open(path) as f:
            rows = list(csv.DictReader(f))
        t = [float(r["bin_start_us"]) / 1000 for r in rows]
        u = [float(r["mean_nic_uplink_utilization"]) * 100 for r in rows]
        (line,) = a.plot(t, u, drawstyle="steps-post", label=name)
        with open(os.path.join(d, f"{name}.rtt.csv")) as f:
            rtt = sorted(float(r["mean_rtt_us"]) for r in csv.DictReader(f))
        if rtt:
            n = len(rtt)
            b.plot(
                rtt,
                [(i + 1) / n for i in range(n)],
                color=line.get_color(),
                label=f"{name} (p50 {rtt[(n - 1) // 2]:.1f}, p99 {rtt[max(0, -(-99 * n // 100) - 1)]:.1f} us)",
            )
    a.set(title="16 MB, TCP: mean NIC-uplink utilization over time", xlabel="ms", ylabel="%", xscale="symlog")
    b.set(
        title="16 MB, TCP: per-transfer mean RTT, CDF over transfers",
        xlabel="us",
        xscale="log",
        ylabel="fraction of transfers",
    )
    for x in (a, b):
        x.grid(True, which="both", alpha=0.3)
        x.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
