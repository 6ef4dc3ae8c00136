"""A deployed parameter's ``.grad`` after ``backward(create_graph=True)`` (AdaHessian's,
a gradient penalty's first step) carries a graph on its worker: reading it here, the
model's ``state_dict`` walk and ``close()`` give its value, as ``p.grad.detach()`` in one
process (the worker failed with "Can't call numpy() on Tensor that requires grad")."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    """A forward of its own: double backward works through it (docs/distributed.md)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def make():
    torch.manual_seed(0)
    return Net().double()


def backward_with_graph(model):
    torch.manual_seed(1)
    x, y = torch.randn(6, 5, dtype=torch.float64), torch.randint(0, 3, (6,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's reference-cycle warning
        nn.functional.cross_entropy(model(x), y).backward(create_graph=True)


def test_gradients_made_with_a_graph_are_read_as_their_values(cluster):
    local = make()
    backward_with_graph(local)
    expected = {n: p.grad.detach().numpy().copy() for n, p in local.named_parameters()}
    model = cluster.deploy(make(), stages=2)
    try:
        backward_with_graph(model)
        got = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()}
    finally:
        model.close()
    closed = {n: p.grad.detach().numpy() for n, p in model.named_parameters()}
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(closed[name], value, rtol=1e-12, err_msg=name)
