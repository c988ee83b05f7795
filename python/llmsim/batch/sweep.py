"""``llmsim sweep`` for packet-level congestion-control sweeps of one ns-3 experiment.

A sweep file whose top-level key is ``ns3:`` (instead of ``base:``) names an ns-3 experiment
(``config.txt``) and the CC parameters to vary; its points run on the batch packet engine
(:func:`llmsim.batch.run_batch`: JAX, on a GPU or the CPU) or one by one on the exact
event-driven engine::

    name: ft16-perm-dcqcn
    ns3: runs/ft16_perm_dcqcn/config.txt   # relative to this file
    seed: 1                                # ECN draws (both engines)
    grid:                                  # every combination (the last key varies fastest)
      rate_ai_bps: [5e6, 20e6, 80e6]
      kmin_bytes: [100e3, 400e3]
    zip:                                   # lists of one length, taken together
      pmax: [0.1, 0.2]
      kmax_bytes: [400e3, 1600e3]
    random:                                # seeded draws of each axis
      samples: 10
      seed: 1
      axes:
        ewma_gain: { log_uniform: [0.001, 0.1] }

Axes are the batch parameters (:data:`llmsim.batch.PARAMS`); a point leaves every other
parameter at ``config.txt``'s value. ``--engine``: ``gpu`` needs a GPU that JAX sees (else it
stops and says so), ``batch`` runs on JAX's default device, ``threads`` runs every point on the
exact engine, ``auto`` is ``batch`` when JAX is installed, else ``threads``. ``--compare-exact
N`` also runs the first N points on the exact engine and records the batch's error.

Results go to ``<out>/results.sqlite`` in the layout of the flow-level sweeps (so
``llmsim.sweep.load``, ``llmsim plot`` and ``llmsim export`` read them), one batch of points
committed at a time, keyed by a hash of the experiment, the point, the seed and the engine: a
stopped sweep started again skips the points it has. Each point's per-flow FCTs (ns, NaN where
unfinished) are in ``<out>/fct/<key>.npy``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import sqlite3
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .inputs import PARAMS, input_files

RESULTS_FILE = "results.sqlite"
SPEC_KEYS = ("name", "ns3", "seed", "grid", "zip", "random")
RANDOM_KEYS = ("samples", "seed", "axes")
DISTS = ("choice", "uniform", "log_uniform", "int")
MAX_POINTS = 1_000_000
METRICS = (
    "flows",
    "finished",
    "unfinished",
    "mean_fct_us",
    "p50_fct_us",
    "p99_fct_us",
    "max_fct_us",
    "max_queue_kb",
    "pfc_pause_us",
    "exact_mean_fct_us",
    "exact_p99_fct_us",
    "exact_unfinished",
    "mean_fct_error",
    "sim_wall_s",
)
_NS3_KEY = re.compile(r"^ns3\s*:", re.MULTILINE)


class SpecError(ValueError):
    """A sweep file that cannot be run; the message names the file, the field and the fix."""


def is_ns3_spec(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a sweep file with a top-level ``ns3:`` key (read without a YAML
    parser, so the console script can route any ``llmsim sweep`` cheaply)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return bool(_NS3_KEY.search(text))


@dataclass
class Ns3Plan:
    """An expanded packet-level sweep: the experiment, the axes and every point."""

    name: str
    spec: Path
    config: Path
    seed: int
    axes: list[str]
    points: list[dict[str, float]] = field(default_factory=list)
    fingerprint: str = ""
    inputs_hash: str = ""
    """SHA-256 of the experiment's files: config.txt, and the topology and flow files it names."""


def _number(spec: Path, where: str, v: Any) -> float:
    # YAML 1.1 reads 5e6 (no dot) as a string: take any number spelled as one.
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise SpecError(f"{spec}: {where}: {v!r} is not a number") from None
    if not math.isfinite(x):
        raise SpecError(f"{spec}: {where}: {v!r} is not a finite number")
    return x


def _axis_name(spec: Path, block: str, name: Any) -> str:
    if name not in PARAMS:
        raise SpecError(
            f"{spec}: {block}.{name}: not a batch parameter; valid: {', '.join(sorted(PARAMS))} "
            "(a point leaves the others at config.txt's value)"
        )
    return str(name)


def _lists(spec: Path, block: str, m: Any) -> dict[str, list[float]]:
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise SpecError(f"{spec}: {block}: expected a map of parameter -> list of values")
    out = {}
    for k, vs in m.items():
        name = _axis_name(spec, block, k)
        if not isinstance(vs, list) or not vs:
            raise SpecError(f"{spec}: {block}.{name}: expected a non-empty list of values")
        out[name] = [_number(spec, f"{block}.{name}[{i}]", v) for i, v in enumerate(vs)]
    return out


def _draws(spec: Path, r: Any) -> tuple[dict[str, list[float]], int]:
    if r is None:
        return {}, 0
    if not isinstance(r, Mapping):
        raise SpecError(f"{spec}: random: expected a map with samples, seed and axes")
    for k in r:
        if k not in RANDOM_KEYS:
            raise SpecError(f"{spec}: random.{k}: unknown field; valid: {', '.join(RANDOM_KEYS)}")
    n = r.get("samples")
    if not isinstance(n, int) or n < 1:
        raise SpecError(f"{spec}: random.samples: expected a positive integer, got {n!r}")
    seed = r.get("seed", 1)
    if not isinstance(seed, int) or seed < 0:
        raise SpecError(f"{spec}: random.seed: expected a non-negative integer, got {seed!r}")
    axes = r.get("axes")
    if not isinstance(axes, Mapping) or not axes:
        raise SpecError(f"{spec}: random.axes: expected a map of parameter -> distribution")
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {}
    for k, d in axes.items():
        name = _axis_name(spec, "random.axes", k)
        where = f"random.axes.{name}"
        if not isinstance(d, Mapping) or len(d) != 1 or next(iter(d)) not in DISTS:
            raise SpecError(
                f"{spec}: {where}: expected exactly one of {', '.join(DISTS)}, e.g. {{uniform: [0.8, 0.99]}}"
            )
        kind, v = next(iter(d.items()))
        if kind == "choice":
            if not isinstance(v, list) or not v:
                raise SpecError(f"{spec}: {where}.choice: expected a non-empty list")
            vals = [_number(spec, f"{where}.choice[{i}]", x) for i, x in enumerate(v)]
            out[name] = [vals[i] for i in rng.integers(0, len(vals), size=n)]
            continue
        if not isinstance(v, list) or len(v) != 2:
            raise SpecError(f"{spec}: {where}.{kind}: expected [low, high]")
        lo, hi = (_number(spec, f"{where}.{kind}", x) for x in v)
        if hi < lo:
            raise SpecError(f"{spec}: {where}.{kind}: high {hi:g} is below low {lo:g}")
        if kind == "uniform":
            out[name] = [float(x) for x in rng.uniform(lo, hi, size=n)]
        elif kind == "log_uniform":
            if lo <= 0:
                raise SpecError(f"{spec}: {where}.log_uniform: both ends must be positive")
            out[name] = [float(x) for x in np.exp(rng.uniform(math.log(lo), math.log(hi), size=n))]
        else:
            out[name] = [float(x) for x in rng.integers(int(lo), int(hi) + 1, size=n)]
    return out, n


def plan(spec: str | os.PathLike[str]) -> Ns3Plan:
    """Reads and expands a packet-level sweep file (grid x zip x random, as the flow-level
    sweeps). Raises :class:`SpecError` naming the field and the fix."""
    try:
        import yaml
    except ImportError:
        raise SpecError("packet-level sweeps read their file with PyYAML: pip install '.[batch]'") from None
    spec = Path(spec)
    try:
        doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecError(f"{spec}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{spec}: not valid YAML: {e}") from None
    if not isinstance(doc, Mapping):
        raise SpecError(f"{spec}: expected a map with ns3 and grid/zip/random")
    for k in doc:
        if k not in SPEC_KEYS:
            hint = " (`base` and `set` are for flow-level sweeps of a scenario)" if k in ("base", "set") else ""
            raise SpecError(f"{spec}: {k}: unknown field of a packet-level sweep; valid: {', '.join(SPEC_KEYS)}{hint}")
    ns3 = doc.get("ns3")
    if not isinstance(ns3, str) or not ns3:
        raise SpecError(f"{spec}: ns3: expected the path of an ns-3 experiment's config.txt")
    config = (spec.parent / ns3).resolve()
    if not config.is_file():
        raise SpecError(f"{spec}: ns3: {config} does not exist (the path is relative to the sweep file)")
    seed = doc.get("seed", 1)
    if not isinstance(seed, int) or seed < 0:
        raise SpecError(f"{spec}: seed: expected a non-negative integer, got {seed!r}")
    grid = _lists(spec, "grid", doc.get("grid"))
    zipped = _lists(spec, "zip", doc.get("zip"))
    if len({len(v) for v in zipped.values()}) > 1:
        lens = ", ".join(f"{k}: {len(v)}" for k, v in zipped.items())
        raise SpecError(f"{spec}: zip: every list must have one length ({lens})")
    drawn, samples = _draws(spec, doc.get("random"))
    axes = [*grid, *zipped, *drawn]
    if len(set(axes)) != len(axes):
        dup = sorted({a for a in axes if axes.count(a) > 1})
        raise SpecError(f"{spec}: {', '.join(dup)}: an axis may appear in only one of grid, zip and random")
    count = math.prod(len(v) for v in grid.values()) * (len(next(iter(zipped.values()))) if zipped else 1)
    count *= samples or 1
    if count > MAX_POINTS:
        raise SpecError(f"{spec}: {count} points, above the limit of {MAX_POINTS}: shorten the axes")
    grid_rows = [dict(zip(grid, vs)) for vs in itertools.product(*grid.values())]
    zip_rows = [dict(zip(zipped, vs)) for vs in zip(*zipped.values())] or [{}]
    rand_rows = [{k: v[i] for k, v in drawn.items()} for i in range(samples)] or [{}]
    points = [{**g, **z, **r} for g in grid_rows for z in zip_rows for r in rand_rows]
    name = doc.get("name") or spec.stem
    if not isinstance(name, str):
        raise SpecError(f"{spec}: name: expected a string")
    try:
        files = [config, *input_files(config)]
    except (ValueError, FileNotFoundError) as e:
        raise SpecError(f"{spec}: ns3: {e}") from None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    inputs_hash = h.hexdigest()
    fp = hashlib.sha256(json.dumps([inputs_hash, seed, axes, points]).encode()).hexdigest()[:16]
    return Ns3Plan(
        name=name,
        spec=spec,
        config=config,
        seed=seed,
        axes=axes,
        points=points,
        fingerprint=fp,
        inputs_hash=inputs_hash,
    )


def point_key(p: Ns3Plan, point: Mapping[str, float], engine: str) -> str:
    """The point's identity across re-runs: the experiment's files, parameters, seed, engine."""
    body = json.dumps([p.inputs_hash, sorted(point.items()), p.seed, engine])
    return hashlib.sha256(body.encode()).hexdigest()[:20]


def _stats(fct_ns: np.ndarray) -> dict[str, float | int | None]:
    done = fct_ns[np.isfinite(fct_ns)]
    us = done / 1e3
    return {
        "flows": int(fct_ns.size),
        "finished": int(done.size),
        "unfinished": int(fct_ns.size - done.size),
        "mean_fct_us": float(us.mean()) if us.size else None,
        "p50_fct_us": float(np.percentile(us, 50)) if us.size else None,
        "p99_fct_us": float(np.percentile(us, 99)) if us.size else None,
        "max_fct_us": float(us.max()) if us.size else None,
    }


def mean_fct_error(batch_ns: np.ndarray, exact_ns: np.ndarray) -> float | None:
    """Relative error of the batch's mean FCT against the exact engine's, over the flows both
    finished (None when they share none)."""
    both = np.isfinite(batch_ns) & np.isfinite(exact_ns)
    if not both.any():
        return None
    return float(batch_ns[both].mean() / exact_ns[both].mean() - 1.0)


class _Store:
    """results.sqlite in the flow-level sweeps' layout (``llmsim.sweep.load`` reads it)."""

    def __init__(self, out: Path, p: Ns3Plan, merge: bool) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "fct").mkdir(exist_ok=True)
        self.out = out
        self.con = sqlite3.connect(out / RESULTS_FILE)
        cols = ", ".join(f"{m} REAL" for m in METRICS)
        self.con.executescript(
            "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, idx INTEGER NOT NULL, axes TEXT NOT NULL,"
            f" status TEXT NOT NULL, error TEXT, parallel TEXT, {cols}, report TEXT);"
            "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);"
        )
        have = {r[1] for r in self.con.execute("PRAGMA table_info(results)")}
        missing = [m for m in METRICS if m not in have]
        if (
            "parallel" in have
            and "mean_fct_us" not in have
            and self.con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        ):
            raise SpecError(f"{out}: holds a flow-level sweep's results; give this sweep its own --out")
        for m in missing:
            self.con.execute(f"ALTER TABLE results ADD COLUMN {m} REAL")
        stored = dict(self.con.execute("SELECT k, v FROM meta").fetchall())
        old = stored.get("fingerprint")
        if old and old != p.fingerprint and not merge:
            raise SpecError(
                f"{out}: holds the results of another sweep (fingerprint {old}, this one {p.fingerprint}): "
                "give this sweep its own --out, or add --merge to keep both"
            )
        meta = {"name": p.name, "axes": json.dumps(p.axes), "kind": "ns3-cc", "fingerprint": p.fingerprint}
        if old and old != p.fingerprint:
            meta["merged"] = old
        self.con.executemany("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", meta.items())
        self.con.commit()

    def done(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT key FROM results WHERE status = 'ok'")}

    def commit(self, rows: Sequence[tuple[str, int, dict, dict, dict, np.ndarray]]) -> None:
        # The FCT arrays first, then one transaction for the rows: a row is only there when its
        # array is.
        for key, _, _, _, _, fct in rows:
            np.save(self.out / "fct" / f"{key}.npy", fct)
        cols = ["key", "idx", "axes", "status", "error", "parallel", *METRICS, "report"]
        q = f"INSERT OR REPLACE INTO results ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        with self.con:
            for key, idx, point, metrics, report, _ in rows:
                vals = [key, idx, json.dumps(point), "ok", None, report["engine"]]
                vals += [metrics.get(m) for m in METRICS]
                vals.append(json.dumps(report))
                self.con.execute(q, vals)

    def close(self) -> None:
        self.con.close()


def _engine(requested: str) -> tuple[str, str | None]:
    """(engine kind, JAX backend) for ``--engine``, or SpecError saying why it cannot run here."""
    if requested == "threads":
        return "exact", None
    try:
        import jax
    except ImportError:
        if requested == "auto":
            print(
                "engine: JAX is not installed, so every point runs on the exact engine "
                "(pip install '.[batch]' for the batch engine)",
                file=sys.stderr,
            )
            return "exact", None
        raise SpecError(
            f"--engine {requested}: the batch packet engine needs JAX: pip install '.[batch]' "
            "(on a CUDA machine: pip install 'jax[cuda12]'); --engine threads runs the exact engine instead"
        ) from None
    if requested == "gpu":
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if not gpus:
            have = ", ".join(f"{d.platform}:{d.id}" for d in jax.devices())
            raise SpecError(
                f"--engine gpu: JAX finds no GPU here (devices: {have}). On a CUDA machine: "
                "pip install 'jax[cuda12]'; to run the same batch on the CPU use --engine batch"
            )
        return "batch", "gpu"
    return "batch", None


def run_sweep(
    spec: str | os.PathLike[str] | Ns3Plan,
    out: str | os.PathLike[str],
    *,
    engine: str = "auto",
    batch_size: int = 100,
    compare_exact: int = 0,
    progress: bool = True,
    merge: bool = False,
) -> dict[str, Any]:
    """Runs a packet-level sweep file (or its :func:`plan`); returns a summary (points,
    skipped, ran, engine, device)."""
    from . import exact_fct_ns, load_ns3, run_batch
    from .engine import device_info

    if batch_size < 1:
        raise SpecError(f"--batch-size: expected at least 1, got {batch_size}")
    if compare_exact < 0:
        raise SpecError(f"--compare-exact: expected 0 or more points, got {compare_exact}")
    p = spec if isinstance(spec, Ns3Plan) else plan(spec)
    kind, backend = _engine(engine)
    store = _Store(Path(out), p, merge)
    try:
        have = store.done()
        todo = [(i, pt, point_key(p, pt, kind)) for i, pt in enumerate(p.points)]
        todo = [t for t in todo if t[2] not in have]
        device = "exact engine (CPU)" if kind == "exact" else device_info(backend)
        inp = load_ns3(p.config) if kind == "batch" else None
        print(
            f"sweep {p.name}: {len(p.points)} points over {len(p.axes)} axes of {p.config.name} ({len(p.points) - len(todo)} "
            f"already done); engine: {'batch packet engine on ' + device if kind == 'batch' else device}",
            file=sys.stderr,
        )
        from ..sweep import Progress

        bar = Progress(len(todo), enabled=progress and sys.stderr.isatty())
        ran = 0
        step = batch_size if kind == "batch" else 1
        for c in range(0, len(todo), step):
            chunk = todo[c : c + step]
            t0 = time.monotonic()
            rows = []
            if kind == "batch":
                res = run_batch(inp, [pt for _, pt, _ in chunk], seed=p.seed, backend=backend)
                wall = (time.monotonic() - t0) / len(chunk)
                for j, (idx, pt, key) in enumerate(chunk):
                    fct = np.asarray(res.fct_ns[j], dtype=np.float64)
                    m = _stats(fct)
                    m["max_queue_kb"] = float(np.max(res.max_queue_bytes[j])) / 1e3
                    m["pfc_pause_us"] = float(np.sum(res.pause_us[j]))
                    m["sim_wall_s"] = wall
                    if idx < compare_exact:
                        ex = exact_fct_ns(p.config, pt, seed=p.seed)
                        es = _stats(ex)
                        m["exact_mean_fct_us"] = es["mean_fct_us"]
                        m["exact_p99_fct_us"] = es["p99_fct_us"]
                        m["exact_unfinished"] = es["unfinished"]
                        m["mean_fct_error"] = mean_fct_error(fct, ex)
                    report = {
                        "engine": "batch",
                        "device": res.device,
                        "steps": int(res.steps),
                        "step_ps": int(res.step_ps),
                        "windows": int(res.windows),
                        "seed": p.seed,
                        "config": str(p.config),
                        "point": pt,
                    }
                    rows.append((key, idx, pt, m, report, fct))
            else:
                (idx, pt, key) = chunk[0]
                fct = exact_fct_ns(p.config, pt, seed=p.seed)
                m = _stats(fct)
                m["sim_wall_s"] = time.monotonic() - t0
                report = {"engine": "exact", "device": "cpu", "seed": p.seed, "config": str(p.config), "point": pt}
                rows.append((key, idx, pt, m, report, fct))
            store.commit(rows)
            ran += len(rows)
            bar.advance(len(rows))
            if not bar.enabled and kind == "batch":
                el = time.monotonic() - t0
                print(
                    f"  {ran}/{len(todo)} points done ({len(rows)} in {el:.1f} s, {len(rows) / el:.2f} experiments/s)",
                    file=sys.stderr,
                )
        bar.close()
    finally:
        store.close()
    return {"points": len(p.points), "skipped": len(p.points) - len(todo), "ran": ran, "engine": kind, "device": device}


def main(argv: Sequence[str]) -> int:
    """``llmsim sweep SPEC`` for a sweep file with ``ns3:`` (the console script routes it here)."""
    ap = argparse.ArgumentParser(
        prog="llmsim sweep",
        description="Packet-level CC sweep of one ns-3 experiment (a sweep file with `ns3:`): the batch packet engine (JAX, GPU or CPU) or the exact engine point by point.",
    )
    ap.add_argument("spec")
    ap.add_argument("--out", help="results directory (default runs/<name>)")
    ap.add_argument(
        "--engine",
        choices=("auto", "batch", "gpu", "threads"),
        default="auto",
        help="gpu: the batch engine on a GPU (stops if JAX sees none); batch: on JAX's default device; threads: the exact engine, point by point; auto: batch if JAX is installed",
    )
    ap.add_argument("--batch-size", type=int, default=100, help="points per batch (each batch is committed when done)")
    ap.add_argument(
        "--compare-exact",
        type=int,
        default=0,
        metavar="N",
        help="also run the first N points on the exact engine and record the batch's mean-FCT error",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the points and stop")
    ap.add_argument(
        "--merge", action="store_true", help="add to a results directory that holds another sweep's results"
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--jobs", "-j", type=int, default=0, help="accepted for compatibility; the batch engine runs a batch as one"
    )
    a = ap.parse_args(argv)
    try:
        p = plan(a.spec)
        if a.dry_run:
            print(f"sweep {p.name}: {len(p.points)} points over {len(p.axes)} axes of {p.config}")
            for i, pt in enumerate(p.points):
                print(f"{i}\t" + " ".join(f"{k}={v:g}" for k, v in pt.items()))
            return 0
        out = Path(a.out or os.path.join("runs", p.name))
        s = run_sweep(
            p,
            out,
            engine=a.engine,
            batch_size=a.batch_size,
            compare_exact=a.compare_exact,
            progress=not a.no_progress,
            merge=a.merge,
        )
    except (SpecError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"sweep {p.name}: {s['points']} points, {s['skipped']} already done, {s['ran']} ran ({s['engine']} engine, {s['device']})"
    )
    print(f"results: {out / RESULTS_FILE}  (llmsim plot {out} --x AXIS --y mean_fct_us)")
    return 0
