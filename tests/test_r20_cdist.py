"""cdist's gradient follows torch's rules (the distance computed as one node, CdistBackward0):
below p=1 a zero coordinate difference contributes nothing (before, a NaN gradient), at p=inf
every coordinate at the maximum takes the whole gradient (before, shared among ties); its
gradient has no derivative (NotImplementedError, as torch) except in the matrix-product form
torch uses for p=2 past 25 rows, which differentiates twice. pdist's second derivative is
torch's NotImplementedError too (before, RuntimeError)."""
import numpy as np
import pytest

import disthook as torch

A = np.array([[0., 0., 0.], [1., 2., 2.], [0., 1., 0.], [0., 1., 0.5]])
B = np.array([[0., 0., 0.], [1., -2., 2.], [0., 1., 0.]])
W = np.arange(12.).reshape(4, 3) - 5


def _grads(p, a=A, b=B, w=W):
    x = torch.tensor(a, requires_grad=True)
    y = torch.tensor(b, requires_grad=True)
    d = torch.cdist(x, y, p=p)
    (d * torch.tensor(w)).sum().backward()
    return d, x.grad.numpy(), y.grad.numpy()


def test_cdist_is_one_node():
    d, _, _ = _grads(2.0)
    assert d.grad_fn.name() == "CdistBackward0"


def test_cdist_below_one_zero_difference_gives_no_nan():
    _, gx, gy = _grads(0.5)
    assert np.isfinite(gx).all() and np.isfinite(gy).all()
    # row 0 of x against row 0 of y: distance zero, no contribution; against row 2 of y
    # ([0, 1, 0]): only the second coordinate differs, d dist / d x = -1 there
    x = torch.tensor(A[:1], requires_grad=True)
    torch.cdist(x, torch.tensor(B[2:3]), p=0.5).sum().backward()
    assert x.grad.tolist() == [[0.0, -1.0, 0.0]]


def test_cdist_inf_norm_ties_each_take_the_whole_gradient():
    x = torch.tensor([[1., 2., 2.]], requires_grad=True)
    y = torch.zeros(1, 3, requires_grad=True)
    torch.cdist(x, y, p=float("inf")).sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 1.0]]
    assert y.grad.tolist() == [[0.0, -1.0, -1.0]]


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_gradients_match_torch(p):
    torch_ = pytest.importorskip("torch")
    x = torch_.tensor(A, requires_grad=True)
    y = torch_.tensor(B, requires_grad=True)
    (torch_.cdist(x, y, p=p) * torch_.tensor(W)).sum().backward()
    _, gx, gy = _grads(p)
    np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, y.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_cdist_batch_broadcast_gradients_sum_back():
    rs = np.random.RandomState(0)
    a, b = rs.randn(2, 1, 3, 4), rs.randn(4, 2, 4)
    x = torch.tensor(a, requires_grad=True)
    y = torch.tensor(b, requires_grad=True)
    d = torch.cdist(x, y, p=3.0)
    assert d.shape == (2, 4, 3, 2)
    d.sum().backward()
    assert x.grad.shape == (2, 1, 3, 4) and y.grad.shape == (4, 2, 4)
    diff = a[:, :, :, None, :] - b[None, :, None, :, :]
    dist = (np.abs(diff) ** 3).sum(-1) ** (1 / 3)
    dd = np.sign(diff) * (np.abs(diff) / dist[..., None]) ** 2
    np.testing.assert_allclose(x.grad.numpy(), dd.sum((1, 3))[:, None], rtol=1e-10)
    np.testing.assert_allclose(y.grad.numpy(), -dd.sum((0, 2)), rtol=1e-10)


@pytest.mark.parametrize("fn, name", [(lambda p: torch.cdist(p, p), "_cdist_backward"),
                                      (lambda p: torch.pdist(p), "_pdist_backward")])
def test_second_derivative_is_torchs_not_implemented(fn, name):
    pos = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    g = torch.autograd.grad(fn(pos).sum(), pos, create_graph=True)[0]
    with pytest.raises(NotImplementedError, match=name):
        g.sum().backward()


def test_cdist_matrix_product_form_differentiates_twice():
    rs = np.random.RandomState(1)
    a = rs.randn(26, 3)

    def force_norm(values):
        pos = torch.tensor(values, requires_grad=True)
        e = (1 / (torch.cdist(pos, pos) + 1.0)).sum()
        f = torch.autograd.grad(e, pos, create_graph=True)[0]
        return pos, (f ** 2).sum()

    pos, loss = force_norm(a)
    loss.backward()
    eps, k = 1e-6, (3, 1)
    up, down = a.copy(), a.copy()
    up[k] += eps
    down[k] -= eps
    fd = (force_norm(up)[1].item() - force_norm(down)[1].item()) / (2 * eps)
    assert abs(pos.grad[k].item() - fd) < 1e-6 * max(1.0, abs(fd))
