"""``number + x``, ``number * x`` and ``number - x`` record the graph torch records: the
tensor's edge first (two edges, the number's None) for add and mul, and one edge for rsub
(``RsubBackward1``). The autograd tutorials walk ``grad_fn.next_functions[0][0]`` from
``c = 2 * b`` to reach ``b``'s node; disthook put the number's empty edge first, so the walk
stopped at None."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

EXPRESSIONS = ["2 * b", "b * 2", "2.5 + b", "b + 2", "2 - b", "0.5 - b", "b - 2", "2 / b",
               "np.float32(3) * b", "np.float64(1.5) - b", "(2 * b).sum() * 3 + 1"]


def _walk(T, expr: str) -> tuple:
    a = T.tensor([0.5, 1.0, 2.0], requires_grad=True)
    b = a.sin()
    out = eval(expr, {"np": np, "b": b})
    edges = [(type(f).__name__ if f is not None else None, nr)
             for f, nr in out.grad_fn.next_functions]
    chain, node = [], out.grad_fn
    while node is not None:
        chain.append(type(node).__name__)
        node = node.next_functions[0][0] if node.next_functions else None
    grad, = T.autograd.grad(out.sum(), a)
    return type(out.grad_fn).__name__, edges, chain, str(out.dtype), grad.numpy()


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_nodes_and_edges_are_torchs(expr):
    torch = pytest.importorskip("torch")
    ours, theirs = _walk(disthook, expr), _walk(torch, expr)
    assert ours[:4] == theirs[:4]
    np.testing.assert_allclose(ours[4], theirs[4], rtol=1e-6)


def test_the_tutorial_walk_reaches_the_leaf():
    a = disthook.linspace(0.0, 1.0, steps=5, requires_grad=True)
    d = 2 * a.sin() + 1
    names = [type(d.grad_fn).__name__]
    node = d.grad_fn
    while node.next_functions:
        node = node.next_functions[0][0]
        names.append(type(node).__name__)
    assert names == ["AddBackward0", "MulBackward0", "SinBackward0", "AccumulateGrad"]


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_number_minus_tensor_keeps_torchs_dtypes_and_bool_error(lib_name):
    T = pytest.importorskip(lib_name)
    assert (2 - T.tensor([1, 2])).dtype == T.int64
    assert (2.5 - T.tensor([1, 2])).dtype == T.float32
    assert (2 - T.tensor([1.0], dtype=T.float64)).dtype == T.float64
    np.testing.assert_array_equal((2.5 - T.tensor([1, 2])).numpy(), [1.5, 0.5])
    for make in (lambda: 2 - T.tensor([True]), lambda: True - T.tensor([1.0])):
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool "
                           "tensor is not supported"):
            make()
