"""Saving a deployed tensor's ``.data``, putting another value in, and putting the saved one
back (a canonizer that merges batch norm into the layer before it and undoes it after, a
parameter modifier that loads changed weights with ``load_state_dict(..., assign=True)``
and loads the originals again): in one process the tensor takes new memory and the saved
``.data`` keeps the old values, so the model comes back as it was. Deployed, the saved
``.data`` must not follow the new value."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def made():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    with torch.no_grad():
        model[1].running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
        model[1].running_var.copy_(torch.tensor([1.5, 0.5, 2.0, 1.0]))
    return model.eval()


def swaps(model):
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    seen = [model(x).tolist()]
    linear, bn = model[0], model[1]
    # a canonizer: save .data, assign merged values, assign the saved ones back
    saved_w, saved_b = linear.weight.data, linear.bias.data
    saved_mean = bn.running_mean.data
    scale = bn.weight.data / (bn.running_var.data + bn.eps) ** 0.5
    linear.weight.data = saved_w * scale[:, None]
    linear.bias.data = (saved_b - saved_mean) * scale + bn.bias.data
    bn.running_mean.data = torch.zeros(4)
    seen.append(saved_w.tolist())  # the saved .data kept the old values
    seen.append(saved_mean.tolist())
    linear.weight.data, linear.bias.data = saved_w, saved_b
    bn.running_mean.data = saved_mean
    seen.append(model(x).tolist())
    # a parameter modifier through load_state_dict(assign=True), then the originals back
    original = {name: p.data for name, p in model[2].named_parameters()}
    model[2].load_state_dict({k: v.clamp(min=0) for k, v in original.items()}, assign=True)
    seen.append(model(x).tolist())
    model[2].load_state_dict(original, assign=True)
    seen.append(model(x).tolist())
    # an in-place write through .data still reaches the tensor, as in one process
    data = model[2].bias.data
    data.add_(1.0)
    seen.append([data.tolist(), model[2].bias.tolist()])
    return seen


def test_saved_data_keeps_its_values_when_the_tensor_takes_new_ones(cluster):
    expected = swaps(made())
    assert expected[0] == expected[3] and expected[3] != expected[4]
    remote = cluster.deploy(made(), stages=2)
    try:
        got = swaps(remote)
    finally:
        remote.close()
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(e), rtol=1e-6, atol=1e-6)
