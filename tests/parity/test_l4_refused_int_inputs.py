"""Integer and bool inputs torch refuses (L4): softmax and log_softmax of an integer or bool
tensor without dtype= computed in float32 here (torch: NotImplementedError, its kernels are
floating only), and argmax/argmin of a bool tensor gave an index (torch: RuntimeError)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

FORMS = {
    "softmax last": lambda lib, x: x.softmax(-1),
    "softmax first": lambda lib, x: x.softmax(0),
    "log_softmax": lambda lib, x: x.log_softmax(1),
    "F.softmax": lambda lib, x: lib.nn.functional.softmax(x, -1),
    "F.log_softmax": lambda lib, x: lib.nn.functional.log_softmax(x, 0),
    "softmax with dtype": lambda lib, x: x.softmax(-1, dtype=lib.float64),
    "argmax": lambda lib, x: x.argmax(),
    "argmin dim": lambda lib, x: x.argmin(0),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", ["int64", "int32", "uint8", "bool", "float32"])
def test_integer_and_bool_inputs_refused_or_computed_as_torch(form, kind):
    def outcome(lib):
        x = lib.tensor([[1, 2], [3, 4]], dtype=getattr(lib, kind))
        try:
            y = FORMS[form](lib, x)
        except (RuntimeError, NotImplementedError) as e:
            return type(e).__name__, str(e)
        return str(y.dtype).rsplit(".", 1)[-1], y.tolist()

    ours, theirs = outcome(disthook), outcome(torch)
    if isinstance(theirs[1], list) and theirs[0].startswith("float"):
        assert ours[0] == theirs[0]
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)
    else:
        assert ours == theirs
