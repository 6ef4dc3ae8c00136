"""Jacobian-vector products through the whole network in the training loss (MeanFlow's
average-velocity target ``u, dudt = jvp(model, (z, r, t), (v, 0, 1))``; a consistency
model's tangent): on a deployed model they give one process's loss and gradients. Through a
chain of stages, whose gradients travel without a graph, jvp cannot be computed (it is two
reverse passes here) and says so, naming jvp and the deploy call that works."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn
from disthook.autograd import functional as AF
from disthook.func import jvp


class Velocity(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.mid = nn.Sequential(nn.SiLU(), nn.Linear(8, 8), nn.LayerNorm(8), nn.SiLU())
        self.out = nn.Linear(8, 2)

    def forward(self, z, r, t):
        return self.out(self.mid(self.inp(torch.cat([z, r[:, None], (t - r)[:, None]], 1))))


def _seeded(build):
    def make():
        torch.manual_seed(0)
        return build().double()
    return make


velocity = _seeded(Velocity)
chain = _seeded(lambda: nn.Sequential(nn.Linear(2, 8), nn.SiLU(), nn.Linear(8, 2)))


def _batch(rs):
    x, e = torch.from_numpy(rs.randn(6, 2)), torch.from_numpy(rs.randn(6, 2))
    t, r = torch.from_numpy(rs.rand(6)), torch.from_numpy(rs.rand(6))
    t, r = torch.maximum(t, r), torch.minimum(t, r)
    return (1 - t[:, None]) * x + t[:, None] * e, e - x, r, t


def meanflow(target_under_no_grad):
    def run(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rs, log = np.random.RandomState(0), []
        for _ in range(2):
            z, v, r, t = _batch(rs)
            tangents = (v, torch.zeros_like(r), torch.ones_like(t))
            if target_under_no_grad:  # the target alone, the prediction a plain call
                with torch.no_grad():
                    _, dudt = jvp(model, (z, r, t), tangents)
                u = model(z, r, t)
            else:
                u, dudt = jvp(model, (z, r, t), tangents)
            assert u.requires_grad and dudt.requires_grad != target_under_no_grad
            err = u - (v - (t - r)[:, None] * dudt).detach()
            loss = (err ** 2).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            log += [np.asarray([loss.item()]), dudt.detach().numpy()]
            log += [p.grad.numpy().copy() for p in model.parameters()]
            opt.step()
        return log
    return run


@pytest.mark.parametrize("under_no_grad", [False, True])
def test_meanflow_step_on_a_tree_is_one_process(cluster, under_no_grad):
    got, want = deployed_run(cluster, velocity, meanflow(under_no_grad))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_jvp_through_a_chain_says_so_and_part_by_part_works(cluster):
    x, v = torch.from_numpy(np.linspace(-1, 1, 6).reshape(3, 2)), torch.ones(3, 2).double()
    want = [d.detach().numpy() for d in jvp(chain(), (x,), (v,))]
    model = cluster.deploy(chain(), stages=2)
    try:
        for call in (lambda: jvp(model, (x,), (v,)), lambda: AF.jvp(model, x, v)):
            with pytest.raises(NotImplementedError, match=r"(?s)^jvp \(torch.func.jvp.*"
                               r"two reverse passes.*chain of stages.*placement="):
                call()
            with torch.no_grad(), pytest.raises(NotImplementedError, match="^jvp "):
                call()
    finally:
        model.close()
    model = cluster.deploy(chain(), stages=2, placement={"0": 0, "1": 0, "2": 1})
    try:
        got = [d.detach().numpy() for d in jvp(model, (x,), (v,))]
    finally:
        model.close()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
