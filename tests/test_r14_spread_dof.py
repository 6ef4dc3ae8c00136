"""var / std with no degree of freedom left (R14): a REINFORCE episode of one step normalises
its returns with ``returns.std()``; a PPO minibatch of one row, its advantages. torch gives NaN
(or inf) values and gradients with a warning; disthook's backward raised ZeroDivisionError,
and a correction past the count gave a negative variance."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("op", ["var", "std", "std_mean", "var_mean"])
@pytest.mark.parametrize("data, kwargs", [
    ([[1.0, 2.0, 3.0]], {"dim": 0}),               # one sample per column, unbiased
    ([0.5], {}),                                    # one value
    ([1.0, 2.0], {"correction": 3}),                # correction past the count
    ([1.0, 2.0, 4.0], {"correction": 0}),           # an ordinary one, unchanged
])
def test_no_degree_of_freedom_left_is_torchs_nan_or_inf(op, data, kwargs):
    got = []
    for lib in (disthook, torch):
        x = lib.tensor(data, dtype=lib.float64, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = getattr(lib, op)(x, **kwargs)
            first = out[0] if isinstance(out, tuple) else out
            first.sum().backward()
        words = [str(w.message) for w in caught if "degrees of freedom" in str(w.message)]
        got.append((first.detach().numpy(), np.isfinite(x.grad.numpy()), len(words) > 0))
    np.testing.assert_allclose(got[0][0], got[1][0], equal_nan=True)
    np.testing.assert_array_equal(got[0][1], got[1][1])
    assert got[0][2] == got[1][2]


def test_reinforce_one_step_episode_normalised_returns():
    for lib in (disthook, torch):
        logp = lib.tensor([-0.7], requires_grad=True)
        returns = lib.tensor([1.5])
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        (-(logp * returns).sum()).backward()
        assert np.isnan(logp.grad.numpy()).all()
