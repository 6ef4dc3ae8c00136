"""A checkpoint holds the model as it is now: the values on the workers of its placed
tensors, and the tensors here — a root's own parameters and buffers kept on the client, a
part replaced after the deploy (whose worker still holds the copy it replaced) — so that
load_checkpoint, cluster.load and recover() give back what the program had."""
import os
import signal

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Scaled(nn.Module):
    """Its own parameter and buffer stay on the client (the tree placement)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4) * 3)
        self.register_buffer("count", torch.zeros(1))
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    def forward(self, x):
        self.count += 1
        x = x * self.scale
        for b in self.blocks:
            x = torch.tanh(b(x))
        return x


def make_chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 2))


def surgery(model):
    torch.manual_seed(5)
    model[2] = nn.Linear(8, 8)  # a new part, run on the client from now on
    model[3] = nn.GELU()


X = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
Y = torch.randn(6, 2, generator=torch.Generator().manual_seed(4))


def step(model, opt) -> float:
    opt.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def state(model) -> dict:
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k, value in want.items():
        np.testing.assert_allclose(got[k], value, rtol=1e-6, atol=1e-7, err_msg=k)


def test_the_tensors_kept_on_the_client_are_saved_and_loaded(cluster, tmp_path):
    torch.manual_seed(0)
    model = cluster.deploy(Scaled(), stages=2)
    try:
        model(torch.ones(2, 4))
        want = state(model)
        model.save(str(tmp_path / "ck"))
        with torch.no_grad():
            model.scale.mul_(0)
            model.blocks[0].weight.mul_(0)
        model.count.zero_()
        model.load_checkpoint(str(tmp_path / "ck"))
        same(state(model), want)
        again = cluster.load(str(tmp_path / "ck"))
        try:
            same(state(again), want)
        finally:
            again.close()
    finally:
        model.close()


def test_a_part_replaced_after_the_deploy_is_saved_as_it_is_here(cluster, tmp_path):
    local = make_chain()
    surgery(local)
    lopt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
    model = cluster.deploy(make_chain(), stages=2)
    try:
        surgery(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            assert step(model, opt) == pytest.approx(step(local, lopt), rel=1e-5)
        want = state(model)
        same(want, state(local))
        model.save(str(tmp_path / "ck"), optimizer=opt, step=2)
        for _ in range(2):
            step(model, opt)  # moves on; the checkpoint brings it back
        assert model.load_checkpoint(str(tmp_path / "ck"), optimizer=opt) == 2
        same(state(model), want)
        assert step(model, opt) == pytest.approx(step(local, lopt), rel=1e-5)  # momentum too
    finally:
        model.close()


def test_recover_after_surgery_goes_on_from_the_changed_model(tmp_path):
    local = make_chain()
    surgery(local)
    lopt = torch.optim.SGD(local.parameters(), lr=0.1)
    for _ in range(2):
        step(local, lopt)
    with local_cluster(workers=2, restart=True) as cluster:
        model = cluster.deploy(make_chain(), stages=2)
        surgery(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            step(model, opt)
        model.save(str(tmp_path / "ck"), optimizer=opt, step=2)
        step(model, opt)  # lost with the worker
        victim = model.workers()[1][1]
        os.kill(next(w.pid for w in cluster.workers() if w.id == victim), signal.SIGKILL)
        with pytest.raises(WorkerLost):
            step(model, opt)
        assert model.recover(optimizer=opt) == 2
        assert type(model[3]) is nn.GELU
        for _ in range(2):
            assert step(model, opt) == pytest.approx(step(local, lopt), rel=1e-5)
        same(state(model), state(local))
