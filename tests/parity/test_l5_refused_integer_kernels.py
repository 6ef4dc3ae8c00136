"""lerp (any integer or bool input), topk, median, nanmedian and kthvalue of a bool tensor and
histc of an integer or bool one are refused as torch refuses them (L5); before, lerp of an
int32 tensor gave float32 (a float weight) or int32, bool median and topk a bool value, histc
of int counts in the input's integer type."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

FORMS = {
    "lerp scalar weight": lambda lib, x: lib.lerp(x, x, 0.5),
    "lerp tensor weight": lambda lib, x: lib.lerp(x, x, x),
    "lerp_": lambda lib, x: x.clone().lerp_(x, 0.5),
    "topk": lambda lib, x: x.topk(2).values,
    "median": lambda lib, x: x.median(),
    "median dim": lambda lib, x: x.median(0).values,
    "nanmedian": lambda lib, x: x.nanmedian(),
    "nanmedian dim": lambda lib, x: x.nanmedian(0).values,
    "kthvalue": lambda lib, x: x.kthvalue(1).values,
    "histc": lambda lib, x: lib.histc(x, 3),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", ["bool", "uint8", "int32", "int64", "float32"])
def test_kernel_refusals_as_torch(form, kind):
    def outcome(lib):
        x = lib.tensor([1, 0, 1, 1], dtype=getattr(lib, kind))
        try:
            y = FORMS[form](lib, x)
        except (RuntimeError, NotImplementedError) as e:
            return type(e).__name__, str(e).split(";")[0]
        return str(y.dtype).rsplit(".", 1)[-1], y.tolist()

    assert outcome(disthook) == outcome(torch)
