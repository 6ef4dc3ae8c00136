"""torch.func transforms under an outer autograd that tracks something other than the
differentiated argument: a closure's weight, an argument not in argnums, a module's parameters
given to functional_call as a dict that the outer loss differentiates through (dataset
distillation, learned step sizes). torch's results keep a graph to that leaf."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.func import functional_call, grad, grad_and_value, jacrev, jvp, vjp


def _t(a, requires_grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def test_grad_of_closure_weight_is_tracked():
    w = _t([0.5, -1.0, 2.0], requires_grad=True)
    x = _t([1.0, 2.0, 3.0])
    g = grad(lambda x: (w * x * x).sum())(x)  # 2 w x
    assert g.requires_grad and g.grad_fn is not None
    np.testing.assert_allclose(g.detach().numpy(), [1.0, -4.0, 12.0])
    g.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0, 6.0])


def test_grad_without_outer_leaf_stays_plain():
    x = _t([1.0, 2.0])
    g, v = grad_and_value(lambda x: (x * x).sum())(x)
    assert not g.requires_grad and g.grad_fn is None and not v.requires_grad


def test_grad_argument_outside_argnums_is_tracked():
    v = _t([1.0, -2.0], requires_grad=True)
    x = _t([3.0, 4.0])
    g = grad(lambda x, v: (v * x ** 3).sum())(x, v)  # 3 v x^2
    g.sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [27.0, 48.0])


def test_inner_step_through_functional_call_reaches_the_data():
    torch.manual_seed(0)
    net = nn.Linear(3, 2).double()
    params = {k: p.detach() for k, p in net.named_parameters()}
    syn = _t(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    real = _t(np.linspace(0.5, -0.5, 9).reshape(3, 3))

    def inner(p, x):
        return (functional_call(net, p, (x,)) ** 2).sum()

    g = grad(inner)(params, syn)
    new = {k: params[k] - 0.1 * g[k] for k in params}
    outer = functional_call(net, new, (real,)).sum()
    outer.backward()
    # by hand: W' = W - 0.2 (W s + b) s^T summed over rows, b' = b - 0.2 sum(W s + b)
    W, b, s, r = (params["weight"].numpy(), params["bias"].numpy(), syn.detach().numpy(),
                  real.numpy())

    def f(s):
        z = s @ W.T + b
        W2, b2 = W - 0.2 * z.T @ s, b - 0.2 * z.sum(0)
        return (r @ W2.T + b2).sum()
    eps, num = 1e-6, np.zeros_like(s)
    for i in np.ndindex(*s.shape):
        d = np.zeros_like(s)
        d[i] = eps
        num[i] = (f(s + d) - f(s - d)) / (2 * eps)
    np.testing.assert_allclose(syn.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_vjp_with_closure_weight_is_tracked():
    w = _t([2.0, 3.0], requires_grad=True)
    x = _t([1.0, 1.5])
    out, fn = vjp(lambda x: w * x * x, x)
    assert out.requires_grad
    (g,) = fn(torch.ones(2, dtype=torch.float64))
    g.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 3.0])


@pytest.mark.parametrize("fn", [grad, grad_and_value])
def test_matches_torch_flags(fn):
    w = _t([1.0], requires_grad=True)
    res = fn(lambda x: (x * w).sum())(_t([2.0]))
    g = res[0] if isinstance(res, tuple) else res
    assert g.requires_grad


def test_jacrev_with_closure_weights_is_tracked():
    """Jacobian regularisation written with torch.func: the penalty's gradient reaches the
    weights (it was silently none)."""
    W = _t([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    x = _t([0.3, -0.7])
    J = jacrev(lambda x: torch.tanh(W @ x))(x)  # diag(1 - tanh^2(Wx)) W
    assert J.requires_grad
    J.pow(2).sum().backward()
    Wn, xn = W.detach().numpy(), x.numpy()

    def pen(Wm):
        s = 1 - np.tanh(Wm @ xn) ** 2
        return ((s[:, None] * Wm) ** 2).sum()
    eps, num = 1e-6, np.zeros_like(Wn)
    for i in np.ndindex(*Wn.shape):
        d = np.zeros_like(Wn)
        d[i] = eps
        num[i] = (pen(Wn + d) - pen(Wn - d)) / (2 * eps)
    np.testing.assert_allclose(W.grad.numpy(), num, rtol=1e-6, atol=1e-9)
    plain = jacrev(lambda x: torch.tanh(x * 2))(x)
    assert not plain.requires_grad


def test_jvp_with_closure_weight_is_tracked():
    w = _t([2.0, 3.0], requires_grad=True)
    x = _t([1.0, 1.5])
    out, tangent = jvp(lambda x: w * x * x, (x,), (torch.ones(2, dtype=torch.float64),))
    assert out.requires_grad and tangent.requires_grad
    tangent.sum().backward()  # d/dw of 2 w x
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 3.0])
