"""Seed 001's SaveValues program with its Net deployed on 2 workers prints what it prints in
one process: the forward hook's input and output of l2 and the full backward hook's
gradients, captured on the worker that owns l2 and handed to the client's hooks."""
import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.test_seed_module_hooks import SEED_001, as_disthook  # noqa: E402

pytestmark = pytest.mark.timeout(180)

REPORT = """
for name in ("input", "output", "grad_input", "grad_output"):
    print(name, getattr(value, name).detach().tolist())
print("y", y.detach().tolist(), "loss", loss.item())
"""

DEPLOY = """\
from disthook.distributed import local_cluster
cluster = local_cluster(workers=2)
model = cluster.deploy(Net(), stages=2)
"""


def run(source: str) -> str:
    out = io.StringIO()
    namespace = {"__name__": "__main__"}
    with redirect_stdout(out):
        exec(compile(source, "<seed 001>", "exec"), namespace)
    if "cluster" in namespace:
        assert len(namespace["model"].workers()) == 2
        namespace["cluster"].close()
    return out.getvalue()


def test_seed_001_save_values_on_two_workers_prints_the_same():
    program = "import disthook\ndisthook.manual_seed(0)\n" + as_disthook(SEED_001) + REPORT
    assert program.count("model = Net()\n") == 1
    local = run(program)
    remote = run(program.replace("model = Net()\n", DEPLOY))
    assert local.count("\n") == 5 and "None" not in local
    assert remote == local


def test_a_warning_raised_on_a_worker_reaches_the_client():
    """Seed 001 on l1: the input needs no grad, so torch warns that the full backward hook
    fires with respect to the outputs; the worker owning l1 warns, the client shows it."""
    import warnings

    from parity.test_seed_module_hooks import NO_INPUT_GRAD_WARNING, SEED_001_ON_L1

    program = as_disthook(SEED_001_ON_L1).replace("model = Net()\n", DEPLOY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(program)
    got = [(w.category.__name__, str(w.message)) for w in caught]
    assert got == [NO_INPUT_GRAD_WARNING]
