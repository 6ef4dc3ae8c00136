"""linalg.solve_triangular with a zero on the diagonal (L2): torch's trsm gives inf and nan
(it raised LinAlgError), element for element, in float32 and float64, left and right, upper
and lower, and unitriangular ignores the diagonal; the gradients there are torch's, and the
zeros outside the triangle stay zeros."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

A = [[2.0, 1.0, 3.0, -1.0], [4.0, 0.0, 5.0, 2.0], [6.0, 7.0, 1.0, 0.5], [1.0, -2.0, 3.0, 0.0]]
B = [[1.0, 2.0, 0.0], [3.0, 4.0, 1.0], [5.0, 6.0, -1.0], [0.0, 1.0, 2.0]]
CASES = list(itertools.product(["float32", "float64"], [True, False], [True, False],
                               [False, True]))


def _solve(lib, dtype_name, upper, left, unit, grads):
    dtype = getattr(lib, dtype_name)
    a = lib.tensor(A, dtype=dtype, requires_grad=grads)
    b = lib.tensor(B if left else np.transpose(B).tolist(), dtype=dtype, requires_grad=grads)
    x = lib.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
    if not grads:
        return [x.numpy()]
    weights = lib.arange(x.numel(), dtype=dtype).reshape(x.shape) / 7 - 0.5
    ga, gb = lib.autograd.grad((x * weights).sum(), (a, b))
    return [x.detach().numpy(), ga.numpy(), gb.numpy()]


def _same(ours, theirs):
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(np.isnan(o), np.isnan(t))
        np.testing.assert_array_equal(np.isposinf(o), np.isposinf(t))
        np.testing.assert_array_equal(np.isneginf(o), np.isneginf(t))
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype_name,upper,left,unit", CASES)
def test_zero_on_the_diagonal_gives_torchs_infinities(dtype_name, upper, left, unit):
    _same(_solve(disthook, dtype_name, upper, left, unit, grads=False),
          _solve(torch, dtype_name, upper, left, unit, grads=False))


@pytest.mark.parametrize("dtype_name,upper,left,unit", CASES)
def test_gradients_at_a_zero_diagonal_are_torchs(dtype_name, upper, left, unit):
    _same(_solve(disthook, dtype_name, upper, left, unit, grads=True),
          _solve(torch, dtype_name, upper, left, unit, grads=True))


def test_zero_times_an_infinity_inside_the_triangle_is_nan_as_trsm():
    a = [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 1.0]]
    for lib in (disthook, torch):
        x = lib.linalg.solve_triangular(lib.tensor(a), lib.ones(3, 2), upper=False)
        got = x.numpy()
        assert np.isposinf(got[0]).all() and np.isnan(got[1:]).all(), (lib.__name__, got)


def test_batched_and_broadcast_with_one_singular_matrix():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 4))
    a[1, 2, 2] = 0.0
    b = rng.standard_normal((4, 2))
    ours = disthook.linalg.solve_triangular(disthook.tensor(a), disthook.tensor(b), upper=True)
    theirs = torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=True)
    _same([ours.numpy()], [theirs.numpy()])
    assert np.isfinite(ours.numpy()[[0, 2]]).all()


def test_second_derivative_matches_torch():
    rng = np.random.default_rng(1)
    a0 = np.triu(rng.standard_normal((3, 3))) + 3 * np.eye(3)
    b0 = rng.standard_normal((3, 2))

    def grads(lib):
        a = lib.tensor(a0, requires_grad=True)
        b = lib.tensor(b0, requires_grad=True)
        x = lib.linalg.solve_triangular(a, b, upper=True, left=True)
        ga, gb = lib.autograd.grad((x * x).sum(), (a, b), create_graph=True)
        return [t.detach().numpy() for t in lib.autograd.grad((ga.sum() + (gb * gb).sum()),
                                                             (a, b))]

    _same(grads(disthook), grads(torch))


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve_names_its_results_and_gives_torchs_infinities(transpose):
    """torch.triangular_solve returns (solution, cloned_coefficient) (they were named values,
    indices) and, being the same solve, the same inf and nan at a zero diagonal."""
    results = []
    for lib in (disthook, torch):
        a, b = lib.tensor(A), lib.tensor(B)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's deprecation of triangular_solve
            r = lib.triangular_solve(b, a, upper=False, transpose=transpose)
        assert r.cloned_coefficient.numpy().tolist() == A
        results.append(r.solution.numpy())
    _same([results[0]], [results[1]])
