"""The ``*_ex`` factorizations report failure in ``info`` instead of raising, as torch's (R14):
a GP's jitter loop reads ``cholesky_ex``'s info and retries; a flow's ``inv_ex`` / ``lu_factor_ex``
give the first zero pivot. Values of the matrices that factor match torch; the others are NaN
(torch leaves them undefined); ``check_errors=True`` raises torch's LinAlgError."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SINGULAR = [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]]]
NOT_PD = [[[1.0, 2.0], [2.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]], [[-1.0, 0.0], [0.0, 1.0]]]


def _both(fn, data, **kw):
    return [fn(lib)(lib.tensor(data, dtype=lib.float64), **kw) for lib in (disthook, torch)]


def test_inv_ex_and_lu_factor_ex_report_the_first_zero_pivot():
    ours, theirs = _both(lambda lib: lib.linalg.inv_ex, SINGULAR)
    assert ours.info.tolist() == theirs.info.tolist() == [2, 0, 1]
    assert ours.info.dtype == disthook.int32
    np.testing.assert_allclose(ours.inverse[1].numpy(), theirs.inverse[1].numpy())
    assert np.isnan(ours.inverse[0].numpy()).all() and np.isnan(ours.inverse[2].numpy()).all()
    ours, theirs = _both(lambda lib: lib.linalg.lu_factor_ex, SINGULAR)
    assert ours.info.tolist() == theirs.info.tolist()
    np.testing.assert_allclose(ours.LU.numpy(), theirs.LU.numpy())


def test_cholesky_ex_reports_the_leading_minor_that_is_not_positive_definite():
    ours, theirs = _both(lambda lib: lib.linalg.cholesky_ex, NOT_PD)
    assert ours.info.tolist() == theirs.info.tolist() == [2, 0, 1]
    np.testing.assert_allclose(ours.L[1].numpy(), theirs.L[1].numpy())
    assert np.isnan(ours.L[0].numpy()).all()
    ours, theirs = _both(lambda lib: lib.linalg.cholesky_ex, NOT_PD[1], upper=True)
    assert ours.info.item() == theirs.info.item() == 0
    np.testing.assert_allclose(ours.L.numpy(), theirs.L.numpy())


@pytest.mark.parametrize("name, data, text", [
    ("inv_ex", SINGULAR, r"linalg\.inv_ex: \(Batch element 0\): The diagonal element 2 is zero"),
    ("cholesky_ex", NOT_PD, r"\(Batch element 0\): .*the leading minor of order 2"),
    ("cholesky_ex", NOT_PD[2], r"linalg\.cholesky_ex: The factorization could not be completed"),
])
def test_check_errors_raises_linalg_error_as_torch(name, data, text):
    for lib in (disthook, torch):
        with pytest.raises(lib.linalg.LinAlgError, match=text):
            getattr(lib.linalg, name)(lib.tensor(data, dtype=lib.float64), check_errors=True)


def test_gp_jitter_loop_retries_until_cholesky_ex_succeeds():
    """gpytorch's psd_safe_cholesky pattern: add growing jitter while info says it failed."""
    x = np.linspace(0, 1, 6)
    k = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 10.0)   # numerically rank-deficient
    k[0, 0] -= 1e-3                                            # and slightly indefinite
    found = []
    for lib in (disthook, torch):
        K = lib.tensor(k, requires_grad=True)
        jitter, tries = 1e-8, 0
        L, info = lib.linalg.cholesky_ex(K)
        while info.any():
            tries += 1
            L, info = lib.linalg.cholesky_ex(K + jitter * lib.eye(6, dtype=lib.float64))
            jitter *= 10
        (g,) = lib.autograd.grad(L.diagonal().log().sum(), K)
        found.append((tries, L.detach().numpy(), g.numpy()))
    assert found[0][0] == found[1][0] > 0
    np.testing.assert_allclose(found[0][1], found[1][1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(found[0][2], found[1][2], rtol=1e-7, atol=1e-9)


def test_inv_ex_gradient_of_the_matrices_that_invert():
    data = np.array(SINGULAR)
    grads = []
    for lib in (disthook, torch):
        A = lib.tensor(data, requires_grad=True)
        inv, _ = lib.linalg.inv_ex(A)
        (g,) = lib.autograd.grad(inv[1].sum(), A)
        grads.append(g[1].numpy())
    np.testing.assert_allclose(*grads)


@pytest.mark.parametrize("shape, left", [((3, 2, 1), True), ((3, 2), True), ((3, 1, 2), False),
                                         ((4, 2), False)])
def test_solve_ex_reports_the_first_zero_pivot_and_solves_the_others(shape, left):
    rhs = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    ours, theirs = [lib.linalg.solve_ex(lib.tensor(SINGULAR, dtype=lib.float64),
                                        lib.tensor(rhs, dtype=lib.float64), left=left)
                    for lib in (disthook, torch)]
    assert ours.info.tolist() == theirs.info.tolist() == [2, 0, 1]
    assert ours.info.dtype == disthook.int32 and ours.result.shape == theirs.result.shape
    np.testing.assert_allclose(ours.result[1].numpy(), theirs.result[1].numpy())
    assert np.isnan(ours.result[0].numpy()).all() and np.isnan(ours.result[2].numpy()).all()
    with pytest.raises(disthook.linalg.LinAlgError, match="solve_ex: .*singular"):
        disthook.linalg.solve_ex(disthook.tensor(SINGULAR, dtype=disthook.float64),
                                 disthook.tensor(rhs), left=left, check_errors=True)
