"""Arithmetic with bool tensors, as torch: a subtraction with a bool operand is refused
(two bools: use ``^``; one: use ``~`` to invert a mask), before any promotion; floor and
truncated division, remainder, fmod, power and abs of bools alone (a bool result) are
refused naming torch's kernel. Here ``mask - 1`` and ``x - mask`` were computed in int64 or
float, ``b - b`` was numpy's TypeError, and ``b // b``, ``b % b``, ``b ** b`` came back as
int8 and ``b.abs()`` as bool."""
from __future__ import annotations

import pytest

import disthook
from parity.l6_outcome import outcome

torch = pytest.importorskip("torch")


CALLS = {
    "b - b": lambda lib, b, i, f: b - b,
    "b - 1": lambda lib, b, i, f: b - 1,
    "b - 1.5": lambda lib, b, i, f: b - 1.5,
    "b - True": lambda lib, b, i, f: b - True,
    "True - b": lambda lib, b, i, f: True - b,
    "1 - b": lambda lib, b, i, f: 1 - b,
    "i - b": lambda lib, b, i, f: i - b,
    "b - i": lambda lib, b, i, f: b - i,
    "f - b": lambda lib, b, i, f: f - b,
    "i - True": lambda lib, b, i, f: i - True,
    "sub": lambda lib, b, i, f: lib.sub(i, b),
    "subtract": lambda lib, b, i, f: b.subtract(f),
    "rsub": lambda lib, b, i, f: lib.rsub(i, b),
    "sub_": lambda lib, b, i, f: i.clone().sub_(b),
    "-=": lambda lib, b, i, f: i.clone().__isub__(b),
    "b.sub_(b)": lambda lib, b, i, f: b.clone().sub_(b),
    "b // b": lambda lib, b, i, f: b // b,
    "div floor": lambda lib, b, i, f: lib.div(b, b, rounding_mode="floor"),
    "div trunc": lambda lib, b, i, f: lib.div(b, b, rounding_mode="trunc"),
    "b % b": lambda lib, b, i, f: b % b,
    "b % True": lambda lib, b, i, f: b % True,
    "fmod": lambda lib, b, i, f: lib.fmod(b, b),
    "b ** b": lambda lib, b, i, f: b ** b,
    "abs": lambda lib, b, i, f: b.abs(),
    "absolute": lambda lib, b, i, f: lib.absolute(b),
    # with an integer or float operand they are computed, as torch's
    "b // 2": lambda lib, b, i, f: b // 2,
    "i // b": lambda lib, b, i, f: i // b,
    "b % 2": lambda lib, b, i, f: b % 2,
    "b ** 2": lambda lib, b, i, f: b ** 2,
    "-b": lambda lib, b, i, f: -b,
    "b + b": lambda lib, b, i, f: b + b,
    "b * i": lambda lib, b, i, f: b * i,
    "f.abs": lambda lib, b, i, f: f.abs(),
}


@pytest.mark.parametrize("name", CALLS)
def test_bool_arithmetic_as_torch(name):
    results = []
    for lib in (torch, disthook):
        b = lib.tensor([True, True, False])
        i = lib.tensor([3, 4, 5])
        f = lib.tensor([1.5, 2.0, -1.0])
        results.append(outcome(lambda: CALLS[name](lib, b, i, f)))  # noqa: B023
    assert results[1] == results[0]


def test_float_subtraction_keeps_its_gradient():
    results = []
    for lib in (torch, disthook):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (2 - x - 1).sum().backward()
        results.append(x.grad.tolist())
    assert results[1] == results[0]
