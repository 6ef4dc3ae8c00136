"""Muon beside AdamW on a deployed model (the modded-nanogpt split: matrices to Muon, the rest
to AdamW): each worker steps the parameters it holds, and the values and the momentum
buffers read back here are one process's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, optim

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3, bias=False))


def train(model):
    torch.manual_seed(1)
    matrices = [p for p in model.parameters() if p.ndim == 2]
    muon = optim.Muon(matrices, lr=0.02, momentum=0.95)
    adamw = optim.AdamW([p for p in model.parameters() if p.ndim != 2], lr=3e-3)
    for _ in range(3):
        muon.zero_grad()
        adamw.zero_grad()
        model(torch.randn(5, 6)).pow(2).mean().backward()
        muon.step()
        adamw.step()
    buffers = [muon.state[p]["momentum_buffer"].detach().numpy().copy() for p in matrices]
    return {n: v.detach().numpy().copy() for n, v in model.state_dict().items()}, buffers


def test_muon_steps_a_deployed_model_as_one_process(cluster):
    want_values, want_buffers = train(make_net())
    remote = cluster.deploy(make_net(), stages=2)
    try:
        got_values, got_buffers = train(remote)
    finally:
        remote.close()
    assert got_values.keys() == want_values.keys()
    for name, want in want_values.items():
        np.testing.assert_allclose(got_values[name], want, rtol=1e-6, atol=1e-7, err_msg=name)
    for got, want in zip(got_buffers, want_buffers):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
