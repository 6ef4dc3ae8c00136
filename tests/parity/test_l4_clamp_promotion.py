"""clamp, clip, clamp_min and clamp_max promote as torch (L4): a bool tensor clamped by Python
ints stayed bool (torch: int64), an integer tensor's clamp_min/clamp_max by a float stayed
integer (torch: the default float), integer tensors clamped by an int and a float32 tensor
became float64 (torch: float32), and bool bounds on a bool tensor computed where torch
refuses. clamp_min(None) was a no-op (torch: TypeError)."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]
NUMBERS = [0, 2, -1, 0.5, True, None]
TENSORS = [("int64", [2]), ("float32", 0.5), ("bool", True), ("float64", [1.5]), ("int32", 1),
           ("uint8", 1), None]


def _outcome(lib, dtype, fn, lo, hi):
    x = lib.tensor([0, 1, 1], dtype=getattr(lib, dtype))

    def bound(b):
        return lib.tensor(b[1], dtype=getattr(lib, b[0])) if isinstance(b, tuple) else b

    try:
        if fn == "clamp_min":
            y = x.clamp_min(bound(lo))
        elif fn == "clamp_max":
            y = x.clamp_max(bound(hi))
        else:
            y = getattr(lib, fn)(x, bound(lo), bound(hi))
    except (TypeError, RuntimeError, NotImplementedError) as e:
        return type(e).__name__
    return str(y.dtype).rsplit(".", 1)[-1], y.tolist()


def _pairs(values):
    return [(lo, hi) for lo in values for hi in values]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["clamp", "clip"])
@pytest.mark.parametrize("lo,hi", _pairs(NUMBERS) + _pairs(TENSORS))
def test_clamp_dtype_and_values_match_torch(dtype, fn, lo, hi):
    assert _outcome(disthook, dtype, fn, lo, hi) == _outcome(torch, dtype, fn, lo, hi)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["clamp_min", "clamp_max"])
@pytest.mark.parametrize("bound", NUMBERS + TENSORS)
def test_one_sided_clamp_dtype_and_values_match_torch(dtype, fn, bound):
    assert (_outcome(disthook, dtype, fn, bound, bound)
            == _outcome(torch, dtype, fn, bound, bound))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("fn", ["clamp", "clamp_min", "clamp_max"])
@pytest.mark.parametrize("bound", [-1, -255, -256, 255, 256, 2**15, -2**15 - 1, 2**31, -2**32,
                                   2**63 - 1])
def test_integer_bound_out_of_range_wraps_or_raises_as_torch(dtype, fn, bound):
    """uint8 clamped at -1 is clamped at 255 (torch wraps it), and a bound the type cannot
    hold is torch's RuntimeError, not a clip at a value the tensor never reaches."""
    def outcome(lib):
        x = lib.tensor([0, 1, 100], dtype=getattr(lib, dtype))
        try:
            y = getattr(x, fn)(bound) if fn != "clamp" else x.clamp(bound, None)
        except RuntimeError as e:
            return str(e)
        return str(y.dtype).rsplit(".", 1)[-1], y.tolist()

    assert outcome(disthook) == outcome(torch)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "float32"])
@pytest.mark.parametrize("lo,hi", [(0, 2), (0.5, None), (True, None), (None, -1), (-1, 1.5)])
def test_inplace_clamp_refuses_a_result_type_the_tensor_cannot_hold(dtype, lo, hi):
    """bool.clamp_(0, 2) stayed bool and int64.clamp_(0.5) stayed int64; torch refuses."""
    def outcome(lib):
        x = lib.tensor([0, 1, 3], dtype=getattr(lib, dtype))
        try:
            x.clamp_(lo, hi)
        except (RuntimeError, NotImplementedError) as e:
            return type(e).__name__, str(e).split(" desired")[0]
        return x.tolist()

    assert outcome(disthook) == outcome(torch)
