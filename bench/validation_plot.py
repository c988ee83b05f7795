"""Draw llmsim's validation against published training runs: one dot per row.

Reads the CSV that `VALIDATION_CSV=rows.csv bench/validation.sh` writes and draws each row's
ratio llmsim / published (right of 1: llmsim predicts a faster run than the real one), the rows
of each set (first, held-out, third, fourth, fifth, sixth) in its own panel, sorted, coloured by GPU, with the 5% and
10% bands and each set's MAPE in its title. Approximate rows are hollow and in no statistic;
rejected rows are listed in red at the left edge, rows llmsim cannot express in grey.

    python bench/validation_plot.py rows.csv bench/validation.png
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

SETS = [
    ("base", "first set"),
    ("new", "held-out set"),
    ("third", "third set (Megatron-Bridge 26.02)"),
    ("fourth", "fourth set (NeMo Automodel)"),
    ("fifth", "fifth set (TorchTitan, BLOOM)"),
    ("sixth", "sixth set (MegaScale's Megatron-LM baseline)"),
    ("seventh", "seventh set (Megatron-Bridge 26.08)"),
    ("eighth", "eighth set (rest of Megatron-Bridge 26.02)"),
    ("ninth", "ninth set (V100, MI355X)"),
    ("tenth", "tenth set (Megatron-Bridge 26.06.01)"),
    ("eleventh", "eleventh set (Megatron-Bridge 26.06, new layouts)"),
    ("twelfth", "twelfth set (Megatron-Bridge 26.04.01, new layouts)"),
]
# Which panel each set of bench/validation.sh goes to; approximate and not-expressible rows are in
# no statistic.
PANEL = {
    "base": "base",
    "new": "new",
    "approx": "new",
    "new-regression": "new",
    "third": "third",
    "third-flex": "third",
    "third-approx": "third",
    "third-nx": "third",
    "fourth": "fourth",
    "fourth-nx": "fourth",
    "fifth": "fifth",
    "fifth-eager": "fifth",
    "fifth-approx": "fifth",
    "sixth": "sixth",
    "sixth-t3": "sixth",
    "sixth-f9": "sixth",
    "seventh": "seventh",
    "seventh-flex": "seventh",
    "seventh-approx": "seventh",
    "seventh-nx": "seventh",
    "eighth": "eighth",
    "eighth-flex": "eighth",
    "eighth-approx": "eighth",
    "eighth-nx": "eighth",
    "ninth": "ninth",
    "tenth-flex": "tenth",
    "tenth-approx": "tenth",
    "tenth-nx": "tenth",
    "tenth-regression": "tenth",
    "eleventh": "eleventh",
    "eleventh-flex": "eleventh",
    "eleventh-approx": "eleventh",
    "eleventh-nx": "eleventh",
    "twelfth": "twelfth",
    "twelfth-flex": "twelfth",
    "twelfth-approx": "twelfth",
    "twelfth-nx": "twelfth",
}


def _kind(group):
    """A group is "<set>" or "<set>-<kind>" (bench/validation.sh); "approx" alone is the first
    sets' approximate rows."""
    return "approx" if group == "approx" else group.partition("-")[2]


# Approximate, not-expressible, eager and release-regression rows are in no statistic.
NO_STATISTIC = {g for g in PANEL if _kind(g) in ("approx", "nx", "eager", "regression")}
NOT_EXPRESSIBLE = {g for g in PANEL if _kind(g) == "nx"}
COLUMNS = ["row", "set", "gpu", "gpus", "parallel", "convention", "published", "llmsim", "ratio", "rejected"]
GPU_COLOURS = {
    "A100": "#4c72b0",
    "H100": "#55a868",
    "H200": "#8172b3",
    "B200": "#dd8452",
    "GB200": "#c44e52",
    "B300": "#937860",
    "GB300": "#da8bc3",
    "V100": "#8c8c8c",
    "MI355X": "#ccb974",
}


class RowsError(ValueError):
    """The CSV is not what bench/validation.sh writes."""


def load(path: Path) -> list[dict[str, str]]:
    """The rows of a validation CSV; a missing column or a bad ratio names the row and field."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise RowsError(
                f"{path}: missing column(s) {', '.join(missing)}; write it with VALIDATION_CSV=... bench/validation.sh"
            )
        rows = list(reader)
    for i, r in enumerate(rows, start=2):
        if r["set"] not in PANEL:
            raise RowsError(f"{path}:{i}: set {r['set']!r} is not one of {', '.join(PANEL)}")
        if not r["rejected"]:
            try:
                if float(r["ratio"]) <= 0:
                    raise ValueError
            except ValueError:
                raise RowsError(
                    f"{path}:{i}: ratio {r['ratio']!r} of row {r['row']} is not a positive number"
                ) from None
    return rows


def mape(rows: list[dict[str, str]]) -> tuple[float, int, int]:
    """MAPE of |ratio - 1| over simulated rows, rows within 5%, simulated rows."""
    errs = [abs(float(r["ratio"]) - 1.0) for r in rows if not r["rejected"]]
    if not errs:
        return 0.0, 0, 0
    return 100 * sum(errs) / len(errs), sum(e <= 0.05 for e in errs), len(errs)


def draw(rows: list[dict[str, str]], out: Path) -> Path:
    """Writes the figure to `out` (PNG) and returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    groups = [(label, [r for r in rows if PANEL[r["set"]] == key]) for key, label in SETS]
    groups = [(label, g) for label, g in groups if g]
    heights = [len(g) for _, g in groups]
    fig, axes = plt.subplots(
        len(groups),
        1,
        figsize=(9, 0.22 * sum(heights) + 1.2 * len(groups) + 0.6),
        gridspec_kw={"height_ratios": heights},
    )
    if len(groups) == 1:
        axes = [axes]
    simulated = [float(r["ratio"]) for r in rows if not r["rejected"]]
    lo = min([0.8, *simulated]) * 0.97
    hi = max([1.2, *simulated]) * 1.03
    for ax, (label, group) in zip(axes, groups):
        group = sorted(group, key=lambda r: float(r["ratio"]) if not r["rejected"] else 0.0)
        ax.axvspan(0.9, 1.1, color="#eeeeee", zorder=0)
        ax.axvspan(0.95, 1.05, color="#d9d9d9", zorder=0)
        ax.axvline(1.0, color="black", lw=0.8)
        for y, r in enumerate(group):
            name = r["row"].replace(" (approximate)", "").replace(" (not expressible)", "")
            if r["rejected"] and r["set"] in NOT_EXPRESSIBLE:
                ax.text(lo, y, "  not expressible in llmsim", va="center", fontsize=7, color="#777777")
                continue
            if r["rejected"]:
                ax.plot([lo], [y], marker="x", color="red", ms=7, clip_on=False)
                ax.text(lo, y, f"  {name}: rejected", va="center", fontsize=7, color="red")
                continue
            colour = GPU_COLOURS.get(r["gpu"], "#777777")
            # Hollow: in no statistic (approximate, eager, not expressible but simulated, or a release
            # regression).
            approx = r["set"] in NO_STATISTIC
            ax.plot(float(r["ratio"]), y, "o", ms=6, color=colour, mfc="white" if approx else colour)
        ax.set_yticks(range(len(group)))
        ax.set_yticklabels([r["row"] for r in group], fontsize=7)
        ax.set_ylim(-0.7, len(group) - 0.3)
        ax.set_xlim(lo, hi)
        ax.set_xscale("log")
        ticks = [t for t in (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 2.5) if lo <= t <= hi]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=8)
        ax.minorticks_off()
        m, within5, n = mape([r for r in group if r["set"] not in NO_STATISTIC])
        ax.set_title(f"{label}: MAPE {m:.1f}%, {within5}/{n} within 5%", fontsize=9, loc="left")
        ax.grid(axis="x", color="#bbbbbb", lw=0.4)
    axes[-1].set_xlabel("llmsim / published throughput (> 1: llmsim predicts a faster run)", fontsize=8)
    used = sorted(
        {r["gpu"] for r in rows if r["gpu"]}, key=lambda g: list(GPU_COLOURS).index(g) if g in GPU_COLOURS else 99
    )
    handles = [Line2D([], [], ls="", marker="o", color=GPU_COLOURS.get(g, "#777777"), label=g) for g in used]
    handles.append(
        Line2D(
            [],
            [],
            ls="",
            marker="o",
            color="#777777",
            mfc="white",
            label="approximate or release regression (no statistic)",
        )
    )
    fig.legend(handles=handles, loc="lower right", fontsize=7, ncol=len(handles), frameon=False)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="rows written by VALIDATION_CSV=... bench/validation.sh")
    ap.add_argument("out", type=Path, help="PNG to write")
    a = ap.parse_args(argv)
    try:
        rows = load(a.csv)
    except (OSError, RowsError) as e:
        print(f"validation_plot: {e}", file=sys.stderr)
        return 2
    print(draw(rows, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
