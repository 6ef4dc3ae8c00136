"""Backward formulas that need no graph (no create_graph, real float operands, plain
Tensors) run on the arrays and wrap their result once (ops.base.plain_float), without the
op layer: the products of mm, matmul and Linear, ReLU's mask, log_softmax and softmax, a
full mean, indexing. The gradients are the layered path's bit for bit (that path still runs
under create_graph, differentiable as torch's), and torch's values."""
import sys

import numpy as np
import pytest

import disthook
from disthook.ops import base, elementwise

torch = pytest.importorskip("torch")


def _program(lib, dtype=np.float32, create_graph=False):
    """An MLP step's graph: matmul + bias, Linear, ReLU, log_softmax and softmax,
    indexing and a full mean; the gradients of its leaves."""
    rng = np.random.default_rng(3)
    x = lib.tensor(rng.standard_normal((6, 5)).astype(dtype))
    w = lib.tensor(rng.standard_normal((5, 4)).astype(dtype), requires_grad=True)
    b = lib.tensor(rng.standard_normal(4).astype(dtype), requires_grad=True)
    lin = lib.nn.Linear(4, 3).to(getattr(lib, np.dtype(dtype).name))
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(rng.standard_normal((3, 4)).astype(dtype)))
        lin.bias.copy_(lib.tensor(rng.standard_normal(3).astype(dtype)))
    h = lin((x @ w + b).relu())
    rows, y = lib.arange(6), lib.tensor(np.array([0, 2, 1, 1, 0, 2]))
    loss = -h.log_softmax(dim=1)[rows, y].mean() + (h.softmax(dim=-1) ** 2).sum()
    leaves = (w, b, lin.weight, lin.bias)
    return lib.autograd.grad(loss, leaves, create_graph=create_graph)


def _count_ops(monkeypatch) -> list:
    """The op classes Op.apply runs from now on."""
    calls = []
    real = base.Op.apply.__func__
    monkeypatch.setattr(base.Op, "apply", classmethod(
        lambda cls, *a, **k: calls.append(cls.__name__) or real(cls, *a, **k)))
    return calls


def test_a_backward_without_a_graph_runs_no_op(monkeypatch):
    rng = np.random.default_rng(0)
    x = disthook.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    w = disthook.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
    b = disthook.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    lin = disthook.nn.Linear(4, 3)
    h = lin((x @ w + b).relu())
    rows, y = disthook.arange(6), disthook.tensor(np.array([0, 2, 1, 1, 0, 2]))
    loss = -h.log_softmax(dim=1)[rows, y].mean() + (h.softmax(dim=-1) ** 2).sum()
    calls = _count_ops(monkeypatch)
    loss.backward()
    # (NegBackward and PowBackward's formulas are plain methods still)
    assert not {"Mm", "T", "ReluGrad", "Sum", "Exp", "Mul", "Sub", "Expand", "Div",
                "ScatterIndex", "View"} & set(calls), calls
    assert all(t.grad is not None for t in (w, b, lin.weight, lin.bias))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_plain_gradients_are_the_layered_paths_bit_for_bit_and_torchs(dtype):
    plain = _program(disthook, dtype)
    layered = _program(disthook, dtype, create_graph=True)  # every formula through its ops
    theirs = _program(torch, dtype)
    for mine, same, t in zip(plain, layered, theirs):
        assert mine.grad_fn is None and same.grad_fn is not None
        np.testing.assert_array_equal(mine.numpy(), same.detach().numpy())
        np.testing.assert_allclose(mine.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)


def test_under_create_graph_the_formulas_stay_differentiable_as_torchs():
    found = []
    for lib in (disthook, torch):
        grads = _program(lib, np.float64, create_graph=True)
        second = lib.autograd.grad(sum((g * g).sum() for g in grads), grads[0])[0]
        found.append(second.detach().numpy())
    np.testing.assert_allclose(found[0], found[1], rtol=1e-10)


def test_bfloat16_and_complex_operands_take_the_op_layer(monkeypatch):
    a = disthook.randn(3, 4, dtype=disthook.bfloat16, requires_grad=True)
    m = disthook.randn(4, 2, dtype=disthook.bfloat16, requires_grad=True)
    z = disthook.randn(5, dtype=disthook.complex64, requires_grad=True)
    loss = (a @ m).relu().sum().float() + z.mean().abs()
    calls = _count_ops(monkeypatch)
    loss.backward()
    assert "Mm" in calls and "ReluGrad" in calls  # (bfloat16: computed in float32)
    ta = torch.tensor(a.detach().float().numpy()).bfloat16().requires_grad_()
    tm = torch.tensor(m.detach().float().numpy()).bfloat16().requires_grad_()
    (ta @ tm).relu().sum().float().backward()
    np.testing.assert_array_equal(a.grad.float().numpy(), ta.grad.float().numpy())
    tz = torch.tensor(z.detach().numpy(), requires_grad=True)
    tz.mean().abs().backward()
    np.testing.assert_allclose(z.grad.numpy(), tz.grad.numpy(), rtol=1e-6)


def test_a_gradient_that_a_hook_made_a_subclass_takes_the_op_layer(monkeypatch):
    class Marked(disthook.Tensor):
        pass

    x = disthook.randn(3, 4, requires_grad=True)
    w = disthook.randn(4, 2, requires_grad=True)
    h = x @ w
    h.register_hook(lambda g: g.as_subclass(Marked))
    calls = _count_ops(monkeypatch)
    h.sum().backward()
    assert "Mm" in calls
    np.testing.assert_allclose(w.grad.numpy(), x.detach().numpy().T @ np.ones((3, 2)),
                               rtol=1e-6)


def test_an_in_place_update_by_a_tensor_of_its_dtype_takes_no_promotion(monkeypatch):
    """``w -= lr * w.grad`` under no_grad (an SGD step): the operands are alike, so the
    update goes straight to numpy, without promotion's wrapping (10 us a parameter)."""
    tensor_mod = sys.modules["disthook.tensor"]
    w = disthook.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    g = disthook.tensor(np.full((2, 3), 0.5, np.float32))
    promoted = []
    real = tensor_mod.binary_operands
    monkeypatch.setattr(tensor_mod, "binary_operands",
                        lambda a, b: promoted.append(b) or real(a, b))
    with disthook.no_grad():
        w -= g
        w.add_(g, alpha=2)
    assert promoted == []
    np.testing.assert_array_equal(w.detach().numpy(),
                                  np.arange(6.0, dtype=np.float32).reshape(2, 3) + 0.5)
    with disthook.no_grad():
        w -= disthook.tensor(np.ones((2, 3)))  # float64 into float32: promoted, cast back
    assert len(promoted) == 1 and w.dtype == disthook.float32


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5)])
def test_a_full_means_gradient_is_torchs_bit_for_bit(dtype, shape):
    """mean()'s gradient, one value for every element, computed once: the division of
    the broadcast gradient's, bit for bit, in each float dtype and for a 0-d input."""
    v = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    seed = np.array(0.3, dtype)
    found = []
    for lib in (disthook, torch):
        x = lib.tensor(v, requires_grad=True)
        (g,) = lib.autograd.grad(x.mean(), x, lib.tensor(seed))
        found.append(g.numpy())
    assert found[0].shape == shape and found[0].dtype == dtype
    assert found[0].tobytes() == found[1].tobytes()



def _products(lib, dtype):
    """Products by a tensor of the same shape, by a number and by a 0-d tensor, a negation,
    and a product broadcast along a row (the layered path's case): the loss and leaves."""
    rng = np.random.default_rng(5)
    x = lib.tensor(rng.standard_normal((3, 4)).astype(dtype), requires_grad=True)
    y = lib.tensor(rng.standard_normal((3, 4)).astype(dtype), requires_grad=True)
    s = lib.tensor(np.array(1.7, dtype), requires_grad=True)
    r = lib.tensor(rng.standard_normal(4).astype(dtype), requires_grad=True)
    return (-(x * y * 1.0001) * s).sum() + (-(y * r)).sum(), (x, y, s, r)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_products_and_a_negations_gradients_take_no_op_and_are_torchs(monkeypatch, dtype):
    loss, leaves = _products(disthook, dtype)
    calls = []
    for op in (elementwise.Mul, elementwise.Neg):  # (without a graph _binary calls forward)
        real = op.forward
        monkeypatch.setattr(op, "forward", staticmethod(
            lambda ctx, *a, real=real, op=op: calls.append(op.__name__) or real(ctx, *a)))
    plain = disthook.autograd.grad(loss, leaves)
    monkeypatch.undo()
    assert calls == ["Mul"], calls  # (r's, broadcast along its rows)
    loss, leaves = _products(disthook, dtype)
    layered = disthook.autograd.grad(loss, leaves, create_graph=True)
    loss, leaves = _products(torch, dtype)
    theirs = torch.autograd.grad(loss, leaves)
    for mine, same, t in zip(plain, layered, theirs):
        assert mine.grad_fn is None and same.grad_fn is not None
        np.testing.assert_array_equal(mine.numpy(), same.detach().numpy())
        if mine.ndim:  # (s's is a sum of 12 products, added in another order than torch's)
            np.testing.assert_array_equal(mine.numpy(), t.numpy())
        else:
            np.testing.assert_allclose(mine.numpy(), t.numpy(), rtol=1e-6)
