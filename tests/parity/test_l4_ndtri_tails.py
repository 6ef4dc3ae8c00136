"""special.ndtri in its tails (L4): it was erfinv(2p - 1) * sqrt(2), -inf for every p below
about 1e-17 (2p - 1 rounds to -1: p = 1e-30 gave -inf, torch -11.46) and off by 0.5 near
1 - 1e-16. It is now one op (SpecialNdtriBackward0) with torch's gradient from the output."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

PS = [0.0, 1e-320, 1e-300, 1e-100, 1e-30, 1e-17, 1e-10, 1e-5, 0.01, 0.3, 0.49999, 0.5, 0.50001,
      0.7, 0.975, 0.999999, 1 - 1e-12, 1 - 1e-16, 1.0, -0.1, 1.1, float("nan")]


def _value_and_grad(lib, dtype_name):
    p = lib.tensor(PS, dtype=getattr(lib, dtype_name), requires_grad=True)
    y = lib.special.ndtri(p)
    (g,) = lib.autograd.grad(y.sum(), p)
    return y.grad_fn.name(), np.asarray(y.tolist()), np.asarray(g.tolist())


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_ndtri_values_and_gradients_match_torch_in_the_tails(dtype_name):
    node, value, grad = _value_and_grad(disthook, dtype_name)
    t_node, t_value, t_grad = _value_and_grad(torch, dtype_name)
    assert node == t_node
    rtol = 1e-10 if dtype_name == "float64" else 1e-5
    np.testing.assert_allclose(value, t_value, rtol=rtol, atol=1e-15)
    # (exp(y^2 / 2) multiplies float32's rounding of y by y, ~9 in the far tail)
    np.testing.assert_allclose(grad, t_grad, rtol=rtol * 20, atol=1e-15)
