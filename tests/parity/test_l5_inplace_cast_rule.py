"""In-place ops and out= write a result into the tensor's own dtype under torch's rule (L5):
any integer into any other integer, never complex into real, floating into integer or anything
but bool into bool. Before, numpy's "same_kind" refused uint8 += int16 (torch computes it),
let a bfloat16 tensor take a complex result (it kept the real part; torch refuses), and the
errors named int32/int16/int8 "Long", bfloat16/float16 "Float"."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "complex64"]
FORMS = {
    "add_": lambda x, y: x.add_(y),
    "+=": lambda x, y: x.__iadd__(y),
    "mul_": lambda x, y: x.mul_(y),
    "div_": lambda x, y: x.div_(y),
    "div_ floor": lambda x, y: x.div_(y, rounding_mode="floor"),
    "add out=": lambda x, y: (disthook if isinstance(x, disthook.Tensor) else torch).add(
        x, y, out=x.clone()),
}


def outcome(lib, form, a, b):
    x = lib.ones(2, dtype=getattr(lib, a))
    y = lib.full((2,), 2, dtype=getattr(lib, b))
    try:
        z = FORMS[form](x, y)
    except (RuntimeError, NotImplementedError) as e:
        return "raised", str(e).split(" in disthook")[0]
    return str(z.dtype), z.to(lib.complex128).tolist()


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", ["uint8", "int16", "int32", "bfloat16", "float64", "complex64"])
def test_inplace_result_cast_as_torch(form, a, b):
    ours, theirs = outcome(disthook, form, a, b), outcome(torch, form, a, b)
    if theirs[0] == ours[0] == "raised" and not all("can't be cast" in m
                                                    for m in (theirs[1], ours[1])):
        return  # both refuse for a kernel one lacks (floor of complex): cast errors compared
    assert ours == theirs


@pytest.mark.parametrize("a", ["bool", "int16", "int32", "uint8"])
def test_clamp_inplace_names_the_dtype_as_torch(a):
    def message(lib):
        with pytest.raises(RuntimeError) as e:
            lib.ones(2, dtype=getattr(lib, a)).clamp_(0.5)
        return str(e.value)

    assert message(disthook) == message(torch)


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", DTYPES)
def test_can_cast_as_torch(a, b):
    assert disthook.can_cast(getattr(disthook, a), getattr(disthook, b)) == \
        torch.can_cast(getattr(torch, a), getattr(torch, b))
