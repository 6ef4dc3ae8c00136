"""A forward hook that replaces a layer's output by one computed under no_grad cuts that
layer's parameters off the graph. A backward whose ``inputs=`` (or an ``autograd.grad``
whose inputs) name only such a parameter runs nothing in one process: the hooks on the
output, a ``register_multi_grad_hook(..., mode="any")`` on it, never fire. Deployed, the
client's node of the call had an edge to every parameter of its part or stages, so the
backward ran it, and those hooks fired (the F1 fuzzer's seed 2048 with extras). The workers
now say which of their parameters the call's graph misses (a chain's stages pass theirs on
to the last), and the node has no edge to them."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _TwoParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
        self.b = nn.Linear(3, 2)

    def forward(self, x):
        return self.b(self.a(x))


def _chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))


def _parts():
    torch.manual_seed(0)
    return _TwoParts()


def _no_grad_output(m, args, out):
    with torch.no_grad():
        return out * -1


def _run(first: str, how: str):
    def run(model):
        model.get_submodule(first).register_forward_hook(_no_grad_output)
        x = torch.tensor([[0.1, 0.2, -0.3], [0.5, -0.4, 0.2], [0.3, 0.3, 0.1],
                          [-0.2, 0.0, 0.9]], requires_grad=True)
        out = model(x)
        log = []
        out.register_hook(lambda g: log.append("out hook"))
        for mode in ("any", "all"):
            torch.autograd.graph.register_multi_grad_hook(
                (out, x), lambda gs, mode=mode: log.append((mode, [g is None for g in gs])),
                mode=mode)
        weight = model.get_submodule(first).weight
        loss = out.pow(2).sum()
        if how == "inputs":
            loss.backward(inputs=[weight])
            log.append(("grad", weight.grad))
        else:
            log.append(("result", torch.autograd.grad(loss, [weight], allow_unused=True)))
        # a later backward that reaches the last layer runs the call's graph
        out2 = model(x)
        out2.register_hook(lambda g: log.append("out2 hook"))
        out2.sum().backward(inputs=[last(model).weight])
        log.append(("last", last(model).weight.grad.numpy().copy()))
        return log
    return run


def last(model):
    return model[2] if isinstance(model, nn.Sequential) else model.b


@pytest.mark.parametrize("how", ["inputs", "autograd.grad"])
@pytest.mark.parametrize("model, deploy", [
    ("chain", {"stages": 2}), ("chain", {"stages": 2, "chunks": 2}), ("parts", {"stages": 2})],
    ids=["chain", "chain-chunks", "parts"])
def test_a_backward_naming_only_parameters_the_graph_misses_runs_nothing(
        cluster, model, deploy, how):
    make, first = (_chain, "0") if model == "chain" else (_parts, "a.0")
    got, want = deployed_run(cluster, make, _run(first, how), **deploy)
    assert want[0] == ("grad", None) if how == "inputs" else want[0] == ("result", (None,))
    assert want[1] == "out2 hook" and len(want) == 3  # (no "out hook", no "any" or "all")
    assert got[:-1] == want[:-1]
    np.testing.assert_allclose(got[-1][1], want[-1][1], rtol=1e-5)
