"""Gradients at ties and kinks against torch's (L3). Found different: median() and
nanmedian() over all elements gave the whole gradient to one of tied elements where torch
shares it evenly (MedianBackward0, one node); atan2's at (0, 0) was nan where torch's is 0;
pow's was nan at 0 ** 0 (torch: 0 where the exponent is 0) and 0 for a negative base's
exponent (torch: nan, the log of a negative). The rest are checked so they stay torch's:
max/min/amax/amin/sort/topk/kthvalue/cummax at ties, abs/relu/hardtanh at their kinks, clamp
at its bounds, norms at 0."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

TIES = [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]
KINKS = [[0.0, -0.0, 1.0], [-1.0, 0.0, 2.0]]
NAN_TIES = [[1.0, 2.0], [2.0, float("nan")]]

CASES = {
    "median": (lambda L, x: x.median(), TIES),
    "median_nan": (lambda L, x: x.median(), NAN_TIES),
    "nanmedian": (lambda L, x: x.nanmedian(), NAN_TIES),
    "nanmedian_ties": (lambda L, x: x.nanmedian(), TIES),
    "median_dim": (lambda L, x: x.median(1)[0], TIES),
    "atan2_at_0": (lambda L, x: L.atan2(x, x), KINKS),
    "atan2_y_0": (lambda L, x: L.atan2(x * 0, x), KINKS),
    "pow_0_to_x": (lambda L, x: (x * 0) ** x, TIES),
    "pow_x_to_0": (lambda L, x: x ** (x * 0), KINKS),
    "pow_negative_base": (lambda L, x: (x * 0 - 2) ** x, TIES),
    "pow_0_to_negative": (lambda L, x: (x * 0) ** (-x), TIES),
    "max": (lambda L, x: x.max(), TIES),
    "max_dim": (lambda L, x: x.max(-1, keepdim=True)[0], TIES),
    "min": (lambda L, x: x.min(), TIES),
    "amax": (lambda L, x: x.amax(1), TIES),
    "amin_all": (lambda L, x: x.amin((0, 1)), TIES),
    "sort": (lambda L, x: x.sort(1, descending=True)[0], TIES),
    "topk": (lambda L, x: x.topk(2, 1)[0], TIES),
    "kthvalue": (lambda L, x: x.kthvalue(2, 1)[0], TIES),
    "cummax": (lambda L, x: x.cummax(1)[0], TIES),
    "maximum": (lambda L, x: L.maximum(x, x.flip(1)), TIES),
    "abs": (lambda L, x: x.abs(), KINKS),
    "relu": (lambda L, x: x.relu(), KINKS),
    "hardtanh": (lambda L, x: L.nn.functional.hardtanh(x), [[1.0, -1.0, 0.5], [2.0, -2.0, 0.0]]),
    "clamp": (lambda L, x: x.clamp(0, 2), KINKS),
    "clamp_tensor": (lambda L, x: x.clamp(x.new_tensor([0.0, 1.0, 2.0]), x.new_tensor(2.0)), TIES),
    "norm_at_0": (lambda L, x: (x * 0).norm(dim=1), TIES),
    "norm_inf": (lambda L, x: x.norm(p=float("inf")), TIES),
    "norm_1_at_0": (lambda L, x: (x * 0).norm(p=1), TIES),
}


def _value_and_grad(lib, name, dtype_name):
    f, data = CASES[name]
    x = lib.tensor(data, dtype=getattr(lib, dtype_name), requires_grad=True)
    y = f(lib, x)
    weights = lib.arange(1, y.numel() + 1, dtype=y.dtype).reshape(y.shape)
    (g,) = lib.autograd.grad((y * weights).sum(), x)
    return y.grad_fn.name(), np.asarray(y.tolist()), np.asarray(g.tolist())


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient_at_ties_and_kinks_match_torch(name, dtype_name):
    ours = _value_and_grad(disthook, name, dtype_name)
    theirs = _value_and_grad(torch, name, dtype_name)
    if name.startswith(("median", "nanmedian")):
        assert ours[0] == theirs[0]  # MedianBackward0: one node, as torch's
    for a, b in zip(ours[1:], theirs[1:]):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-6)
