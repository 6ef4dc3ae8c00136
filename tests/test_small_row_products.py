"""Linear's product at micro-batch rows (``x @ W.T`` taken as ``(W @ x.T).T``, made
C-ordered): the same values as the plain product to rounding, a C-contiguous output as
torch gives, in float32 and float64, forward and backward, at the threshold and past it."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook import _blas
from disthook.ops import linalg


@pytest.mark.parametrize("rows", [1, 7, _blas.SMALL_ROWS, _blas.SMALL_ROWS + 1, 100])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_product_is_the_plain_one_and_c_ordered(rows, dtype):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 48)).astype(dtype)
    w = rng.standard_normal((24, 48)).astype(dtype)
    got = linalg._product(x, w.T)
    assert got.flags.c_contiguous and got.dtype == dtype and got.shape == (rows, 24)
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_a_linear_layer_at_small_rows_gives_torchs_values_and_layout():
    pytest.importorskip("torch")
    import torch as real

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64))
    torch.manual_seed(0)  # the same weights whatever ran before in this process
    layer = nn.Linear(64, 16).double()
    theirs = real.nn.Linear(64, 16).double()
    with real.no_grad():
        theirs.weight.copy_(real.from_numpy(layer.weight.detach().numpy()))
        theirs.bias.copy_(real.from_numpy(layer.bias.detach().numpy()))
    a, b = torch.tensor(x, requires_grad=True), real.tensor(x, requires_grad=True)
    out, expected = layer(a), theirs(b)
    assert out.is_contiguous() and out.stride() == expected.stride()
    # (atol: the two libraries sum in other orders, and a sum near zero differs relatively)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12,
                               atol=1e-13)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(layer.weight.grad.numpy(), theirs.weight.grad.numpy(),
                               rtol=1e-12, atol=1e-13)
