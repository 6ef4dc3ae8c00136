"""Very deep graphs: forward + backward through 100_000 chained ops must not hit Python's
recursion limit (in the engine, in graph teardown, or in garbage collection), and the values
must be right. Expected values come from a plain numpy float32 loop, so no torch is needed.
"""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import disthook as torch

N = 100_000


def _float32_power(base: float, n: int, start: np.ndarray) -> np.ndarray:
    """``start * base * base * ...`` (n times) rounded to float32 at every step, like the ops."""
    v = start.astype(np.float32)
    b = np.float32(base)
    for _ in range(n):
        v = v * b
    return v


@pytest.fixture(scope="module")
def low_recursion_limit():
    # a low limit makes any recursive walk fail fast instead of passing by luck
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


def test_chain_of_100k_muls_forward_backward_and_teardown(low_recursion_limit):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(N):
        y = y * 1.0001
    s = y.sum()
    s.backward()
    expected = _float32_power(1.0001, N, np.array([1.0, 2.0]))
    np.testing.assert_allclose(np.array(y.tolist()), expected, rtol=1e-6)
    # d y_i / d x_i is the same product for both elements
    g = _float32_power(1.0001, N, np.array([1.0]))[0]
    np.testing.assert_allclose(np.array(x.grad.tolist()), [g, g], rtol=1e-5)
    assert x.grad.dtype == torch.float32
    assert y.grad_fn.name() == "MulBackward0"
    # dropping the last references frees 100k nodes without recursing
    del y, s
    gc.collect()


def test_chain_of_100k_adds_teardown_without_backward(low_recursion_limit):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x
    for _ in range(N):
        y = y + 0
    assert y.tolist() == [1.0, 2.0, 3.0]
    assert y.requires_grad and not y.is_leaf
    del y  # never backwarded: the whole graph (incl. saved state) is torn down here
    gc.collect()
    assert x.grad is None


def test_deep_graph_with_shared_leaf_accumulates(low_recursion_limit):
    # y = x * w * w * ... (n times): every node also has an edge to w's AccumulateGrad
    n = 20_000
    x = torch.tensor([1.0], requires_grad=True)
    w = torch.tensor([1.00001], requires_grad=True)
    y = x
    for _ in range(n):
        y = y * w
    y.sum().backward()
    wv = float(np.float32(1.00001))
    # dy/dx = w^n; dy/dw = n * w^(n-1) * x
    np.testing.assert_allclose(x.grad.item(), wv ** n, rtol=1e-3)
    np.testing.assert_allclose(w.grad.item(), n * wv ** (n - 1), rtol=1e-3)


def test_deep_graph_autograd_grad_and_retain(low_recursion_limit):
    n = 20_000
    x = torch.tensor([0.5, -0.5], requires_grad=True)
    y = x
    for _ in range(n):
        y = y.exp().log()  # identity, through saved tensors
    (g,) = torch.autograd.grad(y.sum(), x, retain_graph=True)
    np.testing.assert_allclose(np.array(g.tolist()), [1.0, 1.0], rtol=1e-3)
    y.sum().backward()
    np.testing.assert_allclose(np.array(x.grad.tolist()), [1.0, 1.0], rtol=1e-3)
    del y, g
    gc.collect()


def test_deep_graph_repr_and_next_functions_walk(low_recursion_limit):
    n = 20_000
    x = torch.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(n):
        y = y + 1
    assert repr(y) == "tensor([20001.], grad_fn=<AddBackward0>)"
    # walk the chain iteratively through next_functions
    node, depth = y.grad_fn, 0
    while type(node).__name__ != "AccumulateGrad":
        node = node.next_functions[0][0]
        depth += 1
    assert depth == n
    assert node.variable is x
