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
