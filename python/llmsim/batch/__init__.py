"""Batch packet engine: many CC parameter points of one ns-3 experiment in one time-stepped,
data-oriented engine (Multiverse's design), on JAX (CPU, or a GPU with a CUDA jaxlib).

    from llmsim import batch
    inp = batch.load_ns3("examples/ns3/runs/ft16_perm_dcqcn/config.txt")
    res = batch.run_batch(inp, [{"rate_ai_bps": 2e7}, {"rate_ai_bps": 8e7}])
    res.fct_ns  # (points, flows)

``exact_fct_ns`` runs one point on the exact event-driven engine for comparison.
JAX is an optional dependency: ``pip install 'llmsim[batch]'``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .. import _native
from .engine import BatchResult, device_info, run_batch
from .inputs import PARAMS, Ns3Inputs, config_text, input_files, load_ns3

__all__ = [
    "PARAMS",
    "BatchResult",
    "Ns3Inputs",
    "config_text",
    "device_info",
    "exact_fct_ns",
    "input_files",
    "load_ns3",
    "run_batch",
]


def exact_fct_ns(config: str | os.PathLike[str], point: Mapping[str, float] | None = None, seed: int = 1) -> np.ndarray:
    """Each flow's FCT (ns; NaN if unfinished) from the exact event-driven engine, for
    ``config.txt`` with the batch parameters of ``point`` set."""
    config = Path(config)
    if not point:
        fct = _native.ns3_exact_fct_ns(str(config), seed)
    else:
        topo, flows = input_files(config)
        with tempfile.TemporaryDirectory(prefix="llmsim-batch-") as d:
            p = Path(d) / "config.txt"
            p.write_text(config_text(config.read_text(), point, topo, flows))
            fct = _native.ns3_exact_fct_ns(str(p), seed)
    out = np.asarray(fct, dtype=np.float64)
    out[out == 0] = np.nan
    return out
