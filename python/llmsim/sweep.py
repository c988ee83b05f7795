"""Sweeps: many experiments in one process (the Rust batch runner), or on Ray; resumable results
in ``<out>/results.sqlite`` keyed by the hash of each resolved scenario."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import _native
from .core import PathLike, Scenario, _sets

STATUS_OK = "ok"


def _spec(
    base: Scenario | PathLike,
    grid: Mapping[str, Sequence[Any]] | None,
    zip: Mapping[str, Sequence[Any]] | None,
    random: Mapping[str, Any] | None,
    filter: str | Iterable[str] | None,
    set: Iterable[str] | Mapping[str, Any] | None,
    name: str | None,
) -> dict[str, Any]:
    sc = base if isinstance(base, Scenario) else Scenario.from_yaml(base)
    spec: dict[str, Any] = {"name": name or sc.name, "base": sc.to_dict(), "base_dir": sc.base_dir or "."}
    if set:
        spec["set"] = _sets(set)
    if grid:
        spec["grid"] = {k: list(v) for k, v in grid.items()}
    if zip:
        spec["zip"] = {k: list(v) for k, v in zip.items()}
    if random:
        spec["random"] = dict(random)
    if filter:
        spec["filter"] = [filter] if isinstance(filter, str) else list(filter)
    return spec


def sweep(
    base: Scenario | PathLike,
    *,
    grid: Mapping[str, Sequence[Any]] | None = None,
    zip: Mapping[str, Sequence[Any]] | None = None,
    random: Mapping[str, Any] | None = None,
    filter: str | Iterable[str] | None = None,
    set: Iterable[str] | Mapping[str, Any] | None = None,
    name: str | None = None,
    out: PathLike | None = None,
    jobs: int = 0,
    ray: str | None = None,
    batch_size: int = 16,
    progress: bool = True,
    merge: bool = False,
):  # -> pandas.DataFrame
    """Runs a sweep over ``base`` and returns its results as a DataFrame (one row per point,
    one column per axis, then status/error and the metrics).

    ``grid``: every combination; ``zip``: lists taken together; ``random``:
    ``{"samples": n, "seed": s, "axes": {key: {"choice": [...]} | {"uniform": [lo, hi]} | ...}}``;
    ``filter``: expressions over dotted keys that must hold (``"parallel.tp * parallel.pp <= 16"``).
    ``out``: results directory (resumed if it exists; a temporary one if None; one that holds
    another spec's results is refused unless ``merge``). ``jobs``: threads (0: one per core).
    ``ray``: ``"auto"``, an address, or ``"local"`` (Ray's local mode).
    """
    spec = _spec(base, grid, zip, random, filter, set, name)
    return _run(json.dumps(spec), ".", out, jobs, ray, batch_size, progress, spec["name"], merge)


def sweep_file(
    path: PathLike,
    *,
    out: PathLike | None = None,
    jobs: int = 0,
    ray: str | None = None,
    batch_size: int = 16,
    progress: bool = True,
    merge: bool = False,
):  # -> pandas.DataFrame
    """Runs a sweep file (see ``examples/sweep-tp-pp.yaml``)."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    name = os.path.splitext(os.path.basename(path))[0]
    return _run(text, os.path.dirname(path) or ".", out, jobs, ray, batch_size, progress, name, merge)


def _run(
    spec: str,
    dir: str,
    out: PathLike | None,
    jobs: int,
    ray: str | None,
    batch_size: int,
    progress: bool,
    name: str,
    merge: bool = False,
):
    out = os.fspath(out) if out is not None else tempfile.mkdtemp(prefix="llmsim-sweep-")
    if ray:
        run_on_ray(spec, dir, out, address=ray, batch_size=batch_size, progress=progress, name=name)
    else:
        _native.run_sweep(spec, dir, out, jobs, progress, name, merge)
    return load(out)


def load(out: PathLike, *, reports: bool = False):  # -> pandas.DataFrame
    """Reads a sweep's results directory: one row per finished point, by point index; axis
    columns first (named by their dotted keys). ``reports=True`` keeps each full report (JSON)."""
    import pandas as pd

    db = os.path.join(os.fspath(out), _native.RESULTS_FILE)
    if not os.path.exists(db):
        raise _native.SweepError(f"no results in {os.fspath(out)} (expected {_native.RESULTS_FILE})")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        df = pd.read_sql_query("SELECT * FROM results ORDER BY idx", con)
        meta = dict(con.execute("SELECT k, v FROM meta").fetchall())
    finally:
        con.close()
    axes_order = json.loads(meta.get("axes", "[]"))
    axes = pd.DataFrame([json.loads(a) for a in df["axes"]], index=df.index)
    cols = [a for a in axes_order if a in axes.columns] + [a for a in axes.columns if a not in axes_order]
    df = pd.concat([axes[cols], df.drop(columns=["axes"])], axis=1)
    if not reports:
        df = df.drop(columns=["report"])
    df.attrs["name"] = meta.get("name", "")
    df.attrs["axes"] = cols
    return df


class Progress:
    """A one-line progress bar with an ETA on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.t0, self.enabled = total, 0, time.monotonic(), enabled and total > 0

    def advance(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0.0
        w = 40
        fill = int(w * self.done / self.total)
        sys.stderr.write(
            f"\r{self.done}/{self.total} experiments [{'=' * fill}{' ' * (w - fill)}] {el:.0f}s elapsed, ETA {eta:.0f}s "
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _ray_init(ray_mod: Any, address: str) -> None:
    if ray_mod.is_initialized():
        return
    if address == "local":
        # Ray's local mode (everything in the driver process) where this Ray still has it (it was
        # removed in Ray 2.4x); else a single-node Ray started on this machine for this sweep.
        try:
            ray_mod.init(local_mode=True, include_dashboard=False, log_to_driver=False)
        except (TypeError, RuntimeError):
            ray_mod.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    else:
        try:
            ray_mod.init(address=address, log_to_driver=False)
        except ConnectionError as e:
            raise _native.SweepError(
                f"no Ray cluster at {address!r} ({e}); start one (`ray start --head`) or use --ray local for this machine"
            ) from e


def _ray_batch(points: str) -> str:
    from llmsim import _native as n

    return n.run_points(points, 1)


def run_on_ray(
    spec: str,
    dir: str,
    out: str,
    *,
    address: str = "auto",
    batch_size: int = 16,
    progress: bool = True,
    name: str = "sweep",
) -> dict[str, int]:
    """Runs a sweep on Ray: one task per batch of ``batch_size`` points; the driver commits each
    batch's rows to ``out`` as the task finishes (so a killed sweep resumes like a local one)."""
    try:
        import ray
    except ImportError as e:
        raise _native.SweepError("--ray needs Ray: pip install 'llmsim[ray]' (or pip install ray)") from e
    plan = json.loads(_native.plan_sweep(spec, dir, name))
    done = set(_native.store_done_keys(out))
    todo = [p for p in plan["points"] if p["key"] not in done]
    _ray_init(ray, address)
    task = ray.remote(num_cpus=1)(_ray_batch)
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), max(1, batch_size))]
    pending = [task.remote(json.dumps(b)) for b in batches]
    bar = Progress(len(todo), progress)
    new = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for r in ready:
            rows = ray.get(r)
            n = len(json.loads(rows))
            new += _native.store_insert(out, rows, plan["name"], plan["axes"])
            bar.advance(n)
    bar.close()
    return {"points": len(plan["points"]), "skipped": len(plan["points"]) - len(todo), "ran": new}


PARQUET_FILE = "results.parquet"


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def export_parquet(out: PathLike, path: PathLike | None = None, *, reports: bool = False) -> str:
    """Writes a sweep's results (the rows of :func:`load`) as Parquet with pyarrow; returns the
    file's path, by default ``<out>/results.parquet``.

    Columns: the axes by their dotted keys, in axis order (int64, double, bool or string; an axis
    whose values mix types, e.g. ``[1, "auto"]``, is stored as JSON text), then ``key``, ``idx``,
    ``status``, ``error``, ``parallel``, the metrics of ``llmsim.METRICS`` (double, null where a
    point failed) and ``sim_wall_s``; ``report`` (JSON text) with ``reports=True``. The file's
    metadata key ``llmsim`` holds ``{"name": ..., "axes": [...]}``."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise _native.SweepError("Parquet output needs pyarrow: pip install pyarrow (or pip install .[parquet])") from e
    df = load(out, reports=reports)
    for c in df.attrs["axes"]:
        kinds = {type(v) for v in df[c] if not _is_missing(v)}
        if df[c].dtype == object and len(kinds) > 1:
            df[c] = [None if _is_missing(v) else json.dumps(v) for v in df[c]]
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"llmsim"] = json.dumps({"name": df.attrs.get("name", ""), "axes": df.attrs["axes"]}).encode()
    dest = os.fspath(path) if path is not None else os.path.join(os.fspath(out), PARQUET_FILE)
    pq.write_table(table.replace_schema_metadata(meta), dest)
    return dest


def export_main(argv: Sequence[str]) -> int:
    """``llmsim export DIR``: a sweep's results.sqlite as Parquet."""
    import argparse

    p = argparse.ArgumentParser(
        prog="llmsim export", description="Write a sweep's results (DIR/results.sqlite) as Parquet (pyarrow)."
    )
    p.add_argument("dir", help="a sweep's results directory (llmsim sweep --out)")
    p.add_argument("--out", help=f"the Parquet file (default: DIR/{PARQUET_FILE})")
    p.add_argument("--reports", action="store_true", help="add each point's full report (JSON text)")
    a = p.parse_args(argv)
    dest = export_parquet(a.dir, a.out, reports=a.reports)
    print(f"wrote {dest}")
    return 0
