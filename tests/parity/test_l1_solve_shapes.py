"""The solves read their operands' shapes as torch's do (L1): whether B is a vector or a batch
of them, ``left=False``, batch dims that broadcast, 0 x 0 matrices, and torch's RuntimeError
and message where torch refuses (``solve(A, B, left=False)`` took a 2 x 2 B against a batch of
2 x 2 A for a batch of row vectors, where torch refuses the shapes)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

A_SHAPES = [(2, 2), (2, 2, 2), (3, 2, 2), (1, 2, 2), (4, 1, 2, 2), (0, 2, 2), (0, 0), (2, 3),
            (2,), (2, 0, 0)]
B_SHAPES = [(2, 2), (3, 3), (2, 2, 2), (3, 2, 2), (2,), (3,), (2, 2, 1), (2, 1, 2), (2, 3),
            (3, 2), (1, 2), (2, 1), (4, 1, 2, 2), (4, 2, 2), (0, 2, 2), (0, 0), (0,), (1,), ()]


def _operand(lib, shape, seed, spd=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    if len(shape) >= 2 and shape[-1] == shape[-2]:
        a = a + 3 * np.eye(shape[-1])
        a = a @ np.swapaxes(a, -1, -2) if spd else a
    return lib.tensor(a)


CALLS = {
    "solve": lambda lib, A, B, left: lib.linalg.solve(A, B, left=left),
    "solve_ex": lambda lib, A, B, left: lib.linalg.solve_ex(A, B, left=left).result,
    "solve_triangular": lambda lib, A, B, left: lib.linalg.solve_triangular(
        A, B, upper=True, left=left),
    "lstsq": lambda lib, A, B, left: lib.linalg.lstsq(A, B).solution,
    "cholesky_solve": lambda lib, A, B, left: lib.cholesky_solve(B, lib.linalg.cholesky(A)),
}


def _outcome(lib, name, a_shape, b_shape, left):
    spd = name == "cholesky_solve"
    A, B = _operand(lib, a_shape, 0, spd), _operand(lib, b_shape, 1)
    try:
        return CALLS[name](lib, A, B, left).numpy()
    except (RuntimeError, IndexError, ValueError, TypeError) as e:  # compared: type, message
        return type(e).__name__, str(e)


@pytest.mark.parametrize("name,left", [("solve", True), ("solve", False), ("solve_ex", True),
                                       ("solve_ex", False), ("solve_triangular", True),
                                       ("solve_triangular", False), ("lstsq", True),
                                       ("cholesky_solve", True)])
def test_solve_shapes_and_refusals_as_torch(name, left):
    for a_shape in A_SHAPES:
        if name == "cholesky_solve" and (len(a_shape) < 2 or a_shape[-1] != a_shape[-2]):
            continue
        for b_shape in B_SHAPES:
            if (name, a_shape, b_shape) in TORCH_QUIRKS:
                continue
            ours = _outcome(disthook, name, a_shape, b_shape, left)
            theirs = _outcome(torch, name, a_shape, b_shape, left)
            where = f"{name}(A{a_shape}, B{b_shape}, left={left})"
            if isinstance(theirs, tuple):
                assert ours == theirs, where
            else:
                assert not isinstance(ours, tuple), f"{where}: {ours}"
                assert ours.shape == theirs.shape, where
                np.testing.assert_allclose(ours, theirs, atol=1e-9, err_msg=where)


# torch refuses a matrix B of one dim less than A whose rows do not pair with A's batch by a
# rule of its own (the size of B's first dim against A's last batch dim): left as a difference
TORCH_QUIRKS = {("lstsq", (4, 1, 2, 2), (4, 2, 2))}


def test_solve_right_refuses_a_matrix_that_is_not_a_batch_of_row_vectors():
    A = disthook.eye(2).expand(2, 2, 2)
    with pytest.raises(RuntimeError, match=r"XA = B \(2x2 and 2x1\)"):
        disthook.linalg.solve(A, disthook.ones(2, 2), left=False)
    # a batch of 1 x 2 rows is what torch takes
    assert disthook.linalg.solve(A, disthook.ones(2, 1, 2), left=False).shape == (2, 1, 2)


def test_solve_triangular_takes_b_in_as_dtype():
    """torch's solve_triangular computes in A's dtype whatever B's (the shape rule above
    refused B of another dtype; before it, numpy promoted both to float64)."""
    for a_dtype, b_dtype in (("float32", "float64"), ("float64", "float32")):
        ours, theirs = [lib.linalg.solve_triangular(
            lib.tensor([[2.0, 1.0], [0.0, 3.0]], dtype=getattr(lib, a_dtype)),
            lib.tensor([[1.0], [2.0]], dtype=getattr(lib, b_dtype)), upper=True)
            for lib in (disthook, torch)]
        assert ours.dtype == getattr(disthook, a_dtype)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
