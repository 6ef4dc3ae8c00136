"""Writes to a deployed part's ``_parameters`` / ``_buffers`` dicts that bypass its methods, as
library code makes them (tying and pruning tools, quantizers, thop's ``_buffers.pop``): the
part computes with what the dict holds, as in one process. Before, the worker's copy kept
computing with the tensors it was deployed with: a silent wrong result, and the new
parameter got no gradient."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3))


def _writes(model, x):
    """Outputs and gradients along a series of direct dict writes."""
    outs = [model(x).detach().clone()]
    new = nn.Parameter(model[0].weight.detach() * 0.5)
    old = model[0]._parameters["weight"]
    model[0]._parameters["weight"] = new
    outs.append(model(x).detach().clone())
    model[3]._parameters["bias"] = None
    outs.append(model(x).detach().clone())
    model.eval()
    model[1]._buffers["running_mean"] = torch.full((6,), 0.3)
    outs.append(model(x).detach().clone())
    model.train()
    model(x).pow(2).sum().backward()
    grads = [new.grad.clone(), model[1]._buffers["running_mean"].clone()]
    model[0]._parameters["weight"] = old  # the deployed one back
    outs.append(model(x).detach().clone())
    return outs, grads


def test_direct_dict_writes_compute_as_in_one_process(cluster):
    x = torch.randn(5, 4)
    want = _writes(_net(), x)
    model = cluster.deploy(_net(), stages=2)
    try:
        got = _writes(model, x)
        for g, w in zip(got[0] + got[1], want[0] + want[1]):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
        assert model[3].bias is None
        assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.weight",
                                                            "1.bias", "3.weight"]
    finally:
        model.close()


def test_a_buffer_popped_from_the_dict_goes_on_its_worker_too(cluster):
    """thop's profile: buffers registered on every module, popped from ``_buffers`` after."""
    model = cluster.deploy(_net(), stages=2)
    try:
        x = torch.randn(5, 4)
        model[3].register_buffer("total_ops", torch.zeros(1, dtype=torch.float64))
        model[3]._buffers.pop("total_ops")
        assert "3.total_ops" not in model.state_dict()
        on_workers, _ = deployment_of(model)._all_states()
        assert "3.total_ops" not in on_workers and "3.weight" in on_workers
        assert type(copy.deepcopy(model)[3]._buffers) is dict
        np.testing.assert_allclose(model(x).detach().numpy(), model.to_local()(x).detach().numpy(),
                                   rtol=1e-6)
    finally:
        model.close()
