"""``out=`` on torch's functions (the Tensors tutorial of "Learn the Basics" writes
``torch.matmul(t, t.T, out=y3)`` and ``torch.mul(t, t, out=z3)``): the result is written into
the tensor given and that tensor is returned, resized and cast as torch does, refused while an
argument requires grad. Before, every such call was a TypeError."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

LIBS = ["disthook", "torch"]
A = np.arange(6, dtype=np.float32).reshape(2, 3) / 4


def _lib(name):
    return pytest.importorskip(name)


@pytest.mark.parametrize("name", LIBS)
def test_the_tensors_tutorial_writes_into_out(name):
    T = _lib(name)
    t = T.ones(4, 4)
    t[:, 1] = 0
    y3 = T.rand_like(t)
    assert T.matmul(t, t.T, out=y3) is y3
    z3 = T.rand_like(t)
    assert T.mul(t, t, out=z3) is z3
    np.testing.assert_array_equal(y3.numpy(), (t @ t.T).numpy())
    np.testing.assert_array_equal(z3.numpy(), (t * t).numpy())


def _program(T) -> list:
    a = T.tensor(A)
    log = []
    for fn, args in [(T.add, (a, 1.5)), (T.sub, (a, a * 2)), (T.sum, (a, 0)),
                     (T.exp, (a,)), (T.clamp, (a, 0.2, 1.0)), (T.matmul, (a, a.T)),
                     (T.cat, ([a, a], 1)), (T.stack, ([a, a],))]:
        out = T.empty(0)
        got = fn(*args, out=out)
        log += [got is out, out.numpy().copy()]
    values, indices = T.zeros(2), T.zeros(2, dtype=T.long)
    res = T.max(a, 1, out=(values, indices))
    log += [res.values is values, res.indices is indices, indices.numpy().copy()]
    wide = T.zeros(2, 3, dtype=T.float64)
    T.mul(a, 3, out=wide)
    log += [str(wide.dtype), wide.numpy().copy()]
    narrow = T.zeros(3, dtype=T.int32)
    T.add(T.arange(3), 1, out=narrow)
    log += [str(narrow.dtype), narrow.numpy().copy()]
    x = T.ones(3)
    T.add(x, x, out=x)  # the out tensor may be an argument
    log.append(x.numpy().copy())
    w = T.ones(2, 3, requires_grad=True)
    with T.no_grad():
        kept = T.zeros(2, 3)
        T.mul(w, 2, out=kept)
    log += [kept.requires_grad, kept.numpy().copy()]
    return log


def test_results_and_kinds_are_torchs():
    torch = _lib("torch")
    ours, theirs = _program(disthook), _program(torch)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            assert a == b


@pytest.mark.parametrize("name", LIBS)
def test_torchs_errors_and_warning(name):
    T = _lib(name)
    a = T.tensor(A)
    with pytest.raises(RuntimeError, match=r"^mul\(\): functions with out=\.\.\. arguments "
                       "don't support automatic differentiation, but one of the arguments "
                       "requires grad"):
        T.mul(a.requires_grad_(), 2, out=T.empty(0))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                       "output type Long"):
        T.mul(T.tensor(A), 2, out=T.zeros(2, 3, dtype=T.long))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = T.zeros(5)
        T.exp(T.tensor(A), out=out)
    assert tuple(out.shape) == (2, 3)
    assert any("An output with one or more elements was resized" in str(w.message)
               for w in caught)
