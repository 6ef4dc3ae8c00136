"""fmod, remainder and % of an integer tensor by a Python int its type cannot hold (L4): an
OverflowError here (uint8 by -1, int8 by 300); torch casts the divisor into the tensor's
type with wraparound (uint8 by -1 divides by 255) and a divisor that wraps to 0 is its
division by zero."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

DIVISORS = [-1, -3, -7, -255, -256, 300, 2**31, -2**15 - 1, 2**40 + 3, 3, 1.5, -2.5]
FORMS = {
    "fmod": lambda lib, x, v: x.fmod(v),
    "remainder": lambda lib, x, v: x.remainder(v),
    "torch.fmod": lambda lib, x, v: lib.fmod(x, v),
    "mod operator": lambda lib, x, v: x % v,
    "fmod_": lambda lib, x, v: x.clone().fmod_(v),
    "remainder_": lambda lib, x, v: x.clone().remainder_(v),
}


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("divisor", DIVISORS)
def test_integer_divisor_wraps_into_the_tensor_type_as_torch(dtype, form, divisor):
    def outcome(lib):
        x = lib.tensor([0, 5, 100, 127], dtype=getattr(lib, dtype))
        try:
            y = FORMS[form](lib, x, divisor)
        except RuntimeError as e:  # (the output type's name in-place is worded apart)
            return str(e).split(" desired")[0]
        # (values compared: a float remainder's zero sign is left aside here)
        return str(y.dtype).rsplit(".", 1)[-1], [v + 0 for v in y.tolist()]

    assert outcome(disthook) == outcome(torch)
