"""The demo's figures, page and progress lines, drawn from a made-up history (no cluster):
what a reader needs to read them is there (legends, axis labels, ticks, aligned rows)."""
import importlib
import importlib.util
import io
from types import SimpleNamespace

import numpy as np
import pytest

from disthook.demo import report
from disthook.demo.progress import Progress

# matplotlib is looked for at collection, and imported (with pyplot, through the demo's
# plots) by the tests that draw, where they run: not by every pytest process that collects
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="the demo needs matplotlib (pip install -e '.[demo]')")

STEPS_PER_EPOCH, EPOCHS = 23, 3
PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias", "6.weight", "6.bias"]


@pytest.fixture
def history():
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * EPOCHS
    return SimpleNamespace(
        loss=list(np.geomspace(2.3, 0.2, n)), accuracy=[1.0] * n,  # a run at 100%
        test_accuracy=[0.8, 0.9, 0.95], steps_per_epoch=STEPS_PER_EPOCH,
        grad_norms={name: (0.3 + 0.5 * rng.random((n, 4))).tolist() for name in PARAMS})


@pytest.fixture(scope="module")
def plots():
    """The demo's figures module (it imports pyplot)."""
    return importlib.import_module("disthook.demo.plots")


def labelled_ticks(axis) -> list[float]:
    low, high = sorted(axis.get_view_interval())
    return [t for t in axis.get_majorticklocs() if low <= t <= high]


def test_curves_explain_the_epoch_lines_and_keep_100_percent_inside(history, plots):
    fig = plots.draw_curves(history)
    loss, accuracy = fig.axes
    for ax in (loss, accuracy):
        assert "end of an epoch" in [t.get_text() for t in ax.get_legend().get_texts()]
        dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert len(dotted) == EPOCHS - 1
    assert accuracy.get_ylim()[1] > 100  # the line at 100% is not cut by the frame
    assert 100 in accuracy.get_yticks()
    assert loss.get_yscale() == "log" and len(labelled_ticks(loss.yaxis)) >= 4


def test_one_epoch_has_no_epoch_line_to_explain(history, plots):
    history.test_accuracy = history.test_accuracy[:1]
    fig = plots.draw_curves(history)
    assert "end of an epoch" not in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_gradient_flow_rows_are_parameters_and_log_axes_have_ticks(history, plots):
    fig = plots.draw_gradient_flow(history, 0.5)
    over_steps, per_parameter = fig.axes
    assert per_parameter.get_title() == "Per parameter, whole run"
    assert per_parameter.get_ylabel() == "parameter"
    assert [t.get_text() for t in per_parameter.get_yticklabels()] == [
        "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "linear.weight",
        "linear.bias"]
    # the norms span less than a decade: still at least four labelled values per axis
    assert len(labelled_ticks(over_steps.yaxis)) >= 4
    assert len(labelled_ticks(per_parameter.xaxis)) >= 4


def test_grad_cam_rows_align_and_the_colour_bar_sits_beside_the_maps(plots):
    rng = np.random.default_rng(1)
    images, cams = rng.random((10, 1, 8, 8)), rng.random((10, 8, 8))
    fig = plots.draw_grad_cam(images, np.arange(10), np.arange(10), cams)
    fig.canvas.draw()
    grid = np.array([ax for ax in fig.axes if ax.images]).reshape(3, 10)
    boxes = [[ax.get_position() for ax in row] for row in grid]
    for row in boxes[1:]:  # same left edges and widths as the digit row
        assert [b.x0 for b in row] == pytest.approx([b.x0 for b in boxes[0]], abs=1e-6)
        assert [b.width for b in row] == pytest.approx([b.width for b in boxes[0]], abs=1e-6)
    labels = [row[0].get_ylabel() for row in grid]
    assert labels == ["digit", "map 8×8\n(as computed)", "over the digit\n(bilinear, 28×28)"]
    native = grid[1, 0].images[0]
    assert native.get_array().shape == (8, 8) and native.get_interpolation() == "nearest"
    digit, heat = grid[2, 0].images  # both upsampled to 28x28, the map over the digit
    assert digit.get_array().shape == heat.get_array().shape == (28, 28)
    assert grid[0, 0].images[0].get_array().shape == (28, 28)
    (bar,) = [ax for ax in fig.axes if not ax.images and ax not in grid.ravel()]
    where = bar.get_position()
    gap = where.x0 - boxes[1][-1].x1
    assert 0 < gap < 0.6 * boxes[0][0].width  # right beside the last column, not far off
    assert where.y1 <= boxes[1][0].y1 + 1e-6 and where.y0 >= boxes[2][0].y0 - 1e-6
    assert where.y1 > boxes[1][0].y0 and where.y0 < boxes[2][0].y1  # along the two map rows


def test_the_page_shows_the_run_setup(tmp_path):
    setup = {"model": "Sequential(\n  (0): Conv2d(1, 16, ...)\n)",
             "optimizer": "Adam, learning rate 0.003", "batch": "64 digits",
             "command": "disthook demo --epochs 2 --out 'a b'", "date": "2026-01-01 10:00 UTC"}
    summary = SimpleNamespace(stages=[(0, "w0", ["(0) Conv2d"])], epochs=2, test_accuracy=0.9,
                              test_digits=360, clipped=0.1, setup=setup,
                              hooks_fired=lambda: [("w0", "stage 0: (0) Conv2d", {"capture": 3})])
    report.write(tmp_path / "index.html", {}, summary)
    page = (tmp_path / "index.html").read_text()
    assert "<h2>Run setup</h2>" in page
    assert "<pre>Sequential(\n  (0): Conv2d(1, 16, ...)\n)</pre>" in page
    assert "<th>optimizer</th>" in page and "learning rate 0.003" in page
    assert "<code>disthook demo --epochs 2 --out &#x27;a b&#x27;</code>" in page
    assert "2026-01-01 10:00 UTC" in page


def test_without_a_terminal_progress_is_whole_lines_one_per_epoch():
    stream = io.StringIO()  # no isatty: no bar
    say = Progress(stream=stream)
    say.start_training(2, 3, 16)
    for epoch in (1, 2):
        for _ in range(3):
            say.step(epoch, 2, 0.5, 0.75)
        say.end_epoch(epoch, 2, loss=0.5, accuracy=0.75, test_accuracy=0.8)
    say.close()
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "training: 2 epoch(s) of 3 steps, batch 16"
    assert [line.split(" (")[0] for line in lines[1:]] == [
        f"epoch {e}/2: train loss 0.500, train accuracy 75.0%, test accuracy 80.0%"
        for e in (1, 2)]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_epoch_lines_stay_above_the_bar():
    stream = Terminal()
    say = Progress(stream=stream)
    say.start_training(1, 3, 16)
    for _ in range(3):
        say.step(1, 1, 0.5, 0.75)
    say.end_epoch(1, 1, loss=0.5, accuracy=0.75, test_accuracy=0.8)
    say.close()
    text = stream.getvalue()
    assert "epoch 1/1" in text and "3/3" in text  # the bar ran
    kept = [line for line in text.replace("\r", "\n").splitlines()
            if line.startswith("epoch 1/1: train loss 0.500")]
    assert len(kept) == 1, text  # written once, as a whole line
