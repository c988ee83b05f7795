"""Batch packet engine (llmsim.batch) against the exact engine, point by point.

For each ns-3 experiment given, 100 CC parameter points (a grid, below) run in one batch on JAX's
default device, and one by one on the exact event-driven engine (`llmsim ns3 run`, the release
binary). Prints throughput (experiments per second) of both and, per point, the batch's mean and
p99 FCT error against the exact engine. Run by bench/batch_cpu.sh and bench/batch_gpu.sh.

    python bench/batch_packet.py --llmsim target/release/llmsim CONFIG.txt [CONFIG.txt ...]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from llmsim import batch
from llmsim.batch import engine


def grid(cc: str) -> list[dict[str, float]]:
    """100 points: DCQCN over AI rate x ECN kmin/kmax x pmax; HPCC over eta x AI rate."""
    if cc == "dcqcn":
        ai = [5e6, 10e6, 20e6, 40e6, 80e6]
        kmin_kmax = [(100e3, 400e3), (200e3, 800e3), (400e3, 1600e3), (800e3, 3200e3), (1600e3, 6400e3)]
        pmax = [0.05, 0.1, 0.2, 0.5]
        return [
            {"rate_ai_bps": a, "kmin_bytes": k[0], "kmax_bytes": k[1], "pmax": p}
            for a, k, p in itertools.product(ai, kmin_kmax, pmax)
        ]
    eta = [0.80, 0.85, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99]
    ai = [10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6, 300e6, 500e6]
    return [{"u_target": u, "rate_ai_bps": a} for u, a in itertools.product(eta, ai)]


def exact(llmsim: str, cfg: Path, point: dict[str, float], work: Path) -> tuple[np.ndarray, float]:
    topo, flows = batch.input_files(cfg)
    p = work / "config.txt"
    p.write_text(batch.config_text(cfg.read_text(), point, topo, flows))
    out = work / "out"
    t = time.perf_counter()
    subprocess.run([llmsim, "ns3", "run", str(p), "--out", str(out)], check=True, capture_output=True)
    wall = time.perf_counter() - t
    fct = np.full(len(batch.load_ns3(p).flow_size_bytes), np.nan)
    with open(out / "flows.csv") as f:
        for row in csv.DictReader(f):
            fct[int(row["flow"])] = float(row["fct_ns"])
    return fct, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", type=Path)
    ap.add_argument("--llmsim", default="target/release/llmsim", help="the exact engine's binary")
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--exact-points", type=int, default=None, help="run the exact engine on the first N points only")
    ap.add_argument("--backend", default=None, help="JAX backend (cpu, gpu); default: JAX's default device")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--runs", type=int, default=3, help="timed batch runs after the first (which compiles); 0: time the first"
    )
    a = ap.parse_args()
    results = []
    for cfg in a.configs:
        inp = batch.load_ns3(cfg)
        points = grid(inp.cc)[: a.points]
        t = time.perf_counter()
        first = batch.run_batch(inp, points, backend=a.backend)
        t_first = time.perf_counter() - t
        runs = [] if a.runs > 0 else [t_first]
        res = first
        for _ in range(a.runs):
            t = time.perf_counter()
            res = batch.run_batch(inp, points, backend=a.backend)
            runs.append(time.perf_counter() - t)
        assert np.array_equal(np.nan_to_num(first.fct_ns), np.nan_to_num(res.fct_ns))
        t_batch = statistics.median(runs)
        n_exact = len(points) if a.exact_points is None else min(a.exact_points, len(points))
        walls, mean_err, p99_err = [], [], []
        # Flows a run left unfinished at the stop time (NaN FCT): counted, and the errors compare
        # only the flows both engines finished, so both means are over the same flows.
        unfinished_batch, unfinished_exact = [], []
        with tempfile.TemporaryDirectory(prefix="llmsim-batch-bench-") as d:
            for i in range(n_exact):
                fct, wall = exact(a.llmsim, cfg, points[i], Path(d))
                walls.append(wall)
                b = res.fct_ns[i]
                unfinished_batch.append(int(np.isnan(b).sum()))
                unfinished_exact.append(int(np.isnan(fct).sum()))
                both = ~np.isnan(b) & ~np.isnan(fct)
                mean_err.append(float(b[both].mean() / fct[both].mean() - 1))
                p99_err.append(float(np.percentile(b[both], 99) / np.percentile(fct[both], 99) - 1))
        abs_mean = np.abs(mean_err)
        r = {
            "config": str(cfg),
            "cc": inp.cc,
            "device": res.device,
            "points": len(points),
            "fifo_cohorts_x_steps": list(engine.FIFO_COHORTS[inp.cc]),
            "flows": inp.num_flows,
            "batch_s_with_compile": round(t_first, 3),
            "batch_s_median": round(t_batch, 3),
            "batch_timed_runs": a.runs if a.runs > 0 else "first run, with compile",
            "batch_end_step": res.steps,
            "batch_windows": res.windows,
            "batch_experiments_per_s": round(len(points) / t_batch, 2),
            "exact_points": n_exact,
            "exact_s_per_point_median": round(statistics.median(walls), 3),
            "exact_experiments_per_s": round(1 / statistics.mean(walls), 2),
            "speedup": round((len(points) / t_batch) * statistics.mean(walls), 2),
            "mean_fct_err_median_abs": round(float(np.median(abs_mean)), 4),
            "mean_fct_err_max_abs": round(float(abs_mean.max()), 4),
            "mean_fct_err_signed_mean": round(float(np.mean(mean_err)), 4),
            "points_within_5pct": int((abs_mean <= 0.05).sum()),
            "p99_fct_err_median_abs": round(float(np.median(np.abs(p99_err))), 4),
            "p99_fct_err_max_abs": round(float(np.max(np.abs(p99_err))), 4),
            "unfinished_flows_batch_max": max(unfinished_batch),
            "unfinished_flows_exact_max": max(unfinished_exact),
            "points_with_unfinished_flows": sum(1 for x, y in zip(unfinished_batch, unfinished_exact) if x or y),
            "mean_fct_err_per_point": [round(x, 4) for x in mean_err],
        }
        results.append(r)
        print(json.dumps(r), flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
