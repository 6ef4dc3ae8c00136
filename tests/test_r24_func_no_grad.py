"""torch.func transforms called under the caller's no_grad: they still differentiate inside,
but what they give carries no graph for the outer autograd, as torch's (a MeanFlow-style
target computed with ``with torch.no_grad(): _, dudt = jvp(model, ...)`` then used in a loss
next to a tracked ``model(...)``: a tracked ``dudt`` would add a second gradient)."""
import numpy as np

import disthook as torch
from disthook.func import grad, grad_and_value, jacrev, jvp, vjp


def _t(a, requires_grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


W = [0.5, -1.0, 2.0]
X = [1.0, 2.0, -3.0]
V = [0.3, -0.7, 1.1]


def test_jvp_target_under_no_grad_adds_no_gradient():
    w, x, v = _t(W, requires_grad=True), _t(X), _t(V)

    def f(x):
        return w * x * x

    with torch.no_grad():
        out, dudt = jvp(f, (x,), (v,))
    assert not out.requires_grad and not dudt.requires_grad
    wn, xn, vn = np.array(W), np.array(X), np.array(V)
    np.testing.assert_allclose(dudt.numpy(), 2 * wn * xn * vn)
    u = f(x)
    ((u - dudt) ** 2).sum().backward()
    u_n = wn * xn * xn
    np.testing.assert_allclose(w.grad.numpy(), 2 * (u_n - 2 * wn * xn * vn) * xn * xn)


def test_every_transform_under_no_grad_gives_plain_results():
    w = _t(W, requires_grad=True)
    for x in (_t(X), _t(X, requires_grad=True)):  # a closure weight; the input itself too
        def f(x):
            return (w * x ** 3).sum()

        with torch.no_grad():
            g = grad(f)(x)
            g2, value = grad_and_value(f)(x)
            out, fn = vjp(lambda x: w * x ** 3, x)
            (g3,) = fn(torch.ones(3, dtype=torch.float64))
            o4, d4 = jvp(lambda x: w * x ** 3, (x,), (_t(V),))
            jac = jacrev(lambda x: w * x ** 3)(x)
        wn, xn = np.array(W), np.array(X)
        for r in (g, g2, value, out, g3, o4, d4, jac):
            assert not r.requires_grad and r.grad_fn is None
        for r in (g, g2, g3):
            np.testing.assert_allclose(r.numpy(), 3 * wn * xn ** 2)
        np.testing.assert_allclose(d4.numpy(), 3 * wn * xn ** 2 * np.array(V))
        np.testing.assert_allclose(jac.numpy(), np.diag(3 * wn * xn ** 2))


def test_vjp_fn_follows_the_mode_it_is_called_in():
    w, x = _t(W, requires_grad=True), _t(X)
    with torch.no_grad():
        out, fn = vjp(lambda x: w * x ** 3, x)
    assert not out.requires_grad
    (g,) = fn(torch.ones(3, dtype=torch.float64))  # called tracking: a graph to w, as torch's
    assert g.requires_grad
    g.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 3 * np.array(X) ** 2)
    out, fn = vjp(lambda x: w * x ** 3, x)
    assert out.requires_grad
    with torch.no_grad():
        (g,) = fn(torch.ones(3, dtype=torch.float64))
    assert not g.requires_grad
