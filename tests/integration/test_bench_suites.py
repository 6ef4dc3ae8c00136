"""Every ``disthook bench`` suite runs under ``--quick`` and prints its table (scaleout and
tenancy have tests of their own). Nothing here asserts a time or a ratio: the figures of a
shared machine say nothing in a test."""
import pytest

from disthook.bench import runner
from disthook.cli import main

pytestmark = pytest.mark.timeout(300)

# suite -> lines its output must hold (a table's header words, in order within the line)
EXPECTED = {
    "engine": [("case", "baseline", "disthook", "ratio", "target"), ("MLP",), ("tiny ops",)],
    "nn": [("case", "baseline", "disthook", "ratio", "target"), ("CNN",), ("hook cost",)],
    "dist": [("case", "baseline", "disthook", "ratio", "target"), ("client hook round trip",),
             ("16 MiB activation",), ("2 workers",)],
    "toolkit": [("case", "baseline", "disthook", "ratio", "target"), ("run_with_cache",),
                ("cache: 31 client forward hooks",), ("trace: 31 client full bwd hooks",)],
    "pipeline": [("schedule", "m", "step", "speedup", "limit", "bubble"), ("gpipe", "8"),
                 ("1f1b", "8"), ("target at m = 8",)],
    "scaling": [("workers", "step", "coordinator CPU/step"), ("8",)],
    "peers": [("case", "peer", "disthook", "ratio", "target"), ("torch RPC",),
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


@pytest.mark.parametrize("suite", sorted(EXPECTED))
def test_every_suite_runs_quick_and_prints_its_table(suite, monkeypatch, capsys):
    if suite == "peers":
        pytest.importorskip("torch", reason="bench peers measures torch's own tools")
    for var in runner.THREAD_VARS:  # as the runner's child: it then runs in this process
        monkeypatch.setenv(var, "1")
    assert main(["bench", suite, "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"disthook bench {suite}:"), out[:200]
    for words in EXPECTED[suite]:
        assert holds(out, words), f"{suite}: no line with {words} in\n{out}"
