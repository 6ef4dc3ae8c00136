"""Every script in examples/ runs in one process and on a local cluster (--workers 2), says
what it should, and prints the same numbers both ways."""
import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(240)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NUMBER = re.compile(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?|[-+]?\d+")


def run(script: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def both_ways(script: str, tmp_path: Path, *args: str) -> str:
    """The script's output in one process, checked to equal its output on 2 workers: the
    same text, and the same numbers to float32 precision."""
    local = run(script, *args, cwd=tmp_path)
    distributed = run(script, *args, "--workers", "2", cwd=tmp_path)
    assert NUMBER.sub("#", local) == NUMBER.sub("#", distributed), (local, distributed)
    np.testing.assert_allclose([float(n) for n in NUMBER.findall(distributed)],
                               [float(n) for n in NUMBER.findall(local)], rtol=1e-4, atol=1e-5)
    return local


def test_every_example_is_tested():
    tested = {name for name in globals() if name.startswith("test_")}
    for script in EXAMPLES.glob("*.py"):
        if script.stem != "common":
            assert f"test_{script.stem}" in tested, script.name


def test_feature_extraction(tmp_path):
    out = both_ways("feature_extraction.py", tmp_path)
    assert re.findall(r"shape (\(.*?\))", out) == ["(2, 4, 6, 6)", "(2, 4, 3, 3)", "(2, 10)"]
    relu_mean = float(re.search(r"layer 1 \(ReLU\).*mean ([\d.]+)", out).group(1))
    assert relu_mean > 0


def test_shapes(tmp_path):
    out = both_ways("shapes.py", tmp_path)
    layers = re.findall(r"^\s*(\d) (\w+)\s+\((.*?)\)\s+-> \((.*?)\)$", out, re.MULTILINE)
    assert [kind for _, kind, _, _ in layers] == ["Conv2d", "ReLU", "MaxPool2d", "Conv2d",
                                                  "ReLU", "Flatten", "Linear"]
    for (_, _, _, out_shape), (_, _, in_shape, _) in itertools.pairwise(layers):
        assert out_shape == in_shape  # each layer gets what the one before gave
    assert out.splitlines()[-1] == "output (4, 5)"


def test_gradient_clipping(tmp_path):
    out = both_ways("gradient_clipping.py", tmp_path)
    steps = re.findall(r"loss ([\d.]+), largest \|grad\| ([\d.]+)", out)
    assert len(steps) == 3
    assert all(float(g) <= 0.05 + 1e-6 for _, g in steps)
    losses = [float(loss) for loss, _ in steps]
    assert losses == sorted(losses, reverse=True)


def test_grad_cam(tmp_path):
    out = both_ways("grad_cam.py", tmp_path)
    maps = re.split(r"image \d: class \d, Grad-CAM \(peak 1\):", out)[1:]
    assert len(maps) == 2
    for text in maps:
        values = [float(v) for v in NUMBER.findall(text)]
        assert len(values) == 36 and max(values) == 1.0 and min(values) >= 0.0


def test_activation_patching(tmp_path):
    out = both_ways("activation_patching.py", tmp_path)
    clean = re.search(r"clean\s+logit difference (\S+)", out).group(1)
    corrupted = re.search(r"corrupted logit difference (\S+)", out).group(1)
    patched = dict(re.findall(r"patched units (\d-\d): logit difference (\S+)", out))
    assert clean != corrupted
    assert patched["0-7"] == clean  # patching every unit gives back the clean run
    assert patched["0-3"] != clean and patched["4-7"] != clean


def test_backward_hooks(tmp_path):
    out = both_ways("backward_hooks.py", tmp_path)
    # the seed 000 program's numbers: the legacy hook sees the last op (a subtraction)
    assert "  legacy grad_input:  (tensor([ 8., -6.]), tensor([-8.,  6.]))" in out
    assert ("  full   grad_input:  (tensor([ 16., -12.]), tensor([ 24., -18.]), "
            "tensor([-40.,  30.]))") in out
    # on the Linear layer the full hook's grad_input is the gradient of the layer's input
    full_linear = out.split("full: Linear(3, 2)")[1]
    assert re.search(r"full   grad_input:  \(tensor\(\[\[\S+,\s+\S+,\s+\S+\]\]\),\)",
                     full_linear)


def test_pipeline_training(tmp_path):
    out = both_ways("pipeline_training.py", tmp_path, "--steps", "4", "--every", "2",
                    "--ckpt", str(tmp_path / "ckpt"))
    losses = [float(v) for v in re.findall(r"step \d: loss ([\d.]+)", out)]
    assert len(losses) == 4 and losses == sorted(losses, reverse=True)
    assert out.count("checkpoint of step") == 2
    restored = float(re.search(r"restored from the checkpoint: loss ([\d.]+)", out).group(1))
    assert restored < losses[-1]  # the weights after the last step, saved and loaded


def test_gpt(tmp_path):
    out = both_ways("gpt.py", tmp_path)
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", out)]
    assert len(losses) == 5 and losses[-1] < losses[0]


def test_mnist(tmp_path):
    out = both_ways("mnist.py", tmp_path)
    correct = [int(v) for v in re.findall(r"accuracy (\d+)/48", out)]
    assert len(correct) == 3 and correct[-1] > 40  # it learns: same numbers both ways
