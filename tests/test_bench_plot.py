"""``disthook bench --plot``: the pipeline figure from the suite's rows."""
import pytest

from disthook.bench.plot import pipeline_plot


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
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    image = plt.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 500


def test_without_pipeline_rows_it_says_which_suite_it_needs(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    with pytest.raises(ValueError, match="pipeline suite"):
        pipeline_plot([{"suite": "engine"}], str(tmp_path / "x.png"))
