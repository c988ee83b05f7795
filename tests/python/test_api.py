import json

import llmsim
import pytest
from conftest import ROOT


def test_scenario_overrides_and_key(small):
    sc = llmsim.Scenario.from_yaml(small)
    assert sc.name == "small"
    tp4 = sc.with_(parallel={"tp": 4})
    assert tp4.resolved()["parallel"]["tp"] == 4
    assert sc.resolved()["parallel"]["tp"] == 2  # immutable
    assert tp4.key != sc.key
    # Dotted and nested spellings and a --set list are the same scenario.
    assert sc.with_({"parallel.tp": 4}).key == tp4.key == sc.with_(["parallel.tp=4"]).key
    assert llmsim.Scenario.from_dict(sc.to_dict(), base_dir=sc.base_dir).key == sc.key


def test_errors_map_to_exception_classes(small):
    sc = llmsim.Scenario.from_yaml(small)
    with pytest.raises(llmsim.ScenarioError, match="tpp"):
        sc.with_(parallel={"tpp": 2})
    with pytest.raises(llmsim.WorkloadError, match="tp"):
        llmsim.run(sc.with_(parallel={"tp": 3}))
    big = sc.with_(model={"num_hidden_layers": 400}, parallel={"tp": 1, "use_distributed_optimizer": False})
    with pytest.raises(llmsim.OutOfMemoryError, match="out of memory"):
        big.check()
    assert issubclass(llmsim.OutOfMemoryError, llmsim.WorkloadError)
    assert issubclass(llmsim.SweepError, llmsim.LlmsimError)
    with pytest.raises(llmsim.ScenarioError):
        llmsim.Scenario.from_yaml(ROOT / "examples" / "no-such-file.yaml")


def test_run_report(small):
    rep = llmsim.run(llmsim.Scenario.from_yaml(small))
    d = rep.to_dict()
    assert rep.iteration_time_s == d["iteration_time_s"] > 0
    m = rep.metrics()
    # tokens/s is derived from the iteration time: tokens per iteration / time.
    assert m["tokens_per_s"] == pytest.approx(32 * 2048 / m["iteration_time_s"], rel=1e-12)
    st = rep.stages_frame()
    assert list(st["stage"]) == [0]
    assert json.loads(json.dumps(d)) == d


def test_report_attributes_are_the_json_keys(small):
    # Typed attributes (issue 35): every JSON key is a declared attribute and back, so dir(),
    # editors and the docs show them; a key added on the Rust side fails here until declared.
    rep = llmsim.run(llmsim.Scenario.from_yaml(small, set=["training.iterations=2"]))
    d = rep.to_dict()
    assert set(d) <= set(llmsim.Report.fields()), set(d) - set(llmsim.Report.fields())
    # The keys a run with defaults may omit are the defaulted ones; every other is present.
    assert set(llmsim.Report.fields()) - set(d) <= set(llmsim.Report._DEFAULTS) | {"overrides"}
    for k in d:
        assert getattr(rep, k) == d[k], k
        assert k in dir(rep)
    assert isinstance(rep.mfu, float) and isinstance(rep.params, int)
    with pytest.raises(AttributeError):
        rep.mfu = 0.5


def test_jobs_report(tmp_path):
    # Two jobs on one fabric (issue 32): each job's report is a Report; their keys are the same.
    job = (
        "{{ name: {n}, gpus: 8, placement: {p}, model: {{ preset: gpt3-13b, num_hidden_layers: 4 }}, "
        "training: {{ seq_length: 2048, micro_batch_size: 1, global_batch_size: 8 }}, parallel: {{ tp: 2 }} }}"
    )
    p = tmp_path / "jobs.yaml"
    p.write_text(
        "cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: rail-fat-tree } }\n"
        "network: { backend: flow }\n"
        f"jobs: [{job.format(n='a', p='packed')}, {job.format(n='b', p='spread')}]\n"
    )
    rep = llmsim.run(llmsim.Scenario.from_yaml(p))
    assert [j["name"] for j in rep.jobs] == ["a", "b"]
    assert [j["servers"] for j in rep.jobs] == [[0], [1]]
    jobs = rep.job_reports()
    assert set(jobs) == {"a", "b"}
    assert set(jobs["a"].to_dict()) <= set(llmsim.Report.fields())
    for j in rep.jobs:
        assert j["slowdown"] == pytest.approx(j["iteration_time_s"] / j["alone_iteration_time_s"])
        assert jobs[j["name"]].iteration_time_s == j["iteration_time_s"]
    assert rep.iteration_time_s == max(j["iteration_time_s"] for j in rep.jobs)


def test_imported_workload_report_has_no_made_up_zeros():
    # A SimAI file records no model size, FLOPs or memory: those are None (unknown), not 0; its
    # AICB file name gives the batch and sequence, so throughput is known.
    rep = llmsim.run(
        llmsim.Scenario.from_yaml(
            ROOT / "examples" / "workload-simai-gpt3-13b-128gpu.yaml", set=["network.backend=analytical"]
        )
    )
    assert rep.params is None and rep.mfu is None and rep.hfu is None and rep.memory is None
    assert rep.global_batch_size == 1024 and rep.seq_length == 2048
    assert rep.tokens_per_s == pytest.approx(1024 * 2048 / rep.iteration_time_s, rel=1e-12)
    assert "mfu=unknown" in repr(rep)


def test_report_metrics_equal_a_sweep_rows(small):
    # One definition (issue 31): Report.metrics() and a sweep row hold the same metrics, every
    # one of llmsim.METRICS, bit for bit; only the wall time differs between the two runs.
    sc = llmsim.Scenario.from_yaml(small)
    df = llmsim.sweep(sc, grid={"parallel.tp": [2, 4]}, progress=False)
    assert list(df["status"]) == ["ok", "ok"]
    for _, row in df.iterrows():
        m = llmsim.run(sc.with_({"parallel.tp": int(row["parallel.tp"])})).metrics()
        assert list(m) == list(llmsim.METRICS)
        assert m["sim_wall_s"] > 0
        for k in llmsim.METRICS:
            if k != "sim_wall_s":
                assert m[k] == row[k], k
    # A report without a field (a stored row's report has no wall time) gives None for it alone.
    d = llmsim.run(sc).to_dict()
    del d["sim_wall_s"]
    m = llmsim.Report(d).metrics()
    assert m["sim_wall_s"] is None and all(v is not None for k, v in m.items() if k != "sim_wall_s")


def test_python_api_equals_cli(rust_cli, llmsim_script):
    import subprocess

    path = ROOT / "examples" / "gpt3-13b-128gpu.yaml"
    api = llmsim.run(llmsim.Scenario.from_yaml(path, set=["parallel.tp=4"])).to_dict()
    for cmd in (rust_cli, llmsim_script):
        out = subprocess.run(
            [*cmd, "run", str(path), "--set", "parallel.tp=4", "--json"], check=True, capture_output=True, text=True
        )
        cli = json.loads(out.stdout)
        for k in (
            "iteration_time_s",
            "tokens_per_s",
            "mfu",
            "hfu",
            "mean",
            "stages",
            "ranks",
            "memory",
            "collectives",
            "net",
        ):
            assert api[k] == cli[k], (cmd, k)
