"""cumsum's gradient is the suffix sum of the incoming gradient, summed from the end as
torch sums it. Before, it was computed as total - prefix + own: an inf anywhere in the
gradient made every entry nan, and a small term beside large ones of opposite sign was lost
(a gated recurrence written as exp(cumsum(log a)) * cumsum(x * exp(-cumsum(log a))), Griffin's
RG-LRU scan, gave gradients off by 1e-4 in float64)."""
import numpy as np
import pytest

import disthook as torch


def _grad(values, grad, dim=0, dtype=torch.float64):
    x = torch.tensor(values, dtype=dtype, requires_grad=True)
    x.cumsum(dim).backward(torch.tensor(grad, dtype=dtype))
    return x.grad


def test_an_inf_gradient_stays_where_it_reaches():
    got = _grad([1.0, 2.0, 3.0], [float("inf"), 1.0, 1.0], dtype=torch.float32)
    assert got.tolist() == [float("inf"), 2.0, 1.0]


def test_a_small_term_beside_large_ones_is_kept():
    assert _grad([1.0, 2.0, 3.0], [1.0, 1e20, -1e20]).tolist() == [1.0, 0.0, -1e20]


def test_one_element_and_zero_dim():
    x = torch.tensor(2.0, requires_grad=True)
    x.cumsum(0).backward()
    assert x.grad.item() == 1.0
    assert _grad([[5.0]], [[3.0]], dim=1).tolist() == [[3.0]]


def test_empty():
    x = torch.zeros(0, 3, requires_grad=True)
    x.cumsum(0).sum().backward()
    assert x.grad.shape == (0, 3)


def _scan_grads(lib, log_a, u, w):
    la = lib.tensor(log_a, requires_grad=True)
    x = lib.tensor(u, requires_grad=True)
    cum = lib.cumsum(la, dim=1)
    y = lib.exp(cum) * lib.cumsum(x * lib.exp(-cum), dim=1)
    (y * lib.tensor(w)).sum().backward()
    return la.grad.numpy(), x.grad.numpy()


def _first_and_second(lib, a, w, dim):
    x = lib.tensor(a, requires_grad=True)
    y = (x.t().cumsum(dim) ** 2 * lib.tensor(w)).sum()   # a transposed, non-contiguous input
    (g,) = lib.autograd.grad(y, x, create_graph=True)
    (g * g).sum().backward()
    return g.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_matches_torch_on_non_contiguous_input_and_second_order(dim):
    torch_ = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)) * np.exp(np.linspace(0, 30, 5))
    w = rng.standard_normal((5, 4))
    got = _first_and_second(torch, a, w, dim)
    want = _first_and_second(torch_, a, w, dim)
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-13, atol=0)


def test_gated_scan_in_log_space_matches_torch():
    torch_ = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    log_a = -4.0 * rng.random((2, 10, 6))     # exp(-cumsum) reaches e**30 or so
    u = rng.standard_normal((2, 10, 6))
    w = rng.standard_normal((2, 10, 6))
    for got, want in zip(_scan_grads(torch, log_a, u, w), _scan_grads(torch_, log_a, u, w)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
