"""Tensors that a placed part's graph saved for backward, changed in place by the program
after the call: its argument (a linear layer saves its input) and an output that a later op
of the part saved (``y * y`` beside ``return y``). In one process the backward through the
op that saved it raises torch's "modified by an inplace operation". Deployed, the worker
saved its own copy, which the change never reached, and the backward ran on the old value:
a silently wrong gradient (only an output saved by the op that made it, tanh's result, was
checked). The part's answer now says which of its arguments its graph saved
("saved_args") and which outputs a later op saved ("saved": "later"), and the client's node
of the call checks their versions before its backward, as one process's node does."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _SavesItsOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        self.square = (y * y).sum()  # (a tensor with a graph set on the module: an output)
        return y


class _Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = _SavesItsOutput(), nn.Linear(3, 2)

    def forward(self, x):
        return self.a(x)


def _make():
    torch.manual_seed(0)
    return _Two()


def _outcome(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


@pytest.mark.filterwarnings("ignore:the backward failed after")
@pytest.mark.parametrize("where", [{"stages": 2}, {"placement": {"a": 0, "b": 0}, "stages": 1}],
                         ids=["two workers", "one worker"])
def test_changed_after_the_call_what_the_part_saved(cluster, where):
    def run(model):
        x = torch.tensor([[0.1, 0.2, -0.3], [0.5, -0.4, 0.2]], requires_grad=True)
        log = []
        # an argument the part saved (b's linear keeps its input), changed after the call
        h = x * 2
        out = model.b(h)
        h.mul_(-1)
        log.append(_outcome(lambda: out.sum().backward()))
        # an output a later op of the part saved, changed after the call
        y = model(x)
        y.mul_(-1)
        log.append(_outcome(lambda: (model.a.square + y.sum()).backward()))
        # nothing changed: the same programs compute one process's gradients
        model.zero_grad()
        h = x * 2
        out = model.b(h)
        y = model(x)
        (model.a.square + y.sum() + out.pow(2).sum()).backward()
        log.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
        return log

    got, want = deployed_run(cluster, _make, run, **where)
    for g, w in zip(got[:2], want[:2]):
        assert w is not None and "modified by an inplace operation" in w
        assert g == w  # (which names the tensor as one process does: output 0 of Mul)
    for name, g in want[2].items():
        np.testing.assert_allclose(got[2][name], g, rtol=1e-5, atol=1e-6)


def _chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))


@pytest.mark.filterwarnings("ignore:the backward failed after")
@pytest.mark.parametrize("chunks", [1, 2])
def test_changed_after_the_call_the_input_a_chain_saved(cluster, chunks):
    def run(model):
        x = torch.tensor([[0.1, 0.2, -0.3], [0.5, -0.4, 0.2]], requires_grad=True)
        h = x * 2
        out = model(h)
        h.mul_(-1)
        log = [_outcome(lambda: out.sum().backward())]
        model.zero_grad()
        model(x * 2).pow(2).sum().backward()  # nothing changed: one process's gradients
        log.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
        return log

    got, want = deployed_run(cluster, _chain, run, stages=2, chunks=chunks)
    assert want[0] is not None and "modified by an inplace operation" in want[0]
    assert got[0] == want[0]
    for name, g in want[1].items():
        np.testing.assert_allclose(got[1][name], g, rtol=1e-5, atol=1e-6)
