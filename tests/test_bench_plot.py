"""``disthook bench --plot``: the pipeline and scaleout figures from the suites' rows."""
import pytest

from disthook.bench.plot import draw, pipeline_plot


def rows():
    out = []
    for schedule, scale in (("gpipe", 0.9), ("1f1b", 0.95)):
        for m in (1, 2, 4, 8):
            ideal = 2 * m / (m + 1)
            out.append({"suite": "pipeline", "schedule": schedule, "m": m,
                        "speedup": ideal * scale * 0.9, "limit": ideal * 0.95})
    return out


def test_the_plot_is_a_png_with_every_curve(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot", reason="matplotlib is not installed")
    path = pipeline_plot(rows(), str(tmp_path / "pipeline.png"))
    assert is_png(path)
    image = plt.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 500


def test_without_pipeline_rows_it_says_which_suite_it_needs(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    with pytest.raises(ValueError, match="pipeline and scaleout suites"):
        pipeline_plot([{"suite": "engine"}], str(tmp_path / "x.png"))


def scaleout_rows(torch_too=True):
    return [{"suite": "scaleout", "stages": p, "micro": 16, "cores": 2, "layers": 16,
             "width": 1024, "batch": 512, "bound": p * 16 / (16 + p - 1),
             "speedup": min(p, 2) * 0.8,
             "torch_pipelining_speedup": min(p, 2) * 0.7 if torch_too else None}
            for p in (2, 4, 8)]


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("torch_too", [True, False])
def test_the_scaleout_plot_is_drawn_with_or_without_torch(tmp_path, torch_too):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    [path] = draw(scaleout_rows(torch_too), str(tmp_path / "scaleout.png"))
    assert is_png(path)


def test_with_both_suites_the_scaleout_figure_goes_beside(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    paths = draw(rows() + scaleout_rows(), str(tmp_path / "figures.png"))
    assert paths == [str(tmp_path / "figures.png"), str(tmp_path / "figures-scaleout.png")]
    assert all(is_png(p) for p in paths)
