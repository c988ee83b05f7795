"""The fidelity table the report quotes is the one bench/fidelity_table.py derives from the
committed validation rows: regenerate both together (bench/validation.md says how)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fidelity_table():
    spec = importlib.util.spec_from_file_location("fidelity_table", ROOT / "bench" / "fidelity_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_fidelity_table_is_derived_from_the_validation_rows():
    mod = _fidelity_table()
    want = mod.table(ROOT / "bench" / "validation-rows.csv")
    got = (ROOT / "crates" / "llmsim-sim" / "data" / "fidelity.csv").read_text()
    assert got == want, (
        "regenerate: python bench/fidelity_table.py bench/validation-rows.csv > crates/llmsim-sim/data/fidelity.csv"
    )


def test_rows_outside_the_statistics_are_left_out(tmp_path):
    mod = _fidelity_table()
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "row,set,gpu,gpus,parallel,convention,published,llmsim,ratio,rejected,class,in_statistics\n"
        'a,base,H100,8,tp1,mfu,1,1,1.0000,,"Hopper, dense, BF16/FP16",yes\n'
        'b,base,H100,8,tp1,mfu,1,1,1.2000,,"Hopper, dense, BF16/FP16",yes\n'
        'c,approx,H100,8,tp1,mfu,1,1,3.0000,,"Hopper, dense, BF16/FP16",no\n'
        "d,base,,,,mfu,1,,,OOM,,no\n"
    )
    lines = mod.table(rows).splitlines()
    assert lines[-1] == '"Hopper, dense, BF16/FP16",2,1.1000,1.0000,1.2000,1'
