"""Plots of sweep results (matplotlib) and a static HTML report."""

from __future__ import annotations

import argparse
import html
import os
import textwrap
from collections.abc import Sequence
from typing import Any

from ._format import formatters
from ._page import _plt, _png_b64, write_page
from .sweep import load

BREAKDOWN = [
    ("compute_s", "compute", "#4c72b0"),
    ("exposed_tp_s", "exposed TP", "#dd8452"),
    ("exposed_cp_s", "exposed CP", "#937860"),
    ("exposed_ep_s", "exposed EP", "#da8bc3"),
    ("exposed_pp_s", "exposed PP", "#8c8c8c"),
    ("exposed_dp_s", "exposed DP", "#c44e52"),
    ("bubble_s", "pipeline bubble", "#ccb974"),
    ("exposed_offload_s", "activation offload", "#64b5cd"),
    ("exposed_host_s", "host dispatch", "#8172b3"),
    ("idle_s", "idle", "#dddddd"),
]

ALIASES = {"iteration_time": "iteration_time_s", "time": "iteration_time_s", "throughput": "tokens_per_s"}
SHORT = {"micro_batch_size": "mbs", "bandwidth": "nic", "overlap_slowdown": "slowdown", "global_batch_size": "gbs"}
MAXIMIZE = {"tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "model_tflops_per_gpu"}


def _frame(results: Any):
    import pandas as pd

    return results if isinstance(results, pd.DataFrame) else load(results)


def metric(name: str) -> str:
    return ALIASES.get(name, name)


def _sort_key(v: Any) -> Any:
    # Unit strings sort by their number: "100Gbps" < "400Gbps".
    if isinstance(v, str):
        num = "".join(ch for ch in v if ch.isdigit() or ch == ".")
        try:
            return (0, float(num), v)
        except ValueError:
            return (1, 0.0, v)
    return (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))


def plot_axis(results: Any, x: str, y: str = "iteration_time_s", hue: str | None = None, ax: Any = None):
    """``y`` against the axis ``x`` (one line per ``hue`` value); where other axes vary too, each
    point is the best over them (min time, max throughput). Returns the matplotlib Axes."""
    plt = _plt()
    df = _frame(results)
    y = metric(y)
    ok = df[df["status"] == "ok"]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    best = "max" if y in MAXIMIZE else "min"
    groups = [(None, ok)] if hue is None else sorted(ok.groupby(hue), key=lambda g: _sort_key(g[0]))
    varied = [a for a in df.attrs.get("axes", []) if a not in (x, hue) and df[a].nunique() > 1]
    for hv, g in groups:
        agg = g.groupby(x)[y].agg(best)
        xs = sorted(agg.index, key=_sort_key)
        labels = [str(v) for v in xs]
        ax.plot(labels, [agg[v] for v in xs], marker="o", label=None if hv is None else f"{hue}={hv}")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)
    if hue is not None:
        ax.legend(fontsize=8)
    # What each point is goes under the title, wrapped: a long y label was clipped.
    note = "\n".join(textwrap.wrap(f"each point: the {best} over {', '.join(varied)}", 70)) if varied else ""
    ax.set_title(f"{df.attrs.get('name', '')}: {y} vs {x}" + (f"\n{note}" if note else ""), fontsize=10)
    return ax


def plot_breakdown(results: Any, top: int = 10, by: str = "iteration_time_s", ax: Any = None):
    """Stacked bars of where the time goes (mean over ranks: compute, exposed communication by
    kind, bubble, idle) for the ``top`` best points."""
    plt = _plt()
    df = _frame(results)
    ok = df[df["status"] == "ok"].sort_values(by, ascending=by not in MAXIMIZE).head(top)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(ok) + 2.5), 4.5))
    axes = [a for a in df.attrs.get("axes", []) if df[a].nunique() > 1]

    def short(a: str) -> str:
        last = a.split(".")[-1]
        return SHORT.get(last, last)

    labels = ["\n".join(f"{short(a)}={r[a]}" for a in axes) or str(r["idx"]) for _, r in ok.iterrows()]
    bottom = [0.0] * len(ok)
    for col, name, color in BREAKDOWN:
        if col not in ok:  # a store written before the metric existed
            continue
        vals = list(ok[col])
        if not any(v > 0 for v in vals):
            continue
        ax.bar(range(len(ok)), vals, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(ok)))
    ax.set_xticklabels(labels, fontsize=7)
    if bottom:
        ax.set_ylim(0, 1.06 * max(bottom))  # the tallest bar whole, with room above it
    ax.set_ylabel("seconds per iteration (mean over ranks)")
    ax.set_title(f"{df.attrs.get('name', '')}: where the time goes, {len(ok)} best points")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def save(ax: Any, path: str) -> str:
    fig = ax.figure
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def report_html(results_dir: str, out: str | None = None, top: int = 10) -> str:
    """A self-contained HTML page for a sweep: iteration time vs each axis, the breakdown of the
    best points, the best points table, and the points that failed with their error."""
    df = load(results_dir)
    out = out or os.path.join(results_dir, "report.html")
    axes = [a for a in df.attrs.get("axes", []) if df[a].nunique() > 1]
    ok = df[df["status"] == "ok"]
    parts = [
        f"<h1>Sweep {html.escape(df.attrs.get('name', ''))}</h1>",
        f"<p>{len(df)} points: {len(ok)} ok, {len(df) - len(ok)} failed or invalid.</p>",
    ]
    if len(ok) and "iteration_time_s" not in df.columns:
        # A packet-level CC sweep of an ns-3 experiment (llmsim.batch.sweep): flow completion
        # times, no iteration or breakdown.
        for a in axes:
            img = _png_b64(plot_axis(df, a, "mean_fct_us"))
            parts.append(f'<h2>mean FCT vs {html.escape(a)}</h2><img src="data:image/png;base64,{img}">')
        cols = axes + [c for c in ("mean_fct_us", "p99_fct_us", "unfinished", "mean_fct_error") if c in df.columns]
        best = ok.sort_values("mean_fct_us").head(top)[cols]
        parts.append("<h2>Best points (lowest mean FCT)</h2>" + best.to_html(index=False))
    elif len(ok):
        for a in axes:
            parts.append(
                f'<h2>iteration time vs {html.escape(a)}</h2><img src="data:image/png;base64,{_png_b64(plot_axis(df, a))}">'
            )
        parts.append(
            f'<h2>Where the time goes</h2><img src="data:image/png;base64,{_png_b64(plot_breakdown(df, top))}">'
        )
        cols = axes + ["parallel", "iteration_time_s", "tokens_per_s", "mfu", "memory_gib"]
        best = ok.sort_values("iteration_time_s").head(top)[cols]
        parts.append("<h2>Best points</h2>" + best.to_html(index=False, formatters=formatters(best.columns)))
    bad = df[df["status"] != "ok"]
    if len(bad):
        parts.append("<h2>Failed and invalid points</h2>" + bad[axes + ["status", "error"]].to_html(index=False))
    return write_page(out, "llmsim sweep", parts)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="llmsim plot",
        description="Plot a sweep's results (a results directory), or a packet run (an `llmsim ns3 run --out` or `llmsim run --backend packet --out` folder).",
    )
    p.add_argument("results", help="the sweep's --out directory, or a packet run's --out folder")
    p.add_argument("--x", help="axis for the x axis (a dotted key); omitted: write the HTML report only")
    p.add_argument("--y", default="iteration_time_s", help="metric (iteration_time, tokens_per_s, mfu, ...)")
    p.add_argument("--hue", help="axis drawn as one line per value")
    p.add_argument("--breakdown", action="store_true", help="also draw the breakdown of the best points")
    p.add_argument("--out", help="PNG path (default: <results>/<y>-vs-<x>.png)")
    p.add_argument("--html", action="store_true", help="also write <results>/report.html")
    a = p.parse_args(argv)
    from . import netplot

    if netplot.is_packet_run(a.results) or netplot.is_llm_packet_run(a.results):
        if a.x or a.breakdown:
            p.error(f"{a.results} is a packet run: --x and --breakdown are for sweeps (it gets report.html)")
        report = netplot.report_html if netplot.is_packet_run(a.results) else netplot.report_run_html
        print(f"wrote {report(a.results)}")
        return 0
    if a.x:
        y = metric(a.y)
        path = a.out or os.path.join(a.results, f"{y}-vs-{a.x}.png")
        print(f"wrote {save(plot_axis(a.results, a.x, y, a.hue), path)}")
    if a.breakdown:
        print(f"wrote {save(plot_breakdown(a.results), os.path.join(a.results, 'breakdown.png'))}")
    if a.html or not a.x:
        print(f"wrote {report_html(a.results)}")
    return 0
