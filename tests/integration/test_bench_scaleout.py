"""``disthook bench scaleout`` runs (quick, small) and prints its table; torch's pipelining,
which peers and scaleout share, runs at p = 3; values the suites cannot run are refused,
naming them. No timing is asserted."""
import json

import pytest

from disthook.bench import peers, runner
from disthook.bench.stages import Mlp, pipelining_seconds
from disthook.cli import main

pytestmark = pytest.mark.timeout(180)

COLUMNS = ("step", "speedup", "vs torch", "bound", "of bound", "torch pipe", "its speedup",
           "ours/its", "bubble per stage")


def test_scaleout_quick_runs_and_prints_its_table(monkeypatch, capsys, tmp_path,
                                                   bytecode_as_the_environment_sets_it):
    """Torch's fork server (it imports torch) reads torch's installed bytecode."""
    for var in runner.THREAD_VARS:  # as the runner's child: it then runs in this process
        monkeypatch.setenv(var, "1")
    figures = tmp_path / "scaleout.json"
    assert main(["bench", "scaleout", "--quick", "--stages", "2", "--width", "64",
                 "--batch", "64", "--micro", "4", "--json", str(figures)]) == 0
    out = capsys.readouterr().out
    assert "16 x Linear(64, 64)" in out and "batch 64, 1F1B at m=4" in out
    assert "(--quick)" in out and "cores available:" in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("p "))
    for column in COLUMNS:
        assert column in header, column
    [row] = json.loads(figures.read_text())
    assert row["suite"] == "scaleout" and row["stages"] == 2 and row["micro"] == 4
    assert row["bound"] == pytest.approx(2 * 4 / (4 + 2 - 1))
    assert len(row["bubble_measured"]) == 2 and row["cores"] >= 1
    assert row["step_s"] > 0 and row["speedup"] > 0
    try:
        import torch  # noqa: F401
    except ImportError:
        assert row["torch_pipelining_s"] is None
    else:
        assert row["torch_pipelining_s"] > 0 and row["ratio_to_torch_pipelining"] > 0


def three_stages() -> Mlp:
    spec = Mlp((16, 32, 32, 32, 8), peers.cuts(3), batch=24)
    assert spec.stages == 3 and spec.cuts == (1, 2)
    return spec


def test_a_three_stage_model_is_cut_after_layers_one_and_two():
    three_stages()


@pytest.mark.bench
def test_torch_pipelining_runs_at_three_stages():
    """Three torch processes (seconds of imports each); torch pipelining at two stages runs in
    the default run (the scaleout quick run above), this under -m bench."""
    pytest.importorskip("torch", reason="torch is not installed")
    assert pipelining_seconds(three_stages(), "1f1b", micro=3, repeats=1) > 0


@pytest.mark.parametrize("argv, named", [
    (["scaleout", "--stages", "0"], "--stages 0"),
    (["scaleout", "--stages", "2,3"], "--stages 2,3"),
    (["scaleout", "--stages", "8", "--micro", "4"], "--micro 4"),
    (["scaleout", "--batch", "50"], "--batch 50"),
    (["scaleout", "--width", "0"], "--width 0"),
    (["peers", "--stages", "5"], "--stages 5"),
    (["pipeline", "--stages", "2"],
     "--stages applies to the suites peers, scaleout and workspan"),
    (["peers", "--width", "64"], "--width applies to the suites scaleout and workspan"),
])
def test_what_a_suite_cannot_run_is_refused_before_it_starts(argv, named, capsys):
    assert main(["bench", *argv]) == 1
    err = capsys.readouterr().err
    assert "ValueError" in err and named in err


def test_peers_table_at_two_stages_reads_as_before_and_names_the_cuts_of_more(capsys):
    def row(p):
        return {"stages": p, "case": f"{p}-stage step", "torch_s": 0.02, "disthook_s": 0.01,
                "ratio": 0.5, "target": 1.0, "one_torch_process_s": 0.03,
                "peer_vs_one_process": 1.5, "disthook_vs_one_process": 3.0}

    peers.print_rows([row(2)])
    assert "batch 256, cut after layer 2; one torch" in capsys.readouterr().out
    peers.print_rows([row(2), row(3)])
    assert "p=2: cut after layer 2; p=3: cut after layers 1, 2" in capsys.readouterr().out


def test_torch_processes_start_from_a_fork_server_that_imported_torch(monkeypatch):
    """torch's processes (2 to 9 per row of peers, scaleout and workspan) each spent seconds
    of CPU importing torch.distributed when spawned; a fork server imports it once."""
    import multiprocessing.forkserver

    pytest.importorskip("torch", reason="torch is not installed")
    from disthook.bench import stages

    started = {}

    class Done:
        processes = ()

        def join(self, timeout=None):
            return True

    def start_processes(fn, args, nprocs, join, start_method):
        started.update(fn=fn, nprocs=nprocs, start_method=start_method)
        with open(args[-1], "w") as f:
            f.write("0.5")
        return Done()

    monkeypatch.setattr("torch.multiprocessing.start_processes", start_processes)
    monkeypatch.setattr(multiprocessing.forkserver._forkserver, "_preload_modules", ["__main__"])
    assert stages.spawned(stages._pipelining_process, 2, "spec") == 0.5
    assert started == {"fn": stages._pipelining_process, "nprocs": 2,
                       "start_method": "forkserver"}
    preload = multiprocessing.forkserver._forkserver._preload_modules
    assert "torch.distributed.pipelining" in preload and "torch.distributed.rpc" in preload
    assert "disthook.bench.stages" in preload
