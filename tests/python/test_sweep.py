import os
import signal
import sqlite3
import subprocess
import time

import llmsim
import pytest

SPEC = """\
name: resume
base: small.yaml
grid:
  parallel.tp: [1, 2, 4, 8]
  training.micro_batch_size: [1, 2]
  cluster.topology.nic.bandwidth: [100Gbps, 200Gbps, 400Gbps]
filter: parallel.tp * training.micro_batch_size <= 8
"""


def _rows(out):
    db = os.path.join(out, "results.sqlite")
    if not os.path.exists(db):
        return 0
    try:
        con = sqlite3.connect(db, timeout=1)
        return con.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _same(a, b):
    a = a.drop(columns=["sim_wall_s"]).reset_index(drop=True)
    b = b.drop(columns=["sim_wall_s"]).reset_index(drop=True)
    assert list(a.columns) == list(b.columns)
    assert a.equals(b), a.compare(b) if a.shape == b.shape else (a.shape, b.shape)


def test_grid_filter_and_invalid_points(small):
    sc = llmsim.Scenario.from_yaml(small)
    df = llmsim.sweep(
        sc,
        grid={"parallel.tp": [1, 2, 3, 4], "parallel.pp": [1, 2]},
        filter="parallel.tp * parallel.pp <= 4",
        progress=False,
    )
    # 8 combinations, (3, 2) and (4, 2) filtered out; tp=3 does not divide 16 GPUs: an error row,
    # not a crash.
    assert len(df) == 6
    assert list(df.columns[:2]) == ["parallel.tp", "parallel.pp"]
    bad = df[df["parallel.tp"] == 3]
    assert set(bad["status"]) == {"error"} and bad["error"].str.contains("tp").all()
    ok = df[df["status"] == "ok"]
    # Each ok row equals a single run of the same scenario.
    r = ok.iloc[0]
    one = llmsim.run(sc.with_({"parallel.tp": int(r["parallel.tp"]), "parallel.pp": int(r["parallel.pp"])}))
    assert r["iteration_time_s"] == one.iteration_time_s
    assert r["key"] == sc.with_({"parallel.tp": int(r["parallel.tp"]), "parallel.pp": int(r["parallel.pp"])}).key


def test_resume_after_sigkill(small, tmp_path, llmsim_script):
    spec = tmp_path / "resume.yaml"
    spec.write_text(SPEC)
    out = str(tmp_path / "killed")
    cmd = [*llmsim_script, "sweep", str(spec), "--jobs", "1", "--out", out]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while _rows(out) < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    partial = _rows(out)
    df_full = llmsim.sweep_file(spec, out=tmp_path / "clean", jobs=2, progress=False)
    plan_total = len(df_full)
    assert 0 < partial < plan_total, "the kill must land mid-sweep"
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed = llmsim.load(out)
    assert len(resumed) == plan_total
    assert resumed["key"].is_unique
    _same(resumed, df_full)
    # A third run finds nothing to do and changes nothing.
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert f"ran 0 (0 ok, 0 failed), {plan_total} already done" in r.stdout
    _same(llmsim.load(out), df_full)


def test_ray_local_mode_equals_local_sweep(small, tmp_path):
    ray = pytest.importorskip("ray")
    sc = llmsim.Scenario.from_yaml(small)
    grid = {"parallel.tp": [1, 2, 3, 4], "training.micro_batch_size": [1, 2]}
    local = llmsim.sweep(sc, grid=grid, out=tmp_path / "local", jobs=2, progress=False)
    try:
        ray_df = llmsim.sweep(sc, grid=grid, out=tmp_path / "ray", ray="local", batch_size=3, progress=False)
    finally:
        ray.shutdown()
    assert (ray_df["status"] == "ok").sum() == 6 and (ray_df["status"] == "error").sum() == 2
    _same(local, ray_df)
