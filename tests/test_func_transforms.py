"""torch.func and torch.autograd.functional on disthook's engine: each transform's values
against torch's (float32, 1e-5), composition (grad of grad, vmap of grad, per-example
gradients through functional_call), and torch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

RNG = np.random.default_rng(0)
XS = RNG.standard_normal(3).astype(np.float32)
YS = RNG.standard_normal((4, 3)).astype(np.float32)
W = RNG.standard_normal((2, 3)).astype(np.float32)


def _same(ours, theirs):
    if isinstance(ours, (tuple, list)):
        assert isinstance(theirs, (tuple, list)) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
    elif isinstance(ours, dict):
        assert set(ours) == set(theirs)
        for k in ours:
            _same(ours[k], theirs[k])
    else:
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def func_programs(lib) -> dict:
    F = lib.func
    x, Y = lib.tensor(XS), lib.tensor(YS)

    def f(x):
        return (x.sin() * x).sum()

    lin = lib.nn.Linear(3, 2)
    params = {"weight": lib.tensor(W), "bias": lib.zeros(2)}

    def loss(p, x):
        return F.functional_call(lin, p, (x,)).pow(2).sum()

    out, vjp_fn = F.vjp(lambda x: x.exp() * 2, x)
    return {
        "grad": F.grad(f)(x),
        "grad of grad": F.grad(lambda x: F.grad(f)(x).sum())(x),
        "grad_and_value argnums": F.grad_and_value(lambda a, b: (a * b).sum(),
                                                   argnums=(0, 1))(x, Y[0]),
        "grad has_aux": F.grad(lambda x: ((x * x).sum(), x.mean()), has_aux=True)(x),
        "vjp": (out, vjp_fn(lib.ones(3))),
        "jvp": F.jvp(lambda x: x.exp() * x.sum(), (x,), (lib.ones(3),)),
        "jacrev": F.jacrev(lambda a, b: a.tanh() * b, argnums=(0, 1))(x, Y[0]),
        "jacfwd": F.jacfwd(lambda x: x.tanh() * x.sum())(x),
        "hessian": F.hessian(f)(x),
        "vmap": F.vmap(lambda r, s: (r * s).sum())(Y, lib.ones(4, 3)),
        "vmap in_dims=1": F.vmap(lambda c: (c * lib.arange(4.0)).sum(), in_dims=1)(Y),
        "torch.vmap": lib.vmap(lib.dot, in_dims=(0, None))(Y, x),
        "vmap of grad": F.vmap(F.grad(lambda r: (r.sin() * x).sum()))(Y),
        "vmap out_dims": F.vmap(lambda r: (r, r.sum()), out_dims=(1, 0))(Y),
        "functional_call": F.functional_call(lin, params, (Y,)),
        "grad through functional_call": F.grad(loss)(params, Y),
        "per-example grads": F.vmap(F.grad(loss), in_dims=(None, 0))(params, Y),
        # pytrees in and out (the neural tangent kernel recipe's Jacobians of a dict)
        "jacrev of a dict": F.jacrev(lambda p: F.functional_call(lin, p, (Y,)))(params),
        "jacrev argnums of dicts": F.jacrev(lambda p, q: (p["a"] * q["b"]).sin(),
                                            argnums=(0, 1))({"a": x}, {"b": Y[1]}),
        "jacrev to a dict": F.jacrev(lambda a: {"s": a.sin(), "t": (a * a.sum(),)})(x),
        "vmap of jacrev of a dict": F.vmap(F.jacrev(
            lambda p, r: F.functional_call(lin, p, (r,))), (None, 0))(params, Y),
        "jvp of a dict": F.jvp(lambda p: F.functional_call(lin, p, (Y,)), (params,),
                               ({k: v * 0.5 + 1 for k, v in params.items()},)),
        "jvp to a dict": F.jvp(lambda a: {"s": a.sin(), "t": (a * a,)}, (x,), (lib.ones(3),)),
    }


def functional_programs(lib) -> dict:
    AF = lib.autograd.functional
    x, Y = lib.tensor(XS), lib.tensor(YS)

    def f(x):
        return (x ** 3).sum() * x[0]

    def two(x, y):
        return x.exp() * y, (y * y).sum(1)

    v = lib.tensor(YS[0])
    return {
        "jacobian": AF.jacobian(f, x),
        "jacobian tuples": AF.jacobian(two, (x, Y)),
        "hessian": AF.hessian(f, x),
        "hessian tuples": AF.hessian(lambda a, b: (a.sin() * b).sum(), (x, Y[1])),
        "vjp": AF.vjp(lambda x: x.tanh() * x.sum(), x, v),
        "jvp": AF.jvp(lambda x: x.tanh() * x.sum(), x, v),
        "vhp": AF.vhp(f, x, v),
        "hvp": AF.hvp(f, x, v),
        "vjp scalar": AF.vjp(f, x),
        "unused input": AF.jacobian(lambda a, b: a * 2, (x, x)),
    }


@pytest.mark.parametrize("programs", [func_programs, functional_programs])
def test_values_are_torchs(programs):
    ours = programs(disthook)
    torch = pytest.importorskip("torch")
    theirs = programs(torch)
    for name in ours:
        _same(ours[name], theirs[name])


def test_values_against_hand_derivatives():
    x = disthook.tensor(XS)
    got = disthook.func.grad(lambda x: (x.sin() * x).sum())(x)
    np.testing.assert_allclose(got.numpy(), np.cos(XS) * XS + np.sin(XS), rtol=1e-5)
    hess = disthook.autograd.functional.hessian(lambda x: (x ** 3).sum(), x)
    np.testing.assert_allclose(hess.numpy(), np.diag(6 * XS), rtol=1e-5, atol=1e-6)
    assert not got.requires_grad and not hess.requires_grad


def test_create_graph_keeps_results_differentiable():
    x = disthook.tensor(XS, requires_grad=True)
    jac = disthook.autograd.functional.jacobian(lambda x: x ** 2, x, create_graph=True)
    assert jac.requires_grad
    jac.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0), rtol=1e-6)


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_errors_are_torchs(lib_name):
    lib = pytest.importorskip(lib_name)
    AF, F = lib.autograd.functional, lib.func
    with pytest.raises(RuntimeError, match="The vector v can only be None if the user-provided "
                       "function returns a single Tensor with a single element."):
        AF.vjp(lambda x: x * 2, lib.ones(2))
    with pytest.raises(RuntimeError, match="The Tensor returned by the function given to "
                       "hessian should contain a single element"):
        AF.hessian(lambda x: x * 2, lib.ones(2))
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either a Tensor "
                       "or a tuple of Tensors but the given inputs has type <class 'list'>."):
        AF.jacobian(lambda x: x, [1.0])
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                       "independent of input 1. This is not allowed in strict mode."):
        AF.jacobian(lambda a, b: a * 2, (lib.ones(2), lib.ones(2)), strict=True)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor"):
        F.grad(lambda x: x * 2)(lib.ones(2))
    with pytest.raises(ValueError, match="Expected all tensors to have the same size in the "
                       "mapped dimension"):
        F.vmap(lambda a, b: a + b)(lib.ones(2), lib.ones(3))


def test_functional_call_puts_the_modules_own_tensors_back():
    lin = disthook.nn.Linear(3, 2)
    weight = lin.weight
    out = disthook.func.functional_call(lin, {"weight": disthook.zeros(2, 3)}, disthook.ones(3))
    np.testing.assert_allclose(out.detach().numpy(), lin.bias.detach().numpy())
    assert lin.weight is weight
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'nope'"):
        disthook.func.functional_call(lin, {"nope": disthook.zeros(1)}, disthook.ones(3),
                                      strict=True)
    assert lin.weight is weight


def test_the_deprecated_stateless_functional_call_is_func_functional_call():
    from disthook.nn.utils import stateless

    model = disthook.nn.Linear(3, 2)
    x = disthook.randn(4, 3)
    given = {"weight": disthook.ones(2, 3), "bias": disthook.zeros(2)}
    with pytest.warns(FutureWarning, match="torch.func.functional_call"):
        out = stateless.functional_call(model, given, (x,))
    assert out.tolist() == disthook.func.functional_call(model, given, (x,)).tolist()


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_aux_comes_back_without_a_graph_unless_an_outer_transform_tracks_it(lib_name):
    """``has_aux``'s aux is handed back as plain tensors (``aux.numpy()`` works), as torch
    unwraps it; inside an outer transform it stays differentiable. disthook gave it back
    requiring grad."""
    lib = pytest.importorskip(lib_name)
    F = lib.func
    x = lib.tensor(XS)
    auxes = [F.grad(lambda x: (x.sin().sum(), {"c": x.cos()}), has_aux=True)(x)[1]["c"],
             F.jacrev(lambda x: (x.sin(), x.sum()), has_aux=True)(x)[1],
             F.vjp(lambda x: (x.sin(), x.cos()), x, has_aux=True)[2],
             F.jvp(lambda x: (x.sin(), x.cos()), (x,), (x,), has_aux=True)[2]]
    for aux in auxes:
        assert not aux.requires_grad and aux.grad_fn is None
        aux.numpy()
    outer = F.grad(lambda y: F.grad(lambda x: ((x ** 3).sum(), x ** 2),
                                    has_aux=True)(y)[1].sum())(x)
    np.testing.assert_allclose(outer.numpy(), 2 * XS, rtol=1e-6)
