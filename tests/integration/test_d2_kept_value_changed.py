"""A part's output passed on to another part, which changes it in place (a forward pre-hook
on a layer of that part, ``args[0].mul_(-1)``): in one process the program's tensor changes,
its version counter moves, and a backward through the op that saved it (tanh keeps its
result) raises torch's "modified by an inplace operation". Deployed, the value stayed on the
worker that computed it and went to the other part's worker as a copy: the change reached
only that copy, the program's tensor kept its old value and version, and the backward ran on
the old saved value without a word (the F1 fuzzer's seed 1666). The part's answer now says
that it changed that argument, as it says of the program's own tensors, and the client's
tensor takes the new value and version: the backward raises as one process's does."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _First(nn.Module):
    def __init__(self, last: str):
        super().__init__()
        self.lin, self.last = nn.Linear(3, 3), last

    def forward(self, x):
        y = self.lin(x)
        return {"tanh": y.tanh, "sigmoid": y.sigmoid, "none": lambda: y}[self.last]()


class _Second(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x)


class _Two(nn.Module):
    def __init__(self, last: str):
        super().__init__()
        self.a, self.b = _First(last), _Second()

    def forward(self, x):
        self.mid = self.a(x)  # (the program reads it after the call)
        return self.b(self.mid)


def _made(last):
    def make():
        torch.manual_seed(0)
        return _Two(last)
    return make


def _run(model):
    model.b.lin.register_forward_pre_hook(lambda m, args: (args[0].mul_(-1), None)[1])
    x = torch.tensor([[0.1, 0.2, -0.3], [0.5, -0.4, 0.2]])
    out = model(x)
    log = {"mid": model.mid.detach().numpy().copy(), "version": model.mid._version,
           "out": out.detach().numpy().copy()}
    try:
        out.pow(2).sum().backward()
    except RuntimeError as e:
        log["error"] = str(e)
    else:
        log["grads"] = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    return log


@pytest.mark.filterwarnings("ignore:the backward failed after")
@pytest.mark.parametrize("where", [{"stages": 2}, {"placement": {"a": 0, "b": 0}, "stages": 1}],
                         ids=["two workers", "one worker"])
@pytest.mark.parametrize("last", ["tanh", "sigmoid", "none"])
def test_a_hook_changes_another_part_s_output_in_place(cluster, where, last):
    got, want = deployed_run(cluster, _made(last), _run, **where)
    assert want["version"] == got["version"] == 1
    np.testing.assert_allclose(got["mid"], want["mid"], rtol=1e-6)
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-5, atol=1e-6)
    if last == "none":  # nothing saved the value: the backward goes through, as there
        assert "error" not in got, got.get("error")
        for name, g in want["grads"].items():
            np.testing.assert_allclose(got["grads"][name], g, rtol=1e-5, atol=1e-6)
        return
    assert "modified by an inplace operation" in want["error"]
    assert got.get("error") == want["error"]  # (which names the op: output 0 of Tanh)
