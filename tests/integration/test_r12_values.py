"""Values kept on a worker, reshaped on the client by the model's own forward: where their
layout on the worker has gaps (a slice), ``reshape``/``flatten`` copy, as in one process, also
when the value was read here already (a read makes a dense copy, and a view of it would be a
read-only alias of no tensor). VICReg's and Barlow Twins' ``off_diagonal(c).pow_(2)``."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


def off_diagonal(x):
    n = x.shape[0]
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class VICRegLike(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a, self.b = nn.Linear(3, width), nn.Linear(width, width)

    def forward(self, x):
        z = self.b(self.a(x).relu())
        z = z - z.mean(dim=0)
        cov = (z.T @ z) / (x.shape[0] - 1)
        return off_diagonal(cov).pow_(2).sum() + z.var(dim=0).mean()


@pytest.mark.parametrize("width", [3, 12])  # the value with the call's answer, or kept there
def test_off_diagonal_written_in_place_is_one_process_s(cluster, width):
    torch.manual_seed(0)
    model, x = VICRegLike(width), torch.randn(6, 3)
    want = model(x)
    want.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    deployed = cluster.deploy(model, stages=2)
    try:
        got = deployed(x)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
        for g, p in zip(grads, deployed.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-5, atol=1e-7)
    finally:
        deployed.close()


@pytest.mark.parametrize("read_first", [False, True])
def test_flatten_of_a_kept_slice_is_a_copy(cluster, read_first):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 9), nn.Linear(9, 9))
    deployed = cluster.deploy(model, stages=2)
    try:
        kept = deployed(torch.randn(9, 3))
        want = kept.detach().numpy().reshape(-1)[:-1].reshape(8, 10)[:, 1:].reshape(-1)
        part = kept.flatten()[:-1].view(8, 10)[:, 1:]  # (temporaries between)
        assert not part.is_contiguous()
        if read_first:
            part.detach().numpy()
        flat = part.flatten()
        assert flat._base is None  # a copy, as torch makes of a slice with gaps
        flat.detach().mul_(0.0)  # a copy of its own: writable, the kept value unchanged
        np.testing.assert_array_equal(flat.detach().numpy(), np.zeros_like(want))
        np.testing.assert_array_equal(part.reshape(-1).detach().numpy(), want)
        assert part.reshape(8, 9)._base is not None  # a view where the layout allows one
    finally:
        deployed.close()
