"""Scenarios and single runs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def to_sets(overrides: Mapping[str, Any]) -> list[str]:
    """``{"parallel": {"tp": 4}, "cluster.gpu": "H200"}`` -> ``["parallel.tp=4", "cluster.gpu=\\"H200\\""]``.

    Values are written as JSON, which the scenario reader parses as YAML.
    """
    flat: dict[str, Any] = {}
    _flatten("", overrides, flat)
    return [f"{k}={json.dumps(v)}" for k, v in flat.items()]


class Scenario:
    """A scenario (model, training, parallelism, cluster, network): a YAML tree plus the directory
    its relative paths resolve against. Immutable: ``with_`` returns a new one."""

    __slots__ = ("_n",)

    def __init__(self, native: _native.Scenario) -> None:
        self._n = native

    @classmethod
    def from_yaml(cls, path: PathLike, set: Iterable[str] | Mapping[str, Any] | None = None) -> Scenario:
        """Reads a scenario file; ``set`` overrides keys as ``--set`` does (a list of
        ``"key.path=value"`` or a mapping of dotted keys or nested sections)."""
        return cls(_native.Scenario.from_yaml(os.fspath(path), _sets(set)))

    @classmethod
    def from_str(cls, text: str, base_dir: PathLike = ".") -> Scenario:
        return cls(_native.Scenario.from_str(text, os.fspath(base_dir)))

    @classmethod
    def from_dict(cls, tree: Mapping[str, Any], base_dir: PathLike = ".") -> Scenario:
        return cls(_native.Scenario.from_str(json.dumps(tree), os.fspath(base_dir)))

    def with_(self, set: Iterable[str] | Mapping[str, Any] | None = None, **sections: Any) -> Scenario:
        """A copy with overrides: ``sc.with_(parallel={"tp": 4}, cluster={"gpu": "H200"})`` or
        ``sc.with_({"parallel.tp": 4})``."""
        sets = _sets(set) + to_sets(sections)
        return Scenario(self._n.with_sets(sets))

    def to_dict(self) -> dict[str, Any]:
        """The scenario tree as given (with overrides)."""
        return json.loads(self._n.tree_json())

    def resolved(self) -> dict[str, Any]:
        """The scenario with every default filled in."""
        return json.loads(self._n.resolved_json())

    def check(self) -> dict[str, Any]:
        """Validates the parallel plan and memory without simulating; returns the per-GPU memory
        footprint (bytes). Raises ``WorkloadError``/``OutOfMemoryError`` as ``run`` would."""
        return json.loads(self._n.check())

    @property
    def name(self) -> str:
        return self._n.name

    @property
    def key(self) -> str:
        """Hash of the resolved scenario: the row key in sweep results."""
        return self._n.key

    @property
    def base_dir(self) -> str:
        return os.fspath(self._n.base_dir)

    @property
    def native(self) -> _native.Scenario:
        return self._n

    def __repr__(self) -> str:
        return f"Scenario({self.name!r}, key={self.key})"


def _sets(set: Iterable[str] | Mapping[str, Any] | None) -> list[str]:
    if set is None:
        return []
    if isinstance(set, Mapping):
        return to_sets(set)
    return [str(s) for s in set]


class Report:
    """The result of one run: the fields of ``llmsim run --json`` as typed attributes.

    A value the run does not know (an imported workload that records no model size, batch,
    sequence, FLOPs or memory) is ``None``, never a made-up zero. ``rep["key"]`` and
    :meth:`to_dict` give the JSON itself. ``tests/python/test_api.py`` checks that the attributes
    below are exactly the report's JSON keys.
    """

    scenario: str
    #: The ``--set`` overrides applied to the scenario file.
    overrides: list[str]
    model: str
    params: int | None
    gpu: str
    gpus: int
    #: Compute-bound kernels' time over the calibrated board's: the job's expected slowest GPU
    #: (``compute.gpu_variability``); 1.0 when off.
    gpu_pace: float
    topology: str
    #: Switches per tier, NIC bandwidth per GPU, oversubscription and bisection, in one line.
    fabric: str
    #: Cost proxies of the scale-out fabric: ``switches``, ``switch_ports``, ``cables``, ``optics``.
    fabric_cost: dict[str, int]
    backend: str
    parallel: str
    #: What ``tokens_per_s`` counts: ``"tokens"`` (transformers) or ``"samples"`` (DLRM).
    sample_unit: str
    microbatches: int
    global_batch_size: int | None
    seq_length: int | None
    #: Seconds; with ``training.iterations > 1`` the steady-state mean of iterations 2..N.
    iteration_time_s: float
    iterations: int
    first_iteration_time_s: float | None
    iteration_times_s: list[float]
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    model_tflops_per_gpu: float | None
    mfu: float | None
    hfu: float | None
    #: Per pipeline stage: ``{"stage", "layers", "breakdown": {...seconds...}}``.
    stages: list[dict[str, Any]]
    #: The breakdown (seconds) averaged over the simulated ranks.
    mean: dict[str, float]
    #: With ``training.iterations > 1``: the first iteration's breakdown (seconds) averaged over
    #: the simulated ranks; ``mean`` is then that of iterations 2..N. None for one iteration.
    first_iteration: dict[str, float] | None
    ranks: list[dict[str, Any]]
    #: ``{"footprint": {...bytes...}, "capacity", "fraction"}``, or None where unknown.
    memory: dict[str, Any] | None
    collectives: int
    collectives_on_network: int
    #: Per process-group kind: ``{"group", "collectives", "on_network"}``.
    collectives_by_group: list[dict[str, Any]]
    plans_built: int
    #: Network counters (transfers, bytes, packet-level events, drops, ...).
    net: dict[str, Any]
    nodes_executed: int
    symmetry: str
    #: How a flow-level run folded its data-parallel replicas (``network.fold``): ``{"outcome",
    #: "replicas", "mirrored_messages", "diverged_messages", "max_spread_s", ...}``, or None.
    fold: dict[str, Any] | None
    #: The packet backend's engine (exact, or Wormhole fast-forward and its bound); None elsewhere.
    packet_engine: str | None
    sim_wall_s: float | None
    #: The run's class for the validation record (``"Hopper, dense, BF16/FP16"``), or None for
    #: workloads llmsim did not generate and GPUs the validation has no runs on.
    fidelity_class: str | None
    #: How far llmsim has been from published runs of that class (``bench/validation.md``):
    #: ``{"class", "rows", "median_ratio", "min_ratio", "max_ratio", "within_10pct"}``, or None.
    fidelity: dict[str, Any] | None
    #: A scenario with ``jobs:``: per job ``{"name", "gpus", "placement", "servers",
    #: "iteration_time_s", "alone_iteration_time_s", "slowdown", "report": {...}}`` (the job's own
    #: report; :meth:`job_reports` wraps them). Empty for one job.
    jobs: list[dict[str, Any]]

    #: Fields the JSON omits when they hold their default.
    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "overrides": [],
        "iterations": 1,
        "first_iteration_time_s": None,
        "first_iteration": None,
        "iteration_times_s": [],
        "fold": None,
        "packet_engine": None,
        "fidelity_class": None,
        "fidelity": None,
        "jobs": [],
    }

    def __init__(self, data: dict[str, Any]) -> None:
        object.__setattr__(self, "_d", data)
        for name in self.fields():
            object.__setattr__(self, name, data.get(name, self._DEFAULTS.get(name)))

    @classmethod
    def fields(cls) -> list[str]:
        """The attribute names, in the JSON's order."""
        return [k for k in cls.__annotations__ if not k.startswith("_")]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Report is read-only; use to_dict() for a mutable copy")

    def __getitem__(self, name: str) -> Any:
        return self._d[name]

    def to_dict(self) -> dict[str, Any]:
        return self._d

    def metrics(self) -> dict[str, float | None]:
        """The flat numbers a sweep row holds, named as ``llmsim.METRICS`` (computed by the same
        Rust function as a sweep's; a field the report lacks gives None)."""
        return dict(zip(_native.METRICS, _native.report_metrics(json.dumps(self._d))))

    def job_reports(self) -> dict[str, Report]:
        """Each job's own report (run with the other jobs), by job name; empty for one job."""
        return {j["name"]: Report(j["report"]) for j in self.jobs}

    def stages_frame(self):  # -> pandas.DataFrame
        """Per-stage breakdown (seconds) as a DataFrame."""
        import pandas as pd

        return pd.DataFrame([{"stage": s["stage"], "layers": s["layers"], **s["breakdown"]} for s in self._d["stages"]])

    def __repr__(self) -> str:
        mfu = "unknown" if self.mfu is None else f"{self.mfu:.3f}"
        return f"Report({self.scenario!r}, iteration_time_s={self.iteration_time_s:.6g}, mfu={mfu}, parallel={self.parallel!r})"


def run(scenario: Scenario | PathLike, *, ideal_comm: bool = False, no_fold: bool = False) -> Report:
    """Simulates one training iteration (releases the GIL while it runs)."""
    sc = scenario if isinstance(scenario, Scenario) else Scenario.from_yaml(scenario)
    return Report(json.loads(_native.run(sc.native, ideal_comm, no_fold)))
