"""Code written for sparse embedding gradients and recommender tables, run on disthook (R14):
``to_dense`` of a strided tensor is the tensor itself, and embedding_bag's range error, as torch's."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def test_to_dense_of_a_dense_tensor_is_itself_or_a_differentiable_copy():
    for lib in (disthook, torch):
        t = lib.ones(2, 3, requires_grad=True)
        assert t.to_dense() is t
        assert t.to_dense(masked_grad=True) is t
        d = t.to_dense(lib.float64)
        assert d.dtype == lib.float64 and d.grad_fn is not None
        (d * 2).sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), np.full((2, 3), 2.0))


def test_sparse_embedding_gradient_densified_and_stepped_like_torch():
    """A recommender's ``sparse=True`` table stepped by SGD: the same rows move by the same
    amounts (torch's sparse gradient densified equals disthook's dense one)."""
    w = np.random.default_rng(3).standard_normal((6, 2))
    rows = [1, 3, 3, 5]
    out = []
    for lib in (disthook, torch):
        emb = lib.nn.Embedding(6, 2, sparse=True)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w, dtype=lib.float32))
        opt = lib.optim.SGD(emb.parameters(), lr=0.5)
        emb(lib.tensor(rows)).pow(2).sum().backward()
        grad = emb.weight.grad.to_dense()
        opt.step()
        out.append((grad.numpy(), emb.weight.detach().numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("indices, offsets", [([1, 5], [0]), ([-1], [0]), ([[0, 3]], None)])
def test_embedding_bag_index_out_of_range_is_torchs_runtime_error(indices, offsets):
    """A recommender's id past the table: torch's embedding_bag raises RuntimeError (not
    embedding's IndexError), naming the position and the value."""
    msgs = []
    for lib in (disthook, torch):
        off = None if offsets is None else lib.tensor(offsets)
        with pytest.raises(RuntimeError) as info:
            lib.nn.functional.embedding_bag(lib.tensor(indices), lib.zeros(3, 2), off)
        assert not isinstance(info.value, IndexError)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]
