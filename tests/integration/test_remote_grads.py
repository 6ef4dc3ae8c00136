"""The gradient utilities on a deployed model's parameters: clip_grad_norm_ and
clip_grad_value_ measure and clip on the workers exactly as one process does, and
``p.grad = ...`` / ``p.requires_grad = ...`` / ``p.data = ...`` set them there."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3))


def backward(model, x):
    (model(x) * 10).pow(2).sum().backward()


def grads_of(model):
    if hasattr(model, "named_gradients"):
        return {n: g.numpy() for n, g in model.named_gradients().items()}
    return {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_clips_on_the_workers_like_one_process(cluster, stages, norm_type):
    x = torch.randn(4, 6)
    local = make_net()
    backward(local, x)
    expected_norm = nn.utils.clip_grad_norm_(local.parameters(), 1.0, norm_type=norm_type)
    remote = cluster.deploy(make_net(), stages=stages)
    try:
        backward(remote, x)
        norm = nn.utils.clip_grad_norm_(remote.parameters(), 1.0, norm_type=norm_type)
        assert norm.dtype == expected_norm.dtype
        np.testing.assert_allclose(norm.numpy(), expected_norm.numpy(), rtol=1e-6)
        assert expected_norm.item() > 1.0  # it did clip
        assert_same(grads_of(remote), grads_of(local))
    finally:
        remote.close()


def test_clip_grad_norm_over_local_and_remote_parameters_together(cluster):
    """A client-side head after a deployed body: one norm over both, as in one process."""
    x = torch.randn(4, 6)
    torch.manual_seed(5)
    head = nn.Linear(3, 2)
    torch.manual_seed(5)
    head_remote_run = nn.Linear(3, 2)
    local = make_net()
    head(local(x)).pow(2).sum().backward()
    expected = nn.utils.clip_grad_norm_([*local.parameters(), *head.parameters()], 0.5)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        head_remote_run(remote(x)).pow(2).sum().backward()
        got = nn.utils.clip_grad_norm_([*remote.parameters(), *head_remote_run.parameters()],
                                       0.5)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
        assert_same(grads_of(remote), grads_of(local))
        np.testing.assert_allclose(head_remote_run.weight.grad.numpy(),
                                   head.weight.grad.numpy(), rtol=1e-6, atol=1e-7)
    finally:
        remote.close()


def test_clip_grad_value_clamps_on_the_workers(cluster):
    x = torch.randn(4, 6)
    local = make_net()
    backward(local, x)
    nn.utils.clip_grad_value_(local.parameters(), 0.3)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        backward(remote, x)
        nn.utils.clip_grad_value_(remote.parameters(), 0.3)
        assert_same(grads_of(remote), grads_of(local))
    finally:
        remote.close()


def test_grad_and_requires_grad_setters_act_on_the_worker(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    try:
        backward(remote, torch.randn(4, 6))
        w = remote[2].weight
        w.grad = None
        assert w.grad is None and "2.weight" not in remote.named_gradients()
        w.grad = torch.full((8, 8), 0.25)
        np.testing.assert_array_equal(remote[2].weight.grad.numpy(), np.full((8, 8), 0.25))
        with pytest.raises(RuntimeError, match="attempting to assign a gradient of size"):
            w.grad = torch.ones(3)
        with pytest.raises(TypeError, match="expected to be a Tensor or None"):
            w.grad = [1.0]
        del w.grad
        assert w.grad is None
        # .data = t replaces the values on the worker
        remote[4].bias.data = torch.tensor([1.0, 2.0, 3.0])
        np.testing.assert_array_equal(remote[4].bias.detach().numpy(), [1.0, 2.0, 3.0])
        with pytest.raises(RuntimeError, match="keeps its shape"):
            remote[4].bias.data = torch.ones(4)
        # a frozen parameter gets no gradient, as in one process
        remote[0].weight.requires_grad = False
        assert remote[0].weight.requires_grad is False
        remote.zero_grad()
        backward(remote, torch.randn(4, 6))
        grads = remote.named_gradients()
        assert "0.weight" not in grads and "0.bias" in grads
    finally:
        remote.close()
