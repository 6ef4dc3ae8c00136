"""F.interpolate(mode="area") on a 5-D volume (MONAI's deep-supervision targets and resized
label maps): adaptive average pooling of the three spatial dims, as torch. Before, it was
refused with a message that said 5-D inputs were supported."""
import numpy as np
import pytest

import disthook as torch
from disthook.nn import functional as F

CASES = [
    ((2, 3, 5, 6, 7), {"size": (2, 3, 3)}),
    ((1, 2, 4, 4, 6), {"scale_factor": 0.5}),
    ((1, 2, 3, 5, 4), {"size": (6, 7, 4)}),           # growing: each output cell one input
    ((2, 1, 6, 5, 4), {"scale_factor": (0.5, 1.5, 0.75), "recompute_scale_factor": True}),
]


def _run(lib, array, kwargs, transpose):
    x = lib.tensor(array, requires_grad=True)
    y = x.transpose(2, 4) if transpose else x                     # a non-contiguous input
    out = lib.nn.functional.interpolate(y, mode="area", **kwargs)
    weight = lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)))
    (out * weight).sum().backward()
    return out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("shape,kwargs", CASES)
def test_area_on_volumes_matches_torch(shape, kwargs, transpose):
    torch_ = pytest.importorskip("torch")
    array = np.random.default_rng(0).standard_normal(shape)
    got = _run(torch, array, kwargs, transpose)
    want = _run(torch_, array, kwargs, transpose)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_area_on_volumes_is_adaptive_average_pooling():
    x = torch.arange(2 * 4 * 4 * 4, dtype=torch.float32).reshape(1, 2, 4, 4, 4)
    out = F.interpolate(x, size=(2, 2, 2), mode="area")
    assert out.dtype == torch.float32 and out.shape == (1, 2, 2, 2, 2)
    np.testing.assert_array_equal(out.numpy(), F.adaptive_avg_pool3d(x, 2).numpy())
    assert torch.nn.Upsample(scale_factor=2, mode="area")(x).shape == (1, 2, 8, 8, 8)


def test_area_keeps_its_errors():
    x = torch.zeros(1, 1, 2, 2, 2)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=1, mode="area", align_corners=False)
    with pytest.raises(NotImplementedError, match="6D"):
        F.interpolate(torch.zeros(1, 1, 2, 2, 2, 2), size=1, mode="area")
