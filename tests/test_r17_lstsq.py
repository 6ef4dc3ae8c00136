"""``torch.linalg.lstsq`` by driver (efficient-kan's ``curve2coeff`` and spline fits call it):
residuals, ranks and singular values where torch's LAPACK driver gives them, empty where it
does not, ``rcond`` truncating the solution, an unknown driver refused (R17)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import disthook

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

RS = np.random.RandomState(0)
A_NP, B_NP = RS.randn(2, 5, 3), RS.randn(2, 5, 2)


def lstsq(T, a, b, **kw):
    r = T.linalg.lstsq(T.tensor(a), T.tensor(b), **kw)
    return [np.asarray(v.numpy()) for v in r]


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
def test_what_each_driver_gives_against_numpy(driver):
    sol, res, rank, sv = lstsq(disthook, A_NP, B_NP, driver=driver)
    for i in range(2):
        x, r, k, s = np.linalg.lstsq(A_NP[i], B_NP[i], rcond=None)
        np.testing.assert_allclose(sol[i], x, rtol=1e-10, atol=1e-12)
        if driver in ("gels", "gelsd", "gelss"):
            np.testing.assert_allclose(res[i], r, rtol=1e-10)
        if driver in ("gelsd", "gelss"):
            np.testing.assert_allclose(sv[i], s, rtol=1e-10)
        if driver != "gels":
            assert rank[i] == k and rank.dtype == np.int64
    assert res.shape == ((0,) if driver in (None, "gelsy") else (2, 2))
    assert rank.shape == ((0,) if driver == "gels" else (2,))
    assert sv.shape == ((2, 3) if driver in ("gelsd", "gelss") else (0,))


def test_rank_deficient_or_wide_gives_no_residuals_and_rcond_truncates():
    a = A_NP.copy()
    a[0, :, 2] = a[0, :, 1]
    _, res, rank, _ = lstsq(disthook, a, B_NP, driver="gelsd")
    assert res.shape == (0,) and rank.tolist() == [2, 3]
    _, res, _, sv = lstsq(disthook, A_NP[0].T, B_NP[0, :3], driver="gelsd")
    assert res.shape == (0,) and sv.shape == (3,)
    sol, _, rank, _ = lstsq(disthook, A_NP, B_NP, rcond=0.9, driver="gelsd")
    assert rank.tolist() == [1, 1]
    u, s, vh = np.linalg.svd(A_NP[0], full_matrices=False)
    one = vh[:1].T @ (u[:, :1].T @ B_NP[0]) / s[0]
    np.testing.assert_allclose(sol[0], one, rtol=1e-10)


def test_vector_right_hand_side():
    sol, res, rank, sv = lstsq(disthook, A_NP[0], B_NP[0, :, 0], driver="gelsd")
    x, r, k, s = np.linalg.lstsq(A_NP[0], B_NP[0, :, 0], rcond=None)
    assert sol.shape == (3,) and res.shape == (1,) and rank.shape == () and sv.shape == (3,)
    np.testing.assert_allclose(sol, x, rtol=1e-10)
    np.testing.assert_allclose(res, r, rtol=1e-10)
    np.testing.assert_allclose(sv, s, rtol=1e-10)
    assert rank == k


def test_unknown_driver_refused():
    with pytest.raises(RuntimeError, match="parameter `driver` should be one of "
                                           r"\(gels, gelsy, gelsd, gelss\)"):
        disthook.linalg.lstsq(disthook.tensor(A_NP), disthook.tensor(B_NP), driver="svd")


def test_residuals_are_differentiable():
    a = disthook.tensor(A_NP, requires_grad=True)
    r = disthook.linalg.lstsq(a, disthook.tensor(B_NP), driver="gelsd")
    assert r.residuals.requires_grad and not r.singular_values.requires_grad
    r.residuals.sum().backward()
    assert a.grad.shape == (2, 5, 3)


@needs_torch
@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_as_torch(driver, dtype):
    import torch

    a, b = A_NP.astype(dtype), B_NP.astype(dtype)
    a_dh = disthook.tensor(a, requires_grad=True)
    a_t = torch.tensor(a, requires_grad=True)
    mine = disthook.linalg.lstsq(a_dh, disthook.tensor(b), driver=driver)
    theirs = torch.linalg.lstsq(a_t, torch.tensor(b), driver=driver)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for x, y in zip(mine, theirs):
        assert x.shape == tuple(y.shape) and str(x.dtype) == str(y.dtype)
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=tol, atol=tol)
    (mine.solution.sum() + mine.residuals.sum()).backward()
    (theirs.solution.sum() + theirs.residuals.sum()).backward()
    np.testing.assert_allclose(a_dh.grad.numpy(), a_t.grad.numpy(), rtol=tol * 10, atol=tol)
