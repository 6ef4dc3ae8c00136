"""Every ``disthook bench`` suite runs under ``--quick`` and prints its table (scaleout and
tenancy have tests of their own). Nothing here asserts a time or a ratio: the figures of a
shared machine say nothing in a test. Every suite runs here on a small model, each comparison
timed once: the suites' own ``--quick`` runs take 10 s to minutes each on 2 cores and are
marked ``bench`` (``pytest -m bench``)."""
import importlib

import pytest

from disthook.bench import runner
from disthook.cli import main

pytestmark = pytest.mark.timeout(300)

# suite -> lines its output must hold (a table's header words, in order within the line)
EXPECTED = {
    "engine": [("case", "baseline", "disthook", "ratio"), ("MLP",), ("tiny ops",), ("Adam",)],
    "nn": [("case", "baseline", "disthook", "ratio"), ("CNN",), ("hook cost",)],
    "dist": [("case", "baseline", "disthook", "ratio"), ("client hook round trip",),
             ("MiB activation, one stage hop",), ("2 workers",)],
    "toolkit": [("case", "baseline", "disthook", "ratio"), ("run_with_cache",),
                ("cache:", "client forward hooks"), ("trace:", "client full bwd hooks")],
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


# What makes each suite small in the default run: (module, {name: value}), and every
# comparison timed for one round (``ONE_ROUND``). The tables print the same rows, each case
# run through the same code; the suites' own --quick runs take 10 s to minutes each on 2
# cores (most of the default run's time under load) and are marked ``bench``.
SMALL = {
    "engine": ("engine", {"MLP_SIZES": (32, 16, 16, 16, 10), "MLP_BATCH": 8,
                          "CHAIN_OPS": 20}),
    "nn": ("engine", {"CNN_BATCH": 2, "ATTENTION_SHAPE": (2, 2, 8, 4), "HOOKED_WIDTH": 8,
                      "HOOKED_BATCH": 4}),
    "dist": ("dist", {"ARRAY_MIB": 1}),
    "toolkit": ("toolkit", {"WIDTH": 16, "LAYERS": 4, "BATCH": 4}),
    "pipeline": ("pipeline", {"BATCH": 64, "WIDTH": 32, "BLOCKS": 2, "MICRO": (1, 8),
                              "QUICK_REPEATS": 1}),
    "scaling": ("scaling", {"WORKERS": (1, 2), "LAYERS": 4, "WIDTH": 8}),
    "peers": ("peers", {"SIZES": (16, 32, 32, 32, 4), "BATCH": 32, "MICRO": 4,
                        "QUICK_REPEATS": 1, "QUICK_ROUNDS": 1}),
}
# the timing functions each suite's module calls, to run one round of one call
ONE_ROUND = {"engine": ("measure",), "nn": ("measure",), "dist": ("paired",),
             "toolkit": ("paired",)}
# lines of EXPECTED that name a size, and what the small run prints there instead
SMALL_LINES = {("scaling", ("8",)): ("2",)}


def run_quick(suite: str, monkeypatch, capsys, expected=None) -> None:
    """``disthook bench SUITE --quick`` in this process; its table holds EXPECTED's lines,
    and nothing a reader cannot use (the project's targets, ok/MISS marks)."""
    if suite == "peers":
        pytest.importorskip("torch", reason="bench peers measures torch's own tools")
    for var in runner.THREAD_VARS:  # as the runner's child: it then runs in this process
        monkeypatch.setenv(var, "1")
    assert main(["bench", suite, "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"disthook bench {suite}:"), out[:200]
    for words in expected or EXPECTED[suite]:
        assert holds(out, words), f"{suite}: no line with {words} in\n{out}"
    assert "MISS" not in out and "target" not in out, out


def one_round(module, name: str):
    """A stand-in for ``module.<name>`` (``paired`` or ``measure``): the same function, timing
    one round of one call whatever the suite asked for; and the list each call appends to."""
    timing = getattr(module, name)
    calls = []

    if name == "paired":
        def once(fns, repeats, inner=1):
            calls.append(name)
            return timing(fns, 1, 1)
    else:
        def once(workload, libs, repeats, inner, **options):  # (clock=)
            calls.append(name)
            return timing(workload, libs, 1, 1, **options)
    return once, calls


def make_small(suite: str, monkeypatch) -> list:
    """The suite's sizes made small and its timings one round; the list of timing calls."""
    name, sizes = SMALL[suite]
    module = importlib.import_module(f"disthook.bench.{name}")
    for attr, value in sizes.items():
        assert hasattr(module, attr), attr  # a renamed constant must not pass unnoticed
        monkeypatch.setattr(module, attr, value)
    calls: list = []
    for timing in ONE_ROUND.get(suite, ()):
        targets = [module] + ([importlib.import_module("disthook.bench.gpt")]
                              if suite == "dist" else [])
        for target in targets:
            assert hasattr(target, timing), (target.__name__, timing)
            once, seen = one_round(target, timing)
            monkeypatch.setattr(target, timing, once)
            calls.append(seen)
    if suite == "peers":  # without torch's spawned processes (seconds of imports each)
        spawns = []
        monkeypatch.setattr(module, "spawned", lambda *a: spawns.append("rpc") or 0.01)
        monkeypatch.setattr(module, "pipelining_seconds",
                            lambda spec, schedule, *a: spawns.append(schedule) or 0.01)
        calls.append(spawns)
    return calls


@pytest.mark.parametrize("suite", sorted(EXPECTED))
def test_every_suite_prints_its_table_on_a_small_model(suite, monkeypatch, capsys):
    """Each suite's every case, through the same code, on small sizes and one timed round;
    for peers a stand-in times torch's spawned processes (torch pipelining runs in
    test_bench_scaleout). The suites' own --quick runs: ``pytest -m bench``."""
    calls = make_small(suite, monkeypatch)
    expected = [SMALL_LINES.get((suite, words), words) for words in EXPECTED[suite]]
    run_quick(suite, monkeypatch, capsys, expected)
    assert all(calls), f"{suite}: a timing the test made small was never called"
    if suite == "peers":
        assert calls[-1] == ["rpc", "gpipe", "1f1b"]


@pytest.mark.bench
@pytest.mark.parametrize("suite", sorted(EXPECTED))
def test_every_suite_runs_quick_in_full(suite, monkeypatch, capsys):
    run_quick(suite, monkeypatch, capsys)
