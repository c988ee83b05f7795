"""Sweep results as Parquet (issue 35): ``llmsim sweep`` -> ``llmsim export`` -> pandas gives the
same rows as the sweep's SQLite results, read here with sqlite3 directly (not through
``llmsim.load``, which the export itself uses)."""

import json
import math
import sqlite3
import subprocess

import llmsim
import pytest

pd = pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")

SPEC = """\
name: pq
base: small.yaml
grid:
  parallel.tp: [1, 2, 3]
  cluster.topology.nic.bandwidth: [200Gbps, 400Gbps]
  collectives.pxn: [true, false]
"""


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


def test_sweep_parquet_pandas_equals_sqlite(small, tmp_path, llmsim_script):
    spec = tmp_path / "pq.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    subprocess.run([*llmsim_script, "sweep", str(spec), "--out", str(out), "--jobs", "2"], check=True)
    r = subprocess.run([*llmsim_script, "export", str(out)], check=True, capture_output=True, text=True)
    assert "results.parquet" in r.stdout

    df = pd.read_parquet(out / "results.parquet")
    con = sqlite3.connect(out / "results.sqlite")
    con.row_factory = sqlite3.Row
    rows = [dict(x) for x in con.execute("SELECT * FROM results ORDER BY idx")]
    con.close()

    # 12 points, the 4 with tp=3 (does not divide the heads) are error rows.
    assert len(rows) == 12 and len(df) == len(rows)
    assert sum(x["status"] == "error" for x in rows) == 4
    axes = ["parallel.tp", "cluster.topology.nic.bandwidth", "collectives.pxn"]
    assert list(df.columns[:3]) == axes
    assert df["parallel.tp"].dtype == "int64" and df["collectives.pxn"].dtype == bool
    sql_cols = [c for c in rows[0] if c not in ("axes", "report")]
    assert list(df.columns[3:]) == sql_cols
    for got, want in zip(df.to_dict("records"), rows):
        for k, v in json.loads(want["axes"]).items():
            assert got[k] == v, (k, got[k], v)
        for c in sql_cols:
            assert _same(got[c], want[c]), (want["idx"], c, got[c], want[c])
    for c in llmsim.METRICS:
        assert df[c].dtype == "float64"
    meta = json.loads(pq.read_schema(out / "results.parquet").metadata[b"llmsim"])
    assert meta == {"name": "pq", "axes": axes}


def test_mixed_type_axis_is_json_text(small, tmp_path):
    sc = llmsim.Scenario.from_yaml(small)
    out = tmp_path / "mixed"
    llmsim.sweep(sc, grid={"collectives.channels": [None, 4]}, out=str(out), progress=False)
    # None (NCCL's choice) and 4 are one int column with a null: not mixed.
    df = pd.read_parquet(llmsim.export_parquet(out))
    assert df["collectives.channels"].isna().sum() == 1
    out2 = tmp_path / "mixed2"
    llmsim.sweep(sc, grid={"collectives.algo": ["ring", 1]}, out=str(out2), progress=False)
    df = pd.read_parquet(llmsim.export_parquet(out2, tmp_path / "x.parquet"))
    assert sorted(df["collectives.algo"]) == ['"ring"', "1"]


def test_export_without_results_names_the_file(tmp_path):
    with pytest.raises(llmsim.SweepError, match="results.sqlite"):
        llmsim.export_parquet(tmp_path)
