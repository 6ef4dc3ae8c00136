"""``div(a, b, rounding_mode="floor" | "trunc")`` of floats, as torch: the quotient rounded as
torch's floor division (-5 / inf floors to -1, where ``floor(a / b)`` gave -0.0 here) and
torch's node, ``DivBackward2``, whose gradients are zeros for both operands. Here the rounding
was taken after a true division, so the gradients went through ``a / b``: NaN where b is 0
or inf (and the node was FloorBackward0 / TruncBackward0)."""
from __future__ import annotations

import math

import pytest

import disthook

torch = pytest.importorskip("torch")

A = [-5.0, 5.0, -0.0, 3.0, 1.0, -7.5, 7.3, -7.3, 0.3, math.nan, math.inf]
B = [math.inf, math.inf, 2.0, -0.0, 0.0, 2.0, -0.7, 3.1, 0.1, 1.0, 2.0]


def signed(values):
    return [(v, math.copysign(1.0, v)) if not math.isnan(v) else "nan" for v in values]


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("kind", ["float16", "bfloat16", "float32", "float64"])
def test_rounded_division_values_node_and_gradients_as_torch(mode, kind):
    results = {}
    for lib in (torch, disthook):
        a = lib.tensor(A, dtype=getattr(lib, kind), requires_grad=True)
        b = lib.tensor(B, dtype=getattr(lib, kind), requires_grad=True)
        q = lib.div(a, b, rounding_mode=mode)
        q.sum().backward()
        results[lib.__name__] = (signed(q.detach().float().tolist()), q.dtype is getattr(
            lib, kind), type(q.grad_fn).__name__, a.grad.float().tolist(),
            b.grad.float().tolist())
    assert results["disthook"] == results["torch"]


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_rounded_division_by_numbers_and_in_place_as_torch(mode):
    for divisor in (2, -0.5, math.inf, -math.inf):
        values = []
        for lib in (torch, disthook):
            x = lib.tensor([-5.0, 2.5, -0.0, 7.0])
            y = x.clone()
            y.div_(divisor, rounding_mode=mode)
            values.append((signed(x.div(divisor, rounding_mode=mode).tolist()),
                           signed(y.tolist())))
        assert values[0] == values[1], divisor


def test_integer_rounded_division_keeps_integers():
    a = disthook.tensor([-7, 7, 9])
    assert disthook.div(a, 2, rounding_mode="floor").tolist() == [-4, 3, 4]
    assert disthook.div(a, 2, rounding_mode="trunc").tolist() == [-3, 3, 4]
    assert disthook.div(a, 2, rounding_mode="floor").dtype is disthook.int64
