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


def workspan_rows(width=1024):
    out = []
    for p in (2, 4, 8):
        ours = {"one_process_cpu_s": 0.4, "predicted_speedup": p * 0.5,
                "predicted_zb_step_s": 0.4 / (p * 0.6),
                "predicted_interleaved_step_s": 0.4 / (p * 0.55) if p > 2 else None}
        out.append({"suite": "workspan", "stages": p, "width": width, "layers": 16,
                    "micro": 16, "bound": p * 16 / (16 + p - 1), "disthook": ours,
                    "torch": {"predicted_speedup": p * 0.45}})
    return out


def test_scaleout_points_are_measured_where_the_cores_exist_and_predicted_beyond():
    from disthook.bench.plot import scaleout_points

    got = scaleout_points(scaleout_rows() + workspan_rows() + workspan_rows(width=512))
    ours = got["series"]["disthook 1F1B"]
    # 2 cores: p = 2 measured (scaleout's 1.6x), p = 4 and 8 from workspan at width 1024
    assert ours == [(2, 1.6, "measured"), (4, 2.0, "predicted"), (8, 4.0, "predicted")]
    assert got["series"]["torch pipelining 1F1B"] == [
        (2, pytest.approx(1.4), "measured"), (4, pytest.approx(1.8), "predicted"),
        (8, pytest.approx(3.6), "predicted")]
    assert [how for _, _, how in got["series"]["disthook ZB-H1"]] == ["predicted"] * 3
    assert [p for p, _, _ in got["series"]["disthook interleaved 1F1B"]] == [4, 8]
    assert got["width"] == 1024 and got["cores"] == 2
    # workspan alone: every point predicted, at its widest width
    alone = scaleout_points(workspan_rows(width=512) + workspan_rows())
    assert {how for _, _, how in alone["series"]["disthook 1F1B"]} == {"predicted"}
    with pytest.raises(ValueError, match="scaleout or workspan"):
        scaleout_points([{"suite": "engine"}])


def test_the_scaleout_figure_draws_from_workspan_rows_too(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    [path] = draw(workspan_rows(), str(tmp_path / "scaleout.png"))
    assert is_png(path)
    [path] = draw(scaleout_rows() + workspan_rows(), str(tmp_path / "both.png"))
    assert is_png(path)


def test_scaleout_alone_marks_what_ran_on_fewer_cores_than_processes():
    from disthook.bench.plot import scaleout_points

    got = scaleout_points(scaleout_rows())  # 2 cores, no workspan rows to predict from
    assert got["series"]["disthook 1F1B"] == [
        (2, 1.6, "measured"), (4, 1.6, "shared cores"), (8, 1.6, "shared cores")]
