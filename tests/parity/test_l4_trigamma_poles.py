"""trigamma (polygamma(1, x)) at its poles and at -inf (L4): inf here at every non-positive
integer and at -inf; torch reflects there through sin(pi x) as rounded, which is not 0 off
x = 0 (about 6.6e32 at -1, 63.6 at -1e20) and nan at -inf. Now the same."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

XS = [float("-inf"), -1e20, -2.0**52, -1e5, -7.0, -3.0, -2.0, -1.0, -0.0, 0.0, -1.5, 0.5, 3.0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["special", "method", "torch"])
def test_trigamma_at_poles_and_minus_inf_matches_torch(form, dtype):
    def values(lib):
        x = lib.tensor(XS, dtype=getattr(lib, dtype))
        if form == "special":
            return np.asarray(lib.special.polygamma(1, x).tolist())
        if form == "method":
            return np.asarray(x.polygamma(1).tolist())
        return np.asarray(lib.polygamma(1, x).tolist())

    rtol = 1e-9 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(values(disthook), values(torch), rtol=rtol)
