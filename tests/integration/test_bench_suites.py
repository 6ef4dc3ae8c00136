"""Every ``disthook bench`` suite runs under ``--quick`` and prints its table (scaleout and
tenancy have tests of their own). Nothing here asserts a time or a ratio: the figures of a
shared machine say nothing in a test. The two suites that take minutes (pipeline, peers)
run here on a small model, once; their own ``--quick`` runs are marked ``bench``
(``pytest -m bench``)."""
import importlib

import pytest

from disthook.bench import runner
from disthook.cli import main

pytestmark = pytest.mark.timeout(300)

# suite -> lines its output must hold (a table's header words, in order within the line)
EXPECTED = {
    "engine": [("case", "baseline", "disthook", "ratio"), ("MLP",), ("tiny ops",)],
    "nn": [("case", "baseline", "disthook", "ratio"), ("CNN",), ("hook cost",)],
    "dist": [("case", "baseline", "disthook", "ratio"), ("client hook round trip",),
             ("16 MiB activation",), ("2 workers",)],
    "toolkit": [("case", "baseline", "disthook", "ratio"), ("run_with_cache",),
                ("cache: 31 client forward hooks",), ("trace: 31 client full bwd hooks",)],
    "pipeline": [("schedule", "m", "step", "speedup", "limit", "bubble"), ("gpipe", "8"),
                 ("1f1b", "8"), ("1F1B's peak RSS at m = 8 is",)],
    "scaling": [("workers", "step", "coordinator CPU/step"), ("8",)],
    "peers": [("case", "peer", "disthook", "ratio"), ("torch RPC",),
              ("GPipe: torch pipelining",), ("1F1B: torch pipelining",)],
}


def holds(out: str, words: tuple) -> bool:
    """Whether some line of ``out`` has ``words`` in this order."""
    for line in out.splitlines():
        at = 0
        for word in words:
            at = line.find(word, at)
            if at < 0:
                break
            at += len(word)
        else:
            return True
    return False


SLOW = ("peers", "pipeline")  # minutes each, even under --quick
# what makes the slow suites small: (module, {name: value})
SMALL = {
    "pipeline": ("pipeline", {"BATCH": 64, "WIDTH": 32, "BLOCKS": 2, "MICRO": (1, 8),
                              "QUICK_REPEATS": 1}),
    "peers": ("peers", {"SIZES": (16, 32, 32, 32, 4), "BATCH": 32, "MICRO": 4,
                        "QUICK_REPEATS": 1, "QUICK_ROUNDS": 1}),
}


def run_quick(suite: str, monkeypatch, capsys) -> None:
    """``disthook bench SUITE --quick`` in this process; its table holds EXPECTED's lines,
    and nothing a reader cannot use (the project's targets, ok/MISS marks)."""
    if suite == "peers":
        pytest.importorskip("torch", reason="bench peers measures torch's own tools")
    for var in runner.THREAD_VARS:  # as the runner's child: it then runs in this process
        monkeypatch.setenv(var, "1")
    assert main(["bench", suite, "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"disthook bench {suite}:"), out[:200]
    for words in EXPECTED[suite]:
        assert holds(out, words), f"{suite}: no line with {words} in\n{out}"
    assert "MISS" not in out and "target" not in out, out


@pytest.mark.parametrize("suite", sorted(set(EXPECTED) - set(SLOW)))
def test_every_suite_runs_quick_and_prints_its_table(suite, monkeypatch, capsys):
    run_quick(suite, monkeypatch, capsys)


@pytest.mark.parametrize("suite", SLOW)
def test_the_slow_suites_print_their_tables_on_a_small_model(suite, monkeypatch, capsys):
    """Small, and for peers without torch's spawned processes (seconds of imports each; a
    stand-in times them): torch pipelining runs in test_bench_scaleout, and the whole suite
    under -m bench."""
    name, sizes = SMALL[suite]
    module = importlib.import_module(f"disthook.bench.{name}")
    for attr, value in sizes.items():
        assert hasattr(module, attr), attr  # a renamed constant must not pass unnoticed
        monkeypatch.setattr(module, attr, value)
    if suite == "peers":
        spawns = []
        monkeypatch.setattr(module, "spawned", lambda *a: spawns.append("rpc") or 0.01)
        monkeypatch.setattr(module, "pipelining_seconds",
                            lambda spec, schedule, *a: spawns.append(schedule) or 0.01)
    run_quick(suite, monkeypatch, capsys)
    if suite == "peers":
        assert spawns == ["rpc", "gpipe", "1f1b"]


@pytest.mark.bench
@pytest.mark.parametrize("suite", SLOW)
def test_the_slow_suites_run_quick_in_full(suite, monkeypatch, capsys):
    run_quick(suite, monkeypatch, capsys)
