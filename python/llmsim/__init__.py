"""llmsim: simulate LLM training clusters from Python.

>>> import llmsim
>>> sc = llmsim.Scenario.from_yaml("examples/gpt3-13b-128gpu.yaml")
>>> rep = llmsim.run(sc.with_(parallel={"tp": 4}))
>>> df = llmsim.sweep(sc, grid={"parallel.tp": [1, 2, 4, 8]})

The simulator is the Rust core (``llmsim._native``); this package is a thin layer over it.
"""

from __future__ import annotations

from ._native import (
    METRICS,
    CollectiveError,
    ComputeError,
    LlmsimError,
    NetworkError,
    OutOfMemoryError,
    ScenarioError,
    SimulationError,
    SweepError,
    TopologyError,
    WorkloadError,
)
from .core import Report, Scenario, run
from .sweep import export_parquet, load, sweep, sweep_file

__all__ = [
    "METRICS",
    "CollectiveError",
    "ComputeError",
    "LlmsimError",
    "NetworkError",
    "OutOfMemoryError",
    "Report",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "SweepError",
    "TopologyError",
    "WorkloadError",
    "export_parquet",
    "load",
    "run",
    "sweep",
    "sweep_file",
]
