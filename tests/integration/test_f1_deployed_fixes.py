"""What the differential hook fuzzer (test_f1_hook_fuzz.py) found on deployed models, each as
the small program it came down to: a weight tied between two placed parts, its gradient
asked for by ``autograd.grad`` or ``backward(inputs=)`` (only one part's share came back); a
Node hook on the ``grad_fn`` of a placed call's output (it saw the call's inputs' gradients,
not those of the op one process gives it: refused now, saying what to hook instead)."""
import warnings

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Tied(nn.Module):
    """Two layers sharing one weight; its forward runs on the client once deployed, each
    layer a placed part of its own (both on one worker, as ties require)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x).tanh())


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), Tied()])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))


def make():
    torch.manual_seed(0)
    return Root()


def _loss(model):
    x = torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, -0.6]], requires_grad=True)
    return (model(x) * torch.arange(6.).reshape(2, 3)).sum()


@pytest.mark.parametrize("how", ["grad", "inputs", "backward"])
def test_a_tied_weight_gets_both_parts_gradients(cluster, how):
    def run(model):
        w = model.blocks[1].a.weight
        loss = _loss(model)
        if how == "grad":
            return torch.autograd.grad(loss, [w, model.blocks[1].b.bias])[0].numpy().copy()
        loss.backward(**({"inputs": [w]} if how == "inputs" else {}))
        return w.grad.numpy().copy()

    got, want = deployed_run(cluster, make, run)
    assert np.abs(want).max() > 0.1
    same_logs(got, want)


@pytest.mark.parametrize("method", ["register_hook", "register_prehook"])
def test_a_node_hook_on_a_placed_calls_output_is_refused(cluster, method):
    """One process: the post-hook sees AddmmBackward0's three gradients (bias, input,
    weight); the node here stands for the placed call and would see the call's input's."""
    def run(model):
        out = model.blocks[0](torch.ones(2, 3, requires_grad=True))
        getattr(out.grad_fn, method)(lambda *grads: None)
        return out.grad_fn.name()

    assert run(make()) == "AddmmBackward0"
    remote = cluster.deploy(make(), stages=2)
    try:
        with pytest.raises(NotImplementedError,
                           match=rf"grad_fn.{method}\(fn\) on an output of a deployed Root.*"
                                 r"AddmmBackward0 ran on the model's worker.*out.register_hook"):
            run(remote)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _loss(remote).backward()  # the model works on
    finally:
        remote.close()
