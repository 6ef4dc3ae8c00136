"""``out=`` on the factories (zeros, ones, empty, full, arange, range, linspace, logspace,
eye), as torch: made in ``out``'s dtype unless ``dtype`` is given (then the two must agree),
written into ``out`` and returned as it. Before, zeros and ones took ``out=`` and left it as
it was; the others refused it (tacotron2's ``torch.arange(0, n, out=torch.LongTensor(n))``)."""
import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

CALLS = {
    "zeros": lambda lib, out: lib.zeros(2, 3, out=out),
    "ones": lambda lib, out: lib.ones((4,), out=out),
    "empty": lambda lib, out: lib.empty(3, out=out).zero_(),
    "full": lambda lib, out: lib.full((2,), 3, out=out),
    "arange": lambda lib, out: lib.arange(0, 5, out=out),
    "linspace": lambda lib, out: lib.linspace(0, 4, 5, out=out),
    "logspace": lambda lib, out: lib.logspace(0, 2, 3, out=out),
    "eye": lambda lib, out: lib.eye(3, out=out),
}


@pytest.mark.parametrize("dtype", ["int64", "float64", "float32"])
@pytest.mark.parametrize("size", [0, 5], ids=["empty-out", "sized-out"])
@pytest.mark.parametrize("name", CALLS)
def test_a_factory_writes_into_out_in_its_dtype(name, size, dtype):
    got = []
    for lib in (torch, disthook):
        out = lib.zeros(size, dtype=getattr(lib, dtype)) if size else lib.empty(0,
                                                                         dtype=getattr(lib, dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = CALLS[name](lib, out)
        assert result is out
        got.append(out)
    assert str(got[1].dtype) == str(got[0].dtype)
    np.testing.assert_allclose(got[1].numpy(), got[0].numpy())


def test_a_dtype_that_is_not_outs_is_refused_as_torch():
    for lib in (torch, disthook):
        with pytest.raises(RuntimeError, match=r"dtype Float does not match dtype of out "
                                               r"parameter \(Long\)"):
            lib.arange(0, 5, dtype=lib.float32, out=lib.zeros(5, dtype=lib.int64))
