"""special.entr at its edges (L2): the value at 0 is +0 (it was -0), the gradient at +-0 is
+inf (it was nan), and values, gradients and second derivatives at negatives, inf, -inf and
nan are torch's, the signs of zeros and infinities included."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

EDGES = [0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan"), 0.5, 1.0, 3.0]


def _entr_and_grads(lib, dtype_name):
    x = lib.tensor(EDGES, dtype=getattr(lib, dtype_name), requires_grad=True)
    y = lib.special.entr(x)
    (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
    (gg,) = lib.autograd.grad(g.sum(), x)
    return [t.detach().numpy() for t in (y, g, gg)]


def _same_bits(ours, theirs):
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    real = ~np.isnan(theirs)  # a nan's sign bit is the hardware's, not the rule's
    np.testing.assert_array_equal(np.signbit(ours[real]), np.signbit(theirs[real]))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_entr_value_gradient_and_second_derivative_match_torch(dtype_name):
    ours = _entr_and_grads(disthook, dtype_name)
    theirs = _entr_and_grads(torch, dtype_name)
    for a, b in zip(ours, theirs):
        _same_bits(a, b)


def test_entr_records_one_node_as_torch():
    x = disthook.tensor([0.5], requires_grad=True)
    assert type(disthook.special.entr(x).grad_fn).__name__ == "SpecialEntrBackward0"


def test_entr_of_integers_is_float_as_torch():
    ours = disthook.special.entr(disthook.tensor([0, 1, 2]))
    theirs = torch.special.entr(torch.tensor([0, 1, 2]))
    assert str(ours.dtype) == str(theirs.dtype)
    _same_bits(ours.numpy(), theirs.numpy())
