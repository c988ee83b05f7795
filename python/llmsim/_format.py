"""How result columns are printed in tables (the search table, the HTML report): one format per
column, never scientific notation; MFU and HFU as percentages; unknown values as ``unknown``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

_FORMATS: dict[str, Callable[[float], str]] = {
    "iteration_time_s": lambda v: f"{v:.4f}",
    "tokens_per_s": lambda v: f"{v:,.0f}",
    "tokens_per_s_per_gpu": lambda v: f"{v:,.1f}",
    "mfu": lambda v: f"{100 * v:.1f}%",
    "hfu": lambda v: f"{100 * v:.1f}%",
    "model_tflops_per_gpu": lambda v: f"{v:.0f}",
    "memory_gib": lambda v: f"{v:.1f}",
    "memory_fraction": lambda v: f"{100 * v:.0f}%",
}


def _known(f: Callable[[float], str]) -> Callable[[Any], str]:
    return lambda v: "unknown" if v is None or (isinstance(v, float) and math.isnan(v)) else f(v)


def formatters(columns: Any) -> dict[str, Callable[[Any], str]]:
    """``DataFrame.to_string``/``to_html`` formatters for the metric columns among ``columns``,
    matched by the last part of a dotted name."""
    return {c: _known(_FORMATS[str(c).split(".")[-1]]) for c in columns if str(c).split(".")[-1] in _FORMATS}
