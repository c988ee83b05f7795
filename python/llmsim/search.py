"""``llmsim search``: the best parallel plan (TP, PP, DP, EP, CP, VPP, micro-batch size) for a model
on N GPUs. Candidates are enumerated and pruned by the Rust validator (divisibility, memory model:
``Scenario.check``); the survivors are simulated on the batch runner and ranked. When more
survive than ``max_trials``, Optuna's TPE sampler picks which to simulate."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import _native
from ._format import formatters
from .core import PathLike, Scenario
from .plot import MAXIMIZE, metric
from .sweep import sweep

KNOBS = ["parallel.tp", "parallel.pp", "parallel.cp", "parallel.ep", "parallel.vpp", "training.micro_batch_size"]


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def candidates(
    sc: Scenario,
    *,
    tp: Sequence[int] | None = None,
    pp: Sequence[int] | None = None,
    cp: Sequence[int] = (1, 2, 4),
    ep: Sequence[int] = (1, 2, 4, 8),
    vpp: Sequence[int] = (1, 2, 4, 5),
    micro_batch_size: Sequence[int] = (1, 2, 4),
) -> tuple[list[dict[str, int]], dict[str, int]]:
    """Every combination that the validator accepts (the plan divides the model and the GPUs,
    and fits in memory). Returns the valid ones and counts of why the others were dropped."""
    r = sc.resolved()
    gpn = r["cluster"]["gpus_per_node"]
    gpus = r["cluster"]["gpus"] or r["cluster"]["nodes"] * gpn
    tp = list(tp) if tp else _pow2_upto(gpn)
    pp = list(pp) if pp else [p for p in _pow2_upto(64) if p <= gpus]
    valid: list[dict[str, int]] = []
    dropped = {"memory": 0, "plan": 0}
    for t, p, c, e, v, m in itertools.product(tp, pp, cp, ep, vpp, micro_batch_size):
        if v > 1 and p == 1:
            continue
        if t * p * c > gpus or gpus % (t * p * c):
            dropped["plan"] += 1
            continue
        point = dict(zip(KNOBS, (t, p, c, e, v, m)))
        try:
            sc.with_({**point, "parallel.dp": 0}).check()
        except _native.OutOfMemoryError:
            dropped["memory"] += 1
            continue
        except _native.LlmsimError:
            dropped["plan"] += 1
            continue
        valid.append(point)
    return valid, dropped


def _rank(df, objective: str):
    ok = df[df["status"] == "ok"]
    return ok.sort_values(objective, ascending=objective not in MAXIMIZE).reset_index(drop=True)


def search(
    scenario: Scenario | PathLike,
    *,
    gpus: int | None = None,
    objective: str = "tokens_per_s",
    max_trials: int = 256,
    jobs: int = 0,
    backend: str | None = None,
    out: PathLike | None = None,
    seed: int = 1,
    progress: bool = True,
    **space: Any,
):  # -> pandas.DataFrame
    """Ranks valid parallel plans for ``scenario``'s model on ``gpus`` GPUs by ``objective``
    (``tokens_per_s``, ``mfu``: higher is better; ``iteration_time_s``: lower is better).
    Returns the simulated candidates, best first; ``df.attrs`` holds the pruning counts."""
    import pandas as pd

    sc = scenario if isinstance(scenario, Scenario) else Scenario.from_yaml(scenario)
    fixed: dict[str, Any] = {}
    if gpus is not None:
        fixed.update({"cluster.gpus": int(gpus), "cluster.nodes": None})
    if backend is not None:
        fixed["network.backend"] = backend
    if fixed:
        sc = sc.with_(fixed)
    objective = metric(objective)
    if objective not in _native.METRICS:
        raise _native.SweepError(f"objective {objective!r}: valid: {', '.join(_native.METRICS)}")
    valid, dropped = candidates(sc, **space)
    if not valid:
        raise _native.SweepError(
            f"no valid parallel plan for {sc.name} on these GPUs: {dropped['memory']} plans do not fit in "
            f"memory, {dropped['plan']} do not divide the model or the GPU count"
        )
    base = sc.with_({"parallel.dp": 0})
    if len(valid) <= max_trials:
        zipped = {k: [v[k] for v in valid] for k in KNOBS}
        df = sweep(base, zip=zipped, name=f"search-{sc.name}", out=out, jobs=jobs, progress=progress)
        method = "exhaustive"
    else:
        df = _optuna(base, valid, objective, max_trials, jobs, out, seed, progress)
        method = "optuna-tpe"
    ranked = _rank(df, objective)
    ranked.attrs.update(
        {"valid": len(valid), "dropped": dropped, "simulated": len(df), "method": method, "objective": objective}
    )
    return ranked if len(ranked) else pd.DataFrame()


def _optuna(
    base: Scenario,
    valid: list[dict[str, int]],
    objective: str,
    max_trials: int,
    jobs: int,
    out,
    seed: int,
    progress: bool,
):
    try:
        import optuna
    except ImportError as e:
        raise _native.SweepError(
            f"{len(valid)} valid plans exceed max_trials={max_trials}: pip install optuna, or raise max_trials"
        ) from e
    import tempfile

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = os.fspath(out) if out is not None else tempfile.mkdtemp(prefix="llmsim-search-")
    choices = {k: sorted({v[k] for v in valid}) for k in KNOBS}
    valid_set = {tuple(v[k] for k in KNOBS) for v in valid}
    direction = "maximize" if objective in MAXIMIZE else "minimize"
    study = optuna.create_study(direction=direction, sampler=optuna.samplers.TPESampler(seed=seed))
    batch = max(2, 2 * (jobs or os.cpu_count() or 1))
    simulated = 0
    df = None
    tries = 0
    while simulated < max_trials and tries < 20 * max_trials:
        trials, points = [], []
        while len(points) < min(batch, max_trials - simulated) and tries < 20 * max_trials:
            tries += 1
            t = study.ask()
            p = {k: t.suggest_categorical(k, choices[k]) for k in KNOBS}
            if tuple(p[k] for k in KNOBS) not in valid_set:
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                continue
            trials.append(t)
            points.append(p)
        if not points:
            break
        zipped = {k: [p[k] for p in points] for k in KNOBS}
        df = sweep(base, zip=zipped, name=f"search-{base.name}", out=out, jobs=jobs, progress=False)
        for t, p in zip(trials, points):
            row = df
            for k in KNOBS:
                row = row[row[k] == p[k]]
            v = row[objective].iloc[0] if len(row) and row["status"].iloc[0] == "ok" else None
            if v is None:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(t, float(v))
        simulated = len(df)
        if progress:
            print(f"\roptuna: {simulated}/{max_trials} simulated", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    return df


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="llmsim search", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("scenario", help="scenario file: the model, training settings and cluster")
    p.add_argument("--gpus", type=int, help="GPU count (default: the scenario's)")
    p.add_argument("--objective", default="tokens_per_s", help="tokens_per_s (default), mfu, iteration_time_s")
    p.add_argument("--max-trials", type=int, default=256, help="simulate at most this many plans (Optuna above)")
    p.add_argument("--backend", choices=["analytical", "flow"], help="network backend (default: the scenario's)")
    p.add_argument("--jobs", "-j", type=int, default=0)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--out", help="results directory (resumable; default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the ranked plans as JSON")
    a = p.parse_args(argv)
    df = search(
        a.scenario,
        gpus=a.gpus,
        objective=a.objective,
        max_trials=a.max_trials,
        jobs=a.jobs,
        backend=a.backend,
        out=a.out,
    )
    at = df.attrs
    cols = [*KNOBS, "parallel", "iteration_time_s", "tokens_per_s", "mfu", "memory_gib"]
    if a.json:
        print(json.dumps(df[cols].head(a.top).to_dict(orient="records"), indent=1))
        return 0
    print(
        f"search: {at['valid']} valid plans ({at['dropped']['memory']} dropped by the memory model, "
        f"{at['dropped']['plan']} not dividing the model/GPUs); {at['simulated']} simulated ({at['method']}); "
        f"ranked by {at['objective']}"
    )
    show = df[cols].head(a.top).rename(columns=lambda c: c.split(".")[-1])
    print(show.to_string(index=False, formatters=formatters(show.columns)))
    return 0
