"""torch.special's scaled functions far out (L3): erfcx was exp(x^2) * erfc(x), nan above
x ~ 26.6 (inf * 0) where torch's is ~0.564 / x; i0e and i1e were i0(x) * exp(-|x|), nan
above |x| ~ 710; log_ndtr was log(ndtr(x)), -inf below x ~ -38 where torch's is about
-x^2/2. Each is now one op, as torch's, with its gradient."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

FAR = [-1000.0, -40.0, -27.0, -10.0, -1.0, -0.3, 0.0, 0.3, 1.0, 10.0, 24.9, 25.0, 26.0, 27.0,
       40.0, 700.0, 711.0, 1000.0, 1e6, float("inf"), float("-inf")]
NAMES = ["erfcx", "i0e", "i1e", "log_ndtr"]


def _value_and_grad(lib, name, dtype_name):
    x = lib.tensor(FAR, dtype=getattr(lib, dtype_name), requires_grad=True)
    y = getattr(lib.special, name)(x)
    (g,) = lib.autograd.grad(y.sum(), x)
    return y.grad_fn.name(), np.asarray(y.tolist()), np.asarray(g.tolist())


@pytest.mark.parametrize("name", NAMES)
def test_far_values_and_gradients_match_torch_float64(name):
    node, value, grad = _value_and_grad(disthook, name, "float64")
    t_node, t_value, t_grad = _value_and_grad(torch, name, "float64")
    assert node == t_node
    for ours, theirs in ((value, t_value), (grad, t_grad)):
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
        np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_far_values_float32_are_finite_where_torchs_are(name):
    value = _value_and_grad(disthook, name, "float32")[1]
    t_value = _value_and_grad(torch, name, "float32")[1]
    np.testing.assert_array_equal(np.isfinite(value), np.isfinite(t_value))
    np.testing.assert_allclose(value, t_value, rtol=1e-5)


def test_random_points_match_torch():
    x = np.random.default_rng(3).uniform(-60, 60, 500)
    for name in NAMES:
        ours = getattr(disthook.special, name)(disthook.tensor(x)).tolist()
        theirs = getattr(torch.special, name)(torch.tensor(x)).tolist()
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def test_second_derivatives_match_torch():
    x0 = [-30.0, -2.0, 0.5, 3.0, 30.0]
    for name in NAMES:
        grads = []
        for lib in (disthook, torch):
            x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
            (g,) = lib.autograd.grad(getattr(lib.special, name)(x).sum(), x, create_graph=True)
            (gg,) = lib.autograd.grad(g.sum(), x)
            grads.append(np.asarray(gg.tolist()))
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6, atol=1e-150)
