"""Plots of one packet-level run and a static HTML report. An ns-3 experiment's folder (`llmsim
ns3 run --out DIR`): FCT slowdown by flow size (p50/p95/p99 per size bucket, as the HPCC and
DCQCN papers draw it), the FCT distribution, per-port queue lengths, link utilization over time
(with ``--util-bin``) and PFC pause intervals. A training iteration's folder (`llmsim run
--backend packet --out DIR`): transfer durations by kind, queues and PFC pauses."""

from __future__ import annotations

import html
import json
import os
from typing import Any

from ._page import _plt, figure_section, write_page

FILES = ("fct.txt", "flows.csv", "queues.csv")
RUN_FILES = ("summary.json", "queues.csv", "pfc.csv")


def _missing(d: str, files: tuple[str, ...]) -> list[str]:
    return [f for f in files if not os.path.isfile(os.path.join(d, f))]


def is_packet_run(d: str) -> bool:
    """Whether ``d`` holds the output of ``llmsim ns3 run --out``."""
    return not _missing(d, FILES)


def is_llm_packet_run(d: str) -> bool:
    """Whether ``d`` holds the output of ``llmsim run --backend packet --out``."""
    return not _missing(d, RUN_FILES)


def _need(d: str) -> None:
    missing = _missing(d, FILES)
    if missing:
        raise FileNotFoundError(
            f"{d}: not a packet-run folder (missing {', '.join(missing)}; write one with `llmsim ns3 run CONFIG --out {d}`)"
        )


def flows(d: str) -> Any:
    """flows.csv: one row per finished flow (size_bytes, fct_ns, standalone_fct_ns, slowdown, ...)."""
    import pandas as pd

    _need(d)
    return pd.read_csv(os.path.join(d, "flows.csv"))


def _intervals(ev: Any) -> Any:
    """Pause intervals per (node, ifindex) from events (time_ns, node, ifindex, pause); a pause
    never resumed ends at the last event."""
    import pandas as pd

    if ev.empty:
        return pd.DataFrame(columns=["node", "ifindex", "start_ns", "end_ns"])
    end = int(ev["time_ns"].max())
    rows = []
    for (node, ifx), g in ev.sort_values("time_ns", kind="stable").groupby(["node", "ifindex"], sort=True):
        start = None
        for t, p in zip(g["time_ns"], g["pause"]):
            if p and start is None:
                start = int(t)
            elif not p and start is not None:
                rows.append((node, ifx, start, int(t)))
                start = None
        if start is not None:
            rows.append((node, ifx, start, end))
    return pd.DataFrame(rows, columns=["node", "ifindex", "start_ns", "end_ns"])


def pfc_intervals(d: str) -> Any:
    """pfc.txt (ns-3 format: time_ns node node_type ifindex pause) as pause intervals per port:
    node, ifindex, start_ns, end_ns (a pause never resumed ends at the last event)."""
    import pandas as pd

    path = os.path.join(d, "pfc.txt")
    cols = ["time_ns", "node", "node_type", "ifindex", "pause"]
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return _intervals(pd.DataFrame(columns=cols))
    return _intervals(pd.read_csv(path, sep=r"\s+", header=None, names=cols))


def llm_pfc_intervals(d: str) -> Any:
    """pfc.csv of ``llmsim run`` (time_us, node, node_kind, link, pause) as the pause intervals
    of :func:`pfc_intervals` (the paused port's link in the ifindex column)."""
    import pandas as pd

    ev = pd.read_csv(os.path.join(d, "pfc.csv"))
    ev = pd.DataFrame(
        {
            "time_ns": (ev["time_us"] * 1000).round().astype("int64"),
            "node": ev["node"],
            "ifindex": ev["link"],
            "pause": ev["pause"],
        }
    )
    return _intervals(ev)


def slowdown_by_size(d: str, buckets: int = 20) -> Any:
    """Flows sorted by size and cut into ``buckets`` groups of equal count: each group's largest
    size and its p50/p95/p99 slowdown."""
    import numpy as np
    import pandas as pd

    f = flows(d).sort_values("size_bytes", kind="stable")
    rows = []
    for idx in np.array_split(np.arange(len(f)), min(buckets, max(len(f), 1))):
        g = f.iloc[idx]
        if len(g):
            s = g["slowdown"]
            rows.append((int(g["size_bytes"].max()), len(g), s.quantile(0.5), s.quantile(0.95), s.quantile(0.99)))
    return pd.DataFrame(rows, columns=["size_bytes", "flows", "p50", "p95", "p99"])


def plot_slowdown(d: str, buckets: int = 20, ax: Any = None):
    """FCT slowdown (FCT / the flow's standalone FCT) against flow size, p50/p95/p99 per bucket."""
    t = slowdown_by_size(d, buckets)
    ax = ax or _plt().subplots(figsize=(7, 4))[1]
    for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
        ax.plot(t["size_bytes"], t[q], style, label=q)
    ax.set_xscale("log")
    if len(t) and t["p99"].max() > 20:
        ax.set_yscale("log")
    ax.set_xlabel("flow size (bytes, largest of each bucket of equal flow count)")
    ax.set_ylabel("FCT slowdown")
    ax.set_title(f"FCT slowdown by flow size ({int(t['flows'].sum()) if len(t) else 0} flows)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return ax


def plot_fct_cdf(d: str, ax: Any = None):
    """Cumulative distribution of the flows' FCT and of their standalone (idle-network) FCT."""
    import numpy as np

    f = flows(d)
    ax = ax or _plt().subplots(figsize=(7, 4))[1]
    y = np.arange(1, len(f) + 1) / max(len(f), 1)
    ax.plot(np.sort(f["fct_ns"]) / 1e3, y, label="FCT")
    ax.plot(np.sort(f["standalone_fct_ns"]) / 1e3, y, "--", label="standalone FCT")
    ax.set_xscale("log")
    ax.set_xlabel("us")
    ax.set_ylabel("fraction of flows")
    ax.set_title("FCT distribution")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return ax


def plot_queues(d: str, top: int = 20, ax: Any = None):
    """The ``top`` ports by largest queue: p50, p99 and max queued bytes (KB)."""
    import pandas as pd

    q = pd.read_csv(os.path.join(d, "queues.csv"))
    q = q[q["max_bytes"] > 0].sort_values(["max_bytes", "p99_bytes"], ascending=False).head(top)
    q = q.iloc[::-1]
    ax = ax or _plt().subplots(figsize=(7, max(2.5, 0.28 * len(q) + 1)))[1]
    if "ifindex" in q:  # ns-3 experiment: node and interface
        labels = [f"node {n} if {i}" for n, i in zip(q["node"], q["ifindex"])]
    else:  # llmsim run: the link's two ends
        labels = [f"{a}{x} > {b}{y}" for a, x, b, y in zip(q["src_kind"], q["src"], q["dst_kind"], q["dst"])]
    ax.barh(labels, q["max_bytes"] / 1e3, color="#dddddd", label="max")
    ax.barh(labels, q["p99_bytes"] / 1e3, color="#dd8452", label="p99")
    ax.barh(labels, q["p50_bytes"] / 1e3, color="#4c72b0", label="p50")
    ax.set_xlabel("queued KB (egress port)")
    ax.set_title(f"Largest queues (top {len(q)} ports)")
    ax.legend(loc="lower right")
    return ax


def plot_util(d: str, top: int = 32, ax: Any = None):
    """Link utilization over time for the ``top`` busiest links (needs util.csv: `--util-bin`).
    Returns None when the run wrote no util.csv."""
    import pandas as pd

    path = os.path.join(d, "util.csv")
    if not os.path.isfile(path):
        return None
    u = pd.read_csv(path)
    if u.empty:
        return None
    u["port"] = "node " + u["node"].astype(str) + " if " + u["ifindex"].astype(str)
    grid = u.pivot_table(index="port", columns="bin_start_ns", values="utilization", aggfunc="sum", fill_value=0.0)
    busiest = grid.mean(axis=1).sort_values(ascending=False).head(top).index
    grid = grid.loc[busiest]
    t0 = grid.columns.min()
    span_us = (grid.columns.max() - t0 + int(u["bin_ns"].iloc[0])) / 1e3
    ax = ax or _plt().subplots(figsize=(9, max(2.5, 0.22 * len(grid) + 1.5)))[1]
    im = ax.imshow(
        grid.to_numpy(),
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0,
        vmax=1,
        extent=(0, span_us, len(grid) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(grid)))
    ax.set_yticklabels(grid.index, fontsize=7)
    ax.set_xlabel(f"us after the first bin ({t0 / 1e9:.6f} s)")
    ax.set_title(f"Link utilization, {len(grid)} busiest links (bins of {int(u['bin_ns'].iloc[0]) / 1e3:g} us)")
    ax.figure.colorbar(im, ax=ax, label="utilization")
    return ax


def plot_pfc(d: str, top: int = 40, ax: Any = None):
    """PFC pause intervals per port (the ``top`` ports by paused time). None when nothing paused."""
    iv = llm_pfc_intervals(d) if is_llm_packet_run(d) and not is_packet_run(d) else pfc_intervals(d)
    if iv.empty:
        return None
    iv["dur"] = iv["end_ns"] - iv["start_ns"]
    order = iv.groupby(["node", "ifindex"])["dur"].sum().sort_values(ascending=False).head(top).index
    t0 = iv["start_ns"].min()
    ax = ax or _plt().subplots(figsize=(9, max(2.5, 0.22 * len(order) + 1.5)))[1]
    for row, (node, ifx) in enumerate(order):
        g = iv[(iv["node"] == node) & (iv["ifindex"] == ifx)]
        ax.broken_barh(
            list(zip((g["start_ns"] - t0) / 1e3, (g["dur"] / 1e3).clip(lower=0.05))), (row - 0.4, 0.8), color="#c44e52"
        )
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"node {n} if {i}" for n, i in order], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"us after the first pause ({t0 / 1e9:.6f} s)")
    ax.set_title(f"PFC pauses received ({len(iv)} intervals, {len(order)} port{'s' if len(order) > 1 else ''} shown)")
    return ax


def plot_transfers(d: str, ax: Any = None):
    """``llmsim run``'s flows.csv: each transfer's duration against its size, by kind (tp, dp,
    ep, pp, ...), with the line-rate time of the fastest NIC for reference."""
    import pandas as pd

    f = pd.read_csv(os.path.join(d, "flows.csv"))
    ax = ax or _plt().subplots(figsize=(7, 4.5))[1]
    for kind, g in f.groupby("kind", sort=True):
        ax.scatter(g["bytes"], g["duration_us"], s=8, alpha=0.6, label=f"{kind} ({len(g)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("transfer bytes")
    ax.set_ylabel("duration (us)")
    ax.set_title(f"Transfers on the network ({len(f)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def _share(part, whole):
    """` (x.y%)` of `part` in `whole`, or nothing when the total is unknown or zero."""
    return f" ({100 * part / whole:.1f}%)" if whole else ""


def report_run_html(d: str, out: str | None = None) -> str:
    """A self-contained HTML page for `llmsim run --backend packet --out DIR`: the iteration,
    the packet counters, transfer durations by kind, the largest queues and PFC pauses."""
    out = out or os.path.join(d, "report.html")
    with open(os.path.join(d, "summary.json"), encoding="utf-8") as fh:
        r = json.load(fh)["report"]
    n = r.get("net", {})
    sk, total = n.get("ff_skipped_bytes", 0), n.get("net_payload_bytes")
    skipped = (
        f"{sk} of {total if total else '?'}{_share(sk, total)}, {n.get('memo_hits', 0)} / {n.get('memo_misses', 0)}"
    )
    facts = [
        ("scenario", r.get("scenario", "")),
        ("iteration time (s)", f"{r.get('iteration_time_s', 0):.6g}"),
        ("parallel, backend", f"{r.get('parallel', '')}, {r.get('backend', '')}"),
        ("transfers", n.get("completed", "")),
        ("packet events", n.get("packet_events", "")),
        (
            "ECN marks, PFC pauses, drops, NACKs",
            f"{n.get('ecn_marks', '')}, {n.get('pfc_pauses', '')}, {n.get('drops', '')}, {n.get('nacks', '')}",
        ),
        (
            "Wormhole: bytes skipped of the flows' payload, memo hits / misses",
            skipped,
        ),
    ]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
    parts = [f"<h1>Packet-level iteration {html.escape(str(r.get('scenario', d)))}</h1>", f"<table>{rows}</table>"]
    transfers = plot_transfers(d) if os.path.isfile(os.path.join(d, "flows.csv")) else None
    parts += [
        figure_section("Transfers", transfers, "no flows.csv (output.flows is off)"),
        figure_section("Queues", plot_queues(d), "no port queued anything"),
        figure_section("PFC pauses", plot_pfc(d), "no PFC pause in this run"),
    ]
    return write_page(out, "llmsim packet iteration", parts)


def report_html(d: str, out: str | None = None) -> str:
    """A self-contained HTML page for a packet run: the summary, then every plot that applies."""
    _need(d)
    out = out or os.path.join(d, "report.html")
    s: dict[str, Any] = {}
    if os.path.isfile(os.path.join(d, "summary.json")):
        with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
            s = json.load(f)
    st = s.get("stats", {})
    facts = [
        ("congestion control", s.get("cc", "")),
        ("flows done", f"{s.get('flows_done', '')} of {s.get('flows_total', '')}"),
        (
            "FCT mean / p50 / p99 (us)",
            "/".join(f"{s.get(k, 0) / 1e3:.1f}" for k in ("fct_mean_ns", "fct_p50_ns", "fct_p99_ns")),
        ),
        (
            "slowdown mean / p50 / p99",
            "/".join(f"{s.get(k, 0):.2f}" for k in ("slowdown_mean", "slowdown_p50", "slowdown_p99")),
        ),
        ("PFC pauses / resumes", f"{st.get('pfc_pauses', '')} / {st.get('pfc_resumes', '')}"),
        ("drops (buffer / link errors)", f"{st.get('drops_buffer', '')} / {st.get('drops_error', '')}"),
        ("NACKs, retransmitted bytes", f"{st.get('nacks', '')}, {st.get('retransmitted_bytes', '')}"),
        ("ECN marks", st.get("ecn_marks", "")),
        ("events, wall time", f"{st.get('events', '')} in {s.get('wall_s', 0):.3f} s"),
    ]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
    parts = [
        f"<h1>Packet run {html.escape(str(s.get('config', d)))}</h1>",
        f"<table>{rows}</table>",
    ]
    parts += [
        figure_section("FCT slowdown by flow size", plot_slowdown(d), "no flow finished"),
        figure_section("FCT distribution", plot_fct_cdf(d), "no flow finished"),
        figure_section("Queues", plot_queues(d), "no port queued anything"),
        figure_section("Link utilization", plot_util(d), "no util.csv (run with --util-bin 10us)"),
        figure_section("PFC pauses", plot_pfc(d), "no PFC pause in this run"),
    ]
    return write_page(out, "llmsim packet run", parts)
