"""Optimizers on complex parameters, as torch steps them: each complex element's real and
imaginary parts are stepped as two real numbers (torch views the parameter, its gradient and
its state as real pairs), while the state keeps the parameter's complex dtype and ``step``
stays a real counter. Each case runs a few steps on a complex parameter and a real one in the
same optimizer, in disthook and in torch, and compares the parameters and the state dict."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

def _numpy(value):
    return value.detach().numpy() if hasattr(value, "detach") else value


def test_rprop_on_float64_takes_its_etas_at_full_width():
    """Rprop's growth and shrink factors were made float32 (where() of Python numbers) and
    then widened: a float64 step size grew by 1.2000000476837158, not torch's 1.2."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(6)

    def run(lib):
        w = lib.nn.Parameter(lib.tensor(w0))
        opt = lib.optim.Rprop([w], lr=0.1, foreach=False)
        for _ in range(3):
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()
        return _numpy(w), _numpy(opt.state[w]["step_size"])

    for got, want in zip(run(disthook), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
