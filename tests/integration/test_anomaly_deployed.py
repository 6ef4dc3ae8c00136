"""Anomaly mode on a client with a deployed model: training runs as in one process (the same
gradients), and a NaN gradient of the client's own part of the graph raises torch's error
after the warning with the forward's traceback, as in one process. (The workers do not
check their parts: docs/torch_surface.md, anomaly mode.)"""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


@pytest.fixture(autouse=True)
def anomaly_off():
    torch.set_anomaly_enabled(False)
    yield
    torch.set_anomaly_enabled(False)


def made(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_training_under_anomaly_mode_gives_one_process_gradients(cluster):
    model, local = made(), made()
    cluster.deploy(model, stages=2)
    try:
        x = torch.randn(5, 4, requires_grad=True)
        x_local = x.detach().clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly():
                model(x).square().mean().backward()
                local(x_local).square().mean().backward()
        np.testing.assert_allclose(x.grad.numpy(), x_local.grad.numpy(), rtol=1e-5, atol=1e-7)
        grads = model.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7)
    finally:
        model.close()


def test_a_nan_on_the_client_raises_as_in_one_process(cluster):
    model = made()
    cluster.deploy(model, stages=2)
    try:
        torch.autograd.set_detect_anomaly(True)
        out = model(torch.randn(3, 4))
        loss = (out * torch.tensor([float("nan"), 1.0])).sum()  # the client's node
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' returned nan "
                                                   r"values in its 0th output\.$"):
                loss.backward()
        (w,) = [w for w in caught if issubclass(w.category, UserWarning)]
        text = str(w.message)
        assert text.startswith("Error detected in MulBackward0. Traceback of forward call that "
                               "caused the error:\n")
        assert text.endswith('    loss = (out * torch.tensor([float("nan"), 1.0])).sum()  # '
                             "the client's node\n")
    finally:
        model.close()
