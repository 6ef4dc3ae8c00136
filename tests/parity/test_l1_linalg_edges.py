"""torch.linalg at its edges (L1): an input with fewer than 2 dims raises torch's RuntimeError
and message (numpy's LinAlgError, a ValueError, or an IndexError came instead), and the
2-norm and condition number of empty matrices are 0, as torch's (an IndexError came), and
matrix_exp of a matrix that is not square raises torch's RuntimeError."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

CALLS = {
    "qr": lambda L, A: L.linalg.qr(A).R, "svd": lambda L, A: L.linalg.svd(A).U,
    "svdvals": lambda L, A: L.linalg.svdvals(A), "pinv": lambda L, A: L.linalg.pinv(A),
    "matrix_rank": lambda L, A: L.linalg.matrix_rank(A), "cond": lambda L, A: L.linalg.cond(A),
    "cond_-2": lambda L, A: L.linalg.cond(A, -2),
    "matrix_exp": lambda L, A: L.linalg.matrix_exp(A),
    "householder_product": lambda L, A: L.linalg.householder_product(A, L.zeros(0, dtype=A.dtype)),
    "inv_ex": lambda L, A: L.linalg.inv_ex(A).inverse,
    "cholesky_ex": lambda L, A: L.linalg.cholesky_ex(A).L,
    "matrix_norm_2": lambda L, A: L.linalg.matrix_norm(A, 2),
    "matrix_norm_nuc": lambda L, A: L.linalg.matrix_norm(A, "nuc"),
}


def _outcome(lib, name, shape, dtype):
    A = lib.zeros(shape, dtype=getattr(lib, dtype))
    try:
        return CALLS[name](lib, A).numpy()
    except (RuntimeError, ValueError, IndexError) as e:  # compared: type and message
        return type(e).__name__.strip("_"), str(e)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("shape", [(), (2,), (0,), (0, 0), (2, 0, 0), (3, 0), (2, 0, 3)])
def test_linalg_edges_as_torch(name, shape):
    if name == "householder_product" and len(shape) >= 2:
        pytest.skip("its shape rule against tau is its own (left: see the L1 report)")
    for dtype in ("float32", "float64"):
        ours, theirs = _outcome(disthook, name, shape, dtype), _outcome(torch, name, shape,
                                                                         dtype)
        if isinstance(theirs, tuple):
            assert ours == theirs
        else:
            assert not isinstance(ours, tuple), ours
            np.testing.assert_array_equal(ours, theirs)


def test_lu_of_empty_matrices_and_the_refusal_of_rectangular_ones():
    """lu_factor of 0 x 0 matrices raised numpy's ValueError; a rectangular LU, which torch
    computes, was refused with a RuntimeError saying torch wants square matrices: now a
    NotImplementedError saying disthook does not factor them."""
    for shape in [(0, 0), (2, 0, 0)]:
        ours, theirs = [lib.linalg.lu_factor(lib.zeros(shape)) for lib in (disthook, torch)]
        assert ours.LU.shape == theirs.LU.shape and ours.pivots.shape == theirs.pivots.shape
        assert ours.pivots.dtype == disthook.int32
    with pytest.raises(NotImplementedError, match="linalg.lu of 2 by 3 matrices"):
        disthook.linalg.lu(disthook.zeros(2, 3))
