"""Figure and page helpers shared by the sweep plots (plot.py) and the packet-run plots
(netplot.py): matplotlib without a display, figures inlined as PNG, self-contained HTML pages."""

from __future__ import annotations

import base64
import html
import io
from typing import Any


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png_b64(ax: Any) -> str:
    buf = io.BytesIO()
    fig = ax.figure
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_page(out: str, title: str, parts: list[str]) -> str:
    """Writes a self-contained HTML page of ``parts`` (HTML snippets) to ``out``; returns ``out``."""
    page = (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style>"
        + "\n".join(parts)
    )
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return out


def figure_section(title: str, ax: Any, missing: str) -> str:
    """An HTML section: ``title`` and the figure of ``ax`` inline, or ``missing`` when ``ax`` is None."""
    if ax is None:
        return f"<h2>{html.escape(title)}</h2><p>{html.escape(missing)}</p>"
    return f'<h2>{html.escape(title)}</h2><img src="data:image/png;base64,{_png_b64(ax)}">'
