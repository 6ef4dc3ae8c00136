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
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    grads = []
    for lib in (disthook, torch):
        t = lib.tensor(x, requires_grad=True)
        out = getattr(lib.nn.functional, f"max_pool{dims}d")(t, **kwargs)
        g = np.random.default_rng(2).standard_normal(tuple(out.shape)).astype(np.float32)
        g.flat[:3] = np.inf, -np.inf, np.nan
        out.backward(lib.tensor(g))
        grads.append(t.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
