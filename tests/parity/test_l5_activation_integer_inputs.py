"""Activations whose torch kernels take floating types only refuse an integer or bool input as
torch's NotImplementedError (L5). Before, F.gelu and F.silu of an int tensor gave zeros (the
float result cast back into the integer type), F.softplus of a bool tensor all True, and
elu, leaky_relu, mish, hardswish, hardsigmoid, the shrinks and logsigmoid returned integers."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

FORMS = {
    "gelu": lambda F, x: F.gelu(x),
    "gelu tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "silu": lambda F, x: F.silu(x),
    "silu_": lambda F, x: F.silu(x, inplace=True),
    "elu": lambda F, x: F.elu(x),
    "selu": lambda F, x: F.selu(x),
    "celu": lambda F, x: F.celu(x),
    "softplus": lambda F, x: F.softplus(x),
    "leaky_relu": lambda F, x: F.leaky_relu(x),
    "mish": lambda F, x: F.mish(x),
    "hardswish": lambda F, x: F.hardswish(x),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x),
    "hardshrink": lambda F, x: F.hardshrink(x),
    "softshrink": lambda F, x: F.softshrink(x),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "nn.GELU": lambda F, x: (disthook if F is disthook.nn.functional else torch).nn.GELU()(x),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", ["bool", "uint8", "int32", "int64", "float32", "bfloat16"])
def test_activation_refuses_integer_input_as_torch(form, kind):
    def outcome(lib):
        x = lib.tensor([-2, 0, 1, 3] if kind != "uint8" else [2, 0, 1, 3], dtype=getattr(lib, kind))
        try:
            y = FORMS[form](lib.nn.functional, x)
        except (RuntimeError, NotImplementedError) as e:
            return type(e).__name__, str(e).split(";")[0]
        return str(y.dtype).rsplit(".", 1)[-1], y.float().tolist()

    ours, theirs = outcome(disthook), outcome(torch)
    if theirs[0] in ("float32", "bfloat16"):
        assert ours[0] == theirs[0]
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-2, atol=1e-6)
    else:
        assert ours == theirs
