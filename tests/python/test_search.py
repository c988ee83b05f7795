import llmsim
import pytest
from llmsim.search import KNOBS, candidates, search


def test_search_enumerates_prunes_and_ranks(small):
    sc = llmsim.Scenario.from_yaml(small)
    space = {"tp": [1, 2, 4], "pp": [1, 2], "cp": [1], "ep": [1], "vpp": [1, 2], "micro_batch_size": [1, 2]}
    valid, dropped = candidates(sc, **space)
    assert valid and set(dropped) == {"memory", "plan"}
    for v in valid:
        sc.with_({**v, "parallel.dp": 0}).check()  # each survivor passes the validator
    df = search(sc, objective="tokens_per_s", progress=False, **space)
    assert df.attrs["method"] == "exhaustive" and df.attrs["simulated"] == len(valid)
    t = list(df["tokens_per_s"])
    assert t == sorted(t, reverse=True)
    best = df.iloc[0]
    one = llmsim.run(sc.with_({**{k: int(best[k]) for k in KNOBS}, "parallel.dp": 0}))
    assert one.tokens_per_s == best["tokens_per_s"]


def test_search_uses_optuna_above_max_trials(small):
    pytest.importorskip("optuna")
    sc = llmsim.Scenario.from_yaml(small)
    space = {"tp": [1, 2, 4], "pp": [1, 2], "cp": [1], "ep": [1], "vpp": [1, 2], "micro_batch_size": [1, 2]}
    valid, _ = candidates(sc, **space)
    df = search(sc, objective="iteration_time_s", max_trials=4, progress=False, **space)
    assert len(valid) > 4
    assert df.attrs["method"] == "optuna-tpe" and 0 < df.attrs["simulated"] <= 4
    t = list(df["iteration_time_s"])
    assert t == sorted(t)
    best = df.iloc[0]
    one = llmsim.run(sc.with_({**{k: int(best[k]) for k in KNOBS}, "parallel.dp": 0}))
    assert one.iteration_time_s == best["iteration_time_s"]
