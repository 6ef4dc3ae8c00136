"""Norms of float16 tensors, as torch: torch sums the powers of half's entries in float32 and
rounds the norm once, so the 2-norm of [300, 400] is 500 and of [1e-6, 1e-6] is 1.43e-6.
Here they were summed in float16: 300² overflowed to inf and 1e-6² underflowed to 0, so
``clip_grad_norm_`` of half gradients of that size zeroed them (its norm was inf)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

VALUES = [[300.0, 400.0], [1e-6, 1e-6], [60000.0, 1.0], [0.0, 0.0], [-250.0, 3.5, 1e-3]]


@pytest.mark.parametrize("ord", [2, 3, 1, 0.5, float("inf")])
@pytest.mark.parametrize("values", VALUES)
def test_half_vector_norm_as_torch(values, ord):
    results = []
    for lib in (torch, disthook):
        x = lib.tensor(values, dtype=lib.float16)
        results.append([lib.linalg.vector_norm(x, ord).item(), x.norm(ord).item()])
    assert results[1] == results[0]


def test_half_norms_of_random_rows_bit_equal_to_torch():
    rows = np.random.default_rng(0).normal(0, 200, (64, 33)).astype(np.float16)
    got = disthook.from_numpy(rows).norm(dim=1).numpy()
    want = torch.from_numpy(rows).norm(dim=1).numpy()
    assert np.array_equal(got, want)


def test_half_matrix_norm_as_torch():
    results = []
    for lib in (torch, disthook):
        a = lib.tensor([[300.0, 400.0], [0.0, 1.0]], dtype=lib.float16)
        results.append((lib.linalg.matrix_norm(a).item(), lib.linalg.norm(a).item()))
    assert results[1] == results[0]


def test_clip_grad_norm_of_half_gradients_as_torch():
    results = []
    for lib in (torch, disthook):
        w = lib.tensor([300.0, 400.0], dtype=lib.float16, requires_grad=True)
        (w * w.detach()).sum().backward()  # gradient [300, 400]
        total = lib.nn.utils.clip_grad_norm_([w], max_norm=50.0)
        results.append((total.item(), w.grad.tolist()))
    assert results[1] == results[0]
    assert results[0][0] == 500.0


def test_half_norm_gradient_as_torch():
    results = []
    for lib in (torch, disthook):
        w = lib.tensor([3.0, 4.0], dtype=lib.float16, requires_grad=True)
        w.norm().backward()
        results.append(w.grad.tolist())
    assert results[1] == results[0]
