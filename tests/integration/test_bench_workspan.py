"""``disthook bench workspan`` runs and prints its two tables (work, span), with each stage's
timeline of schedule actions from the workers; values it cannot run are refused, naming
them. No timing or ratio is asserted."""
import importlib.util
import json

import pytest

from disthook.bench import runner
from disthook.cli import main

pytestmark = pytest.mark.timeout(240)


def quick(monkeypatch, capsys, tmp_path, *extra) -> tuple[str, list]:
    for var in runner.THREAD_VARS:  # as the runner's child: it then runs in this process
        monkeypatch.setenv(var, "1")
    figures = tmp_path / "workspan.json"
    assert main(["bench", "workspan", "--quick", *extra, "--json", str(figures)]) == 0
    return capsys.readouterr().out, json.loads(figures.read_text())


def check_tables(out: str, rows: list) -> None:
    lines = out.splitlines()
    work = next(line for line in lines if line.split()[:3] == ["w", "p", "one"])
    for column in ("client", "coord", "workers", "total", "effic.", "outside compute",
                   "torch one", "ranks"):
        assert column in work, column
    outside = next(line for line in lines if line.split()[:4] == ["w", "p", "sends", "waits"])
    for column in ("I/O", "rest", "per message"):
        assert column in outside, column
    span = next(line for line in lines if "stage F/B/send" in line)
    for column in ("torch F/B/send", "hop us", "predicted ms", "ours/torch", "speedup",
                   "bound", "of bound"):
        assert column in span, column
    zero = next(line for line in lines if "F/B/W ms" in line)
    for column in ("1F1B ms", "ZB-H1 ms", "vs torch", "bubble ms", "bubble of 1F1B",
                   "of its own run", "imbalance ms"):
        assert column in zero, column
    batched = next(line for line in lines if "zb-batched ms" in line)
    for column in ("vs torch", "work ms", "effic."):
        assert column in batched, column
    interleaved = next(line for line in lines if "interleaved ms" in line)
    for column in ("bubble of 1F1B", "best ours/torch"):
        assert column in interleaved, column
    assert "MISS" not in out and "target" not in out
    for row in rows:
        ours = row["disthook"]
        assert row["suite"] == "workspan" and ours["predicted_step_s"] > 0
        assert len(ours["costs"]) == row["stages"]
        for stage in ours["costs"]:  # every stage's CPU per forward and backward, measured
            assert stage["forward"] > 0 and stage["backward"] > 0
        for stage in ours["zb_costs"]:  # and under ZB-H1, its W's
            assert stage["forward"] > 0 and stage["backward"] > 0 and stage["weight"] > 0
        assert ours["predicted_zb_step_s"] > 0
        assert ours["zb_bubble_s"] >= 0 and ours["zb_imbalance_s"] >= 0
        for stage in ours["zbb_costs"]:  # and under zb-batched, its W's shares
            assert stage["forward"] > 0 and stage["backward"] > 0
            assert stage["weight_batch"] > 0 and "weight" not in stage
        assert ours["predicted_zbb_step_s"] > 0 and 0 < ours["zbb_work_efficiency"] < 1
        if row["micro"] % row["stages"] == 0:  # interleaved takes groups of p micro-batches
            assert ours["predicted_interleaved_step_s"] > 0
        assert ours["workers_cpu_s"] > 0 and 0 <= ours["outside_compute"] < 1
        # outside compute by part: the stages' sends and waits (their timelines), ZeroMQ's
        # I/O threads, the rest; they add up to the workers' CPU less compute
        parts = ours["outside_compute_s"]
        assert parts["sends"] > 0 and parts["waits"] > 0 and parts["io_threads"] > 0
        assert sum(parts.values()) == pytest.approx(
            ours["workers_cpu_s"] * ours["outside_compute"])
        if row["torch"] is not None:
            assert row["torch"]["predicted_step_s"] > 0 and row["ratio_to_torch"] > 0
            assert row["best_ratio_to_torch"] > 0
            assert len(row["torch"]["ranks_cpu_s"]) == row["stages"]


def test_workspan_runs_on_a_small_model_and_prints_work_and_span(monkeypatch, capsys,
                                                                 tmp_path):
    # the scale-out figure from its predictions, where matplotlib is there to draw it
    figure = tmp_path / "scaleout.png"
    plot = ["--plot", str(figure)] if importlib.util.find_spec("matplotlib") else []
    out, rows = quick(monkeypatch, capsys, tmp_path, "--stages", "2", "--width", "64",
                      "--batch", "32", "--micro", "4", *plot)
    assert "16 x Linear(w, w)" in out and "batch 32, 1F1B at m=4" in out
    assert [(r["stages"], r["width"]) for r in rows] == [(2, 64)]
    check_tables(out, rows)
    assert figure.exists() == bool(plot)


@pytest.mark.bench
def test_workspan_quick(monkeypatch, capsys, tmp_path):
    out, rows = quick(monkeypatch, capsys, tmp_path)
    check_tables(out, rows)


@pytest.mark.parametrize("argv, named", [
    (["workspan", "--stages", "3"], "workspan: --stages 3"),
    (["workspan", "--stages", "8", "--micro", "4"], "workspan: --micro 4"),
    (["workspan", "--batch", "50"], "workspan: --batch 50"),
])
def test_what_workspan_cannot_run_is_refused_before_it_starts(argv, named, capsys):
    assert main(["bench", *argv]) == 1
    assert named in capsys.readouterr().err
