"""A number raised to a bfloat16 tensor, ``1.1 ** x``, as torch: the number is rounded to
bfloat16 first (1.1 is taken as 1.1015625), and the gradient uses the log of the number as
written. Here the power was taken of the number unrounded: 1.1 ** 7 was 1.9453125 where
torch's is 1.96875, and (-0.3) ** 2 0.08984375 where torch's is 0.09033203125."""
from __future__ import annotations

import math

import pytest

import disthook

torch = pytest.importorskip("torch")

EXPONENTS = [1.0, 2.0, -1.5, 0.3, 7.0, 0.0, 12.5, -3.0]


def shown(values):
    return ["nan" if math.isnan(v) else v for v in values]


@pytest.mark.parametrize("base", [1.1, -0.3, 2.5, 0.7, 3, 10.0, 1e-3, 0.0])
def test_number_to_bfloat16_power_and_gradient_as_torch(base):
    results = []
    for lib in (torch, disthook):
        x = lib.tensor(EXPONENTS, dtype=lib.bfloat16, requires_grad=True)
        y = base ** x
        y.sum().backward()
        results.append((y.dtype == lib.bfloat16, shown(y.float().tolist()),
                        shown(x.grad.float().tolist()),
                        shown(lib.pow(base, x.detach()).float().tolist())))
    assert results[1] == results[0]
