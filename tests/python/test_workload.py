"""A scenario's `workload:` key from Python: a run, a sweep over the cluster, the same report as
the CLI, and errors that name the field and the fix."""

import json
import subprocess

import llmsim
import pytest
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "workload-simai-gpt3-13b-128gpu.yaml"
ANALYTICAL = ["network.backend=analytical"]


def test_workload_key_runs_and_sweeps():
    sc = llmsim.Scenario.from_yaml(EXAMPLE, ANALYTICAL)
    rep = llmsim.run(sc)
    d = rep.to_dict()
    assert d["model"] == "simai:interop/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt"
    assert rep.iteration_time_s > 0
    df = llmsim.sweep(sc, grid={"cluster.topology.nic.bandwidth": ["100Gbps", "400Gbps"]}, progress=False)
    assert list(df["status"]) == ["ok", "ok"]
    slow, fast = df["iteration_time_s"]
    assert slow > fast
    assert fast == llmsim.run(sc.with_({"cluster.topology.nic.bandwidth": "400Gbps"})).iteration_time_s


def test_workload_key_equals_the_cli(rust_cli):
    py = llmsim.run(llmsim.Scenario.from_yaml(EXAMPLE, ANALYTICAL)).to_dict()
    out = subprocess.run(
        [*rust_cli, "run", str(EXAMPLE), "--set", ANALYTICAL[0], "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    cli = json.loads(out)
    for d in (py, cli):
        d.pop("sim_wall_s")
    assert py == cli


def test_bad_workload_key_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: { format: astra, path: w.txt }\ncluster: { gpus: 8 }\n")
    with pytest.raises(llmsim.WorkloadError, match=r"workload\.format: unknown workload format .*valid: chakra"):
        llmsim.run(llmsim.Scenario.from_yaml(bad))
    bad.write_text("workload: { format: simai }\ncluster: { gpus: 8 }\n")
    with pytest.raises(llmsim.WorkloadError, match=r"workload\.path: missing; give a SimAI/AICB workload file"):
        llmsim.run(llmsim.Scenario.from_yaml(bad))
