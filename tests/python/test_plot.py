from pathlib import Path

import llmsim
from llmsim import plot


def test_plots_render_png_and_html(small, tmp_path):
    sc = llmsim.Scenario.from_yaml(small)
    out = tmp_path / "sweep"
    llmsim.sweep(sc, grid={"parallel.tp": [1, 2, 4], "parallel.pp": [1, 2]}, out=out, progress=False)
    png = plot.save(plot.plot_axis(out, "parallel.tp", "iteration_time", hue="parallel.pp"), str(tmp_path / "a.png"))
    data = Path(png).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    png2 = plot.save(plot.plot_breakdown(out), str(tmp_path / "b.png"))
    assert Path(png2).read_bytes()[:4] == b"\x89PNG"
    page = Path(plot.report_html(str(out))).read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 3  # two axes + the breakdown
    assert "Best points" in page
