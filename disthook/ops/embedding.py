"""Embedding lookup and its gradient, each other's adjoints.

``Embedding`` gathers rows of the weight; its gradient scatters the output gradient back
into a dense ``(num_embeddings, dim)`` array (rows looked up twice add up), leaving the
``padding_idx`` row zero and, with ``scale_grad_by_freq``, dividing each contribution by
how often its row occurs in the batch.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op


class Embedding(Op):
    """``weight[indices]``: ``indices`` is an integer array of any shape."""

    @staticmethod
    def forward(ctx, weight, indices, padding_idx=None, scale_grad_by_freq=False, sparse=False):
        ctx.indices, ctx.num_weights = indices, weight._data.shape[0]
        ctx.padding_idx, ctx.scale_grad_by_freq = padding_idx, scale_grad_by_freq
        ctx.sparse = sparse
        return np.take(weight._data, indices, axis=0)

    @staticmethod
    def backward(ctx, g):
        grad = EmbeddingDenseBackward.apply(
            g, indices=ctx.indices, num_weights=ctx.num_weights, padding_idx=ctx.padding_idx,
            scale_grad_by_freq=ctx.scale_grad_by_freq)
        if ctx.sparse:  # dense numbers, marked as torch's sparse gradient for what reads it
            grad.is_sparse = True
        return grad


def _row_factors(indices: np.ndarray, num_weights: int, padding_idx, scale: bool):
    """Per looked-up position, the factor its gradient is added with (None: all ones)."""
    factor = None
    if scale:
        counts = np.bincount(indices.ravel(), minlength=num_weights)
        factor = 1.0 / counts[indices]
    if padding_idx is not None:
        keep = indices != padding_idx
        factor = keep if factor is None else factor * keep
    return factor


class EmbeddingDenseBackward(Op):
    @staticmethod
    def forward(ctx, g, indices, num_weights, padding_idx, scale_grad_by_freq):
        gd = g._data
        dim = gd.shape[-1]
        factor = _row_factors(indices, num_weights, padding_idx, scale_grad_by_freq)
        ctx.indices, ctx.factor = indices, factor
        rows = gd.reshape(-1, dim)
        if factor is not None:
            rows = rows * factor.reshape(-1, 1).astype(gd.dtype)
        out = np.zeros((num_weights, dim), dtype=gd.dtype)
        np.add.at(out, indices.ravel(), rows)
        return out

    @staticmethod
    def backward(ctx, h):
        from disthook.tensor import Tensor

        rows = Embedding.apply(h, indices=ctx.indices)
        if ctx.factor is None:
            return rows
        factor = ctx.factor.astype(h._data.dtype)[..., None]
        return rows * Tensor._make(factor, None, 0)
