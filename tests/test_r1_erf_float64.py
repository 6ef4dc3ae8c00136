"""erf in float64 to float64's precision (it was to 1e-7, float32's: GELU, Normal's cdf and
erf of a float64 program differed from torch's from the 7th digit). Against math.erf, and
against torch when it is installed."""
import math

import numpy as np
import pytest

import disthook

X = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, 1.0, 2.0, 3.5, 6.0, -6.0, 1e-300,
                                               -5e-324, 26.0, np.inf, -np.inf, np.nan]])


def test_erf_of_float64_is_good_to_its_last_digits():
    got = disthook.erf(disthook.tensor(X, dtype=disthook.float64)).numpy()
    want = np.array([math.erf(v) for v in X])
    np.testing.assert_allclose(got, want, rtol=2e-15, atol=5e-16)
    assert np.signbit(got[X == 0]).tolist() == np.signbit(X[X == 0]).tolist()
    assert got.dtype == np.float64


def test_erf_of_float32_keeps_float32s_precision():
    got = disthook.erf(disthook.tensor(X, dtype=disthook.float32)).numpy()
    want = np.array([math.erf(v) for v in X.astype(np.float32)])
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-7)
    assert got.dtype == np.float32


@pytest.mark.parametrize("call", [
    lambda lib, t: lib.nn.functional.gelu(t),
    lambda lib, t: lib.distributions.Normal(0.3, 1.7).cdf(t),  # float32 parameters
    lambda lib, t: lib.distributions.Normal(lib.tensor(0.3, dtype=lib.float64),
                                            lib.tensor(1.7, dtype=lib.float64)).cdf(t),
    lambda lib, t: lib.special.erf(t * 0.5) * t,
], ids=["gelu", "normal-cdf", "normal64-cdf", "special-erf"])
def test_float64_programs_that_use_erf_agree_with_torch_to_1e_14(call):
    torch = pytest.importorskip("torch")
    out = []
    for lib in (torch, disthook):
        t = lib.tensor(np.linspace(-4, 4, 41), dtype=lib.float64, requires_grad=True)
        y = call(lib, t)
        y.sum().backward()
        out.append((y.detach().numpy(), t.grad.numpy()))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-13, atol=1e-15)
