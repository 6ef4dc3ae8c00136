"""A tensor of the client on the left of a deployed parameter (``one_hot @ embed.weight``,
GCG's token gradients; ``x + w``, ``x * w``): Python runs the parameter's reflected method
first, and the left tensor keeps its graph, so its gradient is one process's (``@`` left
``x.grad`` None)."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2

OPS = {"matmul": lambda x, w: x @ w, "add": lambda x, w: x + w, "sub": lambda x, w: x - w,
       "mul": lambda x, w: x * w, "div": lambda x, w: x / (w.abs() + 1)}


def made():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))


def grads(model):
    out = {}
    for name, op in OPS.items():
        x = torch.linspace(-1, 1, 16).reshape(4, 4).requires_grad_()
        op(x, model[0].weight).pow(2).sum().backward()
        out[name] = x.grad.numpy()
    return out


def test_a_client_tensor_left_of_a_deployed_parameter_gets_its_gradient(cluster):
    expected = grads(made())
    remote = cluster.deploy(made(), stages=2)
    try:
        got = grads(remote)
        for name in OPS:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, err_msg=name)
    finally:
        remote.close()
