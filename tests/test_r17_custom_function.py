"""Custom ``autograd.Function`` behaviours met in third-party code (R17): a
``once_differentiable`` backward differentiated again raises instead of dropping its term,
and a non-tensor output's gradient slot is ``None`` in backward, as in torch.

Each test runs under disthook and, where installed, torch (which validates the expectation).
"""
from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def close(t, expected):
    np.testing.assert_allclose(np.array(t.tolist(), dtype=np.float64), expected, rtol=1e-12)


def cube_once(T):
    class CubeOnce(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @T.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    return CubeOnce


def test_once_differentiable_twice_raises_not_a_partial_gradient(T):
    # d/dw of (w^3 * w) has a term from the once_differentiable backward: the second
    # backward must refuse it rather than return the other term alone.
    CubeOnce = cube_once(T)
    w = T.tensor([0.5, -1.0, 2.0], dtype=T.float64, requires_grad=True)
    (g,) = T.autograd.grad((CubeOnce.apply(w) * w).sum(), w, create_graph=True)
    close(g, [4 * 0.5 ** 3, 4 * -1.0, 4 * 8.0])
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                                           "was marked with @once_differentiable"):
        g.sum().backward()


def test_once_differentiable_with_constant_incoming_grad_has_no_graph(T):
    CubeOnce = cube_once(T)
    w = T.tensor([1.0, 2.0], dtype=T.float64, requires_grad=True)
    (g,) = T.autograd.grad(CubeOnce.apply(w).sum(), w, create_graph=True)
    assert not g.requires_grad and g.grad_fn is None
    close(g, [3.0, 12.0])


def test_once_differentiable_several_grads_and_a_none(T):
    class MulOnce(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, k):
            ctx.save_for_backward(x, y)
            return x * y * k

        @staticmethod
        @T.autograd.function.once_differentiable
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, g * x, None

    x = T.tensor([1.0, 2.0], dtype=T.float64, requires_grad=True)
    y = T.tensor([3.0, 4.0], dtype=T.float64, requires_grad=True)
    gx, gy = T.autograd.grad((MulOnce.apply(x, y, 1.0) * x).sum(), (x, y), create_graph=True)
    close(gx, [2 * 3.0, 2 * 2.0 * 4.0])
    close(gy, [1.0, 4.0])
    with pytest.raises(RuntimeError, match="once_differentiable"):
        (gx.sum() + gy.sum()).backward()


def test_non_tensor_outputs_get_none_in_backward(T):
    seen = []

    class WithCount(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k, k + 1, "tag"

        @staticmethod
        def backward(ctx, g, g_count, g_tag):
            seen.append((g_count, g_tag))
            return g * ctx.k, None

    x = T.tensor([1.0, 2.0], dtype=T.float64, requires_grad=True)
    y, count, tag = WithCount.apply(x, 3)
    assert (count, tag) == (4, "tag")
    y.sum().backward()
    assert seen == [(None, None)]
    close(x.grad, [3.0, 3.0])


def test_non_tensor_output_beside_unused_tensor_output(T):
    seen = []

    class Split(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, None, x * 3

        @staticmethod
        def backward(ctx, ga, gnone, gb):
            seen.append((gnone, gb.tolist(), str(gb.dtype)))
            return ga * 2 + gb * 3

    x = T.tensor([1.0, 2.0], dtype=T.float64, requires_grad=True)
    a, _, _b = Split.apply(x)
    a.sum().backward()
    assert seen == [(None, [0.0, 0.0], str(T.float64))]  # the unused tensor: zeros
