"""i1 and i1e gradients at nan (L4): nan here; torch's backward takes 1/2 wherever |x| is not
above its epsilon, and nan is not, so torch gives 0.5 there (as at 0)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["i1", "i1e"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradient_at_nan_and_zero_matches_torch(name, dtype):
    def grad(lib):
        x = lib.tensor([float("nan"), 0.0, -0.0, 1e-20, -2.0, 3.0], dtype=getattr(lib, dtype),
                       requires_grad=True)
        (g,) = lib.autograd.grad(getattr(lib.special, name)(x).sum(), x)
        return np.asarray(g.tolist())

    # (float32: i0e - i1e (sign + 1/x) cancels a few ulps apart)
    rtol = 1e-6 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(grad(disthook), grad(torch), rtol=rtol)
