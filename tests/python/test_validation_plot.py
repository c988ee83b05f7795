"""bench/validation_plot.py: the figure of llmsim against published runs."""

import importlib.util
from pathlib import Path

import pytest
from conftest import ROOT

HEADER = "row,set,gpu,gpus,parallel,convention,published,llmsim,ratio,rejected\n"


def module():
    spec = importlib.util.spec_from_file_location("validation_plot", ROOT / "bench" / "validation_plot.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "rows.csv"
    p.write_text(HEADER + body)
    return p


def test_draws_every_set_and_counts_only_simulated_rows(tmp_path: Path):
    vp = module()
    rows = vp.load(
        write(
            tmp_path,
            "a,base,H100,8,tp1,mfu,0.5,0.55,1.1,\n"
            "b,base,A100,8,tp1,mfu,0.5,0.45,0.9,\n"
            "c,new,B200,8,tp1,tokens_per_gpu,100,104,1.04,\n"
            "d (approximate),approx,GB200,8,tp1,tokens_per_gpu,100,300,3.0,\n"
            "e,new,,,,tokens_per_gpu,100,,,out of memory\n"
            "f,third,GB300,64,tp1,tokens_per_gpu,100,90,0.9,\n"
            "g,third-flex,B300,64,tp1,tokens_per_gpu,100,120,1.2,\n"
            "h (not expressible),third-nx,,,,tokens_per_gpu,100,,,unknown variant fp4\n"
            "i,fourth,H100,8,tp1,tokens_per_gpu,100,80,0.8,\n"
            "j (not expressible),fourth-nx,,,,tokens_per_gpu,100,,,unknown field `moe_latent_size`\n",
        )
    )
    base = [r for r in rows if r["set"] == "base"]
    m, within5, n = vp.mape(base)
    assert (round(m, 6), within5, n) == (10.0, 0, 2)
    # The rejected row is in no statistic; the approximate one is left out by the caller.
    assert vp.mape([r for r in rows if r["set"] == "new"]) == (pytest.approx(4.0), 1, 1)
    # The third set's panel counts its HybridEP rows, not the row llmsim cannot express.
    third = [r for r in rows if vp.PANEL[r["set"]] == "third" and r["set"] not in vp.NO_STATISTIC]
    assert vp.mape(third) == (pytest.approx(15.0), 0, 2)
    # The fourth set (NeMo Automodel) has its own panel; its not-expressible row is in no statistic.
    fourth = [r for r in rows if vp.PANEL[r["set"]] == "fourth" and r["set"] not in vp.NO_STATISTIC]
    assert vp.mape(fourth) == (pytest.approx(20.0), 0, 1)
    out = vp.draw(rows, tmp_path / "v.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_names_the_row_and_field(tmp_path: Path):
    vp = module()
    with pytest.raises(vp.RowsError, match=r"rows.csv:2: ratio 'x' of row a"):
        vp.load(write(tmp_path, "a,base,H100,8,tp1,mfu,0.5,0.55,x,\n"))
    with pytest.raises(vp.RowsError, match="set 'other'"):
        vp.load(write(tmp_path, "a,other,H100,8,tp1,mfu,0.5,0.55,1.1,\n"))
    p = tmp_path / "short.csv"
    p.write_text("row,ratio\na,1.0\n")
    with pytest.raises(vp.RowsError, match="missing column"):
        vp.load(p)
    assert vp.main([str(p), str(tmp_path / "x.png")]) == 2


def test_the_sixth_sets_groups_share_one_panel_and_count(tmp_path: Path):
    vp = module()
    rows = vp.load(
        write(
            tmp_path,
            "a,sixth,A100,256,tp8,tokens_per_gpu,100,96,0.96,\n"
            "b,sixth-t3,A100,256,tp8,tokens_per_gpu,100,100,1.0,\n"
            "c,sixth-f9,A100,2240,tp8,tokens_per_gpu,100,111,1.11,\n",
        )
    )
    # Table 2, Table 3 and Figure 9 rows (bench/validation-sixth-set.md) are all statistics rows.
    sixth = [r for r in rows if vp.PANEL[r["set"]] == "sixth" and r["set"] not in vp.NO_STATISTIC]
    assert vp.mape(sixth) == (pytest.approx(5.0), 2, 3)
    out = vp.draw(rows, tmp_path / "v.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
