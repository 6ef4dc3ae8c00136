"""Spatial-transformer patterns (R14): one affine grid sampled several times, each with its own
``autograd.grad``, and the nearest mode's gradient to the grid, against torch."""
from __future__ import annotations

import numpy as np
import pytest

import disthook
from disthook.nn import functional as F

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(14)


@pytest.mark.parametrize("size", [(2, 1, 4, 5), (2, 1, 2, 3, 4)])
def test_affine_grid_backward_twice_without_retain_graph(size):
    shape = (2, 2, 3) if len(size) == 4 else (2, 3, 4)
    theta = RNG.standard_normal(shape)
    x = RNG.standard_normal(size)
    got, want = [], []
    for lib, F_ in ((disthook, F), (torch, torch.nn.functional)):
        t, xs = lib.tensor(theta).requires_grad_(), lib.tensor(x)
        grid = F_.affine_grid(t, size, align_corners=False)
        assert type(grid.grad_fn).__name__ == "AffineGridGeneratorBackward0"
        for mode in ("bilinear", "nearest"):  # the grid's node runs in both backwards
            out = F_.grid_sample(xs, grid, mode=mode, align_corners=False)
            (g,) = lib.autograd.grad(out.pow(2).sum(), t)
            (got if lib is disthook else want).append(g.detach().numpy())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_affine_grid_double_backward_matches_torch():
    theta = RNG.standard_normal((1, 2, 3))
    w = RNG.standard_normal((1, 3, 4, 2))
    res = []
    for lib, F_ in ((disthook, F), (torch, torch.nn.functional)):
        t = lib.tensor(theta).requires_grad_()
        grid = F_.affine_grid(t, (1, 1, 3, 4), align_corners=True)
        (g,) = lib.autograd.grad((grid.pow(2) * lib.tensor(w)).sum(), t, create_graph=True)
        (gg,) = lib.autograd.grad(g.pow(2).sum(), t)
        res.append((g.detach().numpy(), gg.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_nearest_gives_the_grid_zeros(padding_mode):
    x = RNG.standard_normal((1, 2, 3, 4))
    grid = RNG.uniform(-1.2, 1.2, (1, 2, 3, 2))
    if padding_mode == "zeros":  # a NaN point reads zero; its gradient is zero, as torch's
        grid[0, 0, 0] = np.nan
    res = []
    for lib, F_ in ((disthook, F), (torch, torch.nn.functional)):
        xs, gs = lib.tensor(x).requires_grad_(), lib.tensor(grid).requires_grad_()
        out = F_.grid_sample(xs, gs, mode="nearest", padding_mode=padding_mode,
                             align_corners=False)
        gx, gg = lib.autograd.grad(out.nan_to_num().sum(), (xs, gs))
        res.append((out.detach().numpy(), gx.numpy(), gg.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, equal_nan=True)
    assert not res[0][2].any()


def test_cdist_p0_is_differentiable_at_gradient_zero():
    """Hamming-style distances (p = 0) in a metric-learning loss: torch's result requires grad
    and gives the points zeros; disthook's was cut from the graph."""
    a = RNG.standard_normal((3, 4))
    b = a[[0, 2]].copy()
    b[0, 1] += 1.0
    res = []
    for lib in (disthook, torch):
        x1, x2 = lib.tensor(a).requires_grad_(), lib.tensor(b).requires_grad_()
        d = lib.cdist(x1, x2, p=0)
        assert d.requires_grad
        res.append((d.detach().numpy(), *(g.numpy() for g in lib.autograd.grad(d.sum(), (x1, x2)))))
    for x, y in zip(*res):
        np.testing.assert_array_equal(x, y)
