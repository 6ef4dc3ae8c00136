"""torch.remainder's zero results keep the dividend's sign (L5): -4 % 2 and -0.0 % 2 are -0.0,
4 % -2 is 0.0. numpy's remainder gives a zero the divisor's sign, so the signs came out the
other way round here; 1 / result then read -inf for inf. The nonzero, inf and nan results
were already as torch's. The divisor's gradient, -floor(a / b), read -0.0 for -5 by inf
(torch's floor division gives -1, so its gradient is 1): now a // b, torch's floor division,
which numpy's floor_divide also got wrong for floats there (-5.0 // inf gave -0.0)."""
from __future__ import annotations

import math

import pytest

import disthook

torch = pytest.importorskip("torch")

A = [-0.0, 0.0, -4.0, 4.0, 4.0, -4.0, 5.0, -5.0, 5.0, -5.0, math.inf, math.nan, 1e-30, -1e-30,
     -7.5, 7.5, 3.0]
B = [2.0, -2.0, 2.0, -2.0, 2.0, -2.0, math.inf, math.inf, -math.inf, -math.inf, 2.0, 2.0, 1.0,
     1.0, 2.5, -2.5, 0.0]


def signed(values):
    """Each value with its sign, zeros' included (a nan's sign means nothing: left out)."""
    return [(v, math.copysign(1.0, v)) if not math.isnan(v) else "nan" for v in values]


@pytest.mark.parametrize("kind", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("form", ["tensor", "scalar", "operator", "reversed", "in place"])
def test_remainder_values_and_zero_signs_as_torch(kind, form):
    def run(lib):
        a = lib.tensor(A, dtype=getattr(lib, kind))
        b = lib.tensor(B, dtype=getattr(lib, kind))
        if form == "tensor":
            out = lib.remainder(a, b)
        elif form == "scalar":
            out = lib.remainder(a, -2.0)
        elif form == "operator":
            out = a % 2.0
        elif form == "reversed":
            out = -6.0 % b
        else:
            out = a.clone().remainder_(b)
        return str(out.dtype).rsplit(".", 1)[-1], signed(out.float().tolist())

    assert run(disthook) == run(torch)


def test_remainder_gradients_as_torch():
    def run(lib):
        a = lib.tensor(A[:10] + [-7.5, 7.5], dtype=lib.float64, requires_grad=True)
        b = lib.tensor(B[:10] + [2.5, -2.5], dtype=lib.float64, requires_grad=True)
        lib.remainder(a, b).sum().backward()
        return signed(a.grad.tolist()), signed(b.grad.tolist())

    assert run(disthook) == run(torch)


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_floor_division_of_floats_as_torch(kind):
    def run(lib):
        a = lib.tensor(A, dtype=getattr(lib, kind))
        b = lib.tensor(B, dtype=getattr(lib, kind))
        return signed((a // b).tolist()), signed(lib.floor_divide(a, -2.5).tolist())

    assert run(disthook) == run(torch)


@pytest.mark.parametrize("form", ["%", "//", "-", "*"])
def test_number_first_with_a_bfloat16_tensor_keeps_bfloat16(form):
    """-6.1 % x and -6.1 // x of a bfloat16 x gave float32 here (the number, taken in float32,
    came first into the op's plain forward); torch's result is bfloat16, the number rounded to
    bfloat16 first."""
    def run(lib):
        x = lib.tensor([0.3, -2.5, 7.0], dtype=lib.bfloat16)
        out = {"%": lambda: -6.1 % x, "//": lambda: -6.1 // x, "-": lambda: 0.1 - x,
               "*": lambda: 0.1 * x}[form]()
        return str(out.dtype).rsplit(".", 1)[-1], out.float().tolist()

    assert run(disthook) == run(torch)
