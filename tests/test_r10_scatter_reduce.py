"""``scatter(dim, index, src or value, reduce="add" | "multiply")`` and ``scatter_`` (torch's
older form of scatter_reduce, still in use): torch's values with repeated indices, for a
tensor source and a number, float and int; torch's deprecation warning for a tensor source;
torch's errors for another reduce and for backward. It was a NotImplementedError."""
import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

CALLS = {
    "add-src": lambda lib, x, i: x.scatter(1, i, lib.full((2, 3), 0.5, dtype=x.dtype)
                                           if x.is_floating_point() else lib.full((2, 3), 2),
                                           reduce="add"),
    "multiply-src": lambda lib, x, i: x.scatter(1, i, (lib.arange(6) + 1).reshape(2, 3).to(
        x.dtype), reduce="multiply"),
    "add-value": lambda lib, x, i: x.scatter(1, i, 2, reduce="add"),
    "multiply-value": lambda lib, x, i: x.scatter(1, i, 3, reduce="multiply"),
    "inplace": lambda lib, x, i: x.clone().scatter_(1, i, 2, reduce="multiply"),
    "function": lambda lib, x, i: lib.scatter(x, 1, i, 5, reduce="add"),
    "dim0": lambda lib, x, i: x.scatter(0, i[:, :2] % 2, 1, reduce="add"),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("name", CALLS)
def test_scatter_with_reduce_as_torch(name, dtype):
    got = []
    for lib in (torch, disthook):
        x = lib.arange(12).reshape(2, 6).to(getattr(lib, dtype))
        i = lib.tensor([[0, 0, 5], [2, 1, 2]])  # repeats in both rows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = CALLS[name](lib, x, i)
        got.append((str(out.dtype), out.numpy()))
    assert got[1][0].replace("disthook.", "torch.") == got[0][0]
    np.testing.assert_allclose(got[1][1], got[0][1])


def test_its_warning_and_errors_as_torch():
    for lib in (torch, disthook):
        x = lib.zeros(2, 3, requires_grad=True)
        i = lib.tensor([[0, 0], [2, 1]])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = x.scatter(1, i, lib.ones(2, 2), reduce="add")
        if lib is disthook:  # (torch warns once a process, so its may have gone already)
            assert any("reduce argument of torch.scatter with Tensor src is deprecated"
                       in str(w.message) for w in caught)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a number as the source: no warning
            x.detach().scatter(1, i, 1.0, reduce="add")
        with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
            y.sum().backward()
        with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
            x.detach().scatter(1, i, 1.0, reduce="sum")
