"""prod and cumprod gradients with zeros beside an inf or nan (L4): prod's was the product of
the nonzero elements over each one times a zero factor (inf / inf = nan where torch's is 0,
0 * inf = nan where torch's whole-tensor prod with two zeros gives 0); cumprod's multiplied
every element after a zero (nan where torch's is 0). Both now follow torch's products
before and after each element, and stay as they were without zeros."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

INF, NAN = float("inf"), float("nan")
ROWS = [[0.0, INF, 3.0], [INF, 0.0, 0.0], [0.0, -INF, 0.5], [2.0, INF, 3.0], [0.0, 2.0, 3.0],
        [0.0, 0.0, 3.0], [NAN, 0.0, 2.0], [INF, INF, 0.0], [2.0, 3.0, 4.0], [1.5, 0.0, INF]]
CASES = [("prod", None, False), ("prod", 0, False), ("prod", 1, False), ("prod", 1, True),
         ("cumprod", 0, None), ("cumprod", 1, None)]


def _grad(lib, rows, op, dim, keepdim):
    x = lib.tensor(rows, dtype=lib.float64, requires_grad=True)
    if op == "prod":
        y = x.prod() if dim is None else x.prod(dim, keepdim=keepdim)
    else:
        y = x.cumprod(dim)
    w = lib.arange(1, y.numel() + 1, dtype=lib.float64).reshape(y.shape)
    (g,) = lib.autograd.grad(y, x, w)
    return np.asarray(g.tolist())


@pytest.mark.parametrize("op,dim,keepdim", CASES)
@pytest.mark.parametrize("pair", list(itertools.combinations(range(len(ROWS)), 2)))
def test_gradient_matches_torch_with_zeros_and_infinities(op, dim, keepdim, pair):
    rows = [ROWS[i] for i in pair]
    ours = _grad(disthook, rows, op, dim, keepdim)
    theirs = _grad(torch, rows, op, dim, keepdim)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("rows", [[ROWS[0]], [ROWS[1]]])
def test_single_row_whole_prod_matches_torch(rows):
    np.testing.assert_array_equal(_grad(disthook, rows, "prod", None, False),
                                  _grad(torch, rows, "prod", None, False))


def test_second_derivative_with_zeros_and_infinity_is_refused_not_wrong():
    x = disthook.tensor([0.0, INF, 3.0], dtype=disthook.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="second derivative of prod"):
        disthook.autograd.grad(x.prod(), x, create_graph=True)
