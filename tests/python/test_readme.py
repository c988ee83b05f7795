"""The README's Python block runs as written (issue 35: every command of the README runs from a
clone). The block is taken from README.md itself, so an edit there is what is tested."""

import os
import re
import shutil

from conftest import ROOT


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_readme_python_block_runs(tmp_path):
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert blocks, "README.md has no ```python block"
    # A scratch copy of what the block reads (examples/), so its outputs (runs/) land there.
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for code in blocks:
            scope: dict = {}
            exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
            # What the block promises: a Report with typed attributes and a sweep's rows.
            assert scope["rep"].iteration_time_s > 0
            assert len(scope["df"]) == 8 and (scope["df"]["status"] == "ok").sum() >= 4
        assert (tmp_path / "runs" / "tp-gpu" / "results.parquet").is_file()
    finally:
        os.chdir(cwd)
