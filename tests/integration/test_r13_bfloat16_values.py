"""A deployed model cast with ``.bfloat16()`` (torchinfo's and mixed-precision scripts' habit):
a part called alone answers with a bfloat16 value, sent with its record when small and kept
on the worker when large. The record names bfloat16 by numpy's ``str`` of it (``"<V2"``),
which the client read as a plain void dtype: the small one failed (``ValueError: No cast
function available``), the large one was a tensor of no torch dtype."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


@pytest.mark.parametrize("rows", [2, 300])  # the value inline in the answer, or kept there
def test_a_bfloat16_part_called_alone_is_one_process(cluster, rows):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 3)).bfloat16()
    x = torch.randn(rows, 4).bfloat16()
    want = model[0](x)
    want_sum = model(x).float().sum()
    deployed = cluster.deploy(model, stages=2)
    try:
        got = deployed[0](x)
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        np.testing.assert_array_equal(got.detach().float().numpy(), want.detach().float().numpy())
        out = deployed[2](deployed[1](got))
        assert out.dtype == torch.bfloat16
        np.testing.assert_allclose(out.float().sum().item(), want_sum.item(), rtol=1e-6)
    finally:
        deployed.close()


def test_a_bfloat16_part_backward_gives_bfloat16_gradients(cluster):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).bfloat16()
    x = torch.randn(5, 4).bfloat16().requires_grad_()
    model[0](x).float().pow(2).sum().backward()
    want_x, want_w = x.grad.float().numpy(), model[0].weight.grad.float().numpy()
    x.grad = None
    model.zero_grad()
    deployed = cluster.deploy(model, stages=2)
    try:
        deployed[0](x).float().pow(2).sum().backward()
        assert x.grad.dtype == torch.bfloat16
        np.testing.assert_array_equal(x.grad.float().numpy(), want_x)
        np.testing.assert_array_equal(deployed[0].weight.grad.float().numpy(), want_w)
    finally:
        deployed.close()
