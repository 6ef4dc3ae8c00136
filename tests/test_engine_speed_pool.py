"""Max pooling picks each window's maximum without masked writes (ops.pool.max_pool): ties
go to the first offset and NaN to the last NaN, as in torch."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": (2, 3), "dilation": (2, 1)},
])
@pytest.mark.parametrize("nan", [False, True])
def test_max_pool_ties_and_nan_pick_torchs_index(kwargs, nan):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (2, 3, 9, 10)).astype(np.float64)  # many ties
    if nan:
        x[rng.random(x.shape) < 0.1] = np.nan
    mine = disthook.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out, idx = disthook.nn.functional.max_pool2d(mine, return_indices=True, **kwargs)
    want, want_idx = torch.nn.functional.max_pool2d(theirs, return_indices=True, **kwargs)
    np.testing.assert_array_equal(idx.numpy(), want_idx.numpy())
    np.testing.assert_array_equal(out.detach().numpy(), want.detach().numpy())
    g = rng.standard_normal(tuple(out.shape))
    out.backward(disthook.tensor(g))
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 1}])
def test_max_pool_gradient_elsewhere_than_the_maximum_is_zero_even_for_inf_and_nan(kwargs):
    """The scatter multiplies by a mask; inf or NaN times 0 must not leak NaN into the
    positions that are not a window's maximum (torch puts 0 there)."""
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6))
    mine = disthook.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out = disthook.nn.functional.max_pool2d(mine, **kwargs)
    want = torch.nn.functional.max_pool2d(theirs, **kwargs)
    g = np.ones(tuple(out.shape))
    g.flat[::3], g.flat[1::3] = np.inf, np.nan
    out.backward(disthook.tensor(g))
    want.backward(torch.tensor(g))
    np.testing.assert_array_equal(mine.grad.numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("dims, shape, kwargs", [
    (2, (2, 3, 9, 8), {"kernel_size": 2}),  # a row and a column no window reaches
    (2, (3, 7, 7), {"kernel_size": 2, "stride": (3, 2), "padding": (1, 0)}),  # unbatched
    (2, (1, 2, 11, 10), {"kernel_size": (2, 3), "stride": (4, 6), "dilation": 2,
                         "padding": 1}),
    (1, (2, 3, 13), {"kernel_size": 3, "padding": 1}),
    (3, (2, 2, 5, 6, 7), {"kernel_size": 2, "padding": (1, 0, 1)}),
])
def test_max_pool_gradient_of_disjoint_windows_is_torchs_bit_for_bit(dims, shape, kwargs):
    """Windows that share no position write each gradient at its maximum's flat position
    (ops.pool._maximum_positions): every layout of lead dims, padding, leftovers and
    dilation lands where torch's does, inf and NaN included."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)

    def gradient(shape):
        g = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        g.flat[:3] = np.inf, -np.inf, np.nan
        return g

    grads = _pool_grads(x, dims, kwargs, gradient)
    np.testing.assert_array_equal(grads[0], grads[1])


def _pool_grads(x: np.ndarray, dims: int, kwargs: dict, gradient) -> list:
    """x's gradient through ``max_pool{dims}d(x, **kwargs)``, disthook's and torch's, given
    the output's gradient ``gradient(shape)``."""
    grads = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        out = getattr(lib.nn.functional, f"max_pool{dims}d")(t, **kwargs)
        out.backward(lib.tensor(gradient(tuple(out.shape))))
        grads.append(t.grad.numpy())
    return grads


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


TILING = [  # stride == kernel: the windows tile the input (ops.pool.tile_max), or fall back
    (2, (2, 3, 8, 8), {"kernel_size": 2}),
    (2, (2, 3, 9, 7), {"kernel_size": 2}),  # a row and a column no window reaches
    (2, (3, 8, 9), {"kernel_size": (2, 3)}),  # unbatched
    (2, (2, 3, 9, 9), {"kernel_size": 2, "ceil_mode": True}),  # a partial last window
    (2, (2, 3, 8, 8), {"kernel_size": (1, 2), "dilation": (3, 1)}),
    (1, (2, 3, 13), {"kernel_size": 3}),
    (3, (2, 2, 4, 6, 7), {"kernel_size": 2}),
    (3, (2, 5, 6, 7), {"kernel_size": (1, 2, 3)}),
]


@pytest.mark.parametrize("dims, shape, kwargs", TILING)
@pytest.mark.parametrize("values", ["random", "ties", "nan", "-inf", "signed zeros"])
def test_max_pool_of_tiling_windows_is_torchs_bit_for_bit(dims, shape, kwargs, values):
    """Values, indices and the gradient (a -0.0, inf and NaN among the output's gradients)
    equal torch's bits, whether each window's maximum is found by comparing the input with
    the spread maxima (one maximum per window) or by the kernel offsets (ties, NaN)."""
    rng = np.random.default_rng(3)
    x = {"random": lambda: rng.standard_normal(shape),
         "ties": lambda: rng.integers(0, 2, shape).astype(float),
         "nan": lambda: np.where(rng.random(shape) < 0.1, np.nan, rng.standard_normal(shape)),
         "-inf": lambda: np.where(rng.random(shape) < 0.3, -np.inf, rng.standard_normal(shape)),
         "signed zeros": lambda: np.where(rng.random(shape) < 0.5, -0.0, 0.0)}[values]()
    x = x.astype(np.float32)
    results = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        pool = getattr(lib.nn.functional, f"max_pool{dims}d")
        out = pool(t, **kwargs)
        _, idx = pool(t.detach(), return_indices=True, **kwargs)
        with lib.no_grad():  # the maxima alone, no argmax
            np.testing.assert_array_equal(pool(t, **kwargs).numpy(), out.detach().numpy())
        g = np.random.default_rng(4).standard_normal(tuple(out.shape)).astype(np.float32)
        g.flat[:4] = -0.0, np.inf, np.nan, -np.inf
        out.backward(lib.tensor(g))
        results.append((out.detach().numpy(), idx.numpy(), t.grad.numpy()))
    for mine, theirs in zip(*results):
        np.testing.assert_array_equal(mine, theirs)
        if values != "signed zeros":  # (a window of -0.0 and +0.0 may give the other zero)
            np.testing.assert_array_equal(_bits(mine), _bits(theirs))
    # the gradient lands at torch's index whatever the window's zeros
    np.testing.assert_array_equal(_bits(results[0][2]), _bits(results[1][2]))


def test_max_pool_gradient_of_minus_zero_is_plus_zero_as_torchs():
    """torch adds each window's gradient into zeros: a gradient of -0.0 lands as +0.0."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    t = disthook.tensor(x, requires_grad=True)
    out = disthook.nn.functional.max_pool2d(t, 2)
    out.backward(disthook.tensor(np.full((1, 1, 2, 2), -0.0, np.float32)))
    assert not np.signbit(t.grad.numpy()).any()


@pytest.mark.parametrize("dims, shape, kwargs", [
    (3, (2, 2, 4, 6, 6), {"kernel_size": 2}),
    (3, (2, 2, 5, 6, 7), {"kernel_size": 3, "stride": 1}),
    (2, (2, 3, 8, 8), {"kernel_size": 2}),
])
def test_max_pool_double_backward_gathers_at_each_maximum(dims, shape, kwargs):
    """The gradient's own gradient (create_graph) takes each window's value at its maximum,
    for 3-d pooling too (its flat index runs over three dims)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    results = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        out = getattr(lib.nn.functional, f"max_pool{dims}d")(t, **kwargs)
        g = lib.tensor(np.random.default_rng(6).standard_normal(tuple(out.shape))
                       .astype(np.float32), requires_grad=True)
        dx, = lib.autograd.grad(out, t, g, create_graph=True)
        v = np.random.default_rng(7).standard_normal(tuple(dx.shape)).astype(np.float32)
        (dx * lib.tensor(v)).sum().backward()
        results.append((dx.detach().numpy(), g.grad.numpy()))
    for mine, theirs in zip(*results):
        np.testing.assert_array_equal(_bits(mine), _bits(theirs))


@pytest.mark.parametrize("dims, shape, kwargs", [
    (2, (2, 3, 9, 9), {"kernel_size": 3, "stride": 1}),
    (2, (2, 3, 11, 10), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (2, (2, 3, 12, 12), {"kernel_size": (3, 2), "stride": (1, 2), "dilation": (2, 1)}),
    (1, (2, 3, 20), {"kernel_size": 4, "stride": 1}),
    (3, (2, 2, 6, 6, 7), {"kernel_size": 3, "stride": 1}),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_max_pool_gradient_of_overlapping_windows_sums_in_torchs_order(dims, shape, kwargs,
                                                                       seed):
    """Where several windows share their maximum, the gradients add up in the windows'
    order, as torch's: the same rounding, bit for bit."""
    rng = np.random.default_rng(seed)
    x = (rng.integers(0, 50, shape) if seed else rng.standard_normal(shape)).astype(np.float32)

    def gradient(shape):
        g = np.random.default_rng(8).standard_normal(shape).astype(np.float32) * 1e3
        g.flat[::7] = 1e-3  # magnitudes far apart: the order of the sum shows in its bits
        return g

    grads = _pool_grads(x, dims, kwargs, gradient)
    np.testing.assert_array_equal(_bits(grads[0]), _bits(grads[1]))
