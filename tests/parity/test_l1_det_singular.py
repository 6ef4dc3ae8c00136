"""det, slogdet and logdet at singular matrices (L1): det's second derivative there is
computed (it raised NotImplementedError) and matches torch's where torch's is finite, and the
finite differences of the first derivative everywhere; slogdet's / logdet's plain backward at
a singular matrix gives torch's infinities and NaNs (it raised), and raises torch's LinAlgError
where torch does (create_graph=True)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SINGULAR = [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]], [[0.0, 1.0], [1.0, 0.0]]]
RANK_ONE_3 = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 2.0]]


def _det_grads(lib, data, weights):
    A = lib.tensor(data, dtype=lib.float64, requires_grad=True)
    (g,) = lib.autograd.grad(lib.linalg.det(A).sum(), A, create_graph=True)
    (gg,) = lib.autograd.grad((g * lib.tensor(weights)).sum(), A)
    return g.detach().numpy(), gg.numpy()


@pytest.mark.parametrize("data", [SINGULAR, RANK_ONE_3, SINGULAR[0]])
def test_det_double_backward_at_a_singular_matrix_matches_torch(data):
    weights = np.arange(np.size(data), dtype=np.float64).reshape(np.shape(data))
    ours, theirs = _det_grads(disthook, data, weights), _det_grads(torch, data, weights)
    np.testing.assert_allclose(ours[0], theirs[0], atol=1e-9)
    np.testing.assert_allclose(ours[1], theirs[1], atol=1e-9)


@pytest.mark.parametrize("n", [2, 3])
def test_det_double_backward_at_zero_is_the_difference_quotient(n):
    """Where torch's rule gives NaN (repeated zero singular values) the value is the true one."""
    weights = np.random.default_rng(0).standard_normal((n, n))

    def first(a):
        return _det_grads(disthook, a, weights)[0]

    _, gg = _det_grads(disthook, np.zeros((n, n)), weights)
    h, numeric = 1e-6, np.zeros((n, n))
    for idx in np.ndindex(n, n):
        step = np.zeros((n, n))
        step[idx] = h
        numeric[idx] = ((first(step) - first(-step)) * weights).sum() / (2 * h)
    np.testing.assert_allclose(gg, numeric, atol=1e-6)


UNCHECKED = [[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 2.0]],
             [[1.0, 0.0], [0.0, -2.0]], [[0.0, 1.0], [1.0, 0.0]], [[2.0, 1.0], [1.0, 3.0]]]


@pytest.mark.parametrize("fn", ["slogdet", "logdet"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_slogdet_backward_at_a_singular_matrix_gives_torchs_values(fn, dtype):
    """torch's plain backward solves A^T X = g I unchecked: infinities and NaNs where A is
    singular (it raised LinAlgError here); logdet passes its gradient where det >= 0."""
    values, grads = [], []
    for lib in (disthook, torch):
        A = lib.tensor(UNCHECKED, dtype=getattr(lib, dtype), requires_grad=True)
        out = lib.linalg.slogdet(A)[1] if fn == "slogdet" else A.logdet()
        (out * 0.7).sum().backward()
        values.append(out.detach().numpy())
        grads.append(A.grad.numpy())
    np.testing.assert_array_equal(*values)
    np.testing.assert_array_equal(*grads)
    assert np.isinf(grads[0][0]).all()


@pytest.mark.parametrize("fn", ["slogdet", "logdet"])
def test_slogdet_backward_recorded_at_a_singular_matrix_raises_as_torch(fn):
    for lib in (disthook, torch):
        A = lib.tensor(SINGULAR[0], requires_grad=True)
        out = lib.linalg.slogdet(A)[1] if fn == "slogdet" else A.logdet()
        with pytest.raises(RuntimeError, match="^torch.linalg.solve: The solver failed because "
                                               "the input matrix is singular.$") as e:
            lib.autograd.grad(out, A, create_graph=True)
        assert type(e.value).__name__.strip("_") == "LinAlgError"


def test_slogdet_double_backward_matches_torch():
    data = [[[2.0, 1.0], [1.0, 3.0]], [[0.0, 1.0], [1.0, 0.5]]]
    grads = []
    for lib in (disthook, torch):
        A = lib.tensor(data, dtype=lib.float64, requires_grad=True)
        (g,) = lib.autograd.grad(lib.linalg.slogdet(A)[1].sum(), A, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), A)
        grads.append((g.detach().numpy(), gg.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0])
    np.testing.assert_allclose(grads[0][1], grads[1][1])
