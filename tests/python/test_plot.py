import llmsim
from llmsim import plot


def test_plots_render_png_and_html(small, tmp_path):
    sc = llmsim.Scenario.from_yaml(small)
    out = tmp_path / "sweep"
    llmsim.sweep(sc, grid={"parallel.tp": [1, 2, 4], "parallel.pp": [1, 2]}, out=out, progress=False)
    png = plot.save(plot.plot_axis(out, "parallel.tp", "iteration_time", hue="parallel.pp"), str(tmp_path / "a.png"))
    data = open(png, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    png2 = plot.save(plot.plot_breakdown(out), str(tmp_path / "b.png"))
    assert open(png2, "rb").read()[:4] == b"\x89PNG"
    page = open(plot.report_html(str(out)), encoding="utf-8").read()
    assert page.count("data:image/png;base64,") == 3  # two axes + the breakdown
    assert "Best points" in page
