"""A model with complex parameters whose recurrence is written in closed form (an LRU/S5
layer: Lambda ** t from a complex tensor's power, a complex cumsum of the scaled inputs),
deployed on 2 workers and trained with AdamW: the losses, gradients and parameters are one
process's. Before, the workers refused the complex power and cumsum as one process did."""
import math

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class ClosedFormLRU(nn.Module):
    def __init__(self, width=4, state=3):
        super().__init__()
        self.nu_log = nn.Parameter(torch.linspace(-1.5, -0.5, state, dtype=torch.float64))
        self.theta = nn.Parameter(torch.linspace(0.2, 2.0, state, dtype=torch.float64))
        self.B = nn.Parameter(torch.randn(state, width, dtype=torch.complex128) / math.sqrt(width))
        self.C = nn.Parameter(torch.randn(width, state, dtype=torch.complex128) / math.sqrt(state))

    def forward(self, x):                                   # (batch, length, width), float64
        lam = torch.exp(-torch.exp(self.nu_log) + 1j * self.theta)
        t = torch.arange(x.shape[1], dtype=torch.float64)[:, None]
        powers = lam ** t                                   # (length, state)
        bu = x.to(torch.complex128) @ self.B.T
        states = powers * torch.cumsum(bu / powers, dim=1)
        return (states @ self.C.T).real


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4, dtype=torch.float64), ClosedFormLRU(),
                         nn.Linear(4, 2, dtype=torch.float64))


def train(model):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    y = torch.randn(2, 6, 2, dtype=torch.float64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], None
    for step in range(3):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if step == 0:
            grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    values = {n: v.detach().numpy().copy() for n, v in model.state_dict().items()}
    return losses, grads, values


def test_complex_closed_form_scan_trains_deployed_as_one_process(cluster):
    want = train(make_net())
    remote = cluster.deploy(make_net(), stages=2)
    try:
        got = train(remote)
    finally:
        remote.close()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for part in (1, 2):
        assert got[part].keys() == want[part].keys()
        for name in want[part]:
            assert got[part][name].dtype == want[part][name].dtype, name
            np.testing.assert_allclose(got[part][name], want[part][name], rtol=1e-10,
                                       atol=1e-12, err_msg=name)
