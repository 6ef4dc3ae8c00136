"""torch.linalg's inverses, determinants, solves and decompositions: values and gradients
(first and second order) against finite differences and torch. Symmetric or positive-definite
inputs are built inside the checked function, so that finite differences see the same function
torch differentiates."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import check_op, lib

import disthook


def _spd(x):
    """A well-conditioned symmetric positive-definite matrix from any square x."""
    n = x.shape[-1]
    return x.matmul(x.mT) + n * lib(x).eye(n, dtype=x.dtype)


def _sym(x):
    return x + x.mT


def _sign_fixed(u, vh):
    """Singular vectors up to sign: make each column of U start non-negative."""
    sign = u[..., :1, :].sign()
    return u * sign, vh * sign.mT


ROWS = [
    ("inv", lambda x: lib(x).linalg.inv(_spd(x)), [(3, 3)], {"double": True}),
    ("inv-batch", lambda x: lib(x).linalg.inv(x), [(2, 3, 3)], {"low": 0.5, "high": 2.0}),
    ("inverse", lambda x: _spd(x).inverse(), [(3, 3)], {}),
    ("det", lambda x: lib(x).linalg.det(x), [(3, 3)], {"double": True}),
    # exactly singular: the gradient is the adjugate (torch 2.13 gives zeros here), so torch
    # runs the 2x2 determinant written out
    ("det-singular", lambda x: lib(x).linalg.det(x), [np.array([[1.0, 2.0], [2.0, 4.0]])],
     {"name": False, "torch_fn": lambda x: x[0, 0] * x[1, 1] - x[0, 1] * x[1, 0]}),
    ("slogdet", lambda x: lib(x).linalg.slogdet(x)[1], [(2, 3, 3)], {"name": False}),
    ("logdet", lambda x: _spd(x).logdet(), [(3, 3)], {"name": False}),
    ("solve", lambda a, b: lib(a).linalg.solve(_spd(a), b), [(3, 3), (3, 2)], {"double": True}),
    ("solve-vector", lambda a, b: lib(a).linalg.solve(_spd(a), b), [(3, 3), (3,)], {}),
    ("solve-right", lambda a, b: lib(a).linalg.solve(_spd(a), b, left=False), [(3, 3), (2, 3)],
     {"name": False}),
    ("cholesky", lambda x: lib(x).linalg.cholesky(_spd(x)), [(3, 3)], {"double": True}),
    ("qr", lambda x: lib(x).linalg.qr(x), [(4, 3)], {"double": True}),
    ("qr-square", lambda x: lib(x).linalg.qr(x), [(3, 3)], {}),
    ("eigh-values", lambda x: lib(x).linalg.eigvalsh(_sym(x)), [(3, 3)], {"name": False}),
    ("eigh", lambda x: lib(x).linalg.eigh(_sym(x))[1].abs(), [(3, 3)], {"name": False}),
    ("svdvals", lambda x: lib(x).linalg.svdvals(x), [(4, 3)], {"name": False}),
    ("svd", lambda x: _sign_fixed(*lib(x).linalg.svd(x, full_matrices=False)[::2]), [(3, 4)],
     {"name": False}),
    ("svd-tall", lambda x: _sign_fixed(*lib(x).linalg.svd(x, full_matrices=False)[::2]),
     [(4, 3)], {"name": False}),
    ("pinv", lambda x: lib(x).linalg.pinv(x), [(4, 3)], {"name": False}),
    ("matrix_norm-nuc", lambda x: lib(x).linalg.matrix_norm(x, "nuc"), [(3, 4)],
     {"name": False}),
    ("matrix_norm-2", lambda x: lib(x).linalg.matrix_norm(x, 2), [(3, 4)], {"name": False}),
    ("matrix_power", lambda x: lib(x).linalg.matrix_power(x, 3), [(3, 3)], {"name": False}),
    ("matrix_power-neg", lambda x: lib(x).linalg.matrix_power(_spd(x), -2), [(3, 3)],
     {"name": False}),
    ("matrix_exp", lambda x: lib(x).linalg.matrix_exp(x), [(3, 3)], {"name": False}),
    ("multi_dot", lambda a, b, c: lib(a).linalg.multi_dot([a, b, c]), [(3,), (3, 4), (4,)],
     {"name": False}),
    ("lu", lambda x: lib(x).linalg.lu(x)[1:], [(2, 4, 4)], {"double": True}),
    ("lu_factor", lambda x: lib(x).linalg.lu_factor(x)[0], [(3, 3)], {"name": False}),
    ("lu_solve", lambda x, b: lib(x).linalg.lu_solve(*lib(x).linalg.lu_factor(x), b),
     [(3, 3), (3, 2)], {"name": False}),
    ("lu_unpack", lambda x: lib(x).lu_unpack(*lib(x).linalg.lu_factor(x))[2], [(3, 3)],
     {"name": False}),
    ("householder_product", lambda a, tau: lib(a).linalg.householder_product(a, tau),
     [(4, 3), (2,)], {"name": False}),
    ("orgqr", lambda a, tau: a.orgqr(tau), [(3, 3), (3,)], {"name": False}),
    ("cond", lambda x: lib(x).linalg.cond(x), [(3, 3)], {"name": False}),
    # torch 2.13's own backward of cond(A, 1) fails (an in-place write to inv's output), so
    # torch runs the definition: norm(A) norm(inv(A))
    ("cond-1", lambda x: lib(x).linalg.cond(_spd(x), 1), [(3, 3)],
     {"name": False, "torch_fn": lambda x: lib(x).linalg.matrix_norm(_spd(x), 1)
      * lib(x).linalg.matrix_norm(lib(x).linalg.inv(_spd(x)), 1)}),
    ("vander", lambda x: lib(x).linalg.vander(x, N=4), [(2, 3)], {"name": False}),
    ("tensorsolve", lambda a, b: lib(a).linalg.tensorsolve(a, b), [(2, 3, 6), (2, 3)],
     {"name": False, "low": 0.5, "high": 2.0}),
]


@pytest.mark.parametrize("name,fn,inputs,options", ROWS, ids=[r[0] for r in ROWS])
def test_linalg(name, fn, inputs, options):
    check_op(fn, *inputs, **options)


def test_named_results_and_rank():
    a = disthook.tensor([[1.0, 2.0], [2.0, 4.0]])
    assert disthook.linalg.matrix_rank(a).item() == 1
    q, _r = disthook.linalg.qr(disthook.eye(2))
    assert disthook.linalg.qr(a).Q.shape == q.shape
    assert disthook.linalg.eigh(a).eigenvalues.shape == (2,)


def test_singular_matrix_is_refused_with_torchs_error():
    with pytest.raises(RuntimeError, match="singular"):
        disthook.linalg.inv(disthook.zeros(2, 2))
    with pytest.raises(RuntimeError, match="positive-definite"):
        disthook.linalg.cholesky(-disthook.eye(2))


@pytest.mark.parametrize("seed", range(4))
def test_lu_pivots_are_lapacks_row_swaps(seed):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(seed).standard_normal((3, 5, 5))
    got = disthook.linalg.lu_factor(disthook.tensor(a))
    want = torch.linalg.lu_factor(torch.tensor(a))
    assert got.pivots.tolist() == want.pivots.tolist()
    np.testing.assert_allclose(got.LU.numpy(), want.LU.numpy(), atol=1e-12)


@pytest.mark.parametrize(("left", "transpose"), [(True, False), (True, True), (False, False),
                                                 (False, True)])
def test_geqrf_and_ormqr_are_lapacks(left, transpose):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, c = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    c = c if left else np.swapaxes(c, -1, -2)
    got = disthook.geqrf(disthook.tensor(a))
    want = torch.geqrf(torch.tensor(a))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-12)
    np.testing.assert_allclose(disthook.ormqr(*got, disthook.tensor(c), left, transpose).numpy(),
                               torch.ormqr(*want, torch.tensor(c), left, transpose).numpy(),
                               atol=1e-12)
