"""A model whose forward calls a ``torch.library.custom_op`` with ``register_autograd``,
deployed on 2 workers: the operator travels with the model and runs there; the output and
the gradients are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


@torch.library.custom_op("r21_deployed::squash", mutates_args=())
def squash(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.from_numpy(np.tanh(x.numpy() * k))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.k = inputs[1]


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return grad * (1 - y * y) * ctx.k, None


squash.register_autograd(_backward, setup_context=_setup)


class Squash(nn.Module):
    def forward(self, x):
        return torch.ops.r21_deployed.squash(x, 0.7)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), Squash(), nn.Linear(6, 2), Squash())


def run(model):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    out = model(x)
    out.pow(2).sum().backward()
    return [out.detach().numpy()] + [p.grad.numpy().copy() for p in model.parameters()]


def test_a_deployed_model_calls_its_custom_op_as_one_process(cluster):
    want = run(make_net())
    remote = cluster.deploy(make_net(), stages=2)
    try:
        got = run(remote)
    finally:
        remote.close()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
