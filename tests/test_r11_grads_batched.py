"""``autograd.grad(..., is_grads_batched=True)``: a Jacobian's rows in one call (dim 0 of
each grad_output is a batch), as torch gives them, with respect to inputs and parameters,
with create_graph, allow_unused and materialize_grads; torch's errors. It raised
NotImplementedError."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def run(lib, fn):
    lib.manual_seed(0)
    x = lib.tensor(np.linspace(-1.0, 1.5, 6).reshape(2, 3), requires_grad=True)
    w = lib.tensor(np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]]), requires_grad=True)
    return fn(lib, x, w)


def same(fn):
    got, expected = run(disthook, fn), run(torch, fn)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
        else:
            np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-12)
            assert tuple(g.shape) == tuple(e.shape)


def test_jacobian_rows_of_inputs_and_weights():
    def fn(lib, x, w):
        out = lib.tanh(x @ w)  # (2, 2)
        eye = lib.eye(4, dtype=lib.float64).reshape(4, 2, 2)
        return lib.autograd.grad(out, (x, w), eye, is_grads_batched=True)
    same(fn)


def test_create_graph_gives_differentiable_rows():
    def fn(lib, x, w):
        out = (x @ w).pow(3).sum(1)
        (jac,) = lib.autograd.grad(out, w, lib.eye(2, dtype=lib.float64),
                                   is_grads_batched=True, create_graph=True)
        return (jac, *lib.autograd.grad(jac.square().sum(), (x, w)))
    same(fn)


def test_two_outputs_unused_and_materialized():
    def fn(lib, x, w):
        a, b = (x * 2).sum(0), x.square().sum(1)
        z = lib.zeros(3, dtype=lib.float64, requires_grad=True)
        gs = (lib.ones(5, 3, dtype=lib.float64), lib.arange(10.0, dtype=lib.float64)
              .reshape(5, 2))
        unused = lib.autograd.grad((a, b), (x, z), gs, is_grads_batched=True,
                                   allow_unused=True, retain_graph=True)
        filled = lib.autograd.grad((a, b), (x, z), gs, is_grads_batched=True,
                                   materialize_grads=True)
        return (*unused, *filled)
    same(fn)


def test_the_graph_is_freed_after_the_call_unless_retained():
    for lib in (disthook, torch):
        x = lib.ones(3, requires_grad=True)
        y = (x * x).exp()
        lib.autograd.grad(y, x, lib.ones(2, 3), is_grads_batched=True)
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            lib.autograd.grad(y, x, lib.ones(3))


@pytest.mark.parametrize("case", ["shape", "sizes"])
def test_errors_are_torchs(case):
    messages = []
    for lib in (disthook, torch):
        x = lib.ones(3, requires_grad=True)
        y = x * 2
        args = ((y,), (lib.ones(4, 2),)) if case == "shape" else (
            (y, y), (lib.ones(2, 3), lib.ones(3, 3)))
        with pytest.raises((RuntimeError, ValueError)) as info:
            lib.autograd.grad(*args[:1], x, args[1], is_grads_batched=True)
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]


def test_functional_jacobian_vectorized():
    def fn(lib, x, w):
        f = lambda v: lib.sin(v @ w)
        return (lib.autograd.functional.jacobian(f, x, vectorize=True),
                lib.autograd.functional.jacobian(f, x, vectorize=True, create_graph=True))
    same(fn)
