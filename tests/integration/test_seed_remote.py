"""The seeds' programs with their model deployed (one line inserted) print what they print
in one process: seed 000's model with no children and a legacy backward hook registered in
its constructor (deployed whole on one worker), seed 001's SaveValues (the forward hook's
input and output of l2 and the full backward hook's gradients, captured on the worker that
owns l2 and handed to the client's hooks), seed 002's MyNet with a legacy backward hook on the
whole model (it sees the last op's gradients, on the last worker) and a tensor hook on the
input, and seed 004's shape printer, feature extractor and gradient clipper."""
import io
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.test_seed_module_hooks import (  # noqa: E402
    SEED_000_A,
    SEED_000_B,
    SEED_001,
    SEED_002,
    SEED_004_CLIPPER,
    SEED_004_FEATURES,
    SEED_004_SHAPES,
    as_disthook,
)

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2  # conftest's shared cluster, for the programs run in this process

REPORT = """
for name in ("input", "output", "grad_input", "grad_output"):
    print(name, getattr(value, name).detach().tolist())
print("y", y.detach().tolist(), "loss", loss.item())
"""

# the line inserted: the model deployed on ``cluster``, which ``run`` hands the program (a
# shared cluster: a program that starts its own is run as a script, below)
DEPLOY = """\
model = cluster.deploy(Net(), stages=2)
"""


def run(source: str, cluster=None) -> str:
    out = io.StringIO()
    namespace = {"__name__": "__main__"}
    if cluster is not None:
        namespace["cluster"] = cluster
    with redirect_stdout(out):
        exec(compile(source, "<seed 001>", "exec"), namespace)
    if cluster is not None:
        assert len(namespace["model"].workers()) == 2
        namespace["model"].close()
    return out.getvalue()


def test_seed_001_save_values_on_two_workers_prints_the_same(cluster):
    program = "import disthook\ndisthook.manual_seed(0)\n" + as_disthook(SEED_001) + REPORT
    assert program.count("model = Net()\n") == 1
    local = run(program)
    remote = run(program.replace("model = Net()\n", DEPLOY), cluster)
    assert local.count("\n") == 5 and "None" not in local
    assert remote == local


def test_a_warning_raised_on_a_worker_reaches_the_client(cluster):
    """Seed 001 on l1: the input needs no grad, so torch warns that the full backward hook
    fires with respect to the outputs; the worker owning l1 warns, the client shows it."""
    import warnings

    from parity.test_seed_module_hooks import NO_INPUT_GRAD_WARNING, SEED_001_ON_L1

    program = as_disthook(SEED_001_ON_L1).replace("model = Net()\n", DEPLOY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(program, cluster)
    got = [(w.category.__name__, str(w.message)) for w in caught]
    assert got == [NO_INPUT_GRAD_WARNING]


@pytest.mark.parametrize("program,before", [
    (SEED_004_SHAPES, "verbose_model = VerboseExecution(model)\n"),
    (SEED_004_FEATURES, 'feature_extractor = FeatureExtractor(model, layers=["1", "2.0"])\n'),
    (SEED_004_CLIPPER, "clipped_model = gradient_clipper(model, 0.3)\n"),
], ids=["shapes", "features", "clipper"])
def test_seed_004_programs_on_two_workers_print_the_same(program, before, cluster):
    """The model deployed right before the wrapper takes it; every line the same (the
    features' grad_fn names too), but for a printed model, which shows where each part
    lives."""
    program = as_disthook(program)
    assert program.count(before) == 1
    local = run(program)
    remote = run(program.replace(before, DEPLOY.replace("Net()", "model") + before), cluster)
    if "print(verbose_model)" in program:  # the printed tree is marked with the workers
        local, remote = local.split("VerboseExecution(")[0], remote.split("VerboseExecution(")[0]
    assert remote == local


@pytest.mark.parametrize("program,line,stages", [
    (SEED_000_A, "model = Model4cxq()\n", 1),
    (SEED_000_B, "model = Model4cxq()\n", 1),
    (SEED_002, "    net = MyNet()\n", 2),
], ids=["000-a", "000-b", "002"])
def test_seeds_000_and_002_deployed_print_the_same(tmp_path, program, line, stages):
    """Run as scripts (their classes are found on the workers by importing them; seed 000
    starts its cluster unguarded, after its classes)."""
    program = as_disthook(program)
    assert program.count(line) == 1
    indent = line[:len(line) - len(line.lstrip())]
    name = line.split("=")[0].strip()
    deploy = "".join(f"{indent}{text}\n" for text in (
        "from disthook.distributed import local_cluster",
        f"cluster = local_cluster(workers={stages})",
        f"{name} = cluster.deploy({name}, stages={stages})"))
    outputs = []
    for i, source in enumerate((program, program.replace(line, line + deploy))):
        script = tmp_path / f"seed_{i}.py"
        script.write_text(source + ("\ncluster.close()\n" if i and not indent else ""))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, check=False, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[1] == outputs[0]
